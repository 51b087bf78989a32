"""Probe semantics: the local and protocol targets of a profile mean the same I/O.

The fake engine rig runs the probes; what is checked is what a ratio between them rests
on: the same requested and effective semantics, the same ZFS properties on the scratch,
and the fio flags that carry them on each layer (no O_DIRECT straight on ZFS, O_SYNC on
every layer for sync writes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from appliance.errors import InvalidInput
from appliance.host.fio import FakeFio
from appliance.probes import compare, semantics
from appliance.probes.client import run_on_client
from appliance.probes.execute import ProbeExecutor
from appliance.probes.model import ProbeResult
from tests.unit.conftest import Rig
from tests.unit.test_probe_api import Probe, _iscsi, _nfs, _run

FIX = Path(__file__).parent / "fixtures"


@pytest.fixture
def probe(rig: Rig, tmp_path: Path) -> Probe:
    return Probe(rig, tmp_path)


def _props_log(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, str]]]:
    calls: list[tuple[str, dict[str, str]]] = []
    real = rig.zfs.set_properties

    def spy(name: str, props: Any) -> None:
        calls.append((name, dict(props)))
        real(name, props)

    monkeypatch.setattr(rig.zfs, "set_properties", spy)
    return calls


def _global(jobfile: str, key: str) -> str:
    head = jobfile.split("\n\n", 1)[0]
    return next(line.split("=", 1)[1] for line in head.splitlines()
                if line.startswith(f"{key}="))


# ------------------------------------------------------------------ pure rules

def test_writes_auto_follows_the_datastore_protocol() -> None:
    assert semantics.requested({}, "nfs3").writes == "sync"  # ESXi: FILE_SYNC
    assert semantics.requested({}, "nfs41").writes == "sync"
    assert semantics.requested({}, "iscsi").writes == "async"  # a LUN with WCE=1
    sem = semantics.requested({"reads": "disk", "writes": "async", "direct": False}, "nfs3")
    assert sem == semantics.Semantics("disk", "async", "used")
    with pytest.raises(InvalidInput):
        semantics.requested({"reads": "arc"}, "nfs3")


@pytest.mark.parametrize(("layer", "direct"), [("zfs", False), ("nfs", True),
                                               ("block", True), ("fs", True)])
def test_fio_flags_per_layer(layer: str, direct: bool) -> None:
    sync = semantics.Semantics("cache", "sync", "bypassed")
    io = semantics.fio_io(semantics.on_layer(sync, layer), layer)
    # OpenZFS 2.3's O_DIRECT bypasses the ARC, which ganesha never does: never on zfs
    assert io == semantics.FioIo(direct=direct, sync=True)
    assert not semantics.fio_io(semantics.Semantics("cache", "async", "bypassed"),
                                layer).sync


def test_scratch_properties_and_what_they_give() -> None:
    disk_sync = semantics.Semantics("disk", "sync", "bypassed")
    assert semantics.zfs_props(disk_sync, volume=False) == {
        "primarycache": "metadata", "sync": "standard"}
    cache_async = semantics.Semantics("cache", "async", "bypassed")
    # stable-write requests from the NFS client must cost nothing on both sides
    assert semantics.zfs_props(cache_async, volume=False)["sync"] == "disabled"
    # a zvol's async writes need no property: nobody flushes
    assert semantics.zfs_props(cache_async, volume=True, datastore={"sync": "always"}) == {
        "primarycache": "all", "sync": "always"}
    eff, notes = semantics.effective(cache_async, {"primarycache": "all", "sync": "always"})
    assert eff.writes == "sync" and "sync=always" in notes[0]
    # a datastore that never makes writes stable keeps that, and the result says so
    props = semantics.zfs_props(disk_sync, volume=False, datastore={"sync": "disabled"})
    eff, notes = semantics.effective(disk_sync, props)
    assert props["sync"] == "disabled" and eff.writes == "async" and notes


# ------------------------------------------------------------------ through the service

def test_local_and_nfs_probes_of_an_nfs_datastore_mean_the_same_io(
        client: TestClient, rig: Rig, probe: Probe, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _props_log(rig, monkeypatch)
    _nfs(client)
    results = {}
    for target in ("local", "nfs"):
        job = _run(client, profile="vm-mixed-4k", datastore="ds1", target=target,
                   overrides={"workers": "1,2"})
        results[target] = client.get(f"/api/v1/probes/results/{job['result_id']}").json()
    local, nfs = results["local"]["semantics"], results["nfs"]["semantics"]
    assert (local["reads"], local["writes"]) == (nfs["reads"], nfs["writes"]) == \
        ("cache", "sync")
    assert (local["layer"], local["client_cache"]) == ("zfs", "none")
    assert (nfs["layer"], nfs["client_cache"]) == ("nfs", "bypassed")
    # the same properties on both scratches, set before fio ran
    set_on = [(name.rsplit("-", 1)[0], props) for name, props in calls
              if "/zds-probes/" in name and "primarycache" in props]
    assert set_on == [("tank/zds-probes/ds1", {"primarycache": "all", "sync": "standard"})] * 2
    local_job, nfs_job = probe.fio.jobs[0][0], probe.fio.jobs[1][0]
    # straight on ZFS: through the ARC like ganesha, O_SYNC like the client's FILE_SYNC
    assert (_global(local_job, "direct"), _global(local_job, "sync")) == ("0", "1")
    assert (_global(nfs_job, "direct"), _global(nfs_job, "sync")) == ("1", "1")
    c = compare.compare(ProbeResult.from_dict(_result_dict(results["local"])),
                        ProbeResult.from_dict(_result_dict(results["nfs"])))
    assert c.warnings == []


def test_local_and_iscsi_probes_of_a_zvol_mean_the_same_io(
        client: TestClient, rig: Rig, probe: Probe) -> None:
    _iscsi(client)
    sems = []
    for target in ("local", "iscsi"):
        job = _run(client, profile="randread-4k-qd32", datastore="lun1", target=target)
        sems.append(client.get(f"/api/v1/probes/results/{job['result_id']}")
                    .json()["semantics"])
    assert [(s["layer"], s["reads"], s["writes"], s["client_cache"]) for s in sems] == [
        ("block", "cache", "async", "bypassed"), ("block", "cache", "async", "bypassed")]
    assert [(_global(j, "direct"), _global(j, "sync")) for j, _w in probe.fio.jobs] == [
        ("1", "0"), ("1", "0")]


def test_size_sweep_runs_its_cache_and_disk_passes_with_the_scratch_set_between(
        client: TestClient, rig: Rig, probe: Probe, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _props_log(rig, monkeypatch)
    _nfs(client)
    job = _run(client, profile="size-sweep", datastore="ds1", target="nfs",
               overrides={"sizes": "100k,1m", "transfers": 2})
    res = client.get(f"/api/v1/probes/results/{job['result_id']}").json()
    assert len(probe.fio.jobs) == 2  # one fio run per pass
    cache_job, disk_job = (j for j, _w in probe.fio.jobs)
    assert "[w-100k-cache]" in cache_job and "-disk]" not in cache_job
    assert "[r-1m-disk]" in disk_job and "-cache]" not in disk_job
    assert (_global(cache_job, "direct"), _global(cache_job, "sync")) == ("1", "0")
    assert (_global(disk_job, "direct"), _global(disk_job, "sync")) == ("1", "1")
    scratch = [props for name, props in calls if "/zds-probes/" in name
               and "primarycache" in props]
    # cache pass: in memory (stable-write requests cost nothing), ARC; disk pass: ZIL, disk
    assert scratch == [{"primarycache": "all", "sync": "disabled"},
                       {"primarycache": "metadata", "sync": "standard"}]
    sem = res["semantics"]
    assert sem["reads"] == "per step" and sem["writes"] == "per step"
    assert [p["effective"]["reads"] for p in sem["phases"]] == ["cache", "disk"]
    assert sem["phases"][1]["steps"][0] == "w-100k-disk"


def test_client_mode_records_semantics_and_refuses_reads_from_disk(tmp_path: Path) -> None:
    fio = FakeFio(json_text=(FIX / "fio" / "vm-mixed-4k.json").read_text())
    ex = ProbeExecutor(fio, str(tmp_path / "work"))
    common: dict[str, Any] = {
        "path": str(tmp_path), "usage": lambda p: (100 << 30, 0),
        "make_dir": lambda p: Path(p).mkdir(parents=True, exist_ok=True),
        "remove_tree": lambda p: None}
    r = run_on_client(ex, "vm-mixed-4k", {"workers": "1,2"}, "ds1", **common)
    assert r.semantics["layer"] == "fs" and r.semantics["client_cache"] == "bypassed"
    assert "client mode" in r.semantics["phases"][0]["notes"][0]
    with pytest.raises(InvalidInput, match="reads=disk"):
        r2 = run_on_client(ex, "vm-mixed-4k", {"workers": "1", "reads": "disk"}, "ds1",
                           **common)
        if r2.status == "failed":
            raise InvalidInput(r2.error)


def test_client_mode_size_sweep_runs_its_disk_pass_and_says_the_arc_may_serve_it(
        tmp_path: Path) -> None:
    """size-sweep always has a disk pass; from a client it cannot keep the appliance's
    ARC out, so it runs (page cache dropped by invalidate=1) and is not recorded as disk."""
    fio = FakeFio(json_text=(FIX / "fio" / "size-sweep.json").read_text())
    ex = ProbeExecutor(fio, str(tmp_path / "work"))
    r = run_on_client(ex, "size-sweep", {"sizes": "100k,1m", "transfers": 8}, "ds1",
                      path=str(tmp_path), usage=lambda p: (100 << 30, 0),
                      make_dir=lambda p: Path(p).mkdir(parents=True, exist_ok=True),
                      remove_tree=lambda p: None)
    assert r.status == "ok", r.error
    phases = r.semantics["phases"]
    assert [p["requested"]["reads"] for p in phases] == ["cache", "disk"]
    assert [p["effective"]["reads"] for p in phases] == ["cache", "cache"]
    assert any("ARC may still serve" in n for n in phases[1]["notes"])
    assert "invalidate=1" in r.extra["jobfile"].split("[w-100k-disk]", 1)[1]


def test_compare_says_when_two_results_do_not_mean_the_same_io() -> None:
    def result(rid: str, writes: str, cc: str) -> ProbeResult:
        return ProbeResult(id=rid, profile="vm-mixed-4k", params={}, target={}, settings={},
                           started_at="", ended_at="", status="ok", summary={"iops": 1.0},
                           semantics={"reads": "cache", "writes": writes, "client_cache": cc})

    assert compare.compare(result("a", "sync", "none"), result("b", "sync", "bypassed")
                           ).warnings == []
    warn = compare.compare(result("a", "async", "none"), result("b", "sync", "used")).warnings
    assert any("writes" in w for w in warn) and any("client_cache" in w for w in warn)
    # results from before semantics were recorded: said, not guessed
    old = ProbeResult(id="o", profile="vm-mixed-4k", params={}, target={}, settings={},
                      started_at="", ended_at="", status="ok", summary={"iops": 1.0})
    assert "no recorded semantics" in compare.compare(old, result("b", "sync", "none")).warnings[0]


def _result_dict(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != "published"}


def test_the_report_shows_semantics_and_warns_on_unlike_pairs() -> None:
    from appliance.probes.report import render_html

    def result(rid: str, writes: str) -> ProbeResult:
        return ProbeResult(id=rid, profile="bst", params={}, target={"kind": "local"},
                           settings={}, started_at="", ended_at="", status="ok",
                           summary={"iops": 1.0},
                           semantics={"layer": "zfs", "reads": "cache", "writes": writes,
                                      "client_cache": "none"})

    html = render_html([result("a1", "sync"), result("b1", "async")])
    assert "<td>writes</td><td>async</td>" in html.replace(" class='l'", "")
    assert "not like with like: writes differ" in html


def test_file_sets_on_a_zvol_run_in_ext4_on_both_targets_with_its_cache_bypassed(
        client: TestClient, rig: Rig, tmp_path: Path) -> None:
    probe = Probe(rig, tmp_path, with_devfs=True)
    _iscsi(client)
    layers = []
    for target in ("local", "iscsi"):
        job = _run(client, profile="varmail", datastore="lun1", target=target,
                   overrides={"files": 20, "threads": 2, "reads": "disk"})
        layers.append(client.get(f"/api/v1/probes/results/{job['result_id']}")
                      .json()["semantics"])
    assert [(s["layer"], s["reads"], s["writes"]) for s in layers] == [
        ("fs", "disk", "async"), ("fs", "disk", "async")]
    assert all(s["phases"][0]["zfs"]["primarycache"] == "metadata" for s in layers)
    assert [_global(j, "direct") for j, _w in probe.fio.jobs] == ["1", "1"]
