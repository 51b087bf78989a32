"""Request-scoped access to the engine and the caller (FastAPI dependencies)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from appliance.engine import Engine
from appliance.errors import Forbidden, Unauthorized
from appliance.services.tokens import Principal

_bearer = HTTPBearer(auto_error=False, description="a token from `zds token create`")
READ_METHODS = ("GET", "HEAD", "OPTIONS")


def get_engine(request: Request) -> Engine:
    engine: Engine = request.app.state.engine
    return engine


def authorize(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """Every endpoint but health: a valid token; readonly tokens may only read."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise Unauthorized("missing bearer token (Authorization: Bearer zds_...)")
    principal = get_engine(request).tokens.verify(credentials.credentials)
    if principal.role != "admin" and request.method not in READ_METHODS:
        raise Forbidden(f"token {principal.name!r} is readonly")
    return principal


EngineDep = Annotated[Engine, Depends(get_engine)]
PrincipalDep = Annotated[Principal, Depends(authorize)]


def server_address(request: Request) -> str:
    """The address the client used to reach us: what attach instructions should name."""
    engine = get_engine(request)
    return engine.settings.public_address or request.url.hostname or "APPLIANCE-ADDRESS"
