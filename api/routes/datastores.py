"""/api/v1/datastores: the main resource, its snapshots and clones."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request, Response, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import StringConstraints

from api import convert, schemas
from api.deps import EngineDep, PrincipalDep, server_address
from api.fields import DatastorePath, HoldTagPath, NfsClientQuery, SnapshotPath
from api.routes.common import ERRORS, WaitQuery, job_response
from appliance import validate
from appliance.errors import InvalidInput
from appliance.patterns import anchored
from appliance.services.datastores import DatastoreView, ListQuery

# a label selector of the list: key=value, each as a label's own rules
LabelSelector = Annotated[str, StringConstraints(
    pattern=anchored(f"{validate.LABEL_KEY}={validate.LABEL_VALUE}"))]

router = APIRouter(prefix="/datastores", tags=["datastores"], responses=ERRORS)

# The list's headers (docs/api.md, "Listing datastores").
AGE_HEADER = "ZDS-ZFS-Age"
NEXT_HEADER = "ZDS-Next-After"
LIST_HEADERS = {
    AGE_HEADER: {"description": "seconds since the oldest ZFS figure in the answer (usage, "
                                "properties, snapshots, online) was read: the list answers "
                                "from a read the watcher refreshes ([datastores] "
                                "list_refresh_interval, 60 s); what ZDS changed is read "
                                "again at once", "schema": {"type": "number"}},
    NEXT_HEADER: {"description": "with limit, when there are more: the after= of the next "
                                 "page", "schema": {"type": "string"}},
    "Link": {"description": 'with limit, when there are more: <next page URL>; rel="next"',
             "schema": {"type": "string"}},
}


@router.get("", response_model=list[schemas.DatastoreOut],
            responses={200: {"headers": LIST_HEADERS}})
def list_datastores(
        request: Request, response: Response, engine: EngineDep, _: PrincipalDep,
        limit: Annotated[int | None, Query(ge=1, le=1000, description=(
            "at most this many (a page; sorted by name)"))] = None,
        after: Annotated[str | None, Query(
            pattern=validate.RESOURCE_NAME_PATTERN, max_length=validate.RESOURCE_NAME_MAX,
            description="only names after this one: the last name of the previous page (its "
                        "ZDS-Next-After header)")] = None,
        protocol: Annotated[schemas.ProtocolName | None, Query(
            description="only this protocol's")] = None,
        pool: Annotated[str | None, Query(pattern=validate.POOL_NAME_PATTERN,
                                          description="only this pool's")] = None,
        label: Annotated[list[LabelSelector] | None, Query(
            description="key=value: only datastores carrying this label (repeat: all of "
                        "them)")] = None,
) -> list[schemas.DatastoreOut]:
    """Every datastore by name, or a page of them (``limit``, ``after``) and only those a
    filter selects. Usage, properties and snapshot counts may be up to about two watcher
    intervals old for changes ZDS did not make (written data, a ``zfs set`` by hand): the
    ZDS-ZFS-Age header says how old; ``GET /datastores/{name}`` reads them now."""
    pairs = []
    for item in label or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise InvalidInput(f"invalid label selector {item!r}: key=value")
        pairs.append((key, value))
    listing = engine.datastores.listing(ListQuery(limit=limit, after=after, protocol=protocol,
                                                  pool=pool, labels=tuple(pairs)))
    response.headers[AGE_HEADER] = f"{listing.zfs_age:.1f}"
    if listing.next_after is not None:
        response.headers[NEXT_HEADER] = listing.next_after
        params = [(k, v) for k, v in request.query_params.multi_items() if k != "after"]
        url = request.url.replace(query=urlencode([*params, ("after", listing.next_after)]))
        response.headers["Link"] = f'<{url}>; rel="next"'
    return [convert.datastore_out(v) for v in listing.items]


@router.get("/{name}", response_model=schemas.DatastoreOut)
def get_datastore(name: DatastorePath, request: Request, engine: EngineDep,
                  _: PrincipalDep) -> schemas.DatastoreOut:
    view = engine.datastores.get(name)
    return convert.datastore_out(view, engine.datastores.attach(name, server_address(request),
                                                                view))


@router.put("/{name}", response_model=schemas.DatastoreOut, responses={
    201: {"model": schemas.DatastoreOut, "description": "created"},
    202: {"model": schemas.JobOut,
          "description": "a create queued behind others for longer than the request "
                         "waits (`lock_timeout`, 60 s): it completes in order; follow the "
                         "job (Location), then GET the datastore"}})
async def put_datastore(name: DatastorePath, body: schemas.DatastorePut, request: Request,
                        response: Response, engine: EngineDep,
                        _: PrincipalDep) -> schemas.DatastoreOut | JSONResponse:
    """Creates the dataset/zvol, the export or LUN, and returns attach instructions.
    Idempotent: the same body again changes nothing (200). Creates sent together are
    made together; one still queued after `lock_timeout` answers 202 with its job."""
    request_body = convert.datastore_request(body)
    started = await run_in_threadpool(engine.datastores.put_start, name, request_body)
    if isinstance(started, Future):
        try:  # shielded: a request that stops waiting leaves the create queued
            view, created = await asyncio.wait_for(
                asyncio.shield(asyncio.wrap_future(started)), engine.settings.lock_timeout)
        except TimeoutError:
            job = await run_in_threadpool(
                engine.jobs.track, "datastore.create", name, started, _created,
                f"creating datastore {name} (queued behind other creates)",
                pool=request_body.pool)
            return JSONResponse(status_code=status.HTTP_202_ACCEPTED,
                                content=convert.job_out(job).model_dump(mode="json"),
                                headers={"Location": f"/api/v1/jobs/{job.id}"})
    else:
        view, created = started
    response.status_code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
    attach = await run_in_threadpool(engine.datastores.attach, name,
                                      server_address(request), view)
    return convert.datastore_out(view, attach)


def _created(outcome: tuple[DatastoreView, bool]) -> dict[str, Any]:
    """A queued create's job result: which datastore, and how it ended."""
    view, created = outcome
    return {"datastore": view.record.name, "created": created, "state": view.state,
            "serving": view.serving}


@router.delete("/{name}", status_code=202, response_model=schemas.JobOut)
async def delete_datastore(name: DatastorePath, engine: EngineDep, _: PrincipalDep,
                           wait: WaitQuery = 0, force: bool = False) -> schemas.JobOut:
    """Refused (409) while NFS clients or iSCSI initiators are connected, unless force."""
    return await job_response(engine, lambda: engine.datastores.delete(name, force=force),
                              wait)


@router.get("/{name}/attach", response_model=schemas.AttachBody)
def attach(name: DatastorePath, request: Request, engine: EngineDep, _: PrincipalDep,
           server: NfsClientQuery = None,
           port: Annotated[int | None, Query(ge=1, le=65535)] = None) -> schemas.AttachBody:
    """esxcli commands and a libvirt pool XML; ``server`` overrides the address in them,
    ``port`` the port when clients reach the appliance through port forwarding or NAT (the
    iSCSI portal's port; for NFS it is only named in the notes)."""
    from dataclasses import asdict

    from appliance import validate

    address = validate.nfs_client(server) if server else server_address(request)
    return schemas.AttachBody(**asdict(engine.datastores.attach(name, address, port=port)))


@router.get("/{name}/snapshots", response_model=list[schemas.SnapshotOut], tags=["snapshots"])
def list_snapshots(name: DatastorePath, engine: EngineDep, _: PrincipalDep,
                   policy: str | None = None) -> list[schemas.SnapshotOut]:
    """Oldest first, each with the policy that took it and its age; ``policy`` keeps only
    that policy's snapshots (``policy=`` empty: only those taken by hand)."""
    return [convert.snapshot_out(v) for v in engine.snapshots.list(name, policy)]


@router.post("/{name}/snapshots", status_code=201, response_model=schemas.SnapshotOut,
             tags=["snapshots"])
def create_snapshot(name: DatastorePath, body: schemas.SnapshotCreate, engine: EngineDep,
                    _: PrincipalDep) -> schemas.SnapshotOut:
    return convert.snapshot_out(engine.snapshots.create(name, body.name))


@router.get("/{name}/snapshots/{snapshot}", response_model=schemas.SnapshotOut,
            tags=["snapshots"])
def get_snapshot(name: DatastorePath, snapshot: SnapshotPath, engine: EngineDep,
                 _: PrincipalDep) -> schemas.SnapshotOut:
    return convert.snapshot_out(engine.snapshots.get(name, snapshot))


@router.delete("/{name}/snapshots/{snapshot}", status_code=204, tags=["snapshots"])
def delete_snapshot(name: DatastorePath, snapshot: SnapshotPath, engine: EngineDep,
                    _: PrincipalDep) -> Response:
    engine.snapshots.delete(name, snapshot)
    return Response(status_code=204)


@router.get("/{name}/snapshots/{snapshot}/holds", response_model=list[str],
            tags=["snapshots"])
def list_holds(name: DatastorePath, snapshot: SnapshotPath, engine: EngineDep,
               _: PrincipalDep) -> list[str]:
    """The ``zfs hold`` tags on the snapshot (replication, backups, or a person)."""
    return engine.snapshots.holds(name, snapshot)


@router.put("/{name}/snapshots/{snapshot}/holds/{tag}", response_model=list[str],
            tags=["snapshots"])
def hold(name: DatastorePath, snapshot: SnapshotPath, tag: HoldTagPath, engine: EngineDep,
         _: PrincipalDep) -> list[str]:
    """Pins the snapshot: no policy prunes it, and it cannot be deleted, until released
    (409 if that tag holds it already). Answers the tags now on it."""
    return engine.snapshots.hold(name, snapshot, tag)


@router.delete("/{name}/snapshots/{snapshot}/holds/{tag}", response_model=list[str],
               tags=["snapshots"])
def release(name: DatastorePath, snapshot: SnapshotPath, tag: HoldTagPath, engine: EngineDep,
            _: PrincipalDep) -> list[str]:
    return engine.snapshots.release(name, snapshot, tag)


@router.post("/{name}/snapshots/{snapshot}/rollback", response_model=schemas.SnapshotOut,
             tags=["snapshots"])
def rollback(name: DatastorePath, snapshot: SnapshotPath, engine: EngineDep, _: PrincipalDep,
             body: schemas.RollbackBody | None = None) -> schemas.SnapshotOut:
    b = body or schemas.RollbackBody()
    return convert.snapshot_out(engine.snapshots.rollback(
        name, snapshot, destroy_newer=b.destroy_newer, force=b.force))


@router.post("/{name}/snapshots/{snapshot}/clones", status_code=201,
             response_model=schemas.DatastoreOut, tags=["snapshots"])
def clone(name: DatastorePath, snapshot: SnapshotPath, body: schemas.CloneBody, request: Request,
          engine: EngineDep, _: PrincipalDep) -> schemas.DatastoreOut:
    """A new datastore from a snapshot (own export id / IQN / serial). Access and profile
    are the source's unless given."""
    base = engine.snapshots.inherited_request(engine.datastores.record(name))
    view = engine.snapshots.clone(name, snapshot, body.name, convert.clone_request(base, body))
    return convert.datastore_out(view, engine.datastores.attach(body.name,
                                                                 server_address(request),
                                                                 view))
