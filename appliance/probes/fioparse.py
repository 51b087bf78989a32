"""Parsing fio 3.x ``--output-format=json+`` output and its per-second logs.

A sample of the JSON (fio 3.33, trimmed; one entry per reporting group with
``group_reporting=1``, one per job clone without it)::

    {"fio version": "fio-3.33", "timestamp": 1795833306, ...,
     "jobs": [{"jobname": "w1", "groupid": 0, "error": 0, "job_runtime": 3001,
               "usr_cpu": 9.6, "sys_cpu": 61.2,
               "read": {"io_bytes": 458752000, "bw_bytes": 152865089,
                        "iops": 37334.888371, "runtime": 3001, "total_ios": 112000,
                        "clat_ns": {"min": 620, "max": 2637824, "mean": 92672.4, "N": 112000,
                                    "percentile": {"50.000000": 92672, "99.000000": 248832,
                                                   ...},
                                    "bins": {"8256": 1, "8384": 4, ...}}, ...},
               "write": {...}, "trim": {...}}]}

``bins`` (json+ only) maps a latency bucket value in ns to a count; fio computes its own
percentiles as the first bucket whose cumulative count reaches p% of N, and so do we,
after merging the bins of every job and direction of a group.

A sample of a per-second log (``write_iops_log``/``write_lat_log`` with
``log_avg_msec=1000``; columns: msec, value, direction 0=read 1=write 2=trim, block size,
offset)::

    1001, 34108, 0, 0, 0
    1001, 11251, 1, 0, 0
    2002, 35672, 0, 0, 0

IOPS logs give I/Os per second in the window, clat logs the mean completion latency in
ns. fio sometimes leaves out the last window or adds a short tail row; rows are bucketed
to whole seconds, the first row per (file, direction, second) wins, and seconds outside
1..runtime are dropped.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from appliance.errors import HostCommandFailed

PERCENTILES = (50.0, 95.0, 99.0, 99.9)
_DIRS = ("read", "write", "trim")
_LOG_NAME = re.compile(r"(?P<prefix>[^.]+)\.(?P<section>[A-Za-z0-9-]+)_"
                       r"(?P<kind>iops|clat|lat|slat|bw)\.(?P<index>\d+)\.log")


@dataclass(frozen=True)
class Latency:
    """Completion latency in milliseconds."""

    mean: float = 0.0
    p50: float = 0.0
    p95: float = 0.0
    p99: float = 0.0
    p999: float = 0.0
    max: float = 0.0
    samples: int = 0


@dataclass(frozen=True)
class GroupStats:
    """One reporting group = one step of a probe (all its jobs and directions summed)."""

    groupid: int
    jobname: str
    jobs: int  # job entries merged
    iops: float
    read_iops: float
    write_iops: float
    mbps: float  # MB/s, 10^6 bytes
    read_mbps: float
    write_mbps: float
    runtime_ms: int
    total_ios: int
    latency: Latency  # read + write merged
    read_latency: Latency
    write_latency: Latency
    usr_cpu: float
    sys_cpu: float
    error: int


@dataclass(frozen=True)
class FioReport:
    version: str
    timestamp: int
    groups: list[GroupStats] = field(default_factory=list)

    def group(self, jobname: str) -> GroupStats | None:
        return next((g for g in self.groups if g.jobname == jobname), None)


@dataclass(frozen=True)
class SeriesPoint:
    t: int  # seconds since the measured part of the step began (1 = first second)
    iops: float
    lat_ms: float  # mean completion latency in that second (0 when no sample)


def _json_start(text: str) -> str:
    """fio may print warnings before the JSON document when it shares stdout."""
    i = text.find("{")
    if i < 0:
        raise HostCommandFailed("fio produced no JSON output", detail={"output": text[:500]})
    return text[i:]


def percentile_from_bins(bins: Mapping[int, int], p: float) -> int:
    """fio's rule: the first bucket value whose cumulative count reaches p% of all."""
    total = sum(bins.values())
    if total == 0:
        return 0
    want = p / 100.0 * total
    running = 0
    for value in sorted(bins):
        running += bins[value]
        if running >= want:
            return value
    return max(bins)


def _latency(parts: Iterable[Mapping[str, Any]]) -> Latency:
    bins: dict[int, int] = defaultdict(int)
    n = 0
    weighted = 0.0
    mx = 0
    pct: Mapping[str, Any] | None = None
    count_parts = 0
    for clat in parts:
        cn = int(clat.get("N", 0) or 0)
        if cn == 0:
            continue
        count_parts += 1
        n += cn
        weighted += float(clat.get("mean", 0.0)) * cn
        mx = max(mx, int(clat.get("max", 0)))
        for k, v in (clat.get("bins") or {}).items():
            bins[int(k)] += int(v)
        pct = clat.get("percentile")
    if n == 0:
        return Latency()
    if bins:
        vals = [percentile_from_bins(bins, p) for p in PERCENTILES]
    elif count_parts == 1 and pct:
        # plain json (no bins), one part: fio's own percentiles
        vals = [int(pct.get(f"{p:.6f}", 0)) for p in PERCENTILES]
    else:
        vals = [0, 0, 0, 0]
    ms = [v / 1e6 for v in vals]
    return Latency(weighted / n / 1e6, ms[0], ms[1], ms[2], ms[3], mx / 1e6, n)


def parse_json(text: str) -> FioReport:
    try:
        doc = json.loads(_json_start(text))
    except json.JSONDecodeError as exc:
        raise HostCommandFailed(f"fio JSON output is not valid: {exc}") from exc
    by_group: dict[int, list[Mapping[str, Any]]] = defaultdict(list)
    for job in doc.get("jobs", []):
        by_group[int(job.get("groupid", 0))].append(job)
    groups = []
    for gid in sorted(by_group):
        jobs = by_group[gid]
        dsum: dict[str, dict[str, float]] = {}
        for d in _DIRS:
            dsum[d] = {
                "iops": sum(float(j[d]["iops"]) for j in jobs if d in j),
                "bw": sum(float(j[d]["bw_bytes"]) for j in jobs if d in j),
                "ios": sum(int(j[d]["total_ios"]) for j in jobs if d in j),
                "rt": max((int(j[d]["runtime"]) for j in jobs if d in j), default=0),
            }
        groups.append(GroupStats(
            groupid=gid,
            jobname=str(jobs[0].get("jobname", "")),
            jobs=len(jobs),
            iops=sum(dsum[d]["iops"] for d in _DIRS),
            read_iops=dsum["read"]["iops"],
            write_iops=dsum["write"]["iops"],
            mbps=sum(dsum[d]["bw"] for d in _DIRS) / 1e6,
            read_mbps=dsum["read"]["bw"] / 1e6,
            write_mbps=dsum["write"]["bw"] / 1e6,
            runtime_ms=int(max(dsum[d]["rt"] for d in _DIRS)),
            total_ios=int(sum(dsum[d]["ios"] for d in _DIRS)),
            latency=_latency(j[d]["clat_ns"] for j in jobs for d in ("read", "write")
                             if d in j),
            read_latency=_latency(j["read"]["clat_ns"] for j in jobs if "read" in j),
            write_latency=_latency(j["write"]["clat_ns"] for j in jobs if "write" in j),
            usr_cpu=sum(float(j.get("usr_cpu", 0.0)) for j in jobs) / len(jobs),
            sys_cpu=sum(float(j.get("sys_cpu", 0.0)) for j in jobs) / len(jobs),
            error=max(int(j.get("error", 0)) for j in jobs),
        ))
    return FioReport(str(doc.get("fio version", "")), int(doc.get("timestamp", 0)), groups)


def parse_log(text: str) -> list[tuple[int, float, int]]:
    """(msec, value, direction) rows of one fio log file; malformed lines are skipped."""
    rows = []
    for line in text.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) < 3:
            continue
        try:
            rows.append((int(cols[0]), float(cols[1]), int(cols[2])))
        except ValueError:
            continue
    return rows


def _bucketed(text: str, runtime: int | None) -> dict[tuple[int, int], float]:
    """(second, direction) -> value, first row per bucket, seconds within 1..runtime."""
    out: dict[tuple[int, int], float] = {}
    for ms, value, ddir in parse_log(text):
        sec = round(ms / 1000)
        if sec < 1 or (runtime is not None and sec > runtime):
            continue
        out.setdefault((sec, ddir), value)
    return out


def series(logs: Mapping[str, str], section: str, runtime: int | None) -> list[SeriesPoint]:
    """Per-second IOPS (summed over jobs and directions) and IOPS-weighted mean clat.

    ``logs`` maps log file names (``PREFIX.SECTION_iops.N.log``) to their text. fio 3.33
    often writes no IOPS row for the last window of a time-based job, so a series can be
    one second shorter than the runtime; it is never padded or extrapolated, and a second
    that some jobs did not log is left out rather than summed partially.
    """
    iops: dict[int, dict[tuple[int, int], float]] = {}
    clat: dict[int, dict[tuple[int, int], float]] = {}
    for name, text in logs.items():
        m = _LOG_NAME.fullmatch(name)
        if not m or m.group("section") != section:
            continue
        idx = int(m.group("index"))
        if m.group("kind") == "iops":
            iops[idx] = _bucketed(text, runtime)
        elif m.group("kind") == "clat":
            clat[idx] = _bucketed(text, runtime)
    # a second counts only if every job logged it: fio drops the last window of some
    # jobs, and a partial sum would look like a dip in IOPS
    per_job = [{sec for sec, _d in b} for b in iops.values() if b]
    seconds = sorted(set.intersection(*per_job)) if per_job else []
    points = []
    for sec in seconds:
        total = 0.0
        lat_weighted = 0.0
        lat_weight = 0.0
        for idx, buckets in iops.items():
            for (s, ddir), v in buckets.items():
                if s != sec:
                    continue
                total += v
                lat = clat.get(idx, {}).get((s, ddir))
                if lat is not None and v > 0:
                    lat_weighted += lat * v
                    lat_weight += v
        lat_ms = lat_weighted / lat_weight / 1e6 if lat_weight else 0.0
        points.append(SeriesPoint(sec, total, lat_ms))
    return points


def ordered(lat: Latency) -> bool:
    """Percentiles never decrease (a sanity check for tests and results)."""
    vals = [lat.p50, lat.p95, lat.p99, lat.p999]
    return all(a <= b or math.isclose(a, b) for a, b in itertools.pairwise(vals))
