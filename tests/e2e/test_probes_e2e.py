"""Probes inside the booted appliance, through the REST API: local, nfs and iscsi targets
on real ZFS / nfs-ganesha / LIO, scratch cleaned up, results kept across an API restart."""

from __future__ import annotations

import concurrent.futures
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import E2EAppliance
from tests.e2e.rest import api_client, ok, wait_for_health

pytestmark = pytest.mark.e2e

NFS_DS = "probe-nfs"
ISCSI_DS = "probe-lun"
SHORT = {"runtime": 3, "ramp": 1, "size": "16m"}
results: dict[str, str] = {}


@pytest.fixture(scope="module")
def api(appliance: E2EAppliance) -> Iterator[httpx.Client]:
    assert appliance.api_healthy, f"the API never became healthy; see {appliance.serial_log}"
    with api_client(appliance.api_url, token(appliance), timeout=900) as c:
        yield c


def token(appliance: E2EAppliance) -> str:
    """An admin token made in the guest with `zds token create` (does not depend on the
    fw_cfg admin token)."""
    out = appliance.check("zds --json token create --role admin --name e2e-probes")
    return str(json.loads(out[out.index("{"):])["token"])


def run_probe(api: httpx.Client, profile: str, datastore: str, target: str,
              overrides: dict[str, Any]) -> dict[str, Any]:
    job = ok(api.post("/probes", params={"wait": 600}, json={
        "profile": profile, "datastore": datastore, "target": target,
        "overrides": overrides}), 202)
    while job["state"] in ("queued", "running"):
        job = ok(api.get(f"/jobs/{job['id']}", params={"wait": 600}))
    result: dict[str, Any] = ok(api.get(f"/probes/results/{job['result_id']}"))
    assert result["status"] == "ok", (job, result["error"])
    return result


def no_probe_leftovers(appliance: E2EAppliance) -> None:
    zfs = appliance.check("zfs list -H -o name -r tank")
    assert not [n for n in zfs.split() if n.startswith("tank/zds-probes/")], zfs
    _rc, sessions = appliance.exec("iscsiadm -m session 2>&1")
    assert ".probe:" not in sessions
    assert "/run/zds/probes" not in appliance.check("cat /proc/mounts")
    assert ".probe:" not in appliance.check("ls /sys/kernel/config/nvmet/subsystems")


def ensure_pool(api: httpx.Client) -> None:
    if not ok(api.get("/pools")):  # firstboot normally made "tank" on the data disks
        job = ok(api.post("/pools", params={"wait": 300}, json={
            "name": "tank", "force": True, "vdevs": [{"type": "mirror", "disks": [
                "/dev/disk/by-id/virtio-zdsdata0", "/dev/disk/by-id/virtio-zdsdata1"]}]}),
            202)
        assert job["state"] == "succeeded", job


def test_datastores_for_probes(api: httpx.Client) -> None:
    ensure_pool(api)
    ok(api.put(f"/datastores/{NFS_DS}", json={
        "protocol": "nfs3", "size": "2G",
        "nfs": {"clients": [{"match": "127.0.0.1", "access": "rw"}]}}), 201)
    ok(api.put(f"/datastores/{ISCSI_DS}", json={
        "protocol": "iscsi", "size": "2G", "iscsi": {"initiators": []}}), 201)


@pytest.mark.parametrize(("datastore", "target"), [
    (NFS_DS, "local"), (NFS_DS, "nfs"), (ISCSI_DS, "local"), (ISCSI_DS, "iscsi")])
def test_randread_through_each_path(api: httpx.Client, appliance: E2EAppliance,
                                    datastore: str, target: str) -> None:
    r = run_probe(api, "randread-4k-qd32", datastore, target, SHORT)
    s = r["summary"]
    assert s["iops"] > 0 and s["mbps"] > 0
    assert 0 < s["lat_p50_ms"] <= s["lat_p95_ms"] <= s["lat_p99_ms"] <= s["lat_p999_ms"]
    (step,) = r["steps"]
    assert 2 <= len(step["series"]) <= 3
    assert r["target"]["kind"] == target
    assert r["settings"]["zfs"]["compression"] == "lz4"
    assert r["arc"] is not None and "hit_ratio" in r["arc"]  # ZFS is loaded in the guest
    assert r["cpu"]["mean_pct"] is not None
    if target == "nfs":
        assert r["target"]["export_id"] >= 65500
    if target == "iscsi":
        assert r["target"]["iqn"].startswith("iqn.") and ".probe:" in r["target"]["iqn"]
    results[f"{datastore}/{target}"] = r["id"]
    no_probe_leftovers(appliance)


def test_file_set_profile_over_nfs(api: httpx.Client, appliance: E2EAppliance) -> None:
    r = run_probe(api, "varmail", NFS_DS, "nfs", {"runtime": 2, "files": 200, "threads": 4})
    assert r["summary"]["iops"] > 0
    no_probe_leftovers(appliance)


TINY: dict[str, dict[str, Any]] = {
    "size-sweep": {"sizes": "100k,1m", "transfers": 2},
    "rtt": {"samples": 20},
    "net-throughput": {"seconds": 1, "streams": "1"},
    **{p: {"runtime": 1, "ramp": 0, "files": 20, "threads": 2}
       for p in ("fileserver", "webserver", "varmail", "rfa")},
    **{p: {"runtime": 1, "ramp": 0, "size": "8m"}
       for p in ("randread-4k-qd32", "randrw-4k-qd32", "bst", "hybrid-64k", "small-hybrid-4k",
                 "read-only", "write-only", "streaming-read", "streaming-write",
                 "block-size-sweep")},
    **{p: {"runtime": 1, "ramp": 0, "size": "8m", "workers": "1,2"}
       for p in ("vm-mixed-4k", "vm-mixed-8k")},
}


NETWORK_PROFILES = ("rtt", "net-throughput")  # measure the link, not a datastore


def every_profile(api: httpx.Client, datastore: str, target: str) -> dict[str, str]:
    """Runs each catalogue profile once, tiny, on ``datastore`` through ``target``;
    returns the profiles that failed, with why."""
    names = [p["name"] for p in ok(api.get("/probes/profiles"))]
    assert sorted(names) == sorted(TINY)
    if target == "iscsi":
        names = [n for n in names if n not in NETWORK_PROFILES]
    failed = {}
    for name in names:
        where = "local" if name == "net-throughput" else target
        job = ok(api.post("/probes", params={"wait": 600}, json={
            "profile": name, "datastore": datastore, "target": where,
            "overrides": TINY[name]}), 202)
        while job["state"] in ("queued", "running"):
            job = ok(api.get(f"/jobs/{job['id']}", params={"wait": 600}))
        r = ok(api.get(f"/probes/results/{job['result_id']}"))
        if r["status"] != "ok" or not r["summary"]:
            failed[name] = r["error"] or "empty summary"
        elif name == "varmail" and target == "iscsi":
            assert r["target"]["fs"] == "ext4" and r["target"]["iqn"], r["target"]
    return failed


def test_every_profile_runs_by_name(api: httpx.Client, appliance: E2EAppliance) -> None:
    """Each catalogue profile once, tiny, through NFS and through iSCSI (the file-set
    profiles in an ext4 on the LUN); the network profiles once (net-throughput: local).
    The two datastores' runs go side by side, as two admins' would: the API runs two
    long jobs at once, and a probe holds only its own datastore (so this also checks
    that two probes at once each clean up after themselves)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        legs = {target: pool.submit(every_profile, api, datastore, target)
                for datastore, target in ((NFS_DS, "nfs"), (ISCSI_DS, "iscsi"))}
        failed = {target: leg.result() for target, leg in legs.items()}
    assert failed == {"nfs": {}, "iscsi": {}}
    no_probe_leftovers(appliance)


def test_protocol_comparison_measures_every_protocol_and_zfs_side_by_side(
        api: httpx.Client, appliance: E2EAppliance) -> None:
    """One profile through NFSv3, NFSv4.1, iSCSI and NVMe/TCP, and on a dataset and a
    zvol with no protocol: one job, a row per leg with the appliance's CPU per I/O."""
    job = ok(api.post("/probes/comparisons", params={"wait": 600}, json={
        "pool": "tank", "profile": "randread-4k-qd32",
        "overrides": {"runtime": 2, "ramp": 0, "size": "16m"}}), 202)
    while job["state"] in ("queued", "running"):
        job = ok(api.get(f"/jobs/{job['id']}", params={"wait": 600}))
    assert job["state"] == "succeeded", job
    v = ok(api.get(f"/probes/comparisons/{job['comparison_id']}"))
    legs = ["dataset", "nfs3", "nfs41", "zvol", "iscsi", "nvme-tcp"]
    assert v["legs"] == legs and v["complete"], v
    for row in v["rows"]:
        assert row["runs"] == 1 and row["failed"] == 0, v["results"]
        assert row["iops"] > 0 and 0 < row["lat_p50_ms"] <= row["lat_p99_ms"], row
        assert row["cpu_us_per_io"] > 0, row  # the appliance's CPU, over its vCPUs
        assert (row["iops_vs_baseline"] is None) == (row["leg"] in ("dataset", "zvol"))
    by = {r["leg"]: r["id"] for r in v["results"]}
    nfs41 = ok(api.get(f"/probes/results/{by['nfs41']}"))
    assert nfs41["target"]["kind"] == "nfs" and nfs41["target"]["nfs_version"] == 4
    nvme = ok(api.get(f"/probes/results/{by['nvme-tcp']}"))
    assert nvme["target"]["kind"] == "nvme" and nvme["settings"]["scratch"][
        "volblocksize"] == "16384", nvme["settings"]
    png = api.get(f"/probes/comparisons/{job['comparison_id']}/plot",
                  params={"format": "png"})
    assert png.status_code == 200 and png.content.startswith(b"\x89PNG")
    no_probe_leftovers(appliance)


def test_compare_and_plot(api: httpx.Client) -> None:
    a, b = results[f"{NFS_DS}/local"], results[f"{NFS_DS}/nfs"]
    c = ok(api.get("/probes/compare", params={"a": a, "b": b}))
    assert {d["metric"] for d in c["summary"]} >= {"iops", "lat_p99_ms"}
    png = api.get(f"/probes/results/{b}/plot", params={"format": "png", "kind": "timeseries",
                                                      "with": a})
    assert png.status_code == 200 and png.content.startswith(b"\x89PNG")


def test_results_survive_an_api_restart(api: httpx.Client, appliance: E2EAppliance) -> None:
    appliance.check("systemctl restart zds-api")
    wait_for_health(api, lambda h: True, timeout=120)  # the API answers again
    rid = results[f"{ISCSI_DS}/iscsi"]
    assert ok(api.get(f"/probes/results/{rid}"))["profile"] == "randread-4k-qd32"


def test_cleanup(api: httpx.Client) -> None:
    for ds in (NFS_DS, ISCSI_DS):
        job = ok(api.delete(f"/datastores/{ds}", params={"wait": 120}), 202)
        assert job["state"] == "succeeded", job


@pytest.mark.skipif(not os.environ.get("ZDS_E2E_BENCH"),
                    reason="a measurement, not a test: set ZDS_E2E_BENCH=1 to print the table")
def test_protocol_overhead_table(api: httpx.Client, appliance: E2EAppliance,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    """bench/protocol_overhead.py against this appliance; the table goes to
    $ZDS_E2E_BENCH_OUT (default /tmp/zds-protocol-overhead.txt)."""
    from bench import protocol_overhead

    ensure_pool(api)
    rc = protocol_overhead.main([
        "--server", appliance.api_url, "--token", token(appliance), "--insecure",
        "--create", "--runtime", os.environ.get("ZDS_E2E_BENCH_RUNTIME", "10")])
    out = capsys.readouterr().out
    Path(os.environ.get("ZDS_E2E_BENCH_OUT", "/tmp/zds-protocol-overhead.txt")).write_text(out)
    print(out)
    assert rc == 0
