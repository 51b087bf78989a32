"""Probes for real on this host: fio on a temporary directory, iperf3 and TCP on loopback.

No ZFS here, so the scratch-dataset and nfs/iscsi parts run in the appliance image
(tests/e2e); what runs here is everything from the job file to the stored result.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from appliance.host.fio import Fio
from appliance.host.localfs import LocalFs
from appliance.host.net import Iperf3
from appliance.host.run import SubprocessRunner
from appliance.host.spawn import PopenSpawner
from appliance.host.sysstat import SysStats
from appliance.probes import fioparse, plots, report
from appliance.probes.execute import CancelToken, ProbeExecutor, ProbeTarget
from appliance.probes.fioparse import Latency
from appliance.probes.semantics import Semantics
from appliance.probes.store import ProbeStore

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed"),
]


@pytest.fixture
def executor(tmp_path: Path) -> ProbeExecutor:
    runner = SubprocessRunner()
    spawner = PopenSpawner()
    return ProbeExecutor(Fio(runner, spawner), str(tmp_path / "work"), stats=SysStats(),
                         iperf=Iperf3(runner, spawner), sync=LocalFs(runner).sync)


def _lat(m: dict[str, float]) -> Latency:
    return Latency(m["lat_mean_ms"], m["lat_p50_ms"], m["lat_p95_ms"], m["lat_p99_ms"],
                   m["lat_p999_ms"], m["lat_max_ms"], 1)


@pytest.mark.parametrize(("profile", "overrides", "steps"), [
    ("randread-4k-qd32", {"runtime": 3, "size": "32m"}, 1),
    ("vm-mixed-4k", {"runtime": 2, "size": "16m", "workers": "1,2"}, 2),
    ("randrw-4k-qd32", {"runtime": 2, "size": "32m"}, 1),
])
def test_time_based_profiles_give_sane_results(executor: ProbeExecutor, tmp_path: Path,
                                               profile: str, overrides: dict[str, object],
                                               steps: int) -> None:
    data = tmp_path / "data"
    data.mkdir()
    store = ProbeStore(tmp_path / "zds.db")
    t0 = time.monotonic()
    r = executor.run(profile, overrides, ProbeTarget("local", "host", str(data)))
    took = time.monotonic() - t0
    assert r.status == "ok", r.error
    store.save(r)
    assert store.get(r.id) == r
    runtime = int(str(overrides["runtime"]))
    assert len(r.steps) == steps
    for st in r.steps:
        m = st.metrics
        assert m["iops"] > 0 and m["mbps"] > 0 and m["ios"] > 0
        assert fioparse.ordered(_lat(m)), m
        assert 0 < m["lat_p50_ms"] <= m["lat_p99_ms"] <= m["lat_p999_ms"]
        assert abs(m["runtime_s"] - runtime) < 0.5
        # one point per measured second; fio 3.33 sometimes drops the last window
        assert runtime - 1 <= len(st.series) <= runtime, st.series
        assert [p["t"] for p in st.series] == list(range(1, len(st.series) + 1))
        assert all(p["iops"] > 0 for p in st.series)
        # the per-second series agrees with fio's own average (within noise)
        mean = sum(p["iops"] for p in st.series) / len(st.series)
        assert 0.5 < mean / m["iops"] < 2.0
    assert r.cpu["mean_pct"] is not None and 0 <= r.cpu["mean_pct"] <= 100
    assert r.arc is None or "hit_ratio" in r.arc
    assert took < steps * (runtime + 1) + 30
    if profile == "randrw-4k-qd32":
        assert r.extra["drain_s"] >= 0
    assert list(data.iterdir()), "fio's files are in the target directory"
    assert not (tmp_path / "work" / r.id).exists(), "work directory removed"
    png = plots.render(plots.default_kind(r), [r], "png")
    assert png.startswith(b"\x89PNG")
    assert "<svg" in report.render_html([r])


def test_size_sweep_cache_is_faster_than_disk_for_reads(executor: ProbeExecutor,
                                                         tmp_path: Path) -> None:
    # This host stands in for the appliance without ZFS: its page cache plays the ARC
    # (direct=false: the probe's I/O may use it), and the disk pass keeps it out with
    # fio's invalidate=1, so there is no property to set between the passes.
    passes: list[str] = []

    def setup(sem: Semantics) -> dict[str, str]:
        passes.append(sem.reads)
        return {}

    r = executor.run("size-sweep", {"sizes": "100k,1m", "transfers": 8, "direct": "false"},
                     ProbeTarget("local", "host", str(tmp_path)), setup=setup)
    assert r.status == "ok", r.error
    assert passes == ["cache", "disk"]
    assert r.semantics["layer"] == "fs" and r.semantics["reads"] == "per step"
    assert [p["fio"]["direct"] for p in r.semantics["phases"]] == ["0", "0"]
    assert len(r.steps) == 8
    for st in r.steps:
        assert st.metrics["ios"] == 8  # one I/O per object
    s = r.summary
    assert s["read_cache_ms"] > 0 and s["read_ms"] > 0 and s["write_ms"] > 0
    assert s["read_cache_ms"] < s["read_ms"]  # page cache vs read from disk after invalidate


def test_cancel_stops_fio_by_pid(executor: ProbeExecutor, tmp_path: Path) -> None:
    token = CancelToken()
    out = []
    t = threading.Thread(target=lambda: out.append(executor.run(
        "randread-4k-qd32", {"runtime": 60, "size": "16m"},
        ProbeTarget("local", "host", str(tmp_path)), cancel=token)))
    t0 = time.monotonic()
    t.start()
    time.sleep(3)
    token.cancel()
    t.join(30)
    assert not t.is_alive()
    assert time.monotonic() - t0 < 20
    r = out[0]
    assert r.status == "cancelled"
    pid = int(r.extra["pid"])
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_client_mode_cli_runs_fio_and_cleans_its_scratch(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    from api.cli import main

    mnt = tmp_path / "mnt"
    mnt.mkdir()
    rc = main(["--json", "probe", "run", "bst", "--datastore", "ds1", "--path", str(mnt),
               "--set", "runtime=2", "--set", "size=16m", "--no-post",
               "--workdir", str(tmp_path / "w")])
    body = json.loads(capsys.readouterr().out)
    assert rc == 0, body
    assert body["target"]["kind"] == "client" and body["summary"]["iops"] > 0
    assert list(mnt.iterdir()) == []


@pytest.mark.skipif(shutil.which("iperf3") is None, reason="iperf3 is not installed")
def test_network_profiles_on_loopback(executor: ProbeExecutor) -> None:
    net = executor.run("net-throughput", {"seconds": 1, "streams": "1,2", "port": 5291},
                       ProbeTarget("local", "host"))
    assert net.status == "ok", net.error
    assert [s.point["streams"] for s in net.steps] == [1, 2]
    assert all(s.metrics["gbps"] > 0.1 for s in net.steps)
    rtt = executor.run("rtt", {"samples": 300}, ProbeTarget("local", "host"))
    assert rtt.status == "ok", rtt.error
    s = rtt.summary
    assert s["samples"] == 300 and 0 < s["lat_p50_ms"] <= s["lat_p99_ms"] < 50
