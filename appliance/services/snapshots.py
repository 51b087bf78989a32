"""Snapshots of a datastore, rollback, and clones (a new datastore from a snapshot)."""

from __future__ import annotations

import builtins
import re
import time
from dataclasses import dataclass, replace

from appliance import validate
from appliance.context import Context
from appliance.errors import Conflict, InvalidInput, NotFound, Unavailable
from appliance.model import DatastoreRecord
from appliance.reconciler import Reconciler
from appliance.services.datastores import DatastoreRequest, DatastoreService, DatastoreView


@dataclass(frozen=True)
class SnapshotView:
    datastore: str
    name: str
    full_name: str
    created: int  # unix time
    used: int
    referenced: int
    clones: list[str]
    policy: str | None = None  # the snapshot policy that took it (None: by hand)
    consistency: str | None = None
    held: bool = False  # a zfs hold keeps it
    age: float = 0.0  # seconds since it was taken


HOLD_TAG = r"[a-z0-9][a-z0-9._:-]{0,62}"


def _check_tag(tag: str) -> None:
    if not isinstance(tag, str) or not re.fullmatch(HOLD_TAG, tag):
        raise InvalidInput(f"invalid hold tag {tag!r}: 1-63 lowercase letters, digits, '.', "
                           "'_', ':' or '-'")


class SnapshotService:
    def __init__(self, ctx: Context, reconciler: Reconciler,
                 datastores: DatastoreService) -> None:
        self.ctx = ctx
        self.reconciler = reconciler
        self.datastores = datastores

    def _datastore(self, name: str) -> DatastoreRecord:
        rec = self.datastores.record(name)
        if rec.state != "ready":
            raise Conflict(f"datastore {name} is {rec.state}")
        return rec

    def list(self, datastore: str, policy: str | None = None) -> list[SnapshotView]:
        """Oldest first; ``policy``: only those that policy took ('' for manual ones)."""
        rec = self.datastores.record(datastore)
        now = time.time()
        clones_of: dict[str, list[str]] = {}
        for r in self.ctx.store.list_datastores():
            if r.origin:
                clones_of.setdefault(r.origin, []).append(r.name)
        out = []
        for snap in self.ctx.zfs.list_snapshots(rec.spec.dataset):
            short = snap.name.split("@", 1)[1]
            out.append(SnapshotView(
                datastore=datastore, name=short, full_name=snap.name,
                created=snap.int_prop("creation"), used=snap.int_prop("used"),
                referenced=snap.int_prop("referenced"),
                clones=sorted(clones_of.get(snap.name, [])),
                policy=snap.prop("zds:policy") or None,
                consistency=snap.prop("zds:consistency") or None,
                held=snap.int_prop("userrefs") > 0,
                age=round(max(0.0, now - snap.int_prop("creation")), 1),
            ))
        if policy is not None:
            out = [s for s in out if (s.policy or "") == policy]
        return out

    def get(self, datastore: str, name: str) -> SnapshotView:
        validate.snapshot_name(name)
        for snap in self.list(datastore):
            if snap.name == name:
                return snap
        raise NotFound(f"snapshot {name!r} of datastore {datastore!r} not found")

    def create(self, datastore: str, name: str) -> SnapshotView:
        validate.snapshot_name(name)
        with self.ctx.lock.hold(f"snapshot of {datastore}"):
            rec = self._datastore(datastore)
            self.ctx.zfs.snapshot(rec.spec.dataset, name,
                                     {"zds:created_by": "api",
                                      "zds:created_at": str(int(time.time()))})
        return self.get(datastore, name)

    def holds(self, datastore: str, name: str) -> builtins.list[str]:
        """The ``zfs hold`` tags on a snapshot (pruning and delete skip held ones)."""
        snap = self.get(datastore, name)
        return self.ctx.zfs.holds([snap.full_name])[snap.full_name]

    def hold(self, datastore: str, name: str, tag: str) -> builtins.list[str]:
        """Pins a snapshot with a ZFS user hold: no policy prunes it and it cannot be
        deleted until the hold is released. 409 if it holds that tag already."""
        _check_tag(tag)
        snap = self.get(datastore, name)
        with self.ctx.lock.hold(f"hold on {snap.full_name}"):
            self.ctx.zfs.hold(tag, [snap.full_name])
        return self.holds(datastore, name)

    def release(self, datastore: str, name: str, tag: str) -> builtins.list[str]:
        _check_tag(tag)
        snap = self.get(datastore, name)
        with self.ctx.lock.hold(f"release of {snap.full_name}"):
            self.ctx.zfs.release(tag, [snap.full_name])
        return self.holds(datastore, name)

    def delete(self, datastore: str, name: str) -> None:
        snap = self.get(datastore, name)
        if snap.clones:
            raise Conflict(f"snapshot {name} is the origin of datastores "
                           f"{', '.join(snap.clones)}: delete them first")
        if snap.held:
            tags = self.holds(datastore, name)
            raise Conflict(f"snapshot {name} is held ({', '.join(tags)}): release the "
                           "hold first", detail={"holds": tags})
        with self.ctx.lock.hold(f"deleting snapshot {snap.full_name}"):
            self.ctx.zfs.destroy(snap.full_name)

    def rollback(self, datastore: str, name: str, destroy_newer: bool = False,
                 force: bool = False) -> SnapshotView:
        """Rolls the datastore back. Refused while clients are connected (NFS clients
        active recently, iSCSI initiators logged in: their caches would not match the
        disk) unless ``force``. The export or LUN is withdrawn during the rollback and
        served again after it, so ganesha's caches and LIO's start afresh."""
        snap = self.get(datastore, name)
        with self.ctx.lock.hold(f"rollback of {datastore}"):
            rec = self._datastore(datastore)
            clients = self.datastores.live_one(rec).clients(rec)
            if clients and not force:
                raise Conflict(
                    f"datastore {datastore} is in use by {', '.join(clients)}; a rollback "
                    "under a live client corrupts its view of the disk. Disconnect it or "
                    "pass force=true", detail={"clients": clients})
            newer = [s.name for s in self.list(datastore) if s.created > snap.created
                     or (s.created == snap.created and s.full_name > snap.full_name)]
            if newer and not destroy_newer:
                raise Conflict(f"snapshots newer than {name} exist ({', '.join(newer)}); "
                               "pass destroy_newer=true to remove them")
            transport = self.datastores.transport(rec)
            transport.storage.check_rollback(self.ctx.zfs, rec.spec.dataset, snap.full_name,
                                             name)
            withdrawn = self.reconciler.datastores([rec], withdraw=True)
            failures = withdrawn.failures_for(*transport.subjects(rec), "zfs")
            if failures:
                self.reconciler.datastores([rec])
                raise Unavailable("could not withdraw the datastore for the rollback: "
                                  + "; ".join(failures))
            try:
                self.ctx.zfs.rollback(snap.full_name, destroy_newer=destroy_newer)
            finally:
                self.reconciler.datastores([rec])
        return snap

    def clone(self, datastore: str, name: str, new_name: str,
              req: DatastoreRequest | None = None) -> DatastoreView:
        """A new datastore from a snapshot, with its own export id / IQN / serial. Without
        ``req`` it gets the source's protocol, profile and access (clients, initiators,
        groups and CHAP)."""
        snap = self.get(datastore, name)
        src = self.datastores.record(datastore)
        base = req or self.inherited_request(src)
        if base.pool not in (None, src.spec.pool):
            raise Conflict("a clone lives in the pool of its snapshot")
        spec = self.datastores.validate_request(
            new_name, replace(base, pool=src.spec.pool, size=max(
                validate.parse_size(base.size), src.spec.size)), foreign=Conflict)
        if spec.protocol != src.spec.protocol:
            raise Conflict(f"a clone keeps the protocol of its source ({src.spec.protocol})")
        with self.ctx.lock.hold(f"clone {new_name}"):
            if self.ctx.store.get_datastore(new_name) is not None:
                raise Conflict(f"datastore {new_name!r} already exists")
            return self.datastores.create_clone(spec, snap.full_name)

    @staticmethod
    def inherited_request(src: DatastoreRecord) -> DatastoreRequest:
        spec = src.spec
        return DatastoreRequest(
            protocol=spec.protocol, size=spec.size, pool=spec.pool, thin=True,
            profile=spec.profile,
            nfs_clients=[{"match": c.match, "access": c.access} for c in spec.nfs_clients],
            initiators=list(spec.iscsi.initiators),
            initiator_groups=list(spec.iscsi.initiator_groups),
            chap=spec.iscsi.chap,
            nvme_hosts=list(spec.nvme.hosts),
            nvme_initiator_groups=list(spec.nvme.initiator_groups),
            nvme_allow_any_host=spec.nvme.allow_any_host,
        )
