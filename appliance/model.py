"""Desired state: what the admin asked for, as frozen dataclasses.

These are recorded (SQLite + ``zds:*`` ZFS user properties) before anything is changed on
the host; the reconciler derives what each transport serves (LIO, ganesha...) from them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

Profile = Literal["vmware", "kvm"]
Access = Literal["rw", "ro"]
DatastoreState = Literal["creating", "ready", "deleting", "error"]

PROFILES: tuple[Profile, ...] = ("vmware", "kvm")


# The ZFS properties a datastore's view and the reconciler need: read for every
# datastore in one `zfs get -r` (far cheaper than `all` at 1,000 datastores).
DATASTORE_SETTINGS: tuple[str, ...] = (
    "compression", "recordsize", "volblocksize", "volsize", "sync", "logbias", "atime",
    "xattr", "acltype", "refquota", "refreservation", "primarycache", "secondarycache",
    "checksum", "dedup", "readonly", "volmode", "mountpoint",
)
DATASTORE_USER_PROPERTIES: tuple[str, ...] = (
    "zds:managed", "zds:name", "zds:protocol", "zds:profile", "zds:thin", "zds:size",
    "zds:access", "zds:export_id", "zds:iqn", "zds:serial", "zds:labels", "zds:nqn",
    "zds:overrides",
    "zds:replication",  # set on a replica: not a datastore until promoted
)
DATASTORE_PROPERTIES: tuple[str, ...] = (
    "type", "used", "available", "referenced", "compressratio", "mounted", "canmount",
    "origin", "creation", *DATASTORE_SETTINGS, *DATASTORE_USER_PROPERTIES,
)
# What the datastore list shows: native properties only (one `zfs list -o` line per
# dataset) with the snapshot count ZFS keeps below POOL/datastores' snapshot_limit.
VIEW_PROPERTIES: tuple[str, ...] = (
    "type", "used", "available", "referenced", "compressratio", "mounted", "canmount",
    *DATASTORE_SETTINGS, "snapshot_count", "snapshot_limit",
)
# Set on POOL/datastores so ZFS keeps each dataset's snapshot_count (it counts only
# below a limit); far beyond anything reached, and root is never held to it anyway.
SNAPSHOT_COUNT_LIMIT = 1_000_000_000


@dataclass(frozen=True)
class NfsClient:
    match: str  # IP, CIDR, hostname or '*'
    access: Access = "rw"


@dataclass(frozen=True)
class ChapSettings:
    user: str
    secret: str
    mutual_user: str | None = None
    mutual_secret: str | None = None


@dataclass(frozen=True)
class IscsiAccess:
    initiators: tuple[str, ...] = ()
    initiator_groups: tuple[str, ...] = ()
    chap: ChapSettings | None = None


@dataclass(frozen=True)
class NvmeAccess:
    """Who may connect to an NVMe/TCP datastore's subsystem: host NQNs, the NQNs of
    initiator groups, or (only when asked) any host."""

    hosts: tuple[str, ...] = ()
    initiator_groups: tuple[str, ...] = ()
    allow_any_host: bool = False


@dataclass(frozen=True)
class Overrides:
    sync: str | None = None
    compression: str | None = None
    recordsize: int | None = None  # NFS datasets
    volblocksize: int | None = None  # zvols; fixed at creation


@dataclass(frozen=True)
class DatastoreSpec:
    """What ``PUT /datastores/{name}`` asks for (validated)."""

    name: str
    pool: str
    protocol: str  # one of appliance.transports.registry.protocols(): its transport serves it
    size: int
    thin: bool = True
    profile: Profile = "vmware"
    nfs_clients: tuple[NfsClient, ...] = ()
    iscsi: IscsiAccess = field(default_factory=IscsiAccess)
    overrides: Overrides = field(default_factory=Overrides)
    # (key, value) pairs, sorted: what snapshot policies select datastores by
    labels: tuple[tuple[str, str], ...] = ()
    nvme: NvmeAccess = field(default_factory=NvmeAccess)

    @property
    def initiator_groups(self) -> tuple[str, ...]:
        """Every initiator group it names, whatever its protocol takes from them."""
        return tuple(sorted({*self.iscsi.initiator_groups, *self.nvme.initiator_groups}))

    @property
    def dataset(self) -> str:
        return datastore_dataset(self.pool, self.name)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> DatastoreSpec:
        return spec_from_dict(json.loads(text))


def datastore_dataset(pool: str, name: str) -> str:
    return f"{pool}/{DATASTORE_PARENT}/{name}"


DATASTORE_PARENT = "datastores"
# Where probes make their scratch datasets and zvols: POOL/zds-probes/DATASTORE-PROBEID.
PROBE_SCRATCH_PARENT = "zds-probes"
# Every child of a pool named "zds-*" is ZDS's own too: probe scratch (zds-probes, see
# PROBE_SCRATCH_PARENT) and the contract checks' zds-contract and zds-ct-send. With the
# pool itself and POOL/datastores, nothing else may write there.
OWN_PREFIX = "zds-"


def zds_dataset(dataset: str) -> str | None:
    """The dataset ZDS manages that ``dataset`` is or lies in: the pool itself,
    ``POOL/datastores`` or a ``POOL/zds-*`` dataset; None when it is none of those."""
    parts = dataset.split("/")
    if len(parts) == 1:
        return dataset
    if parts[1] == DATASTORE_PARENT or parts[1].startswith(OWN_PREFIX):
        return "/".join(parts[:2])
    return None


def spec_from_dict(d: dict[str, Any]) -> DatastoreSpec:
    iscsi = d.get("iscsi") or {}
    chap = iscsi.get("chap")
    nvme = d.get("nvme") or {}
    return DatastoreSpec(
        name=d["name"],
        pool=d["pool"],
        protocol=d["protocol"],
        size=int(d["size"]),
        thin=bool(d.get("thin", True)),
        profile=d.get("profile", "vmware"),
        nfs_clients=tuple(NfsClient(**c) for c in d.get("nfs_clients", ())),
        iscsi=IscsiAccess(
            initiators=tuple(iscsi.get("initiators", ())),
            initiator_groups=tuple(iscsi.get("initiator_groups", ())),
            chap=ChapSettings(**chap) if chap else None,
        ),
        overrides=Overrides(**(d.get("overrides") or {})),
        labels=tuple((str(k), str(v)) for k, v in d.get("labels") or ()),
        nvme=NvmeAccess(hosts=tuple(nvme.get("hosts", ())),
                        initiator_groups=tuple(nvme.get("initiator_groups", ())),
                        allow_any_host=bool(nvme.get("allow_any_host", False))),
    )


@dataclass(frozen=True)
class DatastoreRecord:
    """A datastore as recorded: the spec plus identities that never change."""

    spec: DatastoreSpec
    state: DatastoreState
    export_id: int | None = None  # NFS: ganesha Export_Id
    iqn: str | None = None  # iSCSI target IQN
    serial: str | None = None  # a block device's serial (iSCSI: the NAA WWN derives from
    # it; NVMe/TCP: the namespace UUID, and from it the subsystem serial and NGUID)
    nqn: str | None = None  # NVMe/TCP subsystem NQN
    origin: str | None = None  # snapshot this datastore was cloned from
    error: str | None = None
    created: float = 0.0
    updated: float = 0.0

    @property
    def name(self) -> str:
        return self.spec.name

    def with_state(self, state: DatastoreState, error: str | None = None) -> DatastoreRecord:
        return replace(self, state=state, error=error)


@dataclass(frozen=True)
class InitiatorGroup:
    """Hosts by their initiator names: iSCSI IQNs and NVMe host NQNs (a host may have
    one of each); each protocol takes the names it speaks."""

    name: str
    initiators: tuple[str, ...]
    created: float = 0.0
    updated: float = 0.0

    @property
    def iqns(self) -> tuple[str, ...]:
        """The iSCSI names (an IQN, EUI or NAA name never starts with ``nqn.``)."""
        return tuple(i for i in self.initiators if not i.startswith("nqn."))

    @property
    def nqns(self) -> tuple[str, ...]:
        """The NVMe host NQNs."""
        return tuple(i for i in self.initiators if i.startswith("nqn."))


def naa_wwn(serial: str) -> str:
    """The NAA-6 WWN LIO derives from a unit serial: LIO's IEEE company id 0x001405
    followed by the serial's first 25 hex digits (non-hex characters skipped)."""
    digits = "".join(c for c in serial.lower() if c in "0123456789abcdef")[:25]
    return "naa.6001405" + digits.ljust(25, "0")
