"""The whole stack for real, through the REST API only: pool, NFS and iSCSI datastores,
data written from the host and read back, VAAI bits, ACLs, snapshots and rollback, a
reboot that must restore everything, cleanup, and bad input. The tests run in order and
share the booted appliance (tests/e2e/conftest.py)."""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from appliance.hostid import hostid_for
from tests.e2e.clients import Iscsi, Nfs
from tests.e2e.conftest import E2EAppliance
from tests.e2e.rest import api_client, ok, wait_for_health

pytestmark = pytest.mark.e2e

INITIATOR = "iqn.2026-11.org.example:host1"
INTRUDER = "iqn.2026-11.org.example:intruder"
MiB = 1 << 20
# the host as the guest sees it behind QEMU user networking
HOST_AS_SEEN = "10.0.2.2"

state: dict[str, Any] = {}


@pytest.fixture(scope="module")
def api(appliance: E2EAppliance) -> Iterator[httpx.Client]:
    assert appliance.api_healthy, f"the API never became healthy; see {appliance.serial_log}"
    with api_client(appliance.api_url, appliance.admin_token, timeout=600) as c:
        yield c


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2e-data")


@pytest.fixture(scope="module")
def nfs(appliance: E2EAppliance, workdir: Path) -> Nfs:
    return Nfs(appliance.nfs_port, appliance.mountd_port, workdir)


@pytest.fixture(scope="module")
def iscsi(appliance: E2EAppliance, workdir: Path) -> Iscsi:
    return Iscsi(appliance.iscsi_port, workdir)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_1_default_pool_is_a_mirror_of_the_data_disks(api: httpx.Client) -> None:
    pools = ok(api.get("/pools"))
    assert [p["name"] for p in pools] == ["tank"], pools
    tank = ok(api.get("/pools/tank"))
    assert tank["health"] == "ONLINE" and tank["demo"] is False
    mirrors = [c for c in tank["vdevs"]["children"] if c["name"].startswith("mirror")]
    assert len(mirrors) == 1 and len(mirrors[0]["children"]) == 2, tank["vdevs"]
    assert ok(api.get("/system/health"))["status"] == "ok"


def test_2_nfs_datastore_data_round_trip(api: httpx.Client, nfs: Nfs, workdir: Path) -> None:
    d = ok(api.put("/datastores/nfs01", json={
        "protocol": "nfs3", "size": "2G",
        "nfs": {"clients": [{"match": HOST_AS_SEEN, "access": "rw"}]}}), 201)
    path = d["nfs"]["path"]
    assert d["serving"] and path == "/tank/datastores/nfs01"
    big = workdir / "big.bin"
    big.write_bytes(os.urandom(100 * MiB))
    t0 = time.monotonic()
    nfs.put_file(path, "big.bin", big)
    small = {f"f{i:03d}.txt": os.urandom(4096 + i) for i in range(40)}
    for name, data in small.items():
        nfs.put(path, name, data)
    assert sha(nfs.get(path, "big.bin")) == sha(big.read_bytes())
    for name, data in small.items():
        assert nfs.get(path, name) == data, name
    listing = nfs.ls(path).stdout
    assert all(name in listing for name in small)
    print(f"\n[e2e] 100 MiB + 40 small files over NFSv3 in {time.monotonic() - t0:.1f} s")
    state["nfs_path"] = path
    state["big_sha"] = sha(big.read_bytes())


def test_3_iscsi_datastore_vaai_acl_and_blocks(api: httpx.Client, iscsi: Iscsi,
                                               workdir: Path) -> None:
    d = ok(api.put("/datastores/lun01", json={
        "protocol": "iscsi", "size": "1G", "iscsi": {"initiators": [INITIATOR]}}), 201)
    iqn, wwn = d["iscsi"]["iqn"], d["iscsi"]["wwn"]
    assert d["serving"]
    # libiscsi 1.19 output formats (utils/iscsi-inq.c, iscsi-readcapacity16.c); its -c
    # takes the VPD page code in decimal
    std = iscsi.inq(iqn, INITIATOR).stdout
    assert "Vendor:LIO-ORG" in std and re.search(r"^3PC:1$", std, re.M), std  # XCOPY
    cap = iscsi.readcapacity16(iqn, INITIATOR)
    assert re.search(r"LBPME:1", cap), cap  # thin provisioning / UNMAP
    total = re.search(r"Total size:(\d+)", cap)
    assert total and int(total.group(1)) == d["size"], cap
    usn = iscsi.inq(iqn, INITIATOR, "-e", "1", "-c", "128").stdout  # 0x80 unit serial
    assert f"Unit Serial Number:[{d['iscsi']['serial']}]" in usn, usn
    limits = iscsi.inq(iqn, INITIATOR, "-e", "1", "-c", "176").stdout  # 0xb0 block limits
    caw = re.search(r"maximum compare and write length:(\d+)", limits)
    assert caw and int(caw.group(1)) > 0, f"ATS (COMPARE AND WRITE) not offered:\n{limits}"
    lbp = iscsi.inq(iqn, INITIATOR, "-e", "1", "-c", "178").stdout  # 0xb2 provisioning
    assert re.search(r"^lbpu:1$", lbp, re.M) and re.search(r"^lbpws:1$", lbp, re.M), lbp
    assert wwn.startswith("naa.6001405")

    block = workdir / "block.bin"
    block.write_bytes(os.urandom(4 * MiB))
    iscsi.write(iqn, INITIATOR, block, 8 * MiB)
    assert sha(iscsi.read(iqn, INITIATOR, 8 * MiB, 4 * MiB) or b"") == sha(block.read_bytes())
    # an initiator without an ACL gets nothing
    assert iscsi.inq(iqn, INTRUDER, check=False).returncode != 0
    assert iscsi.read(iqn, INTRUDER, 0, MiB, check=False) is None
    state.update(iqn=iqn, wwn=wwn, block_sha=sha(block.read_bytes()))


def test_4_snapshots_and_rollback(api: httpx.Client, nfs: Nfs, iscsi: Iscsi,
                                  workdir: Path) -> None:
    path, iqn = state["nfs_path"], state["iqn"]
    ok(api.post("/datastores/nfs01/snapshots", json={"name": "s1"}), 201)
    ok(api.post("/datastores/lun01/snapshots", json={"name": "s1"}), 201)
    nfs.put(path, "f000.txt.new", b"changed")
    changed = workdir / "changed.bin"
    changed.write_bytes(os.urandom(4 * MiB))
    iscsi.write(iqn, INITIATOR, changed, 8 * MiB)
    assert sha(iscsi.read(iqn, INITIATOR, 8 * MiB, 4 * MiB) or b"") != state["block_sha"]

    # the host wrote a moment ago, so ganesha counts it as a connected client: force
    r = api.post("/datastores/nfs01/snapshots/s1/rollback", json={})
    assert r.status_code == 409 and HOST_AS_SEEN in r.json()["error"]["message"], r.text
    ok(api.post("/datastores/nfs01/snapshots/s1/rollback", json={"force": True}))
    ok(api.post("/datastores/lun01/snapshots/s1/rollback", json={}))
    assert "f000.txt.new" not in nfs.ls(path).stdout
    assert sha(iscsi.read(iqn, INITIATOR, 8 * MiB, 4 * MiB) or b"") == state["block_sha"]
    assert ok(api.get("/system/drift")) == {"in_sync": True, "items": []}


# Datastores made before the reboot, so it restores many at once (round 1 saw a boot with
# ~66 datastores answer no request for 11 minutes): half NFS, half iSCSI.
BULK = 30


def bulk_names() -> list[str]:
    return [f"bulk{i:02d}" for i in range(BULK)]


def test_5_many_datastores_before_the_reboot(api: httpx.Client,
                                             appliance: E2EAppliance) -> None:
    """Made as a tool makes them (Terraform applies 10 resources at once): ten PUTs in
    flight at a time, which the create queue makes in batches. Each is answered 201, or
    202 with a job when it outlasts the request's wait, and every one is then served."""
    def bodies(i: int) -> dict[str, Any]:
        if i % 2 == 0:
            return {"protocol": "nfs3", "size": "64M",
                    "nfs": {"clients": [{"match": HOST_AS_SEEN, "access": "rw"}]}}
        return {"protocol": "iscsi", "size": "64M", "iscsi": {"initiators": [INITIATOR]}}

    def put(i: int) -> tuple[int, float]:
        t0 = time.monotonic()
        with api_client(appliance.api_url, appliance.admin_token, timeout=600) as c:
            r = c.put(f"/datastores/{bulk_names()[i]}", json=bodies(i))
            assert r.status_code in (201, 202), r.text
            if r.status_code == 202:
                job = r.json()
                while job["state"] in ("queued", "running"):
                    job = ok(c.get(f"/jobs/{job['id']}", params={"wait": 300}))
                assert job["state"] == "succeeded", job
        return r.status_code, time.monotonic() - t0

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=10) as pool:
        answers = list(pool.map(put, range(BULK)))
    took = time.monotonic() - t0
    print(f"\n[e2e] {BULK} PUTs, ten at a time: {took:.0f} s in all, the slowest "
          f"{max(t for _s, t in answers):.1f} s, {sum(s == 202 for s, _t in answers)} "
          "answered 202 with a job")
    before = {d["name"]: d for d in ok(api.get("/datastores"))}
    assert len(before) == BULK + 2 and all(d["serving"] for d in before.values())
    state["before_reboot"] = before


@pytest.mark.after_reboot
def test_5a_the_reboot_with_many_datastores_restores_everything(
        api: httpx.Client, nfs: Nfs, iscsi: Iscsi, shared_reboot: float) -> None:
    # the shared reboot (tests/e2e/conftest.py) waited for health 200: start-up has
    # restored everything
    print(f"[e2e] reboot with {BULK + 2}+ datastores: healthy after {shared_reboot:.0f} s")
    assert_served_as_before(api, nfs, iscsi, state["before_reboot"])
    h = ok(api.get("/system/health"))
    assert h["status"] == "ok" and h["started_at"] > 0, h
    # health answers from the watcher's last check: fast whatever the number of datastores
    took = []
    for _ in range(5):
        t1 = time.monotonic()
        ok(api.get("/system/health"))
        took.append(time.monotonic() - t1)
    assert max(took) < 1.0, took


def assert_served_as_before(api: httpx.Client, nfs: Nfs, iscsi: Iscsi,
                            before: dict[str, Any]) -> None:
    """Every datastore, export id, WWN, ACL and byte is back, and nothing has drifted.
    (Other modules' datastores may exist meanwhile: reboots are shared.)"""
    after = {d["name"]: d for d in ok(api.get("/datastores"))}
    assert set(after) >= {"nfs01", "lun01", *bulk_names()}
    for name, d in before.items():
        assert (after[name].get("nfs") or {}).get("export_id") == \
            (d.get("nfs") or {}).get("export_id"), name
        assert (after[name].get("iscsi") or {}).get("wwn") == \
            (d.get("iscsi") or {}).get("wwn"), name
    assert after["nfs01"]["nfs"]["export_id"] == before["nfs01"]["nfs"]["export_id"]
    assert after["lun01"]["iscsi"]["wwn"] == before["lun01"]["iscsi"]["wwn"] == state["wwn"]
    unserved = {name: d for name, d in after.items() if not d["serving"]}
    assert not unserved, (unserved, ok(api.get("/system/drift")))
    assert sha(nfs.get(state["nfs_path"], "big.bin")) == state["big_sha"]
    assert sha(iscsi.read(state["iqn"], INITIATOR, 8 * MiB, 4 * MiB) or b"") == \
        state["block_sha"]
    assert iscsi.inq(state["iqn"], INTRUDER, check=False).returncode != 0  # ACL is back too
    assert ok(api.get("/system/drift")) == {"in_sync": True, "items": []}


@pytest.mark.after_power_cycle(order=1)
def test_5b_a_new_system_disk_serves_the_pool_again(
        appliance: E2EAppliance, api: httpx.Client, nfs: Nfs, iscsi: Iscsi) -> None:
    """An update (docs/install.md): a fresh system disk on the same machine and data disks
    has the same ZFS hostid (from the machine UUID), imports the pool without force at
    boot and adopts its datastores from their zds:* properties. (The shared power cycle
    also failed a mirror disk: test_degraded_e2e.py replaced it before this runs.)"""
    assert appliance.api_healthy, f"no healthy API after the swap; see {appliance.serial_log}"
    hostid = appliance.check("od -An -tx4 /etc/hostid").strip()
    assert hostid == hostid_for(appliance.vm.machine_uuid())
    assert_served_as_before(api, nfs, iscsi, state["before_reboot"])


def test_6_bad_input_over_the_real_api(api: httpx.Client, iscsi: Iscsi) -> None:
    before = ok(api.get("/datastores"))
    for name in ["a;reboot", "$(id)", "UPPER", "x" * 80, "-rf"]:
        r = api.put(f"/datastores/{name}", json={"protocol": "nfs3", "size": "1G"})
        assert r.status_code == 422, (name, r.text)
    r = api.put("/datastores/huge", json={"protocol": "nfs3", "size": "64T"})
    assert r.status_code == 409 and r.json()["error"]["code"] == "insufficient_space"
    r = api.put("/datastores/bad", json={"protocol": "iscsi", "size": "1G",
                                         "iscsi": {"initiators": ["iqn.2026-11.test:host1"]}})
    assert r.status_code == 422
    r = api.put("/datastores/bad", json={"protocol": "nfs3", "size": "1G",
                                         "nfs": {"clients": [{"match": "a;b"}]}})
    assert r.status_code == 422
    session = iscsi.hold_session(state["iqn"], INITIATOR)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if ok(api.get("/datastores/lun01"))["connected_clients"]:
                break
            time.sleep(1)
        r = api.delete("/datastores/lun01")
        assert r.status_code == 409 and INITIATOR in r.json()["error"]["message"], r.text
    finally:
        session.terminate()
        session.wait(timeout=30)
    assert ok(api.get("/datastores")) and {d["name"] for d in ok(api.get("/datastores"))} == \
        {d["name"] for d in before}


def test_7_delete_everything_leaves_nothing(appliance: E2EAppliance, api: httpx.Client,
                                            nfs: Nfs) -> None:
    # the session's other modules may still have datastores of their own (reboots are
    # shared, so this runs late): everything of this module's must be gone
    ours = ("nfs01", "lun01", *bulk_names())
    others = {d["name"] for d in ok(api.get("/datastores"))} - set(ours)
    jobs = [ok(api.delete(f"/datastores/{name}", params={"force": True}), 202)
            for name in ours]
    for job in jobs:
        job = ok(api.get(f"/jobs/{job['id']}", params={"wait": 300}))
        assert job["state"] == "succeeded", job
    assert {d["name"] for d in ok(api.get("/datastores"))} == others
    assert ok(api.get("/system/drift")) == {"in_sync": True, "items": []}
    zfs = appliance.check("zfs list -H -o name -r tank/datastores").split()
    assert zfs[0] == "tank/datastores" and not {n.split("/")[-1] for n in zfs} & set(ours), zfs
    targets = appliance.check("ls /sys/kernel/config/target/iscsi 2>/dev/null || true")
    assert not [t for t in targets.split() if t.rsplit(".", 1)[-1] in ours], targets
    assert nfs.ls(state["nfs_path"], check=False).returncode != 0


def test_8_adapters_hold_their_contract_on_the_real_stack(appliance: E2EAppliance) -> None:
    out = appliance.check("/opt/zds/venv/bin/python -m appliance.host.contract --zfs --lio",
                          timeout=900)
    assert "FAIL" not in out, out


def _nfs_server_is(server: str) -> Any:
    def want(h: dict[str, Any]) -> bool:
        comp = h["components"]["ganesha"]  # the NFS server's entry, whichever it is
        return bool(comp["ok"]) and (("knfsd" in comp["detail"]) == (server == "knfsd")) \
            and h["started_at"] > 0
    return want


def test_9_knfsd_when_chosen_serves_the_same_datastores_and_holds_the_contract(
        appliance: E2EAppliance, api: httpx.Client, nfs: Nfs) -> None:
    """The opt-in kernel NFS server (docs/architecture.md): ``zds nfs-server knfsd``
    stops and masks ganesha, starts knfsd and restarts the API, whose start-up serves
    the NFS datastore made before the switch (data written through ganesha reads back
    through knfsd); a datastore made afterwards is served too; the adapter holds the
    export contract on the real knfsd; switching back to ganesha serves both again."""
    body = {"protocol": "nfs3", "size": "1G",
            "nfs": {"clients": [{"match": HOST_AS_SEEN, "access": "rw"}]}}
    first = ok(api.put("/datastores/kn01", json=body), 201)["nfs"]["path"]
    data = os.urandom(MiB)
    nfs.put(first, "via-ganesha.bin", data)
    try:
        out = appliance.check("zds nfs-server knfsd", timeout=600)
        assert "started nfs-server.service" in out and "restarted zds-api" in out, out
        wait_for_health(api, _nfs_server_is("knfsd"))
        assert appliance.exec("systemctl is-active nfs-ganesha.service")[1].strip() != "active"
        assert appliance.exec("systemctl is-enabled nfs-ganesha.service")[1].strip() == "masked"
        assert nfs.get(first, "via-ganesha.bin") == data
        second = ok(api.put("/datastores/kn02", json=body), 201)
        assert second["serving"], second
        nfs.put(second["nfs"]["path"], "via-knfsd.bin", data)
        assert nfs.get(second["nfs"]["path"], "via-knfsd.bin") == data
        exports = appliance.check("cat /var/lib/nfs/etab")
        assert f"{first}\t" in exports and "fsid=" in exports, exports
        assert ok(api.get("/system/drift")) == {"in_sync": True, "items": []}
        contract = appliance.check("/opt/zds/venv/bin/python -m appliance.host.contract "
                                   "--knfsd", timeout=600)
        assert "ok   knfsd.contract" in contract, contract
    finally:
        back = appliance.check("zds nfs-server ganesha", timeout=600)
    assert "started nfs-ganesha.service" in back, back
    wait_for_health(api, _nfs_server_is("ganesha"))
    assert appliance.exec("systemctl is-enabled nfs-server.service")[1].strip() == "masked"
    assert nfs.get(second["nfs"]["path"], "via-knfsd.bin") == data
    assert nfs.get(first, "via-ganesha.bin") == data
    for name in ("kn01", "kn02"):  # force: the host's client was active a moment ago
        job = ok(api.delete(f"/datastores/{name}", params={"force": True}), 202)
        job = ok(api.get(f"/jobs/{job['id']}", params={"wait": 300}))
        assert job["state"] == "succeeded", job
