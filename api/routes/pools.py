"""/api/v1/pools: list, inspect, create, scrub, export, import."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import APIRouter

from api import convert, schemas
from api.deps import EngineDep, PrincipalDep
from api.fields import PoolPath
from api.routes.common import ERRORS, WaitQuery, job_response
from appliance.services.pools import DISK_ACTIONS, NEW_DISK_ACTIONS

router = APIRouter(prefix="/pools", tags=["pools"], responses=ERRORS)


@router.get("", response_model=list[schemas.PoolOut])
def list_pools(engine: EngineDep, _: PrincipalDep) -> list[schemas.PoolOut]:
    return [convert.pool_out(v) for v in engine.pools.list()]


@router.get("/importable", response_model=list[str])
def importable(engine: EngineDep, _: PrincipalDep) -> list[str]:
    return engine.pools.importable()


@router.get("/{name}", response_model=schemas.PoolOut)
def get_pool(name: PoolPath, engine: EngineDep, _: PrincipalDep) -> schemas.PoolOut:
    """Health, space, fragmentation, the vdev tree with error counters, last scan."""
    return convert.pool_out(engine.pools.get(name))


DISK_ACTION_TEXT = {
    "offline": "Takes a disk offline.", "online": "Brings an offline disk back.",
    "detach": "Detaches a disk from a mirror.",
    "replace": "Replaces a (failed) disk with an unused one; the pool resilvers.",
    "attach": "Attaches an unused disk to a disk, making or widening a mirror (resilver).",
}


def _member_operation(action: str) -> Callable[..., Awaitable[schemas.JobOut]]:
    async def disk_operation(name: PoolPath, body: schemas.DiskOperation, engine: EngineDep,
                             _: PrincipalDep, wait: WaitQuery = 0) -> schemas.JobOut:
        return await job_response(engine, lambda: engine.pools.disk(
            name, action, body.disk), wait)
    return disk_operation


def _replacement(action: str) -> Callable[..., Awaitable[schemas.JobOut]]:
    async def disk_replacement(name: PoolPath, body: schemas.DiskReplacement,
                               engine: EngineDep, _: PrincipalDep,
                               wait: WaitQuery = 0) -> schemas.JobOut:
        return await job_response(engine, lambda: engine.pools.disk(
            name, action, body.disk, body.new_disk, body.force), wait)
    return disk_replacement


# one operation per action, so each has the body it takes (replace and attach: new_disk)
for _action in DISK_ACTIONS:
    router.add_api_route(
        f"/{{name}}/disks/{_action}",
        _replacement(_action) if _action in NEW_DISK_ACTIONS else _member_operation(_action),
        methods=["POST"], status_code=202, response_model=schemas.JobOut,
        name=f"disk_{_action}", summary=f"Disk {_action}",
        description=f"{DISK_ACTION_TEXT[_action]} A job: it waits for the resilver and "
                    "reports its progress; GET /pools/{name} shows each disk's state.")


@router.patch("/{name}", response_model=schemas.PoolOut)
def patch_pool(name: PoolPath, body: schemas.PoolPatch, engine: EngineDep,
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
async def scrub(name: PoolPath, engine: EngineDep, _: PrincipalDep,
                wait: WaitQuery = 0) -> schemas.JobOut:
    return await job_response(engine, lambda: engine.pools.scrub(name), wait)


@router.post("/{name}/export", status_code=202, response_model=schemas.JobOut)
async def export(name: PoolPath, engine: EngineDep, _: PrincipalDep, wait: WaitQuery = 0,
                 force: bool = False) -> schemas.JobOut:
    """Stops serving the pool's datastores (needs force when it has any) and exports it."""
    return await job_response(engine, lambda: engine.pools.export(name, force=force), wait)


@router.post("/{name}/import", status_code=202, response_model=schemas.JobOut)
async def import_pool(name: PoolPath, engine: EngineDep, _: PrincipalDep, wait: WaitQuery = 0,
                      force: bool = False) -> schemas.JobOut:
    """Imports the pool, adopts the datastores its zds:* properties describe, serves them.

    A pool another system used last and did not export (an old system disk, another
    appliance) fails unless force=true: force it only when that system is off, as a pool
    imported by two systems at once is corrupted.
    """
    return await job_response(engine, lambda: engine.pools.import_(name, force=force), wait)
