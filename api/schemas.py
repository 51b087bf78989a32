"""Request and response bodies of the REST API (pydantic), with examples for OpenAPI.

Request bodies state every rule the engine checks (api/fields.py: patterns, lengths,
bounds); rules between fields that JSON Schema can say (one of two fields, a section
only for some protocols) are in the model's schema (``json_schema_extra``) and enforced
by the engine. What it cannot say depends on the appliance's state (a name that must
exist, a disk listed in two vdevs, the protocol of a clone's source) and is refused as
such: 404 or 409, never 422 (tests/fuzz holds both directions).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from api.fields import (
    ChapSecret,
    ChapUser,
    Compression,
    DatastoreSize,
    DevicePath,
    InitiatorName,
    Int,
    Iqn,
    Labels,
    Name,
    NfsClientMatch,
    Nqn,
    PoolName,
    Recordsize,
    SnapshotName,
    SyncName,
    VdevSize,
    Volblocksize,
)
from api.schemas_cluster import ClusterRoleOut
from appliance.services.pools import MIN_DEVICES, SPARSE_DEFAULT_COUNT, SPARSE_FILES
from appliance.transports.registry import TRANSPORT_TYPES, probe_targets, protocols

# The values come from the transport registry, so a new protocol needs no change here;
# pydantic and OpenAPI see an enum of them, mypy (which cannot build one) sees a str.
if TYPE_CHECKING:
    ProtocolName = str
    ProbeTargetName = str
else:
    ProtocolName = Literal[protocols()]
    ProbeTargetName = Literal[("local", *probe_targets())]


class Strict(BaseModel):
    """A request body: unknown fields are refused; numbers and booleans are strict
    (``0`` is not ``false``, ``"5"`` is not ``5``)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class ErrorBody(BaseModel):
    code: str = Field(examples=["conflict"])
    message: str = Field(examples=["datastore vmfs01 has initiators logged in: iqn..."])
    detail: dict[str, Any] = Field(default_factory=dict)


class ErrorResponse(BaseModel):
    error: ErrorBody


# --- datastores ---------------------------------------------------------------------

class NfsClientBody(Strict):
    match: NfsClientMatch = Field(examples=["192.0.2.0/24"])
    access: Literal["rw", "ro"] = "rw"


class NfsClientOut(BaseModel):
    match: str = Field(description="IP, CIDR network, hostname or *")
    access: Literal["rw", "ro"]


class Section(Strict):
    """A body section of one kind of access: which request fields (the engine's, as the
    transports name them in ``access_fields``) its fields become."""

    request_fields: ClassVar[dict[str, str]] = {}


class NfsAccessBody(Section):
    request_fields: ClassVar[dict[str, str]] = {"clients": "nfs_clients"}

    clients: list[NfsClientBody] = Field(
        default_factory=list, description="each client once (after normalisation: "
        "192.0.2.1/24 and 192.0.2.0/24 are the same network, host names any case)")


class ChapBody(Strict):
    model_config = ConfigDict(json_schema_extra={"anyOf": [  # mutual CHAP: both or none
        {"properties": {"mutual_user": {"type": "null"}, "mutual_secret": {"type": "null"}}},
        {"required": ["mutual_user", "mutual_secret"],
         "properties": {"mutual_user": {"type": "string"},
                        "mutual_secret": {"type": "string"}}}]})

    user: ChapUser = Field(examples=["esxi-cluster"])
    secret: ChapSecret = Field(examples=["s3cret-s3cret"])
    mutual_user: ChapUser | None = Field(default=None, description="with mutual_secret, "
                                         "or neither")
    mutual_secret: ChapSecret | None = Field(default=None, description="with mutual_user, "
                                             "or neither; not the same as secret")


class IscsiAccessBody(Section):
    request_fields: ClassVar[dict[str, str]] = {
        "initiators": "initiators", "initiator_groups": "initiator_groups", "chap": "chap"}

    initiators: list[Iqn] = Field(default_factory=list,
                                  examples=[["iqn.1998-01.com.vmware:esxi01-4f2a"]])
    initiator_groups: list[Name] = Field(default_factory=list, examples=[["esxi-cluster"]],
                                         description="initiator groups that exist")
    chap: ChapBody | None = None


class DhchapBody(Strict):
    """DH-HMAC-CHAP secrets (``DHHC-1:...``). Always refused (422 ``unsupported``): the
    appliance's kernel has no NVMe target authentication (CONFIG_NVME_TARGET_AUTH)."""

    host_secret: str | None = None
    controller_secret: str | None = None


class NvmeAccessBody(Section):
    """Which hosts may connect: hosts and initiator groups, or any host."""

    request_fields: ClassVar[dict[str, str]] = {
        "hosts": "nvme_hosts", "initiator_groups": "nvme_initiator_groups",
        "allow_any_host": "nvme_allow_any_host", "dhchap": "nvme_dhchap"}
    # allow_any_host admits every host: it comes without hosts and groups
    model_config = ConfigDict(json_schema_extra={"anyOf": [
        {"properties": {"allow_any_host": {"const": False}}},
        {"properties": {"hosts": {"maxItems": 0}, "initiator_groups": {"maxItems": 0}}}]})

    hosts: list[Nqn] = Field(
        default_factory=list, description="host NQNs allowed to connect (/etc/nvme/hostnqn "
        "on Linux)", examples=[["nqn.2014-08.org.nvmexpress:uuid:"
                                "5b1e0c2a-7d4f-4e8b-9a61-0c3f2d8e7b14"]])
    initiator_groups: list[Name] = Field(
        default_factory=list, description="initiator groups that exist, whose host NQNs "
        "are allowed", examples=[["kvm-cluster"]])
    allow_any_host: bool = Field(default=False, description="any host reaching the port may "
                                 "connect (attr_allow_any_host); without hosts and groups")
    # published as null only: the engine refuses any secrets with a message saying why
    dhchap: Annotated[DhchapBody | None, WithJsonSchema({"type": "null"})] = Field(
        default=None, description="null or left out: this appliance's kernel has no NVMe "
        "target authentication (DH-HMAC-CHAP); secrets are refused (422 unsupported)")


class OverridesBody(Strict):
    sync: SyncName | None = None
    compression: Compression | None = Field(default=None, examples=["zstd"])
    recordsize: Recordsize | None = Field(
        default=None, description="file-system datastores (NFS) only", examples=["128K"])
    volblocksize: Volblocksize | None = Field(
        default=None, description="zvol datastores (iSCSI) only, fixed at creation",
        examples=["16K"])


class OverridesOut(BaseModel):
    sync: str | None = None
    compression: str | None = None
    recordsize: int | str | None = None
    volblocksize: int | str | None = None


def _empty(model: type[BaseModel], field: str) -> dict[str, Any]:
    """The JSON Schema of ``field`` of ``model`` left out, as the engine reads it (an
    empty list, null, false: nothing given)."""
    default = model.model_fields[field].get_default(call_default_factory=True)
    if isinstance(default, list):
        return {"maxItems": 0}
    if default is None:
        return {"type": "null"}
    return {"const": default}


def protocol_rules(body: type[BaseModel]) -> list[dict[str, Any]]:
    """If-then rules for ``body``'s sections and overrides, from the transport
    registry: a protocol takes its own transport's access fields and its storage kind's
    block size, and the engine refuses the others' (422)."""
    rules: list[dict[str, Any]] = []
    sections = {name: f.annotation for name, f in body.model_fields.items()}
    for t in TRANSPORT_TYPES:
        when = {"properties": {"protocol": {"enum": list(t.protocols)}},
                "required": ["protocol"]}
        then: dict[str, Any] = {}
        for name, annotation in sections.items():
            model = next((a for a in getattr(annotation, "__args__", ())
                          if isinstance(a, type) and issubclass(a, Section)), None)
            if model is None:
                continue
            foreign = {f: _empty(model, f) for f, request in model.request_fields.items()
                       if request not in t.access_fields}
            if foreign:
                then[name] = {"anyOf": [{"type": "null"}, {"properties": foreign}]}
        if "overrides" in sections:
            own = t.storage.block_property
            others = {o.storage.block_property for o in TRANSPORT_TYPES} - {own}
            if others:
                then["overrides"] = {"anyOf": [{"type": "null"}, {"properties": {
                    p: {"type": "null"} for p in sorted(others)}}]}
        if then:
            rules.append({"if": when, "then": {"properties": then}})
    return rules


class DatastorePut(Strict):
    """Create or update (idempotent). Only growing, access and overrides may change.
    A protocol takes its own section (nfs: nfs3 and nfs41; iscsi: iscsi) and its storage
    kind's block size (recordsize: file systems; volblocksize: zvols); the others' are
    refused."""

    model_config = ConfigDict(json_schema_extra=lambda schema: schema.update({
        "examples": [
            {"protocol": "nfs3", "size": "500G", "profile": "vmware",
             "nfs": {"clients": [{"match": "192.0.2.0/24", "access": "rw"}]}},
            {"protocol": "iscsi", "size": "1T", "thin": True, "profile": "vmware",
             "iscsi": {"initiators": ["iqn.1998-01.com.vmware:esxi01-4f2a"]}},
        ],
        "allOf": protocol_rules(DatastorePut)}))

    protocol: ProtocolName
    size: DatastoreSize = Field(description="bytes (at least 64M), or a number with K, M, "
                                "G, T or P: 100G, 1.5T (binary units)")
    pool: PoolName | None = Field(default=None, description="default: the only pool (422 "
                                  "when there are several and none is named)")
    thin: bool = True
    profile: Literal["vmware", "kvm"] = "vmware"
    nfs: NfsAccessBody | None = None
    iscsi: IscsiAccessBody | None = None
    nvme: NvmeAccessBody | None = None
    overrides: OverridesBody | None = None
    labels: Labels | None = Field(
        default=None, description="key: value pairs snapshot policies select datastores by",
        examples=[{"protect": "gold"}])


class CloneBody(Strict):
    """A new datastore from a snapshot: its protocol is the source's, so only the
    source's section may be given (another is refused, 409: it is the source's state)."""

    name: Name = Field(examples=["vmfs01-test"])
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
    clients: list[NfsClientOut]


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
    overrides: OverridesOut = Field(
        default_factory=OverridesOut,
        description="the overrides the last PUT asked for (null: the profile's default). A "
                    "PUT is the whole desired state: send labels and overrides back to keep "
                    "them")
    protection: ProtectionOut | None = None
    warnings: list[str] = Field(default_factory=list,
                                description="said in the answer to the PUT that caused it, "
                                            "e.g. the pool is overcommitted")


# --- snapshots ----------------------------------------------------------------------

class SnapshotCreate(Strict):
    name: SnapshotName = Field(examples=["before-upgrade"])


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
    initiators: list[InitiatorName] = Field(
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

def _least(kind: str) -> int:
    return MIN_DEVICES["raidz1" if kind == "raidz" else kind]


def _disk_counts(field: str, kinds: tuple[str, ...], exact: str | None) -> list[dict[str, Any]]:
    """If-then rules: a vdev of each kind has at least as many disks as ZFS needs
    (``exact``: that kind takes exactly one)."""
    rules = []
    for kind in kinds:
        bounds: dict[str, Any] = ({"minItems": 1, "maxItems": 1} if kind == exact
                                  else {"minItems": _least(kind)})
        then: dict[str, Any] = {"properties": {field: bounds}}
        if field == "count":
            then = {"properties": {field: {"minimum": _least(kind)}}}
            if _least(kind) > SPARSE_DEFAULT_COUNT:  # the default count is too few
                then["required"] = [field]
        # "required": an if without it holds when type is left out
        rules.append({"if": {"required": ["type"], "properties": {"type": {"const": kind}}},
                      "then": then})
    return rules


VDEV_TYPES = ("disk", "mirror", "raidz", "raidz1", "raidz2", "raidz3")
SPARSE_TYPES = ("disk", "mirror", "raidz1", "raidz2", "raidz3")


class VdevBody(Strict):
    """A vdev: a disk vdev takes one disk (list several for a stripe), a mirror or raidz1
    at least 2, raidz2 3, raidz3 4. No disk may be listed twice in a pool."""

    model_config = ConfigDict(json_schema_extra=lambda schema: schema.update(
        allOf=_disk_counts("disks", VDEV_TYPES, exact="disk")))

    type: Literal["disk", "mirror", "raidz", "raidz1", "raidz2", "raidz3"]
    disks: list[DevicePath] = Field(json_schema_extra={"uniqueItems": True},
                                    examples=[["/dev/disk/by-id/virtio-zdsdata0",
                                               "/dev/disk/by-id/virtio-zdsdata1"]])


class SparseFilesBody(Strict):
    """Sparse files for a demo pool: as many as its type needs (mirror: 2...)."""

    model_config = ConfigDict(json_schema_extra=lambda schema: schema.update(
        allOf=_disk_counts("count", SPARSE_TYPES, exact=None)))

    count: Int = Field(default=SPARSE_DEFAULT_COUNT, ge=SPARSE_FILES[0], le=SPARSE_FILES[1])
    size: VdevSize = "8G"
    type: Literal["disk", "mirror", "raidz1", "raidz2", "raidz3"] | None = Field(
        default=None, description="default: mirror for 2 files or more, else disk")


class PoolCreate(Strict):
    """From disks (``vdevs``, at least one, with ``log``, ``cache`` and ``spares``) or
    from sparse files (``sparse_files`` alone: a demo pool). A disk listed in two places
    of the pool is a conflict (409; JSON Schema can say it within one list only)."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"name": "tank", "vdevs": [{"type": "mirror", "disks": [
            "/dev/disk/by-id/virtio-zdsdata0", "/dev/disk/by-id/virtio-zdsdata1"]}],
         "log": [{"type": "disk", "disks": ["/dev/disk/by-id/nvme-slog0"]}]},
        {"name": "demo", "sparse_files": {"count": 2, "size": "8G", "type": "mirror"}},
    ], "oneOf": [
        {"required": ["sparse_files"], "properties": {
            "sparse_files": {"type": "object"}, "vdevs": {"maxItems": 0},
            "log": {"maxItems": 0}, "cache": {"maxItems": 0}, "spares": {"maxItems": 0}}},
        {"required": ["vdevs"], "properties": {"vdevs": {"minItems": 1},
                                               "sparse_files": {"type": "null"}}},
    ]})

    name: PoolName
    vdevs: list[VdevBody] = Field(default_factory=list)
    log: list[VdevBody] = Field(default_factory=list, description="SLOG")
    cache: list[DevicePath] = Field(default_factory=list, description="L2ARC devices",
                                    json_schema_extra={"uniqueItems": True})
    spares: list[DevicePath] = Field(default_factory=list,
                                     json_schema_extra={"uniqueItems": True})
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
    """offline, online, detach: one of the pool's disks."""

    disk: str = Field(description="a pool disk as GET /pools/{name} shows it (a name, or the "
                                  "number ZFS shows for a disk that is gone), or its path",
                      examples=["virtio-zdsdata1"])


class DiskReplacement(DiskOperation):
    """replace, attach: one of the pool's disks and an unused disk."""

    new_disk: DevicePath = Field(description="the path of an unused disk",
                                 examples=["/dev/disk/by-id/virtio-zdsdata2"])
    force: bool = Field(default=False, description="zpool's -f")


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
