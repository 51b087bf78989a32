"""The metrics use cases: collect on the scheduler, keep history, answer series, latest
numbers and advice.

The collector runs on the one scheduler (task ``metrics``, job kind ``metrics.collect``,
every ``interval`` seconds); each run is a job, and runs older than the newest
:data:`KEEP_JOBS` are deleted so the jobs table stays bounded (8,640 runs a day at 10 s).

:func:`build` makes the service from the context; everything else takes plain callables.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from appliance.context import Context
from appliance.errors import InvalidInput, NotFound, ZdsError
from appliance.host.iostats import IoStatsHost
from appliance.jobs import JobContext
from appliance.metrics import advice as adv
from appliance.metrics.collector import Collection, Collector, DatastoreSample
from appliance.metrics.history import MAX_POINTS, History, SeriesPoint
from appliance.model import DatastoreRecord
from appliance.patterns import anchored, decimal_up_to, int_at_least
from appliance.probes.service import ProbeService
from appliance.probes.store import ResultFilter
from appliance.scheduler import Task, every

log = logging.getLogger(__name__)

TASK = "metrics"
JOB_KIND = "metrics.collect"
KEEP_JOBS = 60  # the last 10 minutes of runs at the default interval
RETAIN_EVERY = 30  # runs between two retention passes (5 min at 10 s)
ADVICE_WINDOW_H = 24.0

_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?) *([smhd])")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # float() and strip() would drop "\n"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_SPAN = 400 * 86400  # seconds: the longest duration a window or step may be
UNIX_TIME_AFTER = 1e9  # a bare number above it is a unix time (2001-09-09 on)

# The rules above as OpenAPI patterns (appliance/patterns.py): a duration of at most 400
# days with a unit (or, for a step, bare seconds); for since also a unix time or an ISO
# 8601 date-time of 1970-9999 (days that exist, leap years counted). Narrower than the
# parsers in the forms people rarely type (exponents, long fractions, odd separators).
_FRACTION_DIGITS = 9
_DURATION_TEXT = "|".join(f"{decimal_up_to(MAX_SPAN // n, _FRACTION_DIGITS)} *{u}"
                          for u, n in _UNITS.items())
_SECONDS_TEXT = decimal_up_to(MAX_SPAN, _FRACTION_DIGITS)
_UNIX_TIME = rf"{int_at_least(int(UNIX_TIME_AFTER) + 1)}(?:\.[0-9]{{1,{_FRACTION_DIGITS}}})?"
_YEAR = r"(?:19[7-9][0-9]|[2-9][0-9]{3})"
_LEAP_YEAR = (r"(?:19[79][26]|198[048]|[2-9][0-9](?:0[48]|[2468][048]|[13579][26])"
              r"|(?:[2468][048]|[3579][26])00)")
_DATE = (rf"{_YEAR}-(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])"
         rf"|(?:0[13-9]|1[0-2])-(?:29|30)|(?:0[13578]|1[02])-31)|{_LEAP_YEAR}-02-29")
_TIME = r"(?:[01][0-9]|2[0-3])(?::[0-5][0-9](?::[0-5][0-9](?:\.[0-9]{1,6})?)?)?"
_OFFSET = r"(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
ISO_TIME = rf"(?:{_DATE})(?:[T ]{_TIME}{_OFFSET}?)?"
SINCE_PATTERN = anchored(f" *(?:{_DURATION_TEXT}|{_UNIX_TIME}|{ISO_TIME}) *")
STEP_PATTERN = anchored(f" *(?:{_DURATION_TEXT}|{_SECONDS_TEXT}) *")


@dataclass(frozen=True)
class Series:
    subject: str
    since: float
    until: float
    step: float
    points: list[SeriesPoint]


def parse_duration(text: str, what: str) -> float:
    """Seconds from ``30s``/``5m``/``1h``/``2d`` or a number of seconds (at most 400 days)."""
    if _CONTROL.search(text):
        raise InvalidInput(f"{what}: {text!r} is not a duration (30s, 5m, 1h, 2d or seconds)")
    m = _DURATION.fullmatch(text.strip(" "))
    if m is None:
        try:
            value = float(text)
        except ValueError:
            raise InvalidInput(f"{what}: {text!r} is not a duration (30s, 5m, 1h, 2d or "
                               "seconds)") from None
    else:
        value = float(m.group(1)) * _UNITS[m.group(2)]
    if not 0 < value <= MAX_SPAN:
        raise InvalidInput(f"{what}: {text!r} must be more than 0 and at most 400 days")
    return value


def parse_since(text: str | None, now: float, default: float = 3600.0) -> float:
    """A time: a duration back from now (1h), a unix time or an ISO 8601 date-time."""
    if not text:
        return now - default
    if _CONTROL.search(text):
        raise InvalidInput(f"since: {text!r} is not a duration (1h), a unix time or an "
                           "ISO 8601 time")
    t = text.strip(" ")
    if _DURATION.fullmatch(t):
        return now - parse_duration(t, "since")
    try:
        value = float(t)
    except ValueError:
        try:
            return datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp()
        except ValueError:
            raise InvalidInput(f"since: {text!r} is not a duration (1h), a unix time or an "
                               "ISO 8601 time") from None
    if value > UNIX_TIME_AFTER:
        return value
    raise InvalidInput(f"since: {text!r}: give a unix time, or a duration such as 1h")


class MetricsService:
    def __init__(self, collector: Collector | None, history: History,
                 records: Callable[[], Iterable[DatastoreRecord]],
                 dataset_properties: Callable[[DatastoreRecord], Mapping[str, str]],
                 probe_results: Callable[[str], Sequence[Mapping[str, Any]]],
                 prune_jobs: Callable[[int], int], interval: float,
                 clock: Callable[[], float] = time.time) -> None:
        self.collector = collector
        self.history = history
        self.records = records
        self.dataset_properties = dataset_properties
        self.probe_results = probe_results
        self.prune_jobs = prune_jobs
        self.interval = interval
        self.clock = clock
        self._runs = 0

    @property
    def enabled(self) -> bool:
        return self.collector is not None and self.interval > 0

    def task(self) -> Task:
        return Task(TASK, JOB_KIND, None, every(self.interval), self._run)

    def _run(self, ctx: JobContext, slot: float) -> dict[str, Any]:
        col = self.collect()
        return {"datastores": len(col.datastores), "pools": len(col.pools),
                "errors": col.errors}

    def collect(self) -> Collection:
        """One collection: read, difference, record; retention and job pruning now and
        then."""
        if self.collector is None:
            raise NotFound("metrics are not collected on this appliance (no I/O sources)")
        col = self.collector.collect()
        self.history.add(col.datastores, col.pools)
        self._runs += 1
        if self._runs % RETAIN_EVERY == 1:
            self.history.retain()
        self.prune_jobs(KEEP_JOBS)
        return col

    # --- reading ------------------------------------------------------------------------

    def _record(self, name: str) -> DatastoreRecord:
        for r in self.records():
            if r.name == name:
                return r
        raise NotFound(f"datastore {name!r} not found")

    def _window(self, since: str | None, step: str | None) -> tuple[float, float, float]:
        now = self.clock()
        # a start in the future is an empty window, and a step too fine for the window
        # is widened to MAX_POINTS points (the answer says the step used): both depend on
        # the clock, so they are not the request's fault
        start = min(parse_since(since, now), now)
        span = now - start
        st = parse_duration(step, "step") if step else max(self.interval or 10.0, span / 300)
        return start, now, max(st, span / MAX_POINTS)

    def datastore_series(self, name: str, since: str | None = None,
                         step: str | None = None) -> Series:
        self._record(name)
        start, now, st = self._window(since, step)
        return Series(name, start, now, st, self.history.datastore_series(name, start, now, st))

    def pool_series(self, pool: str, since: str | None = None,
                    step: str | None = None) -> Series:
        start, now, st = self._window(since, step)
        points = self.history.pool_series(pool, start, now, st)
        if not points and pool not in {r.spec.pool for r in self.records()} \
                and not self.history.pool_rows(pool, 0):
            raise NotFound(f"no metrics for pool {pool!r}")
        return Series(pool, start, now, st, points)

    def latest(self) -> Collection | None:
        return self.collector.latest if self.collector else None

    def latest_datastores(self) -> dict[str, DatastoreSample]:
        col = self.latest()
        return {s.name: s for s in col.datastores} if col else {}

    def advice(self, name: str) -> list[adv.Finding]:
        rec = self._record(name)
        since = self.clock() - ADVICE_WINDOW_H * 3600
        try:
            props = dict(self.dataset_properties(rec))
        except ZdsError:
            props = {}
        facts = adv.DatastoreFacts(
            name=rec.name, pool=rec.spec.pool, protocol=rec.spec.protocol, thin=rec.spec.thin,
            properties=props, samples=self.history.datastore_samples(name, since),
            pool_rows=self.history.pool_rows(rec.spec.pool, since),
            probes=self.probe_results(name), window_hours=ADVICE_WINDOW_H)
        return adv.advise(facts)


ADVICE_PROPERTIES = ("recordsize", "volblocksize", "volsize", "sync", "used", "logbias")


def build(ctx: Context, stats: IoStatsHost | None, probes: ProbeService) -> MetricsService:
    """The service on the context's store, ZFS and transports; registers the collector on
    the scheduler when there are I/O sources and an interval."""
    store = ctx.store
    collector = None
    if stats is not None:
        collector = Collector(stats, ctx.zfs, ctx.transports, store.list_datastores,
                              probes.registry.running)

    def dataset_properties(rec: DatastoreRecord) -> Mapping[str, str]:
        info = ctx.zfs.get_dataset(rec.spec.dataset, ADVICE_PROPERTIES)
        return {k: info.prop(k) for k in ADVICE_PROPERTIES} if info else {}

    def probe_results(name: str) -> list[dict[str, Any]]:
        rows = probes.list(ResultFilter(datastore=name, status="ok", limit=200))
        return [{"id": r.id, "profile": r.profile, "target": r.target.get("kind", ""),
                 "started_at": r.started_at, "iops": r.summary.get("iops")} for r in rows]

    def prune(keep: int) -> int:
        with store.connect() as db:
            cur = db.execute(
                "DELETE FROM jobs WHERE kind = ? AND state IN ('succeeded', 'failed', "
                "'cancelled') AND id NOT IN (SELECT id FROM jobs WHERE kind = ? "
                "ORDER BY created DESC LIMIT ?)", (JOB_KIND, JOB_KIND, keep))
        return int(cur.rowcount)

    svc = MetricsService(collector, History(store), store.list_datastores,
                         dataset_properties, probe_results, prune,
                         ctx.settings.metrics_interval)
    if svc.enabled:
        ctx.scheduler.register(svc.task())
        assert collector is not None
        probes.before_cleanup.append(collector.checkpoint_probe)
    return svc
