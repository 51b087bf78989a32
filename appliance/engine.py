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
from dataclasses import dataclass

from appliance import reconcile as rc
from appliance.errors import ZdsError
from appliance.host.ganesha import ExportSpec, GaneshaHost
from appliance.host.lio import LioHost, TargetSpec
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
            Zfs(runner),
            Lio(),
            Ganesha(runner, settings.ganesha_exports_dir, settings.ganesha_dbus_address),
            RealLocalHost(runner),
        )

    # --- start-up -------------------------------------------------------------------

    def start(self) -> rc.ReconcileReport:
        """After ``zpool import``: recover jobs, adopt pools' datastores, finish what a
        crash interrupted, then make LIO and ganesha match the records."""
        interrupted = self.jobs.recover()
        if interrupted:
            log.warning("%d jobs were interrupted by a restart and marked failed", interrupted)
        with self.lock:
            if self.zfs.available():
                self.adopt()
                self._finish_interrupted()
            try:
                report = self.reconcile()
            except ZdsError as exc:
                log.error("start-up reconcile failed: %s", exc.message)
                return rc.ReconcileReport(errors=[exc.message])
        for err in report.errors:
            log.error("start-up reconcile: %s", err)
        return report

    def _finish_interrupted(self) -> None:
        for rec in self.store.list_datastores():
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
        known = {r.name for r in self.store.list_datastores()}
        adopted = []
        for pool in self.pools.imported():
            for ds in self.zfs.list_datasets(f"{pool}/{DATASTORE_PARENT}"):
                if ds.prop("zds:managed") != "true":
                    continue
                rec = _record_from_properties(pool, ds)
                if rec is None or rec.name in known:
                    continue
                self.store.put_datastore(rec)
                if rec.export_id is not None:
                    self.store.reserve_export_id(rec.export_id)
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
        return self._plan(self.desired(exclude))

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
            want = self.desired(exclude)
            report = rc.apply(self._plan(want), self.ganesha, self.lio)
            if want.exports and not self.ganesha.available():
                report.errors += [f"add_export {e.export_id}: nfs-ganesha is not running"
                                  for e in want.exports]
            if want.targets and not self.lio.available():
                report.errors += [f"apply_target {t.iqn}: LIO is not available"
                                  for t in want.targets]
            return report

    def live_status(self, rec: DatastoreRecord) -> tuple[bool, list[str]]:
        """(served now, clients connected now) for one datastore."""
        try:
            if rec.spec.is_nfs:
                if rec.export_id is None or not self.ganesha.available():
                    return False, []
                live = {e.export_id for e in self.ganesha.list_exports()}
                if rec.export_id not in live:
                    return False, []
                return True, sorted(self.ganesha.connected_clients(rec.export_id))
            if rec.iqn is None or not self.lio.available():
                return False, []
            for t in self.lio.list_targets():
                if t.spec.iqn == rec.iqn:
                    return True, sorted(t.sessions)
            return False, []
        except ZdsError:
            return False, []

    def zfs_problems(self) -> list[tuple[str, str]]:
        """Records whose dataset is gone, and managed datasets nobody recorded."""
        problems = []
        imported = self.pools.imported()
        known = {r.spec.dataset: r for r in self.store.list_datastores()}
        for rec in known.values():
            if rec.spec.pool not in imported:
                problems.append((rec.name, f"pool {rec.spec.pool} is not imported"))
            elif self.zfs.get_dataset(rec.spec.dataset) is None:
                problems.append((rec.name, f"dataset {rec.spec.dataset} is missing"))
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
                    report = self.reconcile()
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
        return DatastoreRecord(
            spec=spec,
            state="ready",
            export_id=int(export_id) if export_id else None,
            iqn=ds.prop("zds:iqn") or None,
            serial=ds.prop("zds:serial") or None,
            origin=ds.prop("origin") or None,
            error="adopted from pool properties; CHAP must be set again"
            if access.get("chap") else None,
            created=time.time(),
        )
    except (KeyError, ValueError, TypeError) as exc:
        log.warning("cannot adopt %s: %s", ds.name, exc)
        return None
