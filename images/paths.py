"""Where the image build and the QEMU harness keep their files (always outside the repo)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def cache_root() -> Path:
    """${ZDS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/zds} (same rule as scripts/venv-path)."""
    env = os.environ.get("ZDS_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "zds"


def images_dir() -> Path:
    return cache_root() / "images"


def vm_dir() -> Path:
    """State of the appliance started by `./zds-appliance run` (data disks survive stop/start)."""
    return cache_root() / "vm"
