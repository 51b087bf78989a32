"""Probe safety: a scratch dataset/zvol of its own, a free-space check, one probe per
datastore at a time, cancellation by id, cleanup (also of scratch left by a crash).

Scratch lives at ``POOL/zds-probes/DATASTORE-PROBEID`` on the datastore's pool, with
the datastore's own I/O properties (recordsize/volblocksize, compression, sync, logbias,
caching ...) so the probe measures what the datastore would give, and a ``zds:probe``
user property that marks it as probe scratch. A probe that would push the pool past 80%
allocated is refused before anything is created. Filesystem scratch gets a refquota of
its footprint plus a margin, so a runaway job cannot fill the pool either.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass

from appliance.errors import Conflict, InsufficientSpace, InvalidInput, NotFound, ZdsError
from appliance.host.zfs import DatasetInfo, ZfsHost
from appliance.model import PROBE_SCRATCH_PARENT
from appliance.probes.execute import CancelToken
from appliance.probes.params import Params, human_size, parse_size
from appliance.probes.profiles import Profile

SCRATCH_PARENT = PROBE_SCRATCH_PARENT  # POOL/zds-probes: where scratch is made
SCRATCH_PROPERTY = "zds:probe"
MAX_POOL_FILL = 0.80
MARGIN = 64 << 20  # fio's own files, logs, rounding
_PROBE_ID = re.compile(r"[a-z0-9]{1,32}")
_DS_NAME = re.compile(r"[a-z0-9](?:[a-z0-9_.-]{0,61}[a-z0-9])?")
COPIED_FS_PROPS = ("recordsize", "compression", "sync", "atime", "xattr", "acltype",
                   "logbias", "primarycache", "secondarycache", "dedup", "checksum")
COPIED_VOL_PROPS = ("compression", "sync", "logbias", "primarycache", "secondarycache",
                    "dedup", "checksum")


def footprint(profile: Profile, params: Params, is_device: bool = False) -> int:
    """Bytes the probe will write at most (what the free-space check reserves).

    Sweep steps share their files (same filename_format), so a sweep needs its largest
    step; sections with their own ``filename`` (size-sweep) add up. On a device all jobs
    share one region from offset 0.
    """
    if profile.kind != "fio":
        return 0
    glob = dict(profile.global_options(params))
    shared = 0
    per_file: dict[str, int] = {}
    for step in profile.plan(params):
        opts = dict(step.options)
        raw = opts.get("size", glob.get("size"))
        if raw is None:
            continue
        size = parse_size(raw, "size")
        jobs = int(opts.get("numjobs", "1"))
        if "filename" in opts:
            per_file[opts["filename"]] = max(per_file.get(opts["filename"], 0), size)
        else:
            shared = max(shared, size if is_device else size * jobs)
    return shared + sum(per_file.values())


def scratch_name(pool: str, datastore: str, probe_id: str) -> str:
    if not _PROBE_ID.fullmatch(probe_id):
        raise InvalidInput(f"probe id {probe_id!r}: 1-32 lowercase letters and digits")
    if not _DS_NAME.fullmatch(datastore):
        raise InvalidInput(f"datastore name {datastore!r} is not valid")
    return f"{pool}/{SCRATCH_PARENT}/{datastore}-{probe_id}"


@dataclass(frozen=True)
class Scratch:
    name: str  # ZFS name
    is_volume: bool
    path: str  # mountpoint or /dev/zvol/... device
    size: int  # bytes reserved for the probe


class ScratchManager:
    def __init__(self, zfs: ZfsHost) -> None:
        self.zfs = zfs

    def check_space(self, pool: str, need: int) -> None:
        """Refuses (InsufficientSpace) if writing ``need`` bytes would pass 80% full."""
        info = next((p for p in self.zfs.list_pools() if p.name == pool), None)
        if info is None:
            raise NotFound(f"pool {pool!r} is not imported")
        limit = int(info.size * MAX_POOL_FILL)
        after = info.allocated + need
        if after > limit:
            raise InsufficientSpace(
                f"probe needs {human_size_approx(need)} on pool {pool}, which would fill it to "
                f"{100.0 * after / info.size:.0f}% (limit {MAX_POOL_FILL:.0%}); "
                f"use a smaller size= override or free space first",
                detail={"pool": pool, "need": need, "allocated": info.allocated,
                        "size": info.size})

    def create(self, pool: str, datastore: str, probe_id: str, need: int, volume: bool,
               like: DatasetInfo | None = None) -> Scratch:
        """Checks space, then creates the scratch dataset (or sparse zvol) like ``like``."""
        reserve = need + MARGIN
        self.check_space(pool, reserve)
        name = scratch_name(pool, datastore, probe_id)
        if self.zfs.get_dataset(name) is not None:
            raise Conflict(f"probe scratch {name} already exists")
        parent = f"{pool}/{SCRATCH_PARENT}"
        if self.zfs.get_dataset(parent) is None:
            self.zfs.create_filesystem(parent, {"canmount": "off"})
        props = {SCRATCH_PROPERTY: probe_id}
        copied = COPIED_VOL_PROPS if volume else COPIED_FS_PROPS
        if like is not None:
            props.update(_local_props(like, copied))
        if volume:
            block = int(like.prop("volblocksize", "16384")) if like is not None else 16384
            vprops = {**props, "volblocksize": str(block)}
            size = -(-reserve // (1 << 20)) * (1 << 20)
            self.zfs.create_volume(name, size, True, vprops)
            try:
                path = self.zfs.wait_for_device(name)
            except ZdsError:
                self.zfs.destroy(name)
                raise
            return Scratch(name, True, path, size)
        props["refquota"] = str(reserve)
        self.zfs.create_filesystem(name, props)
        info = self.zfs.get_dataset(name)
        mountpoint = info.prop("mountpoint") if info else ""
        if not mountpoint.startswith("/"):
            self.zfs.destroy(name)
            raise ZdsError(f"probe scratch {name} has no mountpoint")
        return Scratch(name, False, mountpoint, reserve)

    def destroy(self, scratch: Scratch) -> None:
        with suppress(NotFound):
            self.zfs.destroy(scratch.name, recursive=True)

    def leftovers(self, pool: str, keep: set[str] | None = None) -> list[str]:
        """Scratch datasets under POOL/zds-probes not in ``keep`` (left by a crash)."""
        keep = keep or set()
        out = []
        for ds in self.zfs.list_datasets(f"{pool}/{SCRATCH_PARENT}"):
            if ds.prop(SCRATCH_PROPERTY) and ds.name not in keep:
                out.append(ds.name)
        return out

    def clean_leftovers(self, pool: str, keep: set[str] | None = None) -> list[str]:
        gone = []
        for name in self.leftovers(pool, keep):
            try:
                self.zfs.destroy(name, recursive=True)
                gone.append(name)
            except NotFound:
                pass
        return gone


def human_size_approx(n: int) -> str:
    for unit, mult in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= mult:
            return f"{n / mult:.1f} {unit}"
    return human_size(n)


def _local_props(info: DatasetInfo, keys: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for k in keys:
        v = info.prop(k)
        if v:
            out[k] = v
    return out


class ProbeRegistry:
    """Running probes: one per datastore at a time; cancel by probe id."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_ds: dict[str, str] = {}
        self._tokens: dict[str, CancelToken] = {}

    @contextmanager
    def hold(self, datastore: str, probe_id: str, token: CancelToken) -> Iterator[None]:
        with self._lock:
            busy = self._by_ds.get(datastore)
            if busy is not None:
                raise Conflict(f"probe {busy} is already running on datastore {datastore}; "
                               "wait for it or cancel it", detail={"probe": busy})
            self._by_ds[datastore] = probe_id
            self._tokens[probe_id] = token
        try:
            yield
        finally:
            with self._lock:
                self._by_ds.pop(datastore, None)
                self._tokens.pop(probe_id, None)

    def busy(self, datastore: str) -> str | None:
        with self._lock:
            return self._by_ds.get(datastore)

    def running(self) -> Mapping[str, str]:
        with self._lock:
            return dict(self._by_ds)

    def cancel(self, probe_id: str) -> bool:
        with self._lock:
            token = self._tokens.get(probe_id)
        if token is None:
            return False
        token.cancel()
        return True
