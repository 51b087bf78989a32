"""/api/v1/system: health (no token needed: then status and codes only), version, drift,
reconcile."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict

from fastapi import APIRouter, Request, Response

from api import convert, schemas
from api.deps import EngineDep, PrincipalDep
from api.routes.common import ERRORS

router = APIRouter(prefix="/system", tags=["system"], responses=ERRORS)

# Health has threads of its own. On the shared worker threads it waited behind a burst
# of requests: under emulation, 100 PUTs sent together (each takes worker threads for
# its checks) held one health answer 16 s while the event loop still answered in 3 s
# (docs/performance.md).
_HEALTH_POOL = ThreadPoolExecutor(2, thread_name_prefix="zds-health")


@router.get("/health", response_model=schemas.HealthOut | schemas.HealthSummaryOut,
            responses={
                200: {"description": "ok or degraded: the full answer (HealthOut) with a "
                                     "valid token, status and codes only "
                                     "(HealthSummaryOut) without one"},
                503: {"model": schemas.HealthOut | schemas.HealthSummaryOut,
                      "description": "starting, or ZFS is down (the same two shapes)"}})
async def health(engine: EngineDep, request: Request,
                 response: Response) -> schemas.HealthOut | schemas.HealthSummaryOut:
    """Are ZFS, LIO and ganesha up and in sync with the records? Answered from the
    watcher's last check (``checked_at``, ``age``): it runs no command, so it costs the
    same with any number of datastores. 200 for ok and degraded (a pool that is not
    ONLINE, a daemon down, drift: ``message`` says what), 503 while the API is starting
    or when ZFS is down.

    No token needed: without one (or with one that is not valid) the answer is status
    and codes only; with a valid token of any role it has every detail (``message``,
    ``pools``, ``alerts``, each component's ``detail``), which can name hosts and pools
    and carry what a snapshot hook printed."""
    h = await asyncio.get_running_loop().run_in_executor(_HEALTH_POOL, engine.system.health)
    if h.status in ("down", "starting"):
        response.status_code = 503
    if getattr(request.state, "principal", None) is None:  # the guard's verdict
        return convert.health_summary_out(h)
    return convert.health_out(h)


@router.get("/version", response_model=dict[str, str])
def version(engine: EngineDep, _: PrincipalDep) -> dict[str, str]:
    return engine.system.version()


@router.get("/drift", response_model=schemas.DriftOut)
def drift(engine: EngineDep, _: PrincipalDep) -> schemas.DriftOut:
    """Desired state vs what is live in ZFS, LIO and ganesha; empty when in sync."""
    return schemas.DriftOut(**asdict(engine.system.drift()))


@router.post("/reconcile", response_model=schemas.ReconcileOut)
def reconcile(engine: EngineDep, _: PrincipalDep) -> schemas.ReconcileOut:
    report = engine.reconciler.full()
    return schemas.ReconcileOut(applied=[a.describe() for a in report.applied],
                                errors=report.errors)
