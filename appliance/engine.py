"""The composition root: builds the context (settings, store, host adapters, the change
lock, jobs), the reconciler, the services and the watcher, once, and starts them.

Nothing else wires the appliance together: the API, the CLI, ``zds demo`` and the tests
all get an :class:`Engine` from :meth:`Engine.real` or :meth:`Engine.create` with host
adapters from :mod:`appliance.host.factory`. Services receive what they need and never
import this module.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from appliance import actions as rc
from appliance.adoption import adopt
from appliance.context import Context
from appliance.host.factory import HostAdapters, real_hosts
from appliance.jobs import JobManager
from appliance.metrics import service as metrics_service
from appliance.policies.records import PolicyRecords
from appliance.policies.service import PolicyService
from appliance.probes import service as probe_service
from appliance.reconciler import DEVICE_WAIT, Reconciler
from appliance.replication.service import ReplicationService
from appliance.services.cluster import ClusterService, PoolJobJournal
from appliance.services.datastores import DatastoreService
from appliance.services.groups import InitiatorGroupService
from appliance.services.pools import PoolService
from appliance.services.snapshots import SnapshotService
from appliance.services.system import ComponentHealth, SystemService
from appliance.services.tokens import TokenService
from appliance.settings import Settings
from appliance.store import Store
from appliance.transports.registry import TransportType
from appliance.watcher import Watcher

log = logging.getLogger(__name__)

# Start-up is background work: it may wait this long for the change lock.
START_LOCK_WAIT = 3600.0


class Engine:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.reconciler = Reconciler(ctx)
        self.pools = PoolService(ctx, self.reconciler)
        self.policy_records = PolicyRecords(ctx.store)
        self.datastores = DatastoreService(ctx, self.reconciler, self.pools,
                                           protection=self.policy_records.protection)
        self.groups = InitiatorGroupService(ctx, self.reconciler)
        self.snapshots = SnapshotService(ctx, self.reconciler, self.datastores)
        self.policies = PolicyService(ctx, self.policy_records, ctx.hosts.vsphere,
                                      ctx.hosts.hooks)
        self.cluster = ClusterService(ctx, self.reconciler, self.pools)
        # in a pair, a job about a pool is noted on it while it runs (docs/ha.md)
        ctx.jobs.journal = PoolJobJournal(self.cluster)
        self.system = SystemService(ctx, self.reconciler, checks={
            "snapshot_policies": lambda: ComponentHealth(*self.policies.health())},
            cluster_role=self.cluster.role)
        self.tokens = TokenService(ctx.store)
        self.probes = probe_service.build(ctx, ctx.hosts.probes, self.system.version)
        self.metrics = metrics_service.build(ctx, ctx.hosts.iostats, self.probes)
        # replication: a replicated datastore is not deleted, health shows failed/late runs
        self.replication = ReplicationService(ctx, self.datastores, self.reconciler)
        self.datastores.delete_guards.append(self.replication.guard_delete)
        self.datastores.create_finishers.append(self.replication.finish_promote)
        self.system.checks["replication"] = self.replication.health
        # a replication with after_snapshot_policy sends what a policy run snapshotted
        self.policies.after_snapshots.append(self.replication.after_snapshots)
        self.watcher = Watcher(
            self.reconciler, self.datastores.finish_interrupted,
            ctx.settings.health_interval, ctx.settings.reconcile_interval,
            ctx.settings.list_refresh_interval,
            also=[self.cluster.watch],  # pacemaker's view, for health and the 503
            restart_after=ctx.settings.daemon_restart_after)
        self.start_report: rc.ReconcileReport | None = None

    @classmethod
    def create(cls, settings: Settings, hosts: HostAdapters, store: Store | None = None,
               transports: Sequence[TransportType] | None = None) -> Engine:
        return cls(Context.create(settings, hosts, store, transports))

    @classmethod
    def real(cls, settings: Settings) -> Engine:
        """An engine on this machine's real ZFS, LIO, ganesha and probe tools."""
        return cls.create(settings, real_hosts(settings))

    # what callers reach most often
    @property
    def settings(self) -> Settings:
        return self.ctx.settings

    @property
    def store(self) -> Store:
        return self.ctx.store

    @property
    def jobs(self) -> JobManager:
        return self.ctx.jobs

    # --- start-up -------------------------------------------------------------------

    def start(self, daemon_wait: float = 30.0) -> rc.ReconcileReport:
        """After ``zpool import``: recover jobs, adopt pools' datastores, finish what a
        crash interrupted, then make every transport's daemon (LIO, ganesha...) match the
        records (in batches)."""
        ctx = self.ctx
        interrupted = ctx.jobs.recover()
        if interrupted:
            log.warning("%d jobs were interrupted by a restart and marked failed", interrupted)
        self.policies.recover()
        t0 = time.monotonic()
        with ctx.lock.hold("start-up", timeout=START_LOCK_WAIT):
            self.replication.start()
            if ctx.zfs.available():
                imported = self.pools.imported()
                # an HA node that died holding a pool: the other node has it now
                self.cluster.forget_departed(imported)
                adopt(ctx, imported)
                # notes of jobs this node ran on its pools and that finished by the
                # restart (recover above) go; a dead peer's become interrupted rows
                self.cluster.settle_jobs_of(imported)
                self.pools.keep_snapshot_counts(imported)
                self.datastores.finish_interrupted()
                self._wait_for_daemons(daemon_wait)
            # (a zvol whose /dev link udev has not made yet is waited for in there)
            report = self.reconciler.full(wait=START_LOCK_WAIT,
                                          device_wait=max(daemon_wait, DEVICE_WAIT))
        for err in report.errors:
            log.error("start-up reconcile: %s", err)
        log.info("start-up: %d actions applied, %d failed in %.1f s", len(report.applied),
                 len(report.failed), time.monotonic() - t0)
        self.reconciler.check()
        self.reconciler.started(f"started in {time.monotonic() - t0:.1f} s")
        self.start_report = report
        return report

    def start_background(self) -> threading.Thread:
        """:meth:`start`, then the watcher and the scheduler, in a thread: the API answers
        (health says "starting") while thousands of exports and LUNs are restored."""
        def run() -> None:
            try:
                self.start()
            except Exception:
                log.exception("start-up failed")
                self.reconciler.started("start-up failed: see the log")
            self.watcher.start()
            self.ctx.scheduler.start()

        thread = threading.Thread(target=run, name="zds-start", daemon=True)
        thread.start()
        return thread

    def _wait_for_daemons(self, timeout: float) -> None:
        """At boot ganesha may still be registering on DBus: give it (and every daemon a
        ready datastore needs) a moment before the first reconcile, so datastores are
        served when health says ok."""
        records = [r for r in self.ctx.store.list_datastores() if r.state == "ready"]
        wanted = [t for t, recs in self.ctx.transports.grouped(records) if recs]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(t.available() for t in wanted):
                return
            time.sleep(1.0)

    def stop(self) -> None:
        """The API is stopping: no more scheduled runs or reconciles, and the jobs still
        running are recorded as interrupted (then cancelled) while the store is open."""
        self.ctx.scheduler.stop()
        self.watcher.stop()
        self.datastores.close()
        self.ctx.jobs.shutdown()

    def close(self) -> None:
        self.stop()
        self.ctx.store.close()

