"""ProbeExecutor with fake hosts: job file in, captured real fio output out."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from appliance.errors import InvalidInput
from appliance.host.fio import FakeFio, Fio
from appliance.host.run import RecordingRunner
from appliance.host.spawn import FakeSpawner
from appliance.host.sysstat import SysStats
from appliance.probes.execute import CancelToken, ProbeExecutor, ProbeTarget
from appliance.probes.model import ProbeResult

FIX = Path(__file__).parent / "fixtures"


def _fake_fio(**kw: object) -> FakeFio:
    logs = {p.name: p.read_text() for p in (FIX / "fio" / "vm-mixed-4k-logs").iterdir()}
    return FakeFio(json_text=(FIX / "fio" / "vm-mixed-4k.json").read_text(), logs=logs,
                   **kw)  # type: ignore[arg-type]


def _proc(tmp_path: Path, busy: int, total: int) -> None:
    (tmp_path / "stat").write_text(f"cpu  {busy} 0 0 {total - busy} 0 0 0 0 0 0\n")


def test_fio_probe_result_records_everything(tmp_path: Path) -> None:
    fio = _fake_fio()
    _proc(tmp_path, 100, 1000)
    arc = tmp_path / "spl" / "kstat" / "zfs"
    arc.mkdir(parents=True)
    (arc / "arcstats").write_text("h\nname type data\nhits 4 100\nmisses 4 0\n")
    stats = SysStats(str(tmp_path))
    ex = ProbeExecutor(fio, str(tmp_path / "work"), stats=stats)
    res = ex.run("vm-mixed-4k", {"workers": "1,2", "runtime": 3},
                 ProbeTarget("local", "ds1", "/tank/zds-probes/p1"),
                 settings={"zds_version": "0.1.0", "zfs": {"recordsize": "65536"}},
                 result_id="r1")
    assert res.status == "ok", res.error
    assert res.id == "r1" and res.profile == "vm-mixed-4k"
    assert res.params["workers"] == [1, 2] and res.params["runtime"] == 3
    assert res.target["kind"] == "local" and res.target["datastore"] == "ds1"
    assert res.settings["zfs"] == {"recordsize": "65536"}
    assert res.started_at and res.ended_at
    assert [s.label for s in res.steps] == ["workers=1", "workers=2"]
    # summary rule "peak": the worker count with the most IOPS
    best = max(res.steps, key=lambda s: s.metrics["iops"])
    assert res.summary["iops"] == best.metrics["iops"]
    assert res.summary["peak_at"] == best.point["workers"]
    for key in ("mbps", "lat_mean_ms", "lat_p50_ms", "lat_p95_ms", "lat_p99_ms", "lat_p999_ms"):
        assert res.summary[key] > 0
    assert len(res.steps[1].series) == 3
    assert res.arc == {"hits": 0, "misses": 0, "hit_ratio": None}
    assert "mean_pct" in res.cpu
    job, workdir = fio.jobs[0]
    assert "directory=/tank/zds-probes/p1" in job and "runtime=3" in job
    assert f"write_iops_log={workdir}/log.w1" in job
    assert res.extra["fio_version"] == "fio-3.33"
    # round trip through a dict (what the store keeps)
    assert ProbeResult.from_dict(res.to_dict()) == res


def test_fio_failure_is_a_failed_result(tmp_path: Path) -> None:
    fio = FakeFio(json_text="", returncode=1, stderr="fio: pid=0, err=28/file:No space left")
    res = executor_for(fio, tmp_path).run("bst", {}, ProbeTarget("local", "d", "/x"))
    assert res.status == "failed" and "No space left" in res.error
    assert res.steps == [] and res.summary == {}


def executor_for(fio: FakeFio, tmp_path: Path) -> ProbeExecutor:
    return ProbeExecutor(fio, str(tmp_path))


def test_cancel_kills_the_running_fio(tmp_path: Path) -> None:
    fio = _fake_fio(block=True)
    token = CancelToken()
    ex = executor_for(fio, tmp_path)
    out: list[ProbeResult] = []
    t = threading.Thread(target=lambda: out.append(
        ex.run("vm-mixed-4k", {"workers": "1,2"}, ProbeTarget("local", "d", "/x"),
               cancel=token)))
    t.start()
    for _ in range(200):
        if fio.runs:
            break
        threading.Event().wait(0.01)
    token.cancel()
    t.join(5)
    assert fio.runs[0].cancels == 1
    assert out[0].status == "cancelled"
    assert out[0].extra["pid"] == fio.runs[0].pid


def test_cancel_before_start_runs_nothing(tmp_path: Path) -> None:
    fio = _fake_fio()
    token = CancelToken()
    token.cancel()
    res = executor_for(fio, tmp_path).run("bst", {}, ProbeTarget("local", "d", "/x"),
                                         cancel=token)
    assert res.status == "cancelled" and fio.jobs == []


def test_drain_is_measured_after_randrw(tmp_path: Path) -> None:
    synced: list[str] = []

    def sync(path: str) -> float:
        synced.append(path)
        return 0.25

    fio = FakeFio(json_text=(FIX / "fio" / "vm-mixed-4k.json").read_text())
    ex = ProbeExecutor(fio, str(tmp_path), sync=sync)
    res = ex.run("randrw-4k-qd32", {}, ProbeTarget("nfs", "d", "/mnt/zds/d"))
    # the fixture has groups w1/w2, not this profile's section: no steps, still ok
    assert res.status == "ok" and synced == ["/mnt/zds/d"] and res.extra["drain_s"] == 0.25


def test_bad_target_and_overrides(tmp_path: Path) -> None:
    ex = executor_for(FakeFio(), tmp_path)
    with pytest.raises(InvalidInput):
        ProbeTarget("somewhere", "d", "/x")
    with pytest.raises(InvalidInput):
        ex.run("bst", {"bogus": 1}, ProbeTarget("local", "d", "/x"))
    res = ex.run("bst", {}, ProbeTarget("local", "d", ""))
    assert res.status == "failed" and "needs a target path" in res.error


def test_rtt_local_runs_against_a_loopback_echo_server(tmp_path: Path) -> None:
    res = executor_for(FakeFio(), tmp_path).run("rtt", {"samples": 50},
                                               ProbeTarget("local", "d"))
    assert res.status == "ok", res.error
    s = res.summary
    assert s["samples"] == 50
    assert 0 < s["lat_p50_ms"] <= s["lat_p95_ms"] <= s["lat_p99_ms"] <= s["lat_max_ms"]
    assert len(res.steps[0].series) == 50


def test_fio_is_asked_its_version_once() -> None:
    runner = RecordingRunner()
    runner.on(["fio", "--version"], "fio-3.33\n")
    fio = Fio(runner, FakeSpawner())
    assert [fio.version(), fio.version()] == ["fio-3.33", "fio-3.33"]
    assert runner.calls == [("fio", "--version")]
