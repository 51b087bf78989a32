"""Snapshots, clones, initiator groups, pools, jobs, auth, system through the API."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from appliance.engine import Engine
from appliance.host.fakes.zfs import GiB
from appliance.model import DatastoreRecord
from appliance.store import Store
from tests.unit.conftest import Rig, count_version_asks, make_rig
from tests.unit.test_api_datastores import ESX, ESX2, iscsi_body, nfs_body

API = "/api/v1"


# --- snapshots and clones -------------------------------------------------------------

def test_snapshot_rollback_and_clone(client: TestClient, rig: Rig) -> None:
    client.put(f"{API}/datastores/ds", json=nfs_body())
    rig.zfs.write("tank/datastores/ds", 1 << 30)
    r = client.post(f"{API}/datastores/ds/snapshots", json={"name": "s1"})
    assert r.status_code == 201 and r.json()["full_name"] == "tank/datastores/ds@s1"
    assert client.post(f"{API}/datastores/ds/snapshots", json={"name": "s1"}).status_code == 409
    time.sleep(1.01)  # snapshot creation times have 1 s resolution
    client.post(f"{API}/datastores/ds/snapshots", json={"name": "s2"})
    assert [s["name"] for s in client.get(f"{API}/datastores/ds/snapshots").json()] == [
        "s1", "s2"]
    r = client.post(f"{API}/datastores/ds/snapshots/s1/rollback", json={})
    assert r.status_code == 409 and "s2" in r.json()["error"]["message"]
    r = client.post(f"{API}/datastores/ds/snapshots/s1/rollback", json={"destroy_newer": True})
    assert r.status_code == 200, r.text
    assert [s["name"] for s in client.get(f"{API}/datastores/ds/snapshots").json()] == ["s1"]

    r = client.post(f"{API}/datastores/ds/snapshots/s1/clones", json={"name": "ds-copy"})
    assert r.status_code == 201, r.text
    c = r.json()
    src = client.get(f"{API}/datastores/ds").json()
    assert c["origin"] == "tank/datastores/ds@s1"
    assert c["nfs"]["export_id"] != src["nfs"]["export_id"] and c["serving"]
    assert client.get(f"{API}/datastores/ds/snapshots/s1").json()["clones"] == ["ds-copy"]
    r = client.delete(f"{API}/datastores/ds/snapshots/s1")
    assert r.status_code == 409 and "ds-copy" in r.json()["error"]["message"]
    assert client.delete(f"{API}/datastores/ds").status_code == 409
    assert client.delete(f"{API}/datastores/ds-copy", params={"wait": 10}).json()["state"] == \
        "succeeded"
    assert client.delete(f"{API}/datastores/ds/snapshots/s1").status_code == 204
    assert client.get(f"{API}/datastores/ds/snapshots/s1").status_code == 404
    assert client.post(f"{API}/datastores/ds/snapshots",
                       json={"name": "bad name"}).status_code == 422


def test_iscsi_clone_gets_new_identity_and_rollback_guard(client: TestClient, rig: Rig) -> None:
    d = client.put(f"{API}/datastores/lun", json=iscsi_body()).json()
    client.post(f"{API}/datastores/lun/snapshots", json={"name": "s1"})
    rig.lio.login(d["iscsi"]["iqn"], ESX)
    r = client.post(f"{API}/datastores/lun/snapshots/s1/rollback", json={})
    assert r.status_code == 409 and ESX in r.json()["error"]["message"]
    r = client.post(f"{API}/datastores/lun/snapshots/s1/rollback", json={"force": True})
    assert r.status_code == 200
    assert client.get(f"{API}/system/drift").json()["in_sync"] is True
    c = client.post(f"{API}/datastores/lun/snapshots/s1/clones",
                    json={"name": "lun-copy", "iscsi": {"initiators": [ESX2]}}).json()
    assert c["iscsi"]["serial"] != d["iscsi"]["serial"]
    assert c["iscsi"]["wwn"] != d["iscsi"]["wwn"] and c["iscsi"]["initiators"] == [ESX2]
    assert len(rig.lio.list_targets()) == 2


# --- initiator groups -----------------------------------------------------------------

def test_initiator_groups(client: TestClient, rig: Rig) -> None:
    r = client.put(f"{API}/initiator-groups/esx", json={"initiators": [ESX]})
    assert r.status_code == 201
    assert client.put(f"{API}/initiator-groups/esx", json={"initiators": [ESX]}).status_code \
        == 200
    d = client.put(f"{API}/datastores/lun", json=iscsi_body(
        iscsi={"initiator_groups": ["esx"]})).json()
    (t,) = rig.lio.list_targets()
    assert [a.initiator for a in t.spec.acls] == [ESX]
    client.put(f"{API}/initiator-groups/esx", json={"initiators": [ESX, ESX2]})
    (t,) = rig.lio.list_targets()
    assert {a.initiator for a in t.spec.acls} == {ESX, ESX2}
    assert client.get(f"{API}/initiator-groups/esx").json()["used_by"] == [d["name"]]
    r = client.delete(f"{API}/initiator-groups/esx")
    assert r.status_code == 409 and "lun" in r.json()["error"]["message"]
    bad = client.put(f"{API}/initiator-groups/esx2", json={"initiators": ["not-an-iqn"]})
    assert bad.status_code == 422
    assert client.get(f"{API}/initiator-groups/esx2").status_code == 404


# --- pools ----------------------------------------------------------------------------

def test_pools(client: TestClient, rig: Rig) -> None:
    pools = client.get(f"{API}/pools").json()
    assert [p["name"] for p in pools] == ["tank"] and pools[0]["health"] == "ONLINE"
    detail = client.get(f"{API}/pools/tank").json()
    assert detail["vdevs"]["name"] == "tank" and detail["vdevs"]["children"]
    body = {"name": "fast", "vdevs": [{"type": "mirror", "disks": [
        "/dev/disk/by-id/virtio-spare1", "/dev/disk/by-id/virtio-spare2"]}],
        "log": [{"type": "disk", "disks": ["/dev/disk/by-id/virtio-spare3"]}]}
    r = client.post(f"{API}/pools", json=body, params={"wait": 10})
    assert r.status_code == 202 and r.json()["state"] == "succeeded", r.text
    tree = client.get(f"{API}/pools/fast").json()["vdevs"]
    assert any(c["name"] == "logs" for c in tree["children"])
    assert client.post(f"{API}/pools", json=body).status_code == 409  # exists
    # same disks again under a new name: zpool refuses a disk in use -> the job fails
    body2 = {**body, "name": "again"}
    job = client.post(f"{API}/pools", json=body2, params={"wait": 10}).json()
    assert job["state"] == "failed" and job["error"]["message"]
    missing = {"name": "p2", "vdevs": [{"type": "disk", "disks": ["/dev/disk/by-id/nope"]}]}
    r = client.post(f"{API}/pools", json=missing)
    assert r.status_code == 404 and "nope" in r.json()["error"]["message"]
    bad = {"name": "p3", "vdevs": [{"type": "mirror", "disks": ["/dev/disk/by-id/virtio-spare4"]}]}
    assert client.post(f"{API}/pools", json=bad).status_code == 422
    assert client.post(f"{API}/pools", json={"name": "raidz", "vdevs": []}).status_code == 422


def test_sparse_demo_pool_scrub_export_import(client: TestClient, rig: Rig) -> None:
    for i in range(2):
        rig.zfs.add_disk(str(rig.engine.settings.state_dir / "pools" / "demo" / f"disk{i}.img"),
                         8 * GiB)
    r = client.post(f"{API}/pools", json={"name": "demo", "sparse_files": {
        "count": 2, "size": "8G"}}, params={"wait": 10})
    assert r.json()["state"] == "succeeded", r.text
    assert client.get(f"{API}/pools/demo").json()["demo"] is True
    assert len(rig.local.sparse_files) == 2
    r = client.post(f"{API}/pools/demo/scrub", params={"wait": 10})
    assert r.json()["state"] == "succeeded" and "scrub" in r.json()["result"]["scan"]
    client.put(f"{API}/datastores/onfast", json=nfs_body(pool="demo", size="1G"))
    assert client.post(f"{API}/pools/demo/export").status_code == 409
    r = client.post(f"{API}/pools/demo/export", params={"force": True, "wait": 10})
    assert r.json()["state"] == "succeeded", r.text
    assert rig.ganesha.list_exports() == []
    ds = client.get(f"{API}/datastores/onfast").json()
    assert ds["online"] is False and ds["serving"] is False
    assert "demo" in client.get(f"{API}/pools/importable").json()
    # the records go away (a fresh appliance): import adopts them from zds:* properties
    rig.engine.store.delete_datastore("onfast")
    r = client.post(f"{API}/pools/demo/import", params={"wait": 10})
    assert r.json()["state"] == "succeeded" and r.json()["result"]["adopted"] == ["onfast"]
    ds = client.get(f"{API}/datastores/onfast").json()
    assert ds["serving"] is True and ds["nfs"]["path"] == "/demo/datastores/onfast"


# --- jobs, auth, system ---------------------------------------------------------------

def test_jobs_listing_and_errors(client: TestClient) -> None:
    client.put(f"{API}/datastores/ds", json=nfs_body())
    job = client.delete(f"{API}/datastores/ds").json()
    done = client.get(f"{API}/jobs/{job['id']}", params={"wait": 10}).json()
    assert done["state"] == "succeeded" and done["finished"] >= done["created"]
    assert any(j["id"] == job["id"] for j in client.get(f"{API}/jobs").json())
    assert client.get(f"{API}/jobs/nope").status_code == 404
    assert client.post(f"{API}/jobs/{job['id']}/cancel").status_code == 409


def test_jobs_survive_restart_as_failed(tmp_path: Path) -> None:
    store = Store(tmp_path / "zds.db")
    with store.connect() as db:
        db.execute("INSERT INTO jobs (id, kind, state, created) VALUES "
                   "('j1', 'pool.scrub', 'running', 1.0), ('j2', 'x', 'succeeded', 1.0)")
    store.close()
    rig = make_rig(tmp_path)
    rig.engine.start()
    assert rig.engine.jobs.get("j1").state == "failed"
    assert rig.engine.jobs.get("j1").error == {
        "code": "interrupted", "message": "the API stopped while this job was running"}
    assert rig.engine.jobs.get("j2").state == "succeeded"
    rig.engine.close()


def test_a_job_whose_tool_the_stop_killed_reads_interrupted(tmp_path: Path) -> None:
    """systemd stops the API and the job's tool together: the tool's failure, seen a moment
    before or after the API's shutdown, must not be what the job says (CI saw
    host_command_failed on a probe stopped by ``systemctl restart zds-api``)."""
    import threading

    from appliance.errors import HostCommandFailed
    from appliance.jobs import JobContext

    rig = make_rig(tmp_path)
    started, killed = threading.Event(), threading.Event()

    def probe_like(ctx: JobContext) -> None:
        ctx.on_cancel.append(killed.set)  # the probe's hook stops fio
        started.set()
        killed.wait(10)
        raise HostCommandFailed("fio exited 143")

    job = rig.engine.jobs.submit("probe", "ds", probe_like, long=True)
    assert started.wait(10)
    with TestClient(create_app(rig.engine)):
        pass  # the lifespan's end is the API stopping
    assert killed.is_set(), "stopping did not run the job's cancel hook"
    time.sleep(0.2)  # the job thread records its failure after the hook
    done = rig.engine.jobs.get(job.id)
    assert done.state == "failed" and done.error is not None
    assert done.error["code"] == "interrupted", done.error
    rig.engine.store.close()


def test_auth(rig: Rig) -> None:
    app = create_app(rig.engine, start=False)
    ro = rig.engine.tokens.create("viewer", "readonly")
    admin = rig.engine.tokens.create("boss", "admin")
    with TestClient(app) as c:
        assert c.get(f"{API}/system/health").status_code == 200  # no token needed
        r = c.get(f"{API}/datastores")
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        bad = {"Authorization": "Bearer zds_000000000000_" + "x" * 43}
        assert c.get(f"{API}/datastores", headers=bad).status_code == 401
        forged = {"Authorization": f"Bearer {admin[:-1]}{'A' if admin[-1] != 'A' else 'B'}"}
        assert c.get(f"{API}/datastores", headers=forged).status_code == 401
        h = {"Authorization": f"Bearer {ro}"}
        assert c.get(f"{API}/datastores", headers=h).status_code == 200
        r = c.put(f"{API}/datastores/x", json=nfs_body(), headers=h)
        assert r.status_code == 403 and rig.engine.store.get_datastore("x") is None
        h = {"Authorization": f"Bearer {admin}"}
        assert c.put(f"{API}/datastores/x", json=nfs_body(), headers=h).status_code == 201
        token_id = admin.split("_")[1]
        rig.engine.tokens.revoke(token_id)
        assert c.get(f"{API}/datastores", headers=h).status_code == 401
    _, token_id, secret = ro.split("_", 2)  # the secret itself may contain '_'
    row: dict[str, Any] | None = rig.engine.store.get_token(token_id)
    assert row is not None and secret not in str(row)  # only the hash is stored


def test_health_and_drift_repair(client: TestClient, rig: Rig) -> None:
    client.put(f"{API}/datastores/ds", json=nfs_body())
    d = client.put(f"{API}/datastores/lun", json=iscsi_body()).json()
    assert client.get(f"{API}/system/health").json()["status"] == "ok"
    rig.ganesha.restart()  # ganesha lost its exports
    rig.lio.remove_target(d["iscsi"]["iqn"])  # someone removed a target by hand
    drift = client.get(f"{API}/system/drift").json()
    assert drift["in_sync"] is False
    assert {i["kind"] for i in drift["items"]} == {"add_export", "apply_target"}
    h = client.get(f"{API}/system/health").json()
    assert h["status"] == "degraded" and h["in_sync"] is False
    r = client.post(f"{API}/system/reconcile").json()
    assert len(r["applied"]) == 2 and r["errors"] == []
    assert client.get(f"{API}/system/drift").json() == {"in_sync": True, "items": []}
    # health answers from the watcher's last check (no host call of its own) ...
    rig.ganesha.down = True
    assert client.get(f"{API}/system/health").json()["components"]["ganesha"]["ok"] is True
    rig.engine.reconciler.check()  # ... which the watcher runs every health_interval
    h = client.get(f"{API}/system/health").json()
    assert h["status"] == "degraded" and h["components"]["ganesha"]["ok"] is False
    assert "ganesha" in h["message"] and h["age"] < 5 and h["checked_at"] > 0
    rig.zfs.down = True
    rig.engine.reconciler.check()
    h = client.get(f"{API}/system/health")
    assert h.status_code == 503 and h.json()["status"] == "down"
    assert client.get(f"{API}/system/version").json()["zds"]


def test_version_asks_the_tools_once(tmp_path: Path) -> None:
    """Issue 24: GET /system/version took 2.4-4.1 s a call on a fresh appliance (three
    commands each time); the versions cannot change while the API runs."""
    rig = make_rig(tmp_path)
    asked = count_version_asks(rig)
    client = TestClient(create_app(rig.engine, start=False))
    headers = {"Authorization": f"Bearer {rig.engine.tokens.create('t', 'readonly')}"}
    first = client.get(f"{API}/system/version", headers=headers).json()
    for _ in range(3):
        assert client.get(f"{API}/system/version", headers=headers).json() == first
    assert first["zds"] and len(asked) == 1


def test_startup_finishes_interrupted_work_and_adopts(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    rig.engine.start()
    app_client = TestClient(create_app(rig.engine, start=False))
    app_client.headers["Authorization"] = "Bearer " + rig.engine.tokens.create("a", "admin")
    app_client.put(f"{API}/datastores/keep", json=nfs_body())
    app_client.put(f"{API}/datastores/gone", json=iscsi_body())
    spec = rig.engine.datastores.validate_request("half", _req())
    # a crash after recording intent, before zfs create
    rig.engine.store.put_datastore(DatastoreRecord(spec, "creating", export_id=150))
    # a crash in the middle of a delete
    gone = rig.engine.store.get_datastore("gone")
    assert gone is not None
    rig.engine.store.put_datastore(gone.with_state("deleting"))
    # the database lost a record the pool still describes
    rig.engine.store.delete_datastore("keep")
    rig.ganesha.restart()
    report = rig.engine.start()
    assert report.errors == []
    names = {r.name: r.state for r in rig.engine.store.list_datastores()}
    assert names == {"half": "ready", "keep": "ready"}
    assert {e.path for e in rig.ganesha.list_exports()} == {
        "/tank/datastores/half", "/tank/datastores/keep"}
    assert rig.lio.list_targets() == []
    assert rig.zfs.get_dataset("tank/datastores/gone") is None
    assert rig.engine.system.drift().in_sync
    assert rig.engine.store.next_export_id() > 150
    rig.engine.close()


def _req() -> Any:
    from appliance.services.datastores import DatastoreRequest

    return DatastoreRequest(protocol="nfs3", size="1G")


def test_openapi_lists_every_resource() -> None:
    from api.openapi import openapi_document

    doc = openapi_document()
    paths = set(doc["paths"])
    for p in ["/api/v1/datastores", "/api/v1/datastores/{name}",
              "/api/v1/datastores/{name}/snapshots",
              "/api/v1/datastores/{name}/snapshots/{snapshot}/rollback",
              "/api/v1/datastores/{name}/snapshots/{snapshot}/clones",
              "/api/v1/datastores/{name}/attach", "/api/v1/pools", "/api/v1/pools/{name}",
              "/api/v1/pools/{name}/scrub", "/api/v1/pools/{name}/export",
              "/api/v1/pools/{name}/import", "/api/v1/initiator-groups/{name}",
              "/api/v1/jobs/{job_id}", "/api/v1/system/health", "/api/v1/system/drift",
              "/api/v1/system/version"]:
        assert p in paths, p
    put = doc["paths"]["/api/v1/datastores/{name}"]["put"]
    schema = doc["components"]["schemas"]["DatastorePut"]
    assert schema.get("examples") and "409" in put["responses"]


def test_engine_never_imports_fastapi() -> None:
    import subprocess
    import sys

    code = ("import sys, appliance.engine, appliance.firstboot, appliance.services.datastores;"
            "print('fastapi' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_firstboot_demo_pool_and_token(tmp_path: Path) -> None:
    from appliance.fake_hosts import fake_hosts
    from appliance.firstboot import run_firstboot
    from appliance.settings import Settings

    settings = Settings().with_state_dir(tmp_path)
    hosts = fake_hosts(None, disks={str(tmp_path / "pools" / "tank" / f"disk{i}.img"): 8 * GiB
                                    for i in range(2)})
    local = hosts.local
    local.fw_cfg["admin-token"] = "zds_0123456789ab_" + "t" * 43
    engine = Engine.create(settings, hosts.adapters())
    result = run_firstboot(engine)
    assert result.pool == "tank" and result.pool_created and result.demo_pool
    assert result.token_source == "fw_cfg"
    assert result.token is not None and engine.tokens.verify(result.token).role == "admin"
    assert local.files[str(settings.admin_token_file)] == result.token
    again = run_firstboot(engine)  # idempotent; the token is not shown again
    assert not again.pool_created and again.token is None and again.token_source == "kept"
    engine.close()


def test_a_revoked_admin_token_stays_revoked_across_boots(tmp_path: Path) -> None:
    """Issue 22 item 5: first boot used to import the fw_cfg/file token again whenever
    its id was missing, i.e. after every revoke."""
    from appliance.errors import Unauthorized
    from appliance.fake_hosts import fake_hosts
    from appliance.firstboot import run_firstboot
    from appliance.settings import Settings

    settings = Settings().with_state_dir(tmp_path)
    hosts = fake_hosts(None, disks={})
    token = "zds_0123456789ab_" + "t" * 43
    hosts.local.fw_cfg["admin-token"] = token
    engine = Engine.create(settings, hosts.adapters())
    try:
        assert run_firstboot(engine).token == token
        engine.tokens.create("ops", "admin")
        engine.tokens.revoke("0123456789ab")
        for _ in range(2):  # the next boots, fw_cfg and the token file still there
            assert run_firstboot(engine).token is None
            with pytest.raises(Unauthorized):
                engine.tokens.verify(token)
    finally:
        engine.close()


def test_an_appliance_older_than_the_record_imports_nothing(tmp_path: Path) -> None:
    """Tokens exist but no record of first boot (an update): not a first boot."""
    from appliance.fake_hosts import fake_hosts
    from appliance.firstboot import ADMIN_TOKEN_FACT, run_firstboot
    from appliance.settings import Settings

    settings = Settings().with_state_dir(tmp_path)
    hosts = fake_hosts(None, disks={})
    hosts.local.fw_cfg["admin-token"] = "zds_0123456789ab_" + "t" * 43
    engine = Engine.create(settings, hosts.adapters())
    try:
        engine.tokens.create("admin", "admin")
        result = run_firstboot(engine)
        assert result.token is None and len(engine.tokens.list()) == 1
        assert engine.ctx.store.get_fact(ADMIN_TOKEN_FACT) == "kept"
    finally:
        engine.close()


def test_firstboot_imports_the_pool_a_new_system_disk_finds(tmp_path: Path) -> None:
    from appliance.firstboot import run_firstboot

    rig = make_rig(tmp_path)
    rig.engine.start()
    rig.engine.datastores.put("kept", _req())
    rig.zfs.export_pool("tank")
    rig.engine.store.delete_datastore("kept")  # a new system disk: no records
    result = run_firstboot(rig.engine)
    assert result.pool == "tank" and not result.pool_created
    assert "imported pool 'tank'" in result.messages
    assert rig.engine.store.get_datastore("kept") is not None
    assert [e.path for e in rig.ganesha.list_exports()] == ["/tank/datastores/kept"]
    rig.engine.close()


def test_a_pool_another_system_did_not_export_needs_force(tmp_path: Path) -> None:
    from appliance.firstboot import run_firstboot

    rig = make_rig(tmp_path)
    rig.engine.start()
    rig.engine.datastores.put("kept", _req())
    rig.zfs.export_pool("tank")
    rig.zfs.foreign.add("tank")
    result = run_firstboot(rig.engine)
    assert result.pool is None and not result.pool_created  # nothing made over it
    assert any("force=true" in m for m in result.messages), result.messages
    assert "tank" in rig.zfs.importable_pools()
    job = rig.engine.jobs.wait(rig.engine.pools.import_("tank").id, 10)
    assert job.state == "failed" and job.error is not None
    assert "force=true only if" in job.error["message"]
    assert "tank" in rig.zfs.importable_pools()  # the failed import changed nothing
    rig.engine.store.delete_datastore("kept")
    job = rig.engine.jobs.wait(rig.engine.pools.import_("tank", force=True).id, 10)
    assert job.state == "succeeded" and job.result is not None, job.error
    assert job.result["adopted"] == ["kept"]
    rig.engine.close()


def test_background_reconcile_repairs_drift(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    rig.engine.start()
    rig.engine.datastores.put("ds", _req())
    rig.ganesha.restart()  # exports lost behind our back
    rig.engine.watcher.reconcile_interval = 0.05
    rig.engine.watcher.start()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not rig.ganesha.list_exports():
        time.sleep(0.05)
    assert [e.path for e in rig.ganesha.list_exports()] == ["/tank/datastores/ds"]
    rig.engine.close()


def test_framework_refusals_use_the_error_envelope(client: TestClient) -> None:
    r = client.put(f"{API}/datastores/ds", content=b"{not json",
                   headers={"Content-Type": "application/json"})
    assert r.status_code in (400, 422), r.text
    assert r.json()["error"]["code"] in ("bad_request", "invalid_input"), r.json()
    r = client.get(f"{API}/no-such-resource")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = client.post(f"{API}/datastores/ds")
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"
    assert set(r.headers["Allow"].split(", ")) == {"GET", "PUT", "DELETE"}, r.headers
    # PUT /initiator-groups answers 201 on create: documented
    ops = client.get("/openapi.json").json()["paths"]["/api/v1/initiator-groups/{name}"]
    assert "201" in ops["put"]["responses"]


def test_a_readonly_token_is_refused_on_every_mutating_operation(client: TestClient,
                                                                 rig: Rig) -> None:
    """Every POST, PUT, PATCH and DELETE of the OpenAPI document answers 403 to a readonly
    token (before anything runs), and every GET answers it something else."""
    ro = {"Authorization": "Bearer " + rig.engine.tokens.create("viewer", "readonly")}
    paths = client.get("/openapi.json").json()["paths"]
    mutating = [(m, p) for p, ops in paths.items() for m in ops
                if m in ("post", "put", "patch", "delete")]
    assert len(mutating) >= 15, mutating
    for method, path in mutating:
        url = re.sub(r"\{[^}]+\}", "x1", path)
        r = client.request(method.upper(), url, headers=ro, json={})
        assert r.status_code == 403, (method, path, r.status_code, r.text)
        assert r.json()["error"]["code"] == "forbidden"
    assert rig.engine.jobs.list() == [] and rig.engine.store.list_datastores() == []
    for path, ops in paths.items():
        if "get" in ops and "{" not in path and path != "/api/v1/system/health":
            assert client.get(path, headers=ro).status_code != 403, path
