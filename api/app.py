"""The FastAPI application: routes under /api/v1, engine errors as JSON bodies."""

from __future__ import annotations

import importlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from api.deps import authorize
from api.routes import datastores, groups, jobs, policies, pools, system
from appliance import __version__
from appliance.engine import Engine
from appliance.errors import ZdsError

log = logging.getLogger(__name__)

DESCRIPTION = """
ZDS turns ZFS pools into VM datastores for VMware ESXi and KVM: NFS exports (nfs-ganesha)
and iSCSI LUNs (LIO), provisioned here, with built-in performance probes.

Every endpoint but `GET /api/v1/system/health` needs `Authorization: Bearer <token>`
(`zds token create --role admin|readonly`); readonly tokens may only GET.
Errors are `{"error": {"code", "message", "detail"}}` with 401/403/404/409/422/503.
Long work answers 202 with a job: poll `GET /api/v1/jobs/{id}?wait=30`.
"""


def create_app(engine: Engine, *, start: bool = True) -> FastAPI:
    """The API over ``engine``; with ``start`` the engine reconciles at start-up."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if start:
            # in the background: health answers "starting" meanwhile, and a pool with
            # thousands of datastores does not keep the API from answering at all
            engine.start_background()
        yield

    app = FastAPI(title="ZDS — ZFS Datastore Server", version=__version__,
                  description=DESCRIPTION, lifespan=lifespan)
    app.state.engine = engine

    @app.exception_handler(ZdsError)
    async def zds_error(_: Request, exc: ZdsError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return JSONResponse(status_code=exc.status, headers=headers, content={
            "error": {"code": exc.code, "message": exc.message, "detail": exc.detail}})

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [f"{'.'.join(str(p) for p in e['loc'] if p != 'body')}: {e['msg']}"
                    for e in exc.errors()]
        return JSONResponse(status_code=422, content={"error": {
            "code": "invalid_input", "message": "; ".join(problems),
            "detail": {"errors": [{k: v for k, v in e.items() if k in ("loc", "msg", "type")}
                                  for e in exc.errors()]}}})

    v1 = APIRouter(prefix="/api/v1")
    v1.include_router(system.router)
    protected = [datastores.router, pools.router, groups.router, jobs.router,
                 policies.router, policies.vcenters]
    probes = _optional_router("api.routes.probes")
    if probes is not None:
        protected.append(probes)
    for router in protected:
        v1.include_router(router, dependencies=[Depends(authorize)])
    app.include_router(v1)
    return app


def _optional_router(module: str) -> APIRouter | None:
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        return None
    router: APIRouter = mod.router
    return router
