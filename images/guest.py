"""Tiny Linux guests that live on ZDS datastores, for the e2e tests: the appliance's own
kernel and initrd (read from its EFI partition without mounting anything), and a root
file system of a few MiB (busybox-static and an init script) in a bare ext4 image that is
written to a LUN or converted to a qcow2 on an NFS export.

The guest's init keeps state on its root file system and talks through the serial port:

  ZDSGUEST boot=N note=X     at every boot: N counts boots of this disk, X is /data/note
  ZDSGUEST wrote=Y           the kernel command line asked for zds.note=Y and the note was
                             not Y yet: it writes Y, syncs and reboots (a real guest reboot
                             inside the same QEMU process)
  ZDSGUEST done              the note is what was asked (or nothing was asked): power off

So one QEMU run with ``zds.note=A`` on a fresh disk boots twice (write A, reboot, find A),
and a disk restored from a snapshot shows the boot count and note it had then.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

BUSYBOX = Path("/bin/busybox")  # Debian's busybox-static
ESP_OFFSET = "1M"  # images/build.py: the ESP starts at 1 MiB
ROOT_SIZE_MIB = 32
APPLETS = ("sh", "mount", "umount", "sync", "cat", "echo", "mkdir", "reboot", "poweroff",
           "sleep", "ls", "rm")
INIT = """#!/bin/sh
# ZDS e2e guest init (images/guest.py): count boots, keep a note, reboot once to check it.
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -o remount,rw /
want=""
for arg in $(cat /proc/cmdline); do
  case "$arg" in zds.note=*) want="${arg#zds.note=}" ;; esac
done
boots=$(cat /var/boots 2>/dev/null || echo 0)
boots=$((boots + 1))
echo "$boots" > /var/boots
note=$(cat /data/note 2>/dev/null || echo -)
sync
echo "ZDSGUEST boot=$boots note=$note"
if [ -n "$want" ] && [ "$want" != "$note" ]; then
  echo "$want" > /data/note
  sync
  echo "ZDSGUEST wrote=$want"
  mount -o remount,ro /
  sync
  reboot -f
fi
echo "ZDSGUEST done"
mount -o remount,ro /
sync
poweroff -f
"""
BOOT_RE = re.compile(r"ZDSGUEST boot=(\d+) note=(\S+)")
WROTE_RE = re.compile(r"ZDSGUEST wrote=(\S+)")


class GuestError(RuntimeError):
    pass


@dataclass(frozen=True)
class GuestKernel:
    kernel: Path
    initrd: Path

    def cmdline(self, note: str = "") -> str:
        """root on the first virtio disk; ``note``: what the guest should write."""
        extra = f" zds.note={note}" if note else ""
        return f"root=/dev/vda rw rootfstype=ext4 console=ttyS0 quiet panic=-1{extra}"


def extract_kernel(raw_image: Path, dest: Path) -> GuestKernel:
    """The appliance image's kernel and initrd (virtio_blk + ext4 built in), from its ESP."""
    dest.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "MTOOLS_SKIP_CHECK": "1"}
    out = GuestKernel(dest / "vmlinuz", dest / "initrd.img")
    for name, path in (("vmlinuz", out.kernel), ("initrd.img", out.initrd)):
        path.unlink(missing_ok=True)
        subprocess.run(["mcopy", "-i", f"{raw_image}@@{ESP_OFFSET}", f"::/zds/{name}",
                        str(path)], env=env, check=True, capture_output=True)
    return out


def build_rootfs(dest: Path, size_mib: int = ROOT_SIZE_MIB) -> Path:
    """A bare ext4 image (no partition table: the whole disk is the root file system)."""
    if not BUSYBOX.exists():
        raise GuestError(f"{BUSYBOX} is missing: install busybox-static")
    tree = dest.with_suffix(".d")
    shutil.rmtree(tree, ignore_errors=True)
    for d in ("bin", "sbin", "proc", "sys", "dev", "data", "var"):
        (tree / d).mkdir(parents=True)
    shutil.copy(BUSYBOX, tree / "bin" / "busybox")
    for applet in APPLETS:
        (tree / "bin" / applet).symlink_to("busybox")
    init = tree / "sbin" / "init"
    init.write_text(INIT)
    init.chmod(0o755)
    dest.unlink(missing_ok=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-L", "zds-guest", "-d", str(tree), str(dest),
                    f"{size_mib}M"], check=True, capture_output=True)
    shutil.rmtree(tree)
    return dest


@dataclass
class GuestRun:
    """What one QEMU run of a guest printed."""

    log: str
    seconds: float
    exit_code: int | None
    boots: list[tuple[int, str]] = field(default_factory=list)  # (boot count, note found)
    wrote: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, log: str, seconds: float, exit_code: int | None) -> GuestRun:
        return cls(log, seconds, exit_code,
                   [(int(n), note) for n, note in BOOT_RE.findall(log)], WROTE_RE.findall(log))

    @property
    def done(self) -> bool:
        return "ZDSGUEST done" in self.log

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.splitlines()[-lines:])


def qemu_argv(kernel: GuestKernel, drive: list[str], note: str, serial_log: Path,
              memory_mib: int = 256) -> list[str]:
    """A diskless-but-for-``drive`` TCG machine without network, direct kernel boot."""
    return [
        "qemu-system-x86_64", "-name", "zds-e2e-guest", "-machine", "q35",
        "-accel", "tcg", "-cpu", "max", "-smp", "1", "-m", str(memory_mib),
        "-nodefaults", "-no-user-config", "-display", "none", "-nic", "none",
        "-kernel", str(kernel.kernel), "-initrd", str(kernel.initrd),
        "-append", kernel.cmdline(note),
        "-chardev", f"file,id=ser0,path={serial_log}", "-serial", "chardev:ser0",
        *drive,
    ]


def run_guest(kernel: GuestKernel, drive: list[str], note: str, serial_log: Path,
              timeout: float = 600.0) -> GuestRun:
    """Boots the guest until it powers itself off; a kernel panic or the timeout stops
    QEMU (by the PID of the process started here) and is reported in the result."""
    serial_log.write_bytes(b"")
    argv = qemu_argv(kernel, drive, note, serial_log)
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    rc: int | None = None
    try:
        while time.monotonic() - t0 < timeout:
            rc = proc.poll()
            if rc is not None:
                break
            if b"Kernel panic" in serial_log.read_bytes():
                time.sleep(1)
                break
            time.sleep(0.5)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
    log = serial_log.read_bytes().decode(errors="replace")
    if out.strip():
        log += "\n[qemu] " + out.strip()
    return GuestRun.parse(log, round(time.monotonic() - t0, 1), rc)


def iscsi_drive(port: int, target: str, initiator: str, lun: int = 0) -> list[str]:
    """QEMU's libiscsi driver, as Proxmox uses it: the URL form and the initiator name."""
    return ["-iscsi", f"initiator-name={initiator}",
            "-drive", f"file=iscsi://127.0.0.1:{port}/{target}/{lun},if=virtio,format=raw,"
                      "cache=none"]


def nfs_drive(export: str, image: str, fmt: str = "qcow2") -> list[str]:
    """QEMU's libnfs driver: nfs://127.0.0.1/EXPORT/IMAGE (NFSv3; libnfs finds the mount
    and NFS ports through the portmapper on 127.0.0.1:111)."""
    return ["-drive", f"file=nfs://127.0.0.1{export.rstrip('/')}/{image},if=virtio,"
                      f"format={fmt},cache=writeback"]
