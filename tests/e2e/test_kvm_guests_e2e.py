"""Virtual machines on ZDS datastores, with QEMU as the hypervisor the way Proxmox runs
guests (QEMU's own libiscsi and libnfs block drivers, no kernel initiator or NFS mount on
the host), and libvirt taking the attach XML as the API returns it.

The guest is tiny (images/guest.py): the appliance's kernel and initrd, booted directly,
and a busybox root file system on the datastore that counts its boots and keeps a note;
a run with ``zds.note=X`` writes X, reboots inside the same QEMU and finds X again.
The tests run in order and share the session's appliance (tests/e2e/conftest.py).
"""

from __future__ import annotations

import concurrent.futures
import re
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from images import guest
from tests.e2e import libvirt_host
from tests.e2e.clients import Iscsi, Nfs, run
from tests.e2e.conftest import E2EAppliance
from tests.e2e.portmap import MOUNT_PROG, NFS_PROG, Portmapper
from tests.e2e.rest import api_client, ok

pytestmark = pytest.mark.e2e

# this host's initiator name: the iSCSI datastores are provisioned for it
HOST_IQN = "iqn.2026-11.org.example:kvmhost"
HOST_AS_SEEN = "10.0.2.2"  # the host behind QEMU user networking, as the appliance sees it
GUEST_TIMEOUT = 900.0

state: dict[str, Any] = {}
timings: dict[str, float] = {}


@pytest.fixture(scope="module")
def api(appliance: E2EAppliance) -> Iterator[httpx.Client]:
    assert appliance.api_healthy, f"the API never became healthy; see {appliance.serial_log}"
    with api_client(appliance.api_url, appliance.admin_token, timeout=600) as c:
        yield c
        # clones first (they hang on their origin's snapshot), then the datastores
        for name in ("kvmlun-clone", "kvmnfs-clone", "kvmlun", "kvmnfs"):
            c.delete(f"/datastores/{name}", params={"wait": 300, "force": True})
        print(f"\n[e2e] kvm guest timings (s): {timings}")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("kvm-guests")


@pytest.fixture(scope="module")
def kernel(appliance: E2EAppliance, workdir: Path) -> guest.GuestKernel:
    return guest.extract_kernel(appliance.image_dir / "zds.raw", workdir / "kernel")


@pytest.fixture(scope="module")
def rootfs(workdir: Path) -> Path:
    return guest.build_rootfs(workdir / "guest.ext4")


@pytest.fixture(scope="module")
def iscsi(appliance: E2EAppliance, workdir: Path) -> Iscsi:
    return Iscsi(appliance.iscsi_port, workdir)


@pytest.fixture(scope="module")
def nfs(appliance: E2EAppliance, workdir: Path) -> Nfs:
    return Nfs(appliance.nfs_port, appliance.mountd_port, workdir)


def note(tag: str) -> str:
    return f"{tag}-{secrets.token_hex(3)}"


def boot(kernel: guest.GuestKernel, drive: list[str], want: str, log: Path,
         label: str) -> guest.GuestRun:
    r = guest.run_guest(kernel, drive, want, log, timeout=GUEST_TIMEOUT)
    timings[label] = r.seconds
    assert r.done and r.exit_code == 0, f"{label}: the guest did not finish " \
                                        f"(exit {r.exit_code}, {r.seconds} s):\n{r.tail()}"
    return r


def boot_side_by_side(kernel: guest.GuestKernel,
                      runs: list[tuple[list[str], str, Path, str]]) -> list[guest.GuestRun]:
    """:func:`boot` for guests on different disks at once, as a host runs several VMs:
    each QEMU takes a host core, and the appliance serves them both."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(runs)) as pool:
        started = [pool.submit(boot, kernel, *run_args) for run_args in runs]
        return [f.result() for f in started]


# ---------------------------------------------------------------------------- iSCSI


def test_1_guest_boots_from_an_iscsi_lun_writes_reboots_and_finds_its_file(
        api: httpx.Client, iscsi: Iscsi, appliance: E2EAppliance, kernel: guest.GuestKernel,
        rootfs: Path, workdir: Path) -> None:
    d = ok(api.put("/datastores/kvmlun", json={
        "protocol": "iscsi", "size": "1G", "profile": "kvm",
        "iscsi": {"initiators": [HOST_IQN]}}), 201)
    iqn = d["iscsi"]["iqn"]
    iscsi.write_image(iqn, HOST_IQN, rootfs)
    a = note("A")
    drive = guest.iscsi_drive(appliance.iscsi_port, iqn, HOST_IQN)
    r = boot(kernel, drive, a, workdir / "lun-1.log", "iscsi_write_reboot")
    # first boot: nothing yet, writes the note, reboots; second boot: the note is there
    assert r.boots == [(1, "-"), (2, a)] and r.wrote == [a], r.tail()
    state.update(lun_iqn=iqn, lun_a=a, lun_size=d["size"])


def test_2_a_clone_of_the_snapshot_boots_a_second_guest_with_the_state_then(
        api: httpx.Client, appliance: E2EAppliance, kernel: guest.GuestKernel,
        workdir: Path) -> None:
    a = state["lun_a"]
    ok(api.post("/datastores/kvmlun/snapshots", json={"name": "s1"}), 201)
    clone = ok(api.post("/datastores/kvmlun/snapshots/s1/clones",
                        json={"name": "kvmlun-clone"}), 201)
    assert clone["iscsi"]["iqn"] != state["lun_iqn"]
    assert clone["iscsi"]["initiators"] == [HOST_IQN]  # access comes with the clone
    b = note("B")
    # the LUN's guest writes B while a second guest boots the clone, side by side
    on_lun, on_clone = boot_side_by_side(kernel, [
        (guest.iscsi_drive(appliance.iscsi_port, state["lun_iqn"], HOST_IQN), b,
         workdir / "lun-2.log", "iscsi_after_snapshot"),
        (guest.iscsi_drive(appliance.iscsi_port, clone["iscsi"]["iqn"], HOST_IQN), "",
         workdir / "clone.log", "iscsi_clone")])
    assert on_lun.boots == [(3, a), (4, b)], on_lun.tail()
    # the clone is the disk as it was at s1: two boots, note A (B is the LUN's alone)
    assert on_clone.boots == [(3, a)], on_clone.tail()
    state["lun_b"] = b


# ---------------------------------------------------------------------------- NFS


def test_3_qemu_refuses_libnfs_port_parameters(appliance: E2EAppliance) -> None:
    """Why the NFS guests need a portmapper: QEMU parses the nfs:// query itself."""
    url = (f"nfs://127.0.0.1/tank/datastores/x/disk.qcow2?nfsport={appliance.nfs_port}"
           f"&mountport={appliance.mountd_port}")
    p = run(["qemu-img", "info", url], check=False, timeout=60)
    assert p.returncode != 0 and "Unknown NFS parameter name: nfsport" in p.stderr, p.stderr


def test_4_guest_boots_from_a_qcow2_on_an_nfs_datastore(
        api: httpx.Client, nfs: Nfs, appliance: E2EAppliance, kernel: guest.GuestKernel,
        rootfs: Path, workdir: Path) -> None:
    d = ok(api.put("/datastores/kvmnfs", json={
        "protocol": "nfs3", "size": "2G", "profile": "kvm",
        "nfs": {"clients": [{"match": HOST_AS_SEEN, "access": "rw"}]}}), 201)
    path = d["nfs"]["path"]
    qcow2 = workdir / "guest.qcow2"
    run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(rootfs), str(qcow2)])
    nfs.put_file(path, "guest.qcow2", qcow2)
    a = note("A")
    with Portmapper(appliance.nfs_port, appliance.mountd_port) as pm:
        r = boot(kernel, guest.nfs_drive(path, "guest.qcow2"), a, workdir / "nfs-1.log",
                 "nfs_write_reboot")
    assert r.boots == [(1, "-"), (2, a)] and r.wrote == [a], r.tail()
    # QEMU found mountd and nfsd through the portmapper, on the forwarded ports
    assert {MOUNT_PROG, NFS_PROG} <= {c[2] for c in pm.calls}, pm.calls
    state.update(nfs_path=path, nfs_a=a)


def test_5_nfs_snapshot_clone_and_rollback_bring_the_guest_disk_back(
        api: httpx.Client, appliance: E2EAppliance, kernel: guest.GuestKernel,
        workdir: Path) -> None:
    a, path = state["nfs_a"], state["nfs_path"]
    ok(api.post("/datastores/kvmnfs/snapshots", json={"name": "s1"}), 201)
    clone = ok(api.post("/datastores/kvmnfs/snapshots/s1/clones",
                        json={"name": "kvmnfs-clone"}), 201)
    b = note("B")
    with Portmapper(appliance.nfs_port, appliance.mountd_port):
        # the datastore's guest writes B while a second guest boots the clone's copy
        on_ds, on_clone = boot_side_by_side(kernel, [
            (guest.nfs_drive(path, "guest.qcow2"), b, workdir / "nfs-2.log",
             "nfs_after_snapshot"),
            (guest.nfs_drive(clone["nfs"]["path"], "guest.qcow2"), "",
             workdir / "nfs-clone.log", "nfs_clone")])
        assert on_ds.boots == [(3, a), (4, b)], on_ds.tail()
        assert on_clone.boots == [(3, a)], on_clone.tail()
        # the guest is off, but ganesha still counts this host as a recent client: the
        # admin who knows the VM is down forces it (a 409 names the client otherwise)
        rb = api.post("/datastores/kvmnfs/snapshots/s1/rollback", json={})
        if rb.status_code == 409:
            assert HOST_AS_SEEN in rb.json()["error"]["message"], rb.text
            rb = api.post("/datastores/kvmnfs/snapshots/s1/rollback", json={"force": True})
        ok(rb)
        r = boot(kernel, guest.nfs_drive(path, "guest.qcow2"), "", workdir / "nfs-3.log",
                 "nfs_after_rollback")
    # rolled back: the disk is again what it was at s1 (B and boots 3-4 are gone)
    assert r.boots == [(3, a)], r.tail()


# ---------------------------------------------------------------------------- libvirt


@pytest.fixture(scope="module")
def libvirt(workdir: Path) -> Iterator[libvirt_host.PrivateLibvirt]:
    assert libvirt_host.available(), "libvirt is not installed (scripts/setup-host.sh)"
    with libvirt_host.PrivateLibvirt(workdir / "libvirt") as lv:
        yield lv


DOMAIN = """<domain type='qemu'>
  <name>{name}</name>
  <memory unit='MiB'>256</memory>
  <vcpu>1</vcpu>
  <os>
    <type arch='x86_64' machine='q35'>hvm</type>
    <kernel>{kernel}</kernel>
    <initrd>{initrd}</initrd>
    <cmdline>{cmdline}</cmdline>
  </os>
  <features><acpi/></features>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>restart</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <disk type='volume' device='disk'>
      <driver name='qemu' type='raw' cache='none'/>
      <source pool='{pool}' volume='{volume}'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <serial type='file'>
      <source path='{log}'/>
      <target port='0'/>
    </serial>
    <memballoon model='none'/>
  </devices>
</domain>
"""


def test_6_libvirt_defines_the_iscsi_direct_pool_from_the_attach_xml_and_boots_a_domain(
        api: httpx.Client, appliance: E2EAppliance, libvirt: libvirt_host.PrivateLibvirt,
        kernel: guest.GuestKernel, workdir: Path) -> None:
    att = ok(api.get("/datastores/kvmlun/attach",
                     params={"server": "127.0.0.1", "port": appliance.iscsi_port}))
    xml = workdir / "kvmlun-pool.xml"
    xml.write_text(att["libvirt_pool_xml"])  # as returned: no edits
    assert att["virsh"][0] == "virsh pool-define kvmlun-pool.xml"
    t0 = time.monotonic()
    for cmd in att["virsh"]:  # pool-define, pool-start, pool-autostart: as returned
        argv = cmd.split()[1:]
        libvirt.virsh(*[str(xml) if a == xml.name else a for a in argv])
    vols = libvirt.virsh("vol-list", "kvmlun").stdout
    m = re.search(r"^\s*(unit:\d+:\d+:\d+)\s+(\S+)", vols, re.M)
    assert m, f"no LUN in the pool:\n{vols}"
    volume = m.group(1)
    info = libvirt.virsh("vol-info", "--bytes", "--pool", "kvmlun", volume).stdout
    cap = re.search(r"Capacity:\s+(\d+) bytes", info)
    # libvirt 9.0's iscsi-direct counts READ CAPACITY's last LBA as the number of blocks:
    # it shows one 512-byte block less than the LUN has (iscsi-readcapacity16 and QEMU
    # see the full size)
    assert cap and state["lun_size"] - int(cap.group(1)) in (0, 512), info
    c = note("C")
    log = workdir / "libvirt-guest.log"
    log.touch()
    dom = workdir / "domain.xml"
    dom.write_text(DOMAIN.format(name="zds-e2e-guest", kernel=kernel.kernel,
                                 initrd=kernel.initrd, cmdline=kernel.cmdline(c),
                                 pool="kvmlun", volume=volume, log=log))
    libvirt.virsh("define", str(dom))
    dumped = libvirt.virsh("dumpxml", "zds-e2e-guest").stdout
    assert "<source pool='kvmlun' volume=" in dumped, dumped
    t1 = time.monotonic()
    libvirt.virsh("start", "zds-e2e-guest")
    deadline = time.monotonic() + GUEST_TIMEOUT
    while time.monotonic() < deadline:
        if "shut off" in libvirt.virsh("domstate", "zds-e2e-guest").stdout:
            break
        time.sleep(2)
    timings["libvirt_pool_start"] = round(t1 - t0, 1)
    timings["libvirt_domain"] = round(time.monotonic() - t1, 1)
    r = guest.GuestRun.parse(log.read_text(errors="replace"), timings["libvirt_domain"], 0)
    # the LUN as guest 1 left it (4 boots, note B), then C written and found after a reboot
    assert r.done and r.boots == [(5, state["lun_b"]), (6, c)], \
        f"{r.tail()}\n{libvirt.diagnostics()}"
    libvirt.virsh("undefine", "zds-e2e-guest")
    libvirt.virsh("pool-destroy", "kvmlun")
    libvirt.virsh("pool-undefine", "kvmlun")


def test_7_libvirt_takes_the_netfs_xml_and_would_mount_nfsv3(
        api: httpx.Client, libvirt: libvirt_host.PrivateLibvirt, workdir: Path) -> None:
    """The netfs pool mounts with the kernel NFS client, which this host's kernel lacks
    (no "nfs" in /proc/filesystems): check the XML's shape and the exact mount command
    libvirt derives from it, stopping before any mount is attempted."""
    att = ok(api.get("/datastores/kvmnfs/attach", params={"server": "127.0.0.1"}))
    xml = workdir / "kvmnfs-pool.xml"
    xml.write_text(att["libvirt_pool_xml"])
    v = run(["virt-xml-validate", str(xml), "storagepool"], check=False)
    assert v.returncode == 0, v.stdout + v.stderr
    libvirt.virsh("pool-define", str(xml))
    dumped = libvirt.virsh("pool-dumpxml", "kvmnfs").stdout
    for part in ("<pool type='netfs'>", "<host name='127.0.0.1'/>",
                 f"<dir path='{state['nfs_path']}'/>", "<format type='nfs'/>",
                 "<protocol ver='3'/>", "<path>/var/lib/libvirt/images/kvmnfs</path>"):
        assert part in dumped, f"{part} not in\n{dumped}"
    # Without `pool-build` the mount point is missing: mount.nfs stops before it talks to
    # any server, and libvirt's error shows the command it ran.
    start = libvirt.virsh("pool-start", "kvmnfs", check=False)
    assert start.returncode != 0
    assert (f"mount -o nodev,nosuid,noexec,nfsvers=3 -t nfs 127.0.0.1:{state['nfs_path']} "
            "/var/lib/libvirt/images/kvmnfs") in start.stderr, start.stderr
    libvirt.virsh("pool-undefine", "kvmnfs")
    assert "nfs" not in Path("/proc/filesystems").read_text().split(), \
        "this kernel has an NFS client now: start the netfs pool for real"


# ---------------------------------------------------------------------------- SSH


def test_8_root_logs_in_over_ssh_with_the_key_handed_in_by_fw_cfg(
        appliance: E2EAppliance) -> None:
    """What the Vagrant box relies on: no vagrant user, a key handed in by fw_cfg."""
    p = appliance.ssh("id -un; systemctl is-active zds-api; "
                      "stat -c %a /root/.ssh/authorized_keys")
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["root", "active", "600"], p.stdout
    key = Path(str(appliance.ssh_key) + ".pub").read_text().split()[1]
    assert key in appliance.check("cat /root/.ssh/authorized_keys")
