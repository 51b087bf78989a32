"""ZFS adapter: pools, datasets, zvols, snapshots through ``zpool``/``zfs``.

The engine talks to :class:`ZfsHost`; :class:`Zfs` (real, via ``-H -p`` parsable output)
and ``appliance.host.fakes.FakeZfs`` (in memory) implement it. Error contract, shared by
both and held by tests/contract: a missing pool/dataset raises ``NotFound``, an existing
name ``Conflict``, no space ``InsufficientSpace``, no ZFS on the host ``Unavailable``,
a device in use or missing ``Conflict``/``NotFound``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

VdevKind = Literal["disk", "mirror", "raidz1", "raidz2", "raidz3"]


@dataclass(frozen=True)
class VdevSpec:
    """One top-level vdev: ``disk`` takes exactly one device, others two or more."""

    kind: VdevKind
    devices: tuple[str, ...]


@dataclass(frozen=True)
class PoolLayout:
    data: tuple[VdevSpec, ...]
    log: tuple[VdevSpec, ...] = ()
    cache: tuple[str, ...] = ()
    spares: tuple[str, ...] = ()

    def all_devices(self) -> tuple[str, ...]:
        devs: list[str] = []
        for v in (*self.data, *self.log):
            devs.extend(v.devices)
        return (*devs, *self.cache, *self.spares)


@dataclass(frozen=True)
class VdevNode:
    """A node of ``zpool status``: the pool root, a group (mirror-0, logs...) or a device."""

    name: str
    state: str
    read_errors: int = 0
    write_errors: int = 0
    checksum_errors: int = 0
    children: tuple[VdevNode, ...] = ()


@dataclass(frozen=True)
class PoolInfo:
    """One row of ``zpool list -H -p``; sizes in bytes."""

    name: str
    health: str
    size: int
    allocated: int
    free: int
    fragmentation: int | None  # percent; None when zpool prints '-'
    capacity: int  # percent used
    properties: Mapping[str, str] = field(default_factory=dict)  # incl. zds:* user props


@dataclass(frozen=True)
class PoolStatus:
    """``zpool status`` of one pool."""

    name: str
    state: str
    status: str  # the "status:" paragraph, '' when healthy
    action: str
    scan: str  # e.g. "scrub repaired 0B in 00:00:01 with 0 errors on ..."
    errors: str  # "No known data errors" or the list
    config: VdevNode  # root node named after the pool; groups 'logs', 'cache', 'spares'


@dataclass(frozen=True)
class DatasetInfo:
    """A filesystem, volume or snapshot with its properties as raw ``-p`` strings.

    ``properties`` holds native properties (used, available, referenced, volsize,
    refquota, refreservation, compression, recordsize, volblocksize, sync, mountpoint,
    origin, creation, ...) and every ``zds:*`` user property that is set.
    """

    name: str
    type: Literal["filesystem", "volume", "snapshot"]
    properties: Mapping[str, str]

    def prop(self, key: str, default: str = "") -> str:
        value = self.properties.get(key, default)
        return default if value == "-" else value

    def int_prop(self, key: str, default: int = 0) -> int:
        value = self.prop(key)
        return int(value) if value.isdigit() else default


class ZfsHost(Protocol):
    """What the engine needs from ZFS. Names are validated before they get here."""

    def available(self) -> bool:
        """True when the zfs module is loaded and the tools answer."""

    def list_pools(self) -> list[PoolInfo]: ...

    def pool_status(self, pool: str) -> PoolStatus: ...

    def create_pool(
        self,
        pool: str,
        layout: PoolLayout,
        pool_properties: Mapping[str, str],
        fs_properties: Mapping[str, str],
        force: bool = False,
    ) -> None: ...

    def destroy_pool(self, pool: str) -> None: ...

    def scrub(self, pool: str) -> None: ...

    def export_pool(self, pool: str) -> None: ...

    def import_pool(self, pool: str) -> None: ...

    def importable_pools(self) -> list[str]: ...

    def set_pool_properties(self, pool: str, properties: Mapping[str, str]) -> None: ...

    def list_datasets(self, root: str) -> list[DatasetInfo]:
        """``root`` and every filesystem/volume below it (no snapshots); [] if missing."""

    def get_dataset(self, name: str) -> DatasetInfo | None: ...

    def create_filesystem(self, name: str, properties: Mapping[str, str]) -> None:
        """Creates parents as needed (``zfs create -p``)."""

    def create_volume(
        self, name: str, size: int, sparse: bool, properties: Mapping[str, str]
    ) -> None: ...

    def set_properties(self, name: str, properties: Mapping[str, str]) -> None: ...

    def destroy(self, name: str, recursive: bool = False) -> None: ...

    def snapshot(self, dataset: str, snapname: str,
                 properties: Mapping[str, str] | None = None) -> None: ...

    def list_snapshots(self, dataset: str) -> list[DatasetInfo]:
        """Snapshots of ``dataset`` only (not of children), oldest first."""

    def rollback(self, snapshot: str, destroy_newer: bool = False) -> None:
        """Without ``destroy_newer`` a rollback past newer snapshots raises Conflict."""

    def clone(self, snapshot: str, target: str, properties: Mapping[str, str]) -> None: ...

    def zvol_device(self, name: str) -> str:
        """The block device path of a volume, e.g. /dev/zvol/tank/ds/lun1."""

    def wait_for_device(self, name: str, timeout: float = 30.0) -> str:
        """Waits for udev to create the zvol device node; returns its path."""


def vdev_args(layout: PoolLayout) -> list[str]:
    """The vdev part of a ``zpool create`` command line for ``layout``."""
    args: list[str] = []

    def group(specs: Sequence[VdevSpec]) -> None:
        for v in specs:
            if v.kind != "disk":
                args.append(v.kind)
            args.extend(v.devices)

    group(layout.data)
    if layout.log:
        args.append("log")
        group(layout.log)
    if layout.cache:
        args.append("cache")
        args.extend(layout.cache)
    if layout.spares:
        args.append("spare")
        args.extend(layout.spares)
    return args
