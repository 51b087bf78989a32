"""In-memory twin of :class:`appliance.host.zfs.Zfs` for unit and API tests.

It follows the error contract of :mod:`appliance.host.zfs` and is held to the real
adapter by the checks in :mod:`appliance.host.contract`. Properties come back as the raw
``-p`` strings ``zfs get -H -p`` prints (bytes, epoch seconds, ``-`` for "not
applicable"); only user properties (``zds:*``, anything with a colon) set *locally* on a
dataset are reported, as the real adapter does.

Space accounting is simple but honest: a pool's usable space is the sum of its data vdevs
(mirror: smallest side, raidzN: (n - N) * smallest) minus ZFS's slop space; each
filesystem/volume charges ``max(written data, refreservation)``; a thick volume's
refreservation equals its volsize; sparse volumes and clones reserve nothing.

Test helpers: ``FakeZfs(disks={"/dev/sdb": 10 * GiB})`` declares disks,
:meth:`FakeZfs.with_pool` builds a ready pool, :meth:`FakeZfs.write` pretends data was
written, ``down = True`` makes every call raise ``Unavailable``, :meth:`add_holder`
marks devices as held open (``zfs destroy`` of a held zvol -> ``Conflict`` "busy"),
:meth:`drop_link` removes a zvol's /dev link as a lost udev event does (waiting for the
device re-triggers udev and brings it back, as the real adapter does; ``stuck_links``
never come back).

Commands the real ``zfs``/``zpool`` carry out in more than one step a crash can fall
between are modelled as such, and ``on_step`` (when set) is called at each point between
them, so a test can kill the engine there (tests/unit/crashpoints.py):
``zfs create``/``zfs clone`` of a file system creates it, then mounts it; ``zfs destroy``
unmounts, then destroys; ``zpool import`` imports, then mounts; ``zpool export``
unmounts, then exports.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from appliance.errors import Conflict, InsufficientSpace, InvalidInput, NotFound, Unavailable
from appliance.host.zfs import (
    DatasetInfo,
    PoolInfo,
    PoolLayout,
    PoolStatus,
    VdevNode,
    VdevSpec,
    device_arg,
    require_user_properties,
)

GiB = 1 << 30
MiB = 1 << 20
MIN_DEVICE_SIZE = 64 * MiB  # zpool refuses smaller vdevs

DsType = Literal["filesystem", "volume"]

# Native properties a caller may set, with what is valid for each.
_ENUMS: dict[str, set[str]] = {
    "compression": {"on", "off", "lz4", "gzip", "zle", "lzjb", "zstd", "zstd-fast",
                    *(f"gzip-{i}" for i in range(1, 10)), *(f"zstd-{i}" for i in range(1, 20))},
    "sync": {"standard", "always", "disabled"},
    "atime": {"on", "off"},
    "relatime": {"on", "off"},
    "xattr": {"on", "off", "sa", "dir"},
    "acltype": {"off", "noacl", "nfsv4", "posix", "posixacl"},
    "logbias": {"latency", "throughput"},
    "primarycache": {"all", "none", "metadata"},
    "secondarycache": {"all", "none", "metadata"},
    "dedup": {"on", "off", "verify", "sha256"},
    "canmount": {"on", "off", "noauto"},
    "readonly": {"on", "off"},
    "volmode": {"default", "full", "geom", "dev", "none"},
    "snapdir": {"hidden", "visible"},
    "redundant_metadata": {"all", "most", "some", "none"},
    "checksum": {"on", "off", "fletcher4", "sha256", "sha512", "blake3", "edonr", "skein"},
    "aclinherit": {"discard", "noallow", "restricted", "passthrough", "passthrough-x"},
    "dnodesize": {"legacy", "auto", "1k", "2k", "4k", "8k", "16k"},
}
_SIZES = {"quota", "refquota", "reservation", "refreservation", "volsize"}
_BLOCKSIZES = {"recordsize", "volblocksize"}
_INHERITABLE = {"compression", "sync", "atime", "relatime", "xattr", "acltype", "logbias",
                "primarycache", "secondarycache", "dedup", "readonly", "snapdir", "checksum",
                "recordsize", "redundant_metadata", "aclinherit", "dnodesize", "volmode"}
_DEFAULTS = {"compression": "on", "sync": "standard", "atime": "on", "relatime": "on",
             "xattr": "on", "acltype": "off", "logbias": "latency", "primarycache": "all",
             "secondarycache": "all", "dedup": "off", "readonly": "off", "snapdir": "hidden",
             "checksum": "on", "recordsize": str(128 * 1024), "redundant_metadata": "all",
             "aclinherit": "restricted", "dnodesize": "legacy", "volmode": "default",
             "canmount": "on"}
_FS_ONLY = {"recordsize", "mountpoint", "quota", "refquota", "atime", "relatime", "xattr",
            "acltype", "canmount", "snapdir", "aclinherit", "dnodesize"}
_VOL_ONLY = {"volsize", "volblocksize", "volmode"}
_POOL_PROPS = {"ashift", "autotrim", "autoexpand", "autoreplace", "failmode", "comment",
               "cachefile", "altroot", "listsnapshots", "multihost", "delegation"}
DEFAULT_VOLBLOCKSIZE = 16 * 1024
# each fake draws guids of its own (two appliances' snapshots never share one by chance)
_SEEDS = itertools.count(7)


def _parse_size(key: str, value: str) -> int:
    """Accepts raw bytes or a ZFS size suffix (1G, 512K, 1.5T); 'none' means 0."""
    v = value.strip()
    if v == "none" and key != "volsize":
        return 0
    units = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40,
             "P": 1 << 50}
    num = v.rstrip("BKMGTPbkmgtp")
    suffix = v[len(num):].upper().rstrip("B") or ""
    try:
        n = float(num) if "." in num else int(num)
        if suffix not in units or n < 0:
            raise ValueError(value)
    except ValueError:
        raise InvalidInput(f"bad numeric value '{value}' for property '{key}'") from None
    return int(n * units[suffix])


def _slop(dspace: int) -> int:
    """ZFS keeps back 1/32 of the pool (at least min(128 MiB, half), at most 128 GiB)."""
    return min(max(dspace >> 5, min(dspace >> 1, 128 * MiB)), 128 * GiB)


@dataclass
class _Snap:
    name: str  # short name after '@'
    guid: int
    created: int
    txg: int
    referenced: int
    user: dict[str, str] = field(default_factory=dict)
    volsize: str = "-"  # a volume's size when the snapshot was taken (as in ZFS)
    written: int = 0  # bytes changed since the previous snapshot (an incremental's size)
    content: str = ""  # what the data was (tests compare replicas with it)
    holds: dict[str, int] = field(default_factory=dict)  # zfs hold tag -> when; no destroy


@dataclass
class _Ds:
    name: str
    type: DsType
    guid: int
    created: int
    txg: int
    local: dict[str, str] = field(default_factory=dict)  # locally set natives, raw
    user: dict[str, str] = field(default_factory=dict)
    data: int = 0  # bytes written (referenced)
    origin: str | None = None  # "pool/ds@snap" for clones
    snaps: list[_Snap] = field(default_factory=list)
    written: int = 0  # bytes changed since the newest snapshot
    content: str = ""  # a tag for the data now (FakeZfs.write sets it)
    bookmarks: list[_Snap] = field(default_factory=list)  # name, guid, txg of the snapshot
    partial: object | None = None  # a resumable partial receive (fakes.replication)
    # a file system can be mounted (canmount on, a mountpoint); False: it is not, as a
    # `zfs create` cut between creating and mounting or a `zfs unmount` leaves it
    mounted: bool = True


@dataclass
class _Pool:
    name: str
    layout: PoolLayout
    size: int  # raw size as 'zpool list' shows it
    dspace: int  # usable by datasets before slop
    guid: int
    created: int
    props: dict[str, str] = field(default_factory=dict)
    datasets: dict[str, _Ds] = field(default_factory=dict)
    scan: str = ""
    imported: bool = True
    states: dict[str, str] = field(default_factory=dict)  # device -> state, if not ONLINE


def _free(pool: _Pool, used: int) -> int:
    """What datasets may still use: usable space, less the slop and what is ``used``."""
    return max(0, pool.dspace - _slop(pool.dspace) - used)


@dataclass
class _Tally:
    """Per dataset, with its descendants: what it uses, and its snapshots."""

    used: dict[str, int] = field(default_factory=dict)
    snapshots: dict[str, int] = field(default_factory=dict)


def _device_usable(size: int) -> int:
    """What a device gives to datasets: less its labels and boot area (4.5 MiB) and
    about 1/64 for metadata, so free space, like ZFS's, is never a round number."""
    return (size - 9 * MiB // 2 - size // 64) // 512 * 512


def _vdev_sizes(kind: str, sizes: list[int]) -> tuple[int, int]:
    """(raw size as ``zpool list`` shows it, usable size) of one top-level vdev."""
    smallest = min(sizes)
    if kind == "disk":
        return sizes[0], _device_usable(sizes[0])
    if kind == "mirror":
        return smallest, _device_usable(smallest)
    parity = int(kind[-1])
    return smallest * len(sizes), _device_usable(smallest) * (len(sizes) - parity)


_MIN_DEVICES = {"disk": 1, "mirror": 2, "raidz1": 2, "raidz2": 3, "raidz3": 4}


def _only(info: DatasetInfo, properties: Sequence[str] | None) -> DatasetInfo:
    """What ``zfs get PROP,...`` returns: only those properties (and ``type``)."""
    if properties is None:
        return info
    keep = {"type", *properties}
    return replace(info, properties={k: v for k, v in info.properties.items() if k in keep})


class FakeZfs:
    """In-memory pools, datasets, volumes, snapshots and clones."""

    def __init__(self, disks: Mapping[str, int] | None = None, *,
                 clock: Callable[[], float] = time.time, seed: int | None = None) -> None:
        self.disks: dict[str, int] = dict(disks or {})
        self.down = False
        self._pools: dict[str, _Pool] = {}
        self._clock = clock
        self._rng = random.Random(next(_SEEDS) if seed is None else seed)
        self._txg = 1
        self._holders: list[Callable[[str], bool]] = []
        self.existing_devices: set[str] = set()  # zvol nodes udev "created"
        self.stuck_links: set[str] = set()  # dropped links a udev trigger does not restore
        self.foreign: set[str] = set()  # exported pools last used by another hostid
        self.shared_imports: list[str] = []  # pools imported as an HA pair's (shared=True)
        # called between the steps of a multi-step command (see the module docstring)
        self.on_step: Callable[[str], None] | None = None

    # ---- test helpers -------------------------------------------------------------
    @classmethod
    def with_pool(cls, name: str = "tank", size: int = 100 * GiB,
                  fs_properties: Mapping[str, str] | None = None) -> FakeZfs:
        """A fake with one single-disk pool of ``size`` bytes (disk virtio-zdsdata0)."""
        disk = "/dev/disk/by-id/virtio-zdsdata0"
        fake = cls(disks={disk: size})
        fake.create_pool(name, PoolLayout(data=(VdevSpec("disk", (disk,)),)), {},
                         dict(fs_properties or {}))
        return fake

    def add_disk(self, path: str, size: int) -> None:
        self.disks[path] = size

    def write(self, name: str, nbytes: int, changed: int | None = None,
              content: str | None = None) -> None:
        """Pretend ``nbytes`` are now referenced by dataset/volume ``name``, of which
        ``changed`` (default: the growth, at least 1) were written since the last
        snapshot; ``content`` tags the new data (default: a new generation)."""
        ds = self._ds(name)
        extra = max(0, nbytes - max(ds.data, self._refres(ds)))
        if extra > self._pool_avail(self._pool_of(name)):
            raise InsufficientSpace(f"cannot write to '{name}': out of space")
        ds.written += changed if changed is not None else max(1, nbytes - ds.data)
        ds.data = nbytes
        ds.content = content or f"{name}:{self._next_txg()}"

    def add_holder(self, holds: Callable[[str], bool]) -> None:
        """``holds(device_path)`` -> True while something (LIO) keeps the device open."""
        self._holders.append(holds)

    def device_exists(self, path: str) -> bool:
        prefix = "/dev/zvol/"
        if not path.startswith(prefix):
            return False
        ds = self._find(path[len(prefix):])
        return ds is not None and ds.type == "volume" and path in self.existing_devices

    def drop_link(self, path: str) -> None:
        """udev lost the event that makes this zvol's /dev link (seen after imports of
        hundreds of zvols): the device is missing until udev is triggered again."""
        self.existing_devices.discard(path)

    def _step(self, what: str) -> None:
        if self.on_step is not None:
            self.on_step(what)

    # ---- internals ----------------------------------------------------------------
    def _up(self) -> None:
        if self.down:
            raise Unavailable("ZFS is not available: the zfs kernel module is not loaded")

    def _next_txg(self) -> int:
        self._txg += 1
        return self._txg

    def _guid(self) -> int:
        return self._rng.getrandbits(63) | 1

    def _now(self) -> int:
        return int(self._clock())

    def _pool(self, name: str) -> _Pool:
        p = self._pools.get(name)
        if p is None or not p.imported:
            raise NotFound(f"cannot open '{name}': no such pool")
        return p

    def _pool_of(self, name: str) -> _Pool:
        return self._pool(name.split("/")[0].split("@")[0])

    def _find(self, name: str) -> _Ds | None:
        p = self._pools.get(name.split("/")[0])
        if p is None or not p.imported:
            return None
        return p.datasets.get(name)

    def _ds(self, name: str) -> _Ds:
        ds = self._find(name)
        if ds is None:
            raise NotFound(f"cannot open '{name}': dataset does not exist")
        return ds

    def _snap(self, full: str) -> tuple[_Ds, _Snap]:
        if "@" not in full:
            raise InvalidInput(f"'{full}' is not a snapshot name")
        dsname, snapname = full.split("@", 1)
        ds = self._find(dsname)
        if ds is not None:
            for s in ds.snaps:
                if s.name == snapname:
                    return ds, s
        raise NotFound(f"cannot open '{full}': dataset does not exist")

    def _children(self, pool: _Pool, name: str) -> list[_Ds]:
        return [d for n, d in pool.datasets.items() if n.startswith(name + "/")]

    @staticmethod
    def _refres(ds: _Ds) -> int:
        return int(ds.local.get("refreservation", "0"))

    @staticmethod
    def _charge(ds: _Ds) -> int:
        return max(ds.data, int(ds.local.get("refreservation", "0")))

    def _pool_used(self, pool: _Pool) -> int:
        return sum(self._charge(d) for d in pool.datasets.values())

    def _pool_avail(self, pool: _Pool) -> int:
        return _free(pool, self._pool_used(pool))

    def _used(self, pool: _Pool, ds: _Ds) -> int:
        return self._charge(ds) + sum(self._charge(c) for c in self._children(pool, ds.name))

    def _usage(self, pool: _Pool) -> _Tally:
        """Every dataset's ``used`` (its charge and its descendants'), and the pool's
        under its name, and the snapshots at and below each, in one pass: listing N
        datasets costs N times their depth, not N squared as asking :meth:`_used`,
        :meth:`_pool_used` and :meth:`_snapshot_count` for each would."""
        tally = _Tally()
        for name, ds in pool.datasets.items():
            charge, snaps = self._charge(ds), len(ds.snaps)
            while True:
                tally.used[name] = tally.used.get(name, 0) + charge
                tally.snapshots[name] = tally.snapshots.get(name, 0) + snaps
                if "/" not in name:
                    break
                name = name.rsplit("/", 1)[0]
        return tally

    def _effective(self, pool: _Pool, ds: _Ds, key: str) -> tuple[str, str]:
        """(value, source) of an inheritable native property."""
        name = ds.name
        while True:
            cur = pool.datasets.get(name)
            if cur is not None and key in cur.local:
                return cur.local[key], "local" if cur is ds else f"inherited from {name}"
            if "/" not in name:
                return _DEFAULTS.get(key, "-"), "default"
            name = name.rsplit("/", 1)[0]

    def _mountpoint(self, pool: _Pool, ds: _Ds) -> str:
        name = ds.name
        suffix = ""
        while True:
            cur = pool.datasets[name]
            if "mountpoint" in cur.local:
                mp = cur.local["mountpoint"]
                if mp in ("none", "legacy"):
                    return mp
                return (mp.rstrip("/") + suffix) or "/"
            if "/" not in name:
                return "/" + name + suffix
            parent, leaf = name.rsplit("/", 1)
            suffix = "/" + leaf + suffix
            name = parent

    def _validate_props(self, kind: DsType, props: Mapping[str, str],
                        creating: bool) -> dict[str, str]:
        """Checks names/values like zfs does and returns them normalized to raw form."""
        out: dict[str, str] = {}
        for key, value in props.items():
            if ":" in key:
                if len(value) > 8191:
                    raise InvalidInput(f"property '{key}' value is too long")
                out[key] = value
                continue
            if kind == "volume" and key in _FS_ONLY:
                raise InvalidInput(f"'{key}' does not apply to datasets of this type")
            if kind == "filesystem" and key in _VOL_ONLY:
                raise InvalidInput(f"'{key}' does not apply to datasets of this type")
            if key in _ENUMS:
                if value not in _ENUMS[key]:
                    raise InvalidInput(f"bad property value '{value}' for '{key}'")
                out[key] = value
            elif key == "refreservation" and value == "auto":
                if kind != "volume":
                    raise InvalidInput("'refreservation=auto' only applies to volumes")
                out[key] = value
            elif key in _SIZES:
                out[key] = str(_parse_size(key, value))
            elif key in _BLOCKSIZES:
                if key == "volblocksize" and not creating:
                    raise InvalidInput("'volblocksize' is readonly")
                n = _parse_size(key, value)
                if n < 512 or n > 16 * MiB or n & (n - 1):
                    raise InvalidInput(f"'{key}' must be a power of 2 from 512B to 16M")
                out[key] = str(n)
            elif key == "mountpoint":
                if value not in ("none", "legacy") and not value.startswith("/"):
                    raise InvalidInput(f"bad mount point '{value}': must be an absolute path")
                out[key] = value
            elif key in ("sharenfs", "sharesmb"):
                out[key] = value
            elif key == "snapshot_limit":
                if value != "none" and not value.isdigit():
                    raise InvalidInput(f"bad numeric value '{value}'")
                out[key] = value
            else:
                raise InvalidInput(f"invalid property '{key}'")
        return out

    def _check_parent(self, name: str, make_parents: bool) -> _Pool:
        pool = self._pools.get(name.split("/")[0])
        if pool is None or not pool.imported:
            raise NotFound(f"cannot create '{name}': no such pool '{name.split('/')[0]}'")
        if "/" not in name:
            raise Conflict(f"cannot create '{name}': dataset already exists")
        if name in pool.datasets:
            raise Conflict(f"cannot create '{name}': dataset already exists")
        parent = name.rsplit("/", 1)[0]
        node = pool.datasets.get(parent)
        if node is None and not make_parents:
            raise NotFound(f"cannot create '{name}': parent does not exist")
        # an ancestor that is a volume cannot have children
        probe = parent
        while probe:
            anc = pool.datasets.get(probe)
            if anc is not None and anc.type == "volume":
                raise InvalidInput(f"cannot create '{name}': parent is not a filesystem")
            probe = probe.rsplit("/", 1)[0] if "/" in probe else ""
        return pool

    def _make(self, pool: _Pool, name: str, kind: DsType, local: dict[str, str],
              user: dict[str, str], origin: str | None = None, mounted: bool = True) -> _Ds:
        parent = name.rsplit("/", 1)[0]
        if parent not in pool.datasets:
            self._make(pool, parent, "filesystem", {}, {})
        ds = _Ds(name, kind, self._guid(), self._now(), self._next_txg(), local, user,
                 origin=origin, mounted=mounted)
        pool.datasets[name] = ds
        if kind == "volume":
            self.existing_devices.add(self.zvol_device(name))
        return ds

    def _held(self, ds: _Ds) -> bool:
        dev = self.zvol_device(ds.name)
        return ds.type == "volume" and any(h(dev) for h in self._holders)

    # ---- ZfsHost ------------------------------------------------------------------
    def available(self) -> bool:
        return not self.down

    def list_pools(self) -> list[PoolInfo]:
        self._up()
        return [self._pool_info(p) for p in sorted(self._pools.values(), key=lambda p: p.name)
                if p.imported]

    def _pool_info(self, p: _Pool) -> PoolInfo:
        used = self._pool_used(p)
        alloc = min(p.size, used * p.size // max(p.dspace, 1))
        props = {"ashift": "0", "autotrim": "off", "autoexpand": "off", "failmode": "wait",
                 "guid": str(p.guid), "health": "ONLINE", "size": str(p.size),
                 "allocated": str(alloc), "free": str(p.size - alloc),
                 "capacity": str(alloc * 100 // p.size), "fragmentation": "0",
                 "readonly": "off"}
        props.update(p.props)
        props["health"] = self._health(p)
        return PoolInfo(name=p.name, health=props["health"], size=p.size, allocated=alloc,
                        free=p.size - alloc, fragmentation=0, capacity=alloc * 100 // p.size,
                        properties=props)

    def pool_status(self, pool: str) -> PoolStatus:
        self._up()
        p = self._pool(pool)

        def disk(path: str) -> VdevNode:
            return VdevNode(name=_vdev_display_name(path), state=p.states.get(path, "ONLINE"))

        groups: list[VdevNode] = []
        counters = 0

        def vdevs(specs: tuple[VdevSpec, ...]) -> list[VdevNode]:
            nonlocal counters
            out: list[VdevNode] = []
            for v in specs:
                if v.kind == "disk":
                    out.append(disk(v.devices[0]))
                else:
                    out.append(VdevNode(name=f"{v.kind}-{counters}",
                                        state=self._vdev_state(p, v),
                                        children=tuple(disk(d) for d in v.devices)))
                counters += 1
            return out

        groups.extend(vdevs(p.layout.data))
        if p.layout.log:
            groups.append(VdevNode("logs", "", children=tuple(vdevs(p.layout.log))))
        if p.layout.cache:
            groups.append(VdevNode("cache", "",
                                   children=tuple(disk(d) for d in p.layout.cache)))
        if p.layout.spares:
            groups.append(VdevNode("spares", "", children=tuple(
                VdevNode(_vdev_display_name(d), "AVAIL") for d in p.layout.spares)))
        health = self._health(p)
        root = VdevNode(name=p.name, state=health, children=tuple(groups))
        status = action = ""
        if health != "ONLINE":  # zpool 2.3's words for a missing or offlined device
            status = ("One or more devices could not be used because the label is missing or "
                      "invalid. Sufficient replicas exist for the pool to continue "
                      "functioning in a degraded state.")
            action = "Replace the device using 'zpool replace'."
        return PoolStatus(name=p.name, state=health, status=status, action=action,
                          scan=p.scan, errors="No known data errors",
                          config=root)

    @staticmethod
    def _vdev_state(p: _Pool, v: VdevSpec) -> str:
        ok = sum(1 for d in v.devices if p.states.get(d, "ONLINE") == "ONLINE")
        spare = 0 if v.kind == "disk" else len(v.devices) - 1 if v.kind == "mirror" \
            else int(v.kind[-1])  # raidzN survives N missing
        if ok == len(v.devices):
            return "ONLINE"
        return "DEGRADED" if len(v.devices) - ok <= spare else "UNAVAIL"

    def _health(self, p: _Pool) -> str:
        states = [self._vdev_state(p, v) for v in p.layout.data]
        if all(s == "ONLINE" for s in states):
            return "ONLINE"
        return "UNAVAIL" if "UNAVAIL" in states else "DEGRADED"

    # ---- devices ------------------------------------------------------------------
    def fail_disk(self, path: str, state: str = "UNAVAIL") -> None:
        """Test helper: a pool member goes missing (as at a boot without it)."""
        owner = self._owner(path)
        if owner is None:
            raise NotFound(f"{path} is in no pool")
        self._pools[owner].states[path] = state

    def _member(self, p: _Pool, device: str) -> str:
        """The pool member ``device`` names: its path or its name as status shows it."""
        device_arg(device)
        for dev in (*p.layout.all_devices(),):
            if device in (dev, _vdev_display_name(dev)):
                return dev
        raise NotFound(f"cannot open '{device}': no such device in pool")

    def _vdev_of(self, p: _Pool, dev: str) -> int:
        for i, v in enumerate(p.layout.data):
            if dev in v.devices:
                return i
        raise Conflict(f"cannot use '{dev}': only data vdevs are supported here")

    def _new_disk(self, dev: str, like: str) -> None:
        device_arg(dev, path=True)
        if dev not in self.disks:
            raise NotFound(f"cannot open '{dev}': No such device or address")
        owner = self._owner(dev)
        if owner is not None:
            raise Conflict(f"{dev} is part of active pool '{owner}'")
        if self.disks[dev] < self.disks.get(like, 0):
            raise Conflict(f"cannot replace {like} with {dev}: device is too small")

    def _set_vdev(self, p: _Pool, i: int, vdev: VdevSpec) -> None:
        data = list(p.layout.data)
        data[i] = vdev
        p.layout = replace(p.layout, data=tuple(data))

    def _resilvered(self, p: _Pool) -> None:
        stamp = time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(self._now()))
        p.scan = f"resilvered 1.02M in 00:00:01 with 0 errors on {stamp}"

    def offline_device(self, pool: str, device: str) -> None:
        self._up()
        p = self._pool(pool)
        dev = self._member(p, device)
        v = p.layout.data[self._vdev_of(p, dev)]
        before = p.states.get(dev)
        p.states[dev] = "OFFLINE"
        if self._vdev_state(p, v) == "UNAVAIL":
            if before is None:
                del p.states[dev]
            else:
                p.states[dev] = before
            raise Conflict(f"cannot offline {device}: no valid replicas")

    def online_device(self, pool: str, device: str) -> None:
        self._up()
        p = self._pool(pool)
        dev = self._member(p, device)
        if p.states.get(dev) == "UNAVAIL":
            raise NotFound(f"cannot online {device}: no such device or address")
        p.states.pop(dev, None)
        self._resilvered(p)

    def replace_device(self, pool: str, device: str, new_device: str,
                       force: bool = False) -> None:
        self._up()
        p = self._pool(pool)
        dev = self._member(p, device)
        i = self._vdev_of(p, dev)
        self._new_disk(new_device, dev)
        v = p.layout.data[i]
        self._set_vdev(p, i, VdevSpec(v.kind, tuple(new_device if d == dev else d
                                                     for d in v.devices)))
        p.states.pop(dev, None)
        self._resilvered(p)

    def attach_device(self, pool: str, device: str, new_device: str,
                      force: bool = False) -> None:
        self._up()
        p = self._pool(pool)
        dev = self._member(p, device)
        i = self._vdev_of(p, dev)
        v = p.layout.data[i]
        if v.kind not in ("disk", "mirror"):
            raise Conflict(f"cannot attach {new_device} to {device}: can only attach to "
                           "mirrors and top-level disks")
        self._new_disk(new_device, dev)
        self._set_vdev(p, i, VdevSpec("mirror", (*v.devices, new_device)))
        self._resilvered(p)

    def detach_device(self, pool: str, device: str) -> None:
        self._up()
        p = self._pool(pool)
        dev = self._member(p, device)
        i = self._vdev_of(p, dev)
        v = p.layout.data[i]
        if v.kind != "mirror":
            raise Conflict(f"cannot detach {device}: only applicable to mirror and "
                           "replacing vdevs")
        rest = tuple(d for d in v.devices if d != dev)
        if not any(p.states.get(d, "ONLINE") == "ONLINE" for d in rest):
            raise Conflict(f"cannot detach {device}: no valid replicas")
        self._set_vdev(p, i, VdevSpec("mirror" if len(rest) > 1 else "disk", rest))
        p.states.pop(dev, None)

    def create_pool(self, pool: str, layout: PoolLayout, pool_properties: Mapping[str, str],
                    fs_properties: Mapping[str, str], force: bool = False) -> None:
        self._up()
        if pool in self._pools:
            raise Conflict(f"cannot create '{pool}': pool already exists"
                           + ("" if self._pools[pool].imported else " (exported)"))
        if not layout.data:
            raise InvalidInput("invalid vdev specification: at least one data vdev is needed")
        devices = layout.all_devices()
        if len(set(devices)) != len(devices):
            raise InvalidInput("invalid vdev specification: a device is named twice")
        for dev in devices:
            if dev not in self.disks:
                raise NotFound(f"cannot open '{dev}': No such device or address")
            owner = self._owner(dev)
            if owner is not None:
                raise Conflict(f"{dev} is part of active pool '{owner}'"
                               if self._pools[owner].imported else
                               f"{dev} is part of exported pool '{owner}'")
            if self.disks[dev] < MIN_DEVICE_SIZE:
                raise InvalidInput(f"cannot create '{pool}': one or more devices is less "
                                   "than the minimum size (64M)")
        raw = usable = 0
        for spec in (*layout.data, *layout.log):
            if len(spec.devices) < _MIN_DEVICES[spec.kind] or (
                    spec.kind == "disk" and len(spec.devices) != 1):
                raise InvalidInput(f"invalid vdev specification: {spec.kind} needs "
                                   f"{_MIN_DEVICES[spec.kind]}"
                                   f"{'' if spec.kind == 'disk' else ' or more'} devices")
            sizes = [self.disks[d] for d in spec.devices]
            if len(set(sizes)) > 1 and not force:
                raise InvalidInput(f"invalid vdev specification: {spec.kind} contains devices "
                                   "of different sizes (use force)")
        for spec in layout.data:
            r, u = _vdev_sizes(spec.kind, [self.disks[d] for d in spec.devices])
            raw += r
            usable += u
        pprops: dict[str, str] = {}
        for key, value in pool_properties.items():
            if ":" not in key and key not in _POOL_PROPS:
                raise InvalidInput(f"property '{key}' is not a valid pool property")
            pprops[key] = value
        root_local = self._validate_props("filesystem", fs_properties, creating=True)
        user = {k: v for k, v in root_local.items() if ":" in k}
        native = {k: v for k, v in root_local.items() if ":" not in k}
        p = _Pool(pool, layout, raw, usable, self._guid(), self._now(), pprops)
        p.datasets[pool] = _Ds(pool, "filesystem", self._guid(), self._now(),
                               self._next_txg(), native, user)
        self._pools[pool] = p

    def _owner(self, dev: str) -> str | None:
        for p in self._pools.values():
            if dev in p.layout.all_devices():
                return p.name
        return None

    def destroy_pool(self, pool: str) -> None:
        self._up()
        p = self._pool(pool)
        for ds in p.datasets.values():
            if self._held(ds):
                raise Conflict(f"cannot destroy '{pool}': pool is busy")
        for ds in p.datasets.values():
            self.existing_devices.discard(self.zvol_device(ds.name))
        del self._pools[pool]

    def scrub(self, pool: str) -> None:
        self._up()
        p = self._pool(pool)
        stamp = time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(self._now()))
        p.scan = f"scrub repaired 0B in 00:00:00 with 0 errors on {stamp}"

    def export_pool(self, pool: str) -> None:
        self._up()
        p = self._pool(pool)
        for ds in p.datasets.values():
            if self._held(ds):
                raise Conflict(f"cannot export '{pool}': pool is busy")
        for ds in p.datasets.values():
            ds.mounted = False
        self._step(f"zpool export {pool}: file systems unmounted, pool not exported yet")
        for ds in p.datasets.values():
            self.existing_devices.discard(self.zvol_device(ds.name))
        p.imported = False

    def import_pool(self, pool: str, force: bool = False, shared: bool = False) -> None:
        self._up()
        p = self._pools.get(pool)
        if p is None:
            raise NotFound(f"cannot import '{pool}': no such pool available")
        if p.imported:
            raise Conflict(f"cannot import '{pool}': a pool with that name already exists")
        if pool in self.foreign and not force:
            raise Conflict(f"cannot import '{pool}': pool was previously in use from another "
                           "system. The pool can be imported, use 'zpool import -f' to "
                           "import the pool.")
        self.foreign.discard(pool)
        if shared:
            self.shared_imports.append(pool)
        p.imported = True
        for ds in p.datasets.values():
            ds.mounted = False  # zpool import -N, then the guard, then zfs mount -a
            if ds.type == "volume":
                self.existing_devices.add(self.zvol_device(ds.name))
        self._step(f"zpool import {pool}: imported, file systems not mounted yet")
        for ds in p.datasets.values():
            ds.mounted = True

    def importable_pools(self) -> list[str]:
        self._up()
        return sorted(p.name for p in self._pools.values() if not p.imported)

    def set_pool_properties(self, pool: str, properties: Mapping[str, str]) -> None:
        self._up()
        p = self._pool(pool)
        for key in properties:
            if ":" not in key and key not in _POOL_PROPS - {"ashift", "altroot"}:
                raise InvalidInput(f"cannot set property for '{pool}': invalid property "
                                   f"'{key}'")
        p.props.update(properties)

    def list_datasets(self, root: str,
                      properties: Sequence[str] | None = None) -> list[DatasetInfo]:
        self._up()
        pool = self._pools.get(root.split("/")[0])
        if pool is None or not pool.imported or root not in pool.datasets:
            return []
        names = sorted(n for n in pool.datasets if n == root or n.startswith(root + "/"))
        usage = self._usage(pool)
        return [_only(self._info(pool, pool.datasets[n], usage), properties) for n in names]

    def get_dataset(self, name: str,
                    properties: Sequence[str] | None = None) -> DatasetInfo | None:
        self._up()
        if "@" in name:
            try:
                ds, snap = self._snap(name)
            except NotFound:
                return None
            return _only(self._snap_info(self._pool_of(name), ds, snap), properties)
        found = self._find(name)
        return None if found is None else _only(self._info(self._pool_of(name), found),
                                                properties)

    def snapshot_counts(self, root: str) -> dict[str, int]:
        self._up()
        pool = self._pools.get(root.split("/")[0])
        if pool is None or not pool.imported or root not in pool.datasets:
            return {}
        return {n: len(ds.snaps) for n, ds in pool.datasets.items()
                if (n == root or n.startswith(root + "/")) and ds.snaps}

    def _info(self, pool: _Pool, ds: _Ds, usage: _Tally | None = None) -> DatasetInfo:
        """``zfs get`` of one dataset; ``usage``: :meth:`_usage` of its pool, when a list
        made it once for every dataset (one dataset alone makes its own)."""
        usage = usage or self._usage(pool)
        avail = _free(pool, usage.used.get(pool.name, 0))
        used = usage.used[ds.name]
        refres = self._refres(ds)
        if ds.type == "volume":
            avail += max(0, refres - ds.data)
        else:
            for q, cur in (("refquota", ds.data), ("quota", used)):
                limit = int(ds.local.get(q, "0"))
                if limit:
                    avail = min(avail, max(0, limit - cur))
        props: dict[str, str] = {
            "type": ds.type,
            "creation": str(ds.created),
            "createtxg": str(ds.txg),
            "guid": str(ds.guid),
            "used": str(used),
            "available": str(avail),
            "referenced": str(ds.data),
            "written": str(ds.written if ds.snaps else ds.data),
            "logicalused": str(used),
            "usedbydataset": str(ds.data),
            "usedbychildren": str(used - self._charge(ds)),
            "usedbysnapshots": "0",
            "usedbyrefreservation": str(max(0, refres - ds.data)),
            "compressratio": "1.00",
            "receive_resume_token": str(getattr(ds.partial, "token", "-")),
            "reservation": ds.local.get("reservation", "0"),
            "refreservation": str(refres),
        }
        if ds.origin:
            props["origin"] = ds.origin  # zfs lists 'origin' on clones only
        for key in sorted(_INHERITABLE):
            if not ((key in _FS_ONLY and ds.type == "volume") or (
                    key in _VOL_ONLY and ds.type == "filesystem")):
                props[key] = self._effective(pool, ds, key)[0]
        if ds.type == "filesystem":
            props.update({
                "quota": ds.local.get("quota", "0"),
                "refquota": ds.local.get("refquota", "0"),
                "mountpoint": self._mountpoint(pool, ds),
                "canmount": ds.local.get("canmount", "on"),
            })
            props["mounted"] = "yes" if (props["mountpoint"] not in ("none", "legacy")
                                         and props["canmount"] == "on"
                                         and ds.mounted) else "no"
        else:
            props.update({  # quota, mountpoint, recordsize... do not apply: not listed
                "volsize": ds.local["volsize"],
                "volblocksize": ds.local.get("volblocksize", str(DEFAULT_VOLBLOCKSIZE)),
            })
        props["snapshot_limit"] = ds.local.get("snapshot_limit", "none")
        props["snapshot_count"] = self._snapshot_count(pool, ds, usage)
        props.update(ds.user)
        return DatasetInfo(name=ds.name, type=ds.type, properties=props)

    @staticmethod
    def _snapshot_count(pool: _Pool, ds: _Ds, usage: _Tally) -> str:
        """ZFS counts the snapshots at and below a dataset only once a ``snapshot_limit``
        has been set on it or above it (then it keeps counting); "none" before."""
        parts = ds.name.split("/")
        above = ("/".join(parts[:i]) for i in range(1, len(parts) + 1))
        if not any(pool.datasets[a].local.get("snapshot_limit", "none") != "none"
                   for a in above if a in pool.datasets):
            return "none"
        return str(usage.snapshots[ds.name])

    def _snap_info(self, pool: _Pool, ds: _Ds, s: _Snap) -> DatasetInfo:
        props = {
            "type": "snapshot", "creation": str(s.created), "createtxg": str(s.txg),
            "guid": str(s.guid), "used": "0", "available": "-",
            "referenced": str(s.referenced), "written": str(s.written),
            "origin": "-", "mountpoint": "-", "mounted": "-",
            "volsize": s.volsize,
            "clones": ",".join(self._clones_of(pool, f"{ds.name}@{s.name}")) or "-",
            "userrefs": str(len(s.holds)),
        }
        props.update(s.user)
        return DatasetInfo(name=f"{ds.name}@{s.name}", type="snapshot", properties=props)

    def _clones_of(self, pool: _Pool, snapshot: str) -> list[str]:
        return sorted(d.name for d in pool.datasets.values() if d.origin == snapshot)

    def create_filesystem(self, name: str, properties: Mapping[str, str]) -> None:
        self._up()
        pool = self._check_parent(name, make_parents=True)
        props = self._validate_props("filesystem", properties, creating=True)
        need = int(props.get("refreservation", "0")) + int(props.get("reservation", "0"))
        if need > self._pool_avail(pool):
            raise InsufficientSpace(f"cannot create '{name}': out of space")
        ds = self._make(pool, name, "filesystem",
                        {k: v for k, v in props.items() if ":" not in k},
                        {k: v for k, v in props.items() if ":" in k}, mounted=False)
        self._step(f"zfs create {name}: created, not mounted yet")
        ds.mounted = True

    def create_volume(self, name: str, size: int, sparse: bool,
                      properties: Mapping[str, str]) -> None:
        self._up()
        pool = self._check_parent(name, make_parents=True)
        props = self._validate_props("volume", properties, creating=True)
        vbs = int(props.get("volblocksize", str(DEFAULT_VOLBLOCKSIZE)))
        if size <= 0:
            raise InvalidInput(f"cannot create '{name}': volume size cannot be zero")
        size = -(-size // vbs) * vbs  # zfs 2.3 rounds a new volume up to volblocksize
        local = {k: v for k, v in props.items() if ":" not in k}
        local["volsize"] = str(size)
        if local.get("refreservation") == "auto" or (
                not sparse and "refreservation" not in local):
            local["refreservation"] = str(size)
        if int(local.get("refreservation", "0")) > self._pool_avail(pool):
            raise InsufficientSpace(f"cannot create '{name}': out of space")
        self._make(pool, name, "volume", local, {k: v for k, v in props.items() if ":" in k})

    def set_properties(self, name: str, properties: Mapping[str, str]) -> None:
        self._up()
        if "@" in name:
            ds, snap = self._snap(name)
            for key in properties:
                if ":" not in key:
                    raise InvalidInput(f"cannot set property for '{name}': this property "
                                       "can not be modified for snapshots")
            snap.user.update(properties)
            return
        ds = self._ds(name)
        pool = self._pool_of(name)
        props = self._validate_props(ds.type, properties, creating=False)
        native = {k: v for k, v in props.items() if ":" not in k}
        avail = self._pool_avail(pool)
        if native.get("refreservation") == "auto":
            native["refreservation"] = native.get("volsize", ds.local.get("volsize", "0"))
        if "volsize" in native:
            new = int(native["volsize"])
            vbs = int(ds.local.get("volblocksize", str(DEFAULT_VOLBLOCKSIZE)))
            if new <= 0 or new % vbs:
                raise InvalidInput(f"cannot set property for '{name}': 'volsize' must be a "
                                   f"multiple of volume block size ({vbs // 1024}K)")
            old = int(ds.local["volsize"])
            if self._refres(ds) == old and "refreservation" not in native:
                native["refreservation"] = str(new)  # thick volume: reservation follows
        if "refreservation" in native:
            grow = int(native["refreservation"]) - max(self._refres(ds), ds.data)
            if grow > avail:
                raise InsufficientSpace(f"cannot set property for '{name}': size is greater "
                                        "than available space")
        for q, cur in (("refquota", ds.data), ("quota", self._used(pool, ds))):
            if q in native and 0 < int(native[q]) < cur:
                raise Conflict(f"cannot set property for '{name}': size is less than current "
                               "used or reserved space")
        for key, value in native.items():
            if key in _SIZES and value == "0" and key != "volsize":
                ds.local.pop(key, None)
            else:
                ds.local[key] = value
        ds.user.update({k: v for k, v in props.items() if ":" in k})

    def set_root_user_properties(self, pool: str, properties: Mapping[str, str]) -> None:
        require_user_properties(pool, properties)
        self.set_properties(pool.split("/")[0], properties)

    def clear_root_user_properties(self, pool: str, names: Sequence[str]) -> None:
        self._up()
        require_user_properties(pool, names)
        root = self._ds(pool.split("/")[0])
        for name in names:
            root.user.pop(name, None)

    def destroy(self, name: str, recursive: bool = False) -> None:
        self._up()
        if "#" in name:
            dsname, _, mark = name.partition("#")
            found = self._find(dsname)
            bm = next((b for b in found.bookmarks if b.name == mark), None) if found else None
            if found is None or bm is None:
                raise NotFound(f"cannot destroy '{name}': bookmark does not exist")
            found.bookmarks.remove(bm)
            return
        if "@" in name:
            ds, snap = self._snap(name)
            pool = self._pool_of(name)
            clones = self._clones_of(pool, name)
            if clones:
                raise Conflict(f"cannot destroy '{name}': snapshot has dependent clones "
                               f"({', '.join(clones)})")
            if snap.holds:
                raise Conflict(f"cannot destroy snapshot {name}: it's being held. Run "
                               f"'zfs holds -r {name}' to see holders.")
            ds.snaps.remove(snap)
            return
        ds = self._ds(name)
        pool = self._pool_of(name)
        if name == pool.name:
            raise InvalidInput(f"cannot destroy '{name}': operation does not apply to pools; "
                               "destroy the pool instead")
        subtree = [ds, *self._children(pool, name)]
        if not recursive and (len(subtree) > 1 or ds.snaps):
            what = "children" if len(subtree) > 1 else "snapshots"
            raise Conflict(f"cannot destroy '{name}': filesystem has {what}; "
                           "use recursive to destroy them too")
        doomed = {d.name for d in subtree}
        for d in subtree:
            for s in d.snaps:
                outside = [c for c in self._clones_of(pool, f"{d.name}@{s.name}")
                           if c not in doomed]
                if outside:
                    raise Conflict(f"cannot destroy '{name}': filesystem has dependent clones "
                                   f"({', '.join(outside)})")
            if self._held(d) or any(sn.holds for sn in d.snaps):
                raise Conflict(f"cannot destroy '{d.name}': dataset is busy")
            for s in d.snaps:
                if s.holds:
                    raise Conflict(f"cannot destroy snapshot {d.name}@{s.name}: it's "
                                   "being held. Run 'zfs holds -r' to see holders.")
        for d in subtree:
            d.mounted = False
        self._step(f"zfs destroy {name}: unmounted, not destroyed yet")
        for d in subtree:
            del pool.datasets[d.name]
            self.existing_devices.discard(self.zvol_device(d.name))

    def snapshot(self, dataset: str, snapname: str,
                 properties: Mapping[str, str] | None = None) -> None:
        self._up()
        ds = self._ds(dataset)
        if any(s.name == snapname for s in ds.snaps):
            raise Conflict(f"cannot create snapshot '{dataset}@{snapname}': dataset already "
                           "exists")
        props = dict(properties or {})
        for key in props:
            if ":" not in key:
                raise InvalidInput(f"cannot create snapshot '{dataset}@{snapname}': "
                                   f"property '{key}' can not be set for snapshots")
        if self._pool_avail(self._pool_of(dataset)) <= 0:
            raise InsufficientSpace(f"cannot create snapshot '{dataset}@{snapname}': out of "
                                    "space")
        ds.snaps.append(_Snap(snapname, self._guid(), self._now(), self._next_txg(), ds.data,
                              props, ds.local.get("volsize", "-"),
                              written=ds.written if ds.snaps else ds.data,
                              content=ds.content))
        ds.written = 0

    def snapshot_many(self, names: Sequence[str],
                      properties: Mapping[str, str] | None = None) -> None:
        self._up()
        by_pool: dict[str, list[tuple[str, str]]] = {}
        for full in names:
            if "@" not in full:
                raise InvalidInput(f"{full!r} is not a snapshot name (dataset@snap)")
            dsname, snapname = full.split("@", 1)
            by_pool.setdefault(dsname.split("/")[0], []).append((dsname, snapname))
        props = dict(properties or {})
        for key in props:
            if ":" not in key:
                raise InvalidInput(f"property '{key}' can not be set for snapshots")
        for pool in sorted(by_pool):
            batch = by_pool[pool]
            # all or none per pool, as lzc_snapshot: check every name first
            for dsname, snapname in batch:
                ds = self._ds(dsname)
                if any(x.name == snapname for x in ds.snaps):
                    raise Conflict(f"cannot create snapshot '{dsname}@{snapname}': dataset "
                                   "already exists")
            if len({dsname for dsname, _ in batch}) != len(batch):
                raise InvalidInput("cannot create snapshots : multiple snapshots of same fs "
                                   "not allowed")
            if self._pool_avail(self._pools[pool]) <= 0:
                raise InsufficientSpace(f"cannot create snapshots in pool '{pool}': out of "
                                        "space")
            txg, now = self._next_txg(), self._now()  # one transaction group
            for dsname, snapname in batch:
                ds = self._ds(dsname)
                ds.snaps.append(_Snap(snapname, self._guid(), now, txg, ds.data, dict(props),
                                      ds.local.get("volsize", "-")))

    def list_snapshots_under(self, root: str,
                             properties: Sequence[str]) -> list[DatasetInfo]:
        self._up()
        pool = self._pools.get(root.split("/")[0])
        if pool is None or not pool.imported or root not in pool.datasets:
            return []
        out = []
        for n in sorted(pool.datasets):
            if n == root or n.startswith(root + "/"):
                ds = pool.datasets[n]
                out += [_only(self._snap_info(pool, ds, x), properties) for x in ds.snaps]
        return sorted(out, key=lambda i: i.name)

    def destroy_snapshots(self, dataset: str, snapnames: Sequence[str]) -> None:
        self._up()
        if not snapnames:
            return
        ds = self._ds(dataset)
        pool = self._pool_of(dataset)
        doomed = [x for x in ds.snaps if x.name in set(snapnames)]
        if not doomed:
            raise NotFound("could not find any snapshots to destroy; check snapshot names.")
        for x in doomed:  # all or none, as lzc_destroy_snaps
            if self._clones_of(pool, f"{dataset}@{x.name}"):
                raise Conflict(f"cannot destroy '{dataset}@{x.name}': snapshot has "
                               "dependent clones")
            if x.holds:
                raise Conflict(f"cannot destroy snapshot {dataset}@{x.name}: dataset is busy")
        for x in doomed:
            ds.snaps.remove(x)

    def destroy_snapshot_recursive(self, root: str, snapname: str) -> None:
        self._up()
        pool = self._pool_of(root)
        if root not in pool.datasets:
            raise NotFound(f"cannot open '{root}': dataset does not exist")
        doomed = [(d, x) for n, d in pool.datasets.items()
                  if n == root or n.startswith(root + "/") for x in d.snaps if x.name == snapname]
        if not doomed:
            raise NotFound("could not find any snapshots to destroy; check snapshot names.")
        for d, x in doomed:  # all or none
            if self._clones_of(pool, f"{d.name}@{x.name}"):
                raise Conflict(f"cannot destroy '{d.name}@{x.name}': snapshot has dependent "
                               "clones")
            if x.holds:
                raise Conflict(f"cannot destroy snapshot {d.name}@{x.name}: dataset is busy")
        for d, x in doomed:
            d.snaps.remove(x)

    def hold(self, tag: str, snapshots: Sequence[str]) -> None:
        self._up()
        for full in snapshots:  # one at a time, as `zfs hold` does
            _ds, snap = self._snap(full)
            if tag in snap.holds:
                raise Conflict(f"cannot hold snapshot '{full}': tag already exists on this "
                               "dataset")
            snap.holds[tag] = self._now()

    def release(self, tag: str, snapshots: Sequence[str]) -> None:
        self._up()
        for full in snapshots:
            _ds, snap = self._snap(full)
            if tag not in snap.holds:
                raise NotFound(f"cannot release hold from snapshot '{full}': no such tag on "
                               "this dataset")
            del snap.holds[tag]

    def holds(self, snapshots: Sequence[str]) -> dict[str, list[str]]:
        self._up()
        return {full: sorted(self._snap(full)[1].holds) for full in snapshots}

    def list_snapshots(self, dataset: str) -> list[DatasetInfo]:
        self._up()
        ds = self._ds(dataset)
        pool = self._pool_of(dataset)
        return [self._snap_info(pool, ds, s) for s in ds.snaps]

    def rollback(self, snapshot: str, destroy_newer: bool = False) -> None:
        self._up()
        ds, snap = self._snap(snapshot)
        pool = self._pool_of(snapshot)
        newer = ds.snaps[ds.snaps.index(snap) + 1:]
        if newer and not destroy_newer:
            raise Conflict(f"cannot rollback to '{snapshot}': more recent snapshots exist "
                           f"({', '.join(s.name for s in newer)})")
        for s in newer:
            if s.holds:
                raise Conflict(f"cannot rollback to '{snapshot}': snapshot "
                               f"{ds.name}@{s.name} is held: dataset is busy")
            clones = self._clones_of(pool, f"{ds.name}@{s.name}")
            if clones:
                raise Conflict(f"cannot rollback to '{snapshot}': clones of newer snapshots "
                               f"exist ({', '.join(clones)})")
        for s in newer:
            if s.holds:
                raise Conflict(f"cannot rollback to '{snapshot}': snapshot {s.name} is held")
        for s in newer:
            ds.snaps.remove(s)
        ds.data = snap.referenced
        ds.content = snap.content
        ds.written = 0
        if snap.volsize != "-":  # a volume's size is part of the snapshot
            ds.local["volsize"] = snap.volsize

    def clone(self, snapshot: str, target: str, properties: Mapping[str, str]) -> None:
        self._up()
        src, snap = self._snap(snapshot)
        if target.split("/")[0] != snapshot.split("/")[0]:
            raise InvalidInput(f"cannot create '{target}': source and target pools differ")
        pool = self._check_parent(target, make_parents=False)
        props = self._validate_props(src.type, properties, creating=True)
        local = {k: v for k, v in props.items() if ":" not in k}
        if src.type == "volume":
            local.setdefault("volsize", src.local["volsize"])
            if local.get("refreservation") == "auto":
                local["refreservation"] = local["volsize"]
            if "volblocksize" in src.local:
                local["volblocksize"] = src.local["volblocksize"]
        need = int(local.get("refreservation", "0"))
        if need > self._pool_avail(pool):
            raise InsufficientSpace(f"cannot create '{target}': out of space")
        ds = self._make(pool, target, src.type, local,
                        {k: v for k, v in props.items() if ":" in k}, origin=snapshot,
                        mounted=src.type != "filesystem")
        ds.data = snap.referenced
        ds.content = snap.content
        if src.type == "filesystem":
            self._step(f"zfs clone {target}: created, not mounted yet")
            ds.mounted = True

    def zvol_device(self, name: str) -> str:
        return f"/dev/zvol/{name}"

    def wait_for_device(self, name: str, timeout: float = 30.0) -> str:
        self._up()
        ds = self._ds(name)
        if ds.type != "volume":
            raise InvalidInput(f"'{name}' is not a volume")
        path = self.zvol_device(name)
        if path not in self.existing_devices and path not in self.stuck_links:
            self.existing_devices.add(path)  # udevadm trigger replays the lost event
        if path not in self.existing_devices:
            raise Unavailable(f"{path} did not appear within {timeout:.0f} s (udev)")
        return path

    def mount(self, name: str) -> None:
        self._up()
        ds = self._ds(name)
        if ds.type != "filesystem":
            raise InvalidInput(f"cannot mount '{name}': not a filesystem")
        pool = self._pool_of(name)
        mountpoint = self._mountpoint(pool, ds)
        if mountpoint in ("none", "legacy"):
            raise Conflict(f"cannot mount '{name}': no mountpoint set ({mountpoint})")
        if ds.local.get("canmount", "on") == "off":
            raise Conflict(f"cannot mount '{name}': 'canmount' property is set to 'off'")
        ds.mounted = True

    def unmount(self, name: str) -> None:
        self._up()
        ds = self._ds(name)
        if ds.type != "filesystem":
            raise InvalidInput(f"cannot unmount '{name}': not a filesystem")
        if self._held(ds):
            raise Conflict(f"cannot unmount '{name}': pool or dataset is busy")
        ds.mounted = False

    def iter_names(self) -> Iterator[str]:
        """Every dataset and snapshot name in imported pools (for test assertions)."""
        for p in self._pools.values():
            if not p.imported:
                continue
            for d in p.datasets.values():
                yield d.name
                for s in d.snaps:
                    yield f"{d.name}@{s.name}"


def _vdev_display_name(path: str) -> str:
    """How ``zpool status`` names a device: files keep their full path, /dev nodes lose
    their directory (/dev/disk/by-id/virtio-x -> virtio-x, /dev/sdb -> sdb)."""
    if path.startswith("/dev/"):
        return path.rsplit("/", 1)[1]
    return path
