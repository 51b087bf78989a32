"""The protocol comparison: one fio profile on one pool, through every protocol the
appliance serves and straight on ZFS, interleaved, side by side (docs/probes.md).

A comparison is a job of ordinary probes. Each *leg* is a way to reach the pool: a
protocol (``nfs3``, ``nfs41``, ``iscsi``, ``nvme-tcp``: a scratch dataset or zvol with
the datastore properties of that protocol, served on loopback and attached inside the
appliance) or a baseline with no protocol in between (``dataset``: fio on the mounted
scratch dataset; ``zvol``: fio on the scratch zvol's device). Each protocol is measured
against the baseline of its storage kind, so "what does NFS cost" and "NVMe/TCP against
iSCSI on the same kind of zvol" are read off one table.

The results are ordinary probe results: their datastore is ``compare-{id}`` and their
``settings.comparison`` says which leg and round each one is, so the comparison needs no
table of its own and is read back from the probe store (:func:`view`).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from appliance.probes.model import ProbeResult

# The datastore name a comparison's results carry (a real datastore cannot be named
# after a random 12-hex id by accident; the prefix tells a reader what they are)
PREFIX = "compare-"
MAX_ROUNDS = 10


@dataclass(frozen=True)
class Leg:
    """One way of reaching the pool in a comparison."""

    name: str  # a protocol (nfs3 | nfs41 | iscsi | nvme-tcp) or a baseline (dataset | zvol)
    target: str  # the probe target: local | nfs | iscsi | nvme
    is_volume: bool
    # the protocol whose semantics the probe takes (writes sync/async, client cache): its
    # own, or for a baseline the first protocol of its storage kind, so a baseline does
    # the same I/O as the protocols it is compared with
    protocol: str
    baseline: str  # the leg this one is measured against ("" for a baseline)

    @property
    def is_baseline(self) -> bool:
        return not self.baseline


BASELINES = {False: "dataset", True: "zvol"}  # is_volume -> the baseline's name


def datastore_of(comparison_id: str) -> str:
    return PREFIX + comparison_id


def legs_for(protocols: Iterable[tuple[str, str, bool]]) -> dict[str, Leg]:
    """Every leg an appliance can run: ``protocols`` are (protocol, probe target,
    is_volume) of the protocols with a loopback attachment, in the registry's order;
    a baseline comes before the protocols of its kind."""
    out: dict[str, Leg] = {}
    for protocol, target, is_volume in protocols:
        base = BASELINES[is_volume]
        if base not in out:
            out[base] = Leg(base, "local", is_volume, protocol, "")
        out[protocol] = Leg(protocol, target, is_volume, protocol, base)
    return out


def schedule(legs: Sequence[Leg], rounds: int) -> list[tuple[int, Leg]]:
    """(round, leg) in running order: every round runs each leg once, the odd rounds in
    reverse, so no leg always runs first on a cold pool or last on a warm one."""
    out: list[tuple[int, Leg]] = []
    for r in range(rounds):
        out.extend((r, leg) for leg in (legs if r % 2 == 0 else list(reversed(legs))))
    return out


def cpu_us_per_io(r: ProbeResult) -> float | None:
    """The appliance's CPU time per I/O in microseconds: busy fraction x CPUs / IOPS.

    The busy fraction is the whole machine's over the probe (fio, the target and the
    initiator are all in the appliance on loopback), so it is what an I/O costs the box
    end to end, not the target alone."""
    mean, cpus, iops = r.cpu.get("mean_pct"), r.cpu.get("cpus"), r.summary.get("iops")
    if not isinstance(mean, int | float) or not isinstance(cpus, int) or cpus < 1 \
            or not iops:
        return None
    return mean / 100.0 * cpus * 1e6 / iops


@dataclass(frozen=True)
class Row:
    """One leg's medians over the rounds it completed."""

    leg: str
    target: str
    baseline: str
    runs: int  # rounds that ended ok
    failed: int
    iops: float | None
    mbps: float | None
    lat_p50_ms: float | None
    lat_p99_ms: float | None
    cpu_pct: float | None
    cpu_us_per_io: float | None
    iops_vs_baseline: float | None  # this leg's IOPS / its baseline's (None for one)
    p99_vs_baseline: float | None


def _median(values: Iterable[float | None]) -> float | None:
    got = [v for v in values if isinstance(v, int | float)]
    return round(statistics.median(got), 4) if got else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def info(r: ProbeResult) -> dict[str, Any]:
    """What ``settings.comparison`` of a comparison's result says ({} for another)."""
    c = r.settings.get("comparison")
    return c if isinstance(c, dict) else {}


def rows(results: Sequence[ProbeResult]) -> list[Row]:
    """The table: one row per leg, in the comparison's leg order."""
    order: list[str] = []
    for r in results:
        order = list(info(r).get("legs", order))
        if order:
            break
    by_leg: dict[str, list[ProbeResult]] = {}
    meta: dict[str, dict[str, Any]] = {}
    for r in results:
        c = info(r)
        leg = str(c.get("leg", ""))
        by_leg.setdefault(leg, []).append(r)
        meta[leg] = c
    for leg in by_leg:
        if leg not in order:
            order.append(leg)
    medians: dict[str, dict[str, float | None]] = {}
    for leg, group in by_leg.items():
        good = [r for r in group if r.status == "ok" and r.summary]
        medians[leg] = {
            "iops": _median(r.summary.get("iops") for r in good),
            "mbps": _median(r.summary.get("mbps") for r in good),
            "lat_p50_ms": _median(r.summary.get("lat_p50_ms") for r in good),
            "lat_p99_ms": _median(r.summary.get("lat_p99_ms") for r in good),
            "cpu_pct": _median(r.cpu.get("mean_pct") for r in good),
            "cpu_us_per_io": _median(cpu_us_per_io(r) for r in good),
            "runs": len(good), "failed": len(group) - len(good)}
    out = []
    for leg in order:
        if leg not in medians:
            continue
        m, base = medians[leg], str(meta[leg].get("baseline", ""))
        b = medians.get(base, {})
        out.append(Row(
            leg=leg, target=str(meta[leg].get("target", "")), baseline=base,
            runs=int(m["runs"] or 0), failed=int(m["failed"] or 0), iops=m["iops"],
            mbps=m["mbps"], lat_p50_ms=m["lat_p50_ms"], lat_p99_ms=m["lat_p99_ms"],
            cpu_pct=m["cpu_pct"], cpu_us_per_io=m["cpu_us_per_io"],
            iops_vs_baseline=_ratio(m["iops"], b.get("iops")) if base else None,
            p99_vs_baseline=_ratio(m["lat_p99_ms"], b.get("lat_p99_ms")) if base else None))
    return out


def running_order(r: ProbeResult) -> tuple[int, str]:
    """Sort key: the run's place in its comparison's schedule."""
    seq = info(r).get("seq")
    return (seq if isinstance(seq, int) else 1 << 30, r.started_at)


def view(comparison_id: str, results: Sequence[ProbeResult]) -> dict[str, Any]:
    """The comparison as the API shows it: what was asked, the table, every run."""
    runs = sorted(results, key=running_order)
    first = info(runs[0]) if runs else {}
    legs = list(first.get("legs", []))
    rounds = int(first.get("rounds", 0) or 0)
    return {
        "id": comparison_id,
        "pool": str(first.get("pool", "")),
        "profile": runs[0].profile if runs else "",
        "legs": legs,
        "rounds": rounds,
        "complete": len(runs) >= len(legs) * rounds > 0,
        "rows": [asdict(row) for row in rows(runs)],
        "results": [{"id": r.id, "leg": info(r).get("leg"), "round": info(r).get("round"),
                     "status": r.status, "error": r.error} for r in runs],
    }
