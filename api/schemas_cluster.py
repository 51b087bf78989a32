"""Bodies of /api/v1/cluster and health's ``cluster`` part (pydantic), and their
conversion from the engine's views. Imports nothing of api.schemas (which uses
:class:`ClusterRoleOut`), so the two modules do not import each other."""

from __future__ import annotations

from dataclasses import asdict

from pydantic import BaseModel, ConfigDict, Field

from api.fields import PoolName
from appliance.services.cluster import ClusterRole, ClusterView, PoolStatus


class ClusterRoleOut(BaseModel):
    """In an HA pair: this node and its peer (absent on a single appliance)."""

    node: str = Field(description="this node's name in the cluster")
    role: str = Field(description="active (holds a pool of the pair), standby, or "
                                  "unknown (pacemaker does not answer here)")
    peer: str
    peer_online: bool
    pools: list[str] = Field(description="the pair's pools this node holds")
    detail: str = ""


class ClusterNodeOut(BaseModel):
    name: str
    online: bool
    standby: bool
    unclean: bool = Field(description="lost and not fenced yet")
    is_dc: bool = Field(description="its controller decides for the cluster")
    pools: list[str] = Field(description="the pools whose group runs on it")


class ClusterPoolOut(BaseModel):
    pool: str
    group: str = Field(description="pacemaker's resource group of the pool")
    resource: str = Field(description="its ocf:zds:pool resource")
    node: str = Field(description="the node running it ('' when none does)")
    address: str = Field(description="the group's floating address (IPaddr2), if any")


class FenceEventOut(BaseModel):
    action: str = Field(description="reboot (what pacemaker asks; fence_scsi turns it "
                                    "into off), off, or on (unfencing)")
    target: str
    status: str = Field(description="success, failed or pending")
    delegate: str = Field(description="the node that ran the fence agent")
    origin: str
    completed: float | None = Field(description="unix time")


class TakeoverOut(BaseModel):
    pool: str
    finished: float = Field(description="unix time this node was serving the pool")
    seconds: dict[str, float] = Field(description="import (with the MMP activity "
                                                  "check), adopt, serve, total")
    fenced: str = Field(description="the node fenced before it ('' for a planned move)")
    fenced_at: float | None
    job: str = Field(description="the take job (GET /api/v1/jobs/{id})")


class ClusterOut(BaseModel):
    """The HA pair as pacemaker sees it from this node."""

    configured: bool = Field(description="false: a single appliance, nothing else is set")
    running: bool = Field(description="pacemaker answers on this node")
    node: str
    quorum: bool
    stonith_enabled: bool
    dc: str
    nodes: list[ClusterNodeOut]
    pools: list[ClusterPoolOut]
    fencing: list[FenceEventOut]
    failures: list[str] = Field(description="failed resource operations pacemaker keeps")
    last_takeover: TakeoverOut | None = Field(description="this node's last take of a "
                                                          "pool, with its timing")
    message: str


class FailoverIn(BaseModel):
    """A planned move of a pool's group."""

    model_config = ConfigDict(extra="forbid")

    pool: PoolName | None = Field(None, description="the pool to move (default: the "
                                                    "pair's only one)")
    node: str | None = Field(None, description="where to (default: the other node)")


class DriftItemOut(BaseModel):
    kind: str
    subject: str
    reason: str
    action: str


class ClusterPoolStatusOut(BaseModel):
    """The resource agent's monitor: is the pool served by this node?"""

    pool: str
    imported: bool
    health: str = Field(description="zpool's health ('' when not imported here)")
    ok: bool = Field(description="imported, able to serve, its daemons up")
    datastores: list[str]
    daemons_down: list[str]
    drift: list[DriftItemOut] = Field(description="the pool's drift as the watcher last "
                                                  "saw it")
    message: str


def role_out(r: ClusterRole) -> ClusterRoleOut:
    return ClusterRoleOut(**asdict(r))


def cluster_out(v: ClusterView) -> ClusterOut:
    return ClusterOut.model_validate(asdict(v))


def pool_status_out(s: PoolStatus) -> ClusterPoolStatusOut:
    return ClusterPoolStatusOut.model_validate(asdict(s))
