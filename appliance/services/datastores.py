"""Datastores: the main resource. validate -> record intent -> act -> reconcile -> read back."""

from __future__ import annotations

import builtins
import json
import logging
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from appliance import validate
from appliance.attach import AttachInstructions, iscsi_instructions, nfs_instructions
from appliance.context import Context
from appliance.errors import (
    Conflict,
    InsufficientSpace,
    InvalidInput,
    NotFound,
    Unavailable,
    ZdsError,
)
from appliance.host.ganesha import LiveExport
from appliance.host.ganesha_config import check_spec as ganesha_check_spec
from appliance.host.lio import check_spec as lio_check_spec
from appliance.host.nfs_units import MAIN_UNIT
from appliance.host.zfs import DatasetInfo
from appliance.jobs import Job, JobContext
from appliance.model import (
    DATASTORE_PROPERTIES,
    DATASTORE_SETTINGS,
    NFS_DATASET_PROPERTIES,
    PROFILES,
    PROTOCOLS,
    VIEW_PROPERTIES,
    ZVOL_PROPERTIES,
    ChapSettings,
    DatastoreRecord,
    DatastoreSpec,
    IscsiAccess,
    NfsClient,
    Overrides,
    naa_wwn,
)
from appliance.policies.protection import Protection, ProtectionSource
from appliance.reconcile import MIN_EXPORT_ID, export_spec, target_spec
from appliance.reconciler import LiveState, Reconciler
from appliance.services.pools import PoolService

log = logging.getLogger(__name__)

# How long a background job (delete) waits for the change lock.
JOB_LOCK_WAIT = 3600.0


@dataclass(frozen=True)
class ChapRequest:
    user: str
    secret: str
    mutual_user: str | None = None
    mutual_secret: str | None = None


@dataclass(frozen=True)
class DatastoreRequest:
    """The body of ``PUT /datastores/{name}`` as sent (not yet validated)."""

    protocol: str
    size: int | str
    pool: str | None = None
    thin: bool = True
    profile: str = "vmware"
    nfs_clients: list[dict[str, str]] = field(default_factory=list)
    initiators: list[str] = field(default_factory=list)
    initiator_groups: list[str] = field(default_factory=list)
    chap: ChapRequest | None = None
    sync: str | None = None
    compression: str | None = None
    recordsize: int | str | None = None
    volblocksize: int | str | None = None
    labels: dict[str, str] | None = None  # what snapshot policies may select it by


@dataclass(frozen=True)
class DatastoreView:
    """A datastore as the API shows it: record + live usage + live serving status."""

    record: DatastoreRecord
    dataset: str
    path: str | None  # NFS mount path
    device: str | None  # zvol device
    wwn: str | None
    used: int
    available: int
    referenced: int
    compressratio: float
    properties: dict[str, str]
    serving: bool  # export/LUN live
    clients: list[str]  # NFS clients with state / iSCSI initiators logged in
    snapshots: int
    online: bool  # its pool is imported and its dataset exists
    protection: Protection | None = None  # what snapshot policies did for it
    warnings: tuple[str, ...] = ()  # said once, in the answer to the PUT that caused it


class DatastoreService:
    def __init__(self, ctx: Context, reconciler: Reconciler, pools: PoolService,
                 protection: ProtectionSource | None = None) -> None:
        self.ctx = ctx
        self.reconciler = reconciler
        self.pools = pools
        # checks a delete must pass (raise to refuse), e.g. "replicated elsewhere"
        self.delete_guards: builtins.list[Callable[[DatastoreRecord], None]] = []
        # snapshot policies' last good snapshot per datastore (read from SQLite)
        self.protection = protection

    # --- reading (no lock; the same host calls for any number of datastores) --------

    def list(self) -> list[DatastoreView]:
        view, live = self.reconciler.read(snapshots=True, properties=VIEW_PROPERTIES,
                                          activity=True, detail=False)
        records = self.ctx.store.list_datastores()
        prot = self.protection(records) if self.protection else {}
        return [replace(self._view(r, view.datasets.get(r.spec.dataset)
                                   if view.available else None,
                                   view.snapshots.get(r.spec.dataset, 0), live),
                        protection=prot.get(r.name))
                for r in records]

    def get(self, name: str) -> DatastoreView:
        return self.view_of(self.record(name))

    def view_of(self, rec: DatastoreRecord, new: bool = False) -> DatastoreView:
        """One datastore; ``new``: just made, so no snapshots and no clients to look for."""
        zfs = self.ctx.zfs
        info = zfs.get_dataset(rec.spec.dataset, DATASTORE_PROPERTIES) \
            if zfs.available() else None
        snaps = 0 if new or info is None else \
            zfs.snapshot_counts(rec.spec.dataset).get(rec.spec.dataset, 0)
        prot = self.protection([rec]).get(rec.name) if self.protection else None
        return replace(self._view(rec, info, snaps, self.live_one(rec, clients=not new)),
                       protection=prot)

    def live_one(self, rec: DatastoreRecord, clients: bool = True) -> LiveState:
        """Whether one datastore is served and who uses it (NFS: 2 DBus calls, or one
        DisplayExport without ``clients``; iSCSI: a few configfs reads)."""
        try:
            if rec.spec.is_nfs and not clients and rec.export_id is not None:
                shown = self.ctx.ganesha.get_export(rec.export_id)
                return LiveState(True, True, {shown.export_id: LiveExport(
                    shown.export_id, shown.path)} if shown else {}, {})
            if rec.spec.is_nfs:
                act = self.ctx.ganesha.activity()
                exports = {i: LiveExport(i, r.path) for i, r in act.exports.items()}
                return LiveState(True, True, exports, {}, activity=act)
            target = self.ctx.lio.get_target(rec.iqn or "") if rec.iqn else None
            return LiveState(True, True, {}, {rec.iqn: target} if target and rec.iqn else {})
        except ZdsError:
            return LiveState(False, False, {}, {})

    def record(self, name: str) -> DatastoreRecord:
        validate.resource_name(name, "datastore name")
        rec = self.ctx.store.get_datastore(name)
        if rec is None:
            raise NotFound(f"datastore {name!r} not found")
        return rec

    def attach(self, name: str, server: str | None,
               view: DatastoreView | None = None, port: int | None = None) -> AttachInstructions:
        """``port``: the port clients reach the service at when it is not the appliance's
        own (port forwarding, NAT): the iSCSI portal's port, the NFS server's."""
        view = view or self.get(name)
        address = server or self.ctx.settings.public_address or "APPLIANCE-ADDRESS"
        rec = view.record
        if rec.spec.is_nfs:
            return nfs_instructions(rec, address, view.path or f"/{view.dataset}",
                                    port or 2049)
        return iscsi_instructions(rec, address, view.wwn or "",
                                  port or self.ctx.settings.iscsi_portal[1])

    def _view(self, rec: DatastoreRecord, ds: DatasetInfo | None, snapshots: int,
              live: LiveState) -> DatastoreView:
        props = dict(ds.properties) if ds else {}
        path = device = None
        if ds is not None and rec.spec.is_nfs:
            path = ds.prop("mountpoint") or None
        elif ds is not None:
            device = self.ctx.zfs.zvol_device(rec.spec.dataset)
        ratio = props.get("compressratio", "1.00").rstrip("x")
        return DatastoreView(
            record=rec,
            dataset=rec.spec.dataset,
            path=path,
            device=device,
            wwn=naa_wwn(rec.serial) if rec.serial else None,
            used=ds.int_prop("used") if ds else 0,
            available=ds.int_prop("available") if ds else 0,
            referenced=ds.int_prop("referenced") if ds else 0,
            compressratio=float(ratio) if re.fullmatch(r"\d+(\.\d+)?", ratio) else 1.0,
            properties={k: v for k, v in props.items()
                        if k in DATASTORE_SETTINGS and v not in ("", "-")},
            serving=live.serving(rec),
            clients=live.clients(rec),
            snapshots=snapshots,
            online=ds is not None,
        )

    # --- validation -----------------------------------------------------------------

    def validate_request(self, name: str, req: DatastoreRequest) -> DatastoreSpec:
        """Turns a request into a spec or raises InvalidInput/NotFound; changes nothing."""
        validate.resource_name(name, "datastore name")
        if req.protocol not in PROTOCOLS:
            raise InvalidInput(f"invalid protocol {req.protocol!r}: one of {', '.join(PROTOCOLS)}")
        if req.profile not in PROFILES:
            raise InvalidInput(f"invalid profile {req.profile!r}: one of {', '.join(PROFILES)}")
        pool = self.pools.resolve(req.pool)
        size = validate.parse_size(req.size)
        is_nfs = req.protocol != "iscsi"
        if is_nfs and (req.initiators or req.initiator_groups or req.chap):
            raise InvalidInput("initiators, initiator_groups and chap are for iscsi datastores")
        if not is_nfs and req.nfs_clients:
            raise InvalidInput("nfs clients are for nfs3/nfs41 datastores; "
                               "use initiators for iscsi")
        if is_nfs and req.volblocksize is not None:
            raise InvalidInput("volblocksize is for iscsi (zvol) datastores; use recordsize")
        if not is_nfs and req.recordsize is not None:
            raise InvalidInput("recordsize is for nfs datastores; use volblocksize")
        labels = validate.labels(req.labels or {})
        clients: list[NfsClient] = []
        seen: set[str] = set()
        for c in req.nfs_clients:
            if not isinstance(c, dict) or "match" not in c:
                raise InvalidInput("each nfs client needs 'match' (IP, CIDR or hostname)")
            match = validate.nfs_client(c["match"])
            access = c.get("access", "rw")
            if access not in ("rw", "ro"):
                raise InvalidInput(f"invalid nfs access {access!r}: rw or ro")
            if match in seen:
                raise InvalidInput(f"nfs client {match} is listed twice")
            seen.add(match)
            clients.append(NfsClient(match, access))  # type: ignore[arg-type]
        initiators = tuple(sorted({validate.iqn(i) for i in req.initiators}))
        groups = tuple(sorted({validate.resource_name(g, "initiator group name")
                               for g in req.initiator_groups}))
        for g in groups:
            if self.ctx.store.get_group(g) is None:
                raise NotFound(f"initiator group {g!r} not found")
        chap = None
        if req.chap is not None:
            if bool(req.chap.mutual_user) != bool(req.chap.mutual_secret):
                raise InvalidInput("mutual CHAP needs both mutual_user and mutual_secret")
            chap = ChapSettings(
                validate.chap_user(req.chap.user), validate.chap_secret(req.chap.secret),
                validate.chap_user(req.chap.mutual_user) if req.chap.mutual_user else None,
                validate.chap_secret(req.chap.mutual_secret) if req.chap.mutual_secret else None,
            )
            if chap.mutual_secret and chap.mutual_secret == chap.secret:
                raise InvalidInput("the mutual CHAP secret must differ from the CHAP secret")
        overrides = Overrides(
            sync=validate.sync(req.sync) if req.sync is not None else None,
            compression=(validate.compression(req.compression)
                         if req.compression is not None else None),
            recordsize=(validate.power_of_two_size(req.recordsize, 4096, 1 << 20, "recordsize")
                        if req.recordsize is not None else None),
            volblocksize=(validate.power_of_two_size(req.volblocksize, 4096, 128 << 10,
                                                     "volblocksize")
                          if req.volblocksize is not None else None),
        )
        if not is_nfs:
            block = overrides.volblocksize or int(ZVOL_PROPERTIES["volblocksize"])
            size = -(-size // block) * block  # zvol sizes are whole blocks
        if size < 64 << 20:
            raise InvalidInput("size must be at least 64M")
        spec = DatastoreSpec(
            name=name, pool=pool, protocol=req.protocol,  # type: ignore[arg-type]
            size=size, thin=req.thin, profile=req.profile,  # type: ignore[arg-type]
            nfs_clients=tuple(clients),
            iscsi=IscsiAccess(initiators, groups, chap),
            overrides=overrides,
            labels=labels,
        )
        self._check_with_adapters(spec)
        return spec

    def _check_with_adapters(self, spec: DatastoreSpec) -> None:
        """The export/target this spec will become, checked by the adapters' own rules
        now, so nothing they would refuse gets as far as creating a dataset."""
        probe = DatastoreRecord(spec, "creating", export_id=MIN_EXPORT_ID,
                                iqn=self.target_iqn(spec.name), serial=str(uuid.uuid4()))
        if spec.is_nfs:
            ganesha_check_spec(export_spec(probe, "/" + spec.dataset))
        else:
            groups = {g.name: g for g in self.ctx.store.list_groups()}
            lio_check_spec(target_spec(probe, "/dev/zvol/" + spec.dataset, groups,
                                       self.ctx.settings.iscsi_portal))

    # --- writing --------------------------------------------------------------------

    def put(self, name: str, req: DatastoreRequest) -> tuple[DatastoreView, bool]:
        """Creates or updates the datastore; returns (view, created)."""
        spec = self.validate_request(name, req)
        with self.ctx.lock.hold(f"PUT datastore {name}"):
            for group in spec.iscsi.initiator_groups:  # deleted since validation?
                if self.ctx.store.get_group(group) is None:
                    raise NotFound(f"initiator group {group!r} not found")
            existing = self.ctx.store.get_datastore(name)
            if existing is not None:
                view, created = self._update(existing, spec), False
            else:
                view, created = self._create(spec), True
        return replace(view, warnings=self.space_warnings(spec.pool)), created

    def space_warnings(self, pool: str) -> tuple[str, ...]:
        """What an admin should know after promising more space on ``pool``."""
        capacity = self.pools.capacity_of(pool)
        promised = self.ctx.store.promised_size(pool)
        if not capacity or promised <= capacity:
            return ()
        limit = self.pools.overcommit_of(pool)
        return (f"pool {pool} is overcommitted {promised / capacity:.1f}x: its thin "
                f"datastores promise {validate.format_size(promised)} on "
                f"{validate.format_size(capacity)} (limit {limit:g}x); health alerts when "
                "the pool is 80/90/95% full",)

    def _require_service(self, spec: DatastoreSpec) -> None:
        if not self.ctx.zfs.available():
            raise Unavailable("ZFS is not available on this appliance (module not loaded?)")
        if spec.is_nfs and not self.ctx.ganesha.available():
            server = self.ctx.settings.nfs_server
            raise Unavailable(f"the NFS server ({server}) is not running: start it "
                              f"(systemctl start {MAIN_UNIT[server]}) and retry; nothing "
                              "was changed")
        if not spec.is_nfs and not self.ctx.lio.available():
            raise Unavailable("the LIO iSCSI target is not available (configfs/target "
                              "modules); nothing was changed")

    def _check_space(self, spec: DatastoreSpec, already: int = 0) -> None:
        root = self.ctx.zfs.get_dataset(spec.pool, ("used", "available"))
        if root is None:
            raise NotFound(f"pool {spec.pool!r} not found")
        available = root.int_prop("available")
        capacity = available + root.int_prop("used")
        growth = spec.size - already
        if not spec.thin and growth > available:
            raise InsufficientSpace(
                f"pool {spec.pool} has {validate.format_size(available)} free; a thick "
                f"datastore of {validate.format_size(spec.size)} does not fit")
        ratio = self.pools.overcommit_of(spec.pool)
        limit = int(capacity * ratio)
        promised = self.ctx.store.promised_size(spec.pool, except_name=spec.name)
        if spec.size + promised > limit:
            raise InsufficientSpace(
                f"pool {spec.pool} holds {validate.format_size(capacity)}; its datastores "
                f"already promise {validate.format_size(promised)}, and "
                f"{validate.format_size(spec.size)} more would pass its overcommit limit of "
                f"{ratio:g}x ({validate.format_size(limit)}): add disks, or raise the limit "
                f"(PATCH /api/v1/pools/{spec.pool} {{\"overcommit\": ...}})",
                detail={"capacity": capacity, "promised": promised, "overcommit": ratio})

    def _create(self, spec: DatastoreSpec, origin: str | None = None) -> DatastoreView:
        zfs = self.ctx.zfs
        self._require_service(spec)
        existing_ds = zfs.get_dataset(spec.dataset, ("type",))
        if existing_ds is not None:
            raise Conflict(f"dataset {spec.dataset} already exists and is not a ZDS datastore "
                           "known here (import it or choose another name)")
        if origin is None:
            self._check_space(spec)
        rec = DatastoreRecord(
            spec=spec,
            state="creating",
            export_id=self.ctx.store.next_export_id() if spec.is_nfs else None,
            iqn=self.target_iqn(spec.name) if not spec.is_nfs else None,
            serial=str(uuid.uuid4()) if not spec.is_nfs else None,
            origin=origin,
            created=time.time(),
        )
        self.ctx.store.put_datastore(rec)  # intent first: a crash is finished at start-up
        try:
            self.create_dataset(rec)
            rec = rec.with_state("ready")
            self.ctx.store.put_datastore(rec)
            report = self.reconciler.datastores([rec])
            failures = report.failures_for(rec.export_id, rec.iqn, "zfs")
            if failures:
                raise Unavailable("could not serve the datastore: " + "; ".join(failures))
        except Exception:
            self._undo_create(rec)
            raise
        return self.view_of(rec, new=True)

    def _undo_create(self, rec: DatastoreRecord) -> None:
        """Back to nothing after a failed create (best effort; reconcile finishes it)."""
        self.ctx.store.put_datastore(rec.with_state("deleting"))
        try:
            self.reconciler.datastores([rec], withdraw=True)
            if self.ctx.zfs.get_dataset(rec.spec.dataset, ("type",)) is not None:
                self.ctx.zfs.destroy(rec.spec.dataset, recursive=True)
            self.ctx.store.delete_datastore(rec.name)
        except Exception:  # left in 'deleting': the next reconcile at start-up retries
            pass

    def target_iqn(self, name: str) -> str:
        host = re.sub(r"[^a-z0-9-]", "-", self.ctx.local.hostname().lower()).strip("-")
        return validate.iqn(f"{self.ctx.settings.iqn_prefix}:{host or 'zds'}.{name}")

    def zfs_properties(self, rec: DatastoreRecord) -> dict[str, str]:
        """Native + zds:* properties for the dataset/zvol of ``rec``."""
        spec = rec.spec
        props = dict(NFS_DATASET_PROPERTIES if spec.is_nfs else ZVOL_PROPERTIES)
        o = spec.overrides
        if o.sync:
            props["sync"] = o.sync
        if o.compression:
            props["compression"] = o.compression
        if spec.is_nfs:
            if o.recordsize:
                props["recordsize"] = str(o.recordsize)
            props["refquota"] = str(spec.size)
            props["refreservation"] = "none" if spec.thin else str(spec.size)
        else:
            if o.volblocksize:
                props["volblocksize"] = str(o.volblocksize)
        props.update(self.user_properties(rec))
        return props

    @staticmethod
    def user_properties(rec: DatastoreRecord) -> dict[str, str]:
        """What a pool carries to another appliance about this datastore (no secrets)."""
        spec = rec.spec
        access: dict[str, Any] = (
            {"nfs_clients": [{"match": c.match, "access": c.access} for c in spec.nfs_clients]}
            if spec.is_nfs else
            {"initiators": list(spec.iscsi.initiators),
             "initiator_groups": list(spec.iscsi.initiator_groups),
             "chap": spec.iscsi.chap is not None}
        )
        props = {
            "zds:managed": "true",
            "zds:name": spec.name,
            "zds:protocol": spec.protocol,
            "zds:profile": spec.profile,
            "zds:thin": "true" if spec.thin else "false",
            "zds:size": str(spec.size),
            "zds:access": json.dumps(access, sort_keys=True, separators=(",", ":")),
        }
        if rec.export_id is not None:
            props["zds:export_id"] = str(rec.export_id)
        if rec.iqn:
            props["zds:iqn"] = rec.iqn
        if rec.serial:
            props["zds:serial"] = rec.serial
        if spec.labels:
            props["zds:labels"] = json.dumps(dict(spec.labels), sort_keys=True,
                                             separators=(",", ":"))
        return props

    def create_clone(self, spec: DatastoreSpec, snapshot: str) -> DatastoreView:
        """Called by the snapshot service under the engine lock."""
        return self._create(spec, origin=snapshot)

    def create_dataset(self, rec: DatastoreRecord) -> None:
        zfs = self.ctx.zfs
        spec = rec.spec
        self.pools.ensure_parent(spec.pool)
        props = self.zfs_properties(rec)
        if rec.origin:
            for fixed in ("volblocksize", "refreservation"):
                props.pop(fixed, None)
            zfs.clone(rec.origin, spec.dataset, props)
            if not spec.is_nfs:
                zfs.set_properties(spec.dataset, {"volsize": str(spec.size)})
                zfs.wait_for_device(spec.dataset)
            return
        if spec.is_nfs:
            zfs.create_filesystem(spec.dataset, props)
        else:
            props.pop("refreservation", None)
            zfs.create_volume(spec.dataset, spec.size, spec.thin, props)
            zfs.wait_for_device(spec.dataset)

    def _update(self, rec: DatastoreRecord, spec: DatastoreSpec) -> DatastoreView:
        old = rec.spec
        if rec.state not in ("ready", "error"):  # a PUT is how an 'error' one is repaired
            raise Conflict(f"datastore {rec.name} is {rec.state}; try again when it is ready")
        if spec.pool != old.pool:
            raise Conflict(f"datastore {rec.name} lives on pool {old.pool}; it cannot move")
        if spec.protocol != old.protocol:
            raise Conflict(f"datastore {rec.name} is {old.protocol}; the protocol cannot change "
                           "(clients would lose it): create a new datastore")
        if not spec.is_nfs and spec.overrides.volblocksize is None:
            spec = replace(spec, overrides=replace(spec.overrides,
                                                   volblocksize=old.overrides.volblocksize))
        if spec.overrides.volblocksize != old.overrides.volblocksize:
            raise Conflict("volblocksize is fixed when a zvol is created")
        if spec.size < old.size:
            raise Conflict(f"datastore {rec.name} is {validate.format_size(old.size)}; "
                           "shrinking would lose data (only growing is supported)")
        if spec == old and rec.state == "ready":
            return self.view_of(rec)
        self._require_service(spec)
        if spec.size > old.size or (old.thin and not spec.thin):
            self._check_space(spec, already=0 if old.thin and not spec.thin else old.size)
        new = replace(rec, spec=spec, state="ready", error=None)
        props = self.zfs_properties(new)
        if old.labels and not spec.labels:
            props["zds:labels"] = "{}"  # cleared (a user property cannot be unset by set)
        zfs = self.ctx.zfs
        # properties fixed at creation, or that only a change of size may touch
        for fixed in ("volblocksize", "refquota", "refreservation"):
            props.pop(fixed, None)
        if spec.is_nfs:
            props["refquota"] = str(spec.size)
            props["refreservation"] = "none" if spec.thin else str(spec.size)
        else:
            if spec.size != old.size:
                props["volsize"] = str(spec.size)
            if spec.thin != old.thin:
                props["refreservation"] = "none" if spec.thin else "auto"
        zfs.set_properties(spec.dataset, props)
        self.ctx.store.put_datastore(new)
        report = self.reconciler.datastores([new])
        failures = report.failures_for(new.export_id, new.iqn, "zfs")
        if failures:
            raise Unavailable("the datastore was changed in ZFS but could not be re-served: "
                              + "; ".join(failures) + " (it is retried at every reconcile)")
        return self.view_of(new)

    def delete(self, name: str, force: bool = False) -> Job:
        with self.ctx.lock.hold(f"DELETE datastore {name}"):
            rec = self.record(name)
            for guard in self.delete_guards:
                guard(rec)
            clones = self.dependent_clones(rec)
            if clones:
                raise Conflict(f"datastores {', '.join(clones)} were cloned from snapshots of "
                               f"{name}: delete them first")
            if not force:
                clients = self.live_one(rec).clients(rec)
                if clients:
                    what = "initiators logged in" if not rec.spec.is_nfs else "NFS clients"
                    raise Conflict(
                        f"datastore {name} has {what}: {', '.join(clients)}; "
                        "disconnect them or delete with force=true",
                        detail={"clients": clients})
            self.ctx.store.put_datastore(rec.with_state("deleting"))

        def run(ctx: JobContext) -> dict[str, Any]:
            with self.ctx.lock.hold(f"deleting datastore {name}", timeout=JOB_LOCK_WAIT):
                self.finish_delete(rec)
            return {"deleted": name}

        return self.ctx.jobs.submit("datastore.delete", name, run,
                                       message=f"deleting datastore {name}")

    def finish_delete(self, rec: DatastoreRecord) -> None:
        """Stop serving, destroy the dataset, forget the record (idempotent)."""
        report = self.reconciler.datastores([rec], withdraw=True)
        failures = report.failures_for(rec.export_id, rec.iqn, "zfs")
        if failures:
            raise Unavailable("could not stop serving the datastore: " + "; ".join(failures))
        for attempt in range(6):
            if self.ctx.zfs.get_dataset(rec.spec.dataset, ("type",)) is None:
                break
            try:
                self.ctx.zfs.destroy(rec.spec.dataset, recursive=True)
            except Conflict as exc:
                # a zvol udev is still probing, or ganesha letting go of the export's
                # file handles: busy for a moment after the LUN/export went away
                if "busy" not in exc.message or attempt == 5:
                    raise
                time.sleep(0.5 * 2 ** attempt)
        self.ctx.store.delete_datastore(rec.name)

    def finish_interrupted(self, states: tuple[str, ...] = ("creating", "deleting")) -> None:
        """Completes what a crash interrupted: a create (dataset made if missing, then
        ready) or a delete. Called under the lock at start-up and by the watcher."""
        imported = self.pools.imported()
        for rec in self.ctx.store.list_datastores():
            if rec.state not in states or rec.spec.pool not in imported:
                continue
            try:
                if rec.state == "creating":
                    if self.ctx.zfs.get_dataset(rec.spec.dataset, ("type",)) is None:
                        self.create_dataset(rec)
                    self.ctx.store.put_datastore(rec.with_state("ready"))
                elif rec.state == "deleting":
                    self.finish_delete(rec)
            except ZdsError as exc:
                log.error("could not finish %s of %s: %s", rec.state, rec.name, exc.message)
                self.ctx.store.put_datastore(rec.with_state(rec.state, exc.message))

    def dependent_clones(self, rec: DatastoreRecord) -> builtins.list[str]:
        prefix = rec.spec.dataset + "@"
        return [r.name for r in self.ctx.store.list_datastores()
                if r.origin and r.origin.startswith(prefix)]
