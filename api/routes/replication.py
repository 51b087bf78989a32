"""/api/v1/replications (a datastore's snapshots to another appliance; promote a replica)
and /api/v1/replication (this appliance's key, and the source keys it authorizes)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, status

from api import convert, schemas
from api import schemas_replication as r
from api.deps import EngineDep, PrincipalDep, server_address
from api.fields import KeyPath, ReplicationPath
from api.routes.common import ERRORS, WaitQuery, job_response

router = APIRouter(prefix="/replications", tags=["replication"], responses=ERRORS)
keys = APIRouter(prefix="/replication", tags=["replication"], responses=ERRORS)


@router.get("", response_model=list[r.ReplicationOut])
def list_replications(engine: EngineDep, _: PrincipalDep) -> list[r.ReplicationOut]:
    """Outgoing replications (this appliance is the source) and the replicas it holds
    (it is the target), by name."""
    return [r.replication_out(v) for v in engine.replication.list()]


@router.get("/{name}", response_model=r.ReplicationOut)
def get_replication(name: ReplicationPath, engine: EngineDep, _: PrincipalDep) -> r.ReplicationOut:
    return r.replication_out(engine.replication.get(name))


@router.put("/{name}", response_model=r.ReplicationOut,
            responses={201: {"model": r.ReplicationOut, "description": "created"}})
def put_replication(name: ReplicationPath, body: r.ReplicationPut, response: Response,
                    engine: EngineDep, _: PrincipalDep) -> r.ReplicationOut:
    """Records what goes where (nothing is sent yet: the first scheduled slot or POST
    .../run does). Idempotent; datastore and target dataset cannot change."""
    view, created = engine.replication.put(name, r.request(body))
    response.status_code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
    return r.replication_out(view)


@router.delete("/{name}", status_code=204)
def delete_replication(name: ReplicationPath, engine: EngineDep, _: PrincipalDep) -> Response:
    """Releases its hold and bookmarks on the source; the replica on the target stays."""
    engine.replication.delete(name)
    return Response(status_code=204)


@router.post("/{name}/run", status_code=202, response_model=schemas.JobOut)
async def run_replication(name: ReplicationPath, engine: EngineDep, _: PrincipalDep,
                          wait: WaitQuery = 0) -> schemas.JobOut:
    """A run now, as a job (409 while one runs). Its result says what was sent."""
    return await job_response(engine, lambda: engine.replication.run_now(name), wait)


@router.post("/{name}/check", response_model=r.CheckOut)
def check_replication(name: ReplicationPath, engine: EngineDep, _: PrincipalDep) -> r.CheckOut:
    """Contacts the target now: reachable, key accepted, host key (pinned on first
    contact), what it holds and what the next run would send."""
    return r.check_out(engine.replication.check(name))


@router.post("/{name}/promote", status_code=201, response_model=r.PromoteOut)
def promote(name: ReplicationPath, request: Request, engine: EngineDep, _: PrincipalDep,
            body: r.PromoteBody | None = None) -> r.PromoteOut:
    """On the target: the replica becomes a datastore served here (its NFS export or
    LUN), without the source. The notes say what ESXi/libvirt must do."""
    result = engine.replication.promote(name, r.promote_request(body or r.PromoteBody()))
    view = result.view
    attach = engine.datastores.attach(view.record.name, server_address(request), view)
    return r.PromoteOut(datastore=convert.datastore_out(view, attach), notes=result.notes)


@keys.get("/identity", response_model=r.IdentityOut)
def identity(engine: EngineDep, _: PrincipalDep) -> r.IdentityOut:
    """This appliance's replication public key (authorize it on a target) and its SSH
    host keys (what a source pins)."""
    return r.identity_out(engine.replication.identity())


@keys.get("/authorized-keys", response_model=list[r.AuthorizedKeyOut])
def list_keys(engine: EngineDep, _: PrincipalDep) -> list[r.AuthorizedKeyOut]:
    return [r.key_out(k) for k in engine.replication.authorized_keys()]


@keys.put("/authorized-keys/{name}", response_model=r.AuthorizedKeyOut,
          responses={201: {"model": r.AuthorizedKeyOut, "description": "created"}})
def put_key(name: KeyPath, body: r.AuthorizedKeyPut, response: Response, engine: EngineDep,
            _: PrincipalDep) -> r.AuthorizedKeyOut:
    """Lets a source appliance's key receive into ``dataset_prefix`` (and below) here,
    through the receive gate only (no shell, no other dataset)."""
    key, created = engine.replication.authorize(name, body.public_key, body.dataset_prefix,
                                                body.sources)
    response.status_code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
    return r.key_out(key)


@keys.delete("/authorized-keys/{name}", status_code=204)
def delete_key(name: KeyPath, engine: EngineDep, _: PrincipalDep) -> Response:
    """The source can no longer connect; the replicas it sent stay."""
    engine.replication.revoke(name)
    return Response(status_code=204)
