"""The FastAPI application: routes under /api/v1, engine errors as JSON bodies."""

from __future__ import annotations

import importlib
import logging
import re
import reprlib
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from api import console
from api.deps import authorize, known_query
from api.errors import engine_error_response, error_response
from api.fields import RULES
from api.guard import Guard
from api.routes import (
    cluster,
    datastores,
    groups,
    jobs,
    metrics,
    policies,
    pools,
    replication,
    system,
)
from appliance import __version__
from appliance.engine import Engine
from appliance.errors import ZdsError

log = logging.getLogger(__name__)

V1 = "/api/v1"

DESCRIPTION = """
ZDS turns ZFS pools into VM datastores for VMware ESXi and KVM: NFS exports (nfs-ganesha)
and iSCSI LUNs (LIO), provisioned here, with built-in performance probes.

Every endpoint but `GET /api/v1/system/health` needs `Authorization: Bearer <token>`
(`zds token create --role admin|readonly`); readonly tokens may only GET. Health without
a token tells status and codes only; with any valid token, every detail.
Errors are `{"error": {"code", "message", "detail"}}` with 401/403/404/409/413/422/429/503.
In an HA pair, a change sent to the node that does not hold its pool is 503 `not_active`,
naming the node that does (send it to the service address); `GET /api/v1/cluster` shows
the pair.
The token is checked before the body is read; bodies are capped (413 `too_large`), and so
are requests in flight, in all (503 `busy`) and per token (429 `too_many_requests`), both
with `Retry-After`.
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
        if start:
            engine.stop()

    # /docs is api/console.py's own page (FastAPI's loads Swagger UI from a CDN); no /redoc
    app = FastAPI(title="ZDS — ZFS Datastore Server", version=__version__,
                  description=DESCRIPTION, lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.engine = engine

    @app.exception_handler(ZdsError)
    async def zds_error(_: Request, exc: ZdsError) -> JSONResponse:
        return engine_error_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # what the framework itself refuses (a body that is not JSON, an unknown path,
        # a method a path does not have) in the same envelope as everything else
        code = HTTP_CODES.get(exc.status_code, "http_error")
        message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        headers = dict(exc.headers or {})
        if exc.status_code == 400 and "parsing the body" in message:
            message = "the request body is not valid JSON"
        if exc.status_code == 405:
            # Starlette names only the first route matching the path; a path served by
            # several routes (GET, PUT, DELETE /datastores/{name}) allows them all
            headers["Allow"] = ", ".join(_allowed_methods(app, request.url.path))
            message = f"{request.method} is not allowed here; allowed: {headers['Allow']}"
        return error_response(exc.status_code, code, message, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = _problems(exc.errors())
        return error_response(422, "invalid_input", "; ".join(problems), {
            "errors": [{k: v for k, v in e.items() if k in ("loc", "msg", "type")}
                       for e in exc.errors()]})

    # each router straight into the app: FastAPI rebuilds every route at each include, and
    # a /api/v1 router in between made it three builds (5 s of the API's start under TCG)
    app.include_router(system.router, prefix=V1, dependencies=[Depends(known_query)])
    protected = [datastores.router, pools.router, groups.router, jobs.router, metrics.router,
                 replication.router, replication.keys, policies.router, policies.vcenters,
                 cluster.router]
    probes = _optional_router("api.routes.probes")
    if probes is not None:
        protected.append(probes)
    for router in protected:
        app.include_router(router, prefix=V1,
                           dependencies=[Depends(known_query), Depends(authorize)])
    app.include_router(metrics.scrape, dependencies=[Depends(authorize), Depends(known_query)])
    console.mount(app)  # /ui and /docs: static files; they read through /api/v1
    # last, so outermost: token, size and load are checked before anything else runs
    app.add_middleware(Guard, engine=engine)
    return app


# the labels pydantic puts in an error's location for the member of a union that refused
# (``constrained-str``, ``function-before[...]``): how the type is built, not where
_UNION_MEMBER = re.compile(r"(?:constrained-|function-|list\[|dict\[|literal\[|nullable\[|"
                           r"lax-or-strict\[|tagged-union\[).*|int|str|bool|float|none")


def _problems(errors: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per refused field: where (union members left out) and why; of a union's
    refusals the one that states a rule (a pattern's), else all of them."""
    by_place: dict[str, list[Mapping[str, Any]]] = {}
    for e in errors:
        place = ".".join(str(p) for p in e["loc"]
                         if p != "body" and not (isinstance(p, str) and _UNION_MEMBER.fullmatch(p)))
        by_place.setdefault(place, []).append(e)
    lines = []
    for place, found in by_place.items():
        ruled = [e for e in found if e.get("type") == "string_pattern_mismatch"]
        said = list(dict.fromkeys(_said(e) for e in (ruled or found)))
        lines.append(f"{place}: {' or '.join(said)}" if place else " or ".join(said))
    return lines


def _said(error: Mapping[str, Any]) -> str:
    """A validation error in words: a value refused by a pattern names the rule (the
    validator's), not the regular expression."""
    rule = RULES.get(str(error.get("ctx", {}).get("pattern", "")))
    if error.get("type") == "string_pattern_mismatch" and rule:
        return f"{reprlib.repr(error.get('input'))} is not valid: {rule}"
    return str(error["msg"])


def _allowed_methods(app: FastAPI, path: str) -> list[str]:
    """The methods the OpenAPI document lists for the path template matching ``path``
    (the most specific one: /pools/importable, not /pools/{name})."""
    matches: list[tuple[int, set[str]]] = []
    for template, ops in app.openapi().get("paths", {}).items():
        pattern = re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template))
        if re.fullmatch(pattern, path):
            matches.append((template.count("{"), {m.upper() for m in ops}))
    if not matches:
        return []
    fewest = min(n for n, _ in matches)
    return sorted(set().union(*(m for n, m in matches if n == fewest)))


HTTP_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
              405: "method_not_allowed", 409: "conflict", 413: "too_large",
              415: "unsupported_media_type", 422: "invalid_input", 429: "too_many_requests"}


def _optional_router(module: str) -> APIRouter | None:
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        return None
    router: APIRouter = mod.router
    return router
