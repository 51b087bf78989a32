"""NVMe/TCP datastores on the booted appliance: the kernel target through the REST API,
reached with nvme-cli inside the appliance on 127.0.0.1 (discover, connect, data written
and read back by checksum, disconnect), a host NQN that is not allowed refused, the
identity (NQN, serial, NGUID, UUID) the same after an API restart, after a reconcile that
makes the subsystem again and after the session's reboot, drift when a namespace or a
host link is removed behind ZDS's back (and the repair), a snapshot clone serving the
snapshot's data, and the adapter's contract on the real configfs. The tests run in order.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import E2EAppliance
from tests.e2e.rest import api_client, ok, wait_for_health

pytestmark = pytest.mark.e2e

HOST = "nqn.2026-11.org.example:e2e-host"
INTRUDER = "nqn.2026-11.org.example:e2e-intruder"
NVMET = "/sys/kernel/config/nvmet"
PORT = 4420
MiB = 1 << 20

state: dict[str, Any] = {}


@pytest.fixture(scope="module")
def api(appliance: E2EAppliance) -> Iterator[httpx.Client]:
    assert appliance.api_healthy, f"the API never became healthy; see {appliance.serial_log}"
    with api_client(appliance.api_url, appliance.admin_token, timeout=600) as c:
        yield c


def identity(appliance: E2EAppliance, nqn: str) -> dict[str, str]:
    """What the kernel serves: the subsystem's serial, the namespace's UUID and NGUID."""
    base = f"{NVMET}/subsystems/{nqn}"
    out = appliance.check(f"cat {base}/attr_serial {base}/namespaces/1/device_uuid "
                          f"{base}/namespaces/1/device_nguid {base}/namespaces/1/enable")
    serial, ns_uuid, nguid, enable = out.split()
    return {"nqn": nqn, "serial": serial, "uuid": ns_uuid, "nguid": nguid.replace("-", ""),
            "enable": enable}


def connect(appliance: E2EAppliance, nqn: str, ns_uuid: str, nguid: str,
            host: str = HOST) -> str:
    """nvme connect as ``host``; the namespace's device as udev names it (by its UUID:
    Linux's wwid), checked to carry the NGUID ZDS gave it."""
    appliance.exec(f"nvme disconnect -n {nqn}", timeout=120)  # what a failed test left
    appliance.check(f"nvme connect -t tcp -a 127.0.0.1 -s {PORT} -n {nqn} -q {host}",
                    timeout=120)
    link = f"/dev/disk/by-id/nvme-uuid.{ns_uuid}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        rc, out = appliance.exec(f"udevadm settle; readlink -f {link}", timeout=60)
        if rc == 0 and out.strip().startswith("/dev/nvme"):
            device = out.strip()
            name = device.rsplit("/", 1)[-1]
            shown = appliance.check(f"cat /sys/block/{name}/wwid /sys/block/{name}/nguid")
            assert shown.split() == [f"uuid.{ns_uuid}", str(uuid.UUID(hex=nguid))], shown
            return device
        time.sleep(1)
    out = appliance.exec("ls -l /dev/disk/by-id/ | grep nvme; "
                         "grep . /sys/block/nvme*/wwid")[1]
    raise AssertionError(f"{link} did not appear after connecting to {nqn}: {out}")


def disconnect(appliance: E2EAppliance, nqn: str) -> None:
    appliance.check(f"nvme disconnect -n {nqn}", timeout=120)


def write_pattern(appliance: E2EAppliance, device: str, name: str) -> str:
    """16 MiB of random data at the start of ``device``; returns its sha256."""
    appliance.check(f"head -c {16 * MiB} /dev/urandom > /var/tmp/{name} && "
                    f"dd if=/var/tmp/{name} of={device} bs=1M oflag=direct conv=fsync "
                    "status=none")
    return appliance.check(f"sha256sum < /var/tmp/{name}").split()[0]


def read_sum(appliance: E2EAppliance, device: str) -> str:
    return appliance.check(f"dd if={device} bs=1M count=16 iflag=direct status=none | "
                           "sha256sum").split()[0]


def reconcile(api: httpx.Client) -> None:
    ok(api.post("/system/reconcile"))


def break_and_see(appliance: E2EAppliance, api: httpx.Client, cmd: str,
                  subject: str) -> list[dict[str, Any]]:
    """Runs ``cmd`` (a change behind ZDS's back) and returns drift's items about
    ``subject``; when the watcher's reconcile (every 60 s) repaired it first, again."""
    for _ in range(3):
        appliance.exec(cmd)
        items = [i for i in ok(api.get("/system/drift"))["items"] if i["subject"] == subject]
        if items:
            return items
        time.sleep(2)
    raise AssertionError(f"drift never named {subject} after: {cmd}")


def test_1_create_and_discover(appliance: E2EAppliance, api: httpx.Client) -> None:
    d = ok(api.put("/datastores/nvme01", json={
        "protocol": "nvme-tcp", "size": "256M", "nvme": {"hosts": [HOST]}}), 201)
    nvme = d["nvme"]
    assert d["serving"] and nvme["hosts"] == [HOST], d
    state.update(nqn=nvme["nqn"], nguid=nvme["nguid"], uuid=nvme["uuid"])
    live = identity(appliance, nvme["nqn"])
    # what ZDS recorded is what the kernel serves: never the kernel's random values
    assert live == {"nqn": nvme["nqn"], "serial": nvme["serial"], "uuid": nvme["uuid"],
                    "nguid": nvme["nguid"], "enable": "1"}, (live, nvme)
    state["identity"] = live
    assert appliance.check(f"cat {NVMET}/ports/1/addr_trsvcid "
                           f"{NVMET}/ports/1/ana_groups/1/ana_state").split() == [
        str(PORT), "optimized"]
    assert appliance.check(f"cat {NVMET}/subsystems/{nvme['nqn']}/attr_allow_any_host"
                           ).strip() == "0"
    appliance.check("modprobe nvme-tcp")
    seen = appliance.check(f"nvme discover -t tcp -a 127.0.0.1 -s {PORT} -q {HOST}",
                           timeout=120)
    assert nvme["nqn"] in seen, seen
    # the discovery log shows a host only what it may connect to
    hidden = appliance.check(f"nvme discover -t tcp -a 127.0.0.1 -s {PORT} -q {INTRUDER}",
                             timeout=120)
    assert nvme["nqn"] not in hidden, hidden
    attach = ok(api.get("/datastores/nvme01/attach", params={"server": "127.0.0.1"}))
    assert any(f"nvme connect -t tcp -a 127.0.0.1 -s {PORT} -n {nvme['nqn']}" in c
               for c in attach["linux"]), attach
    assert "not supported" in attach["esxi"][0]


def test_2_data_round_trip_grow_and_delete_refused(appliance: E2EAppliance,
                                                   api: httpx.Client) -> None:
    device = connect(appliance, state["nqn"], state["uuid"], state["nguid"])
    try:
        connected_round_trip(appliance, api, device)
    finally:
        disconnect(appliance, state["nqn"])
    assert ok(api.get("/datastores/nvme01"))["connected_clients"] == []


def connected_round_trip(appliance: E2EAppliance, api: httpx.Client, device: str) -> None:
    sn = appliance.check(f"nvme id-ctrl {device} | sed -n 's/^sn *: *//p'").strip()
    assert sn == state["identity"]["serial"], sn
    state["sum_a"] = write_pattern(appliance, device, "pattern-a")
    appliance.check("sync; echo 3 > /proc/sys/vm/drop_caches")
    assert read_sum(appliance, device) == state["sum_a"]
    view = ok(api.get("/datastores/nvme01"))
    assert view["connected_clients"] == [HOST], view
    r = api.delete("/datastores/nvme01")
    assert r.status_code == 409 and "hosts connected" in r.json()["error"]["message"], r.text
    # grown while connected: the host sees the new size (the target's AEN)
    ok(api.put("/datastores/nvme01", json={"protocol": "nvme-tcp", "size": "512M",
                                           "nvme": {"hosts": [HOST]}}))
    deadline = time.monotonic() + 60
    while (size := int(appliance.check(f"blockdev --getsize64 {device}"))) != 512 * MiB:
        assert time.monotonic() < deadline, f"the host still sees {size} bytes"
        time.sleep(2)


def test_3_a_host_not_allowed_cannot_connect(appliance: E2EAppliance) -> None:
    rc, out = appliance.exec(f"nvme connect -t tcp -a 127.0.0.1 -s {PORT} "
                             f"-n {state['nqn']} -q {INTRUDER}", timeout=120)
    assert rc != 0, out
    rc, _ = appliance.exec(f"test -e /dev/disk/by-id/nvme-uuid.{state['uuid']}")
    assert rc != 0, "a namespace appeared for a refused host"


def test_4_identity_survives_an_api_restart_and_a_remade_subsystem(
        appliance: E2EAppliance, api: httpx.Client) -> None:
    appliance.check("systemctl restart zds-api", timeout=180)
    wait_for_health(api, lambda h: h["started_at"] > 0 and h["components"]["nvmet"]["ok"])
    assert identity(appliance, state["nqn"]) == state["identity"]
    # the whole subsystem gone behind ZDS's back; the reconcile makes it again, the same
    nqn = state["nqn"]
    base = f"{NVMET}/subsystems/{nqn}"
    items = break_and_see(appliance, api, (
        f"rm {NVMET}/ports/1/subsystems/{nqn}; echo 0 > {base}/namespaces/1/enable; "
        f"rmdir {base}/namespaces/1; rm {base}/allowed_hosts/{HOST}; rmdir {base}"), nqn)
    assert items[0]["kind"] == "apply_subsystem", items
    reconcile(api)
    assert identity(appliance, nqn) == state["identity"]
    assert ok(api.get("/system/drift"))["in_sync"]


def test_5_drift_finds_a_removed_namespace_and_host_link(appliance: E2EAppliance,
                                                         api: httpx.Client) -> None:
    nqn = state["nqn"]
    base = f"{NVMET}/subsystems/{nqn}"
    (item,) = break_and_see(appliance, api, (
        f"echo 0 > {base}/namespaces/1/enable; rmdir {base}/namespaces/1; "
        f"rm {base}/allowed_hosts/{HOST}"), nqn)
    assert item["kind"] == "apply_subsystem", item
    assert "namespace 1 is missing" in item["reason"] and HOST in item["reason"], item
    reconcile(api)
    assert ok(api.get("/system/drift"))["in_sync"]
    assert identity(appliance, nqn) == state["identity"]
    assert appliance.check(f"ls {base}/allowed_hosts").split() == [HOST]


def test_6_a_snapshot_clone_serves_the_snapshots_data(appliance: E2EAppliance,
                                                      api: httpx.Client) -> None:
    ok(api.post("/datastores/nvme01/snapshots", json={"name": "s1"}), 201)
    device = connect(appliance, state["nqn"], state["uuid"], state["nguid"])
    try:
        state["sum_b"] = write_pattern(appliance, device, "pattern-b")
    finally:
        disconnect(appliance, state["nqn"])
    clone = ok(api.post("/datastores/nvme01/snapshots/s1/clones",
                        json={"name": "nvme01-clone"}), 201)
    c = clone["nvme"]
    assert clone["protocol"] == "nvme-tcp" and c["hosts"] == [HOST] and clone["serving"]
    assert c["nqn"] != state["nqn"] and c["nguid"] != state["nguid"]
    device = connect(appliance, c["nqn"], c["uuid"], c["nguid"])
    try:
        assert read_sum(appliance, device) == state["sum_a"], "the clone is not the snapshot"
    finally:
        disconnect(appliance, c["nqn"])
    job = ok(api.delete("/datastores/nvme01-clone", params={"wait": 120}), 202)
    assert job["state"] == "succeeded", job


def test_7_the_adapter_holds_its_contract_on_real_configfs(appliance: E2EAppliance) -> None:
    out = appliance.check("/opt/zds/venv/bin/python -m appliance.host.contract --nvmet",
                          timeout=600)
    assert "FAIL" not in out and "nvmet.apply_read_back" in out, out


@pytest.mark.after_reboot
def test_8_after_the_reboot_the_same_device_with_its_data(appliance: E2EAppliance,
                                                          api: httpx.Client) -> None:
    wait_for_health(api, lambda h: h["started_at"] > 0 and h["components"]["nvmet"]["ok"])
    assert identity(appliance, state["nqn"]) == state["identity"]
    appliance.check("modprobe nvme-tcp")
    device = connect(appliance, state["nqn"], state["uuid"], state["nguid"])
    try:
        assert read_sum(appliance, device) == state["sum_b"]
    finally:
        disconnect(appliance, state["nqn"])


def test_9_cleanup(appliance: E2EAppliance, api: httpx.Client) -> None:
    job = ok(api.delete("/datastores/nvme01", params={"wait": 120}), 202)
    assert job["state"] == "succeeded", job
    subsystems = appliance.check(f"ls {NVMET}/subsystems").split()
    assert state["nqn"] not in subsystems, subsystems
