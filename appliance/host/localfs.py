"""Small file-system actions the probes need: sync, drop caches, scratch directories."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from appliance.host.run import Runner


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
