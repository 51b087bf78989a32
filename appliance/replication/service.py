"""Replication: a datastore's snapshots to another ZDS appliance (or any OpenZFS host over
SSH), incremental and resumable, and the promotion of a replica into a served datastore.
The use cases the API and the engine call, in three parts along their seams:

- the source side (:mod:`.source`): PUT /replications/{name} records what goes where;
  every run is a job on the one clock (:class:`appliance.scheduler.Scheduler`): on the
  replication's own ``interval``, on request (``run_now``), or after a snapshot policy
  snapshotted the datastore (``after_snapshots``, the hook the policies call);
- the target side (:mod:`.target`): the source's key is authorized for one dataset
  prefix (PUT /replication/authorized-keys/{name}); replicas arrive there unmounted and
  read-only, carrying ``zds:replication``;
- promote (:mod:`.promote`): POST /replications/{name}/promote turns a replica into a
  datastore served under the same protocol, without the source.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Sequence
from dataclasses import replace

from appliance import validate
from appliance.context import Context
from appliance.errors import Conflict, InvalidInput, NotFound
from appliance.host.ssh import AuthorizedKey, host_name, public_key, require_dataset_name
from appliance.host.zfs_send import TRANSPORTS
from appliance.jobs import Job
from appliance.model import DATASTORE_PARENT, DatastoreRecord
from appliance.reconciler import Reconciler
from appliance.replication.model import (
    MIN_BANDWIDTH,
    MIN_INTERVAL,
    ReplicationRecord,
    ReplicationSpec,
    TargetSpec,
    parse_interval,
)
from appliance.replication.part import ReplicationPart
from appliance.replication.promote import Promoter
from appliance.replication.source import SourceRuns, task_name
from appliance.replication.store import ReplicationStore
from appliance.replication.target import TargetSide
from appliance.replication.views import (
    CheckView,
    Identity,
    OutgoingView,
    PromoteRequest,
    PromoteResult,
    ReplicationRequest,
    ReplicationView,
)
from appliance.services.datastores import DatastoreService
from appliance.services.system import ComponentHealth

# a scheduled replication is late (health: degraded) when its lag passes this many
# intervals plus a grace for the transfer itself
LATE_INTERVALS = 2
LATE_GRACE = 600.0


class ReplicationService(ReplicationPart):
    """Outgoing replications' records, health and guards; runs, keys and promote are
    its parts' (``source``, ``target``, ``promoter``)."""

    def __init__(self, ctx: Context, datastores: DatastoreService,
                 reconciler: Reconciler) -> None:
        super().__init__(ctx, ReplicationStore(ctx.store))
        self.source = SourceRuns(ctx, self.records, datastores)
        self.target = TargetSide(ctx, self.records)
        self.promoter = Promoter(ctx, self.records, datastores, reconciler, self.target)
        for rec in self.records.list():
            self.source.register(rec)

    def start(self) -> None:
        """At start-up (after JobManager.recover): records the runs a restart interrupted
        as failed, forgets promotes that never got a record, and renders the authorized
        keys file."""
        for rec in self.records.list():  # runs a restart interrupted (their jobs failed)
            if rec.status.state == "running" and not self.job_running(rec):
                self.records.set_status(rec.name, replace(
                    rec.status, state="failed", failures=rec.status.failures + 1,
                    last_error={"code": "interrupted", "message": "the API stopped during "
                                "this run; the next run resumes what the target kept"}))
        self.promoter.forget_unrecorded()
        self.target.render_keys()

    def validate(self, name: str, req: ReplicationRequest) -> ReplicationSpec:
        validate.resource_name(name, "replication name")
        validate.resource_name(req.datastore, "datastore name")
        t = req.target
        host = host_name(t.host)
        if not isinstance(t.port, int) or not 1 <= t.port <= 65535:
            raise InvalidInput(f"invalid port {t.port!r}: 1-65535")
        validate.unix_user(t.user)
        dataset = require_dataset_name(t.dataset, "target dataset")
        if "/" not in dataset:
            raise InvalidInput("the target dataset must be below a pool (pool/replicas/NAME), "
                               "not a pool itself")
        if dataset.split("/")[1:2] == [DATASTORE_PARENT]:
            raise InvalidInput(f"the target dataset may not live in {dataset.split('/')[0]}/"
                               f"{DATASTORE_PARENT}: a ZDS target serves what is there")
        if t.host_key is not None:
            public_key(t.host_key, "host key")
        interval = None
        if req.interval is not None:
            try:
                interval = parse_interval(req.interval)
            except ValueError:
                raise InvalidInput(f"invalid interval {req.interval!r}: seconds, or a number "
                                   "with s, m, h or d (e.g. 15m)") from None
            if interval < MIN_INTERVAL:
                raise InvalidInput(f"interval {interval} s is below the minimum "
                                   f"{MIN_INTERVAL} s")
        limit = None
        if req.bandwidth_limit is not None:
            limit = validate.parse_size(req.bandwidth_limit, "bandwidth_limit")
            if limit < MIN_BANDWIDTH:
                raise InvalidInput("bandwidth_limit must be at least 64K (bytes per second)")
        if req.transport not in TRANSPORTS:
            raise InvalidInput(f"invalid transport {req.transport!r}: one of "
                               f"{', '.join(TRANSPORTS)}")
        return ReplicationSpec(
            name=name, datastore=req.datastore,
            target=TargetSpec(host=host, dataset=dataset, port=t.port, user=t.user),
            interval=interval, after_snapshot_policy=bool(req.after_snapshot_policy),
            take_snapshot=bool(req.take_snapshot), raw=bool(req.raw), bandwidth_limit=limit,
            enabled=bool(req.enabled), transport=req.transport)

    def put(self, name: str, req: ReplicationRequest) -> tuple[ReplicationView, bool]:
        """Creates or updates an outgoing replication (nothing is sent yet: the first run
        is the first scheduled slot, or POST .../run). Idempotent."""
        spec = self.validate(name, req)
        with self.ctx.lock.hold(f"PUT replication {name}"):
            ds = self.ctx.store.get_datastore(spec.datastore)
            if ds is None:
                raise NotFound(f"datastore {spec.datastore!r} not found")
            if ds.state not in ("ready", "error"):
                raise Conflict(f"datastore {spec.datastore} is {ds.state}")
            for other in self.records.list():
                if other.name != name and other.spec.target == spec.target:
                    raise Conflict(f"replication {other.name} already sends to "
                                   f"{spec.target.host}:{spec.target.dataset}")
            existing = self.records.get(name)
            if existing is not None:
                old = existing.spec
                if old.datastore != spec.datastore or old.target.dataset != spec.target.dataset:
                    raise Conflict(f"replication {name} sends {old.datastore} to "
                                   f"{old.target.dataset}: datastore and target dataset "
                                   "cannot change (the cursor would mean nothing); create "
                                   "another replication")
                rec = replace(existing, spec=spec)
            else:
                rec = ReplicationRecord(spec=spec, created=time.time())
            if req.target.host_key is not None:
                self.ssh.pin(spec.target.endpoint, req.target.host_key)
            self.records.put(rec)
        self.source.register(rec)
        return self.get(name), existing is None

    def list(self) -> builtins.list[ReplicationView]:
        outgoing = {r.name: self._outgoing(r) for r in self.records.list()}
        incoming = {i.name: i for i in self.target.incoming()}
        return [ReplicationView(n, outgoing.get(n), incoming.get(n))
                for n in sorted(set(outgoing) | set(incoming))]

    def get(self, name: str) -> ReplicationView:
        validate.resource_name(name, "replication name")
        rec = self.records.get(name)
        inc = [i for i in self.target.incoming() if i.name == name]
        if rec is None and not inc:
            raise NotFound(f"replication {name!r} not found (neither sent from nor received "
                           "on this appliance)")
        return ReplicationView(name, self._outgoing(rec) if rec else None,
                               inc[0] if inc else None)

    def _outgoing(self, rec: ReplicationRecord) -> OutgoingView:
        pinned: builtins.list[str] = []
        if self.ctx.hosts.ssh is not None:
            pinned = self.ssh.pinned(rec.spec.target.endpoint)
        next_run = None
        if rec.spec.interval and rec.spec.enabled:
            try:
                last = self.ctx.scheduler.state(task_name(rec.name)).last_slot
            except NotFound:
                last = None
            next_run = (last or time.time()) + rec.spec.interval
        return OutgoingView(rec, pinned[0] if pinned else None, rec.status.lag(time.time()),
                            rec.status.rate, next_run)

    def delete(self, name: str) -> None:
        """Forgets an outgoing replication: releases its hold and destroys its bookmarks
        on the source. The replica on the target is not touched."""
        rec = self.record(name)
        if rec.status.state == "running" and self.job_running(rec):
            raise Conflict(f"replication {name} is running (job {rec.status.job_id}): cancel "
                           "it first (POST /api/v1/jobs/ID/cancel)")
        with self.ctx.lock.hold(f"DELETE replication {name}"):
            ds = self.ctx.store.get_datastore(rec.spec.datastore)
            if ds is not None and self.ctx.zfs.get_dataset(ds.spec.dataset, ("type",)):
                self.source.drop_cursor(name, ds.spec.dataset)
            self.records.delete(name)
        self.ctx.scheduler.unregister(task_name(name), forget=True)

    def guard_delete(self, rec: DatastoreRecord) -> None:
        """Datastore delete refuses while a replication sends it (its cursor holds
        snapshots, and the admin should decide what happens to the replicas)."""
        names = [r.name for r in self.records.of_datastore(rec.name)]
        if names:
            raise Conflict(
                f"datastore {rec.name} is replicated by {', '.join(names)}: delete the "
                "replication first (DELETE /api/v1/replications/NAME; the replica on the "
                "target is kept). Nothing was deleted", detail={"replications": names})

    def health(self) -> ComponentHealth:
        """From the records only (no host call): failed runs and late replications."""
        now = time.time()
        problems = []
        recs = [r for r in self.records.list() if r.spec.enabled]
        worst = 0.0
        for r in recs:
            st = r.status
            lag = st.lag(now)
            worst = max(worst, lag or 0.0)
            if st.state == "failed" and st.last_error:
                problems.append(f"{r.name}: last run failed: {st.last_error.get('message')}")
            elif r.spec.interval and not (st.state == "running" and self.job_running(r)):
                limit = LATE_INTERVALS * r.spec.interval + LATE_GRACE
                since = lag if lag is not None else now - r.created
                if since > limit:
                    problems.append(f"{r.name}: {since:.0f} s behind (interval "
                                    f"{r.spec.interval} s)")
        if problems:
            return ComponentHealth(False, "; ".join(problems))
        if not recs:
            return ComponentHealth(True, "no replication from this appliance")
        return ComponentHealth(True, f"{len(recs)} replication(s), largest lag {worst:.0f} s")

    # --- the parts' use cases, as the API and the engine call them --------------------------
    def run_now(self, name: str) -> Job:
        """A run now, as a job (409 while one runs). What ``POST .../run`` does."""
        return self.source.run_now(name)

    def after_snapshots(self, datastore: str) -> builtins.list[Job]:
        """The snapshot policies' hook (:meth:`SourceRuns.after_snapshots`)."""
        return self.source.after_snapshots(datastore)

    def check(self, name: str) -> CheckView:
        """What the next run would send, asked of the target now."""
        return self.source.check(name)

    def identity(self) -> Identity:
        return self.target.identity()

    def authorized_keys(self) -> builtins.list[AuthorizedKey]:
        return self.target.authorized_keys()

    def authorize(self, name: str, key: str, prefix: str,
                  sources: Sequence[str] = ()) -> tuple[AuthorizedKey, bool]:
        """:meth:`TargetSide.authorize`."""
        return self.target.authorize(name, key, prefix, sources)

    def revoke(self, name: str) -> None:
        self.target.revoke(name)

    def promote(self, name: str, req: PromoteRequest) -> PromoteResult:
        """:meth:`Promoter.promote`."""
        return self.promoter.promote(name, req)

    def finish_promote(self, rec: DatastoreRecord) -> bool:
        """:meth:`Promoter.finish_promote` (start-up, for a ``creating`` record)."""
        return self.promoter.finish_promote(rec)
