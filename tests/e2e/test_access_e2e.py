"""Every access path, with real clients on the booted appliance: CHAP one-way and mutual,
drift from changes made behind the engine's back, NFSv4.1 with the kernel client and
libnfs, read-only and unlisted NFS clients, clones served with the snapshot's data,
growing seen by clients, access changes that keep a session, UNMAP and WRITE SAME that
free space in ZFS, SCSI-3 persistent reservations from two initiators (and APTPL state
restored with the LUN), SCSI-2 RESERVE/RELEASE, and a job interrupted by an API restart.

The kernel initiator inside the appliance (open-iscsi, on 127.0.0.1) plays the second
host where libiscsi on this machine cannot (mutual CHAP, sg_persist); each test uses an
iface of its own with its own initiator name.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.clients import Iscsi, Nfs
from tests.e2e.conftest import E2EAppliance
from tests.e2e.rest import api_client, ok

pytestmark = pytest.mark.e2e

HOST = "iqn.2026-11.org.example:host1"  # libiscsi/qemu on this machine
HOST2 = "iqn.2026-11.org.example:host2"
HOST_AS_SEEN = "10.0.2.2"
MiB = 1 << 20
CONFIGFS = "/sys/kernel/config/target/iscsi"


@pytest.fixture(scope="module")
def api(appliance: E2EAppliance) -> Iterator[httpx.Client]:
    with api_client(appliance.api_url, appliance.admin_token, timeout=900) as c:
        yield c


@pytest.fixture(scope="module")
def nfs(appliance: E2EAppliance, tmp_path_factory: pytest.TempPathFactory) -> Nfs:
    return Nfs(appliance.nfs_port, appliance.mountd_port, tmp_path_factory.mktemp("nfs"))


@pytest.fixture(scope="module")
def iscsi(appliance: E2EAppliance, tmp_path_factory: pytest.TempPathFactory) -> Iscsi:
    return Iscsi(appliance.iscsi_port, tmp_path_factory.mktemp("iscsi"))


def delete(api: httpx.Client, *names: str) -> None:
    for name in names:
        api.delete(f"/datastores/{name}", params={"wait": 300, "force": True})


def in_sync(api: httpx.Client) -> bool:
    return bool(ok(api.get("/system/drift"))["in_sync"])


class GuestInitiator:
    """open-iscsi inside the appliance, logging in to its own targets on 127.0.0.1
    through an iface of its own (so it has its own initiator name)."""

    def __init__(self, appliance: E2EAppliance, iface: str, name: str) -> None:
        self.a, self.iface, self.name = appliance, iface, name
        appliance.check(f"iscsiadm -m iface -I {iface} -o new >/dev/null 2>&1 || true; "
                        f"iscsiadm -m iface -I {iface} -o update -n iface.initiatorname "
                        f"-v {name}")

    def _node(self, iqn: str) -> str:
        return f"iscsiadm -m node -T {iqn} -p 127.0.0.1:3260 -I {self.iface}"

    def login(self, iqn: str, chap: tuple[str, str] | None = None,
              mutual: tuple[str, str] | None = None, check: bool = True) -> str | None:
        """Logs in; returns the disk (/dev/sdX), or None when refused (check=False)."""
        node = self._node(iqn)
        self.a.check(f"{node} -o new >/dev/null")
        settings = {"node.session.auth.authmethod": "CHAP" if chap else "None"}
        if chap:
            settings |= {"node.session.auth.username": chap[0],
                         "node.session.auth.password": chap[1]}
        if mutual:
            settings |= {"node.session.auth.username_in": mutual[0],
                         "node.session.auth.password_in": mutual[1]}
        for key, value in settings.items():
            self.a.check(f"{node} -o update -n {key} -v '{value}'")
        rc, out = self.a.exec(f"{node} --login", timeout=120)
        if rc != 0:
            assert not check, f"login of {self.name} to {iqn} failed: {out}"
            self.a.exec(f"{node} -o delete")
            return None
        return self.disk(iqn)

    def disk(self, iqn: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while True:
            self.a.exec("udevadm settle --timeout=10")
            _, out = self.a.exec("iscsiadm -m session -P 3")
            for chunk in out.split("Target: ")[1:]:
                if not chunk.startswith(iqn):
                    continue
                for part in chunk.split("Iface Name: ")[1:]:
                    m = re.search(r"Attached scsi disk (\w+)", part)
                    if part.startswith(self.iface) and m:
                        return f"/dev/{m.group(1)}"
            assert time.monotonic() < deadline, f"no disk for {self.name} on {iqn}:\n{out}"
            time.sleep(1)

    def logout(self, iqn: str) -> None:
        self.a.exec(f"{self._node(iqn)} --logout; {self._node(iqn)} -o delete", timeout=120)


def test_chap_one_way_mutual_and_drift_behind_our_back(
        appliance: E2EAppliance, api: httpx.Client, iscsi: Iscsi) -> None:
    chap_ini = "iqn.2026-11.org.example:chap1"
    d = ok(api.put("/datastores/chap-lun", json={
        "protocol": "iscsi", "size": "128M", "iscsi": {
            "initiators": [HOST, chap_ini],
            "chap": {"user": "esxchap", "secret": "firstsecret12"}}}), 201)
    iqn = d["iscsi"]["iqn"]
    url = f"iscsi://esxchap%{{}}@127.0.0.1:{appliance.iscsi_port}/{iqn}/0"

    def inq(secret: str) -> int:
        return subprocess.run(["iscsi-inq", "-i", HOST, url.format(secret)],
                              capture_output=True, timeout=120).returncode

    try:
        assert inq("firstsecret12") == 0
        assert inq("wrongsecret12") != 0
        assert iscsi.inq(iqn, HOST, check=False).returncode != 0  # no CHAP at all
        ok(api.put("/datastores/chap-lun", json={
            "protocol": "iscsi", "size": "128M", "iscsi": {
                "initiators": [HOST, chap_ini],
                "chap": {"user": "esxchap", "secret": "changedsecret"}}}))
        assert inq("changedsecret") == 0 and inq("firstsecret12") != 0

        # mutual CHAP: the initiator checks the target's secret too
        ok(api.put("/datastores/chap-lun", json={
            "protocol": "iscsi", "size": "128M", "iscsi": {
                "initiators": [HOST, chap_ini],
                "chap": {"user": "esxchap", "secret": "changedsecret",
                         "mutual_user": "zdstarget", "mutual_secret": "targetsecret1"}}}))
        guest = GuestInitiator(appliance, "zdschap", chap_ini)
        assert guest.login(iqn, ("esxchap", "changedsecret"),
                           ("zdstarget", "badtargetsec"), check=False) is None
        assert guest.login(iqn, ("esxchap", "changedsecret"),
                           ("zdstarget", "targetsecret1")) is not None
        guest.logout(iqn)

        # changes behind the engine's back show as drift and are repaired
        acl = f"{CONFIGFS}/{iqn}/tpgt_1/acls/{chap_ini}/auth"
        for _attempt in range(2):  # the watcher's own repair (every 60 s) may win a race
            appliance.check(f"echo tamperedsecret > {acl}/password")
            assert appliance.check(f"cat {acl}/password").strip() == "tamperedsecret"
            drift = ok(api.get("/system/drift"))
            if drift["items"]:
                break
            print(f"\n[e2e] drift empty after tampering; password now "
                  f"{appliance.check(f'cat {acl}/password').strip()!r}")
        assert {(i["kind"], i["subject"]) for i in drift["items"]} == {("apply_target", iqn)}
        appliance.check(f"mkdir {CONFIGFS}/{iqn}/tpgt_1/np/127.0.0.1:3262")
        assert not in_sync(api)
        r = ok(api.post("/system/reconcile"))
        assert r["errors"] == [] and in_sync(api)
        assert appliance.check(f"cat {acl}/password").strip() == "changedsecret"
        assert appliance.check(f"ls {CONFIGFS}/{iqn}/tpgt_1/np").split() == ["0.0.0.0:3260"]
    finally:
        delete(api, "chap-lun")


def test_nfs41_with_the_kernel_client_and_libnfs(
        appliance: E2EAppliance, api: httpx.Client) -> None:
    d = ok(api.put("/datastores/v41", json={
        "protocol": "nfs41", "size": "1G", "nfs": {"clients": [
            {"match": "127.0.0.1", "access": "rw"},
            {"match": HOST_AS_SEEN, "access": "rw"}]}}), 201)
    path = d["nfs"]["path"]
    try:
        appliance.check(f"mkdir -p /mnt/v41 && mount -t nfs -o vers=4.1,proto=tcp "
                        f"127.0.0.1:{path} /mnt/v41", timeout=120)
        appliance.check("head -c 1048576 /dev/urandom > /mnt/v41/disk.img && sync "
                        "&& sha256sum /mnt/v41/disk.img > /tmp/v41.sum")
        held = appliance.check("(flock -x 9; echo held; sleep 8) 9>/mnt/v41/lock & sleep 2; "
                               "flock -n /mnt/v41/lock -c 'echo second' "
                               "|| echo refused; wait", timeout=60)
        assert "held" in held and "refused" in held and "second" not in held, held
        appliance.check("flock -n /mnt/v41/lock -c true")  # released
        want = appliance.check("cut -d' ' -f1 /tmp/v41.sum").strip()
        # libnfs from the host over NFSv4 (reads: libnfs 4.0 cannot write >4 KB over v4)
        url = (f"nfs://127.0.0.1{path}/disk.img?version=4&nfsport={appliance.nfs_port}")
        got = subprocess.run(["nfs-cat", url], capture_output=True, timeout=300)
        assert got.returncode == 0, got.stderr
        assert hashlib.sha256(got.stdout).hexdigest() == want
    finally:
        appliance.exec("umount -f /mnt/v41")
        delete(api, "v41")


def test_read_only_and_unlisted_nfs_clients(api: httpx.Client, nfs: Nfs) -> None:
    ro = ok(api.put("/datastores/ro-ds", json={
        "protocol": "nfs3", "size": "1G",
        "nfs": {"clients": [{"match": HOST_AS_SEEN, "access": "ro"}]}}), 201)
    hidden = ok(api.put("/datastores/hidden-ds", json={
        "protocol": "nfs3", "size": "1G",
        "nfs": {"clients": [{"match": "192.0.2.55", "access": "rw"}]}}), 201)
    try:
        assert nfs.ls(ro["nfs"]["path"]).returncode == 0
        # the client helpers raise AssertionError with the tool's message
        with pytest.raises(AssertionError, match=r"ROFS|ACCES|denied"):
            nfs.put(ro["nfs"]["path"], "nope.txt", b"x" * 8192)
        assert nfs.ls(hidden["nfs"]["path"], check=False).returncode != 0
    finally:
        delete(api, "ro-ds", "hidden-ds")


def test_clones_serve_the_snapshots_data(api: httpx.Client, nfs: Nfs, iscsi: Iscsi,
                                         tmp_path: Path) -> None:
    n = ok(api.put("/datastores/cl-nfs", json={
        "protocol": "nfs3", "size": "1G",
        "nfs": {"clients": [{"match": HOST_AS_SEEN, "access": "rw"}]}}), 201)
    lun = ok(api.put("/datastores/cl-lun", json={
        "protocol": "iscsi", "size": "128M", "iscsi": {"initiators": [HOST]}}), 201)
    then, now = tmp_path / "then.bin", tmp_path / "now.bin"
    then.write_bytes(b"T" * MiB)
    now.write_bytes(b"N" * MiB)
    try:
        nfs.put(n["nfs"]["path"], "vm.vmdk", b"at the snapshot")
        iscsi.write(lun["iscsi"]["iqn"], HOST, then, 0)
        for name in ("cl-nfs", "cl-lun"):
            ok(api.post(f"/datastores/{name}/snapshots", json={"name": "s1"}), 201)
        nfs.put(n["nfs"]["path"], "vm.vmdk.new", b"after")
        iscsi.write(lun["iscsi"]["iqn"], HOST, now, 0)
        cn = ok(api.post("/datastores/cl-nfs/snapshots/s1/clones",
                         json={"name": "cl-nfs-copy"}), 201)
        cl = ok(api.post("/datastores/cl-lun/snapshots/s1/clones",
                         json={"name": "cl-lun-copy"}), 201)
        assert cn["serving"] and cl["serving"]
        assert nfs.get(cn["nfs"]["path"], "vm.vmdk") == b"at the snapshot"
        assert "vm.vmdk.new" not in nfs.ls(cn["nfs"]["path"]).stdout
        assert iscsi.read(cl["iscsi"]["iqn"], HOST, 0, MiB) == then.read_bytes()
        assert iscsi.read(lun["iscsi"]["iqn"], HOST, 0, MiB) == now.read_bytes()
        assert cl["iscsi"]["wwn"] != lun["iscsi"]["wwn"]
    finally:
        delete(api, "cl-nfs-copy", "cl-lun-copy", "cl-nfs", "cl-lun")


def test_growing_is_seen_and_an_access_change_keeps_the_session(
        appliance: E2EAppliance, api: httpx.Client, iscsi: Iscsi) -> None:
    lun = ok(api.put("/datastores/grow-lun", json={
        "protocol": "iscsi", "size": "128M", "iscsi": {"initiators": [HOST]}}), 201)
    n = ok(api.put("/datastores/grow-nfs", json={
        "protocol": "nfs3", "size": "1G",
        "nfs": {"clients": [{"match": "127.0.0.1", "access": "rw"}]}}), 201)
    iqn = lun["iscsi"]["iqn"]
    session = iscsi.hold_session(iqn, HOST)
    try:
        deadline = time.monotonic() + 60
        while HOST not in ok(api.get("/datastores/grow-lun"))["connected_clients"]:
            assert time.monotonic() < deadline, "the held session never showed"
            time.sleep(1)
        grown = ok(api.put("/datastores/grow-lun", json={
            "protocol": "iscsi", "size": "256M", "iscsi": {"initiators": [HOST, HOST2]}}))
        assert grown["size"] == 256 * MiB
        assert session.poll() is None, "the access change dropped the logged-in session"
        assert HOST in ok(api.get("/datastores/grow-lun"))["connected_clients"]
        total = re.search(r"Total size:(\d+)", iscsi.readcapacity16(iqn, HOST2))
        assert total and int(total.group(1)) == 256 * MiB
        appliance.check(f"mkdir -p /mnt/grow && mount -t nfs -o vers=3,nolock "
                        f"127.0.0.1:{n['nfs']['path']} /mnt/grow", timeout=120)
        size = int(appliance.check("df -B1 --output=size /mnt/grow | tail -1"))
        assert 0.9 * (1 << 30) < size <= (1 << 30), size
        ok(api.put("/datastores/grow-nfs", json={
            "protocol": "nfs3", "size": "2G",
            "nfs": {"clients": [{"match": "127.0.0.1", "access": "rw"}]}}))
        size = int(appliance.check("df -B1 --output=size /mnt/grow | tail -1"))
        assert 1.9 * (1 << 30) < size <= 2 * (1 << 30), size
    finally:
        session.terminate()
        session.wait(timeout=30)
        appliance.exec("umount -f /mnt/grow")
        delete(api, "grow-lun", "grow-nfs")


def referenced(api: httpx.Client, name: str) -> int:
    return int(ok(api.get(f"/datastores/{name}"))["usage"]["referenced"])


def wait_below(api: httpx.Client, name: str, limit: int, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while (now := referenced(api, name)) >= limit and time.monotonic() < deadline:
        time.sleep(2)  # ZFS frees asynchronously
    return now


def test_unmap_and_write_same_free_space_and_reservations(
        appliance: E2EAppliance, api: httpx.Client, iscsi: Iscsi, tmp_path: Path) -> None:
    pr_a, pr_b = "iqn.2026-11.org.example:pra", "iqn.2026-11.org.example:prb"
    lun = ok(api.put("/datastores/pr-lun", json={
        "protocol": "iscsi", "size": "128M",
        "iscsi": {"initiators": [HOST, pr_a, pr_b]}}), 201)
    iqn, serial = lun["iscsi"]["iqn"], lun["iscsi"]["serial"]
    data = tmp_path / "fill.bin"
    data.write_bytes(os.urandom(32 * MiB))
    a = GuestInitiator(appliance, "zdspra", pr_a)
    b = GuestInitiator(appliance, "zdsprb", pr_b)
    try:
        # UNMAP and WRITE SAME with UNMAP from an initiator free the blocks in ZFS
        iscsi.write(iqn, HOST, data, 0)
        appliance.check("zpool sync")  # referenced counts what the last txg wrote
        before = referenced(api, "pr-lun")
        assert before >= 30 * MiB, before
        dev_a = a.login(iqn)
        assert dev_a
        appliance.check(f"sg_unmap --lba=0 --num=32768 {dev_a}")  # first 16 MiB
        half = wait_below(api, "pr-lun", before - 12 * MiB)
        assert half < before - 12 * MiB, (before, half)
        appliance.check(f"sg_write_same --16 --unmap --lba=32768 --num=32768 {dev_a}")
        rest = wait_below(api, "pr-lun", half - 12 * MiB)
        assert rest < 4 * MiB, (before, half, rest)
        print(f"\n[e2e] referenced {before >> 20} MiB -> UNMAP {half >> 20} MiB -> "
              f"WRITE SAME/UNMAP {rest >> 20} MiB")

        # SCSI-3 persistent reservations between two initiators
        dev_b = b.login(iqn)
        assert dev_b
        sgp = "sg_persist --no-inquiry"

        def pr_in(what: str, dev: str) -> str:
            # A registrant whose registration another preempted or cleared gets one UNIT
            # ATTENTION ("Registrations preempted") first, as SPC-3 says; then it reads.
            out = ""
            for _ in range(3):
                rc, out = appliance.exec(f"{sgp} --in {what} {dev}")
                if rc == 0:
                    return out
                assert "unit attention" in out.lower(), out
            raise AssertionError(out)

        appliance.check(f"{sgp} --out --register --param-sark=0xa1 {dev_a}")
        appliance.check(f"{sgp} --out --register --param-sark=0xb2 {dev_b}")
        keys = appliance.check(f"{sgp} --in --read-keys {dev_a}")
        assert "0xa1" in keys and "0xb2" in keys, keys
        appliance.check(f"{sgp} --out --reserve --param-rk=0xa1 --prout-type=1 {dev_a}")
        res = appliance.check(f"{sgp} --in --read-reservation {dev_b}")
        assert "0xa1" in res and "Write Exclusive" in res, res
        write = "dd if=/dev/zero of={} bs=4096 count=1 oflag=direct"
        assert appliance.exec(write.format(dev_b))[0] != 0, "B wrote through A's reservation"
        appliance.check(write.format(dev_a))
        appliance.check(f"{sgp} --out --preempt --param-rk=0xb2 --param-sark=0xa1 "
                        f"--prout-type=1 {dev_b}")
        res = pr_in("--read-reservation", dev_a)  # after A's unit attention
        assert "0xb2" in res, res
        assert "0xa1" not in pr_in("--read-keys", dev_b)
        appliance.check(f"{sgp} --out --release --param-rk=0xb2 --prout-type=1 {dev_b}")
        appliance.check(f"{sgp} --out --clear --param-rk=0xb2 {dev_b}")
        assert "no registered" in pr_in("--read-keys", dev_a).lower()

        # SCSI-2 RESERVE(6)/RELEASE(6), as ESXi uses them without ATS
        appliance.check(f"sg_raw {dev_a} 16 00 00 00 00 00")
        rc, out = appliance.exec(f"sg_raw {dev_b} 16 00 00 00 00 00")
        assert rc != 0 and "conflict" in out.lower(), out
        assert appliance.exec(write.format(dev_b))[0] != 0
        appliance.check(f"sg_raw {dev_a} 17 00 00 00 00 00")
        appliance.check(f"sg_raw {dev_b} 16 00 00 00 00 00")
        appliance.check(f"sg_raw {dev_b} 17 00 00 00 00 00")

        # APTPL: a registration that persists through power loss lives under LIO's dbroot
        # and comes back when ZDS re-creates the LUN (at boot, or after it was lost)
        appliance.check(f"{sgp} --out --register --param-sark=0xc3 --param-aptpl {dev_a}")
        aptpl = appliance.check(f"cat /etc/rtslib-fb-target/pr/aptpl_{serial}")
        # LIO writes the key in decimal: 0xc3 = 195
        assert "PR_REG_START" in aptpl and "sa_res_key=195" in aptpl, aptpl
        a.logout(iqn)
        b.logout(iqn)
        appliance.check(f"targetcli /iscsi delete {iqn} && "
                        f"targetcli /backstores/block delete zds-pr-lun", timeout=120)
        assert not in_sync(api)
        assert ok(api.post("/system/reconcile"))["errors"] == []
        dev_a = a.login(iqn)
        assert dev_a
        keys = pr_in("--read-keys", dev_a)  # a re-made LUN: unit attention first
        assert "0xc3" in keys, keys
        appliance.check(f"{sgp} --out --register-ignore --param-sark=0 {dev_a}")
    finally:
        a.logout(iqn)
        b.logout(iqn)
        delete(api, "pr-lun")


def test_what_the_scsi_target_answers_is_what_docs_esxi_says(
        appliance: E2EAppliance, api: httpx.Client) -> None:
    """docs/esxi.md ("What the SCSI target does and does not do") states how the
    kernel's LIO answers the commands where it departs from SBC or a test suite expects
    otherwise. Each statement is checked here with sg3-utils, so a kernel that changes
    one of them fails this test instead of leaving the page wrong."""
    init = "iqn.2026-11.org.example:sbc"
    lun = ok(api.put("/datastores/sbc-lun", json={
        "protocol": "iscsi", "size": "64M", "iscsi": {"initiators": [init]}}), 201)
    iqn = lun["iscsi"]["iqn"]
    g = GuestInitiator(appliance, "zdssbc", init)
    try:
        dev = g.login(iqn)
        assert dev
        vpd = appliance.check(f"sg_vpd --page=bl {dev}")
        assert "Maximum compare and write length: 1 blocks" in vpd, vpd
        assert "Optimal unmap granularity: 32 blocks" in vpd, vpd  # volblocksize 16K
        blk = "dd if=/dev/zero bs=512 count=1 2>/dev/null | tr '\\0' {} > /tmp/sbc-{}"
        appliance.check("; ".join(blk.format(c, c) for c in "AB"))
        appliance.check(f"dd if=/tmp/sbc-A of={dev} bs=512 seek=10 oflag=direct 2>/dev/null")
        # COMPARE AND WRITE (ESXi's ATS): a miscompare is MISCOMPARE, with the offset
        appliance.check("cat /tmp/sbc-B /tmp/sbc-B > /tmp/sbc-BB; "
                        "cat /tmp/sbc-A /tmp/sbc-B > /tmp/sbc-AB")
        # (-v: the tools print the sense's additional text only when verbose)
        rc, out = appliance.exec(f"sg_compare_and_write -v --in=/tmp/sbc-BB --lba=10 "
                                 f"--num=1 {dev}")
        assert rc != 0 and "Miscompare during verify operation" in out, out
        appliance.check(f"sg_compare_and_write --in=/tmp/sbc-AB --lba=10 --num=1 {dev}")
        assert appliance.check(f"dd if={dev} bs=512 skip=10 count=1 iflag=direct "
                               "2>/dev/null | od -An -c | head -1").split()[0] == "B"
        invalid = "Invalid field in cdb"
        # VERIFY with BYTCHK=1 is refused (no byte compare at all); BYTCHK=0 passes
        rc, out = appliance.exec(f"sg_verify -v --bytchk=1 --lba=10 --count=1 "
                                 f"--in=/tmp/sbc-B {dev}")
        assert rc != 0 and invalid in out, out
        appliance.check(f"sg_verify --16 --lba=10 --count=1 {dev}")
        # WRITE SAME(16) of 4 blocks: a data-out of two blocks is refused, one passes
        ws = "93 00 00 00 00 00 00 00 00 14 00 00 00 04 00 00"
        rc, out = appliance.exec(f"sg_raw -s 1024 -i /tmp/sbc-BB {dev} {ws}")
        assert rc != 0 and invalid in out, out
        appliance.check(f"sg_raw -s 512 -i /tmp/sbc-B {dev} {ws}")
        # WRITE SAME(16) with UNMAP off the 32-block granularity is accepted
        appliance.check(f"sg_raw -s 512 -i /tmp/sbc-B {dev} "
                        "93 08 00 00 00 00 00 00 00 01 00 00 00 03 00 00")
        # EXTENDED COPY (LID1): operating parameters answered, the copy status is not
        params = appliance.check(f"sg_copy_results --params {dev}")
        assert "Maximum segment descriptor count: 1" in params, params
        rc, out = appliance.exec(f"sg_copy_results -v --status {dev}")
        assert rc != 0 and invalid in out, out
    finally:
        g.logout(iqn)
        delete(api, "sbc-lun")


def test_an_api_restart_in_the_middle_of_a_job(appliance: E2EAppliance,
                                               api: httpx.Client) -> None:
    ok(api.put("/datastores/job-ds", json={
        "protocol": "nfs3", "size": "1G",
        "nfs": {"clients": [{"match": HOST_AS_SEEN, "access": "rw"}]}}), 201)
    try:
        job = ok(api.post("/probes", json={
            "profile": "randread-4k-qd32", "datastore": "job-ds", "target": "local",
            "overrides": {"runtime": 120, "size": "64m"}}), 202)
        deadline = time.monotonic() + 120
        while ok(api.get(f"/jobs/{job['id']}"))["state"] != "running":
            assert time.monotonic() < deadline
            time.sleep(1)
        appliance.check("systemctl restart zds-api", timeout=180)
        deadline = time.monotonic() + 300
        while True:
            try:
                if api.get("/system/health").json().get("status") == "ok":
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the API did not come back"
            time.sleep(2)
        after = ok(api.get(f"/jobs/{job['id']}"))
        assert after["state"] == "failed" and after["error"]["code"] == "interrupted", after
        d = ok(api.get("/datastores/job-ds"))
        assert d["state"] == "ready" and d["serving"]
        assert in_sync(api)
        # the interrupted probe's scratch goes with the next probe's clean-up
        again = ok(api.post("/probes", params={"wait": 300}, json={
            "profile": "randread-4k-qd32", "datastore": "job-ds", "target": "local",
            "overrides": {"runtime": 3, "size": "16m"}}), 202)
        assert again["state"] == "succeeded", again
        left = appliance.check("zfs list -H -o name -r tank | grep zds-probes/ || true")
        assert left.strip() == "", left
    finally:
        delete(api, "job-ds")
