"""ZFS adapter: pools, datasets, zvols, snapshots through ``zpool``/``zfs``.

The engine talks to :class:`ZfsHost`; :class:`Zfs` (real, via ``-H -p`` parsable output)
and ``appliance.host.fakes.FakeZfs`` (in memory) implement it. Error contract, shared by
both and held by tests/contract: a missing pool/dataset raises ``NotFound``, an existing
name ``Conflict``, no space ``InsufficientSpace``, no ZFS on the host ``Unavailable``,
a device in use or missing ``Conflict``/``NotFound``; a malformed name, property or size
``InvalidInput``. More precisely (all held by ``appliance.host.contract.zfs_checks``):

- a dataset with children or snapshots needs ``recursive`` to be destroyed, else
  ``Conflict``; a snapshot with clones, or a dataset whose snapshots have clones outside
  it, cannot be destroyed (``Conflict``); a zvol held open (exported by LIO) is busy
  (``Conflict``); destroying a missing dataset or snapshot is ``NotFound``.
- ``rollback`` past newer snapshots is ``Conflict`` unless ``destroy_newer``; even then a
  newer snapshot with clones is ``Conflict``.
- ``create_filesystem``/``create_volume`` create missing parents; ``clone`` does not
  (missing parent -> ``NotFound``). A thick volume or a ``refreservation`` larger than
  the free space -> ``InsufficientSpace``; sparse volumes reserve nothing; a new volume's
  size is rounded up to its volblocksize (as zfs 2.3 does), a resize to a size that is not
  a multiple of it -> ``InvalidInput``.
- ``DatasetInfo.properties`` holds native properties as raw ``-p`` strings ("0" for no
  quota/refreservation; a property that does not apply to the type is absent, and
  ``origin`` is present on clones only: use ``prop()``) and only the user properties
  (``zds:*``) set on that dataset itself (source local/received), never inherited ones.
- ``create_pool`` takes user properties (``zds:*``) in ``pool_properties`` too (set with
  ``zpool set`` right after the create, as zpool 2.3 refuses them at create time).
- ``PoolStatus.scan`` is '' until the first scrub.
- ``list_datasets`` is sorted by name; ``list_snapshots`` of a missing dataset is
  ``NotFound``; ``get_dataset`` of a missing name is ``None``.
- ``snapshot_many`` is all or none per pool, one snapshot per dataset; a held snapshot
  (``hold``; ``userrefs`` > 0) cannot be destroyed (``Conflict``, not retried), and
  ``destroy_snapshots``/``destroy_snapshot_recursive`` are all or none.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from appliance.errors import (
    Conflict,
    HostCommandFailed,
    InsufficientSpace,
    InvalidInput,
    NotFound,
    Unavailable,
    ZdsError,
)
from appliance.host import replica_guard
from appliance.host.run import CommandError, Runner

log = logging.getLogger(__name__)

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

    def offline_device(self, pool: str, device: str) -> None:
        """``zpool offline``; the last copy of some data cannot go (Conflict)."""

    def online_device(self, pool: str, device: str) -> None:
        """``zpool online``: back in service, resilvering what it missed."""

    def replace_device(self, pool: str, device: str, new_device: str,
                       force: bool = False) -> None:
        """``zpool replace``: resilvers onto ``new_device``; ``device`` may be a path, a
        name as ``zpool status`` shows it, or the GUID of a device that is gone."""

    def attach_device(self, pool: str, device: str, new_device: str,
                      force: bool = False) -> None:
        """``zpool attach``: ``new_device`` mirrors ``device`` (a disk becomes a mirror)."""

    def detach_device(self, pool: str, device: str) -> None:
        """``zpool detach``: from a mirror only (Conflict otherwise)."""

    def export_pool(self, pool: str) -> None: ...

    def import_pool(self, pool: str, force: bool = False, shared: bool = False) -> None:
        """``shared``: a pool on an HA pair's shared disks (the cluster's take): udev is
        settled first (fencing's sg_persist makes the disks' links blink) and the pool is
        imported with ``cachefile=none``, so no boot of either node imports it by itself;
        pacemaker decides."""

    def importable_pools(self) -> list[str]: ...

    def set_pool_properties(self, pool: str, properties: Mapping[str, str]) -> None: ...

    def list_datasets(self, root: str,
                      properties: Sequence[str] | None = None) -> list[DatasetInfo]:
        """``root`` and every filesystem/volume below it (no snapshots); [] if missing.
        One command for all of them. With ``properties`` only those are read (a user
        property shows only where it is set; ``type`` always), else all."""

    def get_dataset(self, name: str,
                    properties: Sequence[str] | None = None) -> DatasetInfo | None: ...

    def snapshot_counts(self, root: str) -> dict[str, int]:
        """How many snapshots each filesystem/volume at or below ``root`` has (datasets
        without any are absent); one command for all; {} if ``root`` is missing."""

    def create_filesystem(self, name: str, properties: Mapping[str, str]) -> None:
        """Creates parents as needed (``zfs create -p``). ``zfs create`` creates, then
        mounts: a crash between the two leaves the file system ``mounted=no`` (canmount
        on), which :meth:`mount` finishes."""

    def mount(self, name: str) -> None:
        """``zfs mount``: a file system that is not mounted is; one that is, is left as
        it is. No mountpoint (none, legacy) or canmount=off is ``Conflict``, a volume
        ``InvalidInput``."""

    def unmount(self, name: str) -> None:
        """``zfs unmount``: the state a ``zfs create`` cut before its mount leaves (the
        contract checks reach it this way). Not mounted: nothing to do."""

    def create_volume(
        self, name: str, size: int, sparse: bool, properties: Mapping[str, str]
    ) -> None: ...

    def set_properties(self, name: str, properties: Mapping[str, str]) -> None: ...

    def set_root_user_properties(self, pool: str, properties: Mapping[str, str]) -> None:
        """User properties (a colon in every name) on ``pool``'s root dataset: notes the
        pool carries to whichever node imports it next (the HA pair's job journal). No
        dataset's figures change, so the list's kept read ignores them."""

    def clear_root_user_properties(self, pool: str, names: Sequence[str]) -> None:
        """Removes user properties set by :meth:`set_root_user_properties`."""

    def destroy(self, name: str, recursive: bool = False) -> None: ...

    def snapshot(self, dataset: str, snapname: str,
                 properties: Mapping[str, str] | None = None) -> None: ...

    def list_snapshots(self, dataset: str) -> list[DatasetInfo]:
        """Snapshots of ``dataset`` only (not of children), oldest first."""

    def snapshot_many(self, names: Sequence[str],
                      properties: Mapping[str, str] | None = None) -> None:
        """Takes every ``dataset@snap`` of ``names`` with one ``zfs snapshot`` per pool:
        ZFS takes the snapshots of one pool atomically (one transaction group, all or
        none). A missing dataset is ``NotFound``, a name that exists ``Conflict``, two
        snapshots of one dataset ``InvalidInput`` (zfs 2.3: "multiple snapshots of same
        fs not allowed"); then none of that pool's snapshots is taken."""

    def list_snapshots_under(self, root: str,
                             properties: Sequence[str]) -> list[DatasetInfo]:
        """Every snapshot of ``root`` and of the datasets below it, with only
        ``properties`` (plus ``type``), sorted by name; one command; [] if ``root`` is
        missing."""

    def destroy_snapshots(self, dataset: str, snapnames: Sequence[str]) -> None:
        """Destroys ``dataset@a,b,...`` in one command, atomically: a held snapshot
        (``zfs hold``) or one with clones is ``Conflict`` and then none is destroyed;
        names that do not exist are skipped, but ``NotFound`` if none exists."""

    def destroy_snapshot_recursive(self, root: str, snapname: str) -> None:
        """``zfs destroy -r root@snapname``: that snapshot of ``root`` and of every
        dataset below it that has one, in one command, all or none (a held or cloned one
        is ``Conflict``); ``NotFound`` when no dataset there has it."""

    def hold(self, tag: str, snapshots: Sequence[str]) -> None:
        """Puts the user hold ``tag`` on each snapshot (one ``zfs hold``): a held
        snapshot cannot be destroyed. The same tag twice is ``Conflict``, a missing
        snapshot ``NotFound``."""

    def release(self, tag: str, snapshots: Sequence[str]) -> None:
        """Removes the hold ``tag`` (one ``zfs release``); a tag that is not there is
        ``NotFound``."""

    def holds(self, snapshots: Sequence[str]) -> dict[str, list[str]]:
        """The hold tags on each snapshot (sorted; [] when none), one ``zfs holds``;
        a missing snapshot is ``NotFound``."""

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


# --------------------------------------------------------------------------------------
# The real adapter: ``zpool``/``zfs`` through the Runner, parsable output only.
# --------------------------------------------------------------------------------------

_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/@ -]*")
_SAFE_PROP = re.compile(r"[a-z][a-z0-9_.:@-]*")
_DEVICE = re.compile(r"/[A-Za-z0-9_.:/+-]+")


def _arg_name(name: str) -> str:
    """A dataset/pool/snapshot name safe to put on a command line (engine validates the
    ZFS rules; this only stops option injection and control characters)."""
    if not _SAFE_NAME.fullmatch(name) or "  " in name or name.endswith(" "):
        raise InvalidInput(f"invalid ZFS name {name!r}")
    return name


_DEVICE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:+-]*")


def device_arg(device: str, path: bool = False) -> str:
    """A pool member as zpool takes it: an absolute device path, or (``path=False``) a
    name as ``zpool status`` shows it / a numeric GUID of a device that is gone."""
    if _DEVICE.fullmatch(device) or (not path and _DEVICE_NAME.fullmatch(device)):
        return device
    raise InvalidInput(f"invalid device {device!r}: an absolute path"
                       + ("" if path else ", a name as zpool status shows it, or a GUID"))


def require_user_properties(pool: str, names: Iterable[str]) -> None:
    """Refuses a native property where only user properties may go."""
    for name in names:
        if ":" not in name or not _SAFE_PROP.fullmatch(name):
            raise InvalidInput(f"cannot set property for '{pool}': {name!r} is not a user "
                               "property (module:property)")


def _prop_args(flag: str, props: Mapping[str, str]) -> list[str]:
    out: list[str] = []
    for key, value in props.items():
        if not _SAFE_PROP.fullmatch(key):
            raise InvalidInput(f"invalid property name {key!r}")
        if any(c in value for c in "\t\n\r\0"):
            raise InvalidInput(f"property {key} value contains a control character")
        out += [flag, f"{key}={value}"] if flag else [f"{key}={value}"]
    return out


# ---- error classification ----------------------------------------------------------------
# Real stderr, e.g.:
#   cannot open 'tank/nope': dataset does not exist
#   cannot create 'tank/a/b': parent does not exist
#   cannot open 'nopool': no such pool
#   cannot create 'nopool/x': no such pool 'nopool'
#   cannot import 'nopool': no such pool available
#   cannot open '/dev/disk/by-id/virtio-nope': No such device or address
#   cannot resolve path '/var/tmp/nope.img'
#   cannot create 'tank/fs': dataset already exists
#   cannot create 'tank': pool already exists
#   cannot import 'tank': a pool with that name already exists
#   invalid vdev specification
#   use '-f' to override the following errors:
#   /dev/sdb is part of active pool 'tank'
#   cannot destroy 'tank/v': dataset is busy
#   cannot import 'tank': pool was previously in use from another system.
#   Last accessed by zds (hostid=9a1b2c3d) at Sun Nov 22 04:10:28 2026
#   The pool can be imported, use 'zpool import -f' to import the pool.
#   cannot destroy 'tank/fs': filesystem has children
#   use '-r' to destroy the following datasets:
#   cannot destroy 'tank/fs@s': snapshot has dependent clones
#   cannot destroy snapshot tank/fs@s: it's being held. Run 'zfs holds -r tank/fs@s' to see
#   cannot destroy snapshot tank/fs@s: dataset is busy           (a held snapshot, older zfs)
#   cannot create bookmark 'tank/fs#b': bookmark exists
#   cannot hold snapshot 'tank/fs@s': tag already exists on this dataset
#   cannot release hold from snapshot 'tank/fs@s': no such tag on this dataset
#   could not find any snapshots to destroy; check snapshot names.
#   cannot create snapshots : multiple snapshots of same fs not allowed
#   cannot rollback to 'tank/fs@s1': more recent snapshots or bookmarks exist
#   cannot create 'tank/v': out of space
#   cannot set property for 'tank/v': size is greater than available space
#   cannot set property for 'tank/fs': 'volblocksize' is readonly
#   cannot create 'tank/fs': invalid property 'nosuch'
#   cannot create 'tank/v': volume size must be a multiple of volume block size
#   cannot offline /var/tmp/ex/d0.img: no valid replicas
#   cannot detach /var/tmp/ex/d0.img: only applicable to mirror and replacing vdevs
#   cannot replace nosuch with /var/tmp/ex/d2.img: no such device in pool
#   cannot attach /var/tmp/ex/d3.img to /var/tmp/ex/d0.img: can only attach to mirrors
#     and top-level disks
#   The ZFS modules cannot be auto-loaded.
#   Try running 'modprobe zfs' as root to manually load them.
_UNAVAILABLE = ("modules are not loaded", "failed to initialize the libzfs library",
                "/dev/zfs", "modprobe zfs", "currently suspended", "pool is unavailable")
_NO_SPACE = ("out of space", "greater than available space", "no space left",
             "insufficient space")
_CONFLICT = ("already exists", "is part of", "is in use", "contains a filesystem",
             "is busy", "has children", "has dependent clones", "more recent snapshots",
             "clones of previous snapshots", "less than current used or reserved",
             "device or resource busy", "currently scrubbing", "pool or dataset exists",
             "reserved as a hot spare", "in use as a cache", "currently resilvering",
             "no valid replicas", "only applicable to mirror", "can only attach to mirrors",
             "already in replacing", "device is too small", "devices have different sector",
             "is read-only", "has active shared spare", "in use from another system",
             "accessed by another system", "being held", "bookmark exists",
             "tag already exists", "partially-complete state")
_NOT_FOUND = ("does not exist", "no such pool", "no such tag", "no such device", "no such file",
              "cannot resolve path", "could not find any snapshots", "not found",
              "no pools available", "currently unavailable")
_INVALID = ("invalid", "bad property value", "bad numeric value", "bad volume size",
            "must be a multiple",
            "must be one of", "must be power of", "must be a power of", "cannot be zero",
            "is readonly", "does not apply", "less than the minimum size", "bad mount point",
            "property cannot", "too long", "not supported", "can not be set",
            "can not be modified", "operation does not apply to pools", "too small",
            "must be an absolute path", "read-only property", "doesn't apply",
            "not applicable", "out of range", "not a valid", "must be a block device",
            "multiple snapshots of same fs")


def classify_error(exc: CommandError) -> ZdsError:
    """The engine error for a failed ``zfs``/``zpool`` command, from its stderr."""
    text = (exc.result.stderr or exc.result.stdout).strip()
    low = text.lower()
    msg = text.splitlines()[0] if text else str(exc)
    if len(text.splitlines()) > 1:
        msg = " ".join(line.strip() for line in text.splitlines()[:4])
    for needles, cls in ((_UNAVAILABLE, Unavailable), (_NO_SPACE, InsufficientSpace),
                         (_CONFLICT, Conflict), (_NOT_FOUND, NotFound),
                         (_INVALID, InvalidInput)):
        if any(n in low for n in needles):
            err: ZdsError = cls(msg, detail={"argv": list(exc.result.argv)})
            return err
    return exc


# ---- parsers ---------------------------------------------------------------------------
def _int_or_none(value: str) -> int | None:
    return int(value) if value.isdigit() else None


# `zpool list -H -p -o name,health,size,allocated,free,fragmentation,capacity`, as zpool
# 2.3.2 prints it in the appliance (tab-separated; '-' where unknown, e.g. an UNAVAIL pool):
#   p	ONLINE	503316480	651264	502665216	3	0
ZPOOL_LIST_COLUMNS = "name,health,size,allocated,free,fragmentation,capacity"


def parse_zpool_list(out: str) -> list[PoolInfo]:
    pools: list[PoolInfo] = []
    for line in out.splitlines():
        if not line.strip() or line.startswith("no pools available"):
            continue
        f = line.split("\t")
        if len(f) < 7:
            raise HostCommandFailed(f"unexpected zpool list line: {line!r}")
        pools.append(PoolInfo(
            name=f[0], health=f[1], size=_int_or_none(f[2]) or 0,
            allocated=_int_or_none(f[3]) or 0, free=_int_or_none(f[4]) or 0,
            fragmentation=_int_or_none(f[5].rstrip("%")),
            capacity=_int_or_none(f[6].rstrip("%")) or 0))
    return pools


# `zpool get -H -p -o name,property,value,source all` (zpool 2.3.2, abridged; user
# properties come with source 'local'; the parser drops the feature@ lines):
#   p	size	503316480	-
#   p	health	ONLINE	-
#   p	ashift	12	local
#   p	autotrim	off	default
#   p	comment	-	default
#   p	org.zds:role	contract	local
#   p	zds:role	contract	local
#   p	feature@async_destroy	enabled	local
def parse_get(out: str) -> dict[str, dict[str, tuple[str, str]]]:
    """``name -> {property: (value, source)}`` from ``zfs get``/``zpool get`` with
    ``-H -p -o name,property,value,source``. Values may contain spaces, not tabs."""
    result: dict[str, dict[str, tuple[str, str]]] = {}
    for line in out.splitlines():
        if not line:
            continue
        f = line.split("\t")
        if len(f) < 4:
            raise HostCommandFailed(f"unexpected get line: {line!r}")
        name, prop, source = f[0], f[1], f[-1]
        value = "\t".join(f[2:-1])
        if prop.startswith("feature@"):
            continue
        result.setdefault(name, {})[prop] = (value, source)
    return result


def _props_from(raw: Mapping[str, tuple[str, str]]) -> dict[str, str]:
    """Native properties whatever their source; user properties only where they are set
    (source local or received), not where they are inherited."""
    props: dict[str, str] = {}
    for key, (value, source) in raw.items():
        if ":" in key and not (source == "local" or source.startswith("received")):
            continue
        props[key] = value
    return props


# `zfs get -H -p -o name,property,value,source all p/fs/child` (zfs 2.3.2, abridged; a
# property that does not apply to the type is not listed at all, 'origin' only on clones):
#   p/fs/child	type	filesystem	-
#   p/fs/child	creation	1795316290	-
#   p/fs/child	used	98304	-
#   p/fs/child	available	67010560	-
#   p/fs/child	referenced	98304	-
#   p/fs/child	compressratio	1.00	-
#   p/fs/child	mounted	yes	-
#   p/fs/child	quota	0	default
#   p/fs/child	recordsize	131072	default
#   p/fs/child	mountpoint	/p/fs/child	default
#   p/fs/child	compression	lz4	inherited from p
#   p/fs/child	createtxg	12	-
#   p/fs/child	refquota	67108864	local
#   p/fs/child	refreservation	0	default
#   p/fs/child	guid	8769078409687900901	-
#   p/fs/child	zds:kind	nfs	local
# and for a snapshot, user properties of its dataset show up as inherited:
#   p/fs/child@s1	clones	p/clone	-
#   p/fs/child@s1	zds:note	hello	local
#   p/fs/child@s1	zds:kind	nfs	inherited from p/fs/child
def parse_datasets(out: str) -> list[DatasetInfo]:
    infos: list[DatasetInfo] = []
    for name, raw in parse_get(out).items():
        kind = raw.get("type", ("", ""))[0]
        if kind not in ("filesystem", "volume", "snapshot"):
            continue
        props = _props_from(raw)
        infos.append(DatasetInfo(name=name, type=kind,  # type: ignore[arg-type]
                                 properties=props))
    return infos


# `zfs list -H -p -r -t filesystem,volume -o name,type,snapshot_count,volsize,mountpoint
#  tank/datastores` (zfs 2.3.2; a property that does not apply to the type is "-", as
#  `zfs get` with named properties shows it):
#   tank/datastores	filesystem	1	-	/tank/datastores
#   tank/datastores/bench0002	filesystem	1	-	/tank/datastores/bench0002
#   tank/datastores/bench0003	volume	0	67108864	-
def parse_list_columns(out: str, properties: Sequence[str]) -> list[DatasetInfo]:
    """Datasets from ``zfs list -H -p -o name,PROPS`` (native properties only)."""
    infos: list[DatasetInfo] = []
    for line in out.splitlines():
        if not line:
            continue
        f = line.split("\t")
        if len(f) != len(properties) + 1:
            raise HostCommandFailed(f"unexpected zfs list line: {line!r}")
        props = dict(zip(properties, f[1:], strict=True))
        kind = props.get("type", "")
        if kind in ("filesystem", "volume", "snapshot"):
            infos.append(DatasetInfo(name=f[0], type=kind,  # type: ignore[arg-type]
                                     properties=props))
    return infos


# `zpool status -p p` (zpool 2.3.2; tab-indented config tree, two spaces per level; the
# group lines logs/cache/spares/special/dedup sit at the pool's level without a state; no
# 'scan:' line before the first scrub; a scrub in progress adds indented lines to it):
#   pool: p
#  state: ONLINE
# config:
#
# 	NAME                    STATE     READ WRITE CKSUM
# 	p                       ONLINE       0     0     0
# 	  mirror-0              ONLINE       0     0     0
# 	    /var/tmp/ex/d0.img  ONLINE       0     0     0
# 	    /var/tmp/ex/d1.img  ONLINE       0     0     0
# 	logs<TAB>
# 	  /var/tmp/ex/d2.img    ONLINE       0     0     0
# 	cache
# 	  /var/tmp/ex/d3.img    ONLINE       0     0     0
# 	spares
# 	  /var/tmp/ex/d4.img    AVAIL<3 spaces>
#
# errors: No known data errors
ZPOOL_STATUS_SAMPLE = (
    '  pool: p\n'
    ' state: ONLINE\n'
    'config:\n'
    '\n'
    '\tNAME                    STATE     READ WRITE CKSUM\n'
    '\tp                       ONLINE       0     0     0\n'
    '\t  mirror-0              ONLINE       0     0     0\n'
    '\t    /var/tmp/ex/d0.img  ONLINE       0     0     0\n'
    '\t    /var/tmp/ex/d1.img  ONLINE       0     0     0\n'
    '\tlogs\t\n'
    '\t  /var/tmp/ex/d2.img    ONLINE       0     0     0\n'
    '\tcache\n'
    '\t  /var/tmp/ex/d3.img    ONLINE       0     0     0\n'
    '\tspares\n'
    '\t  /var/tmp/ex/d4.img    AVAIL   \n'
    '\n'
    'errors: No known data errors\n'
)


def parse_zpool_status(out: str) -> list[PoolStatus]:
    """Every pool in ``zpool status -p`` output (several pools are separated by blank
    lines and start with ``pool:``)."""
    results: list[PoolStatus] = []
    fields: dict[str, list[str]] = {}
    rows: list[tuple[int, list[str]]] = []
    key = ""

    def finish() -> None:
        if "pool" not in fields:
            return
        results.append(_build_status(fields, rows))

    for line in out.splitlines():
        m = re.fullmatch(r"\s*([a-z]+): ?(.*)", line)
        if m and not line.startswith("\t") and m.group(1) in (
                "pool", "id", "state", "status", "action", "see", "scan", "config",
                "errors", "remove", "checkpoint", "expand", "raidz", "comment"):
            key = m.group(1)
            if key == "pool":
                finish()
                fields, rows = {}, []
            fields.setdefault(key, []).append(m.group(2).strip())
            continue
        if key == "config":
            if not line.strip() or not line.startswith("\t"):
                continue
            body = line[1:]
            stripped = body.lstrip(" ")
            tokens = stripped.split()
            if not tokens or tokens[:2] == ["NAME", "STATE"]:
                continue
            rows.append(((len(body) - len(stripped)) // 2, tokens))
        elif key and line.startswith(("\t", "        ")) and line.strip():
            fields.setdefault(key, []).append(line.strip())
    finish()
    return results


def _build_status(fields: Mapping[str, list[str]],
                  rows: list[tuple[int, list[str]]]) -> PoolStatus:
    name = fields["pool"][0]

    def counter(tokens: list[str], i: int) -> int:
        return int(tokens[i]) if len(tokens) > i and tokens[i].isdigit() else 0

    def build(start: int, depth: int) -> tuple[list[VdevNode], int]:
        nodes: list[VdevNode] = []
        i = start
        while i < len(rows):
            d, tokens = rows[i]
            if d < depth:
                break
            if d > depth:  # deeper than expected: attach to the previous node
                i += 1
                continue
            children, nxt = build(i + 1, depth + 1)
            nodes.append(VdevNode(
                name=tokens[0], state=tokens[1] if len(tokens) > 1 else "",
                read_errors=counter(tokens, 2), write_errors=counter(tokens, 3),
                checksum_errors=counter(tokens, 4), children=tuple(children)))
            i = nxt
        return nodes, i

    top, _ = build(0, 0)
    if top and top[0].name == name:
        # later top-level rows are the groups: logs, cache, spares, special, dedup
        root = replace(top[0], children=top[0].children + tuple(top[1:]))
    else:
        root = VdevNode(name=name, state="", children=tuple(top))

    def text(key: str) -> str:
        return " ".join(fields.get(key, [])).strip()

    return PoolStatus(name=name, state=text("state"), status=text("status"),
                      action=text("action"), scan=text("scan"), errors=text("errors"),
                      config=root)


def parse_snapshot_counts(out: str) -> dict[str, int]:
    """``zfs list -H -t snapshot -o name`` -> snapshots per dataset."""
    counts: dict[str, int] = {}
    for line in out.splitlines():
        name, sep, _snap = line.strip().partition("@")
        if sep:
            counts[name] = counts.get(name, 0) + 1
    return counts


def parse_holds(out: str) -> dict[str, list[str]]:
    """``zfs holds -H -p SNAP...`` -> tags per snapshot (sorted).

    zfs 2.3 prints one line per hold, tab-separated, nothing for a snapshot without
    holds (``-p``: the time as epoch seconds)::

        tank/datastores/ds1@nightly-2026-11-23T030000Z	zds-keep	1795316290
        tank/datastores/ds1@nightly-2026-11-23T030000Z	zds-repl	1795316295
    """
    tags: dict[str, list[str]] = {}
    for line in out.splitlines():
        f = line.rstrip("\n").split("\t")
        if len(f) < 2 or "@" not in f[0]:
            continue
        tags.setdefault(f[0], []).append(f[1])
    return {k: sorted(v) for k, v in tags.items()}


# `zpool import -d /var/tmp/ex` (zpool 2.3.2; pools that could be imported; with none it
# prints "no pools available to import" on stderr and exits 0):
#   pool: p
#     id: 10965544793563260978
#  state: ONLINE
# action: The pool can be imported using its name or numeric identifier.
# config:
#
# 	p                       ONLINE
# 	  mirror-0              ONLINE
# 	    /var/tmp/ex/d0.img  ONLINE
# 	    /var/tmp/ex/d1.img  ONLINE
# 	cache
# 	  /var/tmp/ex/d3.img
# 	spares
# 	  /var/tmp/ex/d4.img
# 	logs<TAB>
# 	  /var/tmp/ex/d2.img    ONLINE
def parse_zpool_import(out: str) -> list[str]:
    names: list[str] = []
    for line in out.splitlines():
        m = re.fullmatch(r"\s*pool: (\S+)\s*", line)
        if m:
            names.append(m.group(1))
    return names


class Zfs:
    """:class:`ZfsHost` on the real ``zpool``/``zfs`` commands (OpenZFS 2.3)."""

    # A positive available() answer is reused this long: the engine asks before most
    # operations and each ``zpool`` start costs tens of ms (hundreds under emulation).
    AVAILABLE_TTL = 5.0
    # How long ``destroy`` retries a dataset that is "busy" before reporting Conflict.
    BUSY_GRACE = 8.0

    def __init__(self, runner: Runner, *, import_dirs: Sequence[str] = (),
                 poll_interval: float = 0.1, dev_zfs: str = "/dev/zfs") -> None:
        self.runner = runner
        # directories (globs allowed) also searched by import: pools on sparse files
        self.import_dirs = tuple(import_dirs)
        self.poll_interval = poll_interval
        self.dev_zfs = dev_zfs  # the control node; missing = module not loaded
        self._available_until = 0.0

    def _run(self, argv: Sequence[str], timeout: float = 120.0) -> str:
        try:
            return self.runner.run(argv, timeout=timeout).stdout
        except CommandError as exc:
            raise classify_error(exc) from exc

    def available(self) -> bool:
        if not os.path.exists(self.dev_zfs):
            self._available_until = 0.0
            return False
        if time.monotonic() < self._available_until:
            return True
        try:
            result = self.runner.run(["zpool", "list", "-H", "-o", "name"], check=False,
                                     timeout=30)
        except ZdsError:
            return False
        if result.ok:
            self._available_until = time.monotonic() + self.AVAILABLE_TTL
        return result.ok

    def list_pools(self) -> list[PoolInfo]:
        pools = parse_zpool_list(self._run(["zpool", "list", "-H", "-p", "-o",
                                            ZPOOL_LIST_COLUMNS]))
        if not pools:
            return []
        out: list[PoolInfo] = []
        for p in pools:
            # one pool per call: each pool's own user properties, and a pool that vanished
            # or is half-created meanwhile cannot spoil the others' answer
            try:
                props = parse_get(self._run(["zpool", "get", "-H", "-p", "-o",
                                             "name,property,value,source", "all",
                                             _arg_name(p.name)])).get(p.name, {})
            except NotFound:
                continue
            out.append(replace(p, properties={k: v for k, (v, _s) in props.items()}))
        return out

    def pool_status(self, pool: str) -> PoolStatus:
        out = self._run(["zpool", "status", "-p", _arg_name(pool)])
        for st in parse_zpool_status(out):
            if st.name == pool:
                return st
        raise NotFound(f"cannot open '{pool}': no such pool")

    def create_pool(self, pool: str, layout: PoolLayout, pool_properties: Mapping[str, str],
                    fs_properties: Mapping[str, str], force: bool = False) -> None:
        for dev in layout.all_devices():
            if not _DEVICE.fullmatch(dev):
                raise InvalidInput(f"device {dev!r} is not an absolute path")
        # zpool 2.3 refuses user properties at create ("property 'zds:role' is not a valid
        # pool or vdev property") but takes them from `zpool set` right after.
        native = {k: v for k, v in pool_properties.items() if ":" not in k}
        user = {k: v for k, v in pool_properties.items() if ":" in k}
        _prop_args("", user)  # validate before anything is created
        argv = ["zpool", "create"]
        if force:
            argv.append("-f")
        argv += _prop_args("-o", native) + _prop_args("-O", fs_properties)
        argv += [_arg_name(pool), *vdev_args(layout)]
        self._run(argv, timeout=300)
        self.set_pool_properties(pool, user)
        if user:  # read back: one contract run in a booting appliance lost a set
            got = parse_get(self._run(["zpool", "get", "-H", "-p", "-o",
                                       "name,property,value,source", ",".join(user), pool]))
            missing = {k: v for k, v in user.items()
                       if got.get(pool, {}).get(k, ("", ""))[0] != v}
            if missing:
                self.set_pool_properties(pool, missing)

    def destroy_pool(self, pool: str) -> None:
        self._run(["zpool", "destroy", _arg_name(pool)], timeout=300)

    def scrub(self, pool: str) -> None:
        try:
            self._run(["zpool", "scrub", _arg_name(pool)])
        except Conflict as exc:
            if "currently scrubbing" not in str(exc):
                raise  # already scrubbing is what was asked for

    def export_pool(self, pool: str) -> None:
        self._run(["zpool", "export", _arg_name(pool)], timeout=300)

    def offline_device(self, pool: str, device: str) -> None:
        self._run(["zpool", "offline", _arg_name(pool), device_arg(device)])

    def online_device(self, pool: str, device: str) -> None:
        self._run(["zpool", "online", _arg_name(pool), device_arg(device)])

    def replace_device(self, pool: str, device: str, new_device: str,
                       force: bool = False) -> None:
        self._run(["zpool", "replace", *(["-f"] if force else []), _arg_name(pool),
                   device_arg(device), device_arg(new_device, path=True)], timeout=300)

    def attach_device(self, pool: str, device: str, new_device: str,
                      force: bool = False) -> None:
        self._run(["zpool", "attach", *(["-f"] if force else []), _arg_name(pool),
                   device_arg(device), device_arg(new_device, path=True)], timeout=300)

    def detach_device(self, pool: str, device: str) -> None:
        self._run(["zpool", "detach", _arg_name(pool), device_arg(device)])

    def _dir_args(self) -> list[str]:
        """``-d DIR`` for every existing directory matching ``import_dirs`` (globs allowed,
        e.g. /var/lib/zds/pools/*: pools on sparse files live in one directory each)."""
        args: list[str] = []
        for pattern in self.import_dirs:
            for d in sorted(glob.glob(pattern)):
                if os.path.isdir(d):
                    args += ["-d", d]
        return args

    def import_pool(self, pool: str, force: bool = False, shared: bool = False) -> None:
        """Imports from the disks (default search) or else from ``import_dirs``.

        A pool another system (another hostid) used last and did not export is
        ``Conflict`` unless ``force`` (``zpool import -f``): forcing a pool that the other
        system still has imported corrupts it.

        Imported without mounting (``-N``); then whatever a replication stream set to
        mount or share a file system somewhere is reset (:mod:`replica_guard`, the same
        check the boot unit runs before ``zfs mount -a``), and only then is the pool
        mounted.
        """
        flags = ["-N", "-f"] if force else ["-N"]
        if shared:
            self._udev_settle()
            flags += ["-o", "cachefile=none"]
        try:
            self._run(["zpool", "import", *flags, _arg_name(pool)], timeout=300)
        except NotFound:
            dirs = self._dir_args()
            if not dirs:
                raise
            self._run(["zpool", "import", *flags, *dirs, _arg_name(pool)], timeout=300)
        try:
            fixed = replica_guard.sweep([pool], self._guard_run)
        except RuntimeError as exc:
            raise HostCommandFailed(f"pool {pool} was imported but not mounted: {exc}") \
                from exc
        for line in fixed:
            log.warning("pool %s: %s (the value came from a replication stream)", pool, line)
        self._run(["zfs", "mount", "-a"], timeout=300)

    def _guard_run(self, argv: Sequence[str]) -> tuple[int, str]:
        result = self.runner.run(argv, check=False, timeout=300)
        return result.returncode, result.stdout + result.stderr

    def _scan(self, dirs: list[str]) -> list[str]:
        result = self.runner.run(["zpool", "import", *dirs], check=False, timeout=120)
        if not result.ok and "no pools available" not in result.stderr:
            raise classify_error(CommandError(result))
        return parse_zpool_import(result.stdout)

    def importable_pools(self) -> list[str]:
        """Pools ``zpool import`` finds on the disks, plus those in ``import_dirs``
        (``-d`` replaces the default search, so both are scanned)."""
        names = self._scan([])
        dirs = self._dir_args()
        if dirs:
            names += [n for n in self._scan(dirs) if n not in names]
        return names

    def set_pool_properties(self, pool: str, properties: Mapping[str, str]) -> None:
        for arg in _prop_args("", properties):
            self._run(["zpool", "set", arg, _arg_name(pool)])

    def _get(self, *args: str) -> list[DatasetInfo]:
        return parse_datasets(self._run(["zfs", "get", "-H", "-p", "-o",
                                         "name,property,value,source", *args]))

    @staticmethod
    def _prop_list(properties: Sequence[str] | None) -> str:
        if properties is None:
            return "all"
        wanted = ["type", *(p for p in properties if p != "type")]
        for key in wanted:
            if not _SAFE_PROP.fullmatch(key):
                raise InvalidInput(f"invalid property name {key!r}")
        return ",".join(dict.fromkeys(wanted))

    def list_datasets(self, root: str,
                      properties: Sequence[str] | None = None) -> list[DatasetInfo]:
        try:
            if properties is not None and not any(":" in p for p in properties):
                # native properties only: `zfs list -o` prints one line per dataset where
                # `zfs get` prints one per property (the same ZFS work, ~25x less text
                # to parse); user properties need get's source column
                props = self._prop_list(properties)
                infos = parse_list_columns(self._run(
                    ["zfs", "list", "-H", "-p", "-r", "-t", "filesystem,volume", "-o",
                     f"name,{props}", _arg_name(root)]), props.split(","))
            else:
                infos = self._get("-r", "-t", "filesystem,volume",
                                  self._prop_list(properties), _arg_name(root))
        except NotFound:
            return []
        return sorted(infos, key=lambda i: i.name)

    def get_dataset(self, name: str,
                    properties: Sequence[str] | None = None) -> DatasetInfo | None:
        try:
            infos = self._get(self._prop_list(properties), _arg_name(name))
        except NotFound:
            return None
        return infos[0] if infos else None

    def snapshot_counts(self, root: str) -> dict[str, int]:
        # `zfs list -H -t snapshot -o name -r tank/datastores` (zfs 2.3.2):
        #   tank/datastores/ds1@before-upgrade
        #   tank/datastores/ds1@zds-auto-2026-11-23T0300Z
        #   tank/datastores/lun1@s1
        try:
            out = self._run(["zfs", "list", "-H", "-t", "snapshot", "-o", "name", "-r",
                             _arg_name(root)], timeout=300)
        except NotFound:
            return {}
        return parse_snapshot_counts(out)

    def _create(self, name: str, argv: list[str]) -> None:
        try:
            self._run(argv)
        except NotFound as exc:
            if "parent does not exist" not in str(exc) or "/" not in name:
                raise
            self._run(["zfs", "create", "-p", name.rsplit("/", 1)[0]])
            self._run(argv)

    def create_filesystem(self, name: str, properties: Mapping[str, str]) -> None:
        self._create(name, ["zfs", "create", *_prop_args("-o", properties), _arg_name(name)])

    def mount(self, name: str) -> None:
        try:
            self._run(["zfs", "mount", _arg_name(name)])
        except (NotFound, Unavailable, InvalidInput):
            raise
        except ZdsError as exc:
            # zfs 2.3: "cannot mount 'tank/fs': filesystem already mounted"
            if "already mounted" in exc.message:
                return
            # "'canmount' property is set to 'off'", "no mountpoint set", "legacy
            # mountpoint", "directory is not empty"...
            raise Conflict(exc.message, detail=exc.detail) from exc

    def unmount(self, name: str) -> None:
        try:
            self._run(["zfs", "unmount", _arg_name(name)])
        except (NotFound, Unavailable):
            raise
        except ZdsError as exc:
            # "cannot unmount 'tank/fs': not currently mounted"
            if "not currently mounted" in exc.message:
                return
            raise

    def create_volume(self, name: str, size: int, sparse: bool,
                      properties: Mapping[str, str]) -> None:
        argv = ["zfs", "create"]
        if sparse:
            argv.append("-s")
        argv += ["-V", str(int(size)), *_prop_args("-o", properties), _arg_name(name)]
        self._create(name, argv)

    def set_properties(self, name: str, properties: Mapping[str, str]) -> None:
        if properties:
            self._run(["zfs", "set", *_prop_args("", properties), _arg_name(name)])

    def set_root_user_properties(self, pool: str, properties: Mapping[str, str]) -> None:
        require_user_properties(pool, properties)
        self.set_properties(pool.split("/")[0], properties)

    def clear_root_user_properties(self, pool: str, names: Sequence[str]) -> None:
        require_user_properties(pool, names)
        root = _arg_name(pool.split("/")[0])
        for name in names:  # `zfs inherit` takes one property; it prints nothing
            self._run(["zfs", "inherit", name, root])

    def destroy(self, name: str, recursive: bool = False) -> None:
        argv = ["zfs", "destroy"]
        if recursive and "@" not in name:
            argv.append("-r")
        argv.append(_arg_name(name))
        deadline: float | None = None
        while True:
            try:
                self._run(argv, timeout=600)
                return
            except Conflict as exc:
                # A zvol made moments ago is briefly "busy" while udev/blkid probe its
                # /dev/zdN (seen under emulation); a zvol held by LIO stays busy.
                if "dataset is busy" not in str(exc) or "@" in name:
                    raise  # a busy snapshot is held (zfs hold): waiting changes nothing
                if deadline is None:
                    deadline = time.monotonic() + self.BUSY_GRACE
                    self._udev_settle()
                elif time.monotonic() >= deadline:
                    raise
                time.sleep(self.poll_interval)

    def snapshot(self, dataset: str, snapname: str,
                 properties: Mapping[str, str] | None = None) -> None:
        self._run(["zfs", "snapshot", *_prop_args("-o", properties or {}),
                   _arg_name(f"{dataset}@{snapname}")])

    def snapshot_many(self, names: Sequence[str],
                      properties: Mapping[str, str] | None = None) -> None:
        by_pool: dict[str, list[str]] = {}
        for name in names:
            if "@" not in name:
                raise InvalidInput(f"{name!r} is not a snapshot name (dataset@snap)")
            by_pool.setdefault(name.split("/")[0].split("@")[0], []).append(_arg_name(name))
        props = _prop_args("-o", properties or {})
        for pool in sorted(by_pool):
            # a missing dataset or an existing name fails the whole command: nothing of
            # this pool is taken (lzc_snapshot is atomic)
            self._run(["zfs", "snapshot", *props, *by_pool[pool]], timeout=600)

    def list_snapshots_under(self, root: str,
                             properties: Sequence[str]) -> list[DatasetInfo]:
        try:
            infos = self._get("-r", "-t", "snapshot", self._prop_list(properties),
                              _arg_name(root))
        except NotFound:
            return []
        return sorted(infos, key=lambda i: i.name)

    def destroy_snapshots(self, dataset: str, snapnames: Sequence[str]) -> None:
        if not snapnames:
            return
        for n in snapnames:  # each checked on its own: ',' is the list separator here
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.:-]*", n):
                raise InvalidInput(f"invalid snapshot name {n!r}")
        # `zfs destroy tank/ds/a@s1,s2` is one lzc_destroy_snaps: all or none
        self._run(["zfs", "destroy", f"{_arg_name(dataset)}@{','.join(snapnames)}"],
                  timeout=600)

    def destroy_snapshot_recursive(self, root: str, snapname: str) -> None:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.:-]*", snapname):
            raise InvalidInput(f"invalid snapshot name {snapname!r}")
        # one lzc_destroy_snaps for every dataset below root that has @snapname
        self._run(["zfs", "destroy", "-r", _arg_name(f"{root}@{snapname}")], timeout=600)

    @staticmethod
    def _tag(tag: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}", tag):
            raise InvalidInput(f"invalid hold tag {tag!r}")
        return tag

    def hold(self, tag: str, snapshots: Sequence[str]) -> None:
        if snapshots:
            self._run(["zfs", "hold", self._tag(tag), *(_arg_name(s) for s in snapshots)])

    def release(self, tag: str, snapshots: Sequence[str]) -> None:
        if snapshots:
            self._run(["zfs", "release", self._tag(tag),
                       *(_arg_name(s) for s in snapshots)])

    def holds(self, snapshots: Sequence[str]) -> dict[str, list[str]]:
        if not snapshots:
            return {}
        found = parse_holds(self._run(["zfs", "holds", "-H", "-p",
                                       *(_arg_name(s) for s in snapshots)]))
        return {s: found.get(s, []) for s in snapshots}

    def list_snapshots(self, dataset: str) -> list[DatasetInfo]:
        infos = self._get("-r", "-d", "1", "-t", "snapshot", "all", _arg_name(dataset))
        own = [i for i in infos if i.name.split("@", 1)[0] == dataset]
        return sorted(own, key=lambda i: (i.int_prop("createtxg"), i.name))

    def rollback(self, snapshot: str, destroy_newer: bool = False) -> None:
        argv = ["zfs", "rollback"]
        if destroy_newer:
            argv.append("-r")
        self._run([*argv, _arg_name(snapshot)])

    def clone(self, snapshot: str, target: str, properties: Mapping[str, str]) -> None:
        self._run(["zfs", "clone", *_prop_args("-o", properties), _arg_name(snapshot),
                   _arg_name(target)])

    def zvol_device(self, name: str) -> str:
        return f"/dev/zvol/{name}"

    def _udev_settle(self) -> None:
        """Waits (10 s at most) for udev to finish the events queued so far."""
        self.runner.run(["udevadm", "settle", "--timeout=10"], check=False, timeout=15)

    def wait_for_device(self, name: str, timeout: float = 30.0) -> str:
        info = self.get_dataset(name)
        if info is None:
            raise NotFound(f"cannot open '{name}': dataset does not exist")
        if info.type != "volume":
            raise InvalidInput(f"'{name}' is not a volume")
        path = self.zvol_device(name)
        deadline = time.monotonic() + timeout
        settled = False
        while not os.path.exists(path):
            if time.monotonic() >= deadline:
                raise Unavailable(f"{path} did not appear within {timeout:.0f} s (udev)")
            if not settled and time.monotonic() + timeout / 2 >= deadline:
                self._udev_settle()
                settled = True
                if not os.path.exists(path):
                    # after an import of hundreds of zvols udev has been seen to drop
                    # events (the boot's zvol_wait then waits forever, 253 of 255 links):
                    # replay them, the links are made idempotently
                    self.runner.run(["udevadm", "trigger", "--action=change",
                                     "--subsystem-match=block", "--sysname-match=zd*"],
                                    check=False, timeout=30)
                    self._udev_settle()
            time.sleep(self.poll_interval)
        return path
