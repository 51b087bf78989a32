"""Replication: a datastore's snapshots to another ZDS appliance (or any OpenZFS host over
SSH), incremental and resumable, and the promotion of a replica into a served datastore.

Source side (this appliance owns the datastore):
  PUT /replications/{name} records what goes where; every run is a job on the one clock
  (:class:`appliance.scheduler.Scheduler`): on the replication's own ``interval``, on
  request (:meth:`ReplicationService.run_now`), or after a snapshot policy snapshotted
  the datastore (:meth:`ReplicationService.after_snapshots`, the hook the policies call).
  A run plans (:mod:`appliance.replication.plan`) and sends until the target holds the
  newest snapshot, then moves the cursor: a hold on the last sent snapshot (so nothing
  prunes it by accident) and a bookmark of it (so an incremental still works once it is
  pruned on purpose).

Target side (this appliance receives):
  the source's key is authorized for one dataset prefix (PUT
  /replication/authorized-keys/{name}); replicas arrive there unmounted and read-only,
  carrying ``zds:replication``; POST /replications/{name}/promote turns one into a
  datastore served under the same protocol, without the source.
"""

from __future__ import annotations

import builtins
import contextlib
import ipaddress
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from appliance import validate
from appliance.adoption import record_from_properties
from appliance.context import Context
from appliance.errors import (
    Conflict,
    InsufficientSpace,
    InvalidInput,
    NotFound,
    Unavailable,
    ZdsError,
)
from appliance.host.ssh import (
    AuthorizedKey,
    Endpoint,
    SshHost,
    host_name,
    public_key,
    require_dataset_name,
)
from appliance.host.zfs import DatasetInfo
from appliance.host.zfs_send import (
    TRANSPORTS,
    PartialReceive,
    ReceiveSpec,
    SnapRef,
    StaleResume,
    TargetState,
    TransferCancelled,
    ZfsSendHost,
)
from appliance.jobs import Job, JobCancelled, JobContext
from appliance.model import (
    DATASTORE_PARENT,
    ChapSettings,
    DatastoreRecord,
    DatastoreSpec,
    datastore_dataset,
    zds_dataset,
)
from appliance.reconciler import Reconciler
from appliance.replication import plan as planner
from appliance.replication.model import (
    MIN_BANDWIDTH,
    MIN_INTERVAL,
    REPLICA_PROPERTIES,
    ReplicationRecord,
    ReplicationSpec,
    TargetSpec,
    bookmark_prefix,
    hold_tag,
    parse_interval,
    snapshot_prefix,
)
from appliance.replication.store import Promotion, ReplicationStore
from appliance.scheduler import Task, every
from appliance.services.datastores import DatastoreRequest, DatastoreService, DatastoreView
from appliance.services.system import ComponentHealth

log = logging.getLogger(__name__)

JOB_LOCK_WAIT = 3600.0
MAX_STEPS = 6  # resume + full + incremental, with room for a stale resume and a retry
TASK_PREFIX = "replication:"
# a scheduled replication is late (health: degraded) when its lag passes this many
# intervals plus a grace for the transfer itself
LATE_INTERVALS = 2
LATE_GRACE = 600.0
INCOMING_PROPERTIES = ("type", "used", "referenced", "receive_resume_token", "readonly",
                       *REPLICA_PROPERTIES, "zds:name", "zds:protocol", "zds:size",
                       "zds:serial", "zds:iqn", "zds:nqn", "zds:managed")


@dataclass(frozen=True)
class TargetRequest:
    host: str
    dataset: str
    port: int = 22
    user: str = "root"
    host_key: str | None = None  # pin this key; None: keep what is pinned / pin on contact


@dataclass(frozen=True)
class ReplicationRequest:
    """The body of ``PUT /replications/{name}`` as sent (not yet validated)."""

    datastore: str
    target: TargetRequest
    interval: int | str | None = None
    after_snapshot_policy: bool = False
    take_snapshot: bool = True
    raw: bool = False
    bandwidth_limit: int | str | None = None
    enabled: bool = True
    transport: str = "ssh"


@dataclass(frozen=True)
class OutgoingView:
    record: ReplicationRecord
    host_key: str | None  # pinned for the target (None before first contact)
    lag: float | None  # seconds since the newest snapshot the target holds was taken
    rate: float  # bytes/s of the last successful run
    next_run: float | None  # unix time of the next scheduled run


@dataclass(frozen=True)
class IncomingView:
    name: str
    dataset: str
    pool: str
    source: str  # "source-host/datastore"
    datastore: str  # the source's datastore name
    protocol: str
    snapshots: int
    newest_snapshot: str | None
    newest_created: int | None
    lag: float | None
    resume_pending: bool
    used: int
    referenced: int


@dataclass(frozen=True)
class ReplicationView:
    name: str
    outgoing: OutgoingView | None
    incoming: IncomingView | None


@dataclass(frozen=True)
class CheckView:
    name: str
    target: str
    host_key: str | None
    exists: bool
    snapshots: int
    newest: str | None
    resume_pending: bool
    available: int
    next_step: str
    in_sync: bool


@dataclass(frozen=True)
class PromoteRequest:
    """``POST /replications/{name}/promote``. Access (NFS clients, initiators, initiator
    groups) is what the request gives; a None field is empty, or with ``keep_access`` the
    source's, as it travelled in the replica's ``zds:access`` (which a source sets as it
    likes, so it is never taken unasked)."""

    name: str | None = None
    identity: Literal["new", "keep"] = "new"
    nfs_path: Literal["source", "local"] | None = None
    nfs_clients: list[dict[str, str]] | None = None
    initiators: list[str] | None = None
    initiator_groups: list[str] | None = None
    chap: ChapSettings | None = None
    keep_access: bool = False
    nvme_hosts: list[str] | None = None
    nvme_initiator_groups: list[str] | None = None


@dataclass(frozen=True)
class PromoteResult:
    view: DatastoreView
    notes: list[str]


@dataclass(frozen=True)
class Identity:
    hostname: str
    public_key: str
    host_keys: list[str]


class ReplicationService:
    def __init__(self, ctx: Context, datastores: DatastoreService,
                 reconciler: Reconciler) -> None:
        self.ctx = ctx
        self.datastores = datastores
        self.reconciler = reconciler
        self.records = ReplicationStore(ctx.store)
        self._policy_runs: set[str] = set()  # runs triggered by a snapshot policy
        self._lock = threading.Lock()
        for rec in self.records.list():
            self._register(rec)

    # --- hosts --------------------------------------------------------------------------
    @property
    def ssh(self) -> SshHost:
        ssh = self.ctx.hosts.ssh
        if ssh is None:
            raise Unavailable("replication is not available: no SSH adapter on this host")
        return ssh

    @property
    def zsend(self) -> ZfsSendHost:
        zs = self.ctx.hosts.zfs_send
        if zs is None:
            raise Unavailable("replication is not available: no zfs send adapter here")
        return zs

    # --- start-up -----------------------------------------------------------------------
    def start(self) -> None:
        """At start-up (after JobManager.recover): records the runs a restart interrupted
        as failed, and renders the authorized keys file from the records (it may have been
        lost; records and file live in the same state directory)."""
        for rec in self.records.list():  # runs a restart interrupted (their jobs failed)
            if rec.status.state == "running" and not self._job_running(rec):
                self.records.set_status(rec.name, replace(
                    rec.status, state="failed", failures=rec.status.failures + 1,
                    last_error={"code": "interrupted", "message": "the API stopped during "
                                "this run; the next run resumes what the target kept"}))
        for p in self.records.promotions():  # recorded, then died before the record
            if self.ctx.store.get_datastore(p.datastore) is None:
                self.records.delete_promotion(p.datastore)
        if self.ctx.hosts.ssh is None:
            return
        keys = self.records.source_keys()
        try:
            if keys or self.ssh.authorized():
                self.ssh.set_authorized(keys)
        except (OSError, ZdsError) as exc:
            log.error("cannot write the replication authorized keys: %s", exc)

    # --- validation ---------------------------------------------------------------------
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

    # --- records ------------------------------------------------------------------------
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
        self._register(rec)
        return self.get(name), existing is None

    def _record(self, name: str) -> ReplicationRecord:
        validate.resource_name(name, "replication name")
        rec = self.records.get(name)
        if rec is None:
            raise NotFound(f"replication {name!r} not found (on this appliance as a source)")
        return rec

    def list(self) -> builtins.list[ReplicationView]:
        outgoing = {r.name: self._outgoing(r) for r in self.records.list()}
        incoming = {i.name: i for i in self._incoming()}
        return [ReplicationView(n, outgoing.get(n), incoming.get(n))
                for n in sorted(set(outgoing) | set(incoming))]

    def get(self, name: str) -> ReplicationView:
        validate.resource_name(name, "replication name")
        rec = self.records.get(name)
        inc = [i for i in self._incoming() if i.name == name]
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
                last = self.ctx.scheduler.state(_task(rec.name)).last_slot
            except NotFound:
                last = None
            next_run = (last or time.time()) + rec.spec.interval
        return OutgoingView(rec, pinned[0] if pinned else None, rec.status.lag(time.time()),
                            rec.status.rate, next_run)

    def delete(self, name: str) -> None:
        """Forgets an outgoing replication: releases its hold and destroys its bookmarks
        on the source. The replica on the target is not touched."""
        rec = self._record(name)
        if rec.status.state == "running" and self._job_running(rec):
            raise Conflict(f"replication {name} is running (job {rec.status.job_id}): cancel "
                           "it first (POST /api/v1/jobs/ID/cancel)")
        with self.ctx.lock.hold(f"DELETE replication {name}"):
            ds = self.ctx.store.get_datastore(rec.spec.datastore)
            if ds is not None and self.ctx.zfs.get_dataset(ds.spec.dataset, ("type",)):
                self._drop_cursor(name, ds.spec.dataset)
            self.records.delete(name)
        self.ctx.scheduler.unregister(_task(name), forget=True)

    def _close(self, endpoint: Endpoint) -> None:
        try:
            self.ssh.close(endpoint)
        except ZdsError as exc:  # the connection times out by itself (ControlPersist)
            log.warning("closing the connection to %s: %s", endpoint.describe(), exc.message)

    def _job_running(self, rec: ReplicationRecord) -> bool:
        if not rec.status.job_id:
            return False
        try:
            return not self.ctx.jobs.get(rec.status.job_id).done
        except NotFound:
            return False

    # --- the target: keys and replicas ----------------------------------------------------
    def identity(self) -> Identity:
        return Identity(self.ctx.local.hostname(), self.ssh.public_key(), self.ssh.host_keys())

    def authorized_keys(self) -> builtins.list[AuthorizedKey]:
        return self.records.source_keys()

    def authorize(self, name: str, key: str, prefix: str,
                  sources: Sequence[str] = ()) -> tuple[AuthorizedKey, bool]:
        """Lets the source holding ``key`` receive into ``prefix`` and below (and nothing
        else) through the gate; creates ``prefix`` when missing."""
        validate.resource_name(name, "key name")
        entry = AuthorizedKey(name, public_key(key), self._prefix(prefix),
                              tuple(_source(s) for s in sources))
        with self.ctx.lock.hold(f"authorize replication key {name}"):
            for other in self.records.source_keys():
                if other.name == name:
                    continue
                if other.public_key == entry.public_key:
                    raise Conflict(f"that key is authorized already as {other.name!r}")
                if _nested(entry.prefix, other.prefix):
                    # the gate lets a key receive, abort receives and create datasets
                    # anywhere below its prefix: nested prefixes let one source reach the
                    # other's replicas
                    raise Conflict(
                        f"the dataset prefix {entry.prefix} overlaps {other.prefix}, "
                        f"authorized for key {other.name}: one source could receive into "
                        "(or drop the receives of) the other's replicas. Give each key a "
                        "dataset of its own, neither inside the other (e.g. "
                        f"{entry.prefix.split('/')[0]}/replicas/{name}). Nothing was changed",
                        detail={"key": other.name, "dataset_prefix": other.prefix})
            created = all(k.name != name for k in self.records.source_keys())
            if self.ctx.zfs.get_dataset(entry.prefix, ("type",)) is None:
                self.ctx.zfs.create_filesystem(entry.prefix, {"canmount": "off"})
            self.records.put_key(entry)
            self.ssh.set_authorized(self.records.source_keys())
        return entry, created

    def _prefix(self, prefix: str) -> str:
        prefix = require_dataset_name(prefix, "dataset prefix")
        parts = prefix.split("/")
        if len(parts) < 2:
            raise InvalidInput("the prefix must be a dataset below a pool (e.g. "
                               "tank/replicas/zds1): a whole pool would let the source "
                               "overwrite its datastores")
        own = zds_dataset(prefix)
        if own is not None:
            why = ("datastores there are served" if parts[1] == DATASTORE_PARENT else
                   "ZDS keeps its own data there (probe scratch, checks)")
            raise InvalidInput(f"the prefix {prefix} may not be in {own}: {why}. Use a "
                               f"dataset of its own, e.g. {parts[0]}/replicas/NAME",
                               detail={"dataset_prefix": prefix, "zds_dataset": own})
        pools = {p.name for p in self.ctx.zfs.list_pools()}
        if parts[0] not in pools:
            raise NotFound(f"pool {parts[0]!r} is not imported here")
        info = self.ctx.zfs.get_dataset(prefix, ("type",))
        if info is not None and info.type != "filesystem":
            raise Conflict(f"{prefix} is a {info.type}, not a filesystem")
        return prefix

    def revoke(self, name: str) -> None:
        validate.resource_name(name, "key name")
        with self.ctx.lock.hold(f"revoke replication key {name}"):
            if not self.records.delete_key(name):
                raise NotFound(f"no authorized replication key {name!r}")
            self.ssh.set_authorized(self.records.source_keys())

    def _incoming(self) -> builtins.list[IncomingView]:
        """Replicas held by this appliance: datasets carrying zds:replication (one ``zfs
        get -r`` per pool, one snapshot listing per replica)."""
        zfs = self.ctx.zfs
        if not zfs.available():
            return []
        found = []
        now = time.time()
        for pool in zfs.list_pools():
            served = f"{pool.name}/{DATASTORE_PARENT}/"
            for ds in zfs.list_datasets(pool.name, INCOMING_PROPERTIES):
                name = ds.prop("zds:replication")
                if not name or ds.name.startswith(served):
                    continue
                try:
                    snaps = zfs.list_snapshots(ds.name)
                except NotFound:
                    snaps = []
                newest = snaps[-1] if snaps else None
                created = newest.int_prop("creation") if newest else None
                found.append(IncomingView(
                    name=name, dataset=ds.name, pool=pool.name,
                    source=ds.prop("zds:replica_of"), datastore=ds.prop("zds:name"),
                    protocol=ds.prop("zds:protocol"), snapshots=len(snaps),
                    newest_snapshot=newest.name.split("@", 1)[1] if newest else None,
                    newest_created=created,
                    lag=max(0.0, now - created) if created else None,
                    resume_pending=ds.prop("receive_resume_token") not in ("", "-"),
                    used=ds.int_prop("used"), referenced=ds.int_prop("referenced")))
        return sorted(found, key=lambda i: (i.name, i.dataset))

    # --- running ------------------------------------------------------------------------
    def _register(self, rec: ReplicationRecord) -> None:
        spec = rec.spec
        interval = spec.interval if spec.enabled else None
        due = every(interval) if interval else _never

        def run(ctx: JobContext, slot: float) -> dict[str, Any]:
            return self._run(rec.name, ctx)

        self.ctx.scheduler.register(Task(_task(rec.name), "replication.run", rec.name, due,
                                         run, long=True))

    def run_now(self, name: str) -> Job:
        """A run now, as a job (409 while one runs). What ``POST .../run`` does."""
        self._record(name)
        return self.ctx.scheduler.run_now(_task(name))

    def after_snapshots(self, datastore: str) -> builtins.list[Job]:
        """For snapshot policies: after a policy run snapshotted ``datastore``, run every
        enabled replication of it that has ``after_snapshot_policy`` (without taking a
        snapshot of its own). A replication that is running already is skipped: it
        sends the new snapshot at its next run."""
        jobs = []
        for rec in self.records.of_datastore(datastore):
            if not (rec.spec.enabled and rec.spec.after_snapshot_policy):
                continue
            with self._lock:
                self._policy_runs.add(rec.name)
            try:
                jobs.append(self.ctx.scheduler.run_now(_task(rec.name)))
            except Conflict:
                with self._lock:
                    self._policy_runs.discard(rec.name)
                log.info("replication %s is running: the policy's snapshot goes next time",
                         rec.name)
        return jobs

    def _run(self, name: str, job: JobContext) -> dict[str, Any]:
        with self._lock:
            by_policy = name in self._policy_runs
            self._policy_runs.discard(name)
        rec = self._record(name)
        status = replace(rec.status, state="running", job_id=job.job_id, last_run=time.time())
        self.records.set_status(name, status)
        t0 = time.monotonic()
        try:
            try:
                result = self._replicate(rec, job,
                                         take=rec.spec.take_snapshot and not by_policy)
            finally:
                self._close(rec.spec.target.endpoint)
        except (JobCancelled, TransferCancelled) as exc:
            kept = _bytes(exc.detail) if isinstance(exc, ZdsError) else 0
            self._finish(name, state="cancelled", last_finished=time.time(),
                         last_error={"code": "cancelled", "message": "cancelled"},
                         resumable_bytes=kept)
            raise JobCancelled() from exc
        except ZdsError as exc:
            current = self._record(name).status
            self._finish(name, state="failed", last_finished=time.time(),
                         failures=current.failures + 1,
                         last_error={"code": exc.code, "message": exc.message},
                         resumable_bytes=_bytes(exc.detail))
            raise
        except Exception as exc:  # a bug or an OS error: recorded, never left "running"
            current = self._record(name).status
            self._finish(name, state="failed", last_finished=time.time(),
                         failures=current.failures + 1,
                         last_error={"code": "internal", "message": f"{type(exc).__name__}: "
                                                                    f"{exc}"})
            raise
        now = time.time()
        current = self._record(name).status
        self._finish(name, state="ok", last_finished=now, last_success=now, failures=0,
                     last_error=None, resumable_bytes=0, runs=current.runs + 1,
                     last_bytes=result["bytes"], last_seconds=round(time.monotonic() - t0, 3),
                     total_bytes=current.total_bytes + result["bytes"],
                     last_snapshot=result["snapshot"],
                     last_snapshot_created=result["snapshot_created"],
                     steps=tuple(result["steps"]))
        result["seconds"] = round(time.monotonic() - t0, 3)
        return result

    def _finish(self, name: str, **changes: Any) -> None:
        rec = self.records.get(name)
        if rec is not None:  # deleted meanwhile: nothing to record
            self.records.set_status(name, replace(rec.status, **changes))

    def _replicate(self, rec: ReplicationRecord, job: JobContext,
                   take: bool) -> dict[str, Any]:
        spec = rec.spec
        ds = self.ctx.store.get_datastore(spec.datastore)
        if ds is None:
            raise NotFound(f"datastore {spec.datastore} no longer exists here: nothing to "
                           f"send. The replica {spec.target.dataset} on {spec.target.host} "
                           "is kept (promote it there, or delete this replication)")
        if ds.state != "ready":
            raise Conflict(f"datastore {spec.datastore} is {ds.state}: not replicated now")
        dataset = ds.spec.dataset
        endpoint = spec.target.endpoint
        zfs, zsend = self.ctx.zfs, self.zsend
        info = zfs.get_dataset(dataset, ("type", "mountpoint"))
        if info is None:
            raise NotFound(f"dataset {dataset} of datastore {spec.datastore} is missing")
        # the target first: unreachable, a refused key or a changed host key leave the
        # source as it was (no snapshot taken for nothing)
        first: TargetState | None = zsend.target_state(endpoint, spec.target.dataset)
        if take:
            with self.ctx.lock.hold(f"replication {spec.name}: snapshot", timeout=JOB_LOCK_WAIT):
                stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
                taken = {s.name.split("@", 1)[1] for s in zfs.list_snapshots(dataset)}
                snap, n = f"{snapshot_prefix(spec.name)}{stamp}", 1
                while snap in taken:  # two runs in one second
                    snap, n = f"{snapshot_prefix(spec.name)}{stamp}-{n}", n + 1
                zfs.snapshot(dataset, snap, {"zds:created_by": f"replication:{spec.name}",
                                             "zds:created_at": str(int(time.time()))})
        receive = self._receive_spec(spec, ds, info)
        steps: builtins.list[str] = []
        sent, moved = 0, 0.0
        state: TargetState | None = None
        source: builtins.list[SnapRef] = []
        marks: builtins.list[SnapRef] = []
        for _ in range(MAX_STEPS):
            job.check_cancelled()
            state = first or zsend.target_state(endpoint, spec.target.dataset)
            first = None
            source = _refs(zfs.list_snapshots(dataset))
            marks = zsend.bookmarks(dataset)
            try:
                # the token is the target's word: what it would send is checked first
                resume = zsend.resume_info(state.resume_token) if state.resume_token \
                    else None
                step = planner.plan(dataset, source, marks, state, spec.raw, resume)
            except StaleResume as exc:
                self._drop_partial(spec, exc, steps)
                continue
            if step.kind == "up_to_date":
                break
            assert step.send is not None
            if step.kind == "full" and not state.parent_exists:
                zsend.ensure_parent(endpoint, spec.target.dataset)
                state = zsend.target_state(endpoint, spec.target.dataset)
            need = zsend.estimate(step.send)
            if state.available and need > state.available:
                raise InsufficientSpace(
                    f"the target {spec.target.host}:{spec.target.dataset} has "
                    f"{validate.format_size(state.available)} free; {step.reason} needs "
                    f"about {need} bytes. Nothing was sent; free space there (or grow its "
                    "pool) and run again", detail={"needed": need,
                                                   "available": state.available})
            done_before = sent

            def report(n: int, _need: int = need, _before: int = done_before,
                       _what: str = step.reason) -> None:
                job.progress(min(0.99, n / _need) if _need else 0.5,
                             f"{_what}: {_before + n} bytes sent")

            try:
                stats = zsend.transfer(step.send, endpoint, receive,
                                       rate_limit=spec.bandwidth_limit, progress=report,
                                       cancel=job.cancel_event, transport=spec.transport)
            except StaleResume as exc:
                self._drop_partial(spec, exc, steps)
                continue
            except PartialReceive:
                continue  # appeared since we looked: the next plan resumes it
            sent += stats.bytes
            moved += stats.seconds
            steps.append(f"{step.kind}: {step.send.describe()} ({stats.bytes} bytes)")
            if step.kind != "resume" and step.send.snapshot == source[-1].name:
                # the target now holds the newest snapshot planned for: asking it again
                # costs a command through SSH and the gate (a snapshot taken meanwhile
                # goes with the next run)
                break
        else:
            raise Unavailable(f"replication {spec.name} did not reach the newest snapshot in "
                              f"{MAX_STEPS} steps: {'; '.join(steps)}")
        assert state is not None
        newest = source[-1]
        self._set_cursor(spec.name, dataset, source, newest, marks)
        return {"bytes": sent, "steps": steps, "snapshot": newest.short,
                "snapshot_created": newest.creation, "target": spec.target.dataset,
                "resumed": any(s.startswith("resume") for s in steps),
                "transfer_seconds": round(moved, 3)}

    def _drop_partial(self, spec: ReplicationSpec, exc: StaleResume,
                      steps: builtins.list[str]) -> None:
        """A partial receive on the target that cannot (or must not) be resumed: dropped
        there (``zfs receive -A``), so the next step sends from the newest common
        snapshot."""
        log.warning("replication %s: %s; dropping the partial receive", spec.name,
                    exc.message)
        self.zsend.abort_partial(spec.target.endpoint, spec.target.dataset)
        steps.append(f"dropped a partial receive that cannot resume ({exc.message})")

    def _receive_spec(self, spec: ReplicationSpec, ds: DatastoreRecord,
                      info: DatasetInfo) -> ReceiveSpec:
        props = {"zds:replication": spec.name,
                 "zds:replica_of": f"{self.ctx.local.hostname()}/{spec.datastore}",
                 "readonly": "on"}
        kept, dropped = self.datastores.transport(ds).storage.receive_properties(info)
        props.update(kept)
        return ReceiveSpec(spec.target.dataset, props, ("refreservation", *dropped))

    def _set_cursor(self, name: str, dataset: str, source: Sequence[SnapRef],
                    newest: SnapRef, marks: Sequence[SnapRef]) -> None:
        """Hold the newest sent snapshot, bookmark it, release the older cursor, prune
        the snapshots this replication took itself. ``marks``: the dataset's bookmarks as
        the run planned with them (only this replication changes its own)."""
        zsend, tag = self.zsend, hold_tag(name)
        with self.ctx.lock.hold(f"replication {name}: cursor", timeout=JOB_LOCK_WAIT):
            self._hold(newest.name, tag)
            mark = f"{dataset}#{bookmark_prefix(name)}{newest.createtxg}"
            if all(b.name != mark for b in marks):
                zsend.bookmark(newest.name, mark)
            for b in marks:
                if b.short.startswith(bookmark_prefix(name)) and b.name != mark:
                    zsend.destroy_bookmark(b.name)
            holds = self.ctx.zfs.holds([s.name for s in source])
            for snap, tags in holds.items():
                if tag in tags and snap != newest.name:
                    self._release(snap, tag)
            own = snapshot_prefix(name)
            clones = {r.origin for r in self.ctx.store.list_datastores() if r.origin}
            for s in source:
                if s.short.startswith(own) and s.name != newest.name and s.name not in clones \
                        and not set(holds.get(s.name, ())) - {tag}:
                    try:
                        self.ctx.zfs.destroy(s.name)
                    except ZdsError as exc:  # held meanwhile, or a clone: keep it
                        log.info("replication %s keeps %s: %s", name, s.name, exc.message)

    def _hold(self, snapshot: str, tag: str) -> None:
        """The cursor's hold; a retried run finds its own hold there already."""
        with contextlib.suppress(Conflict):
            self.ctx.zfs.hold(tag, [snapshot])

    def _release(self, snapshot: str, tag: str) -> None:
        """A hold already released (a retried drop, or the admin's) is fine."""
        with contextlib.suppress(NotFound):
            self.ctx.zfs.release(tag, [snapshot])

    def _drop_cursor(self, name: str, dataset: str) -> None:
        """Releases the hold, destroys the bookmarks and the snapshots this replication
        took (unless something else holds them or a clone depends on them)."""
        zsend, tag = self.zsend, hold_tag(name)
        snaps = [s.name for s in self.ctx.zfs.list_snapshots(dataset)]
        holds = self.ctx.zfs.holds(snaps)
        for snap, tags in holds.items():
            if tag in tags:
                self._release(snap, tag)
        for b in zsend.bookmarks(dataset):
            if b.short.startswith(bookmark_prefix(name)):
                zsend.destroy_bookmark(b.name)
        clones = {r.origin for r in self.ctx.store.list_datastores() if r.origin}
        own = f"@{snapshot_prefix(name)}"
        for snap in snaps:
            if own in snap and snap not in clones and not set(holds.get(snap, ())) - {tag}:
                try:
                    self.ctx.zfs.destroy(snap)
                except ZdsError as exc:
                    log.info("replication %s: keeping %s: %s", name, snap, exc.message)

    def check(self, name: str) -> CheckView:
        """Contacts the target now (pins its host key on first contact) and says what the
        next run would send. Errors are those of a run: unreachable, refused key, host key
        mismatch, refused by the target's gate."""
        rec = self._record(name)
        spec = rec.spec
        ds = self.ctx.store.get_datastore(spec.datastore)
        try:
            state = self.zsend.target_state(spec.target.endpoint, spec.target.dataset)
        finally:
            self._close(spec.target.endpoint)
        next_step, in_sync = "nothing to send", False
        if ds is None:
            next_step = f"datastore {spec.datastore} is gone: nothing to send"
        else:
            source = _refs(self.ctx.zfs.list_snapshots(ds.spec.dataset))
            try:
                if not source and spec.take_snapshot and not state.resume_token:
                    next_step = ("the run snapshots the datastore and sends it in full"
                                 if not state.exists else "the target holds "
                                 f"{state.dataset} already: diverged")
                else:
                    resume = self.zsend.resume_info(state.resume_token) \
                        if state.resume_token else None
                    step = planner.plan(ds.spec.dataset, source, self.zsend.bookmarks(
                        ds.spec.dataset), state, spec.raw, resume)
                    next_step, in_sync = step.reason, step.kind == "up_to_date"
                    if in_sync and spec.take_snapshot:
                        next_step += "; the next run snapshots and sends what changed since"
            except ZdsError as exc:
                next_step = f"{exc.code}: {exc.message}"
        pinned = self.ssh.pinned(spec.target.endpoint)
        newest = state.snapshots[-1].short if state.snapshots else None
        return CheckView(name, f"{spec.target.endpoint.describe()}:{spec.target.dataset}",
                         pinned[0] if pinned else None, state.exists, len(state.snapshots),
                         newest, state.resume_token is not None, state.available, next_step,
                         in_sync)

    # --- guards and health ----------------------------------------------------------------
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
            elif r.spec.interval and not (st.state == "running" and self._job_running(r)):
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

    # --- promote (target side) --------------------------------------------------------------
    def promote(self, name: str, req: PromoteRequest) -> PromoteResult:
        """Turns the replica ``name`` into a datastore served here, without the source:
        its dataset moves to <pool>/datastores/NAME (read-write, mounted), the datastore
        is recorded and the export or LUN is served."""
        validate.resource_name(name, "replication name")
        found = [i for i in self._incoming() if i.name == name]
        if not found:
            raise NotFound(f"no replica of {name!r} on this appliance")
        if len(found) > 1:
            raise Conflict(f"several replicas are named {name!r} here: "
                           f"{', '.join(i.dataset for i in found)}")
        inc = found[0]
        zfs = self.ctx.zfs
        info = zfs.get_dataset(inc.dataset)
        if info is None:
            raise NotFound(f"replica {inc.dataset} vanished")
        if not inc.snapshots:
            raise Conflict(f"{inc.dataset} holds no complete snapshot yet: nothing to serve "
                           "(its first stream was interrupted; the next run resumes it)")
        new_name = validate.resource_name(req.name or inc.datastore or name, "datastore name")
        adopted = record_from_properties(inc.pool, DatasetInfo(
            info.name, info.type, {**info.properties, "zds:name": new_name}))
        if adopted is None or info.prop("zds:managed") != "true":
            raise Conflict(f"{inc.dataset} is not the replica of a ZDS datastore (it has no "
                           "zds:* properties): promote it by hand (zfs rename/set)")
        src = adopted.spec
        keep = req.keep_access is True
        base = DatastoreRequest(
            protocol=src.protocol, size=src.size, pool=inc.pool, thin=src.thin,
            profile=src.profile,
            nfs_clients=req.nfs_clients if req.nfs_clients is not None else [
                {"match": c.match, "access": c.access} for c in src.nfs_clients if keep],
            initiators=req.initiators if req.initiators is not None else [
                i for i in src.iscsi.initiators if keep],
            initiator_groups=req.initiator_groups if req.initiator_groups is not None else [
                g for g in src.iscsi.initiator_groups if keep],
            chap=req.chap,
            nvme_hosts=req.nvme_hosts if req.nvme_hosts is not None else [
                h for h in src.nvme.hosts if keep],
            nvme_initiator_groups=req.nvme_initiator_groups
            if req.nvme_initiator_groups is not None else [
                g for g in src.nvme.initiator_groups if keep],
            nvme_allow_any_host=src.nvme.allow_any_host and keep)
        # the source had CHAP: its secrets never travel, and its initiators relied on it
        if adopted.error and req.chap is None and keep:
            raise Conflict(f"the source served {src.name} with CHAP; its secrets are not in "
                           "the replica: give them in the promote body (iscsi.chap)")
        spec = self.datastores.validate_request(new_name, base, foreign=Conflict)
        notes: builtins.list[str] = _access_notes(src, req, bool(adopted.error), new_name)
        with self.ctx.lock.hold(f"promote {name}"):
            if self.ctx.store.get_datastore(new_name) is not None:
                raise Conflict(f"datastore {new_name!r} exists here: promote under another "
                               "name ({\"name\": ...})")
            new_dataset = datastore_dataset(inc.pool, new_name)
            if zfs.get_dataset(new_dataset, ("type",)) is not None:
                raise Conflict(f"dataset {new_dataset} exists already")
            records = self.ctx.store.list_datastores()
            transport = self.ctx.transports.of(spec.protocol)
            # first, as it may refuse (nfs_path=source): nothing is allocated yet
            mountpoint = (None if transport.storage.is_volume
                          else self._promote_path(inc, req, new_name, notes))
            identity, said = transport.promote_identity(adopted, req.identity == "keep",
                                                        records, new_name)
            notes += said
            rec = DatastoreRecord(spec=spec, state="creating", export_id=identity.export_id,
                                  iqn=identity.iqn, serial=identity.serial, nqn=identity.nqn,
                                  created=time.time())
            if inc.resume_pending:
                self.zsend.abort_partial(Endpoint(None), inc.dataset)
                notes.append("An interrupted receive was dropped: the datastore holds the "
                             f"newest complete snapshot ({inc.newest_snapshot}).")
            # the intent first, then the record: a crash from here on is finished at the
            # next start (finish_promote), never mistaken for a create
            promotion = Promotion(new_name, inc.name, inc.dataset, new_dataset, mountpoint)
            self.records.put_promotion(promotion)
            self.ctx.store.put_datastore(rec)
            try:
                self._promote_dataset(promotion, rec)
            except Exception:
                self.ctx.store.delete_datastore(rec.name)  # refused: the replica as it was
                self.records.delete_promotion(new_name)
                raise
            rec = rec.with_state("ready")
            self.ctx.store.put_datastore(rec)
            self.records.delete_promotion(new_name)
            report = self.reconciler.datastores([rec])
            failures = report.failures_for(*transport.subjects(rec), "zfs")
            if failures:
                raise Unavailable("the replica became a datastore but could not be served: "
                                  + "; ".join(failures) + " (retried at every reconcile)")
        notes += transport.promote_notes
        notes.append(f"Replication {name} into {inc.dataset} is over: the source's next run "
                     "finds no replica there. Reverse replication (failback) is not built "
                     "yet: replicate the promoted datastore back with a new replication.")
        return PromoteResult(self.datastores.view_of(rec), notes)

    def _promote_path(self, inc: IncomingView, req: PromoteRequest, new_name: str,
                      notes: builtins.list[str]) -> str:
        """Where a file system replica is mounted (and so exported): the source's path,
        so ESXi remounts the same share path, when it is a datastore path of this pool
        (directly below the mountpoint of ``POOL/datastores``) that no datastore here
        uses; otherwise, or with ``nfs_path`` local, the path a datastore made here gets.
        Always explicit: a mountpoint the stream carried must not stay."""
        view = self.reconciler.read_zfs()
        parent = view.datasets.get(f"{inc.pool}/{DATASTORE_PARENT}")
        tree = _absolute(parent.prop("mountpoint") if parent else "") or \
            f"/{inc.pool}/{DATASTORE_PARENT}"
        local = f"{tree.rstrip('/')}/{new_name}"
        info = self.ctx.zfs.get_dataset(inc.dataset, ("zds:source_path",))
        source_path = info.prop("zds:source_path") if info else ""
        if req.nfs_path == "local" or not source_path:
            return local
        shown = repr(source_path[:200])  # the stream's words: quoted, never trusted
        kept = _path_below(source_path, tree)
        if kept is None:
            why = (f"The source's path {shown} is not a datastore path of this pool "
                   f"(directly below {tree}): ")
            if req.nfs_path == "source":
                raise Conflict(why + "promote with nfs_path=local. Nothing was changed",
                               detail={"source_path": source_path[:200], "allowed": tree})
            log.warning("promote %s: refusing the stream's path %s", inc.name, shown)
            notes.append(why + f"the export has this appliance's own path {local} instead.")
            return local
        used = {ds.prop("mountpoint") for ds in view.datasets.values()}
        if kept in used:
            if req.nfs_path == "source":
                raise Conflict(f"the source's path {kept} is in use here: promote with "
                               "nfs_path=local")
            notes.append(f"The source's path {kept} is in use here: the export has "
                         f"this appliance's own path {local} instead.")
            return local
        notes.append(f"The export keeps the source's path {kept}.")
        return kept

    def _promote_dataset(self, p: Promotion, rec: DatastoreRecord) -> None:
        """Replica -> datastore dataset: (thick: its reservation), renamed into
        ``POOL/datastores``, then :meth:`_promoted`; put back as it was if refused."""
        zfs, spec = self.ctx.zfs, rec.spec
        storage = self.ctx.transports.of(spec.protocol).storage
        # space first: a thick datastore that does not fit changes nothing
        if not spec.thin:
            zfs.set_properties(p.replica, {"refreservation": storage.thick_reservation(spec)})
        self.zsend.rename(p.replica, p.dataset)
        try:
            self._promoted(p, rec)
        except ZdsError:
            try:  # back to a replica, as it was
                zfs.set_properties(p.dataset, {"readonly": "on",
                                               "zds:replication": p.replication})
                self.zsend.rename(p.dataset, p.replica)
            except ZdsError as exc:
                log.error("promote %s: could not put the replica back: %s", p.replication,
                          exc.message)
            raise

    def _promoted(self, p: Promotion, rec: DatastoreRecord) -> None:
        """The renamed replica made a datastore's dataset (idempotent): writable, this
        datastore's zds:*, mounted where it is served (or its zvol's device there)."""
        zfs = self.ctx.zfs
        storage = self.ctx.transports.of(rec.spec.protocol).storage
        props = self.datastores.zfs_properties(rec)
        for fixed in ("volblocksize", "refreservation"):
            props.pop(fixed, None)
        props.update({"readonly": "off", "zds:replication": ""})
        props.update(storage.promoted_properties(p.mountpoint))
        zfs.set_properties(p.dataset, props)
        storage.after_promote(zfs, self.zsend, p.dataset)

    def finish_promote(self, rec: DatastoreRecord) -> bool:
        """At start-up, for a ``creating`` record: finishes the promote a crash cut, if
        one was recorded (True: done here, the record is ready or gone). The replica
        already renamed is made a datastore; one still a replica is promoted again;
        with neither left, nothing can be served and the record goes."""
        p = self.records.get_promotion(rec.name)
        if p is None:
            return False
        zfs = self.ctx.zfs
        if zfs.get_dataset(p.dataset, ("type",)) is not None:
            self._promoted(p, rec)
        elif zfs.get_dataset(p.replica, ("type",)) is not None:
            self._promote_dataset(p, rec)
        else:
            log.error("promote of %s into %s: neither %s nor %s exists; forgetting it",
                      p.replication, rec.name, p.replica, p.dataset)
            self.ctx.store.delete_datastore(rec.name)
            self.records.delete_promotion(rec.name)
            return True
        self.ctx.store.put_datastore(rec.with_state("ready"))
        self.records.delete_promotion(rec.name)
        log.warning("finished the promote of %s into datastore %s that a restart cut",
                    p.replication, rec.name)
        return True


def _task(name: str) -> str:
    return f"{TASK_PREFIX}{name}"


def _never(last: float | None, now: float) -> float | None:
    return None


def _refs(snaps: Sequence[DatasetInfo]) -> builtins.list[SnapRef]:
    return [SnapRef(s.name, int(s.prop("guid") or 0), s.int_prop("createtxg"),
                    s.int_prop("creation")) for s in snaps]


def _bytes(detail: dict[str, object]) -> int:
    n = detail.get("bytes", 0)
    return n if isinstance(n, int) else 0


def _absolute(path: str) -> str | None:
    """``path`` as a mountpoint ("/a/b", without a trailing '/'), or None ("none",
    "legacy", "-")."""
    return "/" + "/".join(p for p in path.split("/") if p) if path.startswith("/") else None


def _path_below(path: str, tree: str) -> str | None:
    """``path`` normalised, when it names an entry directly below ``tree``: compared
    component by component after dropping empty ones ("//", a trailing '/'); '.', '..'
    and characters outside a datastore name are refused, never resolved."""
    if not isinstance(path, str) or not path.startswith("/") or len(path) > 1024:
        return None
    parts = [p for p in path.split("/") if p]
    base = [p for p in tree.split("/") if p]
    if len(parts) != len(base) + 1 or parts[:-1] != base:
        return None
    try:
        validate.resource_name(parts[-1])  # also refuses '.', '..' and control characters
    except InvalidInput:
        return None
    return "/" + "/".join(parts)


def _access_notes(src: DatastoreSpec, req: PromoteRequest, chap: bool,
                  name: str) -> builtins.list[str]:
    """What promote did not take from the replica's access (``keep_access`` false)."""
    if req.keep_access is True:
        return []
    left = []
    if req.nfs_clients is None and src.nfs_clients:
        left.append(f"{len(src.nfs_clients)} NFS client rule(s)")
    if req.initiators is None and src.iscsi.initiators:
        left.append(f"{len(src.iscsi.initiators)} initiator(s)")
    if req.initiator_groups is None and src.iscsi.initiator_groups:
        left.append(f"{len(src.iscsi.initiator_groups)} initiator group(s)")
    if req.nvme_hosts is None and src.nvme.hosts:
        left.append(f"{len(src.nvme.hosts)} NVMe host(s)")
    if chap and req.chap is None:
        left.append("CHAP")
    if not left:
        return []
    return [f"Access was not taken from the replica ({', '.join(left)} of the source were "
            "left out): the datastore is served to the clients this request named, and no "
            f"others. Give them with PUT /api/v1/datastores/{name}, or promote with "
            "keep_access=true to use the source's."]


def _nested(a: str, b: str) -> bool:
    """``a`` and ``b`` are the same dataset or one lies below the other."""
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def _source(value: str) -> str:
    try:
        return str(ipaddress.ip_network(value.strip(), strict=False))
    except (ValueError, AttributeError):
        raise InvalidInput(f"invalid source {value!r}: an IP address or a CIDR network") \
            from None
