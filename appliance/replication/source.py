"""The source side of replication: every run (a job on the one clock: the
replication's ``interval``, ``POST .../run``, or after a snapshot policy), planned by
:mod:`appliance.replication.plan` and sent until the target holds the newest snapshot;
then the cursor moves: a hold on the last sent snapshot (so nothing prunes it by
accident) and a bookmark of it (so an incremental still works once it is pruned on
purpose). ``check`` says what the next run would send."""

from __future__ import annotations

import builtins
import contextlib
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from appliance import validate
from appliance.context import Context
from appliance.errors import (
    Conflict,
    InsufficientSpace,
    NotFound,
    Unavailable,
    ZdsError,
)
from appliance.host.zfs import DatasetInfo
from appliance.host.zfs_send import (
    PartialReceive,
    ReceiveSpec,
    SnapRef,
    StaleResume,
    TargetState,
    TransferCancelled,
)
from appliance.jobs import Job, JobCancelled, JobContext
from appliance.model import DatastoreRecord
from appliance.replication import plan as planner
from appliance.replication.model import (
    ReplicationRecord,
    ReplicationSpec,
    bookmark_prefix,
    hold_tag,
    snapshot_prefix,
)
from appliance.replication.part import ReplicationPart
from appliance.replication.store import ReplicationStore
from appliance.replication.views import CheckView
from appliance.scheduler import Task, every
from appliance.services.datastores import DatastoreService

log = logging.getLogger(__name__)

JOB_LOCK_WAIT = 3600.0
MAX_STEPS = 6  # resume + full + incremental, with room for a stale resume and a retry
TASK_PREFIX = "replication:"


class SourceRuns(ReplicationPart):
    """Runs of the replications this appliance sends, and their cursors."""

    def __init__(self, ctx: Context, records: ReplicationStore,
                 datastores: DatastoreService) -> None:
        super().__init__(ctx, records)
        self.datastores = datastores
        self._policy_runs: set[str] = set()  # runs triggered by a snapshot policy
        self._lock = threading.Lock()

    def register(self, rec: ReplicationRecord) -> None:
        spec = rec.spec
        interval = spec.interval if spec.enabled else None
        due = every(interval) if interval else _never

        def run(ctx: JobContext, slot: float) -> dict[str, Any]:
            return self._run(rec.name, ctx)

        self.ctx.scheduler.register(Task(task_name(rec.name), "replication.run", rec.name, due,
                                         run, long=True))

    def run_now(self, name: str) -> Job:
        """A run now, as a job (409 while one runs). What ``POST .../run`` does."""
        self.record(name)
        return self.ctx.scheduler.run_now(task_name(name))

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
                jobs.append(self.ctx.scheduler.run_now(task_name(rec.name)))
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
        rec = self.record(name)
        status = replace(rec.status, state="running", job_id=job.job_id, last_run=time.time())
        self.records.set_status(name, status)
        t0 = time.monotonic()
        try:
            try:
                result = self._replicate(rec, job,
                                         take=rec.spec.take_snapshot and not by_policy)
            finally:
                self.close(rec.spec.target.endpoint)
        except (JobCancelled, TransferCancelled) as exc:
            kept = _bytes(exc.detail) if isinstance(exc, ZdsError) else 0
            self._finish(name, state="cancelled", last_finished=time.time(),
                         last_error={"code": "cancelled", "message": "cancelled"},
                         resumable_bytes=kept)
            raise JobCancelled() from exc
        except ZdsError as exc:
            current = self.record(name).status
            self._finish(name, state="failed", last_finished=time.time(),
                         failures=current.failures + 1,
                         last_error={"code": exc.code, "message": exc.message},
                         resumable_bytes=_bytes(exc.detail))
            raise
        except Exception as exc:  # a bug or an OS error: recorded, never left "running"
            current = self.record(name).status
            self._finish(name, state="failed", last_finished=time.time(),
                         failures=current.failures + 1,
                         last_error={"code": "internal", "message": f"{type(exc).__name__}: "
                                                                    f"{exc}"})
            raise
        now = time.time()
        current = self.record(name).status
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

    def drop_cursor(self, name: str, dataset: str) -> None:
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
        rec = self.record(name)
        spec = rec.spec
        ds = self.ctx.store.get_datastore(spec.datastore)
        try:
            state = self.zsend.target_state(spec.target.endpoint, spec.target.dataset)
        finally:
            self.close(spec.target.endpoint)
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

def task_name(name: str) -> str:
    """The scheduler task of replication ``name``."""
    return f"{TASK_PREFIX}{name}"

def _never(last: float | None, now: float) -> float | None:
    return None

def _refs(snaps: Sequence[DatasetInfo]) -> builtins.list[SnapRef]:
    return [SnapRef(s.name, int(s.prop("guid") or 0), s.int_prop("createtxg"),
                    s.int_prop("creation")) for s in snaps]

def _bytes(detail: dict[str, object]) -> int:
    n = detail.get("bytes", 0)
    return n if isinstance(n, int) else 0
