"""What the replication use cases take and answer: requests as sent (not yet
validated) and the views the API renders."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from appliance.model import ChapSettings
from appliance.replication.model import ReplicationRecord
from appliance.services.datastores import DatastoreView


@dataclass(frozen=True)
class TargetRequest:
    host: str
    dataset: str
    port: int = 22
    user: str = "root"
    host_key: str | None = None  # pin this key; None: keep what is pinned / pin on contact


@dataclass(frozen=True)
class ReplicationRequest:
    """The body of ``PUT /replications/{name}`` as sent (not yet validated)."""

    datastore: str
    target: TargetRequest
    interval: int | str | None = None
    after_snapshot_policy: bool = False
    take_snapshot: bool = True
    raw: bool = False
    bandwidth_limit: int | str | None = None
    enabled: bool = True
    transport: str = "ssh"


@dataclass(frozen=True)
class OutgoingView:
    record: ReplicationRecord
    host_key: str | None  # pinned for the target (None before first contact)
    lag: float | None  # seconds since the newest snapshot the target holds was taken
    rate: float  # bytes/s of the last successful run
    next_run: float | None  # unix time of the next scheduled run


@dataclass(frozen=True)
class IncomingView:
    name: str
    dataset: str
    pool: str
    source: str  # "source-host/datastore"
    datastore: str  # the source's datastore name
    protocol: str
    snapshots: int
    newest_snapshot: str | None
    newest_created: int | None
    lag: float | None
    resume_pending: bool
    used: int
    referenced: int


@dataclass(frozen=True)
class ReplicationView:
    name: str
    outgoing: OutgoingView | None
    incoming: IncomingView | None


@dataclass(frozen=True)
class CheckView:
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


@dataclass(frozen=True)
class PromoteRequest:
    """``POST /replications/{name}/promote``. Access (NFS clients, initiators, initiator
    groups) is what the request gives; a None field is empty, or with ``keep_access`` the
    source's, as it travelled in the replica's ``zds:access`` (which a source sets as it
    likes, so it is never taken unasked)."""

    name: str | None = None
    identity: Literal["new", "keep"] = "new"
    nfs_path: Literal["source", "local"] | None = None
    nfs_clients: list[dict[str, str]] | None = None
    initiators: list[str] | None = None
    initiator_groups: list[str] | None = None
    chap: ChapSettings | None = None
    keep_access: bool = False
    nvme_hosts: list[str] | None = None
    nvme_initiator_groups: list[str] | None = None


@dataclass(frozen=True)
class PromoteResult:
    view: DatastoreView
    notes: list[str]


@dataclass(frozen=True)
class Identity:
    hostname: str
    public_key: str
    host_keys: list[str]
