"""Retention selection on plain data: which snapshots each class keeps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from appliance.errors import InvalidInput
from appliance.policies.retention import Retention, Snap, expired, select

START = datetime(2026, 11, 1, 0, 0, tzinfo=UTC)


def series(step: timedelta, count: int, start: datetime = START) -> list[Snap]:
    return [Snap(f"s{i:04d}", (start + i * step).timestamp(), i) for i in range(count)]


def names(snaps: list[Snap], keep: dict[str, list[str]]) -> list[str]:
    return [s.name for s in snaps if s.name in keep]


def test_frequent_keeps_the_newest() -> None:
    snaps = series(timedelta(minutes=15), 10)
    keep = select(snaps, Retention(frequent=3))
    assert sorted(keep) == ["s0007", "s0008", "s0009"]
    assert [s.name for s in expired(snaps, Retention(frequent=3))] == [
        f"s{i:04d}" for i in range(7)]


def test_hourly_keeps_the_newest_of_each_hour() -> None:
    snaps = series(timedelta(minutes=15), 12)  # 00:00 .. 02:45, four per hour
    keep = select(snaps, Retention(hourly=2))
    assert sorted(keep) == ["s0007", "s0011"]  # 01:45 and 02:45


def test_classes_add_up_and_say_why() -> None:
    snaps = series(timedelta(hours=6), 4 * 20)  # 20 days, every 6 h
    keep = select(snaps, Retention(frequent=2, daily=3, weekly=2))
    newest = snaps[-1].name
    assert keep[newest] == ["frequent", "daily", "weekly"]
    assert keep[snaps[-2].name] == ["frequent"]
    daily = [n for n, why in keep.items() if "daily" in why]
    assert len(daily) == 3
    weekly = [n for n, why in keep.items() if "weekly" in why]
    assert len(weekly) == 2
    assert len(keep) == 2 + 2 + 1  # newest counts once; 2 other dailies; 1 other weekly


def test_monthly_and_yearly() -> None:
    snaps = series(timedelta(days=1), 800)
    keep = select(snaps, Retention(monthly=3, yearly=2))
    monthly = sorted((datetime.fromtimestamp(s.created, UTC).strftime("%Y-%m-%d"), s.name)
                     for s in snaps if "monthly" in keep.get(s.name, []))
    assert [d for d, _ in monthly] == ["2028-11-30", "2028-12-31", "2029-01-08"]
    yearly = [s for s in snaps if "yearly" in keep.get(s.name, [])]
    assert len(yearly) == 2


def test_days_are_those_of_the_policy_time_zone() -> None:
    # 23:30 UTC is 00:30 the next day in Berlin: two snapshots 1 h apart, two Berlin days
    a = Snap("a", datetime(2026, 11, 23, 22, 30, tzinfo=UTC).timestamp())
    b = Snap("b", datetime(2026, 11, 23, 23, 30, tzinfo=UTC).timestamp())
    assert sorted(select([a, b], Retention(daily=2), ZoneInfo("UTC"))) == ["b"]
    assert sorted(select([a, b], Retention(daily=2), ZoneInfo("Europe/Berlin"))) == ["a", "b"]


def test_the_repeated_hour_is_two_hours() -> None:
    tz = ZoneInfo("Europe/Berlin")
    first = datetime(2026, 10, 25, 0, 30, tzinfo=UTC).timestamp()  # 02:30 CEST
    second = datetime(2026, 10, 25, 1, 30, tzinfo=UTC).timestamp()  # 02:30 CET
    snaps = [Snap("x", first), Snap("y", second)]
    assert sorted(select(snaps, Retention(hourly=2), tz)) == ["x", "y"]


def test_same_second_snapshots_are_ordered_by_txg() -> None:
    snaps = [Snap("p-1", 100.0, order=7), Snap("p-1-2", 100.0, order=5)]
    assert sorted(select(snaps, Retention(frequent=1))) == ["p-1"]


def test_nothing_is_expired_while_under_the_counts() -> None:
    snaps = series(timedelta(hours=1), 3)
    assert expired(snaps, Retention(frequent=5)) == []
    assert expired([], Retention(daily=1)) == []


@pytest.mark.parametrize(("counts", "text"), [
    ({}, "keep no snapshot"),
    ({"daily": 0, "hourly": 0}, "keep no snapshot"),
    ({"daily": -1}, "whole number"),
    ({"daily": 1.5}, "whole number"),
    ({"daily": True}, "whole number"),
    ({"minutely": 3}, "unknown retention class"),
    ({"daily": 10_001}, "whole number"),
])
def test_bad_retention(counts: dict[str, int], text: str) -> None:
    with pytest.raises(InvalidInput, match=text):
        Retention.parse(counts)
