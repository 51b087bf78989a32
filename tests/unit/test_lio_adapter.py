"""The real LIO adapter (appliance.host.lio.Lio) on a stand-in for rtslib-fb.

This host has no configfs, so the rtslib calls the adapter makes are answered by a small
in-memory model of the rtslib-fb 2.1 objects it uses (RTSRoot, FabricModule, Target,
TPG, NetworkPortal, LUN, NodeACL, MappedLUN, BlockStorageObject). The model keeps the
rtslib behaviours the adapter relies on: 'lookup'/'create'/'any' modes, the IQN check
(two dots after the date), exclusive device use, LUN.delete dropping mapped LUNs,
StorageObject.delete dropping attached LUNs, ACL delete ending the session. The same
contract checks as for FakeLio run on top, and the real rtslib runs them in the image.
"""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from appliance.errors import Conflict, InvalidInput, NotFound, Unavailable
from appliance.host.contract import lio_checks
from appliance.host.lio import VAAI_ATTRIBUTES, AclSpec, Chap, Lio, LunSpec, TargetSpec

DEVICES = ["/dev/zvol/ctpool/l0", "/dev/zvol/ctpool/l1"]


class RTSLibError(Exception):
    pass


@dataclass
class _SO:
    name: str
    dev: str
    serial: str
    attrs: dict[str, str] = field(default_factory=lambda: {
        "emulate_caw": "1", "emulate_3pc": "1", "emulate_tpu": "0", "emulate_tpws": "0",
        "is_nonrot": "0", "block_size": "512"})


@dataclass
class _Acl:
    auth: dict[str, str] = field(default_factory=lambda: {
        "userid": "", "password": "", "userid_mutual": "", "password_mutual": ""})
    mapped: dict[int, int] = field(default_factory=dict)
    session: bool = False


@dataclass
class _Tpg:
    enable: bool = False
    portals: set[tuple[str, int]] = field(default_factory=set)
    luns: dict[int, str] = field(default_factory=dict)
    acls: dict[str, _Acl] = field(default_factory=dict)
    attrs: dict[str, str] = field(default_factory=lambda: {
        "authentication": "0", "generate_node_acls": "0", "demo_mode_write_protect": "1",
        "cache_dynamic_acls": "0"})


@dataclass
class World:
    devices: set[str]
    storage: dict[str, _SO] = field(default_factory=dict)
    targets: dict[str, dict[int, _Tpg]] = field(default_factory=dict)
    writes: int = 0


W = World(set())


def _mode(exists: bool, mode: str, what: str) -> None:
    if mode == "lookup" and not exists:
        raise RTSLibError(f"No such {what} in configfs")
    if mode == "create" and exists:
        raise RTSLibError(f"This {what} already exists in configFS")


class BlockStorageObject:
    plugin = "block"

    def __init__(self, name: str, dev: str | None = None, wwn: str | None = None) -> None:
        self.name = name
        if dev is None:
            _mode(name in W.storage, "lookup", "storage object")
            return
        _mode(name in W.storage, "create", "storage object")
        if dev not in W.devices:
            raise RTSLibError(f"Device {dev} is not a TYPE_DISK block device")
        if any(s.dev == dev for s in W.storage.values()):
            raise RTSLibError(f"Cannot configure StorageObject because device {dev} is "
                              "already in use")
        W.storage[name] = _SO(name, dev, wwn or "generated-serial")
        W.writes += 1

    @property
    def _s(self) -> _SO:
        return W.storage[self.name]

    @property
    def udev_path(self) -> str:
        return self._s.dev

    @property
    def wwn(self) -> str:
        return self._s.serial

    def get_attribute(self, key: str) -> str:
        if key not in self._s.attrs:
            raise RTSLibError(f"Cannot find attribute: {key}")
        return self._s.attrs[key]

    def set_attribute(self, key: str, value: str) -> None:
        self.get_attribute(key)
        self._s.attrs[key] = str(value)
        W.writes += 1

    @property
    def attached_luns(self) -> Iterator[LUN]:
        for iqn, tpgs in W.targets.items():
            for tag, tpg in tpgs.items():
                for n, so in tpg.luns.items():
                    if so == self.name:
                        yield LUN(TPG(Target(FabricModule("iscsi"), iqn), tag), n)

    def delete(self) -> None:
        for lun in list(self.attached_luns):
            lun.delete()
        del W.storage[self.name]
        W.writes += 1


class RTSRoot:
    _preferred_dbroot = ""  # set per test: Debian's is /etc/rtslib-fb-target

    @property
    def storage_objects(self) -> Iterator[BlockStorageObject]:
        for name in list(W.storage):
            yield BlockStorageObject(name)


class FabricModule:
    def __init__(self, name: str) -> None:
        assert name == "iscsi"
        self.exists = True

    def _check_self(self) -> None:
        pass

    @property
    def targets(self) -> Iterator[Target]:
        for iqn in list(W.targets):
            yield Target(self, iqn, mode="lookup")


_IQN = re.compile(r"iqn\.[0-9]{4}-[0-1][0-9]\..*\..*")


class Target:
    def __init__(self, fabric: FabricModule, wwn: str, mode: str = "any") -> None:
        wwn = wwn.strip().lower()
        if not _IQN.match(wwn) or " " in wwn or "_" in wwn:
            raise RTSLibError("WWN not valid as: iqn, naa, eui")
        _mode(wwn in W.targets, mode, "Target")
        self.wwn = wwn
        if wwn not in W.targets:
            W.targets[wwn] = {}
            W.writes += 1

    @property
    def tpgs(self) -> Iterator[TPG]:
        for tag in list(W.targets[self.wwn]):
            yield TPG(self, tag, mode="lookup")

    def delete(self) -> None:
        for tpg in list(self.tpgs):
            tpg.delete()
        del W.targets[self.wwn]
        W.writes += 1


class TPG:
    def __init__(self, target: Target, tag: int, mode: str = "any") -> None:
        self.parent_target = target
        self.tag = int(tag)
        tpgs = W.targets[target.wwn]
        _mode(self.tag in tpgs, mode, "TPG")
        if self.tag not in tpgs:
            tpgs[self.tag] = _Tpg()
            W.writes += 1

    @property
    def _t(self) -> _Tpg:
        return W.targets[self.parent_target.wwn][self.tag]

    @property
    def enable(self) -> bool:
        return self._t.enable

    @enable.setter
    def enable(self, value: bool) -> None:
        self._t.enable = bool(value)
        W.writes += 1

    def get_attribute(self, key: str) -> str:
        return self._t.attrs[key]

    def set_attribute(self, key: str, value: str) -> None:
        if key not in self._t.attrs:
            raise RTSLibError(f"Cannot find attribute: {key}")
        self._t.attrs[key] = str(value)
        W.writes += 1

    @property
    def network_portals(self) -> Iterator[NetworkPortal]:
        for ip, port in sorted(self._t.portals):
            yield NetworkPortal(self, ip, port, mode="lookup")

    @property
    def luns(self) -> Iterator[LUN]:
        for n in sorted(self._t.luns):
            yield LUN(self, n)

    @property
    def node_acls(self) -> Iterator[NodeACL]:
        for wwn in sorted(self._t.acls):
            yield NodeACL(self, wwn, mode="lookup")

    def delete(self) -> None:
        for acl in list(self.node_acls):
            acl.delete()
        for lun in list(self.luns):
            lun.delete()
        del W.targets[self.parent_target.wwn][self.tag]


class NetworkPortal:
    def __init__(self, tpg: TPG, ip_address: str, port: int = 3260, mode: str = "any") -> None:
        self.parent_tpg, self.ip_address, self.port = tpg, ip_address, int(port)
        key = (ip_address, int(port))
        _mode(key in tpg._t.portals, mode, "NetworkPortal")
        if key not in tpg._t.portals:
            tpg._t.portals.add(key)
            W.writes += 1

    def delete(self) -> None:
        self.parent_tpg._t.portals.discard((self.ip_address, self.port))
        W.writes += 1


class LUN:
    def __init__(self, tpg: TPG, lun: int, storage_object: BlockStorageObject | None = None
                 ) -> None:
        self.parent_tpg, self.lun = tpg, int(lun)
        if storage_object is None:
            _mode(self.lun in tpg._t.luns, "lookup", "LUN")
            return
        _mode(self.lun in tpg._t.luns, "create", "LUN")
        if storage_object.name not in W.storage:
            raise RTSLibError("storage_object does not exist in configFS")
        tpg._t.luns[self.lun] = storage_object.name
        W.writes += 1

    @property
    def storage_object(self) -> BlockStorageObject:
        return BlockStorageObject(self.parent_tpg._t.luns[self.lun])

    def delete(self) -> None:
        for acl in self.parent_tpg._t.acls.values():
            for m in [m for m, t in acl.mapped.items() if t == self.lun]:
                del acl.mapped[m]
        del self.parent_tpg._t.luns[self.lun]
        W.writes += 1


class NodeACL:
    def __init__(self, tpg: TPG, node_wwn: str, mode: str = "any") -> None:
        node_wwn = node_wwn.strip().lower()
        if not _IQN.match(node_wwn) or " " in node_wwn or "_" in node_wwn:
            raise RTSLibError("WWN not valid as: iqn, naa, eui")
        self.parent_tpg, self.node_wwn = tpg, node_wwn
        _mode(node_wwn in tpg._t.acls, mode, "NodeACL")
        if node_wwn not in tpg._t.acls:
            tpg._t.acls[node_wwn] = _Acl()
            W.writes += 1

    @property
    def _a(self) -> _Acl:
        return self.parent_tpg._t.acls[self.node_wwn]

    def _get(self, key: str) -> str:
        return self._a.auth[key]

    def _set(self, key: str, value: str) -> None:
        if len(value) > 255 or value == "NULL":
            raise RTSLibError("bad auth value")
        self._a.auth[key] = value.strip()
        W.writes += 1

    chap_userid = property(lambda s: s._get("userid"), lambda s, v: s._set("userid", v))
    chap_password = property(lambda s: s._get("password"), lambda s, v: s._set("password", v))
    chap_mutual_userid = property(lambda s: s._get("userid_mutual"),
                                  lambda s, v: s._set("userid_mutual", v))
    chap_mutual_password = property(lambda s: s._get("password_mutual"),
                                    lambda s, v: s._set("password_mutual", v))

    @property
    def session(self) -> dict[str, Any] | None:
        return {"state": "LOGGED_IN", "parent_nodeacl": self} if self._a.session else None

    @property
    def mapped_luns(self) -> Iterator[MappedLUN]:
        for m in sorted(self._a.mapped):
            yield MappedLUN(self, m)

    def delete(self) -> None:
        del self.parent_tpg._t.acls[self.node_wwn]
        W.writes += 1


class MappedLUN:
    def __init__(self, acl: NodeACL, mapped_lun: int, tpg_lun: int | None = None) -> None:
        self.parent_nodeacl, self.mapped_lun = acl, int(mapped_lun)
        if tpg_lun is None:
            _mode(self.mapped_lun in acl._a.mapped, "lookup", "MappedLUN")
            return
        _mode(self.mapped_lun in acl._a.mapped, "create", "MappedLUN")
        if int(tpg_lun) not in acl.parent_tpg._t.luns:
            raise RTSLibError(f"LUN {tpg_lun} does not exist in this TPG")
        acl._a.mapped[self.mapped_lun] = int(tpg_lun)
        W.writes += 1

    @property
    def tpg_lun(self) -> LUN:
        return LUN(self.parent_nodeacl.parent_tpg,
                   self.parent_nodeacl._a.mapped[self.mapped_lun])

    def delete(self) -> None:
        del self.parent_nodeacl._a.mapped[self.mapped_lun]
        W.writes += 1


@pytest.fixture
def lio(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Lio]:
    global W
    W = World(set(DEVICES))
    monkeypatch.setattr(RTSRoot, "_preferred_dbroot", str(tmp_path / "rtslib-fb-target"))
    mod = types.ModuleType("rtslib_fb")
    tcm = types.ModuleType("rtslib_fb.tcm")
    tcm.bs_cache = {"iblock/stale": 7}  # type: ignore[attr-defined]
    mod.tcm = tcm  # type: ignore[attr-defined]
    for obj in (RTSLibError, RTSRoot, FabricModule, Target, TPG, NetworkPortal, LUN,
                NodeACL, MappedLUN, BlockStorageObject):
        setattr(mod, obj.__name__, obj)
    monkeypatch.setitem(sys.modules, "rtslib_fb", mod)
    yield Lio(device_check=lambda path: path in W.devices)


def spec(**kw: Any) -> TargetSpec:
    base: dict[str, Any] = {
        "iqn": "iqn.2026-11.org.zds:vm01",
        "luns": (LunSpec("zds-vm01", DEVICES[0], "6a1e5c3d-0000-4000-8000-000000000001"),),
        "acls": (AclSpec("iqn.1998-01.com.vmware:esx1", Chap("esx", "secret123456")),),
    }
    base.update(kw)
    return TargetSpec(**base)


def test_contract_apply_read_back(lio: Lio) -> None:
    lio_checks.check_apply_read_back(lio, DEVICES)


def test_contract_errors(lio: Lio) -> None:
    lio_checks.check_errors(lio, DEVICES, "/dev/zvol/ctpool/missing")


def test_contract_run_all_leaves_nothing(lio: Lio) -> None:
    lio_checks.run_all(lio, DEVICES, "/dev/zvol/ctpool/none")
    assert W.targets == {} and W.storage == {}


def test_serial_set_at_creation_and_vaai_on(lio: Lio) -> None:
    lio.apply_target(spec())
    so = W.storage["zds-vm01"]
    assert so.serial == "6a1e5c3d-0000-4000-8000-000000000001"
    assert {k: int(so.attrs[k]) for k in VAAI_ATTRIBUTES} == dict(VAAI_ATTRIBUTES)
    tpg = W.targets["iqn.2026-11.org.zds:vm01"][1]
    assert tpg.enable and tpg.attrs["authentication"] == "1"
    assert tpg.attrs["generate_node_acls"] == "0"
    assert tpg.portals == {("0.0.0.0", 3260)}
    acl = tpg.acls["iqn.1998-01.com.vmware:esx1"]
    assert acl.mapped == {0: 0}
    assert acl.auth == {"userid": "esx", "password": "secret123456", "userid_mutual": "",
                        "password_mutual": ""}


def test_second_apply_writes_nothing(lio: Lio) -> None:
    lio.apply_target(spec())
    before = W.writes
    lio.apply_target(spec())
    assert W.writes == before, "an unchanged spec must not touch configfs"


def test_sessions_are_read_back_and_acl_removal_ends_them(lio: Lio) -> None:
    lio.apply_target(spec())
    W.targets["iqn.2026-11.org.zds:vm01"][1].acls["iqn.1998-01.com.vmware:esx1"].session = True
    (live,) = lio.list_targets()
    assert live.sessions == ("iqn.1998-01.com.vmware:esx1",)
    lio.apply_target(spec(acls=(AclSpec("iqn.2026-11.org.example.kvm:h1"),)))
    (live,) = lio.list_targets()
    assert live.sessions == ()
    assert lio.tpg_attributes("iqn.2026-11.org.zds:vm01")["authentication"] == 0


def test_backstore_device_taken_by_another_name(lio: Lio) -> None:
    lio.apply_target(spec())
    other = spec(iqn="iqn.2026-11.org.zds:vm02",
                 luns=(LunSpec("zds-vm02", DEVICES[0], "6a1e5c3d-0000-4000-8000-000000000002"),))
    with pytest.raises(Conflict):
        lio.apply_target(other)
    assert "iqn.2026-11.org.zds:vm02" not in W.targets


def test_changed_serial_recreates_unshared_backstore(lio: Lio) -> None:
    lio.apply_target(spec())
    new = spec(luns=(LunSpec("zds-vm01", DEVICES[0], "6a1e5c3d-0000-4000-8000-0000000000ff"),))
    lio.apply_target(new)
    (live,) = lio.list_targets()
    assert live.spec.luns[0].serial == "6a1e5c3d-0000-4000-8000-0000000000ff"
    assert W.targets["iqn.2026-11.org.zds:vm01"][1].acls[
        "iqn.1998-01.com.vmware:esx1"].mapped == {0: 0}


def test_hostile_input_never_reaches_rtslib(lio: Lio) -> None:
    for bad in ("iqn.2026-11.org.zds:x\nrm", "iqn.2026-11.org.zds:../../x", "-iqn"):
        with pytest.raises(InvalidInput):
            lio.apply_target(spec(iqn=bad))
    with pytest.raises(InvalidInput):
        lio.apply_target(spec(luns=(LunSpec("../etc", DEVICES[0], "abc"),)))
    with pytest.raises(InvalidInput):
        lio.apply_target(spec(luns=(LunSpec("ok", DEVICES[0], "bad serial"),)))
    with pytest.raises(NotFound):
        lio.apply_target(spec(luns=(LunSpec("ok", "/dev/zvol/none", "abc"),)))
    assert W.targets == {} and W.storage == {} and W.writes == 0


def test_without_rtslib_everything_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "rtslib_fb", None)
    real = Lio()
    assert real.available() is False
    with pytest.raises(Unavailable):
        real.list_targets()
    with pytest.raises(Unavailable):
        real.remove_target("iqn.2026-11.org.zds:vm01")


def test_dbroot_made_and_backstore_cache_dropped(lio: Lio) -> None:
    rtslib = sys.modules["rtslib_fb"]
    lio.list_backstores()
    assert Path(RTSRoot._preferred_dbroot).is_dir()
    assert rtslib.tcm.bs_cache == {}
