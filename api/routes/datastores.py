"""/api/v1/datastores: the main resource, its snapshots and clones."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response, status

from api import convert, schemas
from api.deps import EngineDep, PrincipalDep, server_address
from api.fields import DatastorePath, HoldTagPath, NfsClientQuery, SnapshotPath
from api.routes.common import ERRORS, WaitQuery, job_response

router = APIRouter(prefix="/datastores", tags=["datastores"], responses=ERRORS)


@router.get("", response_model=list[schemas.DatastoreOut])
def list_datastores(engine: EngineDep, _: PrincipalDep) -> list[schemas.DatastoreOut]:
    return [convert.datastore_out(v) for v in engine.datastores.list()]


@router.get("/{name}", response_model=schemas.DatastoreOut)
def get_datastore(name: DatastorePath, request: Request, engine: EngineDep,
                  _: PrincipalDep) -> schemas.DatastoreOut:
    view = engine.datastores.get(name)
    return convert.datastore_out(view, engine.datastores.attach(name, server_address(request),
                                                                view))


@router.put("/{name}", response_model=schemas.DatastoreOut,
            responses={201: {"model": schemas.DatastoreOut, "description": "created"}})
def put_datastore(name: DatastorePath, body: schemas.DatastorePut, request: Request,
                  response: Response,
                  engine: EngineDep, _: PrincipalDep) -> schemas.DatastoreOut:
    """Creates the dataset/zvol, the export or LUN, and returns attach instructions.
    Idempotent: the same body again changes nothing (200)."""
    view, created = engine.datastores.put(name, convert.datastore_request(body))
    response.status_code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
    return convert.datastore_out(view, engine.datastores.attach(name, server_address(request),
                                                                view))


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
