"""Long work runs as a job: recorded in SQLite, run on a worker thread, pollable.

A job is never lost: its row is written before it runs, and at start-up any job that
was queued or running when the API stopped is marked failed ("interrupted"): by
:meth:`JobManager.shutdown` when the API stops cleanly, by :meth:`JobManager.recover` at
the next start when it did not.

In an HA pair a job about one of the pair's pools is also noted on that pool while it
runs (a :class:`JobJournal`, given by the engine): the node that takes the pool after this
one died shows it ``interrupted`` under the same id, where the client polls it.

Waiting for a job has two forms: :meth:`JobManager.wait` blocks a thread (the engine's own
callers), :meth:`JobManager.wait_async` holds none (the API's long-polls: thousands of them
cost a future each, woken by the job's thread when its row changes).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

from appliance.errors import Conflict, NotFound, ZdsError
from appliance.store import Store

log = logging.getLogger(__name__)

T = TypeVar("T")
JobState = Literal["queued", "running", "succeeded", "failed", "cancelled"]
FINISHED: tuple[JobState, ...] = ("succeeded", "failed", "cancelled")
# An async wait re-reads its job at least this often even if nothing woke it (a safety
# net: every change of a job row goes through this manager and wakes its waiters).
REREAD_EVERY = 30.0
# Async waits read their job's row here, off the event loop and off the threads the API's
# routes run on: reads are short and the store serialises them anyway. One pool per
# process (its threads start on first use).
_READS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="zds-job-read")


@dataclass(frozen=True)
class Job:
    id: str
    kind: str
    target: str | None
    state: JobState
    progress: float
    message: str
    result: dict[str, Any] | None
    error: dict[str, Any] | None
    created: float
    started: float | None
    finished: float | None

    @property
    def done(self) -> bool:
        return self.state in FINISHED


class JobCancelled(Exception):
    """Raised inside a job function by :meth:`JobContext.check_cancelled`."""


@dataclass
class JobContext:
    """Handed to a job function: progress reporting and cooperative cancellation."""

    job_id: str
    _manager: JobManager
    cancel_event: threading.Event = field(default_factory=threading.Event)
    on_cancel: list[Callable[[], None]] = field(default_factory=list)
    pool: str | None = None  # the pool the job works on, when its submitter named it

    def progress(self, fraction: float, message: str = "") -> None:
        self._manager._update(self.job_id, progress=max(0.0, min(1.0, fraction)),
                              message=message)

    @property
    def cancelled(self) -> bool:
        return self.cancel_event.is_set()

    @property
    def stopping(self) -> bool:
        """The appliance's API is stopping: a cancel now is an interruption, not a user's."""
        return self._manager._stopping

    def check_cancelled(self) -> None:
        if self.cancelled:
            raise JobCancelled()


JobFunction = Callable[[JobContext], dict[str, Any] | None]


class JobJournal(Protocol):
    """Where a running job is noted beyond this node's store (the HA pair's pools)."""

    def begin(self, job: Job, pool: str | None) -> str | None:
        """Notes ``job`` (``pool``: the pool it works on, when its caller knows it);
        returns the pool it was noted on, or None when it is not noted anywhere."""

    def end(self, job_id: str, pool: str) -> None:
        """The job finished here: its note on ``pool`` goes."""


class JobManager:
    def __init__(self, store: Store, workers: int = 2) -> None:
        self.store = store
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="zds-job")
        # scrubs and probes run for minutes: their own workers, so a delete or a pool
        # import never queues behind them
        self._long = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="zds-long")
        self._changed = threading.Condition()
        self._contexts: dict[str, JobContext] = {}
        self._stopping = False
        # async waits: the futures to wake when a job's row changes, with their loops
        self._waiters: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]]] \
            = {}
        self._waiters_lock = threading.Lock()
        # set by the engine in an HA pair (ClusterService): None notes nothing
        self.journal: JobJournal | None = None

    def recover(self) -> int:
        """Marks jobs interrupted by a restart as failed; returns how many."""
        return self._mark_unfinished_interrupted()

    def _mark_unfinished_interrupted(self) -> int:
        now = time.time()
        err = json.dumps({"code": "interrupted",
                          "message": "the API stopped while this job was running"})
        with self.store.connect() as db:
            cur = db.execute(
                "UPDATE jobs SET state='failed', error=?, finished=? "
                "WHERE state IN ('queued','running')",
                (err, now),
            )
        self._wake(None)
        return cur.rowcount

    def record_interrupted(self, job: Job) -> bool:
        """Records ``job``, known from elsewhere (the journal on a pool this node took),
        as it is given (failed, with its error), unless a job with its id is here
        already; returns whether it was recorded."""
        with self.store.connect() as db:
            cur = db.execute(
                "INSERT OR IGNORE INTO jobs (id, kind, target, state, progress, message, "
                "error, created, started, finished) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (job.id, job.kind, job.target, job.state, job.progress, job.message,
                 json.dumps(job.error) if job.error is not None else None, job.created,
                 job.started, job.finished))
        if cur.rowcount:
            self._wake(job.id)
        return bool(cur.rowcount)

    def submit(self, kind: str, target: str | None, fn: JobFunction,
               message: str = "", long: bool = False, job_id: str | None = None,
               pool: str | None = None) -> Job:
        """Records the job, then runs ``fn`` on a worker; ``job_id`` may be chosen by the
        caller (the scheduler records it with the slot before the job exists); ``pool``:
        the pool it works on, when ``target`` does not say (the journal's hint)."""
        job_id = job_id or uuid.uuid4().hex
        with self.store.connect() as db:
            db.execute(
                "INSERT INTO jobs (id, kind, target, state, message, created) "
                "VALUES (?,?,?,?,?,?)",
                (job_id, kind, target, "queued", message, time.time()),
            )
        ctx = JobContext(job_id, self, pool=pool)
        self._contexts[job_id] = ctx
        (self._long if long else self._pool).submit(self._run, ctx, fn)
        return self.get(job_id)

    def track(self, kind: str, target: str | None, work: Future[T],
              result_of: Callable[[T], dict[str, Any]], message: str = "",
              pool: str | None = None) -> Job:
        """A job that follows ``work``, already under way elsewhere (a queued datastore
        create): recorded as running now, finished when ``work`` is, with ``result_of``
        its result or its error. No worker waits for it. ``pool`` as for :meth:`submit`."""
        job_id = uuid.uuid4().hex
        now = time.time()
        with self.store.connect() as db:
            db.execute(
                "INSERT INTO jobs (id, kind, target, state, message, created, started) "
                "VALUES (?,?,?,?,?,?,?)",
                (job_id, kind, target, "running", message, now, now),
            )
        noted = self._journal_begin(job_id, pool)

        def done(finished: Future[T]) -> None:
            try:
                finish(finished)
            finally:
                if noted and not self._stopping:
                    self._journal_end(job_id, noted)

        def finish(finished: Future[T]) -> None:
            exc = finished.exception()
            if exc is None:
                self._finish(job_id, "succeeded", result_of(finished.result()), None)
            elif isinstance(exc, ZdsError):
                self._finish(job_id, "failed", None,
                             {"code": exc.code, "message": exc.message, "detail": exc.detail})
            else:
                self._finish(job_id, "failed", None,
                             {"code": "internal", "message": f"{type(exc).__name__}: {exc}"})

        work.add_done_callback(done)
        return self.get(job_id)

    def _run(self, ctx: JobContext, fn: JobFunction) -> None:
        if ctx.cancelled:
            self._finish(ctx.job_id, "cancelled", None, None)
            return
        noted = self._journal_begin(ctx.job_id, ctx.pool)
        self._update(ctx.job_id, state="running", started=time.time())
        try:
            result = fn(ctx)
        except JobCancelled:
            self._finish(ctx.job_id, "cancelled", None, None)
        except ZdsError as exc:
            self._finish(ctx.job_id, "failed", None,
                         {"code": exc.code, "message": exc.message, "detail": exc.detail})
        except Exception as exc:  # a job must always end with a recorded state
            log.exception("job %s failed", ctx.job_id)
            self._finish(ctx.job_id, "failed", None,
                         {"code": "internal", "message": f"{type(exc).__name__}: {exc}"})
        else:
            state: JobState = "cancelled" if ctx.cancelled else "succeeded"
            self._finish(ctx.job_id, state, result or {}, None)
        finally:
            self._contexts.pop(ctx.job_id, None)
            # stopping: the note stays, so the node that takes the pool next says
            # "interrupted" too (this node's own row says so already)
            if noted and not self._stopping:
                self._journal_end(ctx.job_id, noted)

    def _journal_begin(self, job_id: str, pool: str | None) -> str | None:
        """Notes the job in the journal (if any); a journal that fails is logged: the
        job runs anyway, as it would on a single appliance."""
        journal = self.journal
        if journal is None:
            return None
        try:
            return journal.begin(self.get(job_id), pool)
        except Exception:
            log.exception("job %s: cannot note it on its pool", job_id)
            return None

    def _journal_end(self, job_id: str, pool: str) -> None:
        journal = self.journal
        if journal is None:
            return
        try:
            journal.end(job_id, pool)
        except Exception:
            log.exception("job %s: cannot remove its note on pool %s", job_id, pool)

    def _finish(self, job_id: str, state: JobState, result: dict[str, Any] | None,
                error: dict[str, Any] | None) -> None:
        if self._stopping and state != "succeeded":
            # stopping killed its work (a probe's fio, a cancel hook): the row already
            # says "interrupted", which is the truth, not the tool's exit status
            return
        self._update(job_id, state=state, finished=time.time(),
                     progress=1.0 if state == "succeeded" else None,
                     result=json.dumps(result) if result is not None else None,
                     error=json.dumps(error) if error is not None else None)

    def _update(self, job_id: str, **fields: Any) -> None:
        sets = {k: v for k, v in fields.items() if v is not None}
        if not sets:
            return
        cols = ", ".join(f"{k}=?" for k in sets)
        with self.store.connect() as db:
            db.execute(f"UPDATE jobs SET {cols} WHERE id=?", (*sets.values(), job_id))
        with self._changed:
            self._changed.notify_all()
        self._wake(job_id)

    def _wake(self, job_id: str | None) -> None:
        """Wakes the async waits of ``job_id`` (None: of every job), from any thread."""
        with self._waiters_lock:
            if job_id is None:
                waiting = [w for ws in self._waiters.values() for w in ws]
            else:
                waiting = list(self._waiters.get(job_id, ()))
        for loop, woken in waiting:
            with contextlib.suppress(RuntimeError):  # that loop has closed: nobody waits
                loop.call_soon_threadsafe(_set_done, woken)

    def get(self, job_id: str) -> Job:
        with self.store.connect() as db:
            row = db.execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone()
        if row is None:
            raise NotFound(f"job {job_id!r} not found")
        return Job(
            id=row["id"], kind=row["kind"], target=row["target"], state=row["state"],
            progress=row["progress"], message=row["message"],
            result=json.loads(row["result"]) if row["result"] else None,
            error=json.loads(row["error"]) if row["error"] else None,
            created=row["created"], started=row["started"], finished=row["finished"],
        )

    def list(self, state: str | None = None, kind: str | None = None,
             limit: int = 100) -> list[Job]:
        query = "SELECT id FROM jobs"
        where, args = [], []
        if state:
            where.append("state=?")
            args.append(state)
        if kind:
            where.append("kind=?")
            args.append(kind)
        if where:
            query += " WHERE " + " AND ".join(where)
        query += " ORDER BY created DESC LIMIT ?"
        with self.store.connect() as db:
            ids = [r["id"] for r in db.execute(query, (*args, limit)).fetchall()]
        return [self.get(i) for i in ids]

    def wait(self, job_id: str, timeout: float) -> Job:
        """The job once finished, or as it is when ``timeout`` seconds have passed."""
        deadline = time.monotonic() + max(0.0, timeout)
        job = self.get(job_id)
        while not job.done:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            with self._changed:
                self._changed.wait(min(remaining, 1.0))
            job = self.get(job_id)
        return job

    async def wait_async(self, job_id: str, timeout: float) -> Job:
        """:meth:`wait` for an event loop, holding no thread while it waits: the job's
        thread wakes it (:meth:`_update`); only the reads of the row run on a thread."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout)
        while True:
            woken: asyncio.Future[None] = loop.create_future()
            waiter = (loop, woken)
            with self._waiters_lock:  # before the read, so no change slips between them
                self._waiters.setdefault(job_id, set()).add(waiter)
            try:
                job = await loop.run_in_executor(_READS, self.get, job_id)
                remaining = deadline - loop.time()
                if job.done or remaining <= 0:
                    return job
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken, min(remaining, REREAD_EVERY))
            finally:
                with self._waiters_lock:
                    left = self._waiters.get(job_id)
                    if left is not None:
                        left.discard(waiter)
                        if not left:
                            del self._waiters[job_id]

    def cancel(self, job_id: str) -> Job:
        job = self.get(job_id)
        if job.done:
            raise Conflict(f"job {job_id} already {job.state}")
        ctx = self._contexts.get(job_id)
        if ctx is not None:
            self._cancel(ctx)
        return self.get(job_id)

    @staticmethod
    def _cancel(ctx: JobContext) -> None:
        ctx.cancel_event.set()
        for hook in list(ctx.on_cancel):
            try:
                hook()
            except Exception:
                log.exception("cancel hook of job %s failed", ctx.job_id)

    def running_for(self, kind: str, target: str) -> Job | None:
        for job in self.list(kind=kind, limit=50):
            if job.target == target and not job.done:
                return job
        return None

    def shutdown(self) -> None:
        """Stops taking work: unfinished jobs are recorded as interrupted first, then
        cancelled (their cancel hooks stop the tools they run)."""
        self._stopping = True
        interrupted = self._mark_unfinished_interrupted()
        if interrupted:
            log.warning("stopping: %d unfinished jobs marked interrupted", interrupted)
        for ctx in list(self._contexts.values()):
            self._cancel(ctx)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._long.shutdown(wait=False, cancel_futures=True)


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
