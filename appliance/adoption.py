"""Adoption: records for datastores a pool carries in its ``zds:*`` properties but this
appliance's SQLite lacks, so a pool moved from another appliance (or a new system disk)
keeps its datastores with the same export ids, IQNs and unit serials."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from dataclasses import replace

from appliance import pool_secrets
from appliance.context import Context
from appliance.errors import ZdsError
from appliance.host.zfs import DatasetInfo
from appliance.model import (
    DATASTORE_PARENT,
    DATASTORE_PROPERTIES,
    DatastoreRecord,
    DatastoreSpec,
    InitiatorGroup,
    IscsiAccess,
    NfsClient,
    NvmeAccess,
    Overrides,
)

log = logging.getLogger(__name__)


def adopt(ctx: Context, pools: Iterable[str]) -> list[str]:
    """Adopts the managed datasets of ``pools`` that have no record; returns their names.
    One ``zfs get -r`` per pool. Call it under the change lock."""
    records = ctx.store.list_datastores()
    known = {r.name for r in records}
    export_ids = {r.export_id for r in records if r.export_id is not None}
    iqns = {r.iqn for r in records if r.iqn}
    serials = {r.serial for r in records if r.serial}
    nqns = {r.nqn for r in records if r.nqn}
    groups = {g.name: g for g in ctx.store.list_groups()}
    adopted = []
    for pool in sorted(pools):
        mount: str | None = None  # POOL/datastores', listed first: CHAP credentials there
        for ds in ctx.zfs.list_datasets(f"{pool}/{DATASTORE_PARENT}",
                                        (*DATASTORE_PROPERTIES, "mountpoint")):
            if ds.name == f"{pool}/{DATASTORE_PARENT}":
                mount = pool_secrets.mount_of(ds)
            if ds.prop("zds:managed") != "true":
                continue
            if ds.prop("zds:replication"):
                # a replica whose promote was cut (it carries the source's zds:*): the
                # promote finishes it, adopting it would serve the source's identity
                log.error("not adopting %s: it is a replica, not promoted", ds.name)
                continue
            rec = record_from_properties(pool, ds)
            if rec is None or rec.name in known:
                continue
            # record_from_properties leaves exactly the CHAP datastores in 'error'
            if rec.state == "error" and mount is not None:
                chap = pool_secrets.read(ctx.local, mount, rec.name)
                if chap is not None:  # kept on the pool: served at once, with them
                    rec = replace(pool_secrets.replace_chap(rec, chap), state="ready",
                                  error=None)
            if ctx.transports.get(rec.spec.protocol) is None:
                # a pool from a release with more protocols: left unadopted (drift says
                # so) rather than served as something it is not
                log.error("not adopting %s: protocol %r is not served here", ds.name,
                          rec.spec.protocol)
                continue
            if rec.iqn in iqns or rec.serial in serials or rec.nqn in nqns:
                # another datastore here has that identity: serving both would confuse
                # every initiator. Left unadopted; drift reports it.
                log.error("not adopting %s: its IQN or serial is in use here", ds.name)
                continue
            transport = ctx.transports.of(rec.spec.protocol)
            if rec.export_id is not None and rec.export_id in export_ids:
                try:
                    new_id = transport.new_identity(rec.spec).export_id
                except ZdsError as exc:
                    log.error("not adopting %s: export id %d is taken here and no other "
                              "can be given: %s", ds.name, rec.export_id, exc.message)
                    continue
                log.warning("adopting %s: export id %d is taken here, now %s",
                            ds.name, rec.export_id, new_id)
                rec = replace(rec, export_id=new_id)
                ctx.zfs.set_properties(ds.name, {"zds:export_id": str(new_id)})
            _adopt_groups(ctx, rec, mount, groups)
            try:
                ctx.store.put_datastore(rec)
            except Exception as exc:  # one bad dataset must not stop the others
                log.error("cannot adopt %s: %s", ds.name, exc)
                continue
            transport.adopted(rec)
            if rec.export_id is not None:
                export_ids.add(rec.export_id)
            if rec.iqn:
                iqns.add(rec.iqn)
            if rec.serial:
                serials.add(rec.serial)
            if rec.nqn:
                nqns.add(rec.nqn)
            adopted.append(rec.name)
            known.add(rec.name)
            log.info("adopted datastore %s from pool %s", rec.name, pool)
    return adopted


def _adopt_groups(ctx: Context, rec: DatastoreRecord, mount: str | None,
                  groups: dict[str, InitiatorGroup]) -> None:
    """Makes the initiator groups ``rec`` names that this node lacks from the copies its
    pool keeps (pool_secrets.keep_groups); ``groups`` (this node's, by name) is updated.
    A group here whose members differ from the pool's copy is kept and logged: the
    admin's groups on this node win, and the hosts it names are the ones served."""
    for name in rec.spec.initiator_groups:
        kept = pool_secrets.read_group(ctx.local, mount, name) if mount else None
        here = groups.get(name)
        if here is not None:
            if kept is not None and kept.initiators != here.initiators:
                log.warning("adopting %s: initiator group %s here (%s) differs from the "
                            "pool's copy (%s); this node's is used", rec.name, name,
                            ", ".join(here.initiators), ", ".join(kept.initiators))
            continue
        if kept is None:
            log.error("adopting %s: initiator group %s is neither here nor on the pool; "
                      "the hosts it named are not served until it is made", rec.name, name)
            continue
        made = replace(kept, created=time.time())
        ctx.store.put_group(made)
        groups[name] = made
        log.info("adopting %s: made initiator group %s from the pool's copy (%s)",
                 rec.name, name, ", ".join(made.initiators))


def record_from_properties(pool: str, ds: DatasetInfo) -> DatastoreRecord | None:
    """Rebuilds a record from a dataset's zds:* properties (CHAP secrets are not there)."""
    try:
        access = json.loads(ds.prop("zds:access", "{}"))
        protocol = ds.prop("zds:protocol")
        spec = DatastoreSpec(
            name=ds.prop("zds:name"),
            pool=pool,
            protocol=protocol,
            size=int(ds.prop("zds:size")),
            thin=ds.prop("zds:thin") != "false",
            profile=ds.prop("zds:profile", "vmware"),  # type: ignore[arg-type]
            nfs_clients=tuple(NfsClient(c["match"], c["access"])
                              for c in access.get("nfs_clients", [])),
            iscsi=IscsiAccess(tuple(access.get("initiators", [])),
                              tuple(access.get("initiator_groups", []))),
            labels=tuple(sorted(json.loads(ds.prop("zds:labels", "{}") or "{}").items())),
            nvme=NvmeAccess(tuple(access.get("nvme_hosts", [])),
                            tuple(access.get("nvme_initiator_groups", [])),
                            bool(access.get("nvme_allow_any_host", False))),
            overrides=overrides_from(ds.prop("zds:overrides")),
        )
        export_id = ds.prop("zds:export_id")
        chap = bool(access.get("chap"))
        return DatastoreRecord(
            spec=spec,
            # CHAP secrets never go into ZFS properties: serving this LUN without them
            # would drop its authentication, so it waits for a PUT with the CHAP settings
            state="error" if chap else "ready",
            export_id=int(export_id) if export_id else None,
            iqn=ds.prop("zds:iqn") or None,
            serial=ds.prop("zds:serial") or None,
            nqn=ds.prop("zds:nqn") or None,
            origin=ds.prop("origin") or None,
            error="adopted from pool properties: not served until its CHAP settings are "
                  "given again with PUT" if chap else None,
            created=time.time(),
        )
    except (KeyError, ValueError, TypeError) as exc:
        log.warning("cannot adopt %s: %s", ds.name, exc)
        return None


def overrides_from(text: str) -> Overrides:
    """``zds:overrides`` as the datastore's overrides (what is not one is dropped)."""
    found = json.loads(text or "{}")
    if not isinstance(found, dict):
        return Overrides()
    kept: dict[str, str | int] = {}
    for key in ("sync", "compression"):
        if isinstance(found.get(key), str):
            kept[key] = found[key]
    for key in ("recordsize", "volblocksize"):
        if isinstance(found.get(key), int) and not isinstance(found.get(key), bool):
            kept[key] = found[key]
    return Overrides(**kept)  # type: ignore[arg-type]
