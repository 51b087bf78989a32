"""Bodies of /api/v1/replications and /api/v1/replication (pydantic), and their
conversion from and to the engine's views."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from api import convert
from api import schemas as s
from api.fields import (
    BandwidthLimit,
    KeyPrefix,
    Name,
    Port,
    PublicKey,
    ReplicationInterval,
    SourceNetwork,
    SshHost,
    TargetDataset,
    UnixUser,
)
from appliance.host.ssh import AuthorizedKey
from appliance.replication.views import (
    CheckView,
    Identity,
    IncomingView,
    OutgoingView,
    PromoteRequest,
    ReplicationRequest,
    ReplicationView,
    TargetRequest,
)

# a well-formed key (its blob names its type), so the examples are valid requests
EXAMPLE_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8g"


class TargetBody(s.Strict):
    host: SshHost = Field(description="the target appliance (or OpenZFS host): IP or DNS name",
                      examples=["192.0.2.20"])
    dataset: TargetDataset = Field(description="where the replica lives there: below the "
                                   "prefix the target authorized for this appliance's key "
                                   "(not in pool/datastores)",
                         examples=["tank/replicas/zds1/vmfs-nfs01"])
    port: Port = 22
    user: UnixUser = Field(default="root", description="SSH user (a ZDS target: root, forced "
                                                  "to its receive gate)")
    host_key: PublicKey | None = Field(default=None, description=(
        "pin this SSH host key (GET /replication/identity on the target lists its keys); "
        "without it the key the target presents on first contact is pinned"),
                                 examples=[EXAMPLE_KEY])


class ReplicationPut(s.Strict):
    """Create or update an outgoing replication (idempotent)."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"datastore": "vmfs-nfs01", "interval": "15m",
         "target": {"host": "192.0.2.20", "dataset": "tank/replicas/zds1/vmfs-nfs01"}},
        {"datastore": "vmfs-lun01", "interval": None, "after_snapshot_policy": True,
         "bandwidth_limit": "50M",
         "target": {"host": "dr.example.net", "dataset": "tank/replicas/zds1/vmfs-lun01"}},
    ]})

    datastore: Name = Field(description="a datastore that exists here")
    target: TargetBody
    interval: ReplicationInterval | None = Field(default=None, description=(
        "seconds or 90s/15m/1h/1d between scheduled runs (at least 60 s); null: runs only "
        "on request or after snapshot policies"), examples=["15m"])
    after_snapshot_policy: bool = Field(default=False, description=(
        "run after a snapshot policy snapshotted the datastore (sends that snapshot)"))
    take_snapshot: bool = Field(default=True, description=(
        "scheduled and manual runs snapshot the datastore first (zds-repl-NAME-UTC); "
        "false: they send the newest existing snapshot"))
    raw: bool = Field(default=False, description="zfs send -w (raw; for encrypted datasets) "
                                                 "instead of -L -c -e (compressed)")
    bandwidth_limit: BandwidthLimit | None = Field(default=None, description="bytes/s "
                                                   "(at least 64K), or 50M",
                                                   examples=["50M"])
    enabled: bool = True
    transport: Literal["ssh", "ssh+tcp"] = Field(default="ssh", description=(
        "ssh: the stream goes through SSH, encrypted. ssh+tcp (a ZDS target only): SSH "
        "for the commands and a one-time token, the stream over plain TCP to a port "
        "29100-29199 of the target (no NAT between them): for a trusted replication "
        "link where SSH's encryption is the bottleneck; the data is not encrypted on "
        "the wire"))


class ErrorOut(BaseModel):
    code: str
    message: str


class StatusOut(BaseModel):
    state: Literal["never", "running", "ok", "failed", "cancelled"]
    job_id: str | None
    last_run: float | None
    last_finished: float | None
    last_success: float | None
    last_snapshot: str | None = Field(description="newest snapshot the target holds")
    last_snapshot_created: int | None
    lag_seconds: float | None = Field(description="RPO: seconds since last_snapshot was "
                                                  "taken (null: nothing replicated yet)")
    last_bytes: int
    last_seconds: float
    rate_bytes_per_second: float
    total_bytes: int
    runs: int
    failures: int = Field(description="consecutive failed runs")
    last_error: ErrorOut | None
    resumable_bytes: int = Field(description="bytes of an interrupted stream the target "
                                             "keeps: the next run resumes after them")
    steps: list[str]
    next_run: float | None


class TargetOut(BaseModel):
    host: str
    port: int
    user: str
    dataset: str
    host_key: str | None = Field(description="the pinned host key (null before first "
                                             "contact)")


class OutgoingOut(BaseModel):
    datastore: str
    target: TargetOut
    interval: int | None
    after_snapshot_policy: bool
    take_snapshot: bool
    raw: bool
    bandwidth_limit: int | None
    enabled: bool
    transport: Literal["ssh", "ssh+tcp"]
    status: StatusOut


class IncomingOut(BaseModel):
    dataset: str
    pool: str
    source: str = Field(description="source appliance/datastore")
    datastore: str
    protocol: str
    snapshots: int
    newest_snapshot: str | None
    newest_created: int | None
    lag_seconds: float | None
    resume_pending: bool = Field(description="an interrupted stream waits to be resumed")
    used: int
    referenced: int


class ReplicationOut(BaseModel):
    name: str
    outgoing: OutgoingOut | None = Field(description="this appliance sends (source side)")
    incoming: IncomingOut | None = Field(description="this appliance holds the replica")


class CheckOut(BaseModel):
    name: str
    target: str
    host_key: str | None
    exists: bool
    snapshots: int
    newest: str | None
    resume_pending: bool
    available: int
    next_step: str
    in_sync: bool


class PromoteBody(s.Strict):
    """Serve the replica as a datastore on this appliance (no source needed). Its protocol
    is the replica's, so only that protocol's section may be given (another is refused,
    409: it is the replica's state)."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"name": "vmfs-nfs01", "nfs": {"clients": [{"match": "192.0.2.0/24"}]}},
        {"name": "vmfs-lun01", "identity": "keep",
         "iscsi": {"initiators": ["iqn.1998-01.com.vmware:esxi01-4f2a"]}},
        {"name": "vmfs-nfs01", "keep_access": True},
    ]})

    name: Name | None = Field(default=None, description="datastore name (default: the "
                                                        "source's)")
    identity: Literal["new", "keep"] = Field(default="new", description=(
        "iSCSI: keep the source's IQN and NAA id (only when the source is gone for good; "
        "ESXi then mounts the VMFS as before) or a new one (ESXi resignatures)"))
    nfs_path: Literal["source", "local"] | None = Field(default=None, description=(
        "NFS: export under the source's path (the default when it is a datastore path of "
        "this pool, directly below the mountpoint of POOL/datastores, and free here; "
        "'source' refuses with 409 otherwise) or this appliance's own"))
    nfs: s.NfsAccessBody | None = Field(default=None, description=(
        "NFS clients of the promoted datastore (default: none, unless keep_access)"))
    iscsi: s.IscsiAccessBody | None = Field(default=None, description=(
        "initiators, initiator groups and CHAP of the promoted LUN (default: none, unless "
        "keep_access)"))
    nvme: s.NvmeAccessBody | None = Field(default=None, description=(
        "host NQNs and initiator groups of the promoted NVMe/TCP namespace (default: none, "
        "unless keep_access)"))
    keep_access: bool = Field(default=False, description=(
        "take the NFS clients, initiators and initiator groups the source's stream carries "
        "(zds:access) for what nfs/iscsi leave out. Off by default: a source sets that "
        "list as it likes"))


class PromoteOut(BaseModel):
    datastore: s.DatastoreOut
    notes: list[str] = Field(description="what the hypervisors must do to use it")


class IdentityOut(BaseModel):
    hostname: str
    public_key: str = Field(description="this appliance's replication key: authorize it on "
                                        "a target")
    host_keys: list[str] = Field(description="this appliance's SSH host keys: what a source "
                                             "pins")


class AuthorizedKeyPut(s.Strict):
    public_key: PublicKey = Field(examples=[f"{EXAMPLE_KEY} zds-replication@zds1"])
    dataset_prefix: KeyPrefix = Field(description="the source may receive into this dataset "
                                      "and below only (created when missing; its pool must "
                                      "be imported here)", examples=["tank/replicas/zds1"])
    sources: list[SourceNetwork] = Field(default_factory=list, description=(
        "addresses/CIDRs the key may connect from (sshd from=); empty: any"))


class AuthorizedKeyOut(BaseModel):
    name: str
    public_key: str
    dataset_prefix: str
    sources: list[str]


# --- conversions ------------------------------------------------------------------------

def request(body: ReplicationPut) -> ReplicationRequest:
    t = body.target
    return ReplicationRequest(
        datastore=body.datastore,
        target=TargetRequest(host=t.host, dataset=t.dataset, port=t.port, user=t.user,
                             host_key=t.host_key),
        interval=body.interval, after_snapshot_policy=body.after_snapshot_policy,
        take_snapshot=body.take_snapshot, raw=body.raw,
        bandwidth_limit=body.bandwidth_limit, enabled=body.enabled,
        transport=body.transport)


def promote_request(body: PromoteBody) -> PromoteRequest:
    chap = convert.chap_request(body.iscsi.chap if body.iscsi is not None else None)
    return PromoteRequest(
        name=body.name, identity=body.identity, nfs_path=body.nfs_path,
        nfs_clients=[c.model_dump() for c in body.nfs.clients] if body.nfs else None,
        initiators=list(body.iscsi.initiators) if body.iscsi else None,
        initiator_groups=list(body.iscsi.initiator_groups) if body.iscsi else None,
        chap=chap, keep_access=body.keep_access,
        nvme_hosts=list(body.nvme.hosts) if body.nvme else None,
        nvme_initiator_groups=list(body.nvme.initiator_groups) if body.nvme else None)


def _outgoing(v: OutgoingView) -> OutgoingOut:
    spec, st = v.record.spec, v.record.status
    err = ErrorOut(code=str(st.last_error.get("code", "")),
                   message=str(st.last_error.get("message", ""))) if st.last_error else None
    return OutgoingOut(
        datastore=spec.datastore,
        target=TargetOut(host=spec.target.host, port=spec.target.port, user=spec.target.user,
                         dataset=spec.target.dataset, host_key=v.host_key),
        interval=spec.interval, after_snapshot_policy=spec.after_snapshot_policy,
        take_snapshot=spec.take_snapshot, raw=spec.raw, bandwidth_limit=spec.bandwidth_limit,
        enabled=spec.enabled, transport=spec.transport,
        status=StatusOut(
            state=st.state, job_id=st.job_id, last_run=st.last_run,
            last_finished=st.last_finished, last_success=st.last_success,
            last_snapshot=st.last_snapshot, last_snapshot_created=st.last_snapshot_created,
            lag_seconds=round(v.lag, 1) if v.lag is not None else None,
            last_bytes=st.last_bytes, last_seconds=st.last_seconds,
            rate_bytes_per_second=round(v.rate, 1), total_bytes=st.total_bytes,
            runs=st.runs, failures=st.failures, last_error=err,
            resumable_bytes=st.resumable_bytes, steps=list(st.steps), next_run=v.next_run))


def _incoming(v: IncomingView) -> IncomingOut:
    return IncomingOut(dataset=v.dataset, pool=v.pool, source=v.source,
                       datastore=v.datastore, protocol=v.protocol, snapshots=v.snapshots,
                       newest_snapshot=v.newest_snapshot, newest_created=v.newest_created,
                       lag_seconds=round(v.lag, 1) if v.lag is not None else None,
                       resume_pending=v.resume_pending, used=v.used, referenced=v.referenced)


def replication_out(v: ReplicationView) -> ReplicationOut:
    return ReplicationOut(name=v.name,
                          outgoing=_outgoing(v.outgoing) if v.outgoing else None,
                          incoming=_incoming(v.incoming) if v.incoming else None)


def check_out(v: CheckView) -> CheckOut:
    return CheckOut(**{k: getattr(v, k) for k in CheckOut.model_fields})


def identity_out(v: Identity) -> IdentityOut:
    return IdentityOut(hostname=v.hostname, public_key=v.public_key, host_keys=v.host_keys)


def key_out(k: AuthorizedKey) -> AuthorizedKeyOut:
    return AuthorizedKeyOut(name=k.name, public_key=k.public_key, dataset_prefix=k.prefix,
                            sources=list(k.sources))
