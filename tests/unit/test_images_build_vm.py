"""Pure parts of the image build and the QEMU harness: version picking, the input hash,
and the QEMU command line's network hazards (restrict=on, 127.0.0.1 only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from images import build
from images.vm import Appliance, Ports, SocketLink, Switch, VmError

MADISON = """\
  zfs-dkms | 2.3.2-2~bpo12+2 | http://deb.debian.org/debian bookworm-backports/contrib amd64 P
  zfs-dkms | 2.1.11-1+deb12u1 | http://deb.debian.org/debian bookworm/contrib amd64 Packages
"""

SHOW = """\
Package: linux-image-amd64
Source: linux-signed-amd64 (6.1.158+1)
Version: 6.1.158-1
Depends: linux-image-6.1.0-56-amd64 (= 6.1.158-1)
Description: Linux for 64-bit PCs (meta-package)
"""


def test_pick_version_by_suite() -> None:
    assert build.pick_version(MADISON, "bookworm-backports") == "2.3.2-2~bpo12+2"
    assert build.pick_version(MADISON, "bookworm") == "2.1.11-1+deb12u1"
    with pytest.raises(SystemExit):
        build.pick_version(MADISON, "trixie")


def test_kernel_abi_from_metapackage() -> None:
    assert build.kernel_abi(SHOW) == "6.1.0-56-amd64"


def test_inputs_hash_follows_files_and_versions(tmp_path: Path) -> None:
    (tmp_path / "ansible").mkdir()
    f = tmp_path / "ansible" / "site.yml"
    f.write_text("a")
    (tmp_path / "pyproject.toml").write_text("x")
    r = build.Resolved("6.1.0-56-amd64", {"zfs-dkms": "2.3.2"})
    h1 = build.inputs_hash(tmp_path, r)
    assert h1 == build.inputs_hash(tmp_path, r)
    (tmp_path / "ansible" / "__pycache__").mkdir()
    (tmp_path / "ansible" / "__pycache__" / "x.pyc").write_bytes(b"junk")
    assert build.inputs_hash(tmp_path, r) == h1  # caches do not count
    f.write_text("b")
    h2 = build.inputs_hash(tmp_path, r)
    assert h2 != h1
    other = build.Resolved("6.1.0-57-amd64", {"zfs-dkms": "2.3.3"})
    assert build.inputs_hash(tmp_path, other) != h2


def test_qemu_network_is_restricted_to_loopback_forwards(tmp_path: Path) -> None:
    vm = Appliance(state_dir=tmp_path, base_image=tmp_path / "base.raw",
                   ports=Ports(api=18443, nfs=12049, mountd=30048, iscsi=13260, nvme=14420))
    argv = vm.qemu_argv(kvm=False)
    netdev = argv[argv.index("-netdev") + 1]
    assert netdev.startswith("user,") and ",restrict=on," in netdev
    fwds = [p for p in netdev.split(",") if p.startswith("hostfwd=")]
    assert fwds == ["hostfwd=tcp:127.0.0.1:18443-:8443", "hostfwd=tcp:127.0.0.1:12049-:2049",
                    "hostfwd=tcp:127.0.0.1:30048-:20048", "hostfwd=tcp:127.0.0.1:13260-:3260",
                    "hostfwd=tcp:127.0.0.1:14420-:4420"]
    assert argv[argv.index("-accel") + 1] == "tcg,thread=multi"
    assert f"name=opt/zds/admin-token,file={tmp_path / 'admin-token'}" in argv
    assert "-pidfile" in argv and "-monitor" in argv
    assert not any("test-control" in a for a in argv)  # only test boots get the agent
    disks = [a for a in argv if a.startswith("virtio-blk-pci,drive=data")]
    assert disks == ["virtio-blk-pci,drive=data0,serial=zdsdata0",
                     "virtio-blk-pci,drive=data1,serial=zdsdata1"]


def test_ssh_forward_and_keys_only_when_asked(tmp_path: Path) -> None:
    keys = tmp_path / "keys.pub"
    vm = Appliance(state_dir=tmp_path, base_image=tmp_path / "b", ssh_port=10022,
                   ssh_authorized_keys=keys)
    argv = vm.qemu_argv(kvm=False)
    netdev = argv[argv.index("-netdev") + 1]
    assert ",restrict=on," in netdev and netdev.endswith(",hostfwd=tcp:127.0.0.1:10022-:22")
    assert f"name=opt/zds/ssh-authorized-keys,file={keys}" in argv
    plain = Appliance(state_dir=tmp_path, base_image=tmp_path / "b").qemu_argv(kvm=False)
    assert not any(f"{a},".count("-:22,") or "ssh-authorized" in a for a in plain)


def test_socket_links_stay_on_loopback_and_the_user_network_stays_restricted(
        tmp_path: Path) -> None:
    vm = Appliance(state_dir=tmp_path, base_image=tmp_path / "b", links=(
        SocketLink("listen", 41001, "52:54:00:5a:00:01"),
        SocketLink("connect", 41002, "52:54:00:5a:00:02")))
    argv = vm.qemu_argv(kvm=False)
    netdevs = [argv[i + 1] for i, a in enumerate(argv) if a == "-netdev"]
    assert netdevs[0].startswith("user,id=n0,restrict=on,")
    assert netdevs[1:] == ["socket,id=link0,listen=127.0.0.1:41001",
                           "socket,id=link1,connect=127.0.0.1:41002"]
    assert "virtio-net-pci,netdev=link1,mac=52:54:00:5a:00:02" in argv
    for bad in (("udp", 1, "52:54:00:5a:00:01"), ("listen", 0, "52:54:00:5a:00:01"),
                ("listen", 1, "02:00:00:00:00:01")):
        with pytest.raises(ValueError):
            SocketLink(*bad)


def test_extra_disks_are_sparse_and_outside_the_first_boot_pool(tmp_path: Path) -> None:
    vm = Appliance(state_dir=tmp_path, base_image=tmp_path / "b",
                   extra_disks=(("zdslog0", 2 << 30),))
    argv = vm.qemu_argv(kvm=False)
    assert "virtio-blk-pci,drive=zdslog0,serial=zdslog0" in argv  # not a zdsdata* serial
    assert len([a for a in argv if "serial=zdsdata" in a]) == 2
    vm.base_image.write_bytes(b"")
    vm.prepare(fresh_data=True)
    disk = tmp_path / "zdslog0.raw"
    assert disk.stat().st_size == 2 << 30 and disk.stat().st_blocks == 0  # sparse


def test_test_boots_get_the_control_channel(tmp_path: Path) -> None:
    vm = Appliance(state_dir=tmp_path, base_image=tmp_path / "b", test_control=True)
    argv = vm.qemu_argv(kvm=True)
    assert "name=opt/zds/test-control,string=1" in argv
    assert any(a.endswith("name=org.zds.control") for a in argv)
    assert argv[argv.index("-accel") + 1] == "kvm"


def test_pid_is_only_trusted_when_it_is_our_qemu(tmp_path: Path) -> None:
    import os

    vm = Appliance(state_dir=tmp_path, base_image=tmp_path / "b")
    vm.pidfile.write_text(str(os.getpid()))  # a live process, but not our QEMU
    assert vm.pid() is None


def test_changed_tasks_from_ansible_output() -> None:
    out = """\
TASK [zfs : Copy the prebuilt modules] *****************************************
ok: [/r] => (item=/x/spl.ko)
changed: [/r] => (item=/x/zfs.ko)
changed: [/r] => (item=/x/other.ko)

TASK [base : Write sysctl] *****************************************************
ok: [/r]

RUNNING HANDLER [zfs : Run depmod for the target kernel] ***********************
changed: [/r]
"""
    assert build.changed_tasks(out) == ["zfs : Copy the prebuilt modules",
                                        "zfs : Run depmod for the target kernel"]


def test_admin_token_has_the_api_format_and_bad_ones_are_replaced(tmp_path: Path) -> None:
    from appliance.services.tokens import _TOKEN
    from images.vm import new_admin_token

    assert _TOKEN.match(new_admin_token())
    vm = Appliance(state_dir=tmp_path, base_image=tmp_path / "b", data_disks=0)
    vm.state_dir.mkdir(exist_ok=True)
    vm.token_file.write_text("not-a-token\n")
    (tmp_path / "b").write_bytes(b"\0" * 512)
    vm.prepare()
    assert _TOKEN.match(vm.admin_token())
    assert (vm.token_file.stat().st_mode & 0o777) == 0o600


def test_machine_uuid_is_kept_with_the_appliance_state(tmp_path: Path) -> None:
    vm = Appliance(state_dir=tmp_path, base_image=tmp_path / "b")
    first = vm.qemu_argv(kvm=False)
    again = Appliance(state_dir=tmp_path, base_image=tmp_path / "b").qemu_argv(kvm=False)
    uuid = first[first.index("-uuid") + 1]
    assert len(uuid) == 36 and again[again.index("-uuid") + 1] == uuid
    other = Appliance(state_dir=tmp_path / "o", base_image=tmp_path / "b")
    (tmp_path / "o").mkdir()
    assert other.machine_uuid() != uuid


def test_switch_ports_listen_on_loopback_only_and_join_one_hub_per_segment(
        tmp_path: Path) -> None:
    sw = Switch(state_dir=tmp_path, segments={"storage": ("jbod", "a"), "cluster": ("a", "b")})
    sw.ports = {"storage-jbod": 41001, "storage-a": 41002, "cluster-a": 41003,
                "cluster-b": 41004}
    argv = sw.qemu_argv()
    netdevs = [argv[i + 1] for i, a in enumerate(argv) if a == "-netdev"]
    assert netdevs == [
        "socket,id=storage-jbod,listen=127.0.0.1:41001",
        "hubport,id=hub-storage-jbod,hubid=0,netdev=storage-jbod",
        "socket,id=storage-a,listen=127.0.0.1:41002",
        "hubport,id=hub-storage-a,hubid=0,netdev=storage-a",
        "socket,id=cluster-a,listen=127.0.0.1:41003",
        "hubport,id=hub-cluster-a,hubid=1,netdev=cluster-a",
        "socket,id=cluster-b,listen=127.0.0.1:41004",
        "hubport,id=hub-cluster-b,hubid=1,netdev=cluster-b"]
    assert argv[argv.index("-machine") + 1] == "none"  # a switch, no guest
    assert not any(a.startswith(("user", "tap", "bridge")) for a in netdevs)
    # a guest joins a port by connecting to it
    link = sw.link("cluster", "b", "52:54:00:5b:02:02")
    assert link == SocketLink("connect", 41004, "52:54:00:5b:02:02")
    with pytest.raises(ValueError):
        sw.set_link("cluster", "c", up=False)


def test_switch_names_become_qemu_ids_so_they_are_checked(tmp_path: Path) -> None:
    bads: list[dict[str, tuple[str, ...]]] = [
        {}, {"Storage": ("a",)}, {"storage": ("a b",)}, {"s": ("-a",)}]
    for bad in bads:
        with pytest.raises(ValueError):
            Switch(state_dir=tmp_path, segments=bad)


def test_kill_refuses_a_machine_that_is_not_running(tmp_path: Path) -> None:
    vm = Appliance(state_dir=tmp_path, base_image=tmp_path / "b")
    with pytest.raises(VmError):
        vm.kill()
