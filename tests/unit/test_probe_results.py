"""Result storage (SQLite), comparison math, plots and the HTML report."""

from __future__ import annotations

import sqlite3
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from appliance.errors import InvalidInput, NotFound
from appliance.host.fio import FakeFio
from appliance.probes import compare, plots, report
from appliance.probes.execute import ProbeExecutor, ProbeTarget
from appliance.probes.model import ProbeResult, StepResult, summarize
from appliance.probes.store import ProbeStore, ResultFilter

FIX = Path(__file__).parent / "fixtures"


def _result(tmp_path: Path, rid: str, kind: str = "local", ds: str = "ds1",
            when: str = "2026-11-22T03:00:00+00:00") -> ProbeResult:
    logs = {p.name: p.read_text() for p in (FIX / "fio" / "vm-mixed-4k-logs").iterdir()}
    fio = FakeFio(json_text=(FIX / "fio" / "vm-mixed-4k.json").read_text(), logs=logs)
    ex = ProbeExecutor(fio, str(tmp_path), clock=lambda: when)
    return ex.run("vm-mixed-4k", {"workers": "1,2", "runtime": 3},
                  ProbeTarget(kind, ds, "/x"), result_id=rid)


def _synthetic(rid: str, iops: float, lat: float, label: str = "workers=1") -> ProbeResult:
    m = {"iops": iops, "mbps": iops * 4096 / 1e6, "lat_mean_ms": lat, "lat_p99_ms": lat * 3}
    st = StepResult("w1", label, {"workers": 1}, m)
    return ProbeResult(rid, "vm-mixed-4k", {}, {"kind": "local", "datastore": "d"}, {},
                       "2026-11-22T03:00:00+00:00", "2026-11-22T03:00:10+00:00", "ok",
                       summary=dict(m), steps=[st])


def test_store_round_trip_filters_and_persistence(tmp_path: Path) -> None:
    db = tmp_path / "zds.db"
    store = ProbeStore(db)
    a = _result(tmp_path, "a", "local", "ds1", "2026-11-22T01:00:00+00:00")
    b = _result(tmp_path, "b", "nfs", "ds1", "2026-11-22T02:00:00+00:00")
    c = _result(tmp_path, "c", "iscsi", "ds2", "2026-11-22T03:00:00+00:00")
    for r in (a, b, c):
        store.save(r)
    again = ProbeStore(db)  # a new store on the same file: results survive restarts
    assert again.get("b") == b
    assert [r.id for r in again.list()] == ["c", "b", "a"]
    assert [r.id for r in again.list(ResultFilter(datastore="ds1"))] == ["b", "a"]
    assert [r.id for r in again.list(ResultFilter(target="iscsi"))] == ["c"]
    assert [r.id for r in again.list(ResultFilter(since="2026-11-22T02:00:00"))] == ["c", "b"]
    assert [r.id for r in again.list(ResultFilter(limit=1, offset=1))] == ["b"]
    assert again.list(ResultFilter(profile="bst")) == []
    b.status = "cancelled"
    again.save(b)  # upsert
    assert again.get("b").status == "cancelled"
    again.delete("a")
    with pytest.raises(NotFound):
        again.get("a")
    with pytest.raises(NotFound):
        again.delete("a")
    with pytest.raises(InvalidInput):
        again.list(ResultFilter(limit=0))


def test_store_accepts_a_connection_factory(tmp_path: Path) -> None:
    path = tmp_path / "engine.db"
    store = ProbeStore(lambda: sqlite3.connect(path))
    store.save(_synthetic("x", 100, 1))
    cols = [r[1] for r in sqlite3.connect(path).execute("PRAGMA table_info(probe_results)")]
    assert "body" in cols and "datastore" in cols
    assert store.get("x").summary["iops"] == 100


def test_compare_ratio_per_metric_and_direction() -> None:
    a = _synthetic("a", 1000, 2.0)
    b = _synthetic("b", 500, 1.0)
    c = compare.compare(a, b)
    by = {d.metric: d for d in c.summary}
    assert by["iops"].ratio == 0.5 and by["iops"].better == "a"
    assert by["lat_mean_ms"].ratio == 0.5 and by["lat_mean_ms"].better == "b"
    assert c.steps["workers=1"][0].metric == "iops"
    same = compare.compare(a, _synthetic("s", 1005, 2.0))
    assert {d.metric: d.better for d in same.summary}["iops"] == "same"
    zero = compare.compare(_synthetic("z", 0, 1), a)
    assert {d.metric: d.ratio for d in zero.summary}["iops"] is None


def test_against_published_absolute_step_and_ratio_figures() -> None:
    r = _synthetic("r", 26000, 1.0)
    r.profile = "randread-4k-qd32"
    checks = compare.against_published(r)
    assert [(c.published, c.ratio) for c in checks] == [(52000, 0.5), (154659, 0.1681)]
    bss = ProbeResult("b", "block-size-sweep", {}, {}, {}, "", "", "ok", steps=[
        StepResult("bs4k", "bs=4KiB", {"bs": 4096}, {"iops": 14693.0, "lat_mean_ms": 2.18})])
    by = {(c.step, c.metric): c for c in compare.against_published(bss)}
    assert by[("bs=4KiB", "iops")].ratio == 1.0
    assert by[("bs=4KiB", "lat_mean_ms")].ratio == 2.0
    assert by[("bs=64KiB", "iops")].measured is None
    local = ProbeResult("l", "size-sweep", {}, {}, {}, "", "", "ok",
                        summary={"write_ms": 10.0, "read_ms": 4.0})
    nfs = ProbeResult("n", "size-sweep", {}, {}, {}, "", "", "ok",
                      summary={"write_ms": 17.0, "read_ms": 14.0})
    by2 = {c.metric: c for c in compare.against_published(nfs, local)}
    assert by2["write_ms"].measured == 1.7 and by2["write_ms"].ratio == 1.0
    assert by2["read_ms"].measured == 3.5
    assert compare.against_published(nfs)[0].measured is None  # no local baseline


def test_summary_rules() -> None:
    steps = [StepResult(f"w{n}", f"workers={n}", {"workers": n}, {"iops": v})
             for n, v in ((1, 10.0), (2, 30.0), (4, 20.0))]
    assert summarize(steps, "peak") == {"iops": 30.0, "peak_at": 2.0}
    assert summarize(steps, "first")["iops"] == 10.0
    assert summarize(steps, "last")["iops"] == 20.0
    ss = [StepResult("a", "", {"size": 1, "op": op, "cache": c},
                     {"lat_mean_ms": v, "mbps": 10.0, "runtime_s": 1.0, "ios": 5.0})
          for op, c, v in (("write", "disk", 2.0), ("read", "disk", 4.0),
                           ("write", "cache", 1.0), ("read", "cache", 0.5))]
    t = summarize(ss, "total")
    assert t["write_ms"] == 2.0 and t["read_ms"] == 4.0 and t["read_cache_ms"] == 0.5
    assert t["iops"] == 5.0 and t["mbps"] == 10.0


@pytest.mark.parametrize("kind", ["timeseries", "percentiles", "sweep"])
def test_plots_are_valid_svg_and_png(tmp_path: Path, kind: str) -> None:
    a = _result(tmp_path, "a")
    b = _result(tmp_path, "b", "nfs")
    svg = plots.render(kind, [a, b], "svg")
    root = ET.fromstring(svg)
    assert root.tag.endswith("svg")
    png = plots.render(kind, [a], "png")
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_size_sweep_bars_and_bad_requests() -> None:
    def ss(rid: str, kind: str, f: float) -> ProbeResult:
        steps = [StepResult(f"{op[0]}-{s}-{c}", "", {"size": s, "op": op, "cache": c},
                            {"lat_mean_ms": f * s / 1000})
                 for s in (102400, 1048576) for op in ("write", "read")
                 for c in ("cache", "disk")]
        return ProbeResult(rid, "size-sweep", {}, {"kind": kind, "datastore": "d"}, {}, "",
                           "", "ok", steps=steps)

    png = plots.render("size-sweep", [ss("l", "local", 1.0), ss("n", "nfs", 2.5)], "png")
    assert png.startswith(b"\x89PNG")
    assert plots.default_kind(ss("l", "local", 1)) == "size-sweep"
    with pytest.raises(InvalidInput):
        plots.render("pie", [ss("l", "local", 1)], "png")
    with pytest.raises(InvalidInput):
        plots.render("sweep", [ss("l", "local", 1)], "gif")
    with pytest.raises(InvalidInput):
        plots.render("sweep", [], "svg")


def test_report_is_one_self_contained_page(tmp_path: Path) -> None:
    a = _result(tmp_path, "a")
    b = _result(tmp_path, "b", "nfs")
    b.settings = {"zds_version": "0.1.0", "recordsize": "<64K>"}
    page = report.render_html([a, b], title="ds1 & friends")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "ds1 &amp; friends" in page and "&lt;64K&gt;" in page
    assert "comparison with a" in page
    assert page.count("<svg") >= 4  # comparison sweep + per-result plots
    # nothing to fetch: no scripts, stylesheets, images or remote links
    for tag in ("<script", "<link", "<img", "src=", "href='http", 'href="http'):
        assert tag not in page


def test_store_lives_in_the_engine_database(tmp_path: Path) -> None:
    from appliance.store import Store

    engine_store = Store(tmp_path / "zds.db")
    probes = ProbeStore(engine_store.connect)
    probes.save(_synthetic("e1", 10, 1))
    assert probes.get("e1").summary["iops"] == 10
    engine_store.close()
    reopened = Store(tmp_path / "zds.db")  # the engine's tables and ours, one file
    assert ProbeStore(reopened.connect).get("e1").id == "e1"
    assert reopened.list_datastores() == []
