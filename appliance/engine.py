"""The engine: settings, records, host adapters and the services, under one lock.

Every change to ZFS, LIO or ganesha happens while holding ``Engine.lock`` (peers corrupt
configfs with concurrent writers), and LIO/ganesha are only ever changed by
:meth:`Engine.reconcile`, from the recorded desired state.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, replace

from appliance import reconcile as rc
from appliance.errors import Unavailable, ZdsError
from appliance.host.ganesha import ExportSpec, GaneshaHost
from appliance.host.lio import LioHost, LiveTarget, TargetSpec
from appliance.host.local import LocalHost
from appliance.host.zfs import DatasetInfo, ZfsHost
from appliance.jobs import JobManager
from appliance.model import (
    DATASTORE_PARENT,
    DatastoreRecord,
    DatastoreSpec,
    IscsiAccess,
    NfsClient,
)
from appliance.services.datastores import DatastoreService
from appliance.services.groups import InitiatorGroupService
from appliance.services.pools import PoolService
from appliance.services.snapshots import SnapshotService
from appliance.services.system import SystemService
from appliance.services.tokens import TokenService
from appliance.settings import Settings
from appliance.store import Store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Desired:
    exports: list[ExportSpec]
    targets: list[TargetSpec]


@dataclass(frozen=True)
class LiveState:
    """What ganesha and LIO serve now, read once (for listing many datastores)."""

    ganesha_up: bool
    lio_up: bool
    export_ids: frozenset[int]
    targets: dict[str, LiveTarget]


class Engine:
    def __init__(self, settings: Settings, store: Store, zfs: ZfsHost, lio: LioHost,
                 ganesha: GaneshaHost, local: LocalHost) -> None:
        self.settings = settings
        self.store = store
        self.zfs = zfs
        self.lio = lio
        self.ganesha = ganesha
        self.local = local
        self.lock = threading.RLock()
        self.jobs = JobManager(store)
        self.pools = PoolService(self)
        self.datastores = DatastoreService(self)
        self.groups = InitiatorGroupService(self)
        self.snapshots = SnapshotService(self)
        self.system = SystemService(self)
        self.tokens = TokenService(store)
        self._stop_watch = threading.Event()
        self._watcher: threading.Thread | None = None

    @classmethod
    def real(cls, settings: Settings) -> Engine:
        """An engine on this machine's real ZFS, LIO and ganesha."""
        from appliance.host.ganesha import Ganesha
        from appliance.host.lio import Lio
        from appliance.host.local import RealLocalHost
        from appliance.host.run import SubprocessRunner
        from appliance.host.zfs import Zfs

        runner = SubprocessRunner()
        return cls(
            settings,
            Store(settings.db_path),
            # demo/test pools on sparse files live in <state>/pools/<pool>/: import
            # searches there too, besides the disks
            Zfs(runner, import_dirs=(str(settings.state_dir / "pools" / "*"),)),
            Lio(),
            Ganesha(runner, settings.ganesha_exports_dir, settings.ganesha_dbus_address),
            RealLocalHost(runner),
        )

    # --- start-up -------------------------------------------------------------------

    def start(self, daemon_wait: float = 30.0) -> rc.ReconcileReport:
        """After ``zpool import``: recover jobs, adopt pools' datastores, finish what a
        crash interrupted, then make LIO and ganesha match the records."""
        interrupted = self.jobs.recover()
        if interrupted:
            log.warning("%d jobs were interrupted by a restart and marked failed", interrupted)
        with self.lock:
            if self.zfs.available():
                self.adopt()
                self._finish_interrupted()
                self._wait_for_daemons(daemon_wait)
            try:
                report = self.reconcile()
            except ZdsError as exc:
                log.error("start-up reconcile failed: %s", exc.message)
                return rc.ReconcileReport(errors=[exc.message])
        for err in report.errors:
            log.error("start-up reconcile: %s", err)
        return report

    def _wait_for_daemons(self, timeout: float) -> None:
        """At boot ganesha may still be registering on DBus: give it (and LIO) a moment
        before the first reconcile, so datastores are served when health says ok."""
        want = self.desired()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if (not want.exports or self.ganesha.available()) and (
                    not want.targets or self.lio.available()):
                return
            time.sleep(1.0)

    def _finish_interrupted(self, states: tuple[str, ...] = ("creating", "deleting")) -> None:
        for rec in self.store.list_datastores():
            if rec.state not in states:
                continue
            if rec.spec.pool not in self.pools.imported():
                continue
            try:
                if rec.state == "creating":
                    if self.zfs.get_dataset(rec.spec.dataset) is None:
                        self.datastores.create_dataset(rec)
                    self.store.put_datastore(rec.with_state("ready"))
                elif rec.state == "deleting":
                    self.datastores.finish_delete(rec)
            except ZdsError as exc:
                log.error("could not finish %s of %s: %s", rec.state, rec.name, exc.message)
                self.store.put_datastore(rec.with_state(rec.state, exc.message))

    def adopt(self) -> list[str]:
        """Records for datastores a pool carries (``zds:*`` properties) but SQLite lacks:
        a pool moved from another appliance keeps its datastores, ids and serials."""
        records = self.store.list_datastores()
        known = {r.name for r in records}
        export_ids = {r.export_id for r in records if r.export_id is not None}
        iqns = {r.iqn for r in records if r.iqn}
        serials = {r.serial for r in records if r.serial}
        adopted = []
        for pool in self.pools.imported():
            for ds in self.zfs.list_datasets(f"{pool}/{DATASTORE_PARENT}"):
                if ds.prop("zds:managed") != "true":
                    continue
                rec = _record_from_properties(pool, ds)
                if rec is None or rec.name in known:
                    continue
                if rec.iqn in iqns or rec.serial in serials:
                    # another datastore here has that identity: serving both would
                    # confuse every initiator. Left unadopted; zfs_problems reports it.
                    log.error("not adopting %s: its IQN or serial is in use here", ds.name)
                    continue
                if rec.export_id is not None and rec.export_id in export_ids:
                    new_id = self.store.next_export_id()
                    log.warning("adopting %s: export id %d is taken here, now %d",
                                ds.name, rec.export_id, new_id)
                    rec = replace(rec, export_id=new_id)
                    self.zfs.set_properties(ds.name, {"zds:export_id": str(new_id)})
                try:
                    self.store.put_datastore(rec)
                except Exception as exc:  # one bad dataset must not stop the others
                    log.error("cannot adopt %s: %s", ds.name, exc)
                    continue
                if rec.export_id is not None:
                    self.store.reserve_export_id(rec.export_id)
                    export_ids.add(rec.export_id)
                if rec.iqn:
                    iqns.add(rec.iqn)
                if rec.serial:
                    serials.add(rec.serial)
                adopted.append(rec.name)
                known.add(rec.name)
                log.info("adopted datastore %s from pool %s", rec.name, pool)
        return adopted

    # --- desired vs live ------------------------------------------------------------

    def desired(self, exclude: set[str] | None = None) -> Desired:
        exclude = exclude or set()
        imported = self.pools.imported()
        groups = {g.name: g for g in self.store.list_groups()}
        exports: list[ExportSpec] = []
        targets: list[TargetSpec] = []
        datasets: dict[str, DatasetInfo] = {}
        for pool in imported:
            for ds in self.zfs.list_datasets(f"{pool}/{DATASTORE_PARENT}"):
                datasets[ds.name] = ds
        for rec in self.store.list_datastores():
            if rec.name in exclude or rec.state not in ("creating", "ready"):
                continue
            info = datasets.get(rec.spec.dataset)
            if info is None:
                continue
            if rec.spec.is_nfs:
                mountpoint = info.prop("mountpoint")
                if mountpoint.startswith("/") and info.prop("mounted", "yes") == "yes":
                    exports.append(rc.export_spec(rec, mountpoint))
            else:
                targets.append(rc.target_spec(rec, self.zfs.zvol_device(rec.spec.dataset),
                                              groups, self.settings.iscsi_portal))
        return Desired(exports, targets)

    def plan(self, exclude: set[str] | None = None) -> list[rc.Action]:
        self._require_zfs()
        return self._plan(self.desired(exclude))

    def _require_zfs(self) -> None:
        # Without ZFS, desired state cannot be read; planning from "nothing is wanted"
        # would tear down every export and LUN.
        if not self.zfs.available():
            raise Unavailable("ZFS is not available: desired state cannot be read, "
                              "nothing is reconciled")

    def _plan(self, want: Desired) -> list[rc.Action]:
        lio_up = self.lio.available()
        ganesha_up = self.ganesha.available()
        return rc.plan(
            exports=want.exports if ganesha_up else [],
            live_exports=self.ganesha.list_exports() if ganesha_up else [],
            rendered=self.ganesha.rendered,
            render=_render,
            targets=want.targets if lio_up else [],
            live_targets=self.lio.list_targets() if lio_up else [],
            live_backstores=self.lio.list_backstores() if lio_up else [],
            iqn_prefix=self.settings.iqn_prefix,
        )

    def reconcile(self, exclude: set[str] | None = None) -> rc.ReconcileReport:
        """Applies the difference between records and live LIO/ganesha. A daemon that is
        down is reported as an error for each object it should serve."""
        with self.lock:
            try:
                self._require_zfs()
                want = self.desired(exclude)
                actions = self._plan(want)
            except ZdsError as exc:
                report = rc.ReconcileReport()
                report.fail("zfs", exc.message)
                return report
            report = rc.apply(actions, self.ganesha, self.lio)
            if want.exports and not self.ganesha.available():
                for e in want.exports:
                    report.fail(str(e.export_id),
                                f"add_export {e.export_id}: nfs-ganesha is not running")
            if want.targets and not self.lio.available():
                for t in want.targets:
                    report.fail(t.iqn, f"apply_target {t.iqn}: LIO is not available")
            return report

    def repair(self) -> rc.ReconcileReport:
        """What the background watcher does: finish interrupted deletes, then reconcile."""
        with self.lock:
            if self.zfs.available():
                self._finish_interrupted(states=("deleting",))
            return self.reconcile()

    def live_state(self) -> LiveState:
        """Reads ganesha's exports and LIO's targets once (under the lock: rtslib's
        caches are shared with writers)."""
        with self.lock:
            ganesha_up, lio_up = self.ganesha.available(), self.lio.available()
            try:
                ids = frozenset(e.export_id for e in self.ganesha.list_exports()) \
                    if ganesha_up else frozenset()
            except ZdsError:
                ganesha_up, ids = False, frozenset()
            try:
                targets = {t.spec.iqn: t for t in self.lio.list_targets()} if lio_up else {}
            except ZdsError:
                lio_up, targets = False, {}
        return LiveState(ganesha_up, lio_up, ids, targets)

    def live_status(self, rec: DatastoreRecord,
                    live: LiveState | None = None) -> tuple[bool, list[str]]:
        """(served now, clients connected now) for one datastore."""
        live = live or self.live_state()
        if rec.spec.is_nfs:
            if rec.export_id is None or rec.export_id not in live.export_ids:
                return False, []
            try:
                return True, sorted(self.ganesha.connected_clients(rec.export_id))
            except ZdsError:
                return True, []
        target = live.targets.get(rec.iqn or "")
        if target is None:
            return False, []
        return True, sorted(target.sessions)

    def zfs_problems(self) -> list[tuple[str, str]]:
        """Records whose dataset is gone, and managed datasets nobody recorded."""
        problems = []
        imported = self.pools.imported()
        known = {r.spec.dataset: r for r in self.store.list_datastores()}
        for rec in known.values():
            if rec.spec.pool not in imported:
                problems.append((rec.name, f"pool {rec.spec.pool} is not imported"))
            elif (info := self.zfs.get_dataset(rec.spec.dataset)) is None:
                problems.append((rec.name, f"dataset {rec.spec.dataset} is missing"))
            elif rec.spec.is_nfs and not (info.prop("mountpoint").startswith("/")
                                          and info.prop("mounted", "yes") == "yes"):
                problems.append((rec.name, f"dataset {rec.spec.dataset} is not mounted "
                                           f"(mountpoint {info.prop('mountpoint')}): "
                                           "it cannot be exported"))
            elif rec.state != "ready":
                problems.append((rec.name, f"datastore is {rec.state}: {rec.error or ''}"))
        for pool in imported:
            for ds in self.zfs.list_datasets(f"{pool}/{DATASTORE_PARENT}"):
                if ds.prop("zds:managed") == "true" and ds.name not in known:
                    problems.append((ds.name, "managed dataset has no record (adopt it by "
                                              "restarting the API)"))
        return problems

    def watch(self, interval: float) -> None:
        """Re-applies desired state every ``interval`` seconds in a background thread,
        so an export or LUN lost behind ZDS's back (a ganesha restart, a daemon that
        came up after the API) comes back without anyone asking."""
        if self._watcher is not None or interval <= 0:
            return

        def loop() -> None:
            while not self._stop_watch.wait(interval):
                try:
                    report = self.repair()
                except Exception:
                    log.exception("periodic reconcile failed")
                    continue
                for action in report.applied:
                    log.warning("repaired drift: %s", action.describe())

        self._watcher = threading.Thread(target=loop, name="zds-reconcile", daemon=True)
        self._watcher.start()

    def close(self) -> None:
        self._stop_watch.set()
        if self._watcher is not None:
            self._watcher.join(timeout=5)
        self.jobs.shutdown()
        self.store.close()


def _render(spec: ExportSpec) -> str:
    from appliance.host.ganesha import render_export_block

    return render_export_block(spec)


def _record_from_properties(pool: str, ds: DatasetInfo) -> DatastoreRecord | None:
    """Rebuilds a record from a dataset's zds:* properties (CHAP secrets are not there)."""
    try:
        access = json.loads(ds.prop("zds:access", "{}"))
        protocol = ds.prop("zds:protocol")
        spec = DatastoreSpec(
            name=ds.prop("zds:name"),
            pool=pool,
            protocol=protocol,  # type: ignore[arg-type]
            size=int(ds.prop("zds:size")),
            thin=ds.prop("zds:thin") != "false",
            profile=ds.prop("zds:profile", "vmware"),  # type: ignore[arg-type]
            nfs_clients=tuple(NfsClient(c["match"], c["access"])
                              for c in access.get("nfs_clients", [])),
            iscsi=IscsiAccess(tuple(access.get("initiators", [])),
                              tuple(access.get("initiator_groups", []))),
        )
        export_id = ds.prop("zds:export_id")
        chap = bool(access.get("chap"))
        return DatastoreRecord(
            spec=spec,
            # CHAP secrets never go into ZFS properties: serving this LUN without them
            # would drop its authentication, so it waits for a PUT with the CHAP settings
            state="error" if chap else "ready",
            export_id=int(export_id) if export_id else None,
            iqn=ds.prop("zds:iqn") or None,
            serial=ds.prop("zds:serial") or None,
            origin=ds.prop("origin") or None,
            error="adopted from pool properties: not served until its CHAP settings are "
                  "given again with PUT" if chap else None,
            created=time.time(),
        )
    except (KeyError, ValueError, TypeError) as exc:
        log.warning("cannot adopt %s: %s", ds.name, exc)
        return None
