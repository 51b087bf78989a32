"""LIO iSCSI target adapter (rtslib-fb, in process: one targetcli per step is 2 s here).

The engine describes each datastore's target as a :class:`TargetSpec`; the adapter makes
configfs match it exactly (``apply_target``) and reads it back (``list_targets``).
``appliance.host.fakes.FakeLio`` is the in-memory twin. Errors: no configfs/modules ->
``Unavailable``; a device that does not exist -> ``NotFound``; bad IQN -> ``InvalidInput``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from appliance.errors import InvalidInput

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
