"""Request-scoped access to the engine and the caller (FastAPI dependencies)."""

from __future__ import annotations

from typing import Annotated, get_args, get_origin

from fastapi import Depends, Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from appliance.engine import Engine
from appliance.errors import InvalidInput, Unauthorized
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


async def known_query(request: Request) -> None:
    """Query parameters the operation does not take are refused (422), as unknown body
    fields are: a misspelt ``?forse=true`` must not pass for a request without it. So is
    a parameter given twice, unless it takes a list (``?label=a=1&label=b=2``)."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute) or not request.query_params:
        return
    known = _query_names(route.dependant)
    unknown = sorted(set(request.query_params) - known)
    if unknown:
        raise InvalidInput(f"unknown query parameter {', '.join(map(repr, unknown))}; this "
                           f"operation takes {', '.join(sorted(known)) or 'none'}",
                           detail={"unknown": unknown, "known": sorted(known)})
    lists = _list_query_names(route.dependant)
    repeated = sorted(k for k in set(request.query_params) - lists
                      if len(request.query_params.getlist(k)) > 1)
    if repeated:  # a parameter that takes one value: which one would count?
        raise InvalidInput(f"query parameter {', '.join(map(repr, repeated))} given more "
                           "than once", detail={"repeated": repeated})


def _query_names(dependant: Dependant) -> set[str]:
    """The query parameters an operation takes, its dependencies' included."""
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


def _list_query_names(dependant: Dependant) -> set[str]:
    """The query parameters of an operation that take several values."""
    names = {p.alias for p in dependant.query_params if _takes_list(p.field_info.annotation)}
    for sub in dependant.dependencies:
        names |= _list_query_names(sub)
    return names


def _takes_list(annotation: object) -> bool:
    """``list[X]``, ``list[X] | None`` or an Annotated form of them."""
    if get_origin(annotation) in (list, tuple, set, frozenset):
        return True
    return any(_takes_list(a) for a in get_args(annotation) if a is not type(None))


EngineDep = Annotated[Engine, Depends(get_engine)]
PrincipalDep = Annotated[Principal, Depends(authorize)]


def server_address(request: Request) -> str:
    """The address the client used to reach us: what attach instructions should name."""
    engine = engine_of(request)
    return engine.settings.public_address or request.url.hostname or "APPLIANCE-ADDRESS"
