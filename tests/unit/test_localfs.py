"""LocalFs: the throw-away ext4 a file-set probe gets on a scratch zvol or LUN."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.errors import HostCommandFailed
from appliance.host.localfs import LocalFs
from appliance.host.run import RecordingRunner


def test_new_filesystem_is_made_then_mounted(tmp_path: Path) -> None:
    runner = RecordingRunner()
    mnt = str(tmp_path / "fs-ab12")
    assert LocalFs(runner).mount_new_filesystem("/dev/zd16", mnt) == "ext4"
    mkfs, mount = runner.calls
    assert mkfs[0] == "mkfs.ext4" and mkfs[-1] == "/dev/zd16" and "nodiscard" in mkfs[-2]
    assert mount == ("mount", "-t", "ext4", "-o", "noatime", "/dev/zd16", mnt)
    assert Path(mnt).is_dir()


def test_a_failed_mkfs_mounts_nothing(tmp_path: Path) -> None:
    runner = RecordingRunner()
    runner.on(["mkfs.ext4"], returncode=1, stderr="mkfs.ext4: Device size reported to be zero")
    with pytest.raises(HostCommandFailed):
        LocalFs(runner).mount_new_filesystem("/dev/sdz", str(tmp_path / "m"))
    assert [c[0] for c in runner.calls] == ["mkfs.ext4"]


def test_unmount_falls_back_to_lazy_and_removes_the_mountpoint(tmp_path: Path) -> None:
    runner = RecordingRunner()
    mnt = tmp_path / "fs-ab12"
    mnt.mkdir()
    runner.on(["umount", str(mnt)], returncode=32, stderr="target is busy")
    LocalFs(runner).unmount(str(mnt))
    assert runner.calls == [("umount", str(mnt)), ("umount", "-l", str(mnt))]
    assert not mnt.exists()
