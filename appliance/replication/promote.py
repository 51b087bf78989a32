"""Promote: a replica held here becomes a datastore served under the same protocol,
without the source (its dataset moves to ``POOL/datastores/NAME``, read-write and
mounted), and a promote a crash cut is finished at the next start."""

from __future__ import annotations

import builtins
import logging
import time

from appliance import validate
from appliance.adoption import record_from_properties
from appliance.context import Context
from appliance.errors import Conflict, InvalidInput, NotFound, Unavailable, ZdsError
from appliance.host.ssh import Endpoint
from appliance.host.zfs import DatasetInfo
from appliance.model import DATASTORE_PARENT, DatastoreRecord, DatastoreSpec, datastore_dataset
from appliance.reconciler import Reconciler
from appliance.replication.part import ReplicationPart
from appliance.replication.store import Promotion, ReplicationStore
from appliance.replication.target import TargetSide
from appliance.replication.views import IncomingView, PromoteRequest, PromoteResult
from appliance.services.datastores import DatastoreRequest, DatastoreService

log = logging.getLogger(__name__)


class Promoter(ReplicationPart):
    """Replica -> served datastore, crash-safe (the intent is recorded first)."""

    def __init__(self, ctx: Context, records: ReplicationStore, datastores: DatastoreService,
                 reconciler: Reconciler, target: TargetSide) -> None:
        super().__init__(ctx, records)
        self.datastores = datastores
        self.reconciler = reconciler
        self.target = target

    def forget_unrecorded(self) -> None:
        """At start-up: a promote recorded as an intent that died before its datastore's
        record has nothing to finish."""
        for p in self.records.promotions():
            if self.ctx.store.get_datastore(p.datastore) is None:
                self.records.delete_promotion(p.datastore)

    def promote(self, name: str, req: PromoteRequest) -> PromoteResult:
        """Turns the replica ``name`` into a datastore served here, without the source:
        its dataset moves to <pool>/datastores/NAME (read-write, mounted), the datastore
        is recorded and the export or LUN is served."""
        validate.resource_name(name, "replication name")
        found = [i for i in self.target.incoming() if i.name == name]
        if not found:
            raise NotFound(f"no replica of {name!r} on this appliance")
        if len(found) > 1:
            raise Conflict(f"several replicas are named {name!r} here: "
                           f"{', '.join(i.dataset for i in found)}")
        inc = found[0]
        zfs = self.ctx.zfs
        info = zfs.get_dataset(inc.dataset)
        if info is None:
            raise NotFound(f"replica {inc.dataset} vanished")
        if not inc.snapshots:
            raise Conflict(f"{inc.dataset} holds no complete snapshot yet: nothing to serve "
                           "(its first stream was interrupted; the next run resumes it)")
        new_name = validate.resource_name(req.name or inc.datastore or name, "datastore name")
        adopted = record_from_properties(inc.pool, DatasetInfo(
            info.name, info.type, {**info.properties, "zds:name": new_name}))
        if adopted is None or info.prop("zds:managed") != "true":
            raise Conflict(f"{inc.dataset} is not the replica of a ZDS datastore (it has no "
                           "zds:* properties): promote it by hand (zfs rename/set)")
        src = adopted.spec
        keep = req.keep_access is True
        base = DatastoreRequest(
            protocol=src.protocol, size=src.size, pool=inc.pool, thin=src.thin,
            profile=src.profile,
            nfs_clients=req.nfs_clients if req.nfs_clients is not None else [
                {"match": c.match, "access": c.access} for c in src.nfs_clients if keep],
            initiators=req.initiators if req.initiators is not None else [
                i for i in src.iscsi.initiators if keep],
            initiator_groups=req.initiator_groups if req.initiator_groups is not None else [
                g for g in src.iscsi.initiator_groups if keep],
            chap=req.chap,
            nvme_hosts=req.nvme_hosts if req.nvme_hosts is not None else [
                h for h in src.nvme.hosts if keep],
            nvme_initiator_groups=req.nvme_initiator_groups
            if req.nvme_initiator_groups is not None else [
                g for g in src.nvme.initiator_groups if keep],
            nvme_allow_any_host=src.nvme.allow_any_host and keep)
        # the source had CHAP: its secrets never travel, and its initiators relied on it
        if adopted.error and req.chap is None and keep:
            raise Conflict(f"the source served {src.name} with CHAP; its secrets are not in "
                           "the replica: give them in the promote body (iscsi.chap)")
        spec = self.datastores.validate_request(new_name, base, foreign=Conflict)
        notes: builtins.list[str] = _access_notes(src, req, bool(adopted.error), new_name)
        with self.ctx.lock.hold(f"promote {name}"):
            if self.ctx.store.get_datastore(new_name) is not None:
                raise Conflict(f"datastore {new_name!r} exists here: promote under another "
                               "name ({\"name\": ...})")
            new_dataset = datastore_dataset(inc.pool, new_name)
            if zfs.get_dataset(new_dataset, ("type",)) is not None:
                raise Conflict(f"dataset {new_dataset} exists already")
            records = self.ctx.store.list_datastores()
            transport = self.ctx.transports.of(spec.protocol)
            # first, as it may refuse (nfs_path=source): nothing is allocated yet
            mountpoint = (None if transport.storage.is_volume
                          else self._promote_path(inc, req, new_name, notes))
            identity, said = transport.promote_identity(adopted, req.identity == "keep",
                                                        records, new_name)
            notes += said
            rec = DatastoreRecord(spec=spec, state="creating", export_id=identity.export_id,
                                  iqn=identity.iqn, serial=identity.serial, nqn=identity.nqn,
                                  created=time.time())
            if inc.resume_pending:
                self.zsend.abort_partial(Endpoint(None), inc.dataset)
                notes.append("An interrupted receive was dropped: the datastore holds the "
                             f"newest complete snapshot ({inc.newest_snapshot}).")
            # the intent first, then the record: a crash from here on is finished at the
            # next start (finish_promote), never mistaken for a create
            promotion = Promotion(new_name, inc.name, inc.dataset, new_dataset, mountpoint)
            self.records.put_promotion(promotion)
            self.ctx.store.put_datastore(rec)
            try:
                self._promote_dataset(promotion, rec)
            except Exception:
                self.ctx.store.delete_datastore(rec.name)  # refused: the replica as it was
                self.records.delete_promotion(new_name)
                raise
            rec = rec.with_state("ready")
            self.ctx.store.put_datastore(rec)
            self.records.delete_promotion(new_name)
            report = self.reconciler.datastores([rec])
            failures = report.failures_for(*transport.subjects(rec), "zfs")
            if failures:
                raise Unavailable("the replica became a datastore but could not be served: "
                                  + "; ".join(failures) + " (retried at every reconcile)")
        notes += transport.promote_notes
        notes.append(f"Replication {name} into {inc.dataset} is over: the source's next run "
                     "finds no replica there. Reverse replication (failback) is not built "
                     "yet: replicate the promoted datastore back with a new replication.")
        return PromoteResult(self.datastores.view_of(rec), notes)

    def _promote_path(self, inc: IncomingView, req: PromoteRequest, new_name: str,
                      notes: builtins.list[str]) -> str:
        """Where a file system replica is mounted (and so exported): the source's path,
        so ESXi remounts the same share path, when it is a datastore path of this pool
        (directly below the mountpoint of ``POOL/datastores``) that no datastore here
        uses; otherwise, or with ``nfs_path`` local, the path a datastore made here gets.
        Always explicit: a mountpoint the stream carried must not stay."""
        view = self.reconciler.read_zfs()
        parent = view.datasets.get(f"{inc.pool}/{DATASTORE_PARENT}")
        tree = _absolute(parent.prop("mountpoint") if parent else "") or \
            f"/{inc.pool}/{DATASTORE_PARENT}"
        local = f"{tree.rstrip('/')}/{new_name}"
        info = self.ctx.zfs.get_dataset(inc.dataset, ("zds:source_path",))
        source_path = info.prop("zds:source_path") if info else ""
        if req.nfs_path == "local" or not source_path:
            return local
        shown = repr(source_path[:200])  # the stream's words: quoted, never trusted
        kept = _path_below(source_path, tree)
        if kept is None:
            why = (f"The source's path {shown} is not a datastore path of this pool "
                   f"(directly below {tree}): ")
            if req.nfs_path == "source":
                raise Conflict(why + "promote with nfs_path=local. Nothing was changed",
                               detail={"source_path": source_path[:200], "allowed": tree})
            log.warning("promote %s: refusing the stream's path %s", inc.name, shown)
            notes.append(why + f"the export has this appliance's own path {local} instead.")
            return local
        used = {ds.prop("mountpoint") for ds in view.datasets.values()}
        if kept in used:
            if req.nfs_path == "source":
                raise Conflict(f"the source's path {kept} is in use here: promote with "
                               "nfs_path=local")
            notes.append(f"The source's path {kept} is in use here: the export has "
                         f"this appliance's own path {local} instead.")
            return local
        notes.append(f"The export keeps the source's path {kept}.")
        return kept

    def _promote_dataset(self, p: Promotion, rec: DatastoreRecord) -> None:
        """Replica -> datastore dataset: (thick: its reservation), renamed into
        ``POOL/datastores``, then :meth:`_promoted`; put back as it was if refused."""
        zfs, spec = self.ctx.zfs, rec.spec
        storage = self.ctx.transports.of(spec.protocol).storage
        # space first: a thick datastore that does not fit changes nothing
        if not spec.thin:
            zfs.set_properties(p.replica, {"refreservation": storage.thick_reservation(spec)})
        self.zsend.rename(p.replica, p.dataset)
        try:
            self._promoted(p, rec)
        except ZdsError:
            try:  # back to a replica, as it was
                zfs.set_properties(p.dataset, {"readonly": "on",
                                               "zds:replication": p.replication})
                self.zsend.rename(p.dataset, p.replica)
            except ZdsError as exc:
                log.error("promote %s: could not put the replica back: %s", p.replication,
                          exc.message)
            raise

    def _promoted(self, p: Promotion, rec: DatastoreRecord) -> None:
        """The renamed replica made a datastore's dataset (idempotent): writable, this
        datastore's zds:*, mounted where it is served (or its zvol's device there)."""
        zfs = self.ctx.zfs
        storage = self.ctx.transports.of(rec.spec.protocol).storage
        props = self.datastores.zfs_properties(rec)
        for fixed in ("volblocksize", "refreservation"):
            props.pop(fixed, None)
        props.update({"readonly": "off", "zds:replication": ""})
        props.update(storage.promoted_properties(p.mountpoint))
        zfs.set_properties(p.dataset, props)
        storage.after_promote(zfs, self.zsend, p.dataset)

    def finish_promote(self, rec: DatastoreRecord) -> bool:
        """At start-up, for a ``creating`` record: finishes the promote a crash cut, if
        one was recorded (True: done here, the record is ready or gone). The replica
        already renamed is made a datastore; one still a replica is promoted again;
        with neither left, nothing can be served and the record goes."""
        p = self.records.get_promotion(rec.name)
        if p is None:
            return False
        zfs = self.ctx.zfs
        if zfs.get_dataset(p.dataset, ("type",)) is not None:
            self._promoted(p, rec)
        elif zfs.get_dataset(p.replica, ("type",)) is not None:
            self._promote_dataset(p, rec)
        else:
            log.error("promote of %s into %s: neither %s nor %s exists; forgetting it",
                      p.replication, rec.name, p.replica, p.dataset)
            self.ctx.store.delete_datastore(rec.name)
            self.records.delete_promotion(rec.name)
            return True
        self.ctx.store.put_datastore(rec.with_state("ready"))
        self.records.delete_promotion(rec.name)
        log.warning("finished the promote of %s into datastore %s that a restart cut",
                    p.replication, rec.name)
        return True

def _absolute(path: str) -> str | None:
    """``path`` as a mountpoint ("/a/b", without a trailing '/'), or None ("none",
    "legacy", "-")."""
    return "/" + "/".join(p for p in path.split("/") if p) if path.startswith("/") else None

def _path_below(path: str, tree: str) -> str | None:
    """``path`` normalised, when it names an entry directly below ``tree``: compared
    component by component after dropping empty ones ("//", a trailing '/'); '.', '..'
    and characters outside a datastore name are refused, never resolved."""
    if not isinstance(path, str) or not path.startswith("/") or len(path) > 1024:
        return None
    parts = [p for p in path.split("/") if p]
    base = [p for p in tree.split("/") if p]
    if len(parts) != len(base) + 1 or parts[:-1] != base:
        return None
    try:
        validate.resource_name(parts[-1])  # also refuses '.', '..' and control characters
    except InvalidInput:
        return None
    return "/" + "/".join(parts)

def _access_notes(src: DatastoreSpec, req: PromoteRequest, chap: bool,
                  name: str) -> builtins.list[str]:
    """What promote did not take from the replica's access (``keep_access`` false)."""
    if req.keep_access is True:
        return []
    left = []
    if req.nfs_clients is None and src.nfs_clients:
        left.append(f"{len(src.nfs_clients)} NFS client rule(s)")
    if req.initiators is None and src.iscsi.initiators:
        left.append(f"{len(src.iscsi.initiators)} initiator(s)")
    if req.initiator_groups is None and src.iscsi.initiator_groups:
        left.append(f"{len(src.iscsi.initiator_groups)} initiator group(s)")
    if req.nvme_hosts is None and src.nvme.hosts:
        left.append(f"{len(src.nvme.hosts)} NVMe host(s)")
    if chap and req.chap is None:
        left.append("CHAP")
    if not left:
        return []
    return [f"Access was not taken from the replica ({', '.join(left)} of the source were "
            "left out): the datastore is served to the clients this request named, and no "
            f"others. Give them with PUT /api/v1/datastores/{name}, or promote with "
            "keep_access=true to use the source's."]
