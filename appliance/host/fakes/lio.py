"""In-memory twin of :class:`appliance.host.lio.Lio`: a configfs-like tree of iSCSI targets
(TPG 1 only), block backstores, LUNs, node ACLs with mapped LUNs and CHAP, and sessions.

It follows the contract in :mod:`appliance.host.lio` (held to the real adapter by
:mod:`appliance.host.contract`): ``apply_target`` makes the tree match a spec exactly and
is idempotent; ``remove_target`` also deletes the target's backstores and never fails on a
missing target. Test helpers: :meth:`login`/:meth:`logout` fake an initiator session,
``down = True`` makes every call raise ``Unavailable``, :meth:`linked_to` ties the fake to
a :class:`~appliance.host.fakes.zfs.FakeZfs` (devices must exist as zvols there, and zvols
exported here are "busy" for ``zfs destroy``). ``changes`` counts changes made to the
tree, so tests can assert that a repeated apply changed nothing; ``on_step`` (when set) is
called after each of them, so a test can kill the engine between any two (rtslib makes
them one configfs write at a time: a crash leaves a target half-built).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from appliance.errors import Conflict, DeviceMissing, NotFound, Unavailable, ZdsError
from appliance.host.lio import (
    VAAI_ATTRIBUTES,
    AclSpec,
    Chap,
    LiveTarget,
    LunSpec,
    TargetSpec,
    TargetSummary,
    check_spec,
)

if TYPE_CHECKING:
    from appliance.host.fakes.zfs import FakeZfs

# LUN attributes a fresh LIO block backstore starts with (kernel defaults).
_DEFAULT_ATTRIBUTES: Mapping[str, int] = {
    "emulate_caw": 1, "emulate_3pc": 1, "emulate_tpu": 0, "emulate_tpws": 0, "is_nonrot": 0,
}


@dataclass
class _Backstore:
    name: str
    device: str
    serial: str
    attributes: dict[str, int] = field(default_factory=lambda: dict(_DEFAULT_ATTRIBUTES))


@dataclass
class _Acl:
    chap: Chap | None = None
    mapped: dict[int, int] = field(default_factory=dict)  # mapped LUN -> TPG LUN


@dataclass
class _Target:
    iqn: str
    enabled: bool = False
    portals: set[tuple[str, int]] = field(default_factory=set)
    luns: dict[int, str] = field(default_factory=dict)  # LUN -> backstore name
    acls: dict[str, _Acl] = field(default_factory=dict)
    attributes: dict[str, int] = field(default_factory=lambda: {
        "authentication": 0, "generate_node_acls": 0, "demo_mode_write_protect": 1,
        "cache_dynamic_acls": 0})
    sessions: set[str] = field(default_factory=set)


class FakeLio:
    def __init__(self, device_exists: Callable[[str], bool] | None = None) -> None:
        self.down = False
        self.targets: dict[str, _Target] = {}
        self.backstores: dict[str, _Backstore] = {}
        self.changes = 0
        self._device_exists = device_exists or (lambda _path: True)
        self.on_step: Callable[[str], None] | None = None

    # ---- test helpers -------------------------------------------------------------
    @classmethod
    def linked_to(cls, zfs: FakeZfs) -> FakeLio:
        lio = cls(device_exists=zfs.device_exists)
        zfs.add_holder(lambda dev: any(b.device == dev for b in lio.backstores.values()))
        return lio

    def login(self, iqn: str, initiator: str) -> None:
        """An initiator logs in: needs the target enabled and an ACL for it."""
        t = self.targets.get(iqn)
        if t is None or not t.enabled:
            raise NotFound(f"target {iqn} does not exist or is disabled")
        if initiator not in t.acls:
            raise NotFound(f"initiator {initiator} has no ACL on {iqn}: login refused")
        t.sessions.add(initiator)

    def logout(self, iqn: str, initiator: str) -> None:
        t = self.targets.get(iqn)
        if t is not None:
            t.sessions.discard(initiator)

    # ---- internals ----------------------------------------------------------------
    def _up(self) -> None:
        if self.down:
            raise Unavailable("LIO is not available: configfs or target_core_mod missing")

    def _changed(self) -> None:
        self.changes += 1
        if self.on_step is not None:
            self.on_step(f"configfs write {self.changes}")

    def _in_use(self, backstore: str, except_iqn: str | None = None) -> list[str]:
        return [t.iqn for t in self.targets.values()
                if t.iqn != except_iqn and backstore in t.luns.values()]

    def _delete_lun(self, t: _Target, lun: int) -> None:
        del t.luns[lun]
        for acl in t.acls.values():
            for mapped in [m for m, tl in acl.mapped.items() if tl == lun]:
                del acl.mapped[mapped]
        self._changed()

    # ---- LioHost ------------------------------------------------------------------
    def available(self) -> bool:
        return not self.down

    def list_backstores(self) -> list[str]:
        self._up()
        return sorted(self.backstores)

    def list_targets(self) -> list[LiveTarget]:
        self._up()
        return [self._live(t) for t in sorted(self.targets.values(), key=lambda t: t.iqn)]

    def summarize_targets(self) -> dict[str, TargetSummary]:
        self._up()
        return {t.iqn: TargetSummary(t.iqn, len(t.luns), tuple(sorted(t.sessions)))
                for t in self.targets.values()}

    def get_target(self, iqn: str) -> LiveTarget | None:
        self._up()
        t = self.targets.get(iqn)
        return self._live(t) if t is not None else None

    def _live(self, t: _Target) -> LiveTarget:
        luns = []
        for n in sorted(t.luns):
            b = self.backstores[t.luns[n]]
            luns.append(LunSpec(backstore=b.name, device=b.device, serial=b.serial, lun=n,
                                attributes={k: b.attributes[k] for k in VAAI_ATTRIBUTES}))
        acls = tuple(AclSpec(i, t.acls[i].chap) for i in sorted(t.acls))
        spec = TargetSpec(iqn=t.iqn, luns=tuple(luns), acls=acls,
                          portals=tuple(sorted(t.portals)))
        return LiveTarget(spec=spec, sessions=tuple(sorted(t.sessions)), enabled=t.enabled,
                          authentication=bool(t.attributes.get("authentication")))

    def apply_targets(self, specs: Sequence[TargetSpec]) -> dict[str, ZdsError]:
        self._up()
        failed: dict[str, ZdsError] = {}
        for spec in specs:
            try:
                self.apply_target(spec)
            except ZdsError as exc:
                failed[spec.iqn] = exc
        return failed

    def apply_target(self, spec: TargetSpec) -> None:
        self._up()
        check_spec(spec)
        # Check everything that can fail before changing anything.
        for lun in spec.luns:
            if not self._device_exists(lun.device):
                raise DeviceMissing(f"cannot export {lun.device}: no such block device")
            b = self.backstores.get(lun.backstore)
            if b is not None and (b.device != lun.device or b.serial != lun.serial):
                users = self._in_use(lun.backstore, except_iqn=spec.iqn)
                if users:
                    raise Conflict(f"backstore {lun.backstore} is exported by {users[0]} "
                                   "with another device or serial")
            for other in self.backstores.values():
                if other.device == lun.device and other.name != lun.backstore:
                    raise Conflict(f"{lun.device} is already used by backstore {other.name}")
        t = self.targets.get(spec.iqn)
        if t is None:
            t = self.targets[spec.iqn] = _Target(spec.iqn)
            self._changed()
        wanted_portals = set(spec.portals)
        if t.portals != wanted_portals:
            t.portals = wanted_portals
            self._changed()
        wanted_luns = {lun.lun: lun for lun in spec.luns}
        dropped = {t.luns[n] for n in t.luns if n not in wanted_luns}
        for n in [n for n in t.luns if n not in wanted_luns]:
            self._delete_lun(t, n)
        for lun in spec.luns:
            b = self.backstores.get(lun.backstore)
            if b is not None and (b.device != lun.device or b.serial != lun.serial):
                for n in [n for n, name in t.luns.items() if name == b.name]:
                    self._delete_lun(t, n)
                del self.backstores[b.name]
                self._changed()
                b = None
            if b is None:
                b = self.backstores[lun.backstore] = _Backstore(lun.backstore, lun.device,
                                                                lun.serial)
                self._changed()
            for key, value in lun.attributes.items():
                if b.attributes.get(key) != int(value):
                    b.attributes[key] = int(value)
                    self._changed()
            if t.luns.get(lun.lun) != lun.backstore:
                if lun.lun in t.luns:
                    self._delete_lun(t, lun.lun)
                for n in [n for n, name in t.luns.items() if name == lun.backstore]:
                    self._delete_lun(t, n)
                t.luns[lun.lun] = lun.backstore
                self._changed()
        wanted_bs = {lun.backstore for lun in spec.luns}
        for name in dropped - wanted_bs:
            if not self._in_use(name) and name in self.backstores:
                del self.backstores[name]  # a dropped LUN's backstore goes with it
                self._changed()
        wanted_acls = {a.initiator: a for a in spec.acls}
        for initiator in [i for i in t.acls if i not in wanted_acls]:
            del t.acls[initiator]
            t.sessions.discard(initiator)  # removing a node ACL ends its session
            self._changed()
        for a in spec.acls:
            acl = t.acls.get(a.initiator)
            if acl is None:
                acl = t.acls[a.initiator] = _Acl()
                self._changed()
            if acl.chap != a.chap:
                acl.chap = a.chap
                self._changed()
            want_map = {n: n for n in wanted_luns}
            if acl.mapped != want_map:
                acl.mapped = want_map
                self._changed()
        want_attrs = {"authentication": int(any(a.chap for a in spec.acls)),
                      "generate_node_acls": 0, "demo_mode_write_protect": 1,
                      "cache_dynamic_acls": 0}
        for key, value in want_attrs.items():
            if t.attributes.get(key) != value:
                t.attributes[key] = value
                self._changed()
        if not t.enabled:
            t.enabled = True
            self._changed()

    def remove_target(self, iqn: str) -> None:
        self._up()
        t = self.targets.pop(iqn, None)
        if t is None:
            return
        self._changed()
        for name in set(t.luns.values()):
            if not self._in_use(name) and name in self.backstores:
                del self.backstores[name]

    def remove_backstore(self, name: str) -> None:
        self._up()
        if name not in self.backstores:
            return
        users = self._in_use(name)
        if users:
            raise Conflict(f"backstore {name} is still exported by {', '.join(users)}")
        del self.backstores[name]
        self._changed()

    def tpg_attributes(self, iqn: str) -> dict[str, int]:
        """TPG 1 attributes of a target (authentication, generate_node_acls...)."""
        self._up()
        t = self.targets.get(iqn)
        if t is None:
            raise NotFound(f"target {iqn} does not exist")
        return {**t.attributes, "enable": int(t.enabled)}
