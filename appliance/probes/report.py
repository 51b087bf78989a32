"""``zds probe report``: one self-contained HTML page (tables + inline SVG plots).

Nothing is fetched when the page is opened: the charts are inline SVG, the style is in
the page. Results of the same profile are compared with the first of them (ratio per
metric), and each result is put beside the published figures of its profile.
"""

from __future__ import annotations

import html
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from appliance.probes import compare, plots
from appliance.probes.model import SUMMARY_KEYS, ProbeResult

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1100px}
table{border-collapse:collapse;margin:.5em 0 1.2em}
td,th{border:1px solid #ccc;padding:.25em .6em;font-size:.9em;text-align:right}
th{background:#f3f3f3}td.l,th.l{text-align:left}
.b{color:#0a6a0a}.a{color:#a11}.svg svg{max-width:100%;height:auto}
h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:2em}
code{background:#f5f5f5;padding:0 .3em}
"""


def _e(v: object) -> str:
    return html.escape(str(v))


def _num(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if v == 0:
            return "0"
        if abs(v) >= 100:
            return f"{v:,.0f}"
        if abs(v) >= 1:
            return f"{v:.2f}"
        return f"{v:.4f}"
    return _e(v)


def _table(head: list[str], rows: Iterable[list[object]], left: int = 1) -> str:
    out = ["<table><tr>"]
    out += [f"<th class='{'l' if i < left else ''}'>{_e(h)}</th>" for i, h in enumerate(head)]
    out.append("</tr>")
    for row in rows:
        out.append("<tr>")
        for i, c in enumerate(row):
            cls = " class='l'" if i < left else ""
            out.append(f"<td{cls}>{c if isinstance(c, _Raw) else _num(c)}</td>")
        out.append("</tr>")
    out.append("</table>")
    return "".join(out)


class _Raw(str):
    """Already-escaped HTML for a table cell."""


def _svg(kind: str, results: list[ProbeResult]) -> str:
    svg = plots.render(kind, results, "svg").decode()
    start = svg.find("<svg")
    return f"<div class='svg'>{svg[start:]}</div>"


def render_comparison_html(view: dict[str, Any], results: list[ProbeResult]) -> str:
    """A protocol comparison (appliance.probes.protocols.view): its table and chart
    first, then every run as :func:`render_html` shows it."""
    title = (f"ZDS protocol comparison {view['id']}: {view['profile']} on pool "
             f"{view['pool']}, {view['rounds']} round(s)")
    head = ["leg", "target", "baseline", "runs", "failed", "IOPS", "MB/s", "p50 ms",
            "p99 ms", "CPU %", "CPU us/IO", "IOPS / baseline", "p99 / baseline"]
    keys = ["leg", "target", "baseline", "runs", "failed", "iops", "mbps", "lat_p50_ms",
            "lat_p99_ms", "cpu_pct", "cpu_us_per_io", "iops_vs_baseline", "p99_vs_baseline"]
    svg = plots.render_comparison(view["rows"], title, "svg").decode()
    preface = ("<p>Each leg runs the same profile on a scratch dataset or zvol of the pool, "
               "made with that protocol's datastore properties; the protocols reach it over "
               "loopback inside the appliance, the baselines (dataset, zvol) without a "
               "protocol. Figures are medians over the rounds; CPU is the whole "
               "appliance's.</p>"
               + _table(head, ([row.get(k) for k in keys] for row in view["rows"]), left=3)
               + f"<div class='svg'>{svg[svg.find('<svg'):]}</div>")
    return render_html(results, title, preface)


def render_html(results: list[ProbeResult], title: str = "ZDS probe report",
                preface: str = "") -> str:
    """One page: a table of the results, comparisons by profile, then each result;
    ``preface`` (already HTML) goes under the title."""
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{_e(title)}</title>"
             f"<style>{_CSS}</style></head><body><h1>{_e(title)}</h1>{preface}"]
    parts.append(_table(
        ["id", "profile", "target", "datastore", "status", "started", "IOPS", "MB/s",
         "mean ms", "p99 ms", "CPU %", "ARC hit"],
        ([_Raw(f"<a href='#r-{_e(r.id)}'>{_e(r.id)}</a>"), r.profile,
          r.target.get("kind", ""), r.datastore, r.status, r.started_at,
          r.summary.get("iops"), r.summary.get("mbps"), r.summary.get("lat_mean_ms"),
          r.summary.get("lat_p99_ms"), r.cpu.get("mean_pct"),
          (r.arc or {}).get("hit_ratio")] for r in results), left=6))

    by_profile: dict[str, list[ProbeResult]] = defaultdict(list)
    for r in results:
        by_profile[r.profile].append(r)
    for profile, group in by_profile.items():
        if len(group) < 2:
            continue
        parts.append(f"<h2>{_e(profile)}: comparison with {_e(group[0].id)}</h2>")
        for other in group[1:]:
            c = compare.compare(group[0], other)
            parts.append(f"<p>b = <code>{_e(other.id)}</code> "
                         f"({_e(other.target.get('kind', ''))}:{_e(other.datastore)})</p>")
            for w in c.warnings:  # the ratio would not compare like with like
                parts.append(f"<p class='a'>not like with like: {_e(w)}</p>")
            parts.append(_table(["metric", "a", "b", "b/a", "better"], (
                [d.metric, d.a, d.b, d.ratio,
                 _Raw(f"<span class='{d.better}'>{_e(d.better)}</span>")]
                for d in c.summary)))
        kind = plots.default_kind(group[0])
        if kind in ("sweep", "size-sweep"):
            parts.append(_svg(kind, group))

    for r in results:
        parts.append(f"<h2 id='r-{_e(r.id)}'>{_e(r.profile)} on "
                     f"{_e(r.target.get('kind', ''))}:{_e(r.datastore)} "
                     f"<small>({_e(r.id)})</small></h2>")
        parts.append(f"<p>{_e(r.started_at)} to {_e(r.ended_at)}, status <b>{_e(r.status)}</b>"
                     f"{' - ' + _e(r.error) if r.error else ''}</p>")
        parts.append(_table(["parameter", "value"], ([k, str(v)] for k, v in r.params.items())))
        if r.semantics:
            parts.append(_table(["semantics", "value"], (
                [k, str(r.semantics[k])] for k in ("layer", "client_cache", "reads", "writes",
                                                   "notes") if k in r.semantics)))
        if r.settings:
            parts.append(_table(["setting", "value"],
                                ([k, str(v)] for k, v in sorted(r.settings.items()))))
        parts.append(_table(["metric", "value"],
                            ([k, r.summary[k]] for k in SUMMARY_KEYS if k in r.summary)))
        if len(r.steps) > 1:
            parts.append(_table(["step", "IOPS", "MB/s", "mean ms", "p50", "p95", "p99",
                                 "p99.9"],
                                ([s.label, *(s.metrics.get(k) for k in SUMMARY_KEYS)]
                                 for s in r.steps)))
        checks = compare.against_published(r)
        if checks:
            parts.append("<p>Published figures (source: the profile's catalogue entry)</p>")
            parts.append(_table(["metric", "step", "context", "published", "measured",
                                 "measured/published"],
                                ([c.metric, c.step or "-", c.context,
                                  _Raw(f"{_num(c.published)} {_e(c.unit)}"), c.measured,
                                  c.ratio] for c in checks), left=3))
        if r.steps:
            kind = plots.default_kind(r)
            parts.append(_svg(kind, [r]))
            if kind != "percentiles" and any("lat_p50_ms" in s.metrics for s in r.steps):
                parts.append(_svg("percentiles", [r]))
    parts.append("</body></html>")
    return "\n".join(parts)
