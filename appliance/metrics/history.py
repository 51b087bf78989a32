"""Metric history in the appliance's SQLite, bounded: every sample for 24 hours, then
5-minute sums for 30 days, then nothing.

Datastore rows hold counts over their interval (ops, bytes, latency sums), so merging
rows is a plain SUM and any step gives exact rates and mean latencies. Pool rows hold
what ``zpool iostat -l`` saw over one second (rates, mean waits) and fill/fragmentation:
merging averages them. Retention runs with every collection: finished 5-minute buckets
older than 24 h are summed into one row each (``res`` 300) in the same transaction that
deletes their samples (``res`` 0), so no sample is counted twice.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from appliance.metrics.collector import DatastoreSample, PoolSample
from appliance.metrics.counters import DS_COUNTERS
from appliance.store import Store

FULL_KEEP = 24 * 3600.0
BUCKET = 300
COARSE_KEEP = 30 * 24 * 3600.0
MAX_POINTS = 1000

POOL_VALUES = ("size", "allocated", "fragmentation", "capacity", "read_ops", "write_ops",
               "read_bytes", "write_bytes", "total_wait_read", "total_wait_write",
               "disk_wait_read", "disk_wait_write", "syncq_wait_read", "syncq_wait_write",
               "asyncq_wait_read", "asyncq_wait_write", "slog", "l2arc")
ARC_COUNTS = ("hits", "misses", "l2_hits", "l2_misses")

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS metrics_datastore (
    name TEXT NOT NULL, res INTEGER NOT NULL, ts REAL NOT NULL,
    pool TEXT NOT NULL, protocol TEXT NOT NULL, interval REAL NOT NULL,
    {", ".join(f"{c} INTEGER NOT NULL DEFAULT 0" for c in DS_COUNTERS)},
    probe INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (name, res, ts)
);
CREATE TABLE IF NOT EXISTS metrics_pool (
    pool TEXT NOT NULL, res INTEGER NOT NULL, ts REAL NOT NULL, interval REAL NOT NULL,
    {", ".join(f"{c} REAL" for c in POOL_VALUES)},
    {", ".join(f"arc_{c} INTEGER NOT NULL DEFAULT 0" for c in ARC_COUNTS)},
    PRIMARY KEY (pool, res, ts)
);
"""


@dataclass(frozen=True)
class SeriesPoint:
    ts: float  # start of the step
    values: dict[str, float | None]


class History:
    def __init__(self, store: Store, clock: Any = time.time) -> None:
        self.store = store
        self.clock = clock
        with store.connect() as db:
            for stmt in SCHEMA.split(";"):
                if stmt.strip():
                    db.execute(stmt)

    # --- writing ------------------------------------------------------------------------

    def add(self, datastores: Sequence[DatastoreSample], pools: Sequence[PoolSample]) -> None:
        cols = ", ".join(DS_COUNTERS)
        marks = ", ".join("?" for _ in DS_COUNTERS)
        pcols = ", ".join(POOL_VALUES)
        pmarks = ", ".join("?" for _ in POOL_VALUES)
        acols = ", ".join(f"arc_{c}" for c in ARC_COUNTS)
        with self.store.connect() as db:
            db.executemany(
                f"INSERT OR REPLACE INTO metrics_datastore (name, res, ts, pool, protocol, "
                f"interval, {cols}, probe) VALUES (?, 0, ?, ?, ?, ?, {marks}, ?)",
                [(s.name, s.ts, s.pool, s.protocol, s.interval,
                  *(s.counts.get(c, 0) for c in DS_COUNTERS), int(s.probe))
                 for s in datastores])
            db.executemany(
                f"INSERT OR REPLACE INTO metrics_pool (pool, res, ts, interval, {pcols}, "
                f"{acols}) VALUES (?, 0, ?, ?, {pmarks}, ?, ?, ?, ?)",
                [(p.pool, p.ts, p.interval, *_pool_values(p),
                  *(p.arc.get(c, 0) for c in ARC_COUNTS)) for p in pools])

    def retain(self, now: float | None = None) -> None:
        """Sums samples older than 24 h into 5-minute rows; drops rows older than 30 days."""
        now = self.clock() if now is None else now
        cutoff = math.floor((now - FULL_KEEP) / BUCKET) * BUCKET
        sums = ", ".join(f"SUM({c})" for c in DS_COUNTERS)
        cols = ", ".join(DS_COUNTERS)
        pavg = ", ".join(f"AVG({c})" for c in POOL_VALUES)
        pcols = ", ".join(POOL_VALUES)
        asum = ", ".join(f"SUM(arc_{c})" for c in ARC_COUNTS)
        acols = ", ".join(f"arc_{c}" for c in ARC_COUNTS)
        bucket = f"CAST(ts / {BUCKET} AS INTEGER) * {BUCKET}"
        with self.store.connect() as db:
            db.execute(
                f"INSERT OR REPLACE INTO metrics_datastore (name, res, ts, pool, protocol, "
                f"interval, {cols}, probe) SELECT name, {BUCKET}, {bucket}, MAX(pool), "
                f"MAX(protocol), SUM(interval), {sums}, MAX(probe) FROM metrics_datastore "
                f"WHERE res = 0 AND ts < ? GROUP BY name, {bucket}", (cutoff,))
            db.execute("DELETE FROM metrics_datastore WHERE res = 0 AND ts < ?", (cutoff,))
            db.execute(
                f"INSERT OR REPLACE INTO metrics_pool (pool, res, ts, interval, {pcols}, "
                f"{acols}) SELECT pool, {BUCKET}, {bucket}, SUM(interval), {pavg}, {asum} "
                f"FROM metrics_pool WHERE res = 0 AND ts < ? GROUP BY pool, {bucket}",
                (cutoff,))
            db.execute("DELETE FROM metrics_pool WHERE res = 0 AND ts < ?", (cutoff,))
            old = now - COARSE_KEEP
            db.execute("DELETE FROM metrics_datastore WHERE ts < ?", (old,))
            db.execute("DELETE FROM metrics_pool WHERE ts < ?", (old,))

    # --- reading ------------------------------------------------------------------------

    def datastore_series(self, name: str, since: float, until: float,
                         step: float) -> list[SeriesPoint]:
        """Rates and mean latencies per step: iops, mbps, latency ms, read and write."""
        bucket = "CAST((ts - ?) / ? AS INTEGER)"
        sums = ", ".join(f"SUM({c}) AS {c}" for c in DS_COUNTERS)
        with self.store.connect() as db:
            rows = db.execute(
                f"SELECT {bucket} AS b, SUM(interval) AS secs, MAX(probe) AS probe, {sums} "
                f"FROM metrics_datastore WHERE name = ? AND ts > ? AND ts <= ? "
                f"GROUP BY b ORDER BY b", (since, step, name, since, until)).fetchall()
        return [SeriesPoint(since + r["b"] * step, _ds_rates(dict(r))) for r in rows]

    def pool_series(self, pool: str, since: float, until: float,
                    step: float) -> list[SeriesPoint]:
        bucket = "CAST((ts - ?) / ? AS INTEGER)"
        avgs = ", ".join(f"AVG({c}) AS {c}" for c in POOL_VALUES)
        asum = ", ".join(f"SUM(arc_{c}) AS arc_{c}" for c in ARC_COUNTS)
        with self.store.connect() as db:
            rows = db.execute(
                f"SELECT {bucket} AS b, {avgs}, {asum} FROM metrics_pool "
                f"WHERE pool = ? AND ts > ? AND ts <= ? GROUP BY b ORDER BY b",
                (since, step, pool, since, until)).fetchall()
        return [SeriesPoint(since + r["b"] * step, _pool_rates(dict(r))) for r in rows]

    def datastore_samples(self, name: str, since: float) -> list[DatastoreSample]:
        """The raw rows of one datastore since ``since`` (advice reads them)."""
        with self.store.connect() as db:
            rows = db.execute("SELECT * FROM metrics_datastore WHERE name = ? AND ts > ? "
                              "ORDER BY ts", (name, since)).fetchall()
        return [DatastoreSample(r["ts"], r["interval"], r["name"], r["pool"], r["protocol"],
                                {c: int(r[c]) for c in DS_COUNTERS}, bool(r["probe"]))
                for r in rows]

    def pool_rows(self, pool: str, since: float) -> list[dict[str, Any]]:
        with self.store.connect() as db:
            rows = db.execute("SELECT * FROM metrics_pool WHERE pool = ? AND ts > ? "
                              "ORDER BY ts", (pool, since)).fetchall()
        return [dict(r) for r in rows]

    def count(self) -> dict[str, int]:
        with self.store.connect() as db:
            return {t: int(db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0])
                    for t in ("metrics_datastore", "metrics_pool")}


def _pool_values(p: PoolSample) -> Iterable[float | int | None]:
    io = p.iostat
    for c in POOL_VALUES:
        if c in ("size", "allocated", "capacity"):
            yield getattr(p, c)
        elif c == "fragmentation":
            yield p.fragmentation
        elif c in ("slog", "l2arc"):
            yield int(getattr(p, c))
        else:
            yield io.get(c)


def _ds_rates(r: dict[str, Any]) -> dict[str, float | None]:
    secs = r["secs"] or 0.0

    def rate(key: str) -> float:
        return round((r[key] or 0) / secs, 3) if secs else 0.0

    def lat(op: str) -> float | None:
        ops = r[f"{op}_ops"] or 0
        return round(r[f"{op}_latency_ns"] / ops / 1e6, 4) if ops else None

    return {"read_iops": rate("read_ops"), "write_iops": rate("write_ops"),
            "read_mbps": round(rate("read_bytes") / 1e6, 4),
            "write_mbps": round(rate("write_bytes") / 1e6, 4),
            "read_latency_ms": lat("read"), "write_latency_ms": lat("write"),
            "discards": float(r["discards"] or 0),
            "initiator_commands_per_s": rate("initiator_commands"),
            "probe": float(r["probe"] or 0),
            # the seconds the step's samples cover: a collection under load can take longer
            # than its interval, so rate x step is not the count; rate x seconds is
            "seconds": round(secs, 3)}


def _pool_rates(r: dict[str, Any]) -> dict[str, float | None]:
    """Waits in ms (``total_wait_read_ms`` ...), the rest as recorded, plus hit ratios."""
    out: dict[str, float | None] = {}
    for c in POOL_VALUES:
        v = r[c]
        if "wait" in c:
            out[f"{c}_ms"] = round(v / 1e6, 4) if v is not None else None
        else:
            out[c] = round(float(v), 3) if v is not None else None
    hits, misses = r["arc_hits"] or 0, r["arc_misses"] or 0
    l2h, l2m = r["arc_l2_hits"] or 0, r["arc_l2_misses"] or 0
    out["arc_hit_ratio"] = round(hits / (hits + misses), 4) if hits + misses else None
    out["l2arc_hit_ratio"] = round(l2h / (l2h + l2m), 4) if l2h + l2m else None
    return out
