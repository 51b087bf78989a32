"""/api/v1/pools: list, inspect, create, scrub, export, import."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter

from api import convert, schemas
from api.deps import EngineDep, PrincipalDep
from api.routes.common import ERRORS, WaitQuery, job_response

router = APIRouter(prefix="/pools", tags=["pools"], responses=ERRORS)


@router.get("", response_model=list[schemas.PoolOut])
def list_pools(engine: EngineDep, _: PrincipalDep) -> list[schemas.PoolOut]:
    return [convert.pool_out(v) for v in engine.pools.list()]


@router.get("/importable", response_model=list[str])
def importable(engine: EngineDep, _: PrincipalDep) -> list[str]:
    return engine.pools.importable()


@router.get("/{name}", response_model=schemas.PoolOut)
def get_pool(name: str, engine: EngineDep, _: PrincipalDep) -> schemas.PoolOut:
    """Health, space, fragmentation, the vdev tree with error counters, last scan."""
    return convert.pool_out(engine.pools.get(name))


@router.post("/{name}/disks/{action}", status_code=202, response_model=schemas.JobOut)
async def disk_operation(name: str, action: Literal["offline", "online", "replace",
                                                    "attach", "detach"],
                         body: schemas.DiskOperation, engine: EngineDep, _: PrincipalDep,
                         wait: WaitQuery = 0) -> schemas.JobOut:
    """Take a disk offline or online, replace a failed disk (resilver), attach a disk to
    make a mirror, detach one from a mirror. The job waits for the resilver and reports
    its progress; GET /pools/{name} shows each disk's state."""
    return await job_response(engine, lambda: engine.pools.disk(
        name, action, body.disk, body.new_disk, body.force), wait)


@router.patch("/{name}", response_model=schemas.PoolOut)
def patch_pool(name: str, body: schemas.PoolPatch, engine: EngineDep,
               _: PrincipalDep) -> schemas.PoolOut:
    """Pool settings ZDS keeps with the pool (``zds:*`` properties): the overcommit
    limit of its thin datastores. 409 below what its datastores already promise."""
    return convert.pool_out(engine.pools.set_overcommit(name, body.overcommit))


@router.post("", status_code=202, response_model=schemas.JobOut)
async def create_pool(body: schemas.PoolCreate, engine: EngineDep, _: PrincipalDep,
                      wait: WaitQuery = 0) -> schemas.JobOut:
    return await job_response(engine, lambda: engine.pools.create(convert.pool_request(body)),
                              wait)


@router.post("/{name}/scrub", status_code=202, response_model=schemas.JobOut)
async def scrub(name: str, engine: EngineDep, _: PrincipalDep,
                wait: WaitQuery = 0) -> schemas.JobOut:
    return await job_response(engine, lambda: engine.pools.scrub(name), wait)


@router.post("/{name}/export", status_code=202, response_model=schemas.JobOut)
async def export(name: str, engine: EngineDep, _: PrincipalDep, wait: WaitQuery = 0,
                 force: bool = False) -> schemas.JobOut:
    """Stops serving the pool's datastores (needs force when it has any) and exports it."""
    return await job_response(engine, lambda: engine.pools.export(name, force=force), wait)


@router.post("/{name}/import", status_code=202, response_model=schemas.JobOut)
async def import_pool(name: str, engine: EngineDep, _: PrincipalDep, wait: WaitQuery = 0,
                      force: bool = False) -> schemas.JobOut:
    """Imports the pool, adopts the datastores its zds:* properties describe, serves them.

    A pool another system used last and did not export (an old system disk, another
    appliance) fails unless force=true: force it only when that system is off, as a pool
    imported by two systems at once is corrupted.
    """
    return await job_response(engine, lambda: engine.pools.import_(name, force=force), wait)
