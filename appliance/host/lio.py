"""LIO iSCSI target adapter (rtslib-fb, in process: one targetcli per step is 2 s here).

The engine describes each datastore's target as a :class:`TargetSpec`; the adapter makes
configfs match it exactly (``apply_target``) and reads it back (``list_targets``).
``appliance.host.fakes.FakeLio`` is the in-memory twin. Errors: no configfs/modules ->
``Unavailable``; a device that does not exist -> ``NotFound``; bad IQN -> ``InvalidInput``.
More precisely (held by ``appliance.host.contract.lio_checks``):

- ``apply_target`` validates the whole spec first (:func:`check_spec`: IQNs as LIO and
  RFC 3720 accept them, lower case; CHAP 1-255 printable characters; backstore names;
  unit serials of 1-64 letters/digits/'-') and changes nothing when it raises.
- A backstore name or device already exported by *another* target with a different
  device/serial -> ``Conflict``. The unit serial is written when the backstore is
  created, before its LUN exists, so the NAA WWN LIO derives from it never changes.
- Each ACL maps every LUN of the spec at the same LUN number. TPG 1 attributes:
  authentication=1 when any ACL has CHAP (then every initiator must use CHAP),
  generate_node_acls=0, demo_mode_write_protect=1, cache_dynamic_acls=0; enabled.
- A LUN dropped from the spec takes its backstore with it when nothing else exports it.
  Removing an ACL ends that initiator's session.
- ``list_targets`` reads back the spec in normal form: LUNs by number, ACLs by IQN,
  portals sorted, only the :data:`VAAI_ATTRIBUTES` keys; ``sessions`` are the initiators
  logged in now.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, Protocol

from appliance.errors import Conflict, HostCommandFailed, InvalidInput, NotFound, Unavailable

# VAAI and thin-provisioning attributes ZDS sets on every zvol LUN (ESXi needs them).
VAAI_ATTRIBUTES: Mapping[str, int] = {
    "emulate_caw": 1,  # ATS (COMPARE AND WRITE)
    "emulate_3pc": 1,  # XCOPY
    "emulate_tpu": 1,  # UNMAP (default off in LIO)
    "emulate_tpws": 1,  # WRITE SAME with UNMAP (default off in LIO)
    "is_nonrot": 1,
}


@dataclass(frozen=True)
class Chap:
    """CHAP on one initiator ACL; mutual_* set = mutual (bidirectional) CHAP."""

    user: str
    password: str
    mutual_user: str | None = None
    mutual_password: str | None = None


@dataclass(frozen=True)
class AclSpec:
    initiator: str  # IQN
    chap: Chap | None = None


@dataclass(frozen=True)
class LunSpec:
    backstore: str  # block backstore name, e.g. "zds-vmfs01"
    device: str  # /dev/zvol/...
    serial: str  # unit serial (stable forever: ESXi keys datastores on it)
    lun: int = 0
    attributes: Mapping[str, int] = field(default_factory=lambda: dict(VAAI_ATTRIBUTES))


@dataclass(frozen=True)
class TargetSpec:
    iqn: str
    luns: tuple[LunSpec, ...]
    acls: tuple[AclSpec, ...]
    portals: tuple[tuple[str, int], ...] = (("0.0.0.0", 3260),)


@dataclass(frozen=True)
class LiveTarget:
    """A target as read back from configfs, plus who is logged in now."""

    spec: TargetSpec
    sessions: tuple[str, ...] = ()  # initiator IQNs with an active session


class LioHost(Protocol):
    def available(self) -> bool: ...

    def list_targets(self) -> list[LiveTarget]:
        """Every iSCSI target in configfs (ZDS filters its own by IQN prefix)."""

    def list_backstores(self) -> list[str]:
        """Names of block backstores (to find orphans)."""

    def apply_target(self, spec: TargetSpec) -> None:
        """Create or change the target so configfs matches ``spec`` exactly: TPG 1
        enabled, portals, block backstores with serial + attributes, LUNs, ACLs with
        mapped LUNs and CHAP; ACLs/LUNs not in ``spec`` are removed. Idempotent."""

    def remove_target(self, iqn: str) -> None:
        """Delete the target and the backstores its LUNs used. Missing: no error."""

    def remove_backstore(self, name: str) -> None:
        """Delete an unused block backstore. Missing: no error; still exported: Conflict."""

    def tpg_attributes(self, iqn: str) -> dict[str, int]:
        """TPG 1 attributes of ``iqn`` (authentication, generate_node_acls,
        demo_mode_write_protect, cache_dynamic_acls) plus ``enable``. Missing: NotFound."""


# iqn.YYYY-MM.reversed.domain[:anything]; rtslib-fb additionally insists on a second dot
# after the date (iqn.2026-11.test:host1 is refused, iqn.2026-11.org.example:host1 passes).
_IQN = re.compile(r"iqn\.[0-9]{4}-(0[1-9]|1[0-2])\.[a-z0-9-]+(\.[a-z0-9-]+)+(:[a-z0-9.:-]+)?")
_EUI = re.compile(r"eui\.[0-9a-f]{16}")
_NAA = re.compile(r"naa\.[0-9a-f]{16}([0-9a-f]{16})?")
MAX_CHAP_LEN = 255  # configfs auth/* attributes take at most 255 characters


def check_wwn(name: str, what: str = "IQN") -> str:
    """Returns ``name`` if LIO (and RFC 3720) accept it as an iSCSI name, else raises
    ``InvalidInput``. Only lower-case names are accepted: LIO lower-cases what it stores,
    so a mixed-case spec would never read back equal."""
    if len(name.encode()) > 223 or not (
        _IQN.fullmatch(name) or _EUI.fullmatch(name) or _NAA.fullmatch(name)
    ):
        raise InvalidInput(
            f"{what} {name!r} is not a valid iSCSI name: expected lower-case "
            "iqn.YYYY-MM.reversed.domain[:id] with at least two dots after the date, "
            "eui.<16 hex> or naa.<16|32 hex>, at most 223 bytes"
        )
    return name


def check_spec(spec: TargetSpec) -> None:
    """Validates everything in ``spec`` that LIO would refuse half-way through."""
    check_wwn(spec.iqn, "target IQN")
    seen_luns: set[int] = set()
    seen_bs: set[str] = set()
    for lun in spec.luns:
        if not 0 <= lun.lun <= 65535 or lun.lun in seen_luns:
            raise InvalidInput(f"LUN number {lun.lun} is out of range or used twice")
        if not lun.backstore or lun.backstore in seen_bs or not re.fullmatch(
            r"[A-Za-z0-9_.:-]{1,128}", lun.backstore
        ):
            raise InvalidInput(f"backstore name {lun.backstore!r} is invalid or used twice")
        if not lun.device.startswith("/dev/") or any(c in lun.device for c in " \t\n"):
            raise InvalidInput(f"device {lun.device!r} is not a /dev path")
        if not re.fullmatch(r"[A-Za-z0-9-]{1,64}", lun.serial):
            raise InvalidInput(f"unit serial {lun.serial!r} must be 1-64 letters, digits or '-'")
        seen_luns.add(lun.lun)
        seen_bs.add(lun.backstore)
    seen_acl: set[str] = set()
    for acl in spec.acls:
        check_wwn(acl.initiator, "initiator IQN")
        if acl.initiator in seen_acl:
            raise InvalidInput(f"initiator {acl.initiator} is listed twice")
        seen_acl.add(acl.initiator)
        if acl.chap is not None:
            c = acl.chap
            values = [c.user, c.password]
            if (c.mutual_user is None) != (c.mutual_password is None):
                raise InvalidInput("mutual CHAP needs both a user and a password")
            if c.mutual_user is not None and c.mutual_password is not None:
                values += [c.mutual_user, c.mutual_password]
            for v in values:
                if not v or len(v) > MAX_CHAP_LEN or v == "NULL" or v != v.strip() or any(
                    ord(ch) < 0x21 or ord(ch) > 0x7E for ch in v
                ):
                    raise InvalidInput("CHAP users and passwords must be 1-255 printable "
                                       "ASCII characters without spaces")
    for host, port in spec.portals:
        if not 0 < port < 65536 or not re.fullmatch(r"[0-9a-fA-F.:\[\]]+", host):
            raise InvalidInput(f"portal {host}:{port} is not an IP address and port")


# TPG attributes apply_target enforces (authentication is 1 when any ACL has CHAP).
TPG_ATTRIBUTES: Mapping[str, int] = {
    "generate_node_acls": 0,  # only initiators with an ACL may log in
    "demo_mode_write_protect": 1,
    "cache_dynamic_acls": 0,
}


def _is_block_device(path: str) -> bool:
    try:
        return stat.S_ISBLK(os.stat(path).st_mode)
    except OSError:
        return False


class Lio:
    """:class:`LioHost` on the kernel target through rtslib-fb, in this process.

    rtslib (Debian's python3-rtslib-fb) is imported inside the methods, so this module
    imports on hosts without it; there every call raises ``Unavailable``. Only block
    backstores and TPG 1 are managed. ``device_check`` decides whether a LUN device
    exists (default: it is a block device node).
    """

    def __init__(self, device_check: Callable[[str], bool] = _is_block_device) -> None:
        self._device_check = device_check

    # ---- rtslib plumbing ----------------------------------------------------------
    @staticmethod
    def _rtslib() -> Any:
        try:
            import rtslib_fb
        except ImportError as exc:
            raise Unavailable("LIO is not available: python3-rtslib-fb is not installed") from exc
        return rtslib_fb

    @contextmanager
    def _session(self, what: str) -> Iterator[tuple[Any, Any, Any]]:
        """(rtslib module, RTSRoot, iSCSI fabric); rtslib/OS errors become engine errors."""
        rtslib = self._rtslib()
        # rtslib caches backstore indexes per process (tcm.bs_cache); this process lives
        # long and targetcli may run beside it, so every operation rescans configfs.
        cache = getattr(getattr(rtslib, "tcm", None), "bs_cache", None)
        if isinstance(cache, dict):
            cache.clear()
        # RTSRoot() points the kernel's dbroot at this directory (Debian's rtslib:
        # /etc/rtslib-fb-target, shipped by targetcli-fb only) and fails if it is missing.
        dbroot = getattr(rtslib.RTSRoot, "_preferred_dbroot", None)
        if isinstance(dbroot, str) and dbroot.startswith("/"):
            with suppress(OSError):  # if it still fails, RTSRoot() says what is wrong
                os.makedirs(dbroot, exist_ok=True)
        try:
            root = rtslib.RTSRoot()
            fabric = rtslib.FabricModule("iscsi")
        except (rtslib.RTSLibError, OSError) as exc:
            raise Unavailable(f"LIO is not available ({what}): {exc}") from exc
        try:
            yield rtslib, root, fabric
        except rtslib.RTSLibError as exc:
            text = str(exc)
            if "in use" in text or "busy" in text.lower():
                raise Conflict(f"LIO refused to {what}: {text}") from exc
            raise HostCommandFailed(f"LIO failed to {what}: {text}") from exc
        except OSError as exc:
            raise HostCommandFailed(f"LIO failed to {what}: {exc}") from exc

    @staticmethod
    def _block_objects(root: Any) -> dict[str, Any]:
        return {so.name: so for so in root.storage_objects if so.plugin == "block"}

    @staticmethod
    def _find_target(rtslib: Any, fabric: Any, iqn: str) -> Any | None:
        if not fabric.exists:
            return None
        try:
            return rtslib.Target(fabric, iqn, mode="lookup")
        except rtslib.RTSLibError:
            return None

    @staticmethod
    def _tpg1(rtslib: Any, target: Any) -> Any | None:
        try:
            return rtslib.TPG(target, 1, mode="lookup")
        except rtslib.RTSLibError:
            return None

    # ---- LioHost ------------------------------------------------------------------
    def available(self) -> bool:
        try:
            with self._session("read the configuration") as (_rtslib, root, fabric):
                fabric._check_self()  # loads iscsi_target_mod if needed
                list(root.storage_objects)
        except (Unavailable, HostCommandFailed):
            return False
        return True

    def list_backstores(self) -> list[str]:
        with self._session("list backstores") as (_rtslib, root, _fabric):
            return sorted(self._block_objects(root))

    def list_targets(self) -> list[LiveTarget]:
        out: list[LiveTarget] = []
        with self._session("list targets") as (rtslib, _root, fabric):
            if not fabric.exists:
                return []
            for target in fabric.targets:
                tpg = self._tpg1(rtslib, target)
                if tpg is None:
                    out.append(LiveTarget(TargetSpec(target.wwn, (), (), ())))
                    continue
                out.append(self._read_target(target, tpg))
        return sorted(out, key=lambda t: t.spec.iqn)

    @staticmethod
    def _read_target(target: Any, tpg: Any) -> LiveTarget:
        luns: list[LunSpec] = []
        for lun in tpg.luns:
            so = lun.storage_object
            attrs = {k: int(so.get_attribute(k)) for k in VAAI_ATTRIBUTES}
            luns.append(LunSpec(backstore=so.name, device=so.udev_path, serial=so.wwn,
                                lun=int(lun.lun), attributes=attrs))
        acls: list[AclSpec] = []
        sessions: list[str] = []
        for acl in tpg.node_acls:
            user = acl.chap_userid or ""
            chap = None
            if user:
                muser = acl.chap_mutual_userid or None
                chap = Chap(user, acl.chap_password or "", muser,
                            (acl.chap_mutual_password or None) if muser else None)
            acls.append(AclSpec(acl.node_wwn, chap))
            if acl.session:
                sessions.append(acl.node_wwn)
        portals = sorted((np.ip_address, int(np.port)) for np in tpg.network_portals)
        spec = TargetSpec(iqn=target.wwn, luns=tuple(sorted(luns, key=lambda x: x.lun)),
                          acls=tuple(sorted(acls, key=lambda a: a.initiator)),
                          portals=tuple(portals))
        return LiveTarget(spec=spec, sessions=tuple(sorted(sessions)))

    def tpg_attributes(self, iqn: str) -> dict[str, int]:
        with self._session("read TPG attributes") as (rtslib, _root, fabric):
            target = self._find_target(rtslib, fabric, iqn)
            tpg = self._tpg1(rtslib, target) if target is not None else None
            if tpg is None:
                raise NotFound(f"iSCSI target {iqn} does not exist")
            attrs = {k: int(tpg.get_attribute(k))
                     for k in ("authentication", *TPG_ATTRIBUTES)}
            attrs["enable"] = int(bool(tpg.enable))
            return attrs

    def apply_target(self, spec: TargetSpec) -> None:
        check_spec(spec)
        for lun in spec.luns:
            if not self._device_check(lun.device):
                raise NotFound(f"cannot export {lun.device}: no such block device")
        with self._session(f"configure target {spec.iqn}") as (rtslib, root, fabric):
            self._check_backstores(root, spec)
            target = rtslib.Target(fabric, spec.iqn, mode="any")
            tpg: Any = rtslib.TPG(target, 1, mode="any")
            # portals
            have = {(np.ip_address, int(np.port)): np for np in tpg.network_portals}
            for addr, np in have.items():
                if addr not in spec.portals:
                    np.delete()
            for host, port in spec.portals:
                if (host, port) not in have:
                    rtslib.NetworkPortal(tpg, host, port, mode="create")
            # LUNs: drop the ones not wanted (their mapped LUNs go with them)
            wanted = {lun.lun: lun for lun in spec.luns}
            dropped: set[str] = set()
            for lun in list(tpg.luns):
                want = wanted.get(int(lun.lun))
                name = lun.storage_object.name
                if want is None or want.backstore != name:
                    dropped.add(name)
                    lun.delete()
            objects = self._block_objects(root)
            for lun_spec in spec.luns:
                so = objects.get(lun_spec.backstore)
                if so is not None and (so.udev_path != lun_spec.device
                                       or so.wwn != lun_spec.serial):
                    so.delete()  # also deletes this target's LUNs on it
                    so = None
                if so is None:
                    # the unit serial is set before the LUN is exported: stable NAA WWN
                    so = rtslib.BlockStorageObject(lun_spec.backstore, dev=lun_spec.device,
                                                   wwn=lun_spec.serial)
                for akey, aval in lun_spec.attributes.items():
                    if so.get_attribute(akey).strip() != str(int(aval)):
                        so.set_attribute(akey, str(int(aval)))
                objects[lun_spec.backstore] = so
            have_luns = {int(lun.lun): lun for lun in tpg.luns}
            for n, lun_spec in wanted.items():
                if n not in have_luns:
                    rtslib.LUN(tpg, n, objects[lun_spec.backstore])
            for name in dropped - {lun.backstore for lun in spec.luns}:
                so = self._block_objects(root).get(name)
                if so is not None and not list(so.attached_luns):
                    so.delete()
            # TPG attributes before ACLs, so no initiator gets in without CHAP
            want_attrs = {**TPG_ATTRIBUTES,
                          "authentication": int(any(a.chap for a in spec.acls))}
            for tkey, tval in want_attrs.items():
                if tpg.get_attribute(tkey).strip() != str(tval):
                    tpg.set_attribute(tkey, str(tval))
            # ACLs
            wanted_acls = {a.initiator: a for a in spec.acls}
            for acl in list(tpg.node_acls):
                if acl.node_wwn not in wanted_acls:
                    acl.delete()  # ends that initiator's session
            for acl_spec in spec.acls:
                acl = rtslib.NodeACL(tpg, acl_spec.initiator, mode="any")
                c = acl_spec.chap
                values = {
                    "chap_userid": c.user if c else "",
                    "chap_password": c.password if c else "",
                    "chap_mutual_userid": (c.mutual_user or "") if c else "",
                    "chap_mutual_password": (c.mutual_password or "") if c else "",
                }
                for attr, text in values.items():
                    if (getattr(acl, attr) or "") != text:
                        setattr(acl, attr, text)
                current: set[int] = set()
                for m in list(acl.mapped_luns):
                    if int(m.mapped_lun) not in wanted or int(m.tpg_lun.lun) != int(m.mapped_lun):
                        m.delete()
                    else:
                        current.add(int(m.mapped_lun))
                for n in wanted:
                    if n not in current:
                        rtslib.MappedLUN(acl, n, tpg_lun=n)
            if not tpg.enable:
                tpg.enable = True

    def _check_backstores(self, root: Any, spec: TargetSpec) -> None:
        """Refuses (before changing anything) a backstore name or device that another
        target already exports with a different device/serial."""
        objects = self._block_objects(root)
        for lun in spec.luns:
            so = objects.get(lun.backstore)
            if so is not None and (so.udev_path != lun.device or so.wwn != lun.serial):
                users = {x.parent_tpg.parent_target.wwn for x in so.attached_luns}
                users.discard(spec.iqn)
                if users:
                    raise Conflict(f"backstore {lun.backstore} is exported by "
                                   f"{sorted(users)[0]} with another device or serial")
            for other in objects.values():
                if other.name != lun.backstore and other.udev_path == lun.device:
                    raise Conflict(f"{lun.device} is already used by backstore {other.name}")

    def remove_target(self, iqn: str) -> None:
        with self._session(f"remove target {iqn}") as (rtslib, root, fabric):
            target = self._find_target(rtslib, fabric, iqn)
            if target is None:
                return
            names = {lun.storage_object.name for tpg in target.tpgs for lun in tpg.luns}
            target.delete()
            objects = self._block_objects(root)
            for name in names:
                so = objects.get(name)
                if so is not None and not list(so.attached_luns):
                    so.delete()

    def remove_backstore(self, name: str) -> None:
        with self._session(f"remove backstore {name}") as (_rtslib, root, _fabric):
            so = self._block_objects(root).get(name)
            if so is None:
                return
            users = sorted({lun.parent_tpg.parent_target.wwn for lun in so.attached_luns})
            if users:
                raise Conflict(f"backstore {name} is still exported by {', '.join(users)}")
            so.delete()
