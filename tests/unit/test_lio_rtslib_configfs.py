"""The real LIO adapter driving Debian's real rtslib-fb (the one the appliance ships) on an
emulated configfs: a temporary directory whose mkdir/rmdir and attribute writes behave
like target_core_mod's (kernel-made attribute files appear on mkdir, rmdir refuses while
user-made items or symlinks remain, vpd_unit_serial reads back with its label, 'control'
sets udev_path). It checks the adapter's use of the rtslib API, not the kernel.

rtslib comes from python3-rtslib-fb_*.deb (with python3-six and python3-pyudev) in the
image build's package cache, ${ZDS_CACHE}/images/debs, unpacked with dpkg-deb. The test
is skipped, saying so, on a machine where the image has never been built.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from appliance.host.contract import lio_checks
from appliance.host.lio import AclSpec, Chap, Lio, LunSpec, TargetSpec

DEVICES = ["/dev/zvol/ctpool/l0", "/dev/zvol/ctpool/l1"]


def _debs() -> list[str]:
    cache = os.environ.get("ZDS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache"), "zds")
    found = []
    for pkg in ("python3-rtslib-fb", "python3-six", "python3-pyudev"):
        hits = sorted(glob.glob(os.path.join(cache, "images", "debs", f"{pkg}_*.deb")))
        if not hits:
            return []
        found.append(hits[-1])
    return found


class Configfs:
    """What target_core_mod does to /sys/kernel/config/target, in a temporary directory."""

    def __init__(self, root: Path) -> None:
        self.root = str(root / "target")
        self.user_dirs: set[str] = set()
        self.real_mkdir: Callable[..., None] = os.mkdir
        self.real_rmdir: Callable[..., None] = os.rmdir

    def _files(self, base: str, entries: dict[str, str]) -> None:
        for rel, content in entries.items():
            p = os.path.join(base, rel)
            todo, d = [], os.path.dirname(p)
            while not os.path.isdir(d):
                todo.append(d)
                d = os.path.dirname(d)
            for d in reversed(todo):
                self.real_mkdir(d)
            Path(p).write_text(content)

    def populate(self, path: str) -> None:
        rel = os.path.relpath(path, self.root)
        parts = rel.split("/")
        auth = {"auth/userid": "NULL", "auth/password": "NULL", "auth/userid_mutual": "NULL",
                "auth/password_mutual": "NULL", "auth/authenticate_target": "0"}
        if rel == ".":
            self._files(path, {"dbroot": "/var/target", "version": "v5.0",
                               "core/alua/lu_gps/default_lu_gp/members": ""})
        elif parts[0] == "core" and len(parts) == 2:
            self._files(path, {"hba_info": "HBA Index: 1 plugin: iblock version: v5.0",
                               "hba_mode": "0"})
        elif parts[0] == "core" and len(parts) == 3:
            self._files(path, {
                "enable": "0", "control": "", "udev_path": "",
                "info": "Status: DEACTIVATED  Max Queue Depth: 0\n Major: 230 Minor: 0\n",
                "attrib/emulate_caw": "1", "attrib/emulate_3pc": "1",
                "attrib/emulate_tpu": "0", "attrib/emulate_tpws": "0",
                "attrib/is_nonrot": "0", "attrib/block_size": "512",
                "wwn/vpd_unit_serial": "T10 VPD Unit Serial Number: ",
                "alua/default_tg_pt_gp/tg_pt_gp_id": "0", "pr/res_type": "0"})
        elif parts[0] == "iscsi" and len(parts) == 1:
            self._files(path, {"discovery_auth/enforce_discovery_auth": "0"})
        elif parts[0] == "iscsi" and len(parts) == 3:
            self._files(path, {"enable": "0", "attrib/authentication": "0",
                               "attrib/generate_node_acls": "0",
                               "attrib/demo_mode_write_protect": "1",
                               "attrib/cache_dynamic_acls": "0",
                               "param/AuthMethod": "CHAP,None", **auth})
            for d in ("np", "lun", "acls"):
                self.real_mkdir(os.path.join(path, d))
        elif len(parts) == 5 and parts[3] == "np":
            self._files(path, {"iser": "0"})
        elif len(parts) == 5 and parts[3] == "lun":
            self._files(path, {"alua_tg_pt_gp": "default_tg_pt_gp"})
        elif len(parts) == 5 and parts[3] == "acls":
            self._files(path, {
                "info": f"No active iSCSI Session for Initiator Endpoint: {parts[4]}",
                "cmdsn_depth": "64", "tag": "", "attrib/dataout_timeout": "3", **auth})
        elif len(parts) == 6 and parts[3] == "acls":
            self._files(path, {"write_protect": "0"})

    def mkdir(self, path: Any, mode: int = 0o777) -> None:
        full = os.path.abspath(str(path))
        self.real_mkdir(full, mode)
        if full.startswith(self.root):
            self.user_dirs.add(full)
            self.populate(full)

    def rmdir(self, path: Any) -> None:
        full = os.path.abspath(str(path))
        if not full.startswith(self.root):
            self.real_rmdir(full)
            return
        for dirpath, dirnames, filenames in os.walk(full):
            for name in (*dirnames, *filenames):
                item = os.path.join(dirpath, name)
                if item in self.user_dirs or os.path.islink(item):
                    raise OSError(39, "Directory not empty", full)
        for dirpath, dirnames, filenames in os.walk(full, topdown=False):
            for f in filenames:
                os.unlink(os.path.join(dirpath, f))
            for d in dirnames:
                self.real_rmdir(os.path.join(dirpath, d))
        self.real_rmdir(full)
        self.user_dirs.discard(full)

    def fwrite(self, path: Any, string: Any) -> None:
        path, value = str(path), str(string)
        if path.endswith("/control"):
            m = re.match(r"udev_path=(.*)", value.strip())
            if m:
                Path(os.path.dirname(path), "udev_path").write_text(m.group(1))
            return
        if path.endswith("wwn/vpd_unit_serial"):
            value = "T10 VPD Unit Serial Number: " + value.strip()
        Path(path).write_text(value.strip() + "\n")

    def snapshot(self) -> dict[str, str]:
        out = {}
        for dirpath, _dirs, filenames in os.walk(self.root):
            for f in filenames:
                p = os.path.join(dirpath, f)
                out[p] = os.readlink(p) if os.path.islink(p) else Path(p).read_text()
        return out


@pytest.fixture
def real_lio(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Lio, Configfs]]:
    debs = _debs()
    if not debs:
        pytest.skip("Debian's python3-rtslib-fb .deb is not in the image package cache "
                    "(build the image once: ./zds-appliance build)")
    unpacked = tmp_path / "debs"
    for deb in debs:
        subprocess.run(["dpkg-deb", "-x", deb, str(unpacked)], check=True)
    for name in [m for m in sys.modules if m == "rtslib_fb" or m.startswith("rtslib_fb.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(unpacked / "usr/lib/python3/dist-packages"))
    import rtslib_fb

    cfs = Configfs(tmp_path / "configfs")
    monkeypatch.setattr(os, "mkdir", cfs.mkdir)
    monkeypatch.setattr(os, "rmdir", cfs.rmdir)
    mods: list[ModuleType] = [getattr(rtslib_fb, m) for m in
                              ("utils", "node", "tcm", "target", "fabric", "root", "alua")]
    for mod in mods:
        if hasattr(mod, "fwrite"):
            monkeypatch.setattr(mod, "fwrite", cfs.fwrite)
        if hasattr(mod, "modprobe"):
            monkeypatch.setattr(mod, "modprobe", lambda _module: None)
        if hasattr(mod, "mount_configfs"):
            monkeypatch.setattr(mod, "mount_configfs", lambda: None)
    monkeypatch.setattr(rtslib_fb.node.CFSNode, "configfs_dir", cfs.root)
    monkeypatch.setattr(rtslib_fb.tcm, "get_blockdev_type",
                        lambda path: 0 if str(path) in DEVICES else None)
    monkeypatch.setattr(rtslib_fb.tcm, "is_dev_in_use", lambda _path: False)
    monkeypatch.setattr(rtslib_fb.tcm, "lock_file", str(tmp_path / "rtslib.lock"))
    monkeypatch.setattr(rtslib_fb.root.RTSRoot, "_preferred_dbroot", str(tmp_path / "dbroot"))
    os.makedirs(cfs.root)
    cfs.populate(cfs.root)
    yield Lio(device_check=lambda p: p in DEVICES), cfs
    for name in [m for m in sys.modules if m == "rtslib_fb" or m.startswith("rtslib_fb.")]:
        del sys.modules[name]


def test_contract_on_real_rtslib(real_lio: tuple[Lio, Configfs]) -> None:
    lio, _cfs = real_lio
    assert lio.available()
    lio_checks.run_all(lio, DEVICES, "/dev/zvol/ctpool/missing")
    assert lio.list_targets() == [] and lio.list_backstores() == []


def test_serial_idempotence_and_sessions_on_real_rtslib(real_lio: tuple[Lio, Configfs]) -> None:
    lio, cfs = real_lio
    spec = TargetSpec("iqn.2026-11.org.zds:vm01", (
        LunSpec("zds-vm01", DEVICES[0], "6a1e5c3d-0000-4000-8000-000000000001"),),
        (AclSpec("iqn.1998-01.com.vmware:esx1", Chap("esx", "secret123456")),))
    lio.apply_target(spec)
    serial = glob.glob(f"{cfs.root}/core/iblock_*/zds-vm01/wwn/vpd_unit_serial")
    assert Path(serial[0]).read_text().strip() == (
        "T10 VPD Unit Serial Number: 6a1e5c3d-0000-4000-8000-000000000001")
    before = cfs.snapshot()
    lio.apply_target(spec)
    assert cfs.snapshot() == before, "a repeated apply must not write to configfs"
    info = Path(cfs.root, "iscsi/iqn.2026-11.org.zds:vm01/tpgt_1/acls",
                "iqn.1998-01.com.vmware:esx1/info")
    info.write_text(
        "InitiatorName: iqn.1998-01.com.vmware:esx1\nInitiatorAlias: esx1\n"
        "LIO Session ID: 3   ISID: 0x00023d000001  TSIH: 3  SessionType: Normal\n"
        "Session State: TARG_SESS_STATE_LOGGED_IN\n"
        "---------------------[iSCSI Session Values]-----------------------\n"
        "CID: 0   Connection State: TARG_CONN_STATE_LOGGED_IN\n"
        "   Address 10.0.2.2 TCP  StatSN: 7\n")
    assert lio.list_targets()[0].sessions == ("iqn.1998-01.com.vmware:esx1",)
    lio.remove_target(spec.iqn)
    assert lio.list_targets() == [] and lio.list_backstores() == []
