"""NFS datastores provisioned through the REST API, served by a REAL nfs-ganesha on this
host and checked with a real NFSv3 client (libnfs): data written comes back, access
changes apply live, a deleted datastore's export is gone, and ganesha is never restarted.

There is no ZFS on this host, so ZFS is the in-memory fake, with each filesystem's
mountpoint made a real directory that ganesha exports with FSAL VFS.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from ganesha_harness import GaneshaHarness

from api.app import create_app
from appliance.engine import Engine
from appliance.host.factory import HostAdapters
from appliance.host.fakes.lio import FakeLio
from appliance.host.fakes.zfs import FakeZfs, GiB
from appliance.host.local import FakeLocalHost
from appliance.settings import Settings
from appliance.transports.storage import ROOT_FS_PROPERTIES

pytestmark = pytest.mark.integration
API = "/api/v1"


class DirectoryZfs(FakeZfs):
    """The fake, with every filesystem's mountpoint created as a real directory."""

    def create_filesystem(self, name: str, properties: Mapping[str, str]) -> None:
        super().create_filesystem(name, properties)
        info = self.get_dataset(name)
        assert info is not None
        Path(info.prop("mountpoint")).mkdir(parents=True, exist_ok=True)

    def clone(self, snapshot: str, target: str, properties: Mapping[str, str]) -> None:
        super().clone(snapshot, target, properties)
        info = self.get_dataset(target)
        assert info is not None
        Path(info.prop("mountpoint")).mkdir(parents=True, exist_ok=True)


@pytest.fixture
def api(ganesha_env: GaneshaHarness, tmp_path: Path) -> Iterator[tuple[TestClient, Engine]]:
    root = ganesha_env.export_base / f"pool-{os.getpid()}-{tmp_path.name}"
    zfs = DirectoryZfs.with_pool("tank", 100 * GiB, fs_properties={
        **ROOT_FS_PROPERTIES, "mountpoint": str(root)})
    settings = Settings().with_state_dir(tmp_path / "state")
    engine = Engine.create(settings, HostAdapters(zfs, FakeLio.linked_to(zfs),
                                                  ganesha_env.adapter(), FakeLocalHost()))
    with TestClient(create_app(engine)) as client:
        client.headers["Authorization"] = "Bearer " + engine.tokens.create("it", "admin")
        wait_started(client)
        yield client, engine
    engine.close()


def wait_started(client: TestClient, timeout: float = 30.0) -> None:
    """The API restores exports in the background at start; health says when it is done."""
    deadline = time.monotonic() + timeout
    while client.get(f"{API}/system/health").json()["status"] == "starting":
        assert time.monotonic() < deadline, "the API did not finish starting"
        time.sleep(0.05)


def nfs3(clients: list[dict[str, str]] | None = None) -> dict[str, object]:
    return {"protocol": "nfs3", "size": "2G",
            "nfs": {"clients": clients or [{"match": "127.0.0.1", "access": "rw"}]}}


def test_nfs_datastores_through_the_api(api: tuple[TestClient, Engine],
                                        ganesha_env: GaneshaHarness) -> None:
    client, engine = api
    h = ganesha_env
    pid = h.ganesha_pid

    a = client.put(f"{API}/datastores/vm-a", json=nfs3())
    b = client.put(f"{API}/datastores/vm-b", json=nfs3())
    assert a.status_code == 201 and b.status_code == 201, (a.text, b.text)
    path_a, path_b = a.json()["nfs"]["path"], b.json()["nfs"]["path"]
    assert a.json()["serving"] and b.json()["serving"]

    payload = os.urandom(3 << 20)
    h.nfs_write(path_a, "disk.vmdk", payload)
    h.nfs_write(path_b, "small.txt", b"hello from b\n")
    back = h.nfs_read(path_a, "disk.vmdk")
    assert hashlib.sha256(back).hexdigest() == hashlib.sha256(payload).hexdigest()
    assert h.nfs_ls(path_b) == ["small.txt"]
    # ganesha really wrote it into the datastore's directory
    assert (Path(path_a) / "disk.vmdk").stat().st_size == len(payload)

    # access change applies live: read-only now, reads still work
    r = client.put(f"{API}/datastores/vm-a", json=nfs3([{"match": "127.0.0.1",
                                                         "access": "ro"}]))
    assert r.status_code == 200, r.text
    assert h.try_nfs_write(path_a, "new.bin", b"x" * 8192).returncode != 0
    assert h.nfs_read(path_a, "disk.vmdk") == payload
    assert client.get(f"{API}/system/drift").json() == {"in_sync": True, "items": []}

    # delete vm-a: its export is gone, vm-b still serves
    job = client.delete(f"{API}/datastores/vm-a", params={"wait": 30, "force": True}).json()
    assert job["state"] == "succeeded", job
    assert h.try_nfs_ls(path_a).returncode != 0
    assert h.nfs_read(path_b, "small.txt") == b"hello from b\n"
    assert [e.path for e in engine.ctx.hosts.ganesha.list_exports()] == [path_b]
    assert h.ganesha_pid == pid and h.procs["ganesha"].poll() is None  # never restarted


def test_clone_of_snapshot_is_served(api: tuple[TestClient, Engine],
                                     ganesha_env: GaneshaHarness) -> None:
    client, _ = api
    h = ganesha_env
    d = client.put(f"{API}/datastores/src", json=nfs3()).json()
    h.nfs_write(d["nfs"]["path"], "a.txt", b"one")
    assert client.post(f"{API}/datastores/src/snapshots", json={"name": "s1"}).status_code == 201
    c = client.post(f"{API}/datastores/src/snapshots/s1/clones",
                    json={"name": "src-copy", "nfs": {"clients": [
                        {"match": "127.0.0.1", "access": "rw"}]}})
    assert c.status_code == 201, c.text
    assert c.json()["nfs"]["export_id"] != d["nfs"]["export_id"]
    # the fake does not copy file contents into the clone's directory; the export is live
    assert h.try_nfs_ls(c.json()["nfs"]["path"]).returncode == 0


def test_api_restart_reapplies_exports(ganesha_env: GaneshaHarness, tmp_path: Path) -> None:
    """Exports removed behind ZDS's back (as after a ganesha restart) come back when the
    API starts: the start-up reconcile re-adds them from the records."""
    h = ganesha_env
    root = h.export_base / f"restart-{tmp_path.name}"
    zfs = DirectoryZfs.with_pool("tank", 100 * GiB, fs_properties={
        **ROOT_FS_PROPERTIES, "mountpoint": str(root)})
    settings = Settings().with_state_dir(tmp_path / "state")

    def engine() -> Engine:
        return Engine.create(settings, HostAdapters(zfs, FakeLio.linked_to(zfs), h.adapter(),
                                                    FakeLocalHost()))

    first = engine()
    with TestClient(create_app(first)) as client:
        wait_started(client)
        client.headers["Authorization"] = "Bearer " + first.tokens.create("it", "admin")
        path = client.put(f"{API}/datastores/keep", json=nfs3()).json()["nfs"]["path"]
        h.nfs_write(path, "f", b"data")
    first.close()
    for export in h.adapter().list_exports():
        h.adapter().remove_export(export.export_id)
    assert h.try_nfs_ls(path).returncode != 0

    second = engine()
    with TestClient(create_app(second)) as client:
        wait_started(client)
        assert h.nfs_read(path, "f") == b"data"
    second.close()
