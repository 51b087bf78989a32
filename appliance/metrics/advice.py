"""Advice: findings computed from measurements and configuration, never without them.

Each rule takes plain data (the datastore's record and ZFS settings, its samples, its
pool's samples, its probe results) and returns a :class:`Finding` only when the numbers
that justify it are there; the finding carries those numbers (``evidence``) and what to do
(``action``). Pure functions: unit tests feed them data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from appliance.metrics.collector import DatastoreSample
from appliance.transports.registry import transport_type

GiB = 1 << 30

# Thresholds (why: see docs/metrics.md, "Advice")
SYNC_P99_MS = 5.0  # a write slower than this at p99 is slow for a VM datastore
MIN_WRITE_SAMPLES = 6  # one minute of 10-s samples with writes
FULL_PCT = 80  # ZFS slows down past ~80% full (allocator); probes refuse past it too
ARC_HIT_MIN = 0.80
MIN_ARC_LOOKUPS = 10_000
SMALL_IO = 16 * 1024
MIN_IO_OPS = 1000
UNMAP_MIN_WRITTEN = 1 * GiB
UNMAP_MIN_HOURS = 1.0
PROBE_SLOWER = 1.5


@dataclass(frozen=True)
class Finding:
    code: str
    severity: str  # info | warning | critical
    title: str
    message: str
    action: str
    evidence: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DatastoreFacts:
    """What advice knows about one datastore (gathered by the metrics service)."""

    name: str
    pool: str
    protocol: str
    thin: bool
    properties: Mapping[str, str]  # recordsize, volblocksize, sync, used, volsize...
    samples: Sequence[DatastoreSample]  # newest last
    pool_rows: Sequence[Mapping[str, Any]]  # history rows of its pool, newest last
    probes: Sequence[Mapping[str, Any]]  # {"id", "profile", "target", "started_at", "iops"}
    window_hours: float


def advise(f: DatastoreFacts) -> list[Finding]:
    out: list[Finding] = []
    for rule in (sync_writes_without_slog, pool_filling, io_size_vs_block, thin_without_unmap,
                 arc_hit_rate, probe_slower):
        found = rule(f)
        if found is not None:
            out.append(found)
    return out


def percentile(values: Sequence[float], p: float) -> float:
    s = sorted(values)
    if not s:
        return math.nan
    k = max(0, min(len(s) - 1, math.ceil(p / 100 * len(s)) - 1))
    return s[k]


def sync_writes_without_slog(f: DatastoreFacts) -> Finding | None:
    lat = [s.latency_ms("write") for s in f.samples if s.counts.get("write_ops", 0) > 0]
    writes = [x for x in lat if x is not None]
    if len(writes) < MIN_WRITE_SAMPLES or not f.pool_rows:
        return None
    if any(r.get("slog") for r in f.pool_rows[-6:]):
        return None
    if f.properties.get("sync") == "disabled":
        return None
    p99 = percentile(writes, 99)
    if p99 < SYNC_P99_MS:
        return None
    syncq = [r["syncq_wait_write"] / 1e6 for r in f.pool_rows
             if r.get("syncq_wait_write") is not None]
    ev: dict[str, Any] = {"write_latency_p99_ms": round(p99, 3),
                          "write_latency_median_ms": round(percentile(writes, 50), 3),
                          "samples": len(writes), "window_hours": f.window_hours,
                          "sync": f.properties.get("sync", "standard"), "pool_slog": False}
    if syncq:
        ev["pool_sync_queue_wait_mean_ms"] = round(sum(syncq) / len(syncq), 3)
    return Finding(
        "sync-writes-no-slog", "warning", "Writes wait on the pool and it has no SLOG",
        f"Writes to {f.name} took {p99:.1f} ms at p99 ({len(writes)} samples over the last "
        f"{f.window_hours:g} h) and pool {f.pool} has no separate log device: ESXi and "
        "most guests write synchronously, so every such write waits for the ZIL on the "
        "data disks.",
        f"Add a mirrored SLOG of low-latency, power-loss-protected devices: zpool add "
        f"{f.pool} log mirror DEV1 DEV2 (keep sync=standard).", ev)


def pool_filling(f: DatastoreFacts) -> Finding | None:
    rows = [r for r in f.pool_rows if r.get("capacity") is not None and r.get("size")]
    if not rows:
        return None
    last = rows[-1]
    cap = float(last["capacity"])
    if cap < FULL_PCT:
        return None
    ev: dict[str, Any] = {"capacity_pct": cap, "size_bytes": int(last["size"]),
                          "allocated_bytes": int(last["allocated"])}
    rate = fill_rate(rows)
    msg = f"Pool {f.pool} is {cap:.0f}% full"
    if rate is not None:
        ev["fill_gib_per_day"] = round(rate, 2)
        ev["rate_over_hours"] = round((rows[-1]["ts"] - rows[0]["ts"]) / 3600, 2)
        msg += f" and fills at {rate:.1f} GiB/day"
        if rate > 0:
            days = (last["size"] - last["allocated"]) / GiB / rate
            ev["days_until_full"] = round(days, 1)
            msg += f" (full in about {days:.0f} days)"
    msg += ". ZFS allocates slower and fragments more past 80%, and probes are refused."
    return Finding("pool-filling", "critical" if cap >= 90 else "warning",
                   "The pool is nearly full", msg,
                   f"Free space (delete snapshots or datastores) or add a vdev: "
                   f"zpool add {f.pool} mirror DEV1 DEV2.", ev)


def fill_rate(rows: Sequence[Mapping[str, Any]]) -> float | None:
    """GiB per day by least squares over the rows' allocated bytes (at least 1 h)."""
    pts = [(float(r["ts"]), float(r["allocated"])) for r in rows if r.get("allocated")]
    if len(pts) < 3 or pts[-1][0] - pts[0][0] < 3600:
        return None
    n = len(pts)
    mx = sum(p[0] for p in pts) / n
    my = sum(p[1] for p in pts) / n
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    if sxx == 0:
        return None
    slope = sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx  # bytes per second
    return slope * 86400 / GiB


def io_size_vs_block(f: DatastoreFacts) -> Finding | None:
    ops = sum(s.counts.get("read_ops", 0) + s.counts.get("write_ops", 0) for s in f.samples)
    nbytes = sum(s.counts.get("read_bytes", 0) + s.counts.get("write_bytes", 0)
                 for s in f.samples)
    if ops < MIN_IO_OPS:
        return None
    t = transport_type(f.protocol)
    key = t.storage.block_property if t is not None else "recordsize"
    block = int(f.properties.get(key, "0") or 0) if str(f.properties.get(key, "")).isdigit() \
        else 0
    mean = nbytes / ops
    if not block or mean > SMALL_IO or block < 4 * mean:
        return None
    ev = {"mean_io_bytes": int(mean), key: block, "ops": ops, "window_hours": f.window_hours}
    if key == "recordsize":
        action = (f"Set a smaller recordsize for new writes: PUT /api/v1/datastores/{f.name} "
                  'with "overrides": {"recordsize": "16K"} (existing blocks keep theirs '
                  "until rewritten, e.g. by Storage vMotion).")
    else:
        action = ("volblocksize is fixed at creation: make a new datastore with "
                  "overrides.volblocksize 4K-8K and move the VMs (Storage vMotion).")
    return Finding(
        "io-size-vs-block", "info", f"Small I/O on a large {key}",
        f"I/O on {f.name} averages {mean / 1024:.1f} KiB over {ops} operations but its "
        f"{key} is {block // 1024}K: each small write rewrites a whole block "
        "(read-modify-write) and caches hold data nobody asked for.", action, ev)


def thin_without_unmap(f: DatastoreFacts) -> Finding | None:
    t = transport_type(f.protocol)
    if t is None or not t.storage.is_volume or not f.thin or not f.samples:
        return None
    hours = (f.samples[-1].ts - f.samples[0].ts + f.samples[0].interval) / 3600
    written = sum(s.counts.get("write_bytes", 0) for s in f.samples)
    discards = sum(s.counts.get("discards", 0) for s in f.samples)
    if discards or hours < UNMAP_MIN_HOURS or written < UNMAP_MIN_WRITTEN:
        return None
    ev = {"written_bytes": written, "unmap_commands": 0, "hours": round(hours, 2),
          "used_bytes": int(f.properties.get("used", "0") or 0),
          "volsize_bytes": int(f.properties.get("volsize", "0") or 0)}
    return Finding(
        "thin-lun-no-unmap", "warning", "This thin LUN never receives UNMAP",
        f"{written / GiB:.1f} GiB were written to {f.name} in {hours:.1f} h and no UNMAP "
        "arrived: space freed inside VMFS or the guests is never given back to the pool.",
        "ESXi: esxcli storage vmfs reclaim config set --volume-label=DATASTORE "
        "--reclaim-priority=low (or esxcli storage vmfs unmap -l DATASTORE); Linux guests: "
        "discard=unmap on the virtual disk and fstrim.", ev)


def arc_hit_rate(f: DatastoreFacts) -> Finding | None:
    hits = sum(int(r.get("arc_hits") or 0) for r in f.pool_rows)
    misses = sum(int(r.get("arc_misses") or 0) for r in f.pool_rows)
    if hits + misses < MIN_ARC_LOOKUPS:
        return None
    ratio = hits / (hits + misses)
    if ratio >= ARC_HIT_MIN:
        return None
    ev = {"arc_hit_ratio": round(ratio, 4), "hits": hits, "misses": misses,
          "threshold": ARC_HIT_MIN, "window_hours": f.window_hours}
    return Finding(
        "arc-hit-rate-low", "info", "ARC hit rate is low",
        f"The ARC answered {ratio:.0%} of {hits + misses} reads over the last "
        f"{f.window_hours:g} h (below {ARC_HIT_MIN:.0%}): most reads go to the disks.",
        "Give the appliance more RAM (the ARC grows into it), or add an L2ARC device: "
        f"zpool add {f.pool} cache DEV.", ev)


def probe_slower(f: DatastoreFacts) -> Finding | None:
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in sorted(f.probes, key=lambda r: str(r.get("started_at", ""))):
        if r.get("iops"):
            groups.setdefault((str(r["profile"]), str(r["target"])), []).append(r)
    worst: tuple[float, tuple[str, str], Mapping[str, Any], Mapping[str, Any]] | None = None
    for key, runs in groups.items():
        if len(runs) < 2:
            continue
        first, last = runs[0], runs[-1]
        ratio = float(first["iops"]) / float(last["iops"])
        if ratio >= PROBE_SLOWER and (worst is None or ratio > worst[0]):
            worst = (ratio, key, first, last)
    if worst is None:
        return None
    ratio, (profile, target), first, last = worst
    ev = {"profile": profile, "target": target, "first_id": first["id"],
          "first_iops": first["iops"], "first_at": first["started_at"],
          "last_id": last["id"], "last_iops": last["iops"], "last_at": last["started_at"],
          "slower_by": round(ratio, 2)}
    return Finding(
        "probe-slower", "warning", "The datastore got slower than it was",
        f"The last {profile} probe ({target}) of {f.name} made {last['iops']:.0f} IOPS, "
        f"{ratio:.1f} times fewer than the first ({first['iops']:.0f} IOPS).",
        f"Compare the two runs (zds probe compare {first['id']} {last['id']}); look at the "
        "pool's fill and fragmentation, other datastores' load at the time, and settings "
        "changed since.", ev)
