"""The real LIO adapter (appliance.host.lio.Lio) driving the real rtslib-fb on an emulated
configfs: a temporary directory whose mkdir/rmdir and attribute writes behave like
target_core_mod's (kernel-made attribute files appear on mkdir, rmdir refuses while
user-made items or symlinks remain, vpd_unit_serial reads back with its label, 'control'
sets udev_path). It checks the adapter's use of the rtslib API and its own configfs
reader, not the kernel (the contract runs against the kernel in the booted image).

rtslib is Debian's python3-rtslib-fb (with python3-six and python3-pyudev) from the image
build's package cache, ${ZDS_CACHE}/images/debs, when the image has been built here, and
otherwise the same release from PyPI (a dev dependency).
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

from appliance.errors import Conflict, InvalidInput, NotFound, Unavailable
from appliance.host.contract import lio_checks
from appliance.host.lio import (
    APTPL_DIR,
    VAAI_ATTRIBUTES,
    AclSpec,
    Chap,
    Lio,
    LunSpec,
    TargetSpec,
)

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
    for name in [m for m in sys.modules if m == "rtslib_fb" or m.startswith("rtslib_fb.")]:
        monkeypatch.delitem(sys.modules, name)
    debs = _debs()
    if debs:  # the very rtslib the appliance ships, once the image has been built here
        unpacked = tmp_path / "debs"
        for deb in debs:
            subprocess.run(["dpkg-deb", "-x", deb, str(unpacked)], check=True)
        monkeypatch.syspath_prepend(str(unpacked / "usr/lib/python3/dist-packages"))
    import rtslib_fb  # else the same release from PyPI (the dev dependencies)

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
    # the kernel opens a backstore's device exclusively: a second one on it is refused
    monkeypatch.setattr(rtslib_fb.tcm, "is_dev_in_use", lambda path: any(
        Path(p).read_text().strip() == str(path)
        for p in glob.glob(f"{cfs.root}/core/iblock_*/*/udev_path")))
    monkeypatch.setattr(rtslib_fb.tcm, "lock_file", str(tmp_path / "rtslib.lock"))
    monkeypatch.setattr(rtslib_fb.root.RTSRoot, "_preferred_dbroot", str(tmp_path / "dbroot"))
    os.makedirs(cfs.root)
    cfs.populate(cfs.root)
    Path(cfs.root, "dbroot").write_text(str(tmp_path / "dbroot"))
    mounts = tmp_path / "mounts"  # the pool's datastores file system, for APTPL files
    mounts.write_text(f"ctpool/datastores {tmp_path / 'ctpool-mnt'} zfs rw,noatime 0 0\n")
    yield Lio(device_check=lambda p: p in DEVICES, configfs_root=cfs.root,
              mounts_file=str(mounts)), cfs
    for name in [m for m in sys.modules if m == "rtslib_fb" or m.startswith("rtslib_fb.")]:
        del sys.modules[name]


def spec(**kw: Any) -> TargetSpec:
    base: dict[str, Any] = {
        "iqn": "iqn.2026-11.org.zds:vm01",
        "luns": (LunSpec("zds-vm01", DEVICES[0], "6a1e5c3d-0000-4000-8000-000000000001"),),
        "acls": (AclSpec("iqn.1998-01.com.vmware:esx1", Chap("esx", "secret123456")),),
    }
    base.update(kw)
    return TargetSpec(**base)


def _tpg(cfs: Configfs, iqn: str = "iqn.2026-11.org.zds:vm01") -> Path:
    return Path(cfs.root, "iscsi", iqn, "tpgt_1")


def _login(cfs: Configfs, initiator: str, iqn: str = "iqn.2026-11.org.zds:vm01") -> None:
    """What the kernel shows in an ACL's info while that initiator is logged in."""
    (_tpg(cfs, iqn) / "acls" / initiator / "info").write_text(
        f"InitiatorName: {initiator}\nInitiatorAlias: esx1\n"
        "LIO Session ID: 3   ISID: 0x00023d000001  TSIH: 3  SessionType: Normal\n"
        "Session State: TARG_SESS_STATE_LOGGED_IN\n"
        "---------------------[iSCSI Session Values]-----------------------\n"
        "CID: 0   Connection State: TARG_CONN_STATE_LOGGED_IN\n"
        "   Address 10.0.2.2 TCP  StatSN: 7\n")


def test_contract_on_real_rtslib(real_lio: tuple[Lio, Configfs]) -> None:
    lio, _cfs = real_lio
    assert lio.available()
    lio_checks.run_all(lio, DEVICES, "/dev/zvol/ctpool/missing")
    assert lio.list_targets() == [] and lio.list_backstores() == []


def test_serial_set_at_creation_vaai_on_and_read_back_from_configfs(
        real_lio: tuple[Lio, Configfs]) -> None:
    lio, cfs = real_lio
    lio.apply_target(spec())
    serial = glob.glob(f"{cfs.root}/core/iblock_*/zds-vm01/wwn/vpd_unit_serial")
    assert Path(serial[0]).read_text().strip() == (
        "T10 VPD Unit Serial Number: 6a1e5c3d-0000-4000-8000-000000000001")
    tpg = _tpg(cfs)
    assert (tpg / "enable").read_text().strip() == "1"
    assert (tpg / "attrib" / "authentication").read_text().strip() == "1"
    assert (tpg / "np" / "0.0.0.0:3260").is_dir()
    acl = tpg / "acls" / "iqn.1998-01.com.vmware:esx1"
    assert (acl / "auth" / "userid").read_text().strip() == "esx"
    assert (acl / "lun_0").is_dir()
    live = lio.get_target("iqn.2026-11.org.zds:vm01")
    assert live is not None and live.spec.luns[0].attributes == dict(VAAI_ATTRIBUTES)
    assert live.spec == lio.list_targets()[0].spec
    assert lio.get_target("iqn.2026-11.org.zds:nosuch") is None


def test_second_apply_writes_nothing(real_lio: tuple[Lio, Configfs]) -> None:
    lio, cfs = real_lio
    lio.apply_target(spec())
    before = cfs.snapshot()
    lio.apply_target(spec())
    assert cfs.snapshot() == before, "a repeated apply must not write to configfs"


def test_sessions_are_read_back_and_acl_removal_ends_them(
        real_lio: tuple[Lio, Configfs]) -> None:
    lio, cfs = real_lio
    lio.apply_target(spec())
    _login(cfs, "iqn.1998-01.com.vmware:esx1")
    (live,) = lio.list_targets()
    assert live.sessions == ("iqn.1998-01.com.vmware:esx1",)
    lio.apply_target(spec(acls=(AclSpec("iqn.2026-11.org.example.kvm:h1"),)))
    (live,) = lio.list_targets()
    assert live.sessions == ()
    assert lio.tpg_attributes("iqn.2026-11.org.zds:vm01")["authentication"] == 0


def test_backstore_device_taken_by_another_name(real_lio: tuple[Lio, Configfs]) -> None:
    lio, cfs = real_lio
    lio.apply_target(spec())
    other = spec(iqn="iqn.2026-11.org.zds:vm02",
                 luns=(LunSpec("zds-vm02", DEVICES[0], "6a1e5c3d-0000-4000-8000-000000000002"),))
    with pytest.raises(Conflict, match="already in use"):
        lio.apply_target(other)
    assert not Path(cfs.root, "iscsi", "iqn.2026-11.org.zds:vm02").exists()


def test_changed_serial_recreates_unshared_backstore(real_lio: tuple[Lio, Configfs]) -> None:
    lio, cfs = real_lio
    lio.apply_target(spec())
    new = spec(luns=(LunSpec("zds-vm01", DEVICES[0], "6a1e5c3d-0000-4000-8000-0000000000ff"),))
    lio.apply_target(new)
    (live,) = lio.list_targets()
    assert live.spec.luns[0].serial == "6a1e5c3d-0000-4000-8000-0000000000ff"
    assert (_tpg(cfs) / "acls" / "iqn.1998-01.com.vmware:esx1" / "lun_0").is_dir()


def test_a_batch_applies_every_good_target_and_reports_each_bad_one(
        real_lio: tuple[Lio, Configfs]) -> None:
    lio, _cfs = real_lio
    good = [spec(iqn=f"iqn.2026-11.org.zds:vm0{i}",
                 luns=(LunSpec(f"zds-vm0{i}", DEVICES[i],
                               f"6a1e5c3d-0000-4000-8000-00000000000{i}"),))
            for i in range(2)]
    clash = spec(iqn="iqn.2026-11.org.zds:vm09",
                 luns=(LunSpec("zds-vm09", DEVICES[0], "6a1e5c3d-0000-4000-8000-000000000009"),))
    missing = spec(iqn="iqn.2026-11.org.zds:vm08",
                   luns=(LunSpec("zds-vm08", "/dev/zvol/ctpool/none", "abc"),))
    failed = lio.apply_targets([*good, clash, missing])
    assert set(failed) == {clash.iqn, missing.iqn}, failed
    assert isinstance(failed[clash.iqn], Conflict)
    assert isinstance(failed[missing.iqn], NotFound)
    assert [t.spec.iqn for t in lio.list_targets()] == [g.iqn for g in good]
    assert lio.list_backstores() == ["zds-vm00", "zds-vm01"]
    assert lio.apply_targets(good) == {}  # idempotent


def test_hostile_input_never_reaches_rtslib(real_lio: tuple[Lio, Configfs]) -> None:
    lio, cfs = real_lio
    lio.available()
    before = cfs.snapshot()
    for bad in ("iqn.2026-11.org.zds:x\nrm", "iqn.2026-11.org.zds:../../x", "-iqn"):
        with pytest.raises(InvalidInput):
            lio.apply_target(spec(iqn=bad))
    with pytest.raises(InvalidInput):
        lio.apply_target(spec(luns=(LunSpec("../etc", DEVICES[0], "abc"),)))
    with pytest.raises(InvalidInput):
        lio.apply_target(spec(luns=(LunSpec("ok", DEVICES[0], "bad serial"),)))
    with pytest.raises(NotFound):
        lio.apply_target(spec(luns=(LunSpec("ok", "/dev/zvol/none", "abc"),)))
    assert cfs.snapshot() == before


def test_without_rtslib_or_configfs_everything_is_unavailable(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "rtslib_fb", None)
    real = Lio(configfs_root=str(tmp_path / "no-configfs"))
    assert real.available() is False
    with pytest.raises(Unavailable):
        real.list_targets()
    with pytest.raises(Unavailable):
        real.remove_target("iqn.2026-11.org.zds:vm01")


def test_dbroot_pr_and_alua_made_and_backstore_cache_dropped(
        real_lio: tuple[Lio, Configfs], tmp_path: Path) -> None:
    lio, _cfs = real_lio
    rtslib = sys.modules["rtslib_fb"]
    rtslib.tcm.bs_cache["iblock/stale"] = 7
    lio.apply_target(spec())
    assert (tmp_path / "dbroot").is_dir()
    # the kernel writes persistent-reservation state here; PR OUT fails without it
    assert (tmp_path / "dbroot" / "pr").is_dir() and (tmp_path / "dbroot" / "alua").is_dir()
    assert "iblock/stale" not in rtslib.tcm.bs_cache


def test_a_luns_aptpl_registrations_are_read_from_its_pool_when_its_backstore_is_made(
        real_lio: tuple[Lio, Configfs], tmp_path: Path) -> None:
    """The pool came from the other node with a registration in its APTPL file: the
    link under the dbroot is made before the backstore, so rtslib reads the pool's file
    and hands it to the kernel (res_aptpl_metadata); the kernel's next write goes
    through the same link to the pool."""
    lio, cfs = real_lio
    serial = "6a1e5c3d-0000-4000-8000-000000000001"
    home = tmp_path / "ctpool-mnt" / APTPL_DIR
    home.mkdir(parents=True)
    (home / f"aptpl_{serial}").write_text(
        "PR_REG_START: 0\ninitiator_fabric=iSCSI\n"
        "initiator_node=iqn.1998-01.com.vmware:esx1\nsa_res_key=195\nPR_REG_END: 0\n")
    lun = LunSpec("zds-vm01", DEVICES[0], serial, pr_dataset="ctpool/datastores")
    lio.apply_target(spec(luns=(lun,)))
    link = tmp_path / "dbroot" / "pr" / f"aptpl_{serial}"
    assert os.readlink(link) == str(home / f"aptpl_{serial}")
    [meta] = glob.glob(f"{cfs.root}/core/iblock_*/zds-vm01/pr/res_aptpl_metadata")
    assert "initiator_node=iqn.1998-01.com.vmware:esx1" in Path(meta).read_text()
    assert "sa_res_key=195" in Path(meta).read_text()
    # the pool's file system is not mounted here: LIO's default, a file of its own
    other = LunSpec("zds-vm02", DEVICES[1], "6a1e5c3d-0000-4000-8000-000000000002",
                    pr_dataset="otherpool/datastores")
    lio.apply_target(spec(iqn="iqn.2026-11.org.zds:vm02", luns=(other,)))
    assert not os.path.lexists(tmp_path / "dbroot" / "pr" / f"aptpl_{other.serial}")


def test_reader_skips_what_vanishes_mid_walk(real_lio: tuple[Lio, Configfs]) -> None:
    """A writer may remove an object between a listing and a read: the reader skips it."""
    lio, cfs = real_lio
    lio.apply_target(spec())
    udev = glob.glob(f"{cfs.root}/core/iblock_*/zds-vm01/udev_path")[0]
    os.unlink(udev)  # as if the backstore went away between listdir and read
    (live,) = lio.list_targets()
    assert live.spec.luns == ()
    # gone: backstore names come from listings only (rmtree around the fixture's rmdir)
    subprocess.run(["rm", "-r", os.path.dirname(udev)], check=True)
    assert lio.list_backstores() == []
    assert lio.summarize_targets()["iqn.2026-11.org.zds:vm01"].luns == 1, \
        "the summary counts the LUN entry; the full read found it dangling"
