"""When a snapshot policy runs: an interval, or cron times in a named time zone.

- ``every``: slots at whole multiples of the interval since 1970-01-01 00:00 UTC (``15m``
  runs at :00, :15, :30, :45 UTC; ``6h`` at 00, 06, 12, 18 UTC). Time zones and DST do not
  move them.
- ``cron``: a standard 5-field expression (minute hour day-of-month month day-of-week,
  names and ranges allowed) read in ``timezone`` (IANA name, default UTC). The grammar and
  the daylight-saving rules are cronsim's, which follows Debian's cron: a time of day the
  clock skips (02:30 on the spring-forward night in Europe) runs once, at the jump
  (03:00 local); a time of day the clock passes twice (02:30 on the fall-back night) runs
  once, the first time. Expressions with ``*`` in the minute or hour field (``*/15 * * *
  *``) run on every real occurrence, so such a policy runs in both passes of a repeated
  hour. Use ``every`` for sub-hourly policies: it has no DST effects at all.

:meth:`Schedule.due` is the scheduler's ``DueFunction``: the newest slot not after now
and later than the last one run, so any number of missed slots gives one run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from appliance.errors import InvalidInput, NotFound
from appliance.patterns import anchored, int_range, no_case

MIN_INTERVAL = 10  # seconds; the scheduler ticks every second, runs take a few seconds
MAX_INTERVAL = 366 * 86400
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_INTERVAL = re.compile(r" *([0-9]+) *([smhdw]?) *")
TIMEZONE = r"[A-Za-z0-9_+-][A-Za-z0-9_+/-]{0,63}"  # an IANA name's characters, no '/' first
# The cron grammar cronsim reads (Debian cron's), as a pattern the OpenAPI document
# publishes and parse() checks first: per field its values (numbers in range, month and
# day names in any case), ranges low-high, steps, lists; day-of-month L and LW,
# day-of-week 5L and MON#2. cronsim then refuses only a day that never comes (30 Feb).
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# (lowest, highest, names from lowest on) of minute, hour, day-of-month, month, day-of-week
_CRON_FIELDS = ((0, 59, ()), (0, 23, ()), (1, 31, ()), (1, 12, _MONTHS), (0, 7, _DAYS))


def _cron_field(lo: int, hi: int, names: tuple[str, ...], extra: tuple[str, ...]) -> str:
    """One field: a list of items, each ``*``, a value or an ascending range, with an
    optional ``/step``, or one of ``extra``."""
    def from_(low: int) -> str:  # a value of low or more
        spelt = [no_case(n) for i, n in enumerate(names, lo) if i >= low]
        return "(?:" + "|".join([int_range(low, hi), *spelt]) + ")"

    ranges = "|".join(f"(?:0*{v}|{no_case(names[v - lo])})-{from_(v)}"
                      if v - lo < len(names) else f"0*{v}-{from_(v)}"
                      for v in range(lo, hi + 1))
    item = f"(?:(?:\\*|{ranges}|{from_(lo)})(?:/0*[1-9][0-9]*)?{''.join('|' + e for e in extra)})"
    return f"{item}(?:,{item})*"


def cron_pattern() -> str:
    """The 5-field cron expressions :meth:`Schedule.parse` takes (blanks around and
    between the fields as ``str.split()`` reads them: spaces)."""
    extras: list[tuple[str, ...]] = [(), (), (no_case("lw"), no_case("l")), (),
                                     (f"0*[0-7]{no_case('l')}", f"{int_range(0, 7)}#0*[1-5]",
                                      *(f"{no_case(d)}#0*[1-5]" for d in _DAYS))]
    fields = [_cron_field(lo, hi, names, extra)
              for (lo, hi, names), extra in zip(_CRON_FIELDS, extras, strict=True)]
    return anchored(" *" + " +".join(fields) + " *")


def parse_interval(value: int | str) -> int:
    """``90`` / ``"90s"`` / ``"15m"`` / ``"6h"`` / ``"1d"`` / ``"1w"`` -> seconds."""
    if isinstance(value, bool):
        raise InvalidInput(f"invalid interval {value!r}")
    if isinstance(value, int):
        seconds = value
    else:
        m = _INTERVAL.fullmatch(str(value).lower())
        if not m:
            raise InvalidInput(f"invalid interval {value!r}: a number with s, m, h, d or w "
                               "(e.g. 15m, 6h, 1d)")
        seconds = int(m.group(1)) * _UNITS[m.group(2) or "s"]
    if not MIN_INTERVAL <= seconds <= MAX_INTERVAL:
        raise InvalidInput(f"invalid interval {value!r}: from {MIN_INTERVAL} s to 366 days")
    return seconds


def zone(name: str) -> ZoneInfo:
    """An IANA time zone (``Europe/Berlin``, ``UTC``), or InvalidInput."""
    if not isinstance(name, str) or not re.fullmatch(TIMEZONE, name):
        raise InvalidInput(f"invalid time zone {name!r}: an IANA name such as Europe/Berlin")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        # well formed, but not in this appliance's tzdata: what it knows is its state
        raise NotFound(f"unknown time zone {name!r}: an IANA name such as "
                       "Europe/Berlin or UTC") from None


def interval_pattern() -> str:
    """The interval strings :func:`parse_interval` takes (within its limits), for the
    OpenAPI document: a whole number of seconds, minutes, hours, days or weeks."""
    forms = []
    for unit, seconds in _UNITS.items():
        lo, hi = -(-MIN_INTERVAL // seconds), MAX_INTERVAL // seconds
        suffix = f"{no_case(unit)}?" if unit == "s" else no_case(unit)
        forms.append(f"{int_range(lo, hi)} *{suffix}")
    return anchored(" *(?:" + "|".join(forms) + ") *")


INTERVAL_PATTERN = interval_pattern()
TIMEZONE_PATTERN = anchored(TIMEZONE)
CRON_PATTERN = cron_pattern()
_CRON = re.compile(CRON_PATTERN)


@dataclass(frozen=True)
class Schedule:
    """Exactly one of ``every`` (seconds) and ``cron``; ``timezone`` for cron (and for
    the day/week/month boundaries of retention)."""

    every: int | None = None
    cron: str | None = None
    timezone: str = "UTC"

    @staticmethod
    def parse(every: int | str | None = None, cron: str | None = None,
              timezone: str | None = None) -> Schedule:
        """Validates a schedule as sent in a policy; InvalidInput says what is wrong."""
        if (every is None) == (cron is None):
            raise InvalidInput("a schedule needs exactly one of 'every' (e.g. 15m) and "
                               "'cron' (e.g. '0 2 * * *')")
        tz = timezone or "UTC"
        zone(tz)
        if every is not None:
            return Schedule(every=parse_interval(every), timezone=tz)
        assert cron is not None
        if re.search(r"[\x00-\x1f\x7f]", str(cron)):  # split() would hide a "\n"
            raise InvalidInput(f"invalid cron expression {cron!r}: five fields separated "
                               "by spaces, on one line")
        expr = " ".join(str(cron).split())
        if not _CRON.fullmatch(expr):
            raise InvalidInput(f"invalid cron expression {cron!r}: five fields (minute hour "
                               "day-of-month month day-of-week) of values in range, "
                               "ranges, steps and lists, e.g. '0 2 * * *'")
        try:
            next(CronSim(expr, datetime.now(ZoneInfo(tz))))
        except (CronSimError, StopIteration) as exc:
            raise InvalidInput(f"invalid cron expression {cron!r}: {exc or 'never runs'}"
                               ) from None
        return Schedule(cron=expr, timezone=tz)

    def describe(self) -> str:
        if self.every is not None:
            return f"every {self.every} s (from 00:00 UTC)"
        return f"cron '{self.cron}' in {self.timezone}"

    def latest(self, now: float) -> float | None:
        """The newest slot at or before ``now`` (unix seconds)."""
        if self.every is not None:
            return float((int(now) // self.every) * self.every)
        assert self.cron is not None
        # cronsim in reverse: with microseconds set, dropping them is its first step, so
        # a slot exactly at floor(now) is found
        start = datetime.fromtimestamp(int(now), ZoneInfo(self.timezone)) \
            + timedelta(microseconds=500_000)
        try:
            return next(CronSim(self.cron, start, reverse=True)).timestamp()
        except StopIteration:
            return None

    def next_after(self, t: float) -> float | None:
        """The first slot after ``t``."""
        if self.every is not None:
            return float((int(t) // self.every + 1) * self.every)
        assert self.cron is not None
        try:
            start = datetime.fromtimestamp(int(t), ZoneInfo(self.timezone))
            return next(CronSim(self.cron, start)).timestamp()
        except StopIteration:
            return None

    def due(self, last: float | None, now: float) -> float | None:
        """The newest slot not after ``now`` and later than ``last``, else None."""
        slot = self.latest(now)
        if slot is None or (last is not None and slot <= last):
            return None
        return slot

    def slots(self, start: float, end: float, limit: int = 10_000) -> list[float]:
        """Every slot in (start, end] (for tests and the 'next runs' view)."""
        out: list[float] = []
        t = start
        while len(out) < limit:
            nxt = self.next_after(t)
            if nxt is None or nxt > end:
                break
            out.append(nxt)
            t = nxt
        return out


def utc_stamp(t: float) -> str:
    """``2026-11-23T030000Z``: the UTC time in a snapshot name (sorts by time, no ':')."""
    return datetime.fromtimestamp(int(t), UTC).strftime("%Y-%m-%dT%H%M%SZ")
