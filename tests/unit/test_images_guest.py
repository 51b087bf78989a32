"""The e2e suite's tiny guests (images/guest.py): what QEMU is asked to do, the root file
system they boot, and how their serial output is read."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from images import guest

K = guest.GuestKernel(Path("/k/vmlinuz"), Path("/k/initrd.img"))


def test_guest_machine_has_no_network_and_boots_the_given_disk(tmp_path: Path) -> None:
    drive = guest.iscsi_drive(13260, "iqn.2026-11.io.zds:zds.lun", "iqn.2026-11.org.example:h")
    argv = guest.qemu_argv(K, drive, "A-1", tmp_path / "serial.log")
    assert argv[argv.index("-nic") + 1] == "none" and "-nodefaults" in argv
    assert not any(a.startswith(("user,", "-netdev")) for a in argv)
    assert argv[argv.index("-append") + 1].endswith("panic=-1 zds.note=A-1")
    assert "initiator-name=iqn.2026-11.org.example:h" in argv
    assert ("file=iscsi://127.0.0.1:13260/iqn.2026-11.io.zds:zds.lun/0,if=virtio,format=raw,"
            "cache=none") in argv
    nfs = guest.nfs_drive("/tank/datastores/kvm/", "guest.qcow2")
    assert nfs[1].startswith("file=nfs://127.0.0.1/tank/datastores/kvm/guest.qcow2,")
    assert "zds.note" not in K.cmdline("")


def test_serial_output_is_read_into_boots_and_notes() -> None:
    log = ("[    0.0] Linux version 6.1\nZDSGUEST boot=1 note=-\nZDSGUEST wrote=A-1\n"
           "reboot: Restarting system\nZDSGUEST boot=2 note=A-1\nZDSGUEST done\n")
    r = guest.GuestRun.parse(log, 12.5, 0)
    assert r.boots == [(1, "-"), (2, "A-1")] and r.wrote == ["A-1"] and r.done
    assert not guest.GuestRun.parse("Kernel panic - not syncing", 3.0, None).done


@pytest.mark.skipif(not guest.BUSYBOX.exists() or shutil.which("debugfs") is None,
                    reason="busybox-static / e2fsprogs not installed (scripts/setup-host.sh)")
def test_root_file_system_has_busybox_and_the_init(tmp_path: Path) -> None:
    img = guest.build_rootfs(tmp_path / "g.ext4", size_mib=16)
    assert img.stat().st_size == 16 << 20
    ls = subprocess.run(["debugfs", "-R", "ls -l /sbin", str(img)], capture_output=True,
                        text=True, check=True).stdout
    assert "init" in ls
    init = subprocess.run(["debugfs", "-R", "cat /sbin/init", str(img)], capture_output=True,
                          text=True, check=True).stdout
    assert init == guest.INIT
    assert not (tmp_path / "g.d").exists()
