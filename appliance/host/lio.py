"""LIO iSCSI target adapter (rtslib-fb, in process: one targetcli per step is 2 s here).

The engine describes each datastore's target as a :class:`TargetSpec`; the adapter makes
configfs match it exactly (``apply_target``) and reads it back (``list_targets``).
``appliance.host.fakes.FakeLio`` is the in-memory twin. Errors: no configfs/modules ->
``Unavailable``; a device that does not exist -> ``NotFound``; bad IQN -> ``InvalidInput``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

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

    def remove_backstore(self, name: str) -> None: ...
