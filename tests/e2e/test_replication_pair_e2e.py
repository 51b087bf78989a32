"""Replication between two appliances, the way users run it: a source and a target
appliance, each its own QEMU guest, joined by a private Ethernet link (a QEMU socket
network on 127.0.0.1; nothing else can reach it). Through the REST API of each: the key
exchange with the target's host key pinned up front, full and incremental sends of an NFS
and an iSCSI datastore over the link with the data checked on the target, a stream cut
mid-way and resumed, then the source powered off and both replicas promoted on the target
with the source's identity (the NFS path and the LUN's NAA id), read from the host. The
ssh+tcp transport runs over the same link, with the target's firewall first dropping and
then counting its data ports.

Boots two appliances of its own (not the session's), started together: about 9.5 min
under TCG, in the default run (ZDS_E2E_PAIR=0 skips it for a quicker local run)."""

from __future__ import annotations

import hashlib
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from images.vm import SocketLink
from tests.e2e.clients import Iscsi, Nfs
from tests.e2e.conftest import Boot, E2EAppliance, booted, built_image
from tests.e2e.replicas import replica_sha, run, sha_in_guest, succeeded
from tests.e2e.rest import api_client, ok

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.environ.get("ZDS_E2E_PAIR") == "0",
                       reason="skipped on request (ZDS_E2E_PAIR=0)"),
]

SOURCE_MAC, TARGET_MAC = "52:54:00:5a:00:01", "52:54:00:5a:00:02"
SOURCE_IP, TARGET_IP = "10.99.0.1", "10.99.0.2"
INITIATOR = "iqn.2026-11.org.example:host1"
HOST_AS_SEEN = "10.0.2.2"
REPLICAS = "tank/replicas/source"
MiB = 1 << 20
state: dict[str, Any] = {}


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[E2EAppliance, E2EAppliance]]:
    """(source, target), booted together; the target listens on the link."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    image = built_image()
    with booted(image,
                Boot("target", links=(SocketLink("listen", port, TARGET_MAC),)),
                Boot("source", links=(SocketLink("connect", port, SOURCE_MAC),))) as (t, s):
        for app in (s, t):
            assert app.api_healthy, f"the API never became healthy; see {app.serial_log}"
        print(f"\n[e2e] pair up: source {s.timings}, target {t.timings}")
        yield s, t


@pytest.fixture(scope="module")
def source(pair: tuple[E2EAppliance, E2EAppliance]) -> E2EAppliance:
    return pair[0]


@pytest.fixture(scope="module")
def target(pair: tuple[E2EAppliance, E2EAppliance]) -> E2EAppliance:
    return pair[1]


@pytest.fixture(scope="module")
def src_api(source: E2EAppliance) -> Iterator[httpx.Client]:
    with api_client(source.api_url, source.admin_token) as c:
        yield c


@pytest.fixture(scope="module")
def tgt_api(target: E2EAppliance) -> Iterator[httpx.Client]:
    with api_client(target.api_url, target.admin_token) as c:
        yield c


def link_address(app: E2EAppliance, mac: str, address: str) -> None:
    """A static address on the link NIC, as an admin would set it (a networkd file with a
    lower number than the image's DHCP-everywhere 80-zds-dhcp.network)."""
    app.check(f"""cat > /etc/systemd/network/10-zds-link.network <<'EOF'
[Match]
MACAddress={mac}

[Network]
Address={address}/24
LinkLocalAddressing=no
EOF
networkctl reload
networkctl reconfigure "$(ip -o link | grep -i 'link/ether {mac} ' | cut -d: -f2 | tr -d ' ')"
for i in $(seq 60); do ip -4 -o addr show | grep -q ' {address}/' && exit 0; sleep 1; done
ip addr; exit 1""", timeout=90)


def test_1_link_and_key_exchange(source: E2EAppliance, target: E2EAppliance,
                                 src_api: httpx.Client, tgt_api: httpx.Client) -> None:
    link_address(target, TARGET_MAC, TARGET_IP)
    link_address(source, SOURCE_MAC, SOURCE_IP)
    # the source reaches the target's sshd over the link, and only there
    source.check(f"for i in $(seq 60); do timeout 5 bash -c '</dev/tcp/{TARGET_IP}/22' "
                 "&& exit 0; sleep 1; done; exit 1", timeout=120)
    src_id = ok(src_api.get("/replication/identity"))
    tgt_id = ok(tgt_api.get("/replication/identity"))
    assert src_id["public_key"] != tgt_id["public_key"]  # two appliances, two keys
    ok(tgt_api.put("/replication/authorized-keys/source", json={
        "public_key": src_id["public_key"], "dataset_prefix": REPLICAS,
        "sources": [SOURCE_IP]}), 201)
    state["host_key"] = next(k for k in tgt_id["host_keys"] if k.startswith("ssh-ed25519"))


def test_2_nfs_full_then_incremental_over_the_link(
        source: E2EAppliance, target: E2EAppliance, src_api: httpx.Client) -> None:
    ok(src_api.put("/datastores/pnfs", json={
        "protocol": "nfs3", "size": "2G",
        "nfs": {"clients": [{"match": HOST_AS_SEEN, "access": "rw"}]}}), 201)
    source.check("dd if=/dev/urandom of=/tank/datastores/pnfs/disk1.img bs=1M count=48 "
                 "status=none && sync", timeout=300)
    # the target's host key pinned up front (not trusted on first contact)
    ok(src_api.put("/replications/p-nfs", json={
        "datastore": "pnfs", "target": {"host": TARGET_IP, "dataset": f"{REPLICAS}/pnfs",
                                        "host_key": state["host_key"]}}), 201)
    check = ok(src_api.post("/replications/p-nfs/check"))
    assert not check["exists"] and check["host_key"] == state["host_key"], check
    t0 = time.monotonic()
    full = succeeded(run(src_api, "p-nfs"))
    t_full = time.monotonic() - t0
    assert full["steps"][0].startswith("full") and full["bytes"] >= 48 * MiB, full
    want = sha_in_guest(source, "/tank/datastores/pnfs/disk1.img")
    assert replica_sha(target, f"{REPLICAS}/pnfs", file="disk1.img") == want
    # about 1% changes
    source.check("dd if=/dev/urandom of=/tank/datastores/pnfs/disk1.img bs=64K count=8 "
                 "seek=100 conv=notrunc status=none && sync")
    t0 = time.monotonic()
    incr = succeeded(run(src_api, "p-nfs"))
    t_incr = time.monotonic() - t0
    assert incr["steps"][0].startswith("incremental") and incr["bytes"] < 2 * MiB, incr
    want = sha_in_guest(source, "/tank/datastores/pnfs/disk1.img")
    assert replica_sha(target, f"{REPLICAS}/pnfs", file="disk1.img") == want
    # the target's sshd saw the source's link address: the stream went over the link
    assert SOURCE_IP in target.check("journalctl -u ssh --no-pager -o cat | "
                                     "grep 'Accepted publickey' | tail -3")
    state["nfs_sha"] = want
    print(f"\n[e2e] pair nfs: full {full['bytes']} B in {t_full:.1f} s "
          f"({full['bytes'] / MiB / t_full:.1f} MiB/s through the API), incremental "
          f"{incr['bytes']} B in {t_incr:.1f} s")


def test_3_iscsi_full_then_incremental_over_the_link(
        source: E2EAppliance, target: E2EAppliance, src_api: httpx.Client) -> None:
    lun = ok(src_api.put("/datastores/plun", json={
        "protocol": "iscsi", "size": "1G", "iscsi": {"initiators": [INITIATOR]}}), 201)
    dev = "/dev/zvol/tank/datastores/plun"
    source.check(f"dd if=/dev/urandom of={dev} bs=1M count=16 oflag=direct status=none")
    ok(src_api.put("/replications/p-lun", json={
        "datastore": "plun", "target": {"host": TARGET_IP, "dataset": f"{REPLICAS}/plun",
                                        "host_key": state["host_key"]}}), 201)
    succeeded(run(src_api, "p-lun"))
    assert replica_sha(target, f"{REPLICAS}/plun", nbytes=16 * MiB) == sha_in_guest(
        source, dev, 16 * MiB)
    source.check(f"dd if=/dev/urandom of={dev} bs=1M count=1 seek=4 oflag=direct "
                 "conv=notrunc status=none")
    incr = succeeded(run(src_api, "p-lun"))
    assert incr["steps"][0].startswith("incremental") and incr["bytes"] < 3 * MiB, incr
    want = sha_in_guest(source, dev, 16 * MiB)
    assert replica_sha(target, f"{REPLICAS}/plun", nbytes=16 * MiB) == want
    state.update(lun_sha=want, wwn=lun["iscsi"]["wwn"], iqn=lun["iscsi"]["iqn"])


def test_4_stream_cut_on_the_link_resumes(source: E2EAppliance, target: E2EAppliance,
                                          src_api: httpx.Client,
                                          tgt_api: httpx.Client) -> None:
    source.check("dd if=/dev/urandom of=/tank/datastores/pnfs/disk2.img bs=1M count=40 "
                 "status=none && sync", timeout=300)
    body = {"datastore": "pnfs", "bandwidth_limit": "3M",
            "target": {"host": TARGET_IP, "dataset": f"{REPLICAS}/pnfs",
                       "host_key": state["host_key"]}}
    ok(src_api.put("/replications/p-nfs", json=body))
    job = ok(src_api.post("/replications/p-nfs/run"), 202)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        j = ok(src_api.get(f"/jobs/{job['id']}"))
        sent = int(j["message"].split(": ")[-1].split()[0]) if "bytes sent" in j["message"] \
            else 0
        if sent >= 16 * MiB or j["state"] != "running":
            break
        time.sleep(1)
    assert j["state"] == "running", j
    # the target end dies: its sshd session that feeds zfs receive, killed by PID
    pid = target.check("pgrep -o -f '^sshd: root@notty'").strip()
    target.check(f"kill -9 {pid}")
    j = ok(src_api.get(f"/jobs/{job['id']}", params={"wait": 180}))
    assert j["state"] == "failed" and j["error"]["code"] == "transfer_interrupted", j
    incoming = {r["name"]: r for r in ok(tgt_api.get("/replications"))}
    assert incoming["p-nfs"]["incoming"]["resume_pending"], incoming

    ok(src_api.put("/replications/p-nfs", json={**body, "bandwidth_limit": None}))
    result = succeeded(run(src_api, "p-nfs"))
    assert result["resumed"] and result["steps"][0].startswith("resume"), result
    resumed = int(result["steps"][0].rsplit("(", 1)[1].split()[0])
    assert resumed < 40 * MiB, result  # the rest, not the whole stream again
    for name in ("disk1.img", "disk2.img"):
        assert replica_sha(target, f"{REPLICAS}/pnfs", file=name) == sha_in_guest(
            source, f"/tank/datastores/pnfs/{name}")
    state["nfs_sha"] = sha_in_guest(source, "/tank/datastores/pnfs/disk1.img")
    print(f"\n[e2e] pair: resumed the last {resumed} B of the stream")


def nft_rule(app: E2EAppliance, rule: str, tag: str) -> None:
    """A rule at the top of the target's firewall input chain, named by a comment."""
    app.check(f"nft insert rule inet zds input {rule} comment '\"{tag}\"'")


def nft_drop_rule(app: E2EAppliance, tag: str) -> None:
    app.check(f"nft delete rule inet zds input handle $(nft -a list chain inet zds input | "
              f"grep '{tag}' | sed 's/.*# handle //')")


def test_5_ssh_tcp_sends_the_stream_outside_ssh(source: E2EAppliance, target: E2EAppliance,
                                               src_api: httpx.Client) -> None:
    """The ssh+tcp transport over the link: refused cleanly while a firewall drops its
    data ports, then the stream crosses them (counted by the target's firewall), side by
    side with a run of the same size through SSH."""
    body = {"datastore": "pnfs", "transport": "ssh+tcp",
            "target": {"host": TARGET_IP, "dataset": f"{REPLICAS}/pnfs",
                       "host_key": state["host_key"]}}
    ok(src_api.put("/replications/p-nfs", json=body))
    before = ok(src_api.get("/replications/p-nfs"))["outgoing"]["status"]["last_snapshot"]
    nft_rule(target, "tcp dport 29100-29199 drop", "e2e-block")
    try:
        job = run(src_api, "p-nfs")
    finally:
        nft_drop_rule(target, "e2e-block")
    assert job["state"] == "failed" and job["error"]["code"] == "target_unreachable", job
    assert "29100-29199" in job["error"]["message"], job["error"]
    assert ok(src_api.get("/replications/p-nfs"))["outgoing"]["status"][
        "last_snapshot"] == before

    rates = {}
    nft_rule(target, "tcp dport 29100-29199 counter", "e2e-count")
    for n, transport in enumerate(("ssh", "ssh+tcp"), start=3):
        source.check(f"dd if=/dev/urandom of=/tank/datastores/pnfs/disk{n}.img bs=1M "
                     "count=32 status=none && sync", timeout=300)
        ok(src_api.put("/replications/p-nfs", json={**body, "transport": transport}))
        result = succeeded(run(src_api, "p-nfs"))
        assert result["steps"][0].startswith("incremental") and result["bytes"] > 32 * MiB
        rates[transport] = result["bytes"] / MiB / result["transfer_seconds"]
        counted = target.check("nft list chain inet zds input | grep e2e-count")
        crossed = int(counted.split(" bytes ")[1].split()[0])
        if transport == "ssh":
            assert crossed < MiB, counted  # nothing went the data ports' way
        else:
            assert crossed >= result["bytes"], counted  # the whole stream did
        assert replica_sha(target, f"{REPLICAS}/pnfs", file=f"disk{n}.img") == sha_in_guest(
            source, f"/tank/datastores/pnfs/disk{n}.img")
    nft_drop_rule(target, "e2e-count")
    state["nfs_sha"] = sha_in_guest(source, "/tank/datastores/pnfs/disk1.img")
    print(f"\n[e2e] pair 32 MiB incremental stream: ssh {rates['ssh']:.1f} MiB/s, "
          f"ssh+tcp {rates['ssh+tcp']:.1f} MiB/s")


def test_6_failover_promotes_with_the_sources_identity(
        source: E2EAppliance, target: E2EAppliance, tgt_api: httpx.Client,
        tmp_path: Path) -> None:
    # the source is gone: the target needs nothing from it
    assert source.vm.stop(timeout=120)
    # keep_access: the clients (this host) as the source served them
    out = ok(tgt_api.post("/replications/p-nfs/promote", json={"keep_access": True}), 201)
    ds = out["datastore"]
    # another appliance: the export keeps the source's path, so hypervisors remount it as is
    assert ds["serving"] and ds["name"] == "pnfs", ds
    assert ds["nfs"]["path"] == "/tank/datastores/pnfs", ds
    assert any("keeps the source's path" in n for n in out["notes"]), out["notes"]
    nfs = Nfs(target.nfs_port, target.mountd_port, tmp_path)
    got = nfs.get(ds["nfs"]["path"], "disk1.img")
    assert hashlib.sha256(got).hexdigest() == state["nfs_sha"]

    # the LUN keeps the source's NAA id and IQN: ESXi mounts the VMFS without resignature
    out = ok(tgt_api.post("/replications/p-lun/promote", json={"identity": "keep",
                                                                "keep_access": True}), 201)
    lun = out["datastore"]
    assert lun["serving"] and lun["iscsi"]["wwn"] == state["wwn"], lun
    assert lun["iscsi"]["iqn"] == state["iqn"], lun
    data = Iscsi(target.iscsi_port, tmp_path).read(lun["iscsi"]["iqn"], INITIATOR, 0,
                                                   16 * MiB)
    assert data is not None and hashlib.sha256(data).hexdigest() == state["lun_sha"]
    assert ok(tgt_api.get("/system/drift"))["in_sync"]
