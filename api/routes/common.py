"""Shared pieces of the routes: error responses, the ``wait`` parameter of job replies."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Query
from starlette.concurrency import run_in_threadpool

from api import convert, schemas
from appliance.engine import Engine
from appliance.jobs import Job

# "content" is explicit so a route whose own answer is HTML or an image still documents
# its errors as JSON
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": schemas.ErrorResponse, "description": text,
           "content": {"application/json": {}}}
    for code, text in [
        (400, "the body is not valid JSON"),
        (401, "missing or invalid token"), (403, "readonly token"),
        (404, "not found"), (409, "conflict: in use, name clash, no space"),
        (413, "the body is larger than the API takes (max_body)"),
        (422, "invalid input"),
        (429, "this token has too many requests in flight (max_per_token; Retry-After)"),
        (503, "ZFS, LIO or ganesha unavailable, or busy with another change or with too "
              "many requests (retry; Retry-After when busy with requests), or, in an HA "
              "pair, a change on the node that does not hold the pool (not_active: the "
              "detail names the node that does)"),
    ]
}

WaitQuery = Annotated[float, Query(
    ge=0, le=600, description="seconds to wait for the job to finish (at most 600); the "
                              "wait holds no server thread, only one of the token's "
                              "requests in flight (max_per_token)")]


async def job_response(engine: Engine, start: Callable[[], Job], wait: float) -> schemas.JobOut:
    """The job ``start`` makes (a service call: on a worker thread, as it may wait for the
    change lock), once finished or after ``wait`` seconds."""
    job = await run_in_threadpool(start)
    return convert.job_out(await finished(engine, job, wait))


async def finished(engine: Engine, job: Job, wait: float) -> Job:
    """``job`` once finished or after ``wait`` seconds; the wait holds no thread
    (:meth:`JobManager.wait_async`), so long-polls never starve other requests."""
    return await engine.jobs.wait_async(job.id, wait) if wait > 0 else job
