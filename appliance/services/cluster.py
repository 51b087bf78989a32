"""The HA pair, as the engine sees it (docs/ha.md): which node holds which pool, the
node's role for health, the 503 a change gets on the node that does not hold its pool,
a planned failover, and the resource agent's three entry points.

The agent (``ocf:zds:pool``, api/agent.py) calls the local API, which calls here:

- :meth:`ClusterService.take` (start): the boot path for one pool: ``zpool import``
  (forced, ``cachefile=none``, after ``udevadm settle``: pacemaker fenced the other node
  first, and ``multihost=on`` refuses a pool still being written), the pool's records
  rebuilt from its ``zds:*`` properties (adoption), then reconciles until the pool's
  drift has nothing the reconcile can still do;
- :meth:`ClusterService.release` (stop): every export, LUN and NVMe subsystem of the
  pool's datastores withdrawn, the pool exported, its records forgotten (the pool
  carries them to the next node);
- :meth:`ClusterService.pool_status` (monitor): imported, healthy, its daemons up.

A job about one of the pair's pools is noted on that pool while it runs
(:class:`PoolJobJournal`: a ``zds:job:<id>`` user property of the pool's root dataset);
the node that takes the pool after the one running it died records it ``interrupted``
under the same id (:meth:`ClusterService.settle_jobs`), so a client polling it through
the service address learns its fate rather than a 404.

A single appliance (no corosync.conf) has no cluster: every method here says so, health
has no ``cluster`` part and nothing is refused.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from appliance import validate
from appliance.adoption import adopt
from appliance.context import Context
from appliance.errors import Conflict, InvalidInput, NotActive, NotFound, Unavailable, ZdsError
from appliance.host.cluster import ClusterHost, ClusterState, FenceEvent
from appliance.jobs import Job, JobContext, JobJournal
from appliance.model import DatastoreRecord
from appliance.reconciler import DriftItem, Reconciler
from appliance.services.pools import PoolService
from appliance.transports.storage import RECONCILE

log = logging.getLogger(__name__)

# The pools this node took as the cluster's (a fact in its store): records of such a
# pool that is not imported at start-up are leftovers of a node that died holding it.
TAKEN_FACT = "cluster.taken_pools"
# How old the cached pacemaker state may be before a request refreshes it, and how
# often the watcher's health tick reads it (three commands: ~1-3 s of CPU under
# emulation, so not every 10 s).
STATE_MAX_AGE = 5.0
WATCH_EVERY = 30.0
# Waits of the jobs: for the change lock, for pacemaker to finish a move.
JOB_LOCK_WAIT = 3600.0
MOVE_TIMEOUT = 900.0
MOVE_POLL = 3.0  # seconds between reads of pacemaker while a move runs
# How long a take reconciles again while the pool's drift still has work for it.
TAKE_SETTLE = 120.0
# zpool export may find a file system busy for a while after the NFS server let go
# (ganesha closes its cached descriptors lazily): 15 tries, 2 s apart.
EXPORT_TRIES = 15
# Pool states in which a monitor fails: the pool cannot serve.
BAD_POOL_HEALTH = ("FAULTED", "UNAVAIL", "SUSPENDED")
# Paths whose changes work on either node: the cluster's own, and tokens.
ANY_NODE_PATHS = ("/api/v1/cluster",)
# The job journal: one user property per running job on its pool's root dataset.
JOB_NOTE_PREFIX = "zds:job:"
# Jobs never noted: they move or make the pool itself (pacemaker and the take's own
# result tell their story; the pool may not be there to carry a note).
UNNOTED_KINDS = ("cluster.take", "cluster.release", "cluster.failover", "pool.create",
                 "pool.import", "pool.export")
# A note's message is cut to this many characters (a user property holds 8 KiB).
NOTE_MESSAGE_MAX = 500


@dataclass(frozen=True)
class ClusterRole:
    """What health says about the pair (from the cached state: no host call)."""

    node: str
    role: str  # active (holds a pool of the pair) | standby | unknown (pacemaker silent)
    peer: str
    peer_online: bool
    pools: list[str] = field(default_factory=list)  # the pair's pools this node holds
    detail: str = ""


@dataclass(frozen=True)
class NodeView:
    name: str
    online: bool
    standby: bool
    unclean: bool
    is_dc: bool
    pools: list[str]  # the pools whose group runs here


@dataclass(frozen=True)
class PoolGroupView:
    pool: str
    group: str
    resource: str
    node: str  # "" when it runs nowhere
    address: str


@dataclass(frozen=True)
class Takeover:
    """This node's last take of a pool: the fencing before it (if pacemaker recorded
    one) and each step's seconds."""

    pool: str
    finished: float
    seconds: dict[str, float]
    fenced: str = ""  # the node fenced before it ("" when none was: a planned move)
    fenced_at: float | None = None
    job: str = ""


@dataclass(frozen=True)
class ClusterView:
    configured: bool
    running: bool = False
    node: str = ""
    quorum: bool = False
    stonith_enabled: bool = False
    dc: str = ""
    nodes: list[NodeView] = field(default_factory=list)
    pools: list[PoolGroupView] = field(default_factory=list)
    fencing: list[FenceEvent] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    last_takeover: Takeover | None = None
    message: str = ""


@dataclass(frozen=True)
class PoolStatus:
    """The monitor's answer for one pool on this node."""

    pool: str
    imported: bool
    health: str  # zpool's (ONLINE, DEGRADED...) or "" when not imported
    ok: bool  # imported, able to serve, its daemons up
    datastores: list[str]
    daemons_down: list[str]
    drift: list[DriftItem]
    message: str


class ClusterService:
    def __init__(self, ctx: Context, reconciler: Reconciler, pools: PoolService) -> None:
        self.ctx = ctx
        self.reconciler = reconciler
        self.pools = pools
        self.host: ClusterHost | None = ctx.hosts.cluster
        self._state: ClusterState | None = None
        self._state_at = 0.0
        self._state_lock = threading.Lock()

    # --- what pacemaker says (cached) -------------------------------------------------

    @property
    def configured(self) -> bool:
        """This node is in a pair (one file check; a single appliance: False)."""
        return self.host is not None and self.host.configured()

    def refresh(self) -> ClusterState | None:
        """Reads pacemaker now (the watcher's health tick); None when not clustered."""
        if self.host is None or not self.host.configured():
            self._state = None
            return None
        try:
            state = self.host.state()
        except ZdsError as exc:
            state = ClusterState(running=False, error=exc.message)
        with self._state_lock:
            self._state, self._state_at = state, time.monotonic()
        return state

    def watch(self) -> None:
        """The watcher's health tick: reads pacemaker when the cache is older than
        WATCH_EVERY (health answers from the cache)."""
        if self._state is None or time.monotonic() - self._state_at >= WATCH_EVERY:
            self.refresh()

    def state(self, max_age: float = STATE_MAX_AGE) -> ClusterState | None:
        """The cached state, read again when older than ``max_age`` seconds."""
        if time.monotonic() - self._state_at > max_age or self._state is None:
            return self.refresh()
        return self._state

    def cached(self) -> ClusterState | None:
        """Whatever was read last (health: never a host call)."""
        return self._state

    def _require(self, max_age: float = STATE_MAX_AGE) -> ClusterState:
        state = self.state(max_age)
        if state is None:
            raise Conflict("this appliance is not in an HA pair (no /etc/corosync/"
                           "corosync.conf: see docs/ha.md)")
        if not state.running:
            raise Unavailable(f"pacemaker does not answer on this node: {state.error}")
        return state

    # --- health, GET /cluster ---------------------------------------------------------

    def role(self) -> ClusterRole | None:
        """This node's role for health, from the cache (None: not in a pair)."""
        state = self._state
        if state is None:
            return None
        if not state.running:
            return ClusterRole(state.local, "unknown", "", False, [], state.error)
        peers = [n for n in state.nodes if n.name != state.local]
        held = sorted(g.pool for g in state.pools if state.holder(g.pool) == state.local)
        peer = peers[0] if peers else None
        return ClusterRole(state.local, "active" if held else "standby",
                           peer.name if peer else "", bool(peer and peer.online), held)

    def view(self) -> ClusterView:
        """GET /api/v1/cluster: nodes, who holds which pool, fencing, the last takeover
        (read now: an admin's call, two commands)."""
        state = self.state(max_age=0)
        if state is None:
            return ClusterView(configured=False, message="not in an HA pair (a single "
                                                         "appliance)")
        last = self.last_takeover(state)
        if not state.running:
            return ClusterView(configured=True, node=state.local, last_takeover=last,
                               message=f"pacemaker does not answer: {state.error}")
        holders = {g.pool: state.holder(g.pool) for g in state.pools}
        return ClusterView(
            configured=True, running=True, node=state.local, quorum=state.quorum,
            stonith_enabled=state.stonith_enabled, dc=state.dc,
            nodes=[NodeView(n.name, n.online, n.standby, n.unclean, n.is_dc,
                            sorted(p for p, h in holders.items() if h == n.name))
                   for n in state.nodes],
            pools=[PoolGroupView(g.pool, g.group, g.resource, holders[g.pool], g.address)
                   for g in state.pools],
            fencing=list(state.fencing), failures=list(state.failures), last_takeover=last,
            message="" if state.stonith_enabled else
            "fencing is off (stonith-enabled=false): a node that cannot fence must not "
            "import, so no pool moves")

    def last_takeover(self, state: ClusterState | None = None) -> Takeover | None:
        """This node's last successful take (its job's timings) and the fencing that
        came before it."""
        jobs = self.ctx.jobs.list(state="succeeded", kind="cluster.take", limit=1)
        if not jobs or jobs[0].result is None or jobs[0].finished is None:
            return None
        job = jobs[0]
        result = job.result or {}
        fence: FenceEvent | None = None
        if state is not None:
            # the node fenced just before this take (never this node itself: a node
            # that was fenced, came back and takes the pool later took it from no one)
            before = [e for e in state.fencing if e.status == "success"
                      and e.action in ("reboot", "off") and e.completed is not None
                      and e.target != state.local
                      and job.created - 900 <= e.completed <= (job.finished or 0)]
            fence = max(before, key=lambda e: e.completed or 0.0) if before else None
        return Takeover(pool=str(result.get("pool", job.target or "")),
                        finished=job.finished or 0.0,
                        seconds=dict(result.get("seconds", {})),
                        fenced=fence.target if fence else "",
                        fenced_at=fence.completed if fence else None, job=job.id)

    # --- the 503 on the node that does not hold the pool ---------------------------------

    def refusal(self, method: str, path: str) -> NotActive | None:
        """What a change (``method`` on ``path``) gets on this node: None when it may
        run here (not clustered, a read, the cluster's own paths, or this node holds the
        pool), else the error naming the node that holds it. A path naming a pool
        (``/api/v1/pools/{name}...``) is judged by that pool; any other change needs
        this node to hold at least one of the pair's pools (the datastores' pool is in
        the body, which is not read yet). A pool pacemaker does not manage is local:
        never refused."""
        if method in ("GET", "HEAD", "OPTIONS") or not self.configured:
            return None
        if any(path == p or path.startswith(p + "/") for p in ANY_NODE_PATHS):
            return None
        state = self.state()
        if state is None:
            return None
        if not state.running:
            return NotActive(
                f"pacemaker does not answer on this node ({state.error}): it cannot tell "
                "whether it holds the pool, so it changes nothing; use the service address",
                detail={"node": state.local, "active": ""})
        managed = {g.pool: state.holder(g.pool) for g in state.pools}
        parts = path.split("/")
        if len(parts) > 4 and parts[1:4] == ["api", "v1", "pools"]:
            if parts[4] not in managed:
                return None  # a pool of this node's own (or none): not the pair's
            wanted = {parts[4]: managed[parts[4]]}
        elif any(h == state.local for h in managed.values()) or not managed:
            return None
        else:
            wanted = managed
        elsewhere = {p: h for p, h in wanted.items() if h != state.local}
        if not elsewhere:
            return None
        active = sorted({h for h in elsewhere.values() if h})
        where = ", ".join(f"{p} on {h or 'no node'}" for p, h in sorted(elsewhere.items()))
        addresses = sorted({g.address for g in state.pools if g.pool in elsewhere
                            and g.address})
        via = f" (service address {', '.join(addresses)})" if addresses else ""
        return NotActive(
            f"this node ({state.local}) does not hold the pool: {where}. Send changes to "
            f"{' or '.join(active) or 'the node that holds it'}{via}; nothing was changed",
            detail={"node": state.local, "active": active[0] if active else "",
                    "pools": dict(sorted(elsewhere.items())), "addresses": addresses})

    # --- planned failover -------------------------------------------------------------

    def failover(self, pool: str | None = None, node: str | None = None) -> Job:
        """Moves ``pool``'s group (default: the pair's only one) to ``node`` (default:
        the peer) and waits for pacemaker to run all of it there; the move's preference
        is then cleared, so the group stays by stickiness, not by a pin."""
        state = self._require(max_age=0)
        if not state.pools:
            raise NotFound("pacemaker manages no ZDS pool (no ocf:zds:pool resource)")
        if pool is None:
            if len(state.pools) != 1:
                raise InvalidInput("the pair has several pools: name one in 'pool' ("
                                   + ", ".join(g.pool for g in state.pools) + ")")
            group = state.pools[0]
        else:
            validate.pool_name(pool)
            found = state.group_of(pool)
            if found is None:
                raise NotFound(f"pacemaker does not manage pool {pool!r}")
            group = found
        holder = state.holder(group.pool)
        if node is None:
            others = [n.name for n in state.nodes if n.name != holder]
            if len(others) != 1:
                raise InvalidInput("name the node to move to in 'node'")
            node = others[0]
        target = state.node(node)
        if target is None:
            raise NotFound(f"no node {node!r} in the cluster (nodes: "
                           + ", ".join(n.name for n in state.nodes) + ")")
        if node == holder:
            raise Conflict(f"pool {group.pool} is on {node} already")
        if not target.online or target.standby or target.unclean:
            raise Conflict(f"node {node} cannot take pool {group.pool}: it is "
                           + ("offline" if not target.online else
                              "in standby" if target.standby else "unclean (not fenced)"))
        if self.ctx.jobs.running_for("cluster.failover", group.pool):
            raise Conflict(f"a failover of {group.pool} is running already")
        host = self.host
        assert host is not None

        def run(ctx: JobContext) -> dict[str, Any]:
            t0 = time.monotonic()
            host.move(group.group, node)
            try:
                deadline = t0 + MOVE_TIMEOUT
                while True:
                    now = self.refresh()
                    if now is not None and now.running and _group_on(now, group.group, node):
                        break
                    if time.monotonic() > deadline:
                        raise Unavailable(f"pool {group.pool} is not running on {node} "
                                          f"{MOVE_TIMEOUT:.0f} s after the move was asked "
                                          "(crm_mon says why)")
                    ctx.progress(0.5, f"pacemaker is moving {group.group} to {node}")
                    time.sleep(MOVE_POLL)
            finally:
                host.clear(group.group)
            return {"pool": group.pool, "group": group.group, "from": holder, "to": node,
                    "seconds": round(time.monotonic() - t0, 1)}

        return self.ctx.jobs.submit("cluster.failover", group.pool, run,
                                    message=f"moving pool {group.pool} from "
                                            f"{holder or 'nowhere'} to {node}")

    # --- the resource agent's entry points --------------------------------------------

    def _records(self, pool: str) -> list[DatastoreRecord]:
        return [r for r in self.ctx.store.list_datastores() if r.spec.pool == pool]

    def _taken(self) -> set[str]:
        raw = self.ctx.store.get_fact(TAKEN_FACT)
        try:
            return set(json.loads(raw)) if raw else set()
        except (ValueError, TypeError):
            return set()

    def _set_taken(self, pools: set[str]) -> None:
        self.ctx.store.replace_fact(TAKEN_FACT, json.dumps(sorted(pools)))

    def _forget(self, pool: str) -> list[str]:
        names = [r.name for r in self._records(pool)]
        for name in names:
            self.ctx.store.delete_datastore(name)
        return names

    def forget_departed(self, imported: set[str]) -> list[str]:
        """Start-up (under the lock): the records of pools this node took as the
        cluster's and no longer has imported (it died holding them; the other node has
        them now) are dropped: the pool carries them, and the next take adopts them
        afresh. Returns the datastores forgotten."""
        taken = self._taken()
        gone = taken - imported
        forgotten = [n for pool in sorted(gone) for n in self._forget(pool)]
        if gone:
            self._set_taken(taken - gone)
            log.warning("cluster: pools %s left this node while it was down; records "
                        "dropped: %s", ", ".join(sorted(gone)), ", ".join(forgotten) or "none")
        return forgotten

    def take(self, pool: str, settle: float = TAKE_SETTLE) -> Job:
        """The agent's start: import (if not yet), adopt, serve; see the module."""
        validate.pool_name(pool)
        if not self.ctx.zfs.available():
            raise Unavailable("ZFS is not available on this node")

        def run(ctx: JobContext) -> dict[str, Any]:
            t0 = time.monotonic()
            seconds: dict[str, float] = {}
            with self.ctx.lock.hold(f"taking pool {pool}", timeout=JOB_LOCK_WAIT):
                imported_now = pool not in self.pools.imported()
                if imported_now:
                    ctx.progress(0.1, f"importing {pool} (the MMP activity check waits)")
                    self.ctx.zfs.import_pool(pool, force=True, shared=True)
                seconds["import"] = round(time.monotonic() - t0, 1)
                t1 = time.monotonic()
                # the pool is the truth: what this node remembered of it may be old
                self._forget(pool)
                adopted = adopt(self.ctx, [pool])
                interrupted = self.settle_jobs(pool)
                self.pools.keep_snapshot_counts([pool])
                self._set_taken(self._taken() | {pool})
                seconds["adopt"] = round(time.monotonic() - t1, 1)
            t2 = time.monotonic()
            ctx.progress(0.5, f"serving the datastores of {pool}")
            left = self._serve(pool, settle)
            # health and the monitor that follows answer from the watcher's last check:
            # bring it up to date (a daemon may have come up since)
            self.reconciler.check()
            seconds["serve"] = round(time.monotonic() - t2, 1)
            seconds["total"] = round(time.monotonic() - t0, 1)
            pending = [i for i in left if _reconcile_work(i)]
            if pending:
                raise Unavailable(
                    f"pool {pool} is imported but not all of it is served after "
                    f"{settle:.0f} s: " + "; ".join(f"{i.subject}: {i.reason}"
                                                   for i in pending[:5]),
                    detail={"drift": [i.__dict__ for i in pending]})
            return {"pool": pool, "imported": imported_now, "adopted": adopted,
                    "interrupted_jobs": interrupted, "seconds": seconds,
                    "attention": [f"{i.subject}: {i.reason}" + (f" -> {i.action}"
                                                                if i.action else "")
                                  for i in left]}

        return self.ctx.jobs.submit("cluster.take", pool, run, message=f"taking pool {pool}")

    def _serve(self, pool: str, settle: float) -> list[DriftItem]:
        """Full reconciles until the pool's drift has nothing the reconcile can still do
        (or ``settle`` seconds passed); returns the pool's drift then."""
        deadline = time.monotonic() + settle
        while True:
            self.reconciler.full(wait=JOB_LOCK_WAIT)
            items = self.drift_of(pool, self.reconciler.drift())
            if not any(_reconcile_work(i) for i in items) or time.monotonic() > deadline:
                return items
            time.sleep(1.0)

    def drift_of(self, pool: str, items: Sequence[DriftItem]) -> list[DriftItem]:
        """The drift items about ``pool``'s datastores (and datasets)."""
        subjects: set[str] = set()
        for t, recs in self.ctx.transports.grouped(self._records(pool)):
            for r in recs:
                subjects.update((r.name, r.spec.dataset, *t.subjects(r)))
        return [i for i in items if i.subject in subjects or i.subject == pool
                or i.subject.startswith(f"{pool}/")]

    # --- jobs across a takeover ---------------------------------------------------------

    def settle_jobs(self, pool: str) -> list[str]:
        """Reads the job notes ``pool`` carries (one ``zfs get``): a job with no row here
        ran on the node that held the pool before and died, so it is recorded failed
        (``interrupted``) under its id; notes of jobs that finished here go. A job that
        runs here now keeps its note. Returns the ids recorded interrupted. Call it
        with the pool imported, under the change lock. A failing read or clear is
        logged, never raised: a takeover must not fail on a note."""
        try:
            root = self.ctx.zfs.get_dataset(pool)
        except ZdsError as exc:
            log.warning("cluster: cannot read the job notes of %s: %s", pool, exc.message)
            return []
        if root is None:
            return []
        notes = {k[len(JOB_NOTE_PREFIX):]: v for k, v in root.properties.items()
                 if k.startswith(JOB_NOTE_PREFIX)}
        state = self._state
        local = state.local if state is not None else ""
        recorded: list[str] = []
        settled: list[str] = []
        for job_id, raw in sorted(notes.items()):
            try:
                here: Job | None = self.ctx.jobs.get(job_id)
            except NotFound:
                here = None
            if here is not None and not here.done:
                continue  # it runs on this node now: its own end removes the note
            if here is None and self.ctx.jobs.record_interrupted(
                    _interrupted_job(job_id, raw, pool, local)):
                recorded.append(job_id)
            settled.append(JOB_NOTE_PREFIX + job_id)
        if settled:
            try:
                self.ctx.zfs.clear_root_user_properties(pool, settled)
            except ZdsError as exc:  # the next take or start-up clears them
                log.warning("cluster: cannot clear job notes on %s: %s", pool, exc.message)
        if recorded:
            log.warning("cluster: pool %s carried %d job(s) of a node that stopped while "
                        "they ran; recorded interrupted: %s", pool, len(recorded),
                        ", ".join(recorded))
        return recorded

    def settle_jobs_of(self, pools: set[str]) -> list[str]:
        """Start-up: :meth:`settle_jobs` for every imported pool, in a pair only (a
        single appliance notes no job)."""
        if not self.configured:
            return []
        return [j for pool in sorted(pools) for j in self.settle_jobs(pool)]

    def release(self, pool: str) -> Job:
        """The agent's stop: withdraw what serves the pool's datastores, export the
        pool, forget its records. Stopping what is stopped succeeds (OCF)."""
        validate.pool_name(pool)

        def run(ctx: JobContext) -> dict[str, Any]:
            t0 = time.monotonic()
            with self.ctx.lock.hold(f"releasing pool {pool}", timeout=JOB_LOCK_WAIT):
                records = self._records(pool)
                report = self.reconciler.datastores(records, withdraw=True,
                                                    wait=JOB_LOCK_WAIT)
                failures = report.failures_for(*(r.export_id for r in records),
                                               *(r.iqn for r in records),
                                               *(r.nqn for r in records), "zfs")
                if failures:
                    raise Unavailable(f"could not stop serving pool {pool}'s datastores: "
                                      + "; ".join(failures))
                t1 = time.monotonic()
                exported = pool in self.pools.imported()
                if exported:
                    self._export(pool)
                forgotten = self._forget(pool)
                self._set_taken(self._taken() - {pool})
            return {"pool": pool, "exported": exported, "withdrawn": forgotten,
                    "seconds": {"withdraw": round(t1 - t0, 1),
                                "export": round(time.monotonic() - t1, 1),
                                "total": round(time.monotonic() - t0, 1)}}

        return self.ctx.jobs.submit("cluster.release", pool, run,
                                    message=f"releasing pool {pool}")

    def _export(self, pool: str, tries: int = EXPORT_TRIES,
                pause: Callable[[float], None] = time.sleep) -> None:
        for attempt in range(1, tries + 1):
            try:
                self.ctx.zfs.export_pool(pool)
                return
            except ZdsError as exc:
                if attempt == tries:
                    raise
                log.warning("zpool export %s: %s; again in 2 s", pool, exc.message)
                pause(2.0)

    def pool_status(self, pool: str) -> PoolStatus:
        """The agent's monitor: one ``zpool list``; the daemons and drift as the watcher
        last saw them (no other host call)."""
        validate.pool_name(pool)
        if not self.ctx.zfs.available():
            raise Unavailable("ZFS is not available on this node")
        health = {p.name: p.health for p in self.ctx.zfs.list_pools()}.get(pool, "")
        records = self._records(pool)
        st = self.reconciler.status
        needed = {t.name for t, recs in self.ctx.transports.grouped(records) if recs}
        down = sorted(n for n in needed if not st.daemons.get(n, True))
        drift = self.drift_of(pool, st.drift)
        ok = bool(health) and health not in BAD_POOL_HEALTH and not down
        if not health:
            message = f"pool {pool} is not imported here"
        elif health in BAD_POOL_HEALTH:
            message = f"pool {pool} is {health}"
        elif down:
            message = f"pool {pool} is {health}; down: {', '.join(down)}"
        else:
            message = f"pool {pool} is {health}, {len(records)} datastore(s)" + (
                f", {len(drift)} drift item(s)" if drift else "")
        return PoolStatus(pool, bool(health), health, ok, sorted(r.name for r in records),
                          down, drift, message)


class PoolJobJournal(JobJournal):
    """Notes a job about one of the pair's pools on that pool while it runs (see the
    module). Two ``zfs`` commands per job, in a pair only; a single appliance's jobs are
    not noted (its own store says "interrupted" after a restart)."""

    def __init__(self, cluster: ClusterService) -> None:
        self.cluster = cluster

    def pool_of(self, job: Job, pool: str | None) -> str | None:
        """The pair's pool ``job`` works on: the one its submitter named, its target
        when that is a pool, or its target datastore's pool; None for any other job."""
        if job.kind in UNNOTED_KINDS or not self.cluster.configured:
            return None
        state = self.cluster.cached() or self.cluster.state()
        if state is None or not state.running:
            return None
        managed = {g.pool for g in state.pools}
        for candidate in (pool, job.target):
            if candidate in managed:
                return candidate
        record = self.cluster.ctx.store.get_datastore(job.target) if job.target else None
        return record.spec.pool if record is not None and record.spec.pool in managed \
            else None

    def begin(self, job: Job, pool: str | None) -> str | None:
        where = self.pool_of(job, pool)
        if where is None or not _NOTE_ID.fullmatch(job.id):
            return None
        state = self.cluster.cached()
        note = {"kind": job.kind, "target": job.target,
                "message": job.message[:NOTE_MESSAGE_MAX], "created": job.created,
                "started": time.time(), "node": state.local if state else ""}
        self.cluster.ctx.zfs.set_root_user_properties(
            where, {JOB_NOTE_PREFIX + job.id: json.dumps(note, separators=(",", ":"))})
        return where

    def end(self, job_id: str, pool: str) -> None:
        self.cluster.ctx.zfs.clear_root_user_properties(pool, [JOB_NOTE_PREFIX + job_id])


# what a job id may be to name a ZFS user property (uuid4 hex, the scheduler's too)
_NOTE_ID = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")


def _interrupted_job(job_id: str, raw: str, pool: str, local: str) -> Job:
    """The row for a job a pool's note names: failed, ``interrupted`` by the takeover."""
    try:
        note = json.loads(raw)
        if not isinstance(note, dict):
            raise ValueError(raw)
    except ValueError:
        note = {}
    node = str(note.get("node") or "the node that held it")
    created = note.get("created")
    started = note.get("started")
    now = time.time()
    return Job(
        id=job_id, kind=str(note.get("kind") or "unknown"),
        target=str(note["target"]) if note.get("target") is not None else None,
        state="failed", progress=0.0, message=str(note.get("message") or ""),
        result=None,
        error={"code": "interrupted",
               "message": f"{node} stopped while this job ran on pool {pool}; "
                          f"{local or 'this node'} took the pool over. The job did not "
                          "finish (what it had done is on the pool as it was left): run "
                          "it again if it is still needed",
               "detail": {"node": str(note.get("node") or ""), "pool": pool,
                          "taken_by": local}},
        created=float(created) if isinstance(created, (int, float)) else now,
        started=float(started) if isinstance(started, (int, float)) else None,
        finished=now)


def _group_on(state: ClusterState, group: str, node: str) -> bool:
    """Every resource of ``group`` runs on ``node`` (the pool, its address, the rest)."""
    members = [r for r in state.resources if r.group == group or r.id == group]
    return bool(members) and all(r.role == "Started" and r.node == node for r in members)


def _reconcile_work(item: DriftItem) -> bool:
    """A drift item the reconcile itself still has to do (or retries), as opposed to one
    a person must act on (a CHAP datastore waiting for its secrets...)."""
    return item.kind == "failed" or RECONCILE in item.action
