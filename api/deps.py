"""Request-scoped access to the engine and the caller (FastAPI dependencies)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from appliance.engine import Engine
from appliance.errors import Unauthorized
from appliance.services.tokens import Principal

_bearer = HTTPBearer(auto_error=False, description="a token from `zds token create`")


def engine_of(request: Request) -> Engine:
    """The engine the app was made with."""
    engine: Engine = request.app.state.engine
    return engine


async def get_engine(request: Request) -> Engine:
    """The engine, as a dependency (async: a sync one would take a worker thread)."""
    return engine_of(request)


async def authorize(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """Every endpoint but health: a valid token; readonly tokens may only read.

    The guard (api/guard.py) checked the token and the role before the body was read and
    refused the request otherwise; this hands a route its verdict, so a token is verified
    once per request. ``credentials`` puts the scheme into the OpenAPI document."""
    principal: Principal | None = getattr(request.state, "principal", None)
    if principal is None:  # only when the app runs without its guard: refuse, never guess
        raise Unauthorized("missing bearer token (Authorization: Bearer zds_...)")
    return principal


EngineDep = Annotated[Engine, Depends(get_engine)]
PrincipalDep = Annotated[Principal, Depends(authorize)]


def server_address(request: Request) -> str:
    """The address the client used to reach us: what attach instructions should name."""
    engine = engine_of(request)
    return engine.settings.public_address or request.url.hostname or "APPLIANCE-ADDRESS"
