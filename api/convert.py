"""Engine views -> response schemas, and request schemas -> engine requests."""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

from api import schemas as s
from appliance.attach import AttachInstructions
from appliance.host.zfs import VdevNode
from appliance.jobs import Job
from appliance.model import ChapSettings
from appliance.services.datastores import DatastoreRequest, DatastoreView
from appliance.services.groups import GroupView
from appliance.services.pools import PoolRequest, PoolView, VdevRequest
from appliance.services.snapshots import SnapshotView
from appliance.services.system import Health
from appliance.transports.nvme import namespace_identity


def datastore_request(body: s.DatastorePut) -> DatastoreRequest:
    nfs = body.nfs or s.NfsAccessBody()
    iscsi = body.iscsi or s.IscsiAccessBody()
    nvme = body.nvme or s.NvmeAccessBody()
    o = body.overrides or s.OverridesBody()
    return DatastoreRequest(
        protocol=body.protocol, size=body.size, pool=body.pool, thin=body.thin,
        profile=body.profile,
        nfs_clients=[c.model_dump() for c in nfs.clients],
        initiators=list(iscsi.initiators), initiator_groups=list(iscsi.initiator_groups),
        chap=chap_request(iscsi.chap), sync=o.sync, compression=o.compression,
        recordsize=o.recordsize, volblocksize=o.volblocksize, labels=body.labels,
        **nvme_fields(nvme),
    )


def nvme_fields(nvme: s.NvmeAccessBody) -> dict[str, Any]:
    """The request's NVMe/TCP access fields (``dhchap``: asked for, to be refused)."""
    return {"nvme_hosts": list(nvme.hosts),
            "nvme_initiator_groups": list(nvme.initiator_groups),
            "nvme_allow_any_host": nvme.allow_any_host,
            "nvme_dhchap": nvme.dhchap is not None}


def chap_request(chap: s.ChapBody | None) -> ChapSettings | None:
    return (ChapSettings(chap.user, chap.secret, chap.mutual_user, chap.mutual_secret)
            if chap else None)


def clone_request(base: DatastoreRequest, body: s.CloneBody) -> DatastoreRequest:
    """The source's request (``base``) with what the clone body overrides."""
    req = replace(base, profile=body.profile or base.profile)
    if body.nfs is not None:
        req = replace(req, nfs_clients=[c.model_dump() for c in body.nfs.clients])
    if body.iscsi is not None:
        req = replace(req, initiators=list(body.iscsi.initiators),
                      initiator_groups=list(body.iscsi.initiator_groups),
                      chap=chap_request(body.iscsi.chap))
    if body.nvme is not None:
        req = replace(req, **nvme_fields(body.nvme))
    return req


def datastore_out(v: DatastoreView, attach: AttachInstructions | None = None) -> s.DatastoreOut:
    rec, spec = v.record, v.record.spec
    nfs = iscsi = nvme = None
    # each section shows the identities the record has: an export id, a target
    if rec.export_id is not None:
        nfs = s.NfsInfo(export_id=rec.export_id, path=v.path,
                        clients=[s.NfsClientOut(match=c.match, access=c.access)
                                 for c in spec.nfs_clients])
    elif rec.iqn and rec.serial:
        chap = spec.iscsi.chap
        iscsi = s.IscsiInfo(iqn=rec.iqn, serial=rec.serial, wwn=v.wwn or "",
                            initiators=list(spec.iscsi.initiators),
                            initiator_groups=list(spec.iscsi.initiator_groups),
                            chap_user=chap.user if chap else None,
                            mutual_chap_user=chap.mutual_user if chap else None)
    elif rec.nqn and rec.serial:
        ns_uuid, nguid, serial = namespace_identity(rec.serial)
        nvme = s.NvmeInfo(nqn=rec.nqn, serial=serial, uuid=ns_uuid, nguid=nguid,
                          hosts=list(spec.nvme.hosts),
                          initiator_groups=list(spec.nvme.initiator_groups),
                          allow_any_host=spec.nvme.allow_any_host)
    return s.DatastoreOut(
        name=rec.name, pool=spec.pool, protocol=spec.protocol, profile=spec.profile,
        size=spec.size, thin=spec.thin, state=v.state or rec.state, error=v.problem,
        action=v.action, dataset=v.dataset,
        origin=rec.origin, online=v.online, serving=v.serving, connected_clients=v.clients,
        snapshots=v.snapshots,
        usage=s.UsageBody(used=v.used, available=v.available, referenced=v.referenced,
                          compressratio=v.compressratio),
        properties=v.properties, nfs=nfs, iscsi=iscsi, nvme=nvme,
        attach=s.AttachBody(**asdict(attach)) if attach else None,
        labels=dict(spec.labels),
        # vars, not asdict: flat dataclasses, and asdict's deep copies were a tenth of
        # the list's time at 1,000 datastores
        overrides=s.OverridesOut.model_validate(vars(spec.overrides)),
        protection=s.ProtectionOut(**vars(v.protection)) if v.protection else None,
        warnings=list(v.warnings),
    )


def health_out(h: Health) -> s.HealthOut:
    return s.HealthOut.model_validate(asdict(h))


def health_summary_out(h: Health) -> s.HealthSummaryOut:
    return s.HealthSummaryOut.model_validate({
        "status": h.status, "in_sync": h.in_sync, "checked_at": h.checked_at, "age": h.age,
        "started_at": h.started_at,
        "components": {n: {"ok": c.ok} for n, c in h.components.items()}})


def snapshot_out(v: SnapshotView) -> s.SnapshotOut:
    return s.SnapshotOut(**asdict(v))


def group_out(v: GroupView) -> s.GroupOut:
    return s.GroupOut(name=v.group.name, initiators=list(v.group.initiators), used_by=v.used_by)


def job_out(j: Job) -> s.JobOut:
    return s.JobOut(**asdict(j))


def _vdev(n: VdevNode) -> s.VdevOut:
    return s.VdevOut(name=n.name, state=n.state, read_errors=n.read_errors,
                     write_errors=n.write_errors, checksum_errors=n.checksum_errors,
                     children=[_vdev(c) for c in n.children])


def pool_out(v: PoolView) -> s.PoolOut:
    i = v.info
    out = s.PoolOut(name=i.name, health=i.health, size=i.size, allocated=i.allocated,
                    free=i.free, fragmentation=i.fragmentation, capacity=i.capacity,
                    demo=v.demo, datastores=v.datastores, promised=v.promised,
                    overcommit=v.overcommit)
    if v.status is not None:
        out.status, out.action = v.status.status, v.status.action
        out.scan, out.errors = v.status.scan, v.status.errors
        out.vdevs = _vdev(v.status.config)
    return out


def pool_request(body: s.PoolCreate) -> PoolRequest:
    return PoolRequest(
        name=body.name,
        vdevs=[VdevRequest(v.type, list(v.disks)) for v in body.vdevs],
        log=[VdevRequest(v.type, list(v.disks)) for v in body.log],
        cache=list(body.cache), spares=list(body.spares),
        # what was given only: the engine's defaults depend on each other (type on count)
        sparse_files=(body.sparse_files.model_dump(exclude_unset=True, exclude_none=True)
                      if body.sparse_files else None),
        force=body.force,
    )
