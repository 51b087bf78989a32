"""The reconciler: desired state (records + ZFS) -> what each transport's daemon serves
(ganesha, LIO...), and what differs.

It owns every read of ZFS and of the daemons' state and every change to them, through the
transports (:mod:`appliance.transports`), for every protocol alike:
- reads are batched, so they cost the same number of host calls at 10 or 1,000
  datastores: one ``zfs get -r`` per pool, one ``zfs list -t snapshot`` per pool, and a
  constant number per transport (one ShowExports (+ ShowClients), one configfs walk);
- :meth:`Reconciler.full` plans and applies everything (start-up, the watcher, ``POST
  /system/reconcile``), each transport adding its objects in batches;
- :meth:`Reconciler.datastores` plans and applies only the objects of the datastores
  named (a PUT, a delete, a rollback, an initiator group change);
- :meth:`Reconciler.check` records what health answers from (:class:`Status`), so health
  never plans inline.

Planning itself is pure (each transport's ``plan``). Every apply holds the one change
lock; reads do not take it.
"""

from __future__ import annotations

import logging
import posixpath
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from appliance import actions as rc
from appliance import properties
from appliance.context import Context
from appliance.errors import Unavailable, ZdsError
from appliance.host.zfs import DatasetInfo, ZfsHost
from appliance.kept import Kept, KeptRead, merged
from appliance.model import (
    DATASTORE_PARENT,
    DATASTORE_PROPERTIES,
    VIEW_PROPERTIES,
    DatastoreRecord,
)
from appliance.transports.base import AnyTransport, Live
from appliance.transports.registry import Transports
from appliance.transports.storage import FILESYSTEM, RECONCILE, Problem

log = logging.getLogger(__name__)

# How long a reconcile waits for a missing zvol device (the real adapter re-triggers udev
# half-way) before it reports it and stops waiting for the others.
DEVICE_WAIT = 10.0

# What each transport's datastores should be on its daemon, by transport name.
Desired = Mapping[str, Sequence[Any]]
# A transport and the actions planned for it.
Planned = tuple[AnyTransport, list[rc.Action[Any]]]


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
    """What the transports' daemons serve now, read in one go (by transport name; a
    transport an incremental reconcile did not need is not there)."""

    parts: Mapping[str, Live]
    transports: Transports

    def _part(self, rec: DatastoreRecord) -> tuple[AnyTransport, Live] | None:
        t = self.transports.get(rec.spec.protocol)
        part = self.parts.get(t.name) if t is not None else None
        return (t, part) if t is not None and part is not None else None

    def serving(self, rec: DatastoreRecord) -> bool:
        """Its export/target is live."""
        found = self._part(rec)
        return found is not None and found[0].serving(found[1], rec)

    def clients(self, rec: DatastoreRecord, window: float | None = 600.0) -> list[str]:
        """Who uses it now (NFS clients active lately, initiators logged in...)."""
        found = self._part(rec)
        return found[0].clients(found[1], rec, window) if found is not None else []


@dataclass(frozen=True)
class DriftItem:
    kind: str  # the action the reconciler would take, or a ZFS-level problem
    subject: str
    reason: str
    action: str = ""  # what repairs it: the reconcile itself, or what a person must do


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
    daemons: Mapping[str, bool] = field(default_factory=dict)  # transport name -> available
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
        # the list's ZFS read, kept by the watcher and read again where the engine
        # changed something (appliance/kept.py)
        self.kept: KeptRead[ZfsView] = KeptRead(
            ctx.zfs_changes, self._read_view_zfs, self._read_view_some,
            ctx.settings.list_refresh_interval, usable=lambda view: view.available)

    # --- reading (no lock; constant host calls) -------------------------------------

    def read_view(self) -> tuple[Kept[ZfsView], LiveState]:
        """What the datastore list shows: the kept ZFS read (with what the engine changed
        since read again; see :class:`~appliance.kept.KeptRead`) beside a fresh read of
        the daemons' live state (served or not, who is connected)."""
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="zds-read") as side:
            live = side.submit(self.read_live, for_view=True)
            kept = self.kept.get()
            return kept, live.result()

    def _read_view_zfs(self) -> ZfsView:
        return self.read_zfs(snapshots=True, properties=VIEW_PROPERTIES)

    def _read_view_some(self, view: ZfsView, names: Sequence[str]) -> ZfsView:
        """``view`` with the datasets ``names`` read again, one ``zfs list`` each (and
        their snapshot counts as :meth:`read_zfs` counts them); a dataset that is gone
        is dropped."""
        zfs = self.ctx.zfs
        if not zfs.available():
            return ZfsView(False, frozenset(), {}, {})
        found: dict[str, DatasetInfo] = {}
        counts = dict(view.snapshots)
        for name in names:
            counts.pop(name, None)
            pool = name.split("/", 1)[0]
            info = next((i for i in zfs.list_datasets(name, VIEW_PROPERTIES)
                         if i.name == name), None) if pool in view.imported else None
            if info is None:
                continue
            found[name] = info
            head = view.datasets.get(f"{pool}/{DATASTORE_PARENT}")
            if head is not None and head.prop("snapshot_limit", "none").isdigit():
                count = info.int_prop("snapshot_count")
            else:
                count = zfs.snapshot_counts(name).get(name, 0)
            if count:
                counts[name] = count
        return replace(view, datasets=merged(view.datasets, names, found), snapshots=counts)

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
             for_view: bool = False) -> tuple[ZfsView, LiveState]:
        """:meth:`read_zfs` and :meth:`read_live` side by side: at 1,000 datastores under
        emulation ZFS takes seconds that the configfs walk and DBus calls need not wait
        for (the appliance has more than one CPU)."""
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="zds-read") as side:
            live = side.submit(self.read_live, for_view=for_view)
            view = self.read_zfs(snapshots=snapshots, properties=properties)
            return view, live.result()

    def read_live(self, for_view: bool = False) -> LiveState:
        """Every transport's live state: enough to plan, or (``for_view``: the list)
        enough to say what is served and who uses it. A daemon that does not answer is
        reported as down, not as an error."""
        transports = self.ctx.transports
        return LiveState({t.name: t.read_live(for_view) for t in transports}, transports)

    def desired(self, records: Iterable[DatastoreRecord], view: ZfsView) -> Desired:
        """What ``records`` should be on each transport's daemon, given their datasets."""
        out: dict[str, Sequence[Any]] = {}
        for t, recs in self.ctx.transports.grouped(records):
            items = [(rec, info) for rec in recs if rec.state in ("creating", "ready")
                     and (info := view.datasets.get(rec.spec.dataset)) is not None]
            out[t.name] = t.desired(items)
        return out

    def _plan(self, want: Desired, live: LiveState) -> list[Planned]:
        """Each transport's actions (none for a transport whose daemon is down)."""
        out: list[Planned] = []
        for t in self.ctx.transports:
            part = live.parts.get(t.name)
            if part is not None:
                out.append((t, t.plan(want.get(t.name, ()), part) if part.up else []))
        return out

    def _apply(self, want: Desired, live: LiveState) -> rc.ReconcileReport:
        """Plans and applies per transport; a daemon that is down is reported for each
        object it should serve."""
        report = rc.ReconcileReport()
        for t, actions in self._plan(want, live):
            report.merge(t.apply(actions))
            if not live.parts[t.name].up:
                for subject, message in t.unserved(want.get(t.name, ())):
                    report.fail(subject, message)
        return report

    def _devices(self, report: rc.ReconcileReport, records: Sequence[DatastoreRecord],
                 view: ZfsView, wait: float = DEVICE_WAIT) -> None:
        """Datastores whose block device was missing (udev lost or has not made a zvol's
        link yet: after an import, or a create cut before it): waits for the device,
        re-triggering udev, and applies them once more. The first that does not come in
        ``wait`` seconds ends the waiting (the others would wait as long)."""
        missing = [(t, rec) for t, recs in self.ctx.transports.grouped(records)
                   for rec in recs if report.missing_devices & set(t.subjects(rec))]
        ready: list[DatastoreRecord] = []
        for t, rec in missing:
            try:
                t.storage.wait_ready(self.ctx.zfs, rec.spec.dataset, wait)
            except ZdsError as exc:
                report.fail(rec.name, f"{t.storage.said} {rec.spec.dataset}: {exc.message}")
                break
            ready.append(rec)
        if not ready:
            return
        live = LiveState({t.name: t.read_for(recs) for t, recs
                          in self.ctx.transports.grouped(ready) if recs}, self.ctx.transports)
        subjects = {s for t, recs in self.ctx.transports.grouped(ready) for r in recs
                    for s in t.subjects(r)}
        report.retried(subjects, self._apply(self.desired(ready, view), live))

    def drift(self) -> list[DriftItem]:
        """Desired vs live for every datastore, plus datasets without records and
        records without datasets; records it in the status. Raises Unavailable when
        ZFS cannot be read (the desired state is unknown then)."""
        view, live = self.read()
        if not view.available:
            raise Unavailable("ZFS is not available: desired state cannot be read")
        records = self.ctx.store.list_datastores()
        items = self.zfs_problems(records, view)
        plans = self._plan(self.desired(records, view), live)
        items += [DriftItem(a.kind, a.subject, a.reason, f"the reconcile does it ({RECONCILE})")
                  for _t, actions in plans for a in actions]
        unknown, _hidden = self._unanswered(records, live)
        items += unknown
        self._update(drift_at=time.time(), drift=tuple(items), drift_error=None)
        return items

    def _unanswered(self, records: Sequence[DatastoreRecord],
                    live: LiveState) -> tuple[list[DriftItem], set[str]]:
        """One "unknown" item per daemon that does not answer while datastores need it,
        and the subjects it stands for: what such a daemon serves cannot be compared, so
        drift and the full reconcile's record both say it once, not once per datastore
        that could not be applied. A daemon no datastore needs is not drift (health says
        it is down either way): a host without NVMe/TCP is not out of sync."""
        items: list[DriftItem] = []
        hidden: set[str] = set()
        for t, recs in self.ctx.transports.grouped(records):
            part = live.parts.get(t.name)
            if not recs or part is None or part.up:
                continue
            items.append(DriftItem("unknown", t.daemon, f"{t.daemon} is not answering: what "
                                   "it serves cannot be compared", t.health_detail(False)))
            hidden.update(s for r in recs for s in (r.name, r.spec.dataset, *t.subjects(r)))
        return items, hidden

    def zfs_problems(self, records: Sequence[DatastoreRecord],
                     view: ZfsView) -> list[DriftItem]:
        """Records whose dataset is gone or cannot be served (with what repairs it), and
        managed datasets nobody recorded."""
        problems = []
        known = {r.spec.dataset: r for r in records}
        for rec in known.values():
            if rec.spec.pool not in view.imported:
                problems.append(DriftItem("zfs", rec.name, f"pool {rec.spec.pool} is not "
                                          "imported", f"import it (POST /api/v1/pools/"
                                          f"{rec.spec.pool}/import) or delete the datastore"))
            elif (info := view.datasets.get(rec.spec.dataset)) is None:
                problems.append(DriftItem("zfs", rec.name,
                                          f"dataset {rec.spec.dataset} is missing",
                                          "delete the datastore (its data is gone), or "
                                          "import the pool that holds it"))
            elif (problem := self.problem(rec, info, view)) is not None:
                problems.append(DriftItem("zfs", rec.name, problem.reason, problem.action))
            elif (lag := self.lag(rec, info)) is not None:
                problems.append(DriftItem("zfs", rec.name, lag.reason, lag.action))
            elif rec.state != "ready":
                problems.append(DriftItem("zfs", rec.name,
                                          f"datastore is {rec.state}: {rec.error or ''}",
                                          _state_action(rec)))
        for name, ds in sorted(view.datasets.items()):
            if ds.prop("zds:managed") != "true" or name in known:
                continue
            if replica := ds.prop("zds:replication"):
                problems.append(DriftItem(
                    "zfs", name, f"replica of {replica} half-promoted (renamed, not made "
                    "a datastore) and not recorded here",
                    f"rename it back below the replicas' dataset and POST "
                    f"/api/v1/replications/{replica}/promote again"))
            else:
                problems.append(DriftItem("zfs", name, "managed dataset has no record",
                                          "adopt it by restarting the API (systemctl "
                                          "restart zds-api), or destroy it"))
        return problems

    def problem(self, rec: DatastoreRecord, info: DatasetInfo,
                view: ZfsView) -> Problem | None:
        """Why ``rec``'s dataset cannot be served as it is, and what repairs it."""
        t = self.ctx.transports.get(rec.spec.protocol)
        if t is None:
            return None
        return t.storage.problem(rec.spec.dataset, info, _home(view, rec.spec.pool))

    def lag(self, rec: DatastoreRecord, info: DatasetInfo) -> Problem | None:
        """A ready datastore whose dataset's properties lag its record (a PUT recorded
        the new spec and died before ``zfs set``), and how the reconcile finishes it."""
        t = self.ctx.transports.get(rec.spec.protocol)
        if t is None or rec.state != "ready":
            return None
        keys = properties.lagging(t, rec, info)
        if not keys:
            return None
        reason = (f"dataset {rec.spec.dataset} lags its record ({', '.join(keys)}): a "
                  "change was cut before ZFS had it")
        had = t.storage.size_of(info)
        if had > rec.spec.size and t.storage.is_volume:
            return Problem(reason, f"the {t.storage.said} is {had} bytes, more than the "
                                   f"recorded {rec.spec.size}: shrinking it would lose "
                                   f"data, so PUT /api/v1/datastores/{rec.name} with a "
                                   f"size of at least {had}")
        old = replace(rec.spec, size=had, thin=info.prop("zds:thin") != "false")
        update = properties.update_properties(t, rec, old)
        return Problem(reason, f"the reconcile sets them ({RECONCILE})",
                       partial(_set, rec.spec.dataset, update))

    def _repair(self, records: Sequence[DatastoreRecord], view: ZfsView
                ) -> tuple[ZfsView, rc.ReconcileReport]:
        """What the reconciler repairs itself in ZFS before serving (under the lock): the
        pools' ``POOL/datastores`` and the datastores' file systems a crash left
        unmounted (a ``zfs create``, ``zpool import`` or ``zpool export`` cut half-way).
        Returns the view with what changed read again, and what was repaired or failed
        (failures under the datastore's name)."""
        report = rc.ReconcileReport()
        zfs = self.ctx.zfs
        datasets = dict(view.datasets)
        for rec in records:  # first what a cut PUT left: zds:*, size and tuning
            info = datasets.get(rec.spec.dataset)
            lag = self.lag(rec, info) if info is not None else None
            if lag is None:
                continue
            if lag.repair is None:
                report.fail(rec.name, f"{lag.reason}; {lag.action}")
                continue
            report.run(rc.Action[Any]("set_properties", rec.name, lag.reason),
                       partial(lag.repair, zfs))
            if (again := zfs.get_dataset(rec.spec.dataset, DATASTORE_PROPERTIES)) is not None:
                datasets[rec.spec.dataset] = again
        todo = [(rec, info) for rec in records if rec.state in ("creating", "ready")
                and (info := datasets.get(rec.spec.dataset)) is not None
                and self.problem(rec, info, view) is not None]
        if not todo:
            return replace(view, datasets=datasets), report
        for pool in sorted({rec.spec.pool for rec, _ in todo}):
            parent = f"{pool}/{DATASTORE_PARENT}"
            head = datasets.get(parent) or zfs.get_dataset(parent, _MOUNT_PROPERTIES)
            if head is not None:
                datasets[parent] = head  # where the pool's datastores live (their home)
            if head is None or FILESYSTEM.mounted_path(head) is not None \
                    or head.prop("canmount", "on") != "on" \
                    or not head.prop("mountpoint").startswith("/"):
                continue
            action = rc.Action[Any]("mount", parent, "the datastores' parent is not mounted")
            report.run(action, partial(zfs.mount, parent))
            if (again := zfs.get_dataset(parent, DATASTORE_PROPERTIES)) is not None:
                datasets[parent] = again
        view = replace(view, datasets=datasets)
        for rec, info in todo:
            problem = self.problem(rec, info, view)
            if problem is None:
                continue
            if problem.repair is None:
                report.fail(rec.name, f"{problem.reason}; {problem.action}")
                continue
            action = rc.Action[Any]("mount", rec.name, problem.reason)
            report.run(action, partial(problem.repair, zfs))
            if (again := zfs.get_dataset(rec.spec.dataset, DATASTORE_PROPERTIES)) is not None:
                datasets[rec.spec.dataset] = again
        return replace(view, datasets=datasets), report

    # --- changing (under the lock) --------------------------------------------------

    def full(self, exclude: set[str] | None = None, wait: float | None = None,
             device_wait: float = DEVICE_WAIT) -> rc.ReconcileReport:
        """Makes every transport's daemon match every record (``exclude``: as if those
        did not exist); ``device_wait``: how long a missing zvol device is waited for
        (longer at start-up, when udev is still making the links of an import)."""
        with self.ctx.lock.hold("a full reconcile", timeout=wait):
            view, live = self.read()
            if not view.available:
                report = rc.ReconcileReport()
                report.fail("zfs", "ZFS is not available: desired state cannot be read, "
                                   "nothing is reconciled")
                return report
            records = [r for r in self.ctx.store.list_datastores()
                       if r.name not in (exclude or set())]
            view, report = self._repair(records, view)
            report.merge(self._apply(self.desired(records, view), live))
            self._devices(report, records, view, device_wait)
        if not exclude:
            self._after_full(report, records, view, live)
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
            report = rc.ReconcileReport()
            if not withdraw:
                view, report = self._repair(records, view)
            # the live objects of these datastores only: removals are planned for
            # nothing else, and a transport none of them uses is not read at all
            live = LiveState({t.name: t.read_withdraw(recs) if withdraw else t.read_for(recs)
                              for t, recs in self.ctx.transports.grouped(records) if recs},
                             self.ctx.transports)
            report.merge(self._apply(self.desired(records, view), live))
            self._devices(report, records, view)
        self._after_partial(report, records)
        return report

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
        ``zpool status`` of a pool that is not ONLINE) and each transport's daemon (LIO
        present, ganesha answering...)."""
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
        daemons = {t.name: t.available() for t in self.ctx.transports}
        self._update(checked_at=time.time(), zfs_ok=zfs_ok, zfs_detail=detail,
                     pool_problems=tuple(problems), fill_alerts=tuple(alerts),
                     daemons=daemons)
        return self._status

    def refresh_drift(self) -> None:
        """:meth:`drift` for the watcher: a failure to read is recorded, not raised."""
        try:
            self.drift()
        except ZdsError as exc:
            self._update(drift_at=time.time(), drift=(), drift_error=exc.message)

    def _after_full(self, report: rc.ReconcileReport, records: Sequence[DatastoreRecord],
                    view: ZfsView, live: LiveState) -> None:
        """The drift a full reconcile leaves: ZFS problems (with what their repair met),
        what failed to apply, and a daemon that did not answer said once for all its
        datastores (as :meth:`drift` says it)."""
        unknown, hidden = self._unanswered(records, live)
        items = []
        for item in self.zfs_problems(records, view):
            msgs = report.failed.get(item.subject)
            # a repair that failed: what it met, and what a person does about it
            items.append(replace(item, reason=f"{item.reason}; {'; '.join(msgs)}",
                                 action=_failed_action(msgs)) if msgs else item)
        said = {i.subject for i in items} | hidden
        items += [DriftItem("failed", subject, "; ".join(msgs), _failed_action(msgs))
                  for subject, msgs in sorted(report.failed.items()) if subject not in said]
        items += unknown
        self._update(drift_at=time.time(), drift=tuple(items), drift_error=None)

    def _after_partial(self, report: rc.ReconcileReport,
                       records: Sequence[DatastoreRecord]) -> None:
        """Drift items about these datastores are replaced by what this pass left."""
        subjects: set[str] = set()
        for t, recs in self.ctx.transports.grouped(records):
            for r in recs:
                subjects.update((r.name, r.spec.dataset, *t.subjects(r)))
        with self._status_lock:
            kept = [i for i in self._status.drift if i.subject not in subjects]
            kept += [DriftItem("failed", subject, "; ".join(msgs))
                     for subject, msgs in sorted(report.failed.items())]
            self._status = replace(self._status, drift=tuple(kept))



# What the repair of a file system reads of it and of its parent.
_MOUNT_PROPERTIES = ("type", "mounted", "canmount", "mountpoint")


def _home(view: ZfsView, pool: str) -> str | None:
    """Where ``pool``'s datastores are mounted: the mountpoint of ``POOL/datastores``."""
    head = view.datasets.get(f"{pool}/{DATASTORE_PARENT}")
    mountpoint = head.prop("mountpoint") if head is not None else ""
    return posixpath.normpath(mountpoint) if mountpoint.startswith("/") else None


def _state_action(rec: DatastoreRecord) -> str:
    if rec.state == "error":
        return f"PUT /api/v1/datastores/{rec.name} with its settings repairs it"
    what = {"creating": "creation", "deleting": "delete"}.get(rec.state, rec.state)
    return (f"the next reconcile finishes the {what} ({RECONCILE}); or "
            f"DELETE /api/v1/datastores/{rec.name}")


def _failed_action(messages: Sequence[str]) -> str:
    return (f"retried at every reconcile ({RECONCILE}); if it keeps failing, fix what the "
            "error names")


def _set(dataset: str, props: dict[str, str], zfs: ZfsHost) -> None:
    zfs.set_properties(dataset, props)
