"""Which of a policy's snapshots to keep: counts per class, in the spirit of sanoid's
``frequently/hourly/daily/weekly/monthly/yearly`` (and restic's ``--keep-*``).

One schedule makes one series of snapshots; every class looks at that series:

- ``frequent: N`` keeps the N newest snapshots;
- ``hourly: N`` keeps the newest snapshot of each of the N newest hours that have one;
  ``daily``, ``weekly`` (ISO weeks, Monday first), ``monthly`` and ``yearly`` likewise.

Hours, days, weeks, months and years are those of the policy's time zone (a repeated
hour at the end of DST counts as two hours). A snapshot kept by any class is kept. Pure
functions on plain data: no ZFS here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from appliance.errors import InvalidInput

CLASSES = ("frequent", "hourly", "daily", "weekly", "monthly", "yearly")
MAX_KEEP = 10_000


@dataclass(frozen=True)
class Retention:
    frequent: int = 0
    hourly: int = 0
    daily: int = 0
    weekly: int = 0
    monthly: int = 0
    yearly: int = 0

    @staticmethod
    def parse(counts: dict[str, int]) -> Retention:
        unknown = sorted(set(counts) - set(CLASSES))
        if unknown:
            raise InvalidInput(f"unknown retention class {', '.join(unknown)}: use "
                               f"{', '.join(CLASSES)}")
        for key, n in counts.items():
            if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_KEEP:
                raise InvalidInput(f"retention {key} must be a whole number from 0 to "
                                   f"{MAX_KEEP}, not {n!r}")
        keep = Retention(**counts)
        if keep.total == 0:
            raise InvalidInput("this policy would keep no snapshot: give at least one "
                               "retention count above 0 (e.g. {\"daily\": 7})")
        return keep

    @property
    def total(self) -> int:
        return sum(asdict(self).values())

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class Snap:
    """A snapshot as retention sees it: a name and its creation time."""

    name: str
    created: float
    order: int = 0  # ZFS's createtxg: orders snapshots taken in the same second


def _buckets(tz: ZoneInfo) -> dict[str, Callable[[float], object]]:
    def local(t: float) -> datetime:
        return datetime.fromtimestamp(t, tz)

    def hour(t: float) -> object:
        d = local(t)
        return (d.date(), d.hour, d.utcoffset())  # the repeated hour is a second hour

    def week(t: float) -> object:
        iso = local(t).isocalendar()
        return (iso.year, iso.week)

    return {
        "hourly": hour,
        "daily": lambda t: local(t).date(),
        "weekly": week,
        "monthly": lambda t: (local(t).year, local(t).month),
        "yearly": lambda t: local(t).year,
    }


def select(snaps: Sequence[Snap], keep: Retention,
           tz: ZoneInfo | None = None) -> dict[str, list[str]]:
    """The snapshots to keep, each with the classes that keep it; the others may go.
    Ties in time are broken by ``order`` (createtxg), then by name."""
    order = sorted(snaps, key=lambda s: (s.created, s.order, s.name), reverse=True)
    reasons: dict[str, list[str]] = {}
    for s in order[:keep.frequent]:
        reasons.setdefault(s.name, []).append("frequent")
    counts = keep.as_dict()
    for cls, key in _buckets(tz or ZoneInfo("UTC")).items():
        want = counts[cls]
        seen: set[object] = set()
        for s in order:
            if len(seen) >= want:
                break
            bucket = key(s.created)
            if bucket not in seen:
                seen.add(bucket)
                reasons.setdefault(s.name, []).append(cls)
    return reasons


def expired(snaps: Sequence[Snap], keep: Retention, tz: ZoneInfo | None = None) -> list[Snap]:
    """The snapshots no class keeps, oldest first."""
    kept = select(snaps, keep, tz)
    return sorted((s for s in snaps if s.name not in kept),
                  key=lambda s: (s.created, s.order, s.name))
