"""fio / iperf3 / /proc parsers fed with real output captured on this machine (fio 3.33)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.errors import HostCommandFailed
from appliance.host.net import parse_iperf3
from appliance.host.sysstat import arc_delta, parse_arcstats, parse_proc_stat
from appliance.probes import fioparse

FIX = Path(__file__).parent / "fixtures"


def _logs() -> dict[str, str]:
    return {p.name: p.read_text() for p in (FIX / "fio" / "vm-mixed-4k-logs").iterdir()}


def test_group_reporting_json_gives_one_group_per_sweep_point() -> None:
    rep = fioparse.parse_json((FIX / "fio" / "vm-mixed-4k.json").read_text())
    assert rep.version == "fio-3.33"
    assert [g.jobname for g in rep.groups] == ["w1", "w2"]
    w1 = rep.groups[0]
    doc = json.loads((FIX / "fio" / "vm-mixed-4k.json").read_text())["jobs"][0]
    assert w1.iops == pytest.approx(doc["read"]["iops"] + doc["write"]["iops"])
    assert w1.read_iops / w1.iops == pytest.approx(0.75, abs=0.02)  # rwmixread=75
    assert w1.mbps == pytest.approx((doc["read"]["bw_bytes"] + doc["write"]["bw_bytes"]) / 1e6)
    assert fioparse.ordered(w1.latency) and w1.latency.p50 > 0
    assert w1.latency.samples == doc["read"]["clat_ns"]["N"] + doc["write"]["clat_ns"]["N"]


def test_bin_percentiles_equal_fios_own_for_one_direction() -> None:
    doc = json.loads((FIX / "fio" / "vm-mixed-4k.json").read_text())
    for job in doc["jobs"]:
        for d in ("read", "write"):
            clat = job[d]["clat_ns"]
            bins = {int(k): v for k, v in clat["bins"].items()}
            for p in ("50.000000", "95.000000", "99.000000", "99.900000"):
                assert fioparse.percentile_from_bins(bins, float(p)) == clat["percentile"][p]


def test_jobs_without_group_reporting_are_summed() -> None:
    text = (FIX / "fio" / "two-jobs-no-group-reporting.json").read_text()
    doc = json.loads(text)
    assert len(doc["jobs"]) == 2
    (g,) = fioparse.parse_json(text).groups
    assert g.jobs == 2
    assert g.iops == pytest.approx(sum(j[d]["iops"] for j in doc["jobs"]
                                       for d in ("read", "write")))
    assert g.total_ios == sum(j[d]["total_ios"] for j in doc["jobs"] for d in ("read", "write"))
    assert fioparse.ordered(g.read_latency) and fioparse.ordered(g.write_latency)
    # the merged mean is the N-weighted mean of the parts
    parts = [j[d]["clat_ns"] for j in doc["jobs"] for d in ("read", "write")]
    mean = sum(c["mean"] * c["N"] for c in parts) / sum(c["N"] for c in parts) / 1e6
    assert g.latency.mean == pytest.approx(mean)


def test_size_sweep_json_one_io_per_object() -> None:
    rep = fioparse.parse_json((FIX / "fio" / "size-sweep.json").read_text())
    names = [g.jobname for g in rep.groups]
    assert names[:4] == ["w-100k-cache", "r-100k-cache", "w-100k-disk", "r-100k-disk"]
    for g in rep.groups:
        assert g.total_ios == 5  # transfers=5 objects, one I/O each
        assert g.latency.mean > 0


def test_series_buckets_per_second_and_sums_jobs() -> None:
    logs = _logs()
    w2 = fioparse.series(logs, "w2", runtime=3)
    assert [p.t for p in w2] == [1, 2, 3]
    # w2 has two job logs; second 1 = sum of both jobs' read + write rows
    first = sum(v for name in ("log.w2_iops.2.log", "log.w2_iops.3.log")
                for ms, v, _d in fioparse.parse_log(logs[name]) if round(ms / 1000) == 1)
    assert w2[0].iops == pytest.approx(first)
    assert all(0 < p.lat_ms < 10 for p in w2)
    # fio left out w1's last window: the series is shorter, never padded
    assert [p.t for p in fioparse.series(logs, "w1", runtime=3)] == [1, 2]
    assert fioparse.series(logs, "nope", runtime=3) == []


def test_tail_rows_outside_the_runtime_are_dropped() -> None:
    text = "1000, 10, 0, 0, 0\n2000, 20, 0, 0, 0\n2001, 99, 0, 0, 0\n5, 7, 1, 0, 0\n3000, 1, 0\n"
    pts = fioparse.series({"log.x_iops.1.log": text}, "x", runtime=2)
    assert [(p.t, p.iops) for p in pts] == [(1, 10.0), (2, 20.0)]


def test_json_after_warnings_and_garbage() -> None:
    text = "fio: some warning\n" + (FIX / "fio" / "vm-mixed-4k.json").read_text()
    assert len(fioparse.parse_json(text).groups) == 2
    with pytest.raises(HostCommandFailed):
        fioparse.parse_json("no json here")
    with pytest.raises(HostCommandFailed):
        fioparse.parse_json("{ broken")


def test_iperf3_json() -> None:
    r = parse_iperf3((FIX / "iperf3-p2.json").read_text())
    assert r.gbps == pytest.approx(18.785899774, rel=1e-6)
    assert r.version == "iperf 3.12" and r.cpu_host_pct is not None


def test_proc_stat_and_arcstats() -> None:
    busy, total = parse_proc_stat("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4\n")
    assert (busy, total) == (150, 1000)
    arc = ("13 1 0x01 147 39984 6171196286 1212483766371\n"
           "name                            type data\n"
           "hits                            4    1034877\n"
           "misses                          4    20301\n")
    a = parse_arcstats(arc)
    assert a["hits"] == 1034877
    d = arc_delta({"hits": 1000, "misses": 0}, {"hits": 1900, "misses": 100})
    assert d is not None and d.hit_ratio == pytest.approx(0.9)
    assert arc_delta(None, a) is None


def test_a_second_missing_from_one_job_is_left_out() -> None:
    logs = {"log.x_iops.1.log": "1000, 10, 0, 0, 0\n2000, 10, 0, 0, 0\n3000, 10, 0, 0, 0\n",
            "log.x_iops.2.log": "1000, 5, 0, 0, 0\n2000, 5, 0, 0, 0\n"}
    assert [(p.t, p.iops) for p in fioparse.series(logs, "x", runtime=3)] == [(1, 15.0),
                                                                              (2, 15.0)]
