"""Charts of probe results with matplotlib (Agg backend, no display), as SVG or PNG bytes.

Kinds:
- ``timeseries``: IOPS and mean latency per second, one line per step
- ``percentiles``: latency p50/p95/p99/p99.9 bars per step (and per result)
- ``sweep``: IOPS (or Gbit/s) and p99 latency against the sweep axis (workers, block
  size, streams), one line per result
- ``size-sweep``: mean ms per object size, write and read, cache and disk, one bar per
  result (local vs datastore)

and :func:`render_comparison`: a protocol comparison's IOPS, p99 latency and CPU time per
I/O, one bar per leg (appliance.probes.protocols).
"""

from __future__ import annotations

import io
from typing import Any, Literal

from appliance.errors import InvalidInput
from appliance.probes import profiles
from appliance.probes.model import ProbeResult
from appliance.probes.params import human_size

PlotKind = Literal["timeseries", "percentiles", "sweep", "size-sweep"]
PLOT_KINDS: tuple[str, ...] = ("timeseries", "percentiles", "sweep", "size-sweep")
FORMATS = ("svg", "png")


def default_kind(r: ProbeResult) -> str:
    try:
        prof = profiles.get(r.profile)
    except Exception:
        return "timeseries"
    if prof.name == "size-sweep":
        return "size-sweep"
    if prof.kind == "rtt":
        return "percentiles"
    if prof.sweep_axis and len(r.steps) > 1:
        return "sweep"
    return "timeseries"


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "zds"  # stable SVG ids
    return plt


def _name(r: ProbeResult) -> str:
    t = r.target
    where = f"{t.get('kind', '')}:{t.get('datastore', '')}"
    return f"{r.profile} {where} ({r.id[:8]})"


def render(kind: str, results: list[ProbeResult], fmt: str = "svg") -> bytes:
    if fmt not in FORMATS:
        raise InvalidInput(f"format: expected svg or png, got {fmt!r}")
    if kind not in PLOT_KINDS:
        raise InvalidInput(f"kind: expected one of {', '.join(PLOT_KINDS)}, got {kind!r}")
    if not results:
        raise InvalidInput("nothing to plot: no results")
    plt = _plt()
    fig = {"timeseries": _timeseries, "percentiles": _percentiles, "sweep": _sweep,
           "size-sweep": _size_sweep}[kind](plt, results)
    return _save(plt, fig, fmt)


def _save(plt: Any, fig: Any, fmt: str) -> bytes:
    """The figure as SVG (stable: no date) or PNG bytes; the figure is closed."""
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=100, bbox_inches="tight",
                metadata={"Date": None} if fmt == "svg" else None)
    plt.close(fig)
    return buf.getvalue()


def render_comparison(rows: list[dict[str, Any]], title: str, fmt: str = "svg") -> bytes:
    """Three bar charts side by side, one bar per leg (baselines hatched)."""
    if fmt not in FORMATS:
        raise InvalidInput(f"format: expected svg or png, got {fmt!r}")
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.8))
    names = [r["leg"] for r in rows]
    for ax, (key, label) in zip(axes, (("iops", "IOPS (higher is better)"),
                                       ("lat_p99_ms", "p99 latency, ms (lower is better)"),
                                       ("cpu_us_per_io", "CPU us per I/O (lower is better)")),
                                strict=True):
        values = [r.get(key) or 0.0 for r in rows]
        if not any(values):  # no CPU reading (a client, a fake): say so, draw no axis
            ax.text(0.5, 0.5, "not measured", ha="center", va="center",
                    transform=ax.transAxes, color="#777777")
            ax.set_yticks([])
        bars = ax.bar(names, values, color=["#bbbbbb" if not r["baseline"] else "#3b75af"
                                            for r in rows])
        for bar, r in zip(bars, rows, strict=True):
            if not r["baseline"]:
                bar.set_hatch("//")
        ax.set_title(label, fontsize=9)
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return _save(plt, fig, fmt)


def _timeseries(plt: Any, results: list[ProbeResult]) -> Any:
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
    for r in results:
        for st in r.steps:
            if not st.series:
                continue
            t = [p["t"] for p in st.series]
            label = st.label if len(results) == 1 else f"{_name(r)} {st.label}"
            ax1.plot(t, [p["iops"] for p in st.series], marker=".", label=label)
            ax2.plot(t, [p["lat_ms"] for p in st.series], marker=".", label=label)
    ax1.set_ylabel("IOPS")
    ax2.set_ylabel("mean latency (ms)")
    ax2.set_xlabel("seconds")
    ax1.set_title(_name(results[0]) if len(results) == 1 else "IOPS and latency over time")
    for ax in (ax1, ax2):
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
    if ax1.get_legend_handles_labels()[0]:
        ax1.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _percentiles(plt: Any, results: list[ProbeResult]) -> Any:
    keys = [("lat_p50_ms", "p50"), ("lat_p95_ms", "p95"), ("lat_p99_ms", "p99"),
            ("lat_p999_ms", "p99.9")]
    bars: list[tuple[str, list[float]]] = []
    for r in results:
        for st in r.steps:
            if "lat_p50_ms" in st.metrics:
                label = st.label if len(results) == 1 else f"{_name(r)} {st.label}"
                bars.append((label, [st.metrics.get(k, 0.0) for k, _ in keys]))
    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.8 / max(1, len(bars))
    for i, (label, vals) in enumerate(bars):
        ax.bar([x + i * width for x in range(len(keys))], vals, width, label=label)
    ax.set_xticks([x + width * (len(bars) - 1) / 2 for x in range(len(keys))])
    ax.set_xticklabels([k for _, k in keys])
    ax.set_ylabel("completion latency (ms)")
    ax.set_title("latency percentiles" if len(results) > 1 else _name(results[0]))
    ax.grid(True, axis="y", alpha=0.3)
    if bars:
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _axis_value(v: Any, axis: str) -> float:
    return float(v) if not isinstance(v, list) else 0.0


def _sweep(plt: Any, results: list[ProbeResult]) -> Any:
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4.2))
    axis = "x"
    for r in results:
        try:
            axis = profiles.get(r.profile).sweep_axis or "x"
        except Exception:
            axis = "x"
        pts = [(st.point.get(axis), st.metrics) for st in r.steps if axis in st.point]
        pts.sort(key=lambda p: _axis_value(p[0], axis))
        xs = [_axis_value(p[0], axis) for p in pts]
        ykey = "gbps" if pts and "gbps" in pts[0][1] else "iops"
        (line,) = ax1.plot(xs, [m.get(ykey, 0.0) for _, m in pts], marker="o",
                           label=_name(r))
        color = line.get_color()
        ax1.set_ylabel("Gbit/s" if ykey == "gbps" else "IOPS")
        if any("lat_p99_ms" in m for _, m in pts):
            ax2.plot(xs, [m.get("lat_mean_ms", 0.0) for _, m in pts], marker="o",
                     color=color, label=f"{_name(r)} mean")
            ax2.plot(xs, [m.get("lat_p99_ms", 0.0) for _, m in pts], marker="x",
                     color=color, linestyle="--", label=f"{_name(r)} p99")
        if axis == "bs":
            ax1.set_xscale("log", base=2)
            ax2.set_xscale("log", base=2)
            ticks = sorted(set(xs))
            for ax in (ax1, ax2):
                ax.set_xticks(ticks)
                ax.set_xticklabels([human_size(int(t)) for t in ticks])
    for ax in (ax1, ax2):
        ax.set_xlabel(axis)
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
    ax2.set_ylabel("latency (ms)")
    ax1.set_title("throughput")
    ax2.set_title("latency")
    ax1.legend(fontsize=7)
    if ax2.get_legend_handles_labels()[0]:
        ax2.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _size_sweep(plt: Any, results: list[ProbeResult]) -> Any:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    sizes = sorted({int(st.point["size"]) for r in results for st in r.steps
                    if "size" in st.point})
    series = [(r, cache) for r in results for cache in ("disk", "cache")]
    width = 0.8 / max(1, len(series))
    for ax, op in zip(axes, ("write", "read"), strict=True):
        for i, (r, cache) in enumerate(series):
            vals = []
            for size in sizes:
                st = next((s for s in r.steps if s.point.get("size") == size
                           and s.point.get("op") == op and s.point.get("cache") == cache), None)
                vals.append(st.metrics.get("lat_mean_ms", 0.0) if st else 0.0)
            ax.bar([x + i * width for x in range(len(sizes))], vals, width,
                   label=f"{r.target.get('kind', '')}:{r.target.get('datastore', '')} {cache}",
                   hatch="//" if cache == "cache" else None)
        ax.set_xticks([x + width * (len(series) - 1) / 2 for x in range(len(sizes))])
        ax.set_xticklabels([human_size(s) for s in sizes])
        ax.set_yscale("log")
        ax.set_ylabel("mean ms per object")
        ax.set_title(f"{op}")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("size sweep: transfer time per object size")
    fig.tight_layout()
    return fig
