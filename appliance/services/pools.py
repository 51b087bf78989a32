"""Pools: list/inspect, create from named disks with a layout, scrub, export/import."""

from __future__ import annotations

import builtins
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance import validate
from appliance.adoption import adopt
from appliance.context import Context
from appliance.errors import Conflict, InvalidInput, NotFound, Unavailable, ZdsError
from appliance.host.zfs import PoolInfo, PoolLayout, PoolStatus, VdevNode, VdevSpec
from appliance.jobs import Job, JobContext
from appliance.model import DATASTORE_PARENT, SNAPSHOT_COUNT_LIMIT
from appliance.reconciler import Reconciler
from appliance.transports.storage import ROOT_FS_PROPERTIES

log = logging.getLogger(__name__)

MIN_DEVICES = {"disk": 1, "mirror": 2, "raidz1": 2, "raidz2": 3, "raidz3": 4}
SPARSE_FILES = (1, 16)  # how many sparse files a demo pool may have
SPARSE_DEFAULT_COUNT = 2
MIN_VDEV_SIZE = 64 << 20  # ZFS's minimum vdev size
POOL_PROPERTIES = {"ashift": "12", "autotrim": "on"}
# How long a background job waits for the change lock.
JOB_LOCK_WAIT = 3600.0


@dataclass(frozen=True)
class VdevRequest:
    type: str
    disks: list[str]


@dataclass(frozen=True)
class PoolRequest:
    """The body of ``POST /pools``. Give ``vdevs`` (disks by path), or ``sparse_files``
    for a demo/test pool on sparse files under the state directory."""

    name: str
    vdevs: list[VdevRequest] = field(default_factory=list)
    log: list[VdevRequest] = field(default_factory=list)
    cache: list[str] = field(default_factory=list)
    spares: list[str] = field(default_factory=list)
    sparse_files: dict[str, Any] | None = None  # {"count": 2, "size": "8G", "type": "mirror"}
    force: bool = False


@dataclass(frozen=True)
class PoolView:
    info: PoolInfo
    status: PoolStatus | None
    demo: bool
    datastores: list[str]
    promised: int = 0  # bytes the pool's datastores are promised (their sizes)
    overcommit: float = 1.0  # how far thin datastores may promise past the capacity


OVERCOMMIT_PROPERTY = "zds:overcommit"
DISK_ACTIONS = ("offline", "online", "replace", "attach", "detach")
# how long a disk job waits, once no resilver runs, for ZFS to detach a replaced disk
REPLACE_SETTLE = 120.0
NEW_DISK_ACTIONS = ("replace", "attach")  # the actions that take a new disk
MAX_OVERCOMMIT = 1000.0


class PoolService:
    def __init__(self, ctx: Context, reconciler: Reconciler) -> None:
        self.ctx = ctx
        self.reconciler = reconciler

    def _zfs_up(self) -> None:
        if not self.ctx.zfs.available():
            raise Unavailable("ZFS is not available on this appliance (module not loaded?)")

    def list(self) -> list[PoolView]:
        self._zfs_up()
        return [self._view(p, with_status=False) for p in self.ctx.zfs.list_pools()]

    def get(self, name: str) -> PoolView:
        validate.pool_name(name)
        self._zfs_up()
        for p in self.ctx.zfs.list_pools():
            if p.name == name:
                return self._view(p, with_status=True)
        raise NotFound(f"pool {name!r} not found (GET /api/v1/pools/importable lists pools "
                       "that can be imported)")

    def _view(self, info: PoolInfo, with_status: bool) -> PoolView:
        records = [r for r in self.ctx.store.list_datastores() if r.spec.pool == info.name]
        return PoolView(
            info=info,
            status=self.ctx.zfs.pool_status(info.name) if with_status else None,
            demo=info.properties.get("zds:demo") == "true",
            datastores=[r.name for r in records],
            promised=sum(r.spec.size for r in records),
            overcommit=self._ratio(info),
        )

    def _ratio(self, info: PoolInfo) -> float:
        try:
            return float(info.properties[OVERCOMMIT_PROPERTY])
        except (KeyError, ValueError):
            return self.ctx.settings.max_overcommit

    def capacity_of(self, pool: str) -> int:
        """What the pool's file systems can hold (its root's used + available): the base
        the overcommit limit multiplies. 0 when the pool is not there."""
        root = self.ctx.zfs.get_dataset(pool, ("used", "available"))
        return root.int_prop("available") + root.int_prop("used") if root else 0

    def overcommit_of(self, pool: str) -> float:
        """How many times its capacity a pool's thin datastores may promise: the pool's
        own ``zds:overcommit`` (it travels with the pool), else the appliance default."""
        for p in self.ctx.zfs.list_pools():
            if p.name == pool:
                return self._ratio(p)
        return self.ctx.settings.max_overcommit

    def set_overcommit(self, name: str, ratio: float) -> PoolView:
        """Sets the pool's overcommit limit; refused (409) below what is promised now."""
        view = self.get(name)
        if not 1.0 <= ratio <= MAX_OVERCOMMIT:
            raise InvalidInput(f"overcommit must be 1 to {MAX_OVERCOMMIT:g} (times the "
                               "pool's capacity)")
        capacity = self.capacity_of(name)
        if capacity and view.promised > capacity * ratio:
            raise Conflict(f"pool {name}'s datastores already promise "
                           f"{validate.format_size(view.promised)}, more than {ratio:g}x its "
                           f"{validate.format_size(capacity)}",
                           detail={"promised": view.promised, "capacity": capacity})
        with self.ctx.lock.hold(f"setting the overcommit of {name}"):
            self.ctx.zfs.set_pool_properties(name, {OVERCOMMIT_PROPERTY: f"{ratio:g}"})
        return self.get(name)

    def resolve(self, name: str | None) -> str:
        """The pool a datastore goes to: the one named, else the only/default pool."""
        if name is not None:
            validate.pool_name(name)
            return name
        self._zfs_up()
        pools = [p.name for p in self.ctx.zfs.list_pools()]
        if self.ctx.settings.firstboot_pool in pools:
            return self.ctx.settings.firstboot_pool
        if len(pools) == 1:
            return pools[0]
        if not pools:
            raise NotFound("there is no pool yet: create one with POST /api/v1/pools")
        raise Conflict(f"several pools exist ({', '.join(pools)}): name one in 'pool'")

    def imported(self) -> set[str]:
        if not self.ctx.zfs.available():
            return set()
        return {p.name for p in self.ctx.zfs.list_pools()}

    def ensure_parent(self, pool: str) -> None:
        """``POOL/datastores`` holds every datastore of a pool, with ZFS counting their
        snapshots (see :meth:`keep_snapshot_counts`)."""
        zfs = self.ctx.zfs
        if zfs.get_dataset(pool, ("type",)) is None:
            raise NotFound(f"pool {pool!r} not found")
        parent = f"{pool}/{DATASTORE_PARENT}"
        if zfs.get_dataset(parent, ("type",)) is None:
            zfs.create_filesystem(parent, {"zds:role": "datastores",
                                           "snapshot_limit": str(SNAPSHOT_COUNT_LIMIT)})
        else:
            self.keep_snapshot_counts([pool])

    def keep_snapshot_counts(self, pools: Iterable[str]) -> None:
        """Sets ``snapshot_limit`` on each pool's ``POOL/datastores`` where it is missing
        (pools made before, or imported from elsewhere): below a limit ZFS keeps every
        dataset's ``snapshot_count``, so the datastore list reads counts with the
        properties instead of listing every snapshot. A pool that refuses (feature
        filesystem_limits disabled) is listed the slow way; nothing else changes."""
        zfs = self.ctx.zfs
        for pool in pools:
            parent = f"{pool}/{DATASTORE_PARENT}"
            info = zfs.get_dataset(parent, ("type", "snapshot_limit"))
            if info is None or info.prop("snapshot_limit").isdigit():
                continue
            try:
                zfs.set_properties(parent, {"snapshot_limit": str(SNAPSHOT_COUNT_LIMIT)})
            except ZdsError as exc:
                log.warning("%s keeps no snapshot counts: %s", parent, exc.message)

    def layout(self, req: PoolRequest) -> PoolLayout:
        def vdev(v: VdevRequest) -> VdevSpec:
            kind = "raidz1" if v.type == "raidz" else v.type
            if kind not in MIN_DEVICES:
                raise InvalidInput(f"invalid vdev type {v.type!r}: one of "
                                   "disk (stripe), mirror, raidz1, raidz2, raidz3")
            disks = tuple(validate.device_path(d) for d in v.disks)
            if kind == "disk" and len(disks) != 1:
                raise InvalidInput("a 'disk' vdev takes exactly one disk (list several "
                                   "'disk' vdevs for a stripe)")
            if len(disks) < MIN_DEVICES[kind]:
                raise InvalidInput(f"a {kind} vdev needs at least {MIN_DEVICES[kind]} disks")
            return VdevSpec(kind, disks)  # type: ignore[arg-type]

        if not req.vdevs:
            raise InvalidInput("a pool needs at least one data vdev")
        result = PoolLayout(
            data=tuple(vdev(v) for v in req.vdevs),
            log=tuple(vdev(v) for v in req.log),
            cache=tuple(validate.device_path(d) for d in req.cache),
            spares=tuple(validate.device_path(d) for d in req.spares),
        )
        devices = result.all_devices()
        dupes = {d for d in devices if devices.count(d) > 1}
        if dupes:
            # a disk belongs to one place in a pool; JSON Schema cannot say it across
            # vdevs, so it is a conflict within the request, not malformed input (409)
            raise Conflict(f"disks listed more than once: {', '.join(sorted(dupes))}")
        return result

    def create(self, req: PoolRequest) -> Job:
        validate.pool_name(req.name)
        if req.sparse_files is not None and (req.vdevs or req.log or req.cache or req.spares):
            raise InvalidInput("sparse_files make the whole pool: give them or vdevs (with "
                               "log, cache, spares), not both")
        self._zfs_up()
        if req.sparse_files is not None:
            req = self._sparse_request(req)
        layout = self.layout(req)
        missing = [] if req.sparse_files is not None else [
            d for d in layout.all_devices() if not self.ctx.local.device_exists(d)]
        if missing:
            raise NotFound(f"disks not found: {', '.join(missing)}")
        if req.name in self.imported() or req.name in self.ctx.zfs.importable_pools():
            raise Conflict(f"pool {req.name!r} already exists (import it instead)")

        def run(ctx: JobContext) -> dict[str, Any]:
            with self.ctx.lock.hold(f"creating pool {req.name}", timeout=JOB_LOCK_WAIT):
                if req.sparse_files is not None:
                    for path in layout.all_devices():
                        self.ctx.local.create_sparse_file(
                            Path(path), validate.parse_size(req.sparse_files["size"]))
                self.ctx.zfs.create_pool(req.name, layout, POOL_PROPERTIES,
                                            ROOT_FS_PROPERTIES, force=req.force)
                if req.sparse_files is not None:
                    self.ctx.zfs.set_pool_properties(req.name, {"zds:demo": "true"})
                self.ensure_parent(req.name)
            return {"pool": req.name}

        return self.ctx.jobs.submit("pool.create", req.name, run,
                                       message=f"creating pool {req.name}")

    def _sparse_request(self, req: PoolRequest) -> PoolRequest:
        spec = req.sparse_files or {}
        count = spec.get("count", SPARSE_DEFAULT_COUNT)
        if not isinstance(count, int) or not SPARSE_FILES[0] <= count <= SPARSE_FILES[1]:
            raise InvalidInput("sparse_files.count: 1 to 16")
        size = validate.parse_size(spec.get("size", "8G"), "sparse_files.size")
        if size < MIN_VDEV_SIZE:
            raise InvalidInput("sparse_files.size: at least 64M (ZFS's minimum vdev size)")
        kind = spec.get("type", "mirror" if count >= 2 else "disk")
        base = self.ctx.settings.state_dir / "pools" / req.name
        files = [str(base / f"disk{i}.img") for i in range(count)]
        # the files are created by the job, after every check has passed
        vdevs = ([VdevRequest("disk", [f]) for f in files] if kind == "disk"
                 else [VdevRequest(str(kind), files)])
        return PoolRequest(name=req.name, vdevs=vdevs, sparse_files={**spec, "size": size},
                           force=req.force)

    def scrub(self, name: str) -> Job:
        self.get(name)
        if self.ctx.jobs.running_for("pool.scrub", name):
            raise Conflict(f"a scrub of {name} is already running")

        def run(ctx: JobContext) -> dict[str, Any]:
            self.ctx.zfs.scrub(name)
            while True:
                scan = self.ctx.zfs.pool_status(name).scan
                if "in progress" not in scan:
                    return {"pool": name, "scan": scan}
                ctx.progress(_scan_fraction(scan), scan)
                if ctx.cancelled:
                    return {"pool": name, "scan": scan, "note": "stopped waiting"}
                time.sleep(1.0)

        return self.ctx.jobs.submit("pool.scrub", name, run, message=f"scrubbing {name}",
                                       long=True)

    def disk(self, name: str, action: str, disk: str, new_disk: str | None = None,
             force: bool = False) -> Job:
        """A job that offlines, onlines, replaces, attaches or detaches a pool disk and,
        when ZFS resilvers after it, waits for the resilver (progress in the job).

        ``disk`` is a member as GET /pools/{name} shows it (a name such as
        virtio-zdsdata1, or the number ZFS shows for a disk that is gone), or its path;
        ``new_disk`` (replace, attach) is an absolute path to an unused disk."""
        view = self.get(name)
        if action not in DISK_ACTIONS:
            raise InvalidInput(f"invalid disk action {action!r}: one of "
                               f"{', '.join(DISK_ACTIONS)}")
        member = self._member(view, disk)
        if action in NEW_DISK_ACTIONS:
            if not new_disk:
                raise InvalidInput(f"{action} needs new_disk: the path of an unused disk")
            new_disk = validate.device_path(new_disk)
            if not self.ctx.local.device_exists(new_disk):
                raise NotFound(f"disk {new_disk} not found")
        elif new_disk:
            raise InvalidInput(f"new_disk is for replace and attach, not {action}")
        if self.ctx.jobs.running_for("pool.disk", name):
            raise Conflict(f"a disk operation on {name} is running; wait for it to finish")
        zfs = self.ctx.zfs

        def run(ctx: JobContext) -> dict[str, Any]:
            with self.ctx.lock.hold(f"{action} of a disk of {name}", timeout=JOB_LOCK_WAIT):
                if action == "offline":
                    zfs.offline_device(name, member)
                elif action == "online":
                    zfs.online_device(name, member)
                elif action == "replace" and new_disk:
                    zfs.replace_device(name, member, new_disk, force=force)
                elif action == "attach" and new_disk:
                    zfs.attach_device(name, member, new_disk, force=force)
                elif action == "detach":
                    zfs.detach_device(name, member)
            # a replace is done when ZFS has detached the old disk, which it does a moment
            # after the resilver ends (and the resilver may not have started yet when
            # `zpool replace` returns): until then the pool is still DEGRADED
            status = zfs.pool_status(name)
            settled_at: float | None = None
            while not ctx.cancelled:
                if "in progress" in status.scan:
                    settled_at = None
                    ctx.progress(_scan_fraction(status.scan), status.scan)
                elif action != "replace" or not _replacing(status.config):
                    break
                else:
                    settled_at = settled_at or time.monotonic()
                    if time.monotonic() - settled_at > REPLACE_SETTLE:
                        break  # resilver over, old disk kept: health and scan say why
                time.sleep(1.0)
                status = zfs.pool_status(name)
            # `zpool status`'s state line is the health `zpool list` prints
            return {"pool": name, "action": action, "disk": disk, "new_disk": new_disk,
                    "health": status.state, "scan": status.scan}

        return self.ctx.jobs.submit("pool.disk", name, run, long=True,
                                    message=f"{action} {disk} on {name}"
                                            + (f" with {new_disk}" if new_disk else ""))

    @staticmethod
    def _member(view: PoolView, disk: str) -> str:
        """The member as zpool takes it: a name or GUID the pool shows, or a path whose
        last component is such a name; anything else is NotFound (nothing unvalidated
        reaches zpool)."""
        names: set[str] = set()

        def walk(node: VdevNode) -> None:
            for child in node.children:
                if not child.children and child.name not in ("logs", "cache", "spares"):
                    names.add(child.name)
                walk(child)

        if view.status is not None:
            walk(view.status.config)
        if disk in names:
            return disk
        if disk.startswith("/") and disk.rsplit("/", 1)[-1] in names:
            return validate.device_path(disk)
        raise NotFound(f"pool {view.info.name} has no disk {disk!r} (its disks: "
                       f"{', '.join(sorted(names)) or 'none'})")

    def importable(self) -> builtins.list[str]:
        self._zfs_up()
        return self.ctx.zfs.importable_pools()

    def export(self, name: str, force: bool = False) -> Job:
        view = self.get(name)
        if view.datastores and not force:
            raise Conflict(f"pool {name} holds datastores {', '.join(view.datastores)}; "
                           "exporting stops serving them (pass force=true)")

        def run(ctx: JobContext) -> dict[str, Any]:
            with self.ctx.lock.hold(f"exporting pool {name}", timeout=JOB_LOCK_WAIT):
                records = [r for r in self.ctx.store.list_datastores()
                           if r.spec.pool == name]
                report = self.reconciler.datastores(records, withdraw=True)
                failures = report.failures_for(*(r.export_id for r in records),
                                               *(r.iqn for r in records), "zfs")
                if failures:
                    raise Unavailable("could not stop serving the pool's datastores: "
                                      + "; ".join(failures))
                self.ctx.zfs.export_pool(name)
            return {"pool": name, "exported": True}

        return self.ctx.jobs.submit("pool.export", name, run, message=f"exporting {name}")

    def import_(self, name: str, force: bool = False) -> Job:
        validate.pool_name(name)
        self._zfs_up()
        if name in self.imported():
            raise Conflict(f"pool {name} is already imported")
        if name not in self.ctx.zfs.importable_pools():
            raise NotFound(f"no importable pool named {name!r}")

        def run(ctx: JobContext) -> dict[str, Any]:
            with self.ctx.lock.hold(f"importing pool {name}", timeout=JOB_LOCK_WAIT):
                try:
                    self.ctx.zfs.import_pool(name, force=force)
                except Conflict as exc:
                    if "another system" not in exc.message:
                        raise
                    raise Conflict(
                        f"pool {name} was last used by another system and not exported; "
                        "import it with force=true only if that system no longer uses it "
                        "(two systems importing one pool corrupt it)",
                        detail={"zpool": exc.message}) from exc
                adopted = adopt(self.ctx, [name])
                self.keep_snapshot_counts([name])
                self.reconciler.full(wait=JOB_LOCK_WAIT)
            return {"pool": name, "imported": True, "adopted": adopted}

        return self.ctx.jobs.submit("pool.import", name, run, message=f"importing {name}")


def _replacing(node: VdevNode) -> bool:
    """Whether a replace is still under way: ZFS shows it as a group ``replacing-N`` of
    the old and the new disk until it detaches the old one."""
    return node.name.startswith("replacing-") or any(_replacing(c) for c in node.children)


def _scan_fraction(scan: str) -> float:
    """'... 1.23G scanned at ..., 45.6% done, ...' -> 0.456"""
    for part in scan.replace(",", " ").split():
        if part.endswith("%"):
            try:
                return float(part[:-1]) / 100
            except ValueError:
                return 0.0
    return 0.0
