"""Schedule math: intervals, cron in a time zone across DST, missed slots run once, a new
policy starts at its next slot, and policy runs never overlap."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from appliance.errors import Conflict, InvalidInput, NotFound
from appliance.jobs import JobContext, JobManager
from appliance.policies.schedule import Schedule, parse_interval, utc_stamp
from appliance.scheduler import Scheduler, Task
from appliance.store import Store

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def ts(y: int, mo: int, d: int, h: int, mi: int = 0, tz: ZoneInfo | None = None,
       fold: int = 0) -> float:
    return datetime(y, mo, d, h, mi, tzinfo=tz or UTC, fold=fold).timestamp()


def utc(t: float | None) -> str:
    assert t is not None
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M")


@pytest.mark.parametrize(("text", "seconds"), [
    (90, 90), ("90", 90), ("30s", 30), ("15m", 900), ("6h", 21600), ("1d", 86400),
    ("2w", 14 * 86400), (" 15 M ", 900)])
def test_intervals(text: int | str, seconds: int) -> None:
    assert parse_interval(text) == seconds


@pytest.mark.parametrize("bad", ["5s", "0", "15 minutes", "-1m", "1y", "400d", True, "1.5h"])
def test_bad_intervals(bad: Any) -> None:
    with pytest.raises(InvalidInput):
        parse_interval(bad)


def test_interval_slots_are_utc_multiples_and_a_missed_run_is_one_slot() -> None:
    s = Schedule.parse(every="15m")
    now = ts(2026, 11, 23, 10, 7)
    assert utc(s.latest(now)) == "2026-11-23 10:00"
    assert utc(s.next_after(now)) == "2026-11-23 10:15"
    assert s.due(s.latest(now), now + 60) is None
    # the API was down for 5 hours: one run, for the newest slot
    assert utc(s.due(ts(2026, 11, 23, 10, 0), ts(2026, 11, 23, 15, 7))) == "2026-11-23 15:00"
    assert len(s.slots(ts(2026, 11, 23, 10, 0), ts(2026, 11, 23, 15, 7))) == 20


def test_cron_in_a_zone_runs_at_local_time() -> None:
    s = Schedule.parse(cron="0 2 * * *", timezone="Europe/Berlin")
    # winter (CET, +1): 02:00 local is 01:00 UTC; summer (CEST, +2): 00:00 UTC
    assert utc(s.latest(ts(2026, 1, 10, 12))) == "2026-01-10 01:00"
    assert utc(s.latest(ts(2026, 7, 10, 12))) == "2026-07-10 00:00"
    assert s.latest(ts(2026, 1, 10, 1, 0)) == ts(2026, 1, 10, 1, 0), "a slot exactly now"


def test_spring_forward_a_skipped_time_runs_once_at_the_jump() -> None:
    # Europe/Berlin, 2026-03-29: 02:00 CET -> 03:00 CEST; 02:30 does not exist that night
    s = Schedule.parse(cron="30 2 * * *", timezone="Europe/Berlin")
    slots = s.slots(ts(2026, 3, 28, 12), ts(2026, 3, 31, 12))
    local = [datetime.fromtimestamp(t, BERLIN).strftime("%m-%d %H:%M %Z") for t in slots]
    assert local == ["03-29 03:00 CEST", "03-30 02:30 CEST", "03-31 02:30 CEST"]
    # looking back from later that day finds the same single slot
    assert s.latest(ts(2026, 3, 29, 10)) == slots[0]


def test_fall_back_a_repeated_time_runs_once() -> None:
    # Europe/Berlin, 2026-10-25: 03:00 CEST -> 02:00 CET; 02:30 happens twice
    s = Schedule.parse(cron="30 2 * * *", timezone="Europe/Berlin")
    slots = s.slots(ts(2026, 10, 24, 12), ts(2026, 10, 26, 12))
    assert [utc(t) for t in slots] == ["2026-10-25 00:30", "2026-10-26 01:30"]
    first = slots[0]
    # at 01:45 UTC (02:45 CET, the second pass) nothing more is due
    assert s.due(first, ts(2026, 10, 25, 1, 45)) is None


def test_hourly_cron_in_new_york_across_both_changes() -> None:
    s = Schedule.parse(cron="0 * * * *", timezone="America/New_York")
    spring = s.slots(ts(2026, 3, 8, 0, 30, NEW_YORK), ts(2026, 3, 8, 4, 30, NEW_YORK))
    # 02:00 does not exist: 01:00 EST, then 03:00 EDT (one hour later in real time)
    assert [datetime.fromtimestamp(t, NEW_YORK).strftime("%H:%M") for t in spring] == \
        ["01:00", "03:00", "04:00"]
    autumn = s.slots(ts(2026, 11, 1, 0, 30, NEW_YORK), ts(2026, 11, 1, 3, 30, NEW_YORK))
    # 01:00 happens twice (EDT then EST): an hourly job runs in both, real hours apart
    assert len(autumn) == 4 and all(b - a == 3600 for a, b in pairwise(autumn))


def test_intervals_ignore_dst() -> None:
    s = Schedule.parse(every="1h", timezone="Europe/Berlin")
    slots = s.slots(ts(2026, 3, 28, 23), ts(2026, 3, 29, 4))
    assert all(b - a == 3600 for a, b in pairwise(slots))
    assert len(slots) == 5


@pytest.mark.parametrize(("kw", "text"), [
    ({}, "exactly one"),
    ({"every": "1h", "cron": "0 * * * *"}, "exactly one"),
    ({"cron": "0 2 * *"}, "five fields"),
    ({"cron": "0 0 2 * * *"}, "five fields"),
    ({"cron": "0 25 * * *"}, "invalid cron"),
    ({"cron": "0 0 31 2 *"}, "invalid cron"),
    ({"cron": "0 2 * * *", "timezone": "../../etc/passwd"}, "invalid time zone"),
])
def test_bad_schedules(kw: dict[str, Any], text: str) -> None:
    with pytest.raises(InvalidInput, match=text):
        Schedule.parse(**kw)


def test_a_zone_the_tzdata_lacks_is_not_found() -> None:
    # well formed (the schema allows it), so not 422: which zones exist is the appliance's
    with pytest.raises(NotFound, match="unknown time zone"):
        Schedule.parse(cron="0 2 * * *", timezone="Nowhere/City")


def test_cron_names_and_steps() -> None:
    s = Schedule.parse(cron="*/30 9-17 * * mon-fri")
    slots = s.slots(ts(2026, 11, 20, 16), ts(2026, 11, 23, 10))  # Fri 16:00 -> Mon 10:00
    assert [utc(t) for t in slots] == ["2026-11-20 16:30", "2026-11-20 17:00",
                                       "2026-11-20 17:30", "2026-11-23 09:00",
                                       "2026-11-23 09:30", "2026-11-23 10:00"]


def test_utc_stamp_sorts_like_time() -> None:
    assert utc_stamp(ts(2026, 11, 23, 3, 0)) == "2026-11-23T030000Z"
    assert utc_stamp(ts(2026, 11, 23, 3, 0)) < utc_stamp(ts(2026, 11, 23, 12, 0))


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_policy_runs_never_overlap_and_a_long_outage_runs_once(tmp_path: Path) -> None:
    """Through the one scheduler: a run slower than the interval holds the next slot back
    until it ends, and then only the newest slot runs."""
    clock = Clock(ts(2026, 11, 23, 10, 0))
    store = Store(tmp_path / "zds.db")
    jobs = JobManager(store)
    sched = Scheduler(store, jobs, clock=clock)
    s = Schedule.parse(every="1m")
    gate = threading.Event()
    ran: list[float] = []

    def run(ctx: JobContext, slot: float) -> dict[str, Any]:
        ran.append(slot)
        gate.wait(5)
        return {}

    sched.register(Task("policy:p", "policy.run", "p", s.due, run, long=True))
    (first,) = sched.tick()
    for minutes in (1, 2, 3):
        clock.now = ts(2026, 11, 23, 10, minutes)
        assert sched.tick() == [], "no second run while the first is going"
    with pytest.raises(Conflict):
        sched.run_now("policy:p")
    gate.set()
    jobs.wait(first.id, 5)
    clock.now = ts(2026, 11, 23, 10, 7) + 30
    (second,) = sched.tick()
    jobs.wait(second.id, 5)
    assert [utc(t) for t in ran] == ["2026-11-23 10:00", "2026-11-23 10:07"]
    jobs.shutdown()
