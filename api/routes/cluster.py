"""/api/v1/cluster: the HA pair (docs/ha.md). Status, a planned failover, and the three
calls of the ZDS resource agent (ocf:zds:pool) on its own node: take, release, status.

Changes here work on either node (the guard's 503 for the node that does not hold a
pool does not apply): a failover is asked of pacemaker, which runs it where it must,
and the agent's calls are about this node by nature."""

from __future__ import annotations

from fastapi import APIRouter

from api import schemas
from api import schemas_cluster as sc
from api.deps import EngineDep, PrincipalDep
from api.fields import PoolPath
from api.routes.common import ERRORS, WaitQuery, job_response

router = APIRouter(prefix="/cluster", tags=["cluster"], responses=ERRORS)


@router.get("", response_model=sc.ClusterOut)
def cluster(engine: EngineDep, _: PrincipalDep) -> sc.ClusterOut:
    """Nodes (online, standby, unclean), which pool each holds, quorum, whether fencing
    is on, pacemaker's fencing history and failed operations, and this node's last
    takeover with its timing. ``configured: false`` on a single appliance."""
    return sc.cluster_out(engine.cluster.view())


@router.post("/failover", status_code=202, response_model=schemas.JobOut)
async def failover(body: sc.FailoverIn, engine: EngineDep, _: PrincipalDep,
                   wait: WaitQuery = 0) -> schemas.JobOut:
    """A planned move of a pool's group to the other node (admin). The job asks
    pacemaker to move it, waits until the pool runs there (stop here: exports and LUNs
    withdrawn, pool exported; start there: imported, adopted, served), then clears the
    move's pin. 409 on a single appliance, or when the target cannot take it."""
    return await job_response(engine, lambda: engine.cluster.failover(body.pool, body.node),
                              wait)


@router.get("/pools/{name}", response_model=sc.ClusterPoolStatusOut)
def pool_status(name: PoolPath, engine: EngineDep, _: PrincipalDep) -> sc.ClusterPoolStatusOut:
    """The resource agent's monitor: is the pool imported and served here (one
    ``zpool list``; daemons and drift as the watcher last saw them)."""
    return sc.pool_status_out(engine.cluster.pool_status(name))


@router.post("/pools/{name}/take", status_code=202, response_model=schemas.JobOut)
async def take(name: PoolPath, engine: EngineDep, _: PrincipalDep,
               wait: WaitQuery = 0) -> schemas.JobOut:
    """The resource agent's start (pacemaker fenced the other node first): import the
    pool (forced, cachefile=none; MMP's activity check refuses a pool still written),
    rebuild its datastores' records from their zds:* properties, and reconcile until
    nothing the reconcile can do is left. Only pacemaker should call it."""
    return await job_response(engine, lambda: engine.cluster.take(name), wait)


@router.post("/pools/{name}/release", status_code=202, response_model=schemas.JobOut)
async def release(name: PoolPath, engine: EngineDep, _: PrincipalDep,
                  wait: WaitQuery = 0) -> schemas.JobOut:
    """The resource agent's stop: withdraw every export, LUN and NVMe subsystem of the
    pool's datastores, export the pool, forget its records. Succeeds when the pool is
    not here. Only pacemaker should call it."""
    return await job_response(engine, lambda: engine.cluster.release(name), wait)
