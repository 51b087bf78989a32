"""The one clock: a missed slot runs once, runs never overlap, a restart never repeats a
slot, a manual run moves no slot, and every run is a job."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from appliance.errors import Conflict
from appliance.jobs import JobContext, JobManager
from appliance.scheduler import Scheduler, Task, every
from appliance.store import Store


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def make(tmp_path: Path, clock: Clock) -> tuple[Scheduler, JobManager, Store]:
    store = Store(tmp_path / "zds.db")
    jobs = JobManager(store)
    return Scheduler(store, jobs, clock=clock), jobs, store


def test_every_gives_the_newest_slot_not_yet_run() -> None:
    due = every(60)
    assert due(None, 125.0) == 120.0
    assert due(120.0, 179.0) is None
    assert due(120.0, 180.0) == 180.0
    assert due(120.0, 10_000.0) == 9960.0  # many missed: the newest, once
    with pytest.raises(ValueError):
        every(0)


def test_missed_slots_run_once_and_are_jobs(tmp_path: Path) -> None:
    clock = Clock(1000.0)
    sched, jobs, _ = make(tmp_path, clock)
    slots: list[float] = []

    def run(ctx: JobContext, slot: float) -> dict[str, Any]:
        slots.append(slot)
        return {"slot": slot}

    sched.register(Task("t", "test.run", "x", every(10), run))
    (job,) = sched.tick()
    assert jobs.wait(job.id, 5).state == "succeeded" and job.kind == "test.run"
    assert sched.tick() == []  # same slot: nothing
    clock.now = 1095.0  # nine slots missed
    (job,) = sched.tick()
    jobs.wait(job.id, 5)
    assert slots == [1000.0, 1090.0]
    assert sched.state("t").last_slot == 1090.0 and sched.state("t").last_job == jobs.get(job.id)
    jobs.shutdown()


def test_runs_of_one_task_never_overlap(tmp_path: Path) -> None:
    clock = Clock(0.0)
    sched, jobs, _ = make(tmp_path, clock)
    gate = threading.Event()

    def slow(ctx: JobContext, slot: float) -> dict[str, Any]:
        gate.wait(5)
        return {}

    sched.register(Task("slow", "test.slow", None, every(1), slow))
    (first,) = sched.tick()
    clock.now = 5.0
    assert sched.tick() == [], "the next slot waits while a run is going"
    with pytest.raises(Conflict):
        sched.run_now("slow")
    gate.set()
    jobs.wait(first.id, 5)
    (second,) = sched.tick()
    jobs.wait(second.id, 5)
    assert sched.state("slow").last_slot == 5.0
    jobs.shutdown()


def test_a_restart_does_not_repeat_a_slot(tmp_path: Path) -> None:
    clock = Clock(100.0)
    sched, jobs, store = make(tmp_path, clock)
    ran: list[float] = []

    def run(ctx: JobContext, slot: float) -> dict[str, Any]:
        ran.append(slot)
        return {}

    task = Task("t", "test.run", None, every(50), run)
    sched.register(task)
    (job,) = sched.tick()
    jobs.wait(job.id, 5)
    jobs.shutdown()
    store.close()
    # a new process: same database, same clock
    sched2, jobs2, _ = make(tmp_path, clock)
    sched2.register(task)
    assert sched2.tick() == []
    clock.now = 160.0
    (job,) = sched2.tick()
    jobs2.wait(job.id, 5)
    assert ran == [100.0, 150.0]
    jobs2.shutdown()


def test_a_manual_run_moves_no_slot_and_unregister_forgets(tmp_path: Path) -> None:
    clock = Clock(100.0)
    sched, jobs, _ = make(tmp_path, clock)
    sched.register(Task("t", "test.run", None, every(50), lambda ctx, slot: {}))
    jobs.wait(sched.tick()[0].id, 5)
    clock.now = 120.0
    jobs.wait(sched.run_now("t").id, 5)
    assert sched.state("t").last_slot == 100.0
    clock.now = 150.0
    assert len(sched.tick()) == 1
    sched.unregister("t", forget=True)
    assert sched.tasks() == []
    sched.register(Task("t", "test.run", None, every(50), lambda ctx, slot: {}))
    assert sched.state("t").last_slot is None
    jobs.shutdown()
