"""/api/v1/jobs: long work (pool create, scrub, destroys, probes) as pollable jobs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from api import convert, schemas
from api.deps import EngineDep, PrincipalDep
from api.routes.common import ERRORS, WaitQuery

router = APIRouter(prefix="/jobs", tags=["jobs"], responses=ERRORS)


@router.get("", response_model=list[schemas.JobOut])
def list_jobs(engine: EngineDep, _: PrincipalDep, state: str | None = None,
              kind: str | None = None,
              limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> list[schemas.JobOut]:
    return [convert.job_out(j) for j in engine.jobs.list(state=state, kind=kind, limit=limit)]


@router.get("/{job_id}", response_model=schemas.JobOut)
async def get_job(job_id: str, engine: EngineDep, _: PrincipalDep,
                  wait: WaitQuery = 0) -> schemas.JobOut:
    """With ``wait``, answers when the job finishes or the wait is over (a long-poll that
    holds no server thread)."""
    return convert.job_out(await engine.jobs.wait_async(job_id, wait))


@router.post("/{job_id}/cancel", response_model=schemas.JobOut)
def cancel_job(job_id: str, engine: EngineDep, _: PrincipalDep) -> schemas.JobOut:
    return convert.job_out(engine.jobs.cancel(job_id))
