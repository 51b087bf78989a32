"""Small file-system actions the probes need: sync, drop caches, scratch directories, and
a throw-away ext4 on a probe's scratch block device (file-set profiles on a zvol/LUN)."""

from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path
from typing import Protocol

from appliance.host.run import Runner

# lazy init and no discard: a fresh sparse zvol is zeroed already, and under emulation
# initialising inode tables or discarding every block takes longer than the probe
MKFS_EXT4 = ("mkfs.ext4", "-q", "-F", "-m", "0",
             "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard")


class DeviceFs(Protocol):
    """A throw-away file system on a probe's scratch block device (:class:`LocalFs`)."""

    def mount_new_filesystem(self, device: str, mountpoint: str) -> str: ...

    def unmount(self, mountpoint: str) -> None: ...


class LocalFs:
    def __init__(self, runner: Runner, proc_root: str = "/proc") -> None:
        self._runner = runner
        self._proc = Path(proc_root)

    def sync(self, path: str, timeout: float = 600.0) -> float:
        """Flushes the file system holding ``path`` (``sync -f``); returns seconds taken."""
        t0 = time.monotonic()
        self._runner.run(["sync", "-f", path], timeout=timeout)
        return time.monotonic() - t0

    def drop_caches(self) -> bool:
        """Drops the page cache (needs root); False when not allowed."""
        self._runner.run(["sync"], timeout=600)
        try:
            (self._proc / "sys" / "vm" / "drop_caches").write_text("3\n")
        except OSError:
            return False
        return True

    def make_dir(self, path: str) -> None:
        Path(path).mkdir(parents=True, exist_ok=True, mode=0o700)

    def remove_tree(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def mount_new_filesystem(self, device: str, mountpoint: str) -> str:
        """Makes an ext4 on ``device`` (whatever it held is lost: callers pass only a
        probe's own scratch device) and mounts it at ``mountpoint``; returns "ext4"."""
        self._runner.run([*MKFS_EXT4, device], timeout=600)
        Path(mountpoint).mkdir(parents=True, exist_ok=True, mode=0o700)
        self._runner.run(["mount", "-t", "ext4", "-o", "noatime", device, mountpoint],
                         timeout=120)
        return "ext4"

    def unmount(self, mountpoint: str) -> None:
        unmount_and_remove(self._runner, mountpoint, timeout=120)


def unmount_and_remove(runner: Runner, mountpoint: str, timeout: float = 60.0) -> None:
    """Unmounts (lazily if busy) and removes the empty mountpoint; never raises for a
    mount that is already gone (probe teardown and crash cleanup call it blindly)."""
    if not runner.run(["umount", mountpoint], check=False, timeout=timeout).ok:
        runner.run(["umount", "-l", mountpoint], check=False, timeout=60)
    with contextlib.suppress(OSError):
        Path(mountpoint).rmdir()


def fs_usage(path: str) -> tuple[int, int]:
    """(total, used) bytes of the file system holding ``path`` (statvfs)."""
    import os

    st = os.statvfs(path)
    total = st.f_blocks * st.f_frsize
    free = st.f_bavail * st.f_frsize
    return total, total - free


def is_block_device(path: str) -> bool:
    import os
    import stat

    try:
        return stat.S_ISBLK(os.stat(path).st_mode)
    except OSError:
        return False
