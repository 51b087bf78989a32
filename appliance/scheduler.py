"""One clock for everything that runs on a schedule (snapshot policies, replication, the
metrics collector): each run is a job, a slot missed while the API was down runs once
(not once per missed slot), runs of one task never overlap, and nothing runs twice after
a restart.

A :class:`Task` says when it is due: ``due(last_slot, now)`` returns the newest slot
(a unix time) that is due at ``now`` and later than ``last_slot``, or None. The scheduler
records the slot in SQLite *before* it submits the job, so a crash or restart during the
run does not run that slot again (the job itself is marked failed, "interrupted", by
JobManager.recover); the next slot runs as usual.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from appliance.errors import Conflict, NotFound
from appliance.jobs import Job, JobContext, JobManager
from appliance.store import Store

log = logging.getLogger(__name__)

SCHEMA = """
CREATE TABLE IF NOT EXISTS schedule_runs (
    task TEXT PRIMARY KEY,
    last_slot REAL NOT NULL,
    job_id TEXT,
    updated REAL NOT NULL
);
"""

DueFunction = Callable[[float | None, float], float | None]
RunFunction = Callable[[JobContext, float], dict[str, Any] | None]


@dataclass(frozen=True)
class Task:
    """A scheduled task. ``run(ctx, slot)`` does one run for ``slot`` (as a job)."""

    name: str  # unique: "policy:nightly", "replication:r1", "metrics"
    kind: str  # the job kind: "policy.run", "replication.run", "metrics.collect"
    target: str | None
    due: DueFunction
    run: RunFunction
    long: bool = False  # runs for minutes: on the long-job workers


def every(seconds: float, anchor: float = 0.0) -> DueFunction:
    """Slots at ``anchor + k * seconds``: due is the newest one not after now."""
    if seconds <= 0:
        raise ValueError("an interval must be positive")

    def due(last: float | None, now: float) -> float | None:
        slot = anchor + ((now - anchor) // seconds) * seconds
        return slot if last is None or slot > last else None

    return due


@dataclass(frozen=True)
class TaskState:
    name: str
    kind: str
    target: str | None
    last_slot: float | None
    last_job: Job | None


class Scheduler:
    def __init__(self, store: Store, jobs: JobManager, tick: float = 1.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.jobs = jobs
        self.tick_interval = tick
        self.clock = clock
        self._tasks: dict[str, Task] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        with store.connect() as db:
            db.execute(SCHEMA)

    # --- tasks ----------------------------------------------------------------------
    def register(self, task: Task) -> None:
        """Adds or replaces a task (its last slot is kept when it is replaced)."""
        with self._lock:
            self._tasks[task.name] = task

    def unregister(self, name: str, forget: bool = False) -> None:
        """Removes a task; ``forget`` also drops its last slot (a deleted policy)."""
        with self._lock:
            self._tasks.pop(name, None)
        if forget:
            with self.store.connect() as db:
                db.execute("DELETE FROM schedule_runs WHERE task=?", (name,))

    def tasks(self) -> list[str]:
        with self._lock:
            return sorted(self._tasks)

    def state(self, name: str) -> TaskState:
        with self._lock:
            task = self._tasks.get(name)
        if task is None:
            raise NotFound(f"no scheduled task {name!r}")
        last, job_id = self._last(name)
        job = None
        if job_id:
            try:
                job = self.jobs.get(job_id)
            except NotFound:
                job = None
        return TaskState(task.name, task.kind, task.target, last, job)

    def _last(self, name: str) -> tuple[float | None, str | None]:
        with self.store.connect() as db:
            row = db.execute("SELECT last_slot, job_id FROM schedule_runs WHERE task=?",
                             (name,)).fetchone()
        return (float(row["last_slot"]), row["job_id"]) if row else (None, None)

    # --- running --------------------------------------------------------------------
    def run_now(self, name: str) -> Job:
        """Runs a task at once (a manual run); refused while a run of it is going."""
        with self._lock:
            task = self._tasks.get(name)
        if task is None:
            raise NotFound(f"no scheduled task {name!r}")
        return self._submit(task, self.clock(), manual=True)

    def tick(self) -> list[Job]:
        """Submits every task that is due now and not already running; returns the jobs.
        The background thread calls it every ``tick`` seconds; tests call it directly."""
        now = self.clock()
        with self._lock:
            tasks = list(self._tasks.values())
        submitted = []
        for task in tasks:
            last, job_id = self._last(task.name)
            try:
                slot = task.due(last, now)
            except Exception:
                log.exception("scheduled task %s: cannot compute its next slot", task.name)
                continue
            if slot is None:
                continue
            if job_id and self._running(job_id):
                continue  # never overlap: the slot stays due until this run ends
            try:
                submitted.append(self._submit(task, slot))
            except Conflict:
                continue
        return submitted

    def _running(self, job_id: str) -> bool:
        try:
            return not self.jobs.get(job_id).done
        except NotFound:
            return False

    def _submit(self, task: Task, slot: float, manual: bool = False) -> Job:
        last, job_id = self._last(task.name)
        if job_id and self._running(job_id):
            raise Conflict(f"{task.name} is running already (job {job_id})")

        def body(ctx: JobContext) -> dict[str, Any] | None:
            return task.run(ctx, slot)

        # the slot is recorded first: a restart during the run does not repeat it
        new_id = uuid.uuid4().hex
        self._record(task.name, slot, new_id, manual, last)
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(slot))
        return self.jobs.submit(task.kind, task.target, body, long=task.long, job_id=new_id,
                                message=f"{task.name}: "
                                        f"{'manual' if manual else 'scheduled'} run for {when}")

    def _record(self, name: str, slot: float, job_id: str, manual: bool,
                last: float | None) -> None:
        keep = last if manual and last is not None else slot  # a manual run moves no slot
        with self.store.connect() as db:
            db.execute(
                "INSERT INTO schedule_runs (task, last_slot, job_id, updated) VALUES (?,?,?,?) "
                "ON CONFLICT(task) DO UPDATE SET last_slot=excluded.last_slot, "
                "job_id=excluded.job_id, updated=excluded.updated",
                (name, keep if keep is not None else slot, job_id, time.time()))

    def start(self) -> None:
        if self._thread is not None:
            return

        def loop() -> None:
            while not self._stop.wait(self.tick_interval):
                try:
                    self.tick()
                except Exception:
                    log.exception("scheduler tick failed")

        thread = threading.Thread(target=loop, name="zds-scheduler", daemon=True)
        thread.start()  # started before it is published: stop() may run from another
        self._thread = thread  # thread (the API stopping while start-up still runs)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
