"""The reconciler: desired state (records + ZFS) -> live LIO/ganesha, and what differs.

It owns every read of the three daemons' state and every change to LIO and ganesha:
- reads are batched, so they cost the same number of host calls at 10 or 1,000
  datastores: one ``zfs get -r`` per pool, one ``zfs list -t snapshot`` per pool, one
  ShowExports (+ ShowClients), one configfs walk;
- :meth:`Reconciler.full` plans and applies everything (start-up, the watcher, ``POST
  /system/reconcile``), adding exports and targets in batches;
- :meth:`Reconciler.datastores` plans and applies only the exports/targets of the
  datastores named (a PUT, a delete, a rollback, an initiator group change);
- :meth:`Reconciler.check` records what health answers from (:class:`Status`), so health
  never plans inline.

Planning itself is pure (:mod:`appliance.reconcile`). Every apply holds the one change
lock; reads do not take it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from appliance import reconcile as rc
from appliance.context import Context
from appliance.errors import Unavailable, ZdsError
from appliance.host.ganesha import Activity, LiveExport, active_clients
from appliance.host.ganesha_config import ExportSpec
from appliance.host.lio import LiveTarget, TargetSpec, TargetSummary
from appliance.host.zfs import DatasetInfo
from appliance.model import (
    DATASTORE_PARENT,
    DATASTORE_PROPERTIES,
    DatastoreRecord,
    InitiatorGroup,
)

log = logging.getLogger(__name__)

# Up to this many datastores an incremental reconcile looks each one up; beyond, one
# full read of the live state is cheaper.
LOOKUP_LIMIT = 16


@dataclass(frozen=True)
class Desired:
    exports: list[ExportSpec]
    targets: list[TargetSpec]


@dataclass(frozen=True)
class ZfsView:
    """The datastores' datasets as ZFS shows them, read in one go."""

    available: bool
    imported: frozenset[str]
    pools: Mapping[str, str]  # imported pool -> health (ONLINE, DEGRADED...)
    datasets: Mapping[str, DatasetInfo]  # dataset name -> info (datastores' parents too)
    snapshots: Mapping[str, int] = field(default_factory=dict)  # dataset -> count


@dataclass(frozen=True)
class LiveState:
    """What ganesha and LIO serve now, read in one go."""

    ganesha_up: bool
    lio_up: bool
    exports: Mapping[int, LiveExport]
    targets: Mapping[str, LiveTarget]
    backstores: frozenset[str] = frozenset()
    activity: Activity | None = None
    # targets read for a view only (LUN count, sessions), when ``targets`` was not read
    summaries: Mapping[str, TargetSummary] = field(default_factory=dict)

    def serving(self, rec: DatastoreRecord) -> bool:
        """NFS: its export is in ganesha. iSCSI: its target exists with a LUN."""
        if rec.spec.is_nfs:
            return rec.export_id is not None and rec.export_id in self.exports
        if (target := self.targets.get(rec.iqn or "")) is not None:
            return bool(target.spec.luns)
        summary = self.summaries.get(rec.iqn or "")
        return summary is not None and summary.luns > 0

    def clients(self, rec: DatastoreRecord, window: float | None = 600.0) -> list[str]:
        """NFS clients active on the export (see active_clients) / initiators logged in."""
        if rec.spec.is_nfs:
            if rec.export_id is None or self.activity is None:
                return []
            return active_clients(self.activity, rec.export_id,
                                  [c.match for c in rec.spec.nfs_clients], window)
        target = self.targets.get(rec.iqn or "") or self.summaries.get(rec.iqn or "")
        return sorted(target.sessions) if target is not None else []


@dataclass(frozen=True)
class DriftItem:
    kind: str  # the action the reconciler would take, or a ZFS-level problem
    subject: str
    reason: str


@dataclass(frozen=True)
class PoolProblem:
    pool: str
    health: str
    status: str  # zpool status's explanation
    action: str  # and what to do about it


@dataclass(frozen=True)
class FillAlert:
    pool: str
    percent: int  # of the pool in use
    level: str  # warning (80%) | critical (90%) | full (95%)


# Fill levels (percent of a pool) health alerts at, highest first.
FILL_LEVELS = ((95, "full"), (90, "critical"), (80, "warning"))


def fill_alert(pool: str, percent: int) -> FillAlert | None:
    for threshold, level in FILL_LEVELS:
        if percent >= threshold:
            return FillAlert(pool, percent, level)
    return None


@dataclass(frozen=True)
class Status:
    """What the last check saw; health answers from it without touching the host."""

    phase: str  # starting | running
    checked_at: float  # time.time() of the last component check (0: never)
    started_at: float = 0.0  # time.time() when start-up had everything served (0: not yet)
    zfs_ok: bool = False
    zfs_detail: str = "not checked yet"
    pool_problems: tuple[PoolProblem, ...] = ()
    fill_alerts: tuple[FillAlert, ...] = ()
    lio_ok: bool = False
    ganesha_ok: bool = False
    drift_at: float = 0.0  # when drift was last computed (0: never)
    drift: tuple[DriftItem, ...] = ()
    drift_error: str | None = None  # drift could not be read, and why
    note: str = ""


class Reconciler:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._status = Status(phase="starting", checked_at=0.0,
                              note="the API is starting: reconciling datastores")
        self._status_lock = threading.Lock()

    # --- reading (no lock; constant host calls) -------------------------------------

    def read_zfs(self, snapshots: bool = False,
                 properties: Sequence[str] = DATASTORE_PROPERTIES) -> ZfsView:
        """Every imported pool's datastores: one ``zfs get -r`` (or ``zfs list -o`` for
        native ``properties``) per pool. With ``snapshots``, each dataset's snapshot count:
        from ``snapshot_count`` when ``properties`` read it and the parent keeps counts
        (its ``snapshot_limit`` is set), else one ``zfs list -t snapshot`` per pool."""
        zfs = self.ctx.zfs
        if not zfs.available():
            return ZfsView(False, frozenset(), {}, {})
        pools = {p.name: p.health for p in zfs.list_pools()}
        datasets: dict[str, DatasetInfo] = {}
        counts: dict[str, int] = {}
        for pool in pools:
            parent = f"{pool}/{DATASTORE_PARENT}"
            found = zfs.list_datasets(parent, properties)
            for ds in found:
                datasets[ds.name] = ds
            if not snapshots:
                continue
            head = datasets.get(parent)
            if head is not None and head.prop("snapshot_limit", "none").isdigit():
                counts.update((ds.name, ds.int_prop("snapshot_count")) for ds in found
                              if ds.name != parent and ds.int_prop("snapshot_count"))
            else:
                counts.update(zfs.snapshot_counts(parent))
        return ZfsView(True, frozenset(pools), pools, datasets, counts)

    def read(self, snapshots: bool = False, properties: Sequence[str] = DATASTORE_PROPERTIES,
             activity: bool = False, detail: bool = True) -> tuple[ZfsView, LiveState]:
        """:meth:`read_zfs` and :meth:`read_live` side by side: at 1,000 datastores under
        emulation ZFS takes seconds that the configfs walk and DBus calls need not wait
        for (the appliance has more than one CPU)."""
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="zds-read") as side:
            live = side.submit(self.read_live, activity=activity, detail=detail)
            view = self.read_zfs(snapshots=snapshots, properties=properties)
            return view, live.result()

    def read_live(self, activity: bool = True, detail: bool = True) -> LiveState:
        """ganesha's exports (ShowExports; with ``activity`` also ShowClients) and LIO's
        targets and backstores (one walk of configfs). A daemon that does not answer is
        reported as down, not as an error. Without ``detail`` (views, not plans) LIO's
        targets are only summarized (``summaries``) and backstores are not read."""
        g, lio = self.ctx.ganesha, self.ctx.lio
        ganesha_up = lio_up = True
        exports: dict[int, LiveExport] = {}
        act: Activity | None = None
        try:
            if activity:
                act = g.activity()
                exports = {i: LiveExport(i, r.path) for i, r in act.exports.items() if i != 0}
            else:
                exports = {e.export_id: e for e in g.list_exports()}
        except ZdsError:
            ganesha_up = False
        targets: dict[str, LiveTarget] = {}
        summaries: dict[str, TargetSummary] = {}
        backstores: frozenset[str] = frozenset()
        try:
            if not lio.available():
                lio_up = False
            elif detail:
                targets = {t.spec.iqn: t for t in lio.list_targets()}
                backstores = frozenset(lio.list_backstores())
            else:
                summaries = lio.summarize_targets()
        except ZdsError:
            lio_up, targets, summaries = False, {}, {}
        return LiveState(ganesha_up, lio_up, exports, targets, backstores, act, summaries)

    def desired(self, records: Iterable[DatastoreRecord], view: ZfsView,
                groups: Mapping[str, InitiatorGroup]) -> Desired:
        """The exports and targets ``records`` should have, given their datasets."""
        exports: list[ExportSpec] = []
        targets: list[TargetSpec] = []
        for rec in records:
            if rec.state not in ("creating", "ready"):
                continue
            info = view.datasets.get(rec.spec.dataset)
            if info is None:
                continue
            if rec.spec.is_nfs:
                mountpoint = info.prop("mountpoint")
                if mountpoint.startswith("/") and info.prop("mounted", "yes") == "yes":
                    exports.append(rc.export_spec(rec, mountpoint))
            else:
                targets.append(rc.target_spec(rec, self.ctx.zfs.zvol_device(rec.spec.dataset),
                                              groups, self.ctx.settings.iscsi_portal))
        return Desired(exports, targets)

    def _groups(self) -> dict[str, InitiatorGroup]:
        return {g.name: g for g in self.ctx.store.list_groups()}

    def _plan(self, want: Desired, live: LiveState) -> list[rc.Action]:
        g = self.ctx.ganesha
        return rc.plan(
            exports=want.exports if live.ganesha_up else [],
            live_exports=list(live.exports.values()) if live.ganesha_up else [],
            rendered=g.rendered,
            render=g.render,
            targets=want.targets if live.lio_up else [],
            live_targets=list(live.targets.values()) if live.lio_up else [],
            live_backstores=live.backstores if live.lio_up else [],
            iqn_prefix=self.ctx.settings.iqn_prefix,
        )

    def drift(self) -> list[DriftItem]:
        """Desired vs live for every datastore, plus datasets without records and
        records without datasets; records it in the status. Raises Unavailable when
        ZFS cannot be read (the desired state is unknown then)."""
        view, live = self.read()
        if not view.available:
            raise Unavailable("ZFS is not available: desired state cannot be read")
        records = self.ctx.store.list_datastores()
        items = [DriftItem("zfs", s, r) for s, r in self.zfs_problems(records, view)]
        actions = self._plan(self.desired(records, view, self._groups()), live)
        items += [DriftItem(a.kind, a.subject, a.reason) for a in actions]
        for name, up in (("nfs-ganesha", live.ganesha_up), ("LIO", live.lio_up)):
            if not up:
                items.append(DriftItem("unknown", name, f"{name} is not answering: what it "
                                                        "serves cannot be compared"))
        self._update(drift_at=time.time(), drift=tuple(items), drift_error=None)
        return items

    @staticmethod
    def zfs_problems(records: Sequence[DatastoreRecord],
                     view: ZfsView) -> list[tuple[str, str]]:
        """Records whose dataset is gone, and managed datasets nobody recorded."""
        problems = []
        known = {r.spec.dataset: r for r in records}
        for rec in known.values():
            if rec.spec.pool not in view.imported:
                problems.append((rec.name, f"pool {rec.spec.pool} is not imported"))
            elif (info := view.datasets.get(rec.spec.dataset)) is None:
                problems.append((rec.name, f"dataset {rec.spec.dataset} is missing"))
            elif rec.spec.is_nfs and not (info.prop("mountpoint").startswith("/")
                                          and info.prop("mounted", "yes") == "yes"):
                problems.append((rec.name, f"dataset {rec.spec.dataset} is not mounted "
                                           f"(mountpoint {info.prop('mountpoint')}): "
                                           "it cannot be exported"))
            elif rec.state != "ready":
                problems.append((rec.name, f"datastore is {rec.state}: {rec.error or ''}"))
        for name, ds in sorted(view.datasets.items()):
            if ds.prop("zds:managed") == "true" and name not in known:
                problems.append((name, "managed dataset has no record (adopt it by "
                                       "restarting the API)"))
        return problems

    # --- changing (under the lock) --------------------------------------------------

    def full(self, exclude: set[str] | None = None, wait: float | None = None
             ) -> rc.ReconcileReport:
        """Makes LIO and ganesha match every record (``exclude``: as if those did not
        exist). A daemon that is down is reported for each object it should serve."""
        with self.ctx.lock.hold("a full reconcile", timeout=wait):
            view, live = self.read()
            if not view.available:
                report = rc.ReconcileReport()
                report.fail("zfs", "ZFS is not available: desired state cannot be read, "
                                   "nothing is reconciled")
                return report
            records = [r for r in self.ctx.store.list_datastores()
                       if r.name not in (exclude or set())]
            want = self.desired(records, view, self._groups())
            report = rc.apply(self._plan(want, live), self.ctx.ganesha, self.ctx.lio)
            self._report_down(report, want, live)
        if not exclude:
            self._after_full(report, records, view)
        return report

    def datastores(self, records: Sequence[DatastoreRecord], withdraw: bool = False,
                   wait: float | None = None) -> rc.ReconcileReport:
        """Plans and applies only these datastores' exports and targets (and nothing
        else): served as recorded, or withdrawn when ``withdraw`` (or when a record is
        not ready/creating or its dataset is gone)."""
        if not records:
            return rc.ReconcileReport()
        with self.ctx.lock.hold(f"reconciling {len(records)} datastore(s)", timeout=wait):
            zfs = self.ctx.zfs
            if not zfs.available():
                report = rc.ReconcileReport()
                report.fail("zfs", "ZFS is not available: nothing is reconciled")
                return report
            datasets: dict[str, DatasetInfo] = {}
            if not withdraw:
                for rec in records:
                    info = zfs.get_dataset(rec.spec.dataset, DATASTORE_PROPERTIES)
                    if info is not None:
                        datasets[rec.spec.dataset] = info
            view = ZfsView(True, frozenset(r.spec.pool for r in records), {}, datasets)
            want = self.desired(records, view, self._groups())
            live = self._live_for(records)
            report = rc.apply(self._plan(want, live), self.ctx.ganesha, self.ctx.lio)
            self._report_down(report, want, live)
        self._after_partial(report, records)
        return report

    def _live_for(self, records: Sequence[DatastoreRecord]) -> LiveState:
        """The live exports/targets of these datastores only (removals are planned for
        nothing else)."""
        ids = {r.export_id for r in records if r.spec.is_nfs and r.export_id is not None}
        iqns = {r.iqn for r in records if not r.spec.is_nfs and r.iqn}
        backstores = {rc.backstore_name(r.name) for r in records if not r.spec.is_nfs}
        if len(records) > LOOKUP_LIMIT:
            full = self.read_live(activity=False)
            return LiveState(
                full.ganesha_up, full.lio_up,
                {i: e for i, e in full.exports.items() if i in ids},
                {q: t for q, t in full.targets.items() if q in iqns},
                full.backstores & backstores)
        g, lio = self.ctx.ganesha, self.ctx.lio
        exports: dict[int, LiveExport] = {}
        ganesha_up = True
        if ids:
            try:
                for eid in sorted(ids):
                    shown = g.get_export(eid)
                    if shown is not None:
                        exports[eid] = LiveExport(eid, shown.path)
            except ZdsError:
                ganesha_up = False
        targets: dict[str, LiveTarget] = {}
        lio_up = True
        if iqns:
            try:
                lio_up = lio.available()
                for iqn in sorted(iqns) if lio_up else ():
                    t = lio.get_target(iqn)
                    if t is not None:
                        targets[iqn] = t
            except ZdsError:
                lio_up = False
        # a backstore left without its target (a crash in between) is the watcher's to
        # clean; one still in use by the live target is known from it
        return LiveState(ganesha_up, lio_up, exports, targets, frozenset())

    @staticmethod
    def _report_down(report: rc.ReconcileReport, want: Desired, live: LiveState) -> None:
        if want.exports and not live.ganesha_up:
            for e in want.exports:
                report.fail(str(e.export_id),
                            f"add_export {e.export_id}: nfs-ganesha is not running")
        if want.targets and not live.lio_up:
            for t in want.targets:
                report.fail(t.iqn, f"apply_target {t.iqn}: LIO is not available")

    # --- status (what health answers from) ------------------------------------------

    @property
    def status(self) -> Status:
        return self._status

    def _update(self, **changes: object) -> None:
        with self._status_lock:
            self._status = replace(self._status, **changes)  # type: ignore[arg-type]

    def started(self, note: str = "") -> None:
        self._update(phase="running", note=note, started_at=time.time())

    def check(self) -> Status:
        """The cheap part of health, for the watcher: pools (one ``zpool list``, plus
        ``zpool status`` of a pool that is not ONLINE), LIO present, ganesha answering."""
        zfs = self.ctx.zfs
        problems: list[PoolProblem] = []
        alerts: list[FillAlert] = []
        if zfs.available():
            zfs_ok, detail = True, "pools online"
            try:
                pools = zfs.list_pools()
            except ZdsError as exc:
                pools, zfs_ok, detail = [], False, exc.message
            for p in pools:
                if (alert := fill_alert(p.name, p.capacity)) is not None:
                    alerts.append(alert)
                if p.health == "ONLINE":
                    continue
                status = action = ""
                try:
                    st = zfs.pool_status(p.name)
                    status, action = st.status, st.action
                except ZdsError as exc:
                    status = exc.message
                problems.append(PoolProblem(p.name, p.health, status, action))
            if problems:
                detail = "; ".join(f"{p.pool}: {p.health}" for p in problems)
        else:
            zfs_ok, detail = False, "ZFS module or tools not available"
        lio_ok = self.ctx.lio.available()
        ganesha_ok = self.ctx.ganesha.available()
        self._update(checked_at=time.time(), zfs_ok=zfs_ok, zfs_detail=detail,
                     pool_problems=tuple(problems), fill_alerts=tuple(alerts),
                     lio_ok=lio_ok, ganesha_ok=ganesha_ok)
        return self._status

    def refresh_drift(self) -> None:
        """:meth:`drift` for the watcher: a failure to read is recorded, not raised."""
        try:
            self.drift()
        except ZdsError as exc:
            self._update(drift_at=time.time(), drift=(), drift_error=exc.message)

    def _after_full(self, report: rc.ReconcileReport, records: Sequence[DatastoreRecord],
                    view: ZfsView) -> None:
        items = [DriftItem("zfs", s, r) for s, r in self.zfs_problems(records, view)]
        items += [DriftItem("failed", subject, "; ".join(msgs))
                  for subject, msgs in sorted(report.failed.items())]
        self._update(drift_at=time.time(), drift=tuple(items), drift_error=None)

    def _after_partial(self, report: rc.ReconcileReport,
                       records: Sequence[DatastoreRecord]) -> None:
        """Drift items about these datastores are replaced by what this pass left."""
        subjects: set[str] = set()
        for r in records:
            subjects.update(s for s in (r.name, r.spec.dataset, r.iqn,
                                        rc.backstore_name(r.name),
                                        str(r.export_id) if r.export_id else None) if s)
        with self._status_lock:
            kept = [i for i in self._status.drift if i.subject not in subjects]
            kept += [DriftItem("failed", subject, "; ".join(msgs))
                     for subject, msgs in sorted(report.failed.items())]
            self._status = replace(self._status, drift=tuple(kept))

