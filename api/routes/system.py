"""/api/v1/system: health (no token needed), version, drift, reconcile."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter, Response

from api import schemas
from api.deps import EngineDep, PrincipalDep
from api.routes.common import ERRORS

router = APIRouter(prefix="/system", tags=["system"], responses=ERRORS)


@router.get("/health", response_model=schemas.HealthOut)
def health(engine: EngineDep, response: Response) -> schemas.HealthOut:
    """Are ZFS, LIO and ganesha up and in sync with the records? 503 when ZFS is down."""
    h = engine.system.health()
    if h.status == "down":
        response.status_code = 503
    return schemas.HealthOut(**asdict(h))


@router.get("/version", response_model=dict[str, str])
def version(engine: EngineDep, _: PrincipalDep) -> dict[str, str]:
    return engine.system.version()


@router.get("/drift", response_model=schemas.DriftOut)
def drift(engine: EngineDep, _: PrincipalDep) -> schemas.DriftOut:
    """Desired state vs what is live in ZFS, LIO and ganesha; empty when in sync."""
    return schemas.DriftOut(**asdict(engine.system.drift()))


@router.post("/reconcile", response_model=schemas.ReconcileOut)
def reconcile(engine: EngineDep, _: PrincipalDep) -> schemas.ReconcileOut:
    report = engine.reconcile()
    return schemas.ReconcileOut(applied=[a.describe() for a in report.applied],
                                errors=report.errors)
