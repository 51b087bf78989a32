"""What a datastore is in ZFS: a file system or a zvol, and what that decides.

ZFS has these two kinds and no other, so every transport names one of them (NFS serves
a file system, iSCSI and NVMe/TCP a zvol) and the services, snapshots and replication ask
the storage kind, never the protocol: how the dataset is created, grown and cloned, its
VM-tuned properties, where it shows (a mount path or a device), what a rollback must
refuse, and what a replica keeps until it is promoted.
"""

from __future__ import annotations

import posixpath
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import ClassVar

from appliance.errors import Conflict
from appliance.host.zfs import DatasetInfo, ZfsHost
from appliance.host.zfs_send import ZfsSendHost
from appliance.model import DatastoreSpec

# ZFS tuning per kind; see docs/architecture.md for why each value.
# Properties every pool's root file system gets (VM-tuned; ganesha needs posixacl).
ROOT_FS_PROPERTIES: Mapping[str, str] = {"compression": "lz4", "atime": "off", "xattr": "sa",
                                         "acltype": "posixacl", "dnodesize": "auto"}
DATASET_PROPERTIES: Mapping[str, str] = {
    "compression": "lz4",
    "atime": "off",
    "xattr": "sa",
    "acltype": "posixacl",  # ganesha's VFS FSAL fails every op with NOTSUPP without it
    "recordsize": "65536",  # VM images do 4K-64K I/O; 64K balances IOPS and throughput
    "sync": "standard",  # ESXi writes sync: honour it (a SLOG makes it fast)
    "logbias": "latency",
}
ZVOL_PROPERTIES: Mapping[str, str] = {
    "compression": "lz4",
    "volblocksize": "16384",  # OpenZFS 2.2+ default; good for VMFS and guest file systems
    "sync": "standard",
    "logbias": "latency",
}
# Set by size, or fixed at creation: an update sets them only as the storage says.
_FIXED = ("volblocksize", "refquota", "refreservation")
RECONCILE = "POST /api/v1/system/reconcile"


@dataclass(frozen=True)
class Problem:
    """Why a datastore's dataset cannot be served as it is, and what fixes it.

    ``repair`` is what the reconciler does itself when that is safe (a file system a
    crash left unmounted where ZDS mounts datastores); None: a person must act, as
    ``action`` says."""

    reason: str
    action: str
    repair: Callable[[ZfsHost], None] | None = None


class Storage(ABC):
    """One of ZFS's two kinds of dataset, as a datastore uses it."""

    kind: ClassVar[str]  # "filesystem" | "volume": ZFS's own name (the ``type`` property)
    said: ClassVar[str]  # how messages name it
    block_property: ClassVar[str]  # recordsize | volblocksize: the block size a user tunes
    defaults: ClassVar[Mapping[str, str]]  # the VM-tuned native properties

    @property
    def is_volume(self) -> bool:
        return self.kind == "volume"

    def properties(self, spec: DatastoreSpec) -> dict[str, str]:
        """Native properties a new datastore of ``spec`` is created with."""
        props = dict(self.defaults)
        o = spec.overrides
        if o.sync:
            props["sync"] = o.sync
        if o.compression:
            props["compression"] = o.compression
        props.update(self._own_properties(spec))
        return props

    @abstractmethod
    def _own_properties(self, spec: DatastoreSpec) -> dict[str, str]:
        """The block size override and what the size sets, in this kind's terms."""

    def round_size(self, size: int, spec_block: int | None) -> int:
        """``size`` as this kind can hold it (a zvol is whole blocks)."""
        return size

    def keep_fixed(self, spec: DatastoreSpec, old: DatastoreSpec) -> DatastoreSpec:
        """``spec`` with what an update cannot change taken from ``old`` when unsaid."""
        return spec

    def update_properties(self, props: dict[str, str], spec: DatastoreSpec,
                          old: DatastoreSpec) -> dict[str, str]:
        """``props`` (a full set) cut to what an update of ``old`` to ``spec`` sets."""
        for fixed in _FIXED:
            props.pop(fixed, None)
        props.update(self._resized(spec, old))
        return props

    @abstractmethod
    def _resized(self, spec: DatastoreSpec, old: DatastoreSpec) -> dict[str, str]:
        """What a change of size or of thin/thick sets."""

    @abstractmethod
    def create(self, zfs: ZfsHost, spec: DatastoreSpec, props: dict[str, str]) -> None:
        """Makes the dataset of a new datastore (ready to serve when it returns)."""

    def clone(self, zfs: ZfsHost, origin: str, spec: DatastoreSpec,
              props: dict[str, str]) -> None:
        """Makes the dataset of a datastore cloned from snapshot ``origin``."""
        for fixed in ("volblocksize", "refreservation"):
            props.pop(fixed, None)
        zfs.clone(origin, spec.dataset, props)

    @abstractmethod
    def location(self, zfs: ZfsHost, dataset: str,
                 info: DatasetInfo) -> tuple[str | None, str | None]:
        """(mount path, device) of the datastore, as its view shows them."""

    def problem(self, dataset: str, info: DatasetInfo, home: str | None) -> Problem | None:
        """Why the dataset cannot be served as it is (None: it can); ``home`` is where
        the pool's datastores are mounted (the mountpoint of ``POOL/datastores``)."""
        return None

    @abstractmethod
    def size_of(self, info: DatasetInfo) -> int:
        """The size the dataset has now, as this kind sets it (0: none set)."""

    def finish(self, zfs: ZfsHost, spec: DatastoreSpec) -> None:
        """Completes the dataset of a datastore whose creation was interrupted after the
        dataset existed (the steps :meth:`create` or :meth:`clone` take after ``zfs
        create``/``zfs clone``), idempotently."""
        return None

    def wait_ready(self, zfs: ZfsHost, dataset: str, timeout: float) -> None:
        """Waits until the OS shows the dataset (udev makes zvol links after an import)."""
        return None  # a file system is there once ZFS mounted it

    def check_rollback(self, zfs: ZfsHost, dataset: str, snapshot: str, short: str) -> None:
        """Raises Conflict when rolling ``dataset`` back to ``snapshot`` would hurt its
        clients in a way only this kind knows (a zvol shrinking under its initiators)."""
        return None  # files: the clients' caches are the service's concern (clients)

    def receive_properties(self, info: DatasetInfo) -> tuple[dict[str, str], tuple[str, ...]]:
        """What a replica of ``info`` is received with (``-o``) and without (``-x``),
        besides what every replica gets."""
        return {}, ()

    def thick_reservation(self, spec: DatastoreSpec) -> str:
        """The refreservation of a thick datastore of ``spec``."""
        return str(spec.size)

    def promoted_properties(self, mountpoint: str | None) -> dict[str, str]:
        """What a promoted replica is set to so it can be served (``mountpoint``: the
        path it keeps, when it keeps one)."""
        return {}

    @abstractmethod
    def after_promote(self, zfs: ZfsHost, zfs_send: ZfsSendHost, dataset: str) -> None:
        """Makes a promoted replica ready to serve."""


class FilesystemStorage(Storage):
    """A ZFS file system, mounted, with ``refquota`` as its size."""

    kind = "filesystem"
    said = "file system"
    block_property = "recordsize"
    defaults = DATASET_PROPERTIES

    def _own_properties(self, spec: DatastoreSpec) -> dict[str, str]:
        props: dict[str, str] = {}
        if spec.overrides.recordsize:
            props["recordsize"] = str(spec.overrides.recordsize)
        props["refquota"] = str(spec.size)
        props["refreservation"] = "none" if spec.thin else str(spec.size)
        return props

    def _resized(self, spec: DatastoreSpec, old: DatastoreSpec) -> dict[str, str]:
        return {"refquota": str(spec.size),
                "refreservation": "none" if spec.thin else str(spec.size)}

    def create(self, zfs: ZfsHost, spec: DatastoreSpec, props: dict[str, str]) -> None:
        zfs.create_filesystem(spec.dataset, props)

    def location(self, zfs: ZfsHost, dataset: str,
                 info: DatasetInfo) -> tuple[str | None, str | None]:
        return info.prop("mountpoint") or None, None

    def size_of(self, info: DatasetInfo) -> int:
        return info.int_prop("refquota")

    @staticmethod
    def mounted_path(info: DatasetInfo) -> str | None:
        """Where the file system is mounted; None when it is not (nothing to serve)."""
        mountpoint = info.prop("mountpoint")
        if mountpoint.startswith("/") and info.prop("mounted", "yes") == "yes":
            return mountpoint
        return None

    def problem(self, dataset: str, info: DatasetInfo, home: str | None) -> Problem | None:
        if self.mounted_path(info) is not None:
            return None
        mountpoint, canmount = info.prop("mountpoint"), info.prop("canmount", "on")
        reason = (f"dataset {dataset} is not mounted (mountpoint {mountpoint}, canmount "
                  f"{canmount}): it cannot be exported")
        where = posixpath.normpath(mountpoint) if mountpoint.startswith("/") else ""
        if canmount == "on" and home and posixpath.dirname(where) == home:
            # what a `zfs create`, a `zpool import` or an export cut half-way leaves:
            # mounting it where datastores live is what the interrupted command would
            # have done (a mountpoint anywhere else may be a replication stream's)
            return Problem(reason, f"the reconcile mounts it ({RECONCILE})",
                           lambda zfs: zfs.mount(dataset))
        if canmount != "on":
            fix = f"zfs set canmount=on {dataset}"
        else:
            fix = f"zfs set mountpoint={home or '<POOL/datastores mountpoint>'}/" \
                  f"{dataset.rsplit('/', 1)[-1]} {dataset}"
        return Problem(reason, f"it is not ZDS's to mount there: check it, then `{fix}` "
                               f"and {RECONCILE}")

    def finish(self, zfs: ZfsHost, spec: DatastoreSpec) -> None:
        info = zfs.get_dataset(spec.dataset, ("mounted", "canmount", "mountpoint"))
        if info is not None and self.mounted_path(info) is None \
                and info.prop("canmount", "on") == "on":
            zfs.mount(spec.dataset)  # `zfs create` was cut before its mount

    def receive_properties(self, info: DatasetInfo) -> tuple[dict[str, str], tuple[str, ...]]:
        props = {"canmount": "noauto"}  # never mounted on the target until promoted
        path = info.prop("mountpoint")
        if path.startswith("/"):
            props["zds:source_path"] = path
        return props, ("mountpoint",)

    def promoted_properties(self, mountpoint: str | None) -> dict[str, str]:
        # what the stream may have set is replaced: where it mounts, and any sharing of
        # ZFS's own (ZDS serves the export, to the request's clients)
        props = {"canmount": "on", "sharenfs": "off", "sharesmb": "off"}
        if mountpoint:
            props["mountpoint"] = mountpoint
        return props

    def after_promote(self, zfs: ZfsHost, zfs_send: ZfsSendHost, dataset: str) -> None:
        zfs_send.mount(dataset)


class VolumeStorage(Storage):
    """A zvol: a block device of ``volsize`` bytes, sparse when thin."""

    kind = "volume"
    said = "zvol"
    block_property = "volblocksize"
    defaults = ZVOL_PROPERTIES

    def _own_properties(self, spec: DatastoreSpec) -> dict[str, str]:
        if spec.overrides.volblocksize:
            return {"volblocksize": str(spec.overrides.volblocksize)}
        return {}

    def round_size(self, size: int, spec_block: int | None) -> int:
        block = spec_block or int(ZVOL_PROPERTIES["volblocksize"])
        return -(-size // block) * block  # zvol sizes are whole blocks

    def keep_fixed(self, spec: DatastoreSpec, old: DatastoreSpec) -> DatastoreSpec:
        if spec.overrides.volblocksize is None:
            return replace(spec, overrides=replace(spec.overrides,
                                                   volblocksize=old.overrides.volblocksize))
        return spec

    def _resized(self, spec: DatastoreSpec, old: DatastoreSpec) -> dict[str, str]:
        props: dict[str, str] = {}
        if spec.size != old.size:
            props["volsize"] = str(spec.size)
        if spec.thin != old.thin:
            props["refreservation"] = "none" if spec.thin else "auto"
        return props

    def create(self, zfs: ZfsHost, spec: DatastoreSpec, props: dict[str, str]) -> None:
        props.pop("refreservation", None)
        zfs.create_volume(spec.dataset, spec.size, spec.thin, props)
        zfs.wait_for_device(spec.dataset)

    def clone(self, zfs: ZfsHost, origin: str, spec: DatastoreSpec,
              props: dict[str, str]) -> None:
        super().clone(zfs, origin, spec, props)
        self.finish(zfs, spec)

    def finish(self, zfs: ZfsHost, spec: DatastoreSpec) -> None:
        info = zfs.get_dataset(spec.dataset, ("volsize",))
        if info is not None and info.int_prop("volsize") < spec.size:
            zfs.set_properties(spec.dataset, {"volsize": str(spec.size)})  # a clone grown
        zfs.wait_for_device(spec.dataset)

    def location(self, zfs: ZfsHost, dataset: str,
                 info: DatasetInfo) -> tuple[str | None, str | None]:
        return None, zfs.zvol_device(dataset)

    def size_of(self, info: DatasetInfo) -> int:
        return info.int_prop("volsize")

    def wait_ready(self, zfs: ZfsHost, dataset: str, timeout: float) -> None:
        zfs.wait_for_device(dataset, timeout=timeout)

    def check_rollback(self, zfs: ZfsHost, dataset: str, snapshot: str, short: str) -> None:
        current = zfs.get_dataset(dataset)
        then = zfs.list_snapshots(dataset)
        old_size = next((s.prop("volsize") for s in then if s.name == snapshot), "")
        if current is not None and old_size and old_size != current.prop("volsize"):
            raise Conflict(
                f"the LUN was resized after snapshot {short} ({old_size} -> "
                f"{current.prop('volsize')} bytes); a rollback would shrink it "
                "under its initiators: clone the snapshot instead")

    def thick_reservation(self, spec: DatastoreSpec) -> str:
        return "auto"

    def after_promote(self, zfs: ZfsHost, zfs_send: ZfsSendHost, dataset: str) -> None:
        zfs.wait_for_device(dataset)


FILESYSTEM = FilesystemStorage()
VOLUME = VolumeStorage()
