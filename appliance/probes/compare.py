"""Comparing results: with each other (ratio per metric) and with the published figures.

``ratio = b / a`` for every metric both results have. ``better`` says which side wins
given the metric's direction (IOPS, MB/s, Gbit/s: higher; anything in ms: lower); a
difference under 1% is "same".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from appliance.probes import profiles
from appliance.probes.model import ProbeResult, higher_is_better

SAME_WITHIN = 0.01


@dataclass(frozen=True)
class MetricDelta:
    metric: str
    a: float
    b: float
    ratio: float | None  # b / a; None when a is 0
    better: str  # "a" | "b" | "same"


@dataclass(frozen=True)
class Comparison:
    a: str
    b: str
    profile_a: str
    profile_b: str
    same_profile: bool
    summary: list[MetricDelta]
    steps: dict[str, list[MetricDelta]] = field(default_factory=dict)  # by step label
    # why the ratio may not compare like with like (different caching or sync semantics)
    warnings: list[str] = field(default_factory=list)


def _deltas(ma: dict[str, float], mb: dict[str, float]) -> list[MetricDelta]:
    out = []
    for key in ma:
        if key not in mb or key in ("peak_at", "runtime_s", "ios", "samples", "seconds"):
            continue
        a, b = float(ma[key]), float(mb[key])
        ratio = b / a if a else None
        if ratio is None or abs(ratio - 1.0) < SAME_WITHIN:
            better = "same"
        elif (ratio > 1.0) == higher_is_better(key):
            better = "b"
        else:
            better = "a"
        out.append(MetricDelta(key, a, b, round(ratio, 4) if ratio is not None else None,
                               better))
    return out


def semantic_warnings(a: ProbeResult, b: ProbeResult) -> list[str]:
    """What differs between the I/O semantics of two results (none: like with like).

    A ZFS dataset probed locally has no client cache (``none``); it matches a protocol
    client whose cache is ``bypassed``."""
    if not a.semantics or not b.semantics:
        missing = a.id if not a.semantics else b.id
        return [f"result {missing} has no recorded semantics (run before they were "
                "recorded): its caching and sync may differ from the other's"]
    out = []
    for key in ("reads", "writes", "client_cache"):
        va, vb = str(a.semantics.get(key, "")), str(b.semantics.get(key, ""))
        if key == "client_cache":
            va, vb = (("bypassed" if v == "none" else v) for v in (va, vb))
        if va != vb:
            out.append(f"{key} differ: {va} in {a.id}, {vb} in {b.id}; the ratio mixes "
                       "that difference with the protocol's")
    return out


def compare(a: ProbeResult, b: ProbeResult) -> Comparison:
    steps = {}
    for sa in a.steps:
        sb = b.step(sa.label)
        if sb is not None:
            steps[sa.label] = _deltas(sa.metrics, sb.metrics)
    return Comparison(a.id, b.id, a.profile, b.profile, a.profile == b.profile,
                      _deltas(a.summary, b.summary), steps, semantic_warnings(a, b))


@dataclass(frozen=True)
class PublishedCheck:
    metric: str
    step: str
    unit: str
    context: str
    kind: str
    published: float
    measured: float | None  # None when the result (or the baseline) lacks the metric
    ratio: float | None  # measured / published


def against_published(r: ProbeResult, local: ProbeResult | None = None) -> list[PublishedCheck]:
    """Each published figure of the profile beside the measured value.

    ``ratio_vs_local`` figures (e.g. NFS writes 1.7x slower than local) need ``local``:
    a result of the same profile on the local target.
    """
    try:
        prof = profiles.get(r.profile)
    except Exception:  # a result of a profile that no longer exists
        return []
    out = []
    for fig in prof.published:
        metrics = r.summary
        if fig.step:
            st = r.step(fig.step)
            metrics = st.metrics if st else {}
        measured: float | None = metrics.get(fig.metric)
        if fig.kind == "ratio_vs_local":
            base = local.summary.get(fig.metric) if local else None
            measured = measured / base if measured is not None and base else None
        ratio = measured / fig.value if measured is not None and fig.value else None
        out.append(PublishedCheck(fig.metric, fig.step, fig.unit, fig.context, fig.kind,
                                  fig.value, None if measured is None else round(measured, 4),
                                  None if ratio is None else round(ratio, 4)))
    return out
