"""Request and response bodies of the REST API (pydantic), with examples for OpenAPI."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from api.schemas_cluster import ClusterRoleOut
from appliance.transports.registry import probe_targets, protocols

# The values come from the transport registry, so a new protocol needs no change here;
# pydantic and OpenAPI see an enum of them, mypy (which cannot build one) sees a str.
if TYPE_CHECKING:
    ProtocolName = str
    ProbeTargetName = str
else:
    ProtocolName = Literal[protocols()]
    ProbeTargetName = Literal[("local", *probe_targets())]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorBody(BaseModel):
    code: str = Field(examples=["conflict"])
    message: str = Field(examples=["datastore vmfs01 has initiators logged in: iqn..."])
    detail: dict[str, Any] = Field(default_factory=dict)


class ErrorResponse(BaseModel):
    error: ErrorBody


# --- datastores ---------------------------------------------------------------------

class NfsClientBody(Strict):
    match: str = Field(description="IP, CIDR network, hostname or *",
                       examples=["192.0.2.0/24"])
    access: Literal["rw", "ro"] = "rw"


class NfsAccessBody(Strict):
    clients: list[NfsClientBody] = Field(default_factory=list)


class ChapBody(Strict):
    user: str = Field(examples=["esxi-cluster"])
    secret: str = Field(description="12-255 printable characters (ESXi: 12-16)",
                        examples=["s3cret-s3cret"])
    mutual_user: str | None = None
    mutual_secret: str | None = None


class IscsiAccessBody(Strict):
    initiators: list[str] = Field(default_factory=list,
                                  examples=[["iqn.1998-01.com.vmware:esxi01-4f2a"]])
    initiator_groups: list[str] = Field(default_factory=list, examples=[["esxi-cluster"]])
    chap: ChapBody | None = None


class DhchapBody(Strict):
    """DH-HMAC-CHAP secrets (``DHHC-1:...``). Always refused (422 ``unsupported``): the
    appliance's kernel has no NVMe target authentication (CONFIG_NVME_TARGET_AUTH)."""

    host_secret: str | None = None
    controller_secret: str | None = None


class NvmeAccessBody(Strict):
    hosts: list[str] = Field(
        default_factory=list, description="host NQNs allowed to connect (/etc/nvme/hostnqn "
        "on Linux)", examples=[["nqn.2014-08.org.nvmexpress:uuid:"
                                "5b1e0c2a-7d4f-4e8b-9a61-0c3f2d8e7b14"]])
    initiator_groups: list[str] = Field(
        default_factory=list, description="initiator groups whose host NQNs are allowed",
        examples=[["kvm-cluster"]])
    allow_any_host: bool = Field(default=False, description="any host reaching the port may "
                                 "connect (attr_allow_any_host); without hosts and groups")
    dhchap: DhchapBody | None = Field(default=None, description="not available on this "
                                      "kernel: refused with 422 unsupported, saying why")


class OverridesBody(Strict):
    sync: Literal["standard", "always", "disabled"] | None = None
    compression: str | None = Field(default=None, examples=["zstd"])
    recordsize: int | str | None = Field(default=None, description="NFS only", examples=["128K"])
    volblocksize: int | str | None = Field(default=None, description="iSCSI only, fixed at "
                                           "creation", examples=["16K"])


class DatastorePut(Strict):
    """Create or update (idempotent). Only growing, access and overrides may change."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"protocol": "nfs3", "size": "500G", "profile": "vmware",
         "nfs": {"clients": [{"match": "192.0.2.0/24", "access": "rw"}]}},
        {"protocol": "iscsi", "size": "1T", "thin": True, "profile": "vmware",
         "iscsi": {"initiators": ["iqn.1998-01.com.vmware:esxi01-4f2a"]}},
    ]})

    protocol: ProtocolName
    size: int | str = Field(description="bytes, or 100G / 1.5T (binary units)")
    pool: str | None = Field(default=None, description="default: the only or default pool")
    thin: bool = True
    profile: Literal["vmware", "kvm"] = "vmware"
    nfs: NfsAccessBody | None = None
    iscsi: IscsiAccessBody | None = None
    nvme: NvmeAccessBody | None = None
    overrides: OverridesBody | None = None
    labels: dict[str, str] | None = Field(
        default=None, description="key: value pairs snapshot policies select datastores by",
        examples=[{"protect": "gold"}])


class CloneBody(Strict):
    name: str = Field(examples=["vmfs01-test"])
    nfs: NfsAccessBody | None = None
    iscsi: IscsiAccessBody | None = None
    nvme: NvmeAccessBody | None = None
    profile: Literal["vmware", "kvm"] | None = None


class UsageBody(BaseModel):
    used: int
    available: int
    referenced: int
    compressratio: float


class NfsInfo(BaseModel):
    export_id: int
    path: str | None
    clients: list[NfsClientBody]


class IscsiInfo(BaseModel):
    iqn: str
    serial: str
    wwn: str
    lun: int = 0
    initiators: list[str]
    initiator_groups: list[str]
    chap_user: str | None
    mutual_chap_user: str | None


class NvmeInfo(BaseModel):
    nqn: str = Field(description="the subsystem's NQN")
    serial: str = Field(description="the subsystem's serial (attr_serial)")
    uuid: str = Field(description="namespace 1's UUID")
    nguid: str = Field(description="namespace 1's NGUID: Linux shows "
                                   "ESXi's eui.<nguid>")
    nsid: int = 1
    hosts: list[str]
    initiator_groups: list[str]
    allow_any_host: bool


class AttachBody(BaseModel):
    esxi: list[str]
    libvirt_pool_xml: str
    virsh: list[str]
    notes: list[str]
    linux: list[str] = Field(default_factory=list, description="a Linux host's own commands "
                             "(NVMe/TCP: nvme-cli)")


class ProtectionOut(BaseModel):
    """What snapshot policies did for a datastore."""

    policies: list[str] = Field(description="the snapshot policies covering it now")
    last_snapshot: str | None = Field(description="the newest snapshot a policy took")
    last_snapshot_at: float | None = Field(description="unix time it was taken")
    age: float | None = Field(description="seconds since then")
    last_error: str | None = Field(description="why the last failed run failed (only when "
                                               "newer than the last good snapshot)")
    last_error_at: float | None


class DatastoreOut(BaseModel):
    name: str
    pool: str
    protocol: str
    profile: str
    size: int
    thin: bool
    state: str = Field(description="creating | ready | deleting | error, or unserved: "
                                   "recorded ready but not served now (error says why, "
                                   "action what repairs it)")
    error: str | None
    action: str | None = Field(default=None, description="what repairs what error names: "
                                                         "the reconcile itself, or a person")
    dataset: str
    origin: str | None
    online: bool
    serving: bool
    connected_clients: list[str]
    snapshots: int
    usage: UsageBody
    properties: dict[str, str]
    nfs: NfsInfo | None
    iscsi: IscsiInfo | None
    nvme: NvmeInfo | None = None
    attach: AttachBody | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    overrides: OverridesBody = Field(
        default_factory=OverridesBody,
        description="the overrides the last PUT asked for (null: the profile's default). A "
                    "PUT is the whole desired state: send labels and overrides back to keep "
                    "them")
    protection: ProtectionOut | None = None
    warnings: list[str] = Field(default_factory=list,
                                description="said in the answer to the PUT that caused it, "
                                            "e.g. the pool is overcommitted")


# --- snapshots ----------------------------------------------------------------------

class SnapshotCreate(Strict):
    name: str = Field(examples=["before-upgrade"])


class RollbackBody(Strict):
    destroy_newer: bool = False
    force: bool = Field(default=False, description="roll back under logged-in initiators")


class SnapshotOut(BaseModel):
    datastore: str
    name: str
    full_name: str
    created: int
    used: int
    referenced: int
    clones: list[str]
    policy: str | None = Field(default=None, description="the snapshot policy that took "
                                                         "it (None: taken by hand)")
    consistency: str | None = Field(default=None, description="policy snapshots: vm (VMs "
                                    "quiesced), partial, hooks or crash")
    held: bool = Field(default=False, description="a zfs hold keeps it (pruning skips it)")
    age: float = Field(default=0.0, description="seconds since it was taken")


# --- initiator groups ---------------------------------------------------------------

class GroupPut(Strict):
    initiators: list[str] = Field(
        description="hosts by their iSCSI IQNs and NVMe host NQNs (a host may be listed "
        "with both): iscsi datastores take the IQNs, nvme-tcp ones the NQNs",
        examples=[["iqn.1998-01.com.vmware:esxi01-4f2a", "iqn.1998-01.com.vmware:esxi02-77c1"],
                  ["iqn.1993-08.org.debian:01:kvm01",
                   "nqn.2014-08.org.nvmexpress:uuid:5b1e0c2a-7d4f-4e8b-9a61-0c3f2d8e7b14"]])


class GroupOut(BaseModel):
    name: str
    initiators: list[str]
    used_by: list[str]


# --- pools --------------------------------------------------------------------------

class VdevBody(Strict):
    type: Literal["disk", "mirror", "raidz", "raidz1", "raidz2", "raidz3"]
    disks: list[str] = Field(examples=[["/dev/disk/by-id/virtio-zdsdata0",
                                        "/dev/disk/by-id/virtio-zdsdata1"]])


class SparseFilesBody(Strict):
    count: int = 2
    size: int | str = "8G"
    type: Literal["disk", "mirror", "raidz1", "raidz2", "raidz3"] = "mirror"


class PoolCreate(Strict):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"name": "tank", "vdevs": [{"type": "mirror", "disks": [
            "/dev/disk/by-id/virtio-zdsdata0", "/dev/disk/by-id/virtio-zdsdata1"]}],
         "log": [{"type": "disk", "disks": ["/dev/disk/by-id/nvme-slog0"]}]},
        {"name": "demo", "sparse_files": {"count": 2, "size": "8G", "type": "mirror"}},
    ]})

    name: str
    vdevs: list[VdevBody] = Field(default_factory=list)
    log: list[VdevBody] = Field(default_factory=list, description="SLOG")
    cache: list[str] = Field(default_factory=list, description="L2ARC devices")
    spares: list[str] = Field(default_factory=list)
    sparse_files: SparseFilesBody | None = None
    force: bool = Field(default=False, description="zpool create -f (disks with old labels)")


class VdevOut(BaseModel):
    name: str
    state: str
    read_errors: int
    write_errors: int
    checksum_errors: int
    children: list[VdevOut]


class PoolOut(BaseModel):
    name: str
    health: str
    size: int
    allocated: int
    free: int
    fragmentation: int | None
    capacity: int
    demo: bool
    datastores: list[str]
    promised: int = Field(description="bytes the pool's datastores are promised (sizes)")
    overcommit: float = Field(description="thin datastores may promise up to this many "
                                          "times the pool's capacity (PATCH to change)")
    status: str | None = None
    action: str | None = None
    scan: str | None = None
    errors: str | None = None
    vdevs: VdevOut | None = None


class DiskOperation(Strict):
    disk: str = Field(description="a pool disk as GET /pools/{name} shows it (a name, or the "
                                  "number ZFS shows for a disk that is gone), or its path",
                      examples=["virtio-zdsdata1"])
    new_disk: str | None = Field(default=None,
                                 description="replace, attach: the path of an unused disk",
                                 examples=["/dev/disk/by-id/virtio-zdsdata2"])
    force: bool = Field(default=False, description="replace, attach: zpool's -f")


class PoolPatch(Strict):
    overcommit: float = Field(ge=1.0, le=1000.0, examples=[20.0],
                              description="how many times its capacity the pool's thin "
                                          "datastores may promise")


# --- jobs ---------------------------------------------------------------------------

class JobOut(BaseModel):
    id: str
    kind: str
    target: str | None
    state: Literal["queued", "running", "succeeded", "failed", "cancelled"]
    progress: float
    message: str
    result: dict[str, Any] | None
    error: dict[str, Any] | None
    created: float
    started: float | None
    finished: float | None


# --- system -------------------------------------------------------------------------

class ComponentOut(BaseModel):
    ok: bool
    detail: str


class PoolProblemOut(BaseModel):
    pool: str
    health: str = Field(examples=["DEGRADED"])
    status: str = Field(description="what zpool status says is wrong")
    action: str = Field(description="what zpool status says to do")


class FillAlertOut(BaseModel):
    pool: str
    percent: int
    level: Literal["warning", "critical", "full"] = Field(
        description="80% warning, 90% critical, 95% full")


class HealthOut(BaseModel):
    """Health with a valid token (any role): everything the watcher's last check found."""

    status: Literal["ok", "degraded", "down", "starting"]
    components: dict[str, ComponentOut]
    in_sync: bool
    drift: int = Field(description="number of drift items; -1 when not known")
    checked_at: float = Field(description="unix time of the check this answer comes from "
                                          "(0: none yet)")
    age: float = Field(description="seconds since that check")
    started_at: float = Field(description="unix time the API finished restoring every "
                                          "export and LUN at start-up (0: still starting)")
    pools: list[PoolProblemOut] = Field(description="pools that are not ONLINE")
    alerts: list[FillAlertOut] = Field(description="pools 80/90/95% full")
    message: str = Field(description="what is wrong, in words ('' when ok)")
    cluster: ClusterRoleOut | None = Field(None, description="in an HA pair: this node's "
                                                             "role and its peer")


class ComponentStatusOut(BaseModel):
    ok: bool


class HealthSummaryOut(BaseModel):
    """Health without a token: status and codes only. Details (messages, pools, alerts,
    each component's text) can name hosts, pools and what a hook printed, so they need a
    token (HealthOut)."""

    status: Literal["ok", "degraded", "down", "starting"]
    components: dict[str, ComponentStatusOut]
    in_sync: bool
    checked_at: float = Field(description="unix time of the check this answer comes from "
                                          "(0: none yet)")
    age: float = Field(description="seconds since that check")
    started_at: float = Field(description="unix time the API finished restoring every "
                                          "export and LUN at start-up (0: still starting)")


class DriftItemOut(BaseModel):
    kind: str
    subject: str
    reason: str
    action: str = Field(default="", description="what repairs it: the reconcile itself, or "
                                                "what a person must do")


class DriftOut(BaseModel):
    in_sync: bool
    items: list[DriftItemOut]


class ReconcileOut(BaseModel):
    applied: list[str]
    errors: list[str]
