"""No request waits forever: start-up runs in the background (health says "starting"),
a change waits for the one lock at most ``lock_timeout`` and then gets a 503 "busy"
naming what holds it, reads never take the lock, and a change reconciles only the
datastore it touches."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from appliance.actions import ReconcileReport
from appliance.reconciler import Status
from appliance.services.datastores import DatastoreRequest
from appliance.settings import Settings
from tests.unit.conftest import Rig, make_rig
from tests.unit.test_api_datastores import iscsi_body, nfs_body

API = "/api/v1"


@pytest.fixture
def quick_rig(tmp_path: Path) -> Iterator[Rig]:
    settings = Settings(lock_timeout=0.3, health_interval=0,
                        reconcile_interval=0).with_state_dir(tmp_path)
    rig = make_rig(tmp_path, settings=settings)
    yield rig
    rig.engine.close()


def _client(rig: Rig, start: bool) -> TestClient:
    c = TestClient(create_app(rig.engine, start=start))
    c.headers["Authorization"] = "Bearer " + rig.engine.tokens.create("t", "admin")
    return c


def _held(rig: Rig, what: str) -> tuple[threading.Thread, threading.Event]:
    """The change lock held by another thread for ``what`` until the event is set."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with rig.engine.ctx.lock.hold(what):
            held.set()
            release.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    held.wait(5)
    return t, release


def test_a_change_behind_a_held_lock_is_a_clear_503_and_changes_nothing(quick_rig: Rig) -> None:
    rig = quick_rig
    rig.engine.start()
    rig.engine.datastores.put("ds", _nfs())
    t, release = _held(rig, "a slow reconcile")
    try:
        with _client(rig, start=False) as c:
            t0 = time.monotonic()
            r = c.put(f"{API}/datastores/ds", json={**nfs_body(), "size": "2G"})
            waited = time.monotonic() - t0
            assert r.status_code == 503, r.text
            err = r.json()["error"]
            assert err["code"] == "busy" and "a slow reconcile" in err["message"]
            assert err["detail"]["holder"] == "a slow reconcile"
            assert 0.25 < waited < 5
            rec = rig.engine.store.get_datastore("ds")
            assert rec is not None and rec.spec.size == 1 << 30  # unchanged
            # reads do not queue behind the lock
            assert c.get(f"{API}/datastores").status_code == 200
            assert c.get(f"{API}/system/health").status_code == 200
    finally:
        release.set()
        t.join()


def test_a_create_behind_a_held_lock_is_accepted_as_a_job_that_completes(
        quick_rig: Rig) -> None:
    """Issue 24.1: a create that waits past lock_timeout is a 202 with its job, not a 503;
    it is made once the lock frees, in order."""
    rig = quick_rig
    rig.engine.start()
    t, release = _held(rig, "a slow reconcile")
    try:
        with _client(rig, start=False) as c:
            r = c.put(f"{API}/datastores/ds", json=nfs_body())
            assert r.status_code == 202, r.text
            job = r.json()
            assert r.headers["Location"] == f"/api/v1/jobs/{job['id']}"
            assert (job["kind"], job["target"], job["state"]) == ("datastore.create", "ds",
                                                                  "running")
            assert c.get(f"{API}/datastores/ds").status_code == 404  # not begun yet
            release.set()
            done = c.get(f"{API}/jobs/{job['id']}", params={"wait": 10}).json()
            assert done["state"] == "succeeded", done
            assert done["result"] == {"datastore": "ds", "created": True, "state": "ready",
                                      "serving": True}
            got = c.get(f"{API}/datastores/ds").json()
            assert (got["state"], got["serving"]) == ("ready", True)
            # the same PUT again: nothing to do, 200 at once
            assert c.put(f"{API}/datastores/ds", json=nfs_body()).status_code == 200
    finally:
        release.set()
        t.join()


def test_health_answers_starting_while_start_up_runs(quick_rig: Rig) -> None:
    rig = quick_rig
    rig.engine.start()
    rig.engine.datastores.put("ds", _nfs())
    gate = threading.Event()
    real_full = rig.engine.reconciler.full

    def slow_full(exclude: set[str] | None = None, wait: float | None = None,
                  device_wait: float = 10.0) -> ReconcileReport:
        gate.wait(10)
        return real_full(exclude, wait, device_wait)

    rig.engine.reconciler.full = slow_full  # type: ignore[method-assign]
    rig.engine.reconciler._status = Status(phase="starting", checked_at=0.0)  # a new process
    with _client(rig, start=True) as c:
        h = c.get(f"{API}/system/health")
        assert h.status_code == 503 and h.json()["status"] == "starting"
        assert c.get(f"{API}/datastores/ds").status_code == 200  # reads work meanwhile
        gate.set()
        deadline = time.monotonic() + 10
        while c.get(f"{API}/system/health").json()["status"] == "starting":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        h = c.get(f"{API}/system/health")
        assert h.status_code == 200 and h.json()["status"] == "ok", h.json()


def _nfs() -> DatastoreRequest:
    return DatastoreRequest(protocol="nfs3", size="1G",
                            nfs_clients=[{"match": "192.0.2.0/24", "access": "rw"}])


def test_a_put_reconciles_only_its_own_datastore(client: TestClient, rig: Rig) -> None:
    for i in range(6):
        body = nfs_body() if i % 2 else iscsi_body()
        assert client.put(f"{API}/datastores/ds{i}", json=body).status_code == 201
    rig.ganesha.calls.clear()
    changes = rig.lio.changes
    r = client.put(f"{API}/datastores/new-nfs", json=nfs_body())
    assert r.status_code == 201
    eid = r.json()["nfs"]["export_id"]
    touched = {i for _m, i in rig.ganesha.calls if i}
    assert touched == {eid}, rig.ganesha.calls
    assert rig.lio.changes == changes, "an NFS PUT must not touch LIO"
    r = client.put(f"{API}/datastores/new-lun", json=iscsi_body())
    assert r.status_code == 201
    iqn = r.json()["iscsi"]["iqn"]
    assert {t.spec.iqn for t in rig.lio.list_targets()} >= {iqn}
    # every other target is exactly as before, and the drift is still empty
    assert client.get(f"{API}/system/drift").json() == {"in_sync": True, "items": []}


def test_a_deleted_datastore_is_withdrawn_without_touching_the_others(
        client: TestClient, rig: Rig) -> None:
    a = client.put(f"{API}/datastores/a", json=nfs_body()).json()
    b = client.put(f"{API}/datastores/b", json=nfs_body()).json()
    rig.ganesha.calls.clear()
    job = client.delete(f"{API}/datastores/a", params={"wait": 10}).json()
    assert job["state"] == "succeeded", job
    touched = {i for _m, i in rig.ganesha.calls if i}
    assert touched == {a["nfs"]["export_id"]}
    assert [e.export_id for e in rig.ganesha.list_exports()] == [b["nfs"]["export_id"]]
