"""Probe results: what every run records (PROBES.md, "Every result records").

A result holds the profile and its resolved parameters, the target, the versions and
settings in force (given by the caller: appliance version, ZFS dataset properties,
ganesha/LIO settings), start/end time, a summary (IOPS, MB/s, latency mean/p50/p95/p99/
p99.9 in ms), one :class:`StepResult` per sweep point with its own metrics and
per-second time series, appliance CPU % and the ARC hit ratio during the run.
Metrics are flat ``name -> float`` maps so comparison works per metric.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from appliance.probes.fioparse import GroupStats, Latency, SeriesPoint

Status = Literal["ok", "failed", "cancelled"]

# higher is better for these; every *_ms metric is lower-is-better
HIGHER_IS_BETTER = ("iops", "read_iops", "write_iops", "mbps", "read_mbps", "write_mbps",
                    "gbps", "ops")
SUMMARY_KEYS = ("iops", "mbps", "lat_mean_ms", "lat_p50_ms", "lat_p95_ms", "lat_p99_ms",
                "lat_p999_ms")


def higher_is_better(metric: str) -> bool:
    return metric in HIGHER_IS_BETTER


def latency_metrics(lat: Latency, prefix: str = "lat") -> dict[str, float]:
    return {
        f"{prefix}_mean_ms": lat.mean,
        f"{prefix}_p50_ms": lat.p50,
        f"{prefix}_p95_ms": lat.p95,
        f"{prefix}_p99_ms": lat.p99,
        f"{prefix}_p999_ms": lat.p999,
        f"{prefix}_max_ms": lat.max,
    }


def group_metrics(g: GroupStats) -> dict[str, float]:
    m = {
        "iops": g.iops, "read_iops": g.read_iops, "write_iops": g.write_iops,
        "mbps": g.mbps, "read_mbps": g.read_mbps, "write_mbps": g.write_mbps,
        "runtime_s": g.runtime_ms / 1000.0, "ios": float(g.total_ios),
        **latency_metrics(g.latency),
    }
    if g.read_latency.samples:
        m["read_lat_mean_ms"] = g.read_latency.mean
        m["read_lat_p99_ms"] = g.read_latency.p99
    if g.write_latency.samples:
        m["write_lat_mean_ms"] = g.write_latency.mean
        m["write_lat_p99_ms"] = g.write_latency.p99
    return {k: round(v, 6) for k, v in m.items()}


def rtt_metrics(samples_ms: list[float]) -> dict[str, float]:
    s = sorted(samples_ms)
    if not s:
        return {}

    def pct(p: float) -> float:
        i = max(0, min(len(s) - 1, math.ceil(p / 100.0 * len(s)) - 1))  # nearest rank
        return s[i]

    return {
        "lat_mean_ms": round(statistics.fmean(s), 6), "lat_p50_ms": round(pct(50), 6),
        "lat_p95_ms": round(pct(95), 6), "lat_p99_ms": round(pct(99), 6),
        "lat_p999_ms": round(pct(99.9), 6), "lat_max_ms": round(s[-1], 6),
        "samples": float(len(s)),
    }


@dataclass
class StepResult:
    name: str
    label: str
    point: dict[str, Any]
    metrics: dict[str, float]
    series: list[dict[str, float]] = field(default_factory=list)  # {t, iops, lat_ms}

    @staticmethod
    def series_from(points: list[SeriesPoint]) -> list[dict[str, float]]:
        return [{"t": float(p.t), "iops": round(p.iops, 3), "lat_ms": round(p.lat_ms, 6)}
                for p in points]


@dataclass
class ProbeResult:
    id: str
    profile: str
    params: dict[str, Any]
    target: dict[str, Any]  # kind (local|nfs|iscsi|client), datastore, path, host ...
    settings: dict[str, Any]  # versions and ZFS/ganesha/LIO settings in force
    started_at: str  # ISO 8601 UTC
    ended_at: str
    status: Status
    summary: dict[str, float] = field(default_factory=dict)
    steps: list[StepResult] = field(default_factory=list)
    cpu: dict[str, Any] = field(default_factory=dict)  # mean_pct, max_pct, series [[t, pct]]
    arc: dict[str, Any] | None = None  # hits, misses, hit_ratio
    error: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # drain_s, fio_version, jobfile ...
    # what the I/O meant on this target (client cache, reads, writes; per phase the fio
    # options and ZFS properties that made it so): appliance.probes.semantics.record
    semantics: dict[str, Any] = field(default_factory=dict)

    @property
    def datastore(self) -> str:
        return str(self.target.get("datastore", ""))

    def step(self, label: str) -> StepResult | None:
        return next((s for s in self.steps if s.label == label or s.name == label), None)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> ProbeResult:
        steps = [StepResult(**s) for s in d.get("steps", [])]
        fields = {k: v for k, v in d.items() if k != "steps"}
        return ProbeResult(steps=steps, **fields)


def summarize(steps: list[StepResult], rule: str) -> dict[str, float]:
    """The result's headline numbers from its steps (see Profile.summary_rule)."""
    if not steps:
        return {}
    if rule == "first":
        return dict(steps[0].metrics)
    if rule == "last":
        return dict(steps[-1].metrics)
    if rule == "peak":
        key = "gbps" if "gbps" in steps[0].metrics else "iops"
        best = max(steps, key=lambda s: s.metrics.get(key, 0.0))
        peak = dict(best.metrics)
        peak["peak_at"] = float(next(iter(best.point.values()), 0)) if best.point else 0.0
        return peak
    # total: size-sweep style; mean object time per direction and cache state
    out: dict[str, float] = {}
    for op in ("write", "read"):
        for cache in ("disk", "cache"):
            vals = [s.metrics["lat_mean_ms"] for s in steps
                    if s.point.get("op") == op and s.point.get("cache") == cache
                    and "lat_mean_ms" in s.metrics]
            if vals:
                key = f"{op}_ms" if cache == "disk" else f"{op}_cache_ms"
                out[key] = round(statistics.fmean(vals), 6)
    ios = sum(s.metrics.get("ios", 0.0) for s in steps)
    secs = sum(s.metrics.get("runtime_s", 0.0) for s in steps)
    out["mbps"] = round(sum(s.metrics.get("mbps", 0.0) * s.metrics.get("runtime_s", 0.0)
                            for s in steps) / secs, 6) if secs else 0.0
    out["iops"] = round(ios / secs, 6) if secs else 0.0
    return out
