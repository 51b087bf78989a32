"""Datastores: the main resource. validate -> record intent -> act -> reconcile -> read back."""

from __future__ import annotations

import builtins
import logging
import re
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any

from appliance import pool_secrets, properties, validate
from appliance.attach import AttachInstructions
from appliance.context import Context
from appliance.errors import (
    Conflict,
    InsufficientSpace,
    InvalidInput,
    NotFound,
    Unavailable,
    Unsupported,
    ZdsError,
)
from appliance.host.zfs import DatasetInfo
from appliance.jobs import Job, JobContext
from appliance.model import (
    DATASTORE_PROPERTIES,
    DATASTORE_SETTINGS,
    PROFILES,
    ChapSettings,
    DatastoreRecord,
    DatastoreSpec,
    IscsiAccess,
    NfsClient,
    NvmeAccess,
    Overrides,
    naa_wwn,
)
from appliance.policies.protection import Protection, ProtectionSource
from appliance.reconciler import LiveState, Reconciler
from appliance.services.create_queue import CreateQueue, PendingCreate
from appliance.services.pools import PoolService
from appliance.transports.base import AnyTransport
from appliance.transports.storage import RECONCILE

log = logging.getLogger(__name__)

# Why an NVMe/TCP datastore cannot have DH-HMAC-CHAP (the transport says the same).
NVME_NO_DHCHAP = (
    "DH-HMAC-CHAP is not available: the appliance's kernel (Debian 12, 6.1) is built "
    "without CONFIG_NVME_TARGET_AUTH, so its NVMe target cannot authenticate hosts. "
    "Access is restricted by the host NQN list (nvme.hosts and initiator groups), the "
    "address the NVMe/TCP port listens on ([nvme] address in zds.toml) and the firewall; "
    "nothing was changed")

# What a view shows of its dataset's properties (a set: looked up per property, per
# datastore, at every list).
_SETTINGS = frozenset(DATASTORE_SETTINGS)

# How long a background job (delete) waits for the change lock.
JOB_LOCK_WAIT = 3600.0


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
    chap: ChapSettings | None = None  # as sent: checked by the service
    sync: str | None = None
    compression: str | None = None
    recordsize: int | str | None = None
    volblocksize: int | str | None = None
    labels: dict[str, str] | None = None  # what snapshot policies may select it by
    nvme_hosts: list[str] = field(default_factory=list)  # host NQNs
    nvme_initiator_groups: list[str] = field(default_factory=list)
    nvme_allow_any_host: bool = False
    nvme_dhchap: bool = False  # DH-HMAC-CHAP was asked for (refused: the kernel lacks it)


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
    # the record's state, except that a ready datastore that is not served is "unserved"
    state: str = ""
    problem: str | None = None  # why it is not as recorded (the record's error, or why
    #                             it is not served)
    action: str | None = None  # what repairs it (the reconcile itself, or a person)


@dataclass(frozen=True)
class ListQuery:
    """Which datastores a list shows, by name: those after ``after`` (a cursor: the last
    name of the previous page, which need not exist any more), at most ``limit`` of
    them, only ``protocol``'s, ``pool``'s and those carrying every label of
    ``labels``. The default is every datastore."""

    limit: int | None = None
    after: str | None = None
    protocol: str | None = None
    pool: str | None = None
    labels: tuple[tuple[str, str], ...] = ()

    def matches(self, rec: DatastoreRecord) -> bool:
        if self.after is not None and rec.name <= self.after:
            return False
        if self.protocol is not None and rec.spec.protocol != self.protocol:
            return False
        if self.pool is not None and rec.spec.pool != self.pool:
            return False
        have = dict(rec.spec.labels)
        return all(have.get(k) == v for k, v in self.labels)


@dataclass(frozen=True)
class Listing:
    """A list's answer: the page, the cursor of the next one, and how old its ZFS figures
    (usage, properties, snapshot counts, online) may be."""

    items: builtins.list[DatastoreView]
    next_after: str | None  # pass as ``after`` for the next page (None: no more)
    zfs_read_at: float  # time.time() when the oldest ZFS figure shown was read
    zfs_age: float  # seconds since then


# A PUT's answer: the datastore's view, and whether this PUT created it.
PutOutcome = tuple[DatastoreView, bool]
Pending = PendingCreate[PutOutcome]


class DatastoreService:
    def __init__(self, ctx: Context, reconciler: Reconciler, pools: PoolService,
                 protection: ProtectionSource | None = None) -> None:
        self.ctx = ctx
        self.reconciler = reconciler
        self.pools = pools
        # checks a delete must pass (raise to refuse), e.g. "replicated elsewhere"
        self.delete_guards: builtins.list[Callable[[DatastoreRecord], None]] = []
        # finishers of creations that are not plain creates (a promote of a replica):
        # each returns True when the interrupted creation was its own and it finished it
        self.create_finishers: builtins.list[Callable[[DatastoreRecord], bool]] = []
        # snapshot policies' last good snapshot per datastore (read from SQLite)
        self.protection = protection
        # creates that arrive together are made together (services/create_queue.py)
        self.creates: CreateQueue[PutOutcome] = CreateQueue(self._create_batch, ctx.lock,
                                   limit=ctx.settings.create_queue_limit)

    def close(self) -> None:
        """The API is stopping: creates still queued fail (nothing of them was made)."""
        self.creates.close()

    # --- reading (no lock; the same host calls for any number of datastores) --------

    def list(self, query: ListQuery | None = None) -> builtins.list[DatastoreView]:
        """Every datastore (or ``query``'s), by name: :meth:`listing`'s items."""
        return self.listing(query).items

    def listing(self, query: ListQuery | None = None) -> Listing:
        """The datastores ``query`` selects (all by default), by name. ZFS figures come
        from the reconciler's kept read (what the engine changed since is read again;
        the rest is at most about two watcher intervals old, said in ``zfs_age``); what
        is served and who is connected is read now."""
        q = self.check_query(query or ListQuery())
        kept, live = self.reconciler.read_view()
        view = kept.view
        records = [r for r in self.ctx.store.list_datastores() if q.matches(r)]
        more = q.limit is not None and len(records) > q.limit
        if q.limit is not None:
            records = records[:q.limit]
        prot = self.protection(records) if self.protection else {}
        items = [self._view(r, view.datasets.get(r.spec.dataset) if view.available else None,
                            view.snapshots.get(r.spec.dataset, 0), live, prot.get(r.name))
                 for r in records]
        age = max(0.0, self.reconciler.kept.wall() - kept.read_at)
        return Listing(items, records[-1].name if more and records else None,
                       kept.read_at, age)

    def check_query(self, q: ListQuery) -> ListQuery:
        """``q`` with its values checked (InvalidInput names the wrong one)."""
        if q.limit is not None and q.limit < 1:
            raise InvalidInput(f"invalid limit {q.limit}: at least 1")
        if q.after is not None:
            validate.resource_name(q.after, "cursor (after)")
        if q.protocol is not None:
            self.ctx.transports.of(q.protocol)
        if q.pool is not None:
            validate.pool_name(q.pool)
        # each selector checked as a label; all must hold, so one key with two values
        # selects nothing (as it should), and a repeated selector changes nothing
        checked = [pair for k, v in q.labels for pair in validate.labels({k: v})]
        return replace(q, labels=tuple(dict.fromkeys(checked)))

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
        return self._view(rec, info, snaps, self.live_one(rec, clients=not new), prot)

    def live_one(self, rec: DatastoreRecord, clients: bool = True) -> LiveState:
        """Whether one datastore is served and who uses it: a few host calls of its
        transport (NFS: 2 DBus calls, or one DisplayExport without ``clients``)."""
        transports = self.ctx.transports
        t = transports.get(rec.spec.protocol)
        return LiveState({t.name: t.read_one(rec, clients)} if t else {}, transports)

    def transport(self, rec: DatastoreRecord) -> AnyTransport:
        """What serves ``rec`` (Unavailable for a protocol this appliance does not serve:
        a pool from a newer release)."""
        t = self.ctx.transports.get(rec.spec.protocol)
        if t is None:
            raise Unavailable(f"datastore {rec.name} is {rec.spec.protocol}, which this "
                              "appliance does not serve")
        return t

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
        return self.transport(rec).attach(rec, address, port, view.path)

    def _view(self, rec: DatastoreRecord, ds: DatasetInfo | None, snapshots: int,
              live: LiveState, protection: Protection | None = None) -> DatastoreView:
        props = ds.properties if ds else {}
        path = device = None
        t = self.ctx.transports.get(rec.spec.protocol)
        if ds is not None and t is not None:
            path, device = t.storage.location(self.ctx.zfs, rec.spec.dataset, ds)
        ratio = props.get("compressratio", "1.00").rstrip("x")
        serving = live.serving(rec)
        state: str = rec.state
        problem, action = rec.error, self._action(rec)
        if rec.state == "ready" and not serving:
            # never "ready" when no host can reach it: say why, and what repairs it
            state = "unserved"
            problem, action = self._unserved(rec, ds, live)
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
                        if k in _SETTINGS and v not in ("", "-")},
            serving=serving,
            clients=live.clients(rec),
            snapshots=snapshots,
            online=ds is not None,
            state=state,
            problem=problem,
            action=action,
            protection=protection,
        )

    def _action(self, rec: DatastoreRecord) -> str | None:
        if rec.state == "error":
            return f"PUT /api/v1/datastores/{rec.name} with its settings repairs it"
        if rec.state in ("creating", "deleting") and rec.error:
            return (f"retried at every reconcile ({RECONCILE}); if it keeps failing, fix "
                    "what the error names")
        return None

    def _unserved(self, rec: DatastoreRecord, ds: DatasetInfo | None,
                  live: LiveState) -> tuple[str, str]:
        """Why a ready datastore is not served and what repairs it: the last check's
        drift about it when there is one, else what its view shows."""
        t = self.ctx.transports.get(rec.spec.protocol)
        subjects = {rec.name, rec.spec.dataset, *(t.subjects(rec) if t else ())}
        for item in self.reconciler.status.drift:
            if item.subject in subjects and item.action:
                return item.reason, item.action
        if ds is None:
            return (f"dataset {rec.spec.dataset} is missing (or pool {rec.spec.pool} is "
                    "not imported)", f"import the pool, or DELETE /api/v1/datastores/{rec.name}")
        if t is None:
            return (f"protocol {rec.spec.protocol} is not served by this appliance",
                    "update the appliance")
        part = live.parts.get(t.name)
        if part is not None and not part.up:
            return f"{t.daemon} is not answering", t.health_detail(False)
        problem = t.storage.problem(rec.spec.dataset, ds, None)
        if problem is not None:
            return problem.reason, problem.action
        return (f"its {t.daemon} export/target is not live",
                f"the reconcile serves it again ({RECONCILE}); GET /api/v1/system/drift "
                "says what differs")

    # --- validation -----------------------------------------------------------------

    def validate_request(self, name: str, req: DatastoreRequest, *,
                         foreign: type[ZdsError] = InvalidInput) -> DatastoreSpec:
        """Turns a request into a spec or raises InvalidInput/NotFound; changes nothing.
        ``foreign``: what another protocol's access fields raise (a clone or promote takes
        its source's protocol, so there it is the source's state: Conflict)."""
        validate.resource_name(name, "datastore name")
        transport = self.ctx.transports.of(req.protocol)
        if req.profile not in PROFILES:
            raise InvalidInput(f"invalid profile {req.profile!r}: one of {', '.join(PROFILES)}")
        pool = self.pools.resolve(req.pool)
        size = validate.parse_size(req.size)
        self._refuse_foreign_fields(transport, req, foreign)
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
        if req.nvme_dhchap:
            raise Unsupported(NVME_NO_DHCHAP)
        hosts = tuple(sorted({validate.nqn(h) for h in req.nvme_hosts}))
        nvme_groups = tuple(sorted({validate.resource_name(g, "initiator group name")
                                    for g in req.nvme_initiator_groups}))
        if req.nvme_allow_any_host and (hosts or nvme_groups):
            raise InvalidInput("nvme allow_any_host admits every host: give it without "
                               "hosts and initiator_groups, or name the hosts instead")
        for g in (*groups, *nvme_groups):
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
            recordsize=(validate.power_of_two_size(req.recordsize, *validate.RECORDSIZE_RANGE,
                                                   "recordsize")
                        if req.recordsize is not None else None),
            volblocksize=(validate.power_of_two_size(req.volblocksize,
                                                     *validate.VOLBLOCKSIZE_RANGE,
                                                     "volblocksize")
                          if req.volblocksize is not None else None),
        )
        size = transport.storage.round_size(size, overrides.volblocksize)
        if size < validate.MIN_DATASTORE_SIZE:
            raise InvalidInput("size must be at least 64M")
        spec = DatastoreSpec(
            name=name, pool=pool, protocol=req.protocol,
            size=size, thin=req.thin, profile=req.profile,  # type: ignore[arg-type]
            nfs_clients=tuple(clients),
            iscsi=IscsiAccess(initiators, groups, chap),
            overrides=overrides,
            labels=labels,
            nvme=NvmeAccess(hosts, nvme_groups, req.nvme_allow_any_host),
        )
        # the export/target this spec will become, checked by the adapter's own rules
        # now, so nothing it would refuse gets as far as creating a dataset
        transport.check(spec)
        return spec

    def _refuse_foreign_fields(self, transport: AnyTransport, req: DatastoreRequest,
                               foreign: type[ZdsError] = InvalidInput) -> None:
        """Fields of another protocol's access (clients, initiators...) or of the other
        storage kind's block size are refused, not ignored."""
        for other in self.ctx.transports:
            given = [f for f in other.access_fields
                     if f not in transport.access_fields and getattr(req, f)]
            if given:
                raise foreign(f"{other.access_said} are for "
                                   f"{'/'.join(other.protocols)} datastores"
                                   + (f"; {transport.access_hint}" if transport.access_hint
                                      else ""))
        own = transport.storage.block_property
        for other in self.ctx.transports:
            prop = other.storage.block_property
            if prop != own and getattr(req, prop) is not None:
                kinds = "/".join(p for o in self.ctx.transports
                                 if o.storage is other.storage for p in o.protocols)
                raise InvalidInput(f"{prop} is for {kinds} ({other.storage.said}) "
                                   f"datastores; use {own}")

    # --- writing --------------------------------------------------------------------

    def put(self, name: str, req: DatastoreRequest) -> PutOutcome:
        """Creates or updates the datastore; returns (view, created). A create waits for
        its turn in the queue however long it takes (the API waits a bounded time
        instead: :meth:`put_start`)."""
        started = self.put_start(name, req)
        return started.result() if isinstance(started, Future) else started

    def put_start(self, name: str, req: DatastoreRequest) -> PutOutcome | Future[PutOutcome]:
        """Validates the PUT, then updates an existing datastore at once (under the lock)
        or queues the create of a new one: (view, created), or the queued create's
        future. Invalid input is refused here, before anything is queued."""
        spec = self.validate_request(name, req)
        if self.ctx.store.get_datastore(name) is None:
            self._check_groups(spec)
            return self.creates.submit(spec)
        with self.ctx.lock.hold(f"PUT datastore {name}"):
            self._check_groups(spec)  # deleted since validation?
            existing = self.ctx.store.get_datastore(name)
            if existing is not None:
                view, created = self._update(existing, spec), False
            else:  # deleted meanwhile: made now, as the PUT says
                view, created = self._create(spec), True
        return self._answered(view), created

    def _answered(self, view: DatastoreView) -> DatastoreView:
        return replace(view, warnings=self.space_warnings(view.record.spec.pool))

    def _check_groups(self, spec: DatastoreSpec) -> None:
        for group in spec.initiator_groups:
            if self.ctx.store.get_group(group) is None:
                raise NotFound(f"initiator group {group!r} not found")

    def _create_batch(self, batch: builtins.list[Pending]) -> None:
        """The create queue's writer, with the lock held: the batch's intents recorded
        and checked one after another (each sees the space the earlier ones promised),
        then each dataset made, then one reconcile serving them all. A create that fails
        is undone and fails alone; a name that exists by now is an update."""
        begun: builtins.list[tuple[Pending, DatastoreRecord]] = []
        thick = 0  # bytes thick creates of this batch will reserve, not yet in ZFS
        for item in batch:
            try:
                self._check_groups(item.spec)
                existing = self.ctx.store.get_datastore(item.spec.name)
                if existing is not None:
                    item.resolve((self._answered(self._update(existing, item.spec)), False))
                    continue
                begun.append((item, self._begin_create(item.spec, reserved=thick)))
                thick += 0 if item.spec.thin else item.spec.size
            except Exception as exc:
                item.fail(exc)
        made: builtins.list[tuple[Pending, DatastoreRecord]] = []
        for item, rec in begun:
            try:
                self.create_dataset(rec)
                rec = rec.with_state("ready")
                self.ctx.store.put_datastore(rec)
                made.append((item, rec))
            except Exception as exc:
                self._undo_create(rec)
                item.fail(exc)
        report = self.reconciler.datastores([rec for _, rec in made])
        for item, rec in made:
            failures = report.failures_for(*self.transport(rec).subjects(rec), "zfs")
            if failures:
                self._undo_create(rec)
                item.fail(Unavailable("could not serve the datastore: " + "; ".join(failures)))
            else:
                item.resolve((self._answered(self.view_of(rec, new=True)), True))

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
        self.ctx.transports.of(spec.protocol).require()

    def _check_space(self, spec: DatastoreSpec, already: int = 0, reserved: int = 0) -> None:
        root = self.ctx.zfs.get_dataset(spec.pool, ("used", "available"))
        if root is None:
            raise NotFound(f"pool {spec.pool!r} not found")
        available = root.int_prop("available") - reserved
        capacity = root.int_prop("available") + root.int_prop("used")
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
        rec = self._begin_create(spec, origin)
        transport = self.ctx.transports.of(spec.protocol)
        try:
            self.create_dataset(rec)
            rec = rec.with_state("ready")
            self.ctx.store.put_datastore(rec)
            report = self.reconciler.datastores([rec])
            failures = report.failures_for(*transport.subjects(rec), "zfs")
            if failures:
                raise Unavailable("could not serve the datastore: " + "; ".join(failures))
        except Exception:
            self._undo_create(rec)
            raise
        return self.view_of(rec, new=True)

    def _begin_create(self, spec: DatastoreSpec, origin: str | None = None,
                      reserved: int = 0) -> DatastoreRecord:
        """Checks a create (service up, name free in ZFS, space with ``reserved`` bytes
        already spoken for) and records its intent: a crash after this is finished or
        undone at start-up. Nothing is recorded when a check refuses."""
        zfs = self.ctx.zfs
        self._require_service(spec)
        existing_ds = zfs.get_dataset(spec.dataset, ("type",))
        if existing_ds is not None:
            raise Conflict(f"dataset {spec.dataset} already exists and is not a ZDS datastore "
                           "known here (import it or choose another name)")
        if origin is None:
            self._check_space(spec, reserved=reserved)
        identity = self.ctx.transports.of(spec.protocol).new_identity(spec)
        rec = DatastoreRecord(
            spec=spec,
            state="creating",
            export_id=identity.export_id,
            iqn=identity.iqn,
            serial=identity.serial,
            nqn=identity.nqn,
            origin=origin,
            created=time.time(),
        )
        self.ctx.store.put_datastore(rec)  # intent first: a crash is finished at start-up
        return rec

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

    def zfs_properties(self, rec: DatastoreRecord) -> dict[str, str]:
        """Native + zds:* properties for the dataset/zvol of ``rec``."""
        return properties.dataset_properties(self.ctx.transports.of(rec.spec.protocol), rec)

    def user_properties(self, rec: DatastoreRecord) -> dict[str, str]:
        """What a pool carries to another appliance about this datastore (no secrets)."""
        return properties.user_properties(self.ctx.transports.of(rec.spec.protocol), rec)

    def create_clone(self, spec: DatastoreSpec, snapshot: str) -> DatastoreView:
        """Called by the snapshot service under the engine lock."""
        return self._create(spec, origin=snapshot)

    def create_dataset(self, rec: DatastoreRecord) -> None:
        spec = rec.spec
        storage = self.ctx.transports.of(spec.protocol).storage
        self.pools.ensure_parent(spec.pool)
        props = self.zfs_properties(rec)
        if rec.origin:
            storage.clone(self.ctx.zfs, rec.origin, spec, props)
        else:
            storage.create(self.ctx.zfs, spec, props)
        pool_secrets.keep(self.ctx.zfs, self.ctx.local, rec)
        self._keep_groups(rec)

    def _keep_groups(self, rec: DatastoreRecord) -> None:
        """The initiator groups ``rec`` names, kept on its pool (they move with it)."""
        groups = [g for g in map(self.ctx.store.get_group, rec.spec.initiator_groups)
                  if g is not None]
        pool_secrets.keep_groups(self.ctx.zfs, self.ctx.local, rec.spec.pool, groups)

    def _update(self, rec: DatastoreRecord, spec: DatastoreSpec) -> DatastoreView:
        old = rec.spec
        if rec.state not in ("ready", "error"):  # a PUT is how an 'error' one is repaired
            raise Conflict(f"datastore {rec.name} is {rec.state}; try again when it is ready")
        if spec.pool != old.pool:
            raise Conflict(f"datastore {rec.name} lives on pool {old.pool}; it cannot move")
        if spec.protocol != old.protocol:
            raise Conflict(f"datastore {rec.name} is {old.protocol}; the protocol cannot change "
                           "(clients would lose it): create a new datastore")
        transport = self.ctx.transports.of(spec.protocol)
        spec = transport.storage.keep_fixed(spec, old)
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
        # the new spec is recorded first: if the process dies before ZFS has it, the
        # dataset's zds:* lag the record and the reconcile finishes the change
        self.ctx.store.put_datastore(new)
        try:
            self.ctx.zfs.set_properties(spec.dataset,
                                        properties.update_properties(transport, new, old))
        except Exception:
            self.ctx.store.put_datastore(rec)  # refused: nothing changed, as recorded
            raise
        pool_secrets.keep(self.ctx.zfs, self.ctx.local, new,
                          had_chap=old.iscsi.chap is not None)
        self._keep_groups(new)
        report = self.reconciler.datastores([new])
        failures = report.failures_for(*transport.subjects(new), "zfs")
        if spec.size > old.size and not failures:
            try:
                transport.resized(new)
            except ZdsError as exc:  # the hosts see the size at their next rescan
                log.warning("datastore %s grew; telling its hosts failed: %s", new.name,
                            exc.message)
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
                    what = self.transport(rec).clients_said
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
        failures = report.failures_for(*self.subjects(rec), "zfs")
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
        pool_secrets.forget(self.ctx.zfs, self.ctx.local, rec)
        self.ctx.store.delete_datastore(rec.name)

    def finish_interrupted(self, states: tuple[str, ...] = ("creating", "deleting")) -> None:
        """Completes what a crash interrupted, as the record's state says was intended: a
        create is finished (its dataset made, or completed if it exists: mounted, grown,
        its zvol's device waited for) and then served by the reconcile, or rolled back
        when it cannot be (the pool no longer has room, a clone's snapshot is gone); a
        delete is finished. Called under the lock at start-up and by the watcher."""
        imported = self.pools.imported()
        for rec in self.ctx.store.list_datastores():
            if rec.state not in states or rec.spec.pool not in imported:
                continue
            try:
                if rec.state == "creating":
                    self._finish_create(rec)
                elif rec.state == "deleting":
                    self.finish_delete(rec)
            except ZdsError as exc:
                log.error("could not finish %s of %s: %s", rec.state, rec.name, exc.message)
                self.ctx.store.put_datastore(rec.with_state(rec.state, exc.message))

    def _finish_create(self, rec: DatastoreRecord) -> None:
        if any(finish(rec) for finish in self.create_finishers):
            return
        zfs = self.ctx.zfs
        info = zfs.get_dataset(rec.spec.dataset, ("type", "zds:name"))
        if info is None:
            try:
                self.create_dataset(rec)
            except (InsufficientSpace, InvalidInput, NotFound, Conflict) as exc:
                # the intent cannot be carried out now: back to nothing, as the PUT that
                # recorded it would have done (its client saw no answer)
                log.error("rolling back the interrupted creation of %s: %s", rec.name,
                          exc.message)
                self._undo_create(rec)
                return
        elif info.prop("zds:name") != rec.name:
            raise Conflict(f"dataset {rec.spec.dataset} exists and is not this datastore's "
                           "(zds:name differs): rename or destroy it, or delete the "
                           "datastore")
        else:
            self.transport(rec).storage.finish(zfs, rec.spec)
        self.ctx.store.put_datastore(rec.with_state("ready"))

    def subjects(self, rec: DatastoreRecord) -> tuple[str, ...]:
        """What a reconcile report names ``rec``'s export/target by."""
        t = self.ctx.transports.get(rec.spec.protocol)
        return t.subjects(rec) if t is not None else ()

    def dependent_clones(self, rec: DatastoreRecord) -> builtins.list[str]:
        prefix = rec.spec.dataset + "@"
        return [r.name for r in self.ctx.store.list_datastores()
                if r.origin and r.origin.startswith(prefix)]
