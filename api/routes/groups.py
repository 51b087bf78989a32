"""/api/v1/initiator-groups: named sets of initiator IQNs, reusable across LUNs."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from api import convert, schemas
from api.deps import EngineDep, PrincipalDep
from api.fields import GroupPath
from api.routes.common import ERRORS

router = APIRouter(prefix="/initiator-groups", tags=["initiator groups"], responses=ERRORS)


@router.get("", response_model=list[schemas.GroupOut])
def list_groups(engine: EngineDep, _: PrincipalDep) -> list[schemas.GroupOut]:
    return [convert.group_out(g) for g in engine.groups.list()]


@router.get("/{name}", response_model=schemas.GroupOut)
def get_group(name: GroupPath, engine: EngineDep, _: PrincipalDep) -> schemas.GroupOut:
    return convert.group_out(engine.groups.get(name))


@router.put("/{name}", response_model=schemas.GroupOut,
            responses={201: {"model": schemas.GroupOut, "description": "created"}})
def put_group(name: GroupPath, body: schemas.GroupPut, response: Response, engine: EngineDep,
              _: PrincipalDep) -> schemas.GroupOut:
    """Changes apply at once to every LUN that uses the group."""
    view, created = engine.groups.put(name, body.initiators)
    response.status_code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
    return convert.group_out(view)


@router.delete("/{name}", status_code=204)
def delete_group(name: GroupPath, engine: EngineDep, _: PrincipalDep) -> Response:
    engine.groups.delete(name)
    return Response(status_code=204)
