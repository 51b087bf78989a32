"""/api/v1/replications and /api/v1/replication over HTTP (two appliances on fakes), and
`zds replication` against a live server: status codes, the error envelope, and that a
refused request changes nothing."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi.testclient import TestClient

from api.app import create_app
from api.cli import main
from appliance.host.fakes.replication import FakeNetwork
from appliance.host.fakes.zfs import MiB
from tests.unit.test_replication import PREFIX, TARGET_HOST, Box, make_box


@pytest.fixture
def apis(tmp_path: Path) -> Iterator[tuple[Box, TestClient, Box, TestClient]]:
    net = FakeNetwork()
    src = make_box(tmp_path, "zds-a", "tank")
    dst = make_box(tmp_path, "zds-b", "backup")
    net.attach("198.51.100.10", src.ssh)
    net.attach(TARGET_HOST, dst.ssh)
    clients = []
    for box in (src, dst):
        c = TestClient(create_app(box.engine, start=False))
        c.headers["Authorization"] = f"Bearer {box.engine.tokens.create('t', 'admin')}"
        clients.append(c)
    with clients[0] as a, clients[1] as b:
        yield src, a, dst, b
    src.engine.close()
    dst.engine.close()


def ok(resp: Any, status: int = 200) -> Any:
    assert resp.status_code == status, resp.text
    return resp.json() if resp.content else None


def err(resp: Any, status: int, code: str) -> str:
    assert resp.status_code == status, resp.text
    body = resp.json()["error"]
    assert body["code"] == code, body
    return str(body["message"])


def test_key_exchange_replicate_and_promote_over_http(
        apis: tuple[Box, TestClient, Box, TestClient]) -> None:
    src, a, _dst, b = apis
    # 1. the source's key, authorized on the target for one prefix
    ident = ok(a.get("/api/v1/replication/identity"))
    assert ident["public_key"].startswith("ssh-ed25519 ") and ident["hostname"] == "zds-a"
    key = ok(b.put("/api/v1/replication/authorized-keys/zds-a", json={
        "public_key": ident["public_key"], "dataset_prefix": PREFIX}), 201)
    assert key["dataset_prefix"] == PREFIX
    ok(b.put("/api/v1/replication/authorized-keys/zds-a", json={
        "public_key": ident["public_key"], "dataset_prefix": PREFIX}), 200)
    assert [k["name"] for k in ok(b.get("/api/v1/replication/authorized-keys"))] == ["zds-a"]
    host_key = ok(b.get("/api/v1/replication/identity"))["host_keys"][0]

    # 2. a datastore and its replication, the target's host key pinned explicitly
    ok(a.put("/api/v1/datastores/nfs01", json={"protocol": "nfs3", "size": "10G"}), 201)
    src.zfs.write("tank/datastores/nfs01", 100 * MiB, content="data")
    body = {"datastore": "nfs01", "interval": "15m",
            "target": {"host": TARGET_HOST, "dataset": f"{PREFIX}/nfs01",
                       "host_key": host_key}}
    rep = ok(a.put("/api/v1/replications/r1", json=body), 201)
    assert rep["outgoing"]["status"]["state"] == "never"
    assert rep["outgoing"]["target"]["host_key"] == host_key
    assert rep["outgoing"]["interval"] == 900 and rep["incoming"] is None
    ok(a.put("/api/v1/replications/r1", json=body), 200)

    check = ok(a.post("/api/v1/replications/r1/check"))
    assert not check["exists"] and not check["in_sync"] and "in full" in check["next_step"]
    job = ok(a.post("/api/v1/replications/r1/run", params={"wait": 10}), 202)
    assert job["state"] == "succeeded" and job["kind"] == "replication.run"
    assert job["result"]["bytes"] >= 100 * MiB
    st = ok(a.get("/api/v1/replications/r1"))["outgoing"]["status"]
    assert st["state"] == "ok" and st["last_bytes"] == job["result"]["bytes"]
    assert st["lag_seconds"] is not None and st["last_error"] is None
    assert st["next_run"] is not None
    assert ok(a.post("/api/v1/replications/r1/check"))["in_sync"]
    health = ok(a.get("/api/v1/system/health"))
    assert health["components"]["replication"]["ok"]

    # 3. on the target: the replica, then promoted and served
    (inc,) = ok(b.get("/api/v1/replications"))
    assert inc["name"] == "r1" and inc["outgoing"] is None
    assert inc["incoming"]["source"] == "zds-a/nfs01" and inc["incoming"]["snapshots"] == 1
    # the source's path /tank/... is no datastore path of pool backup: asked for, 409
    resp = b.post("/api/v1/replications/r1/promote", json={"nfs_path": "source"})
    assert "not a datastore path of this pool" in err(resp, 409, "conflict")
    assert resp.json()["error"]["detail"] == {"source_path": "/tank/datastores/nfs01",
                                              "allowed": "/backup/datastores"}
    err(b.post("/api/v1/replications/r1/promote", json={"keep_access": "maybe"}), 422,
        "invalid_input")
    assert ok(b.get("/api/v1/datastores")) == []
    out = ok(b.post("/api/v1/replications/r1/promote", json={
        "name": "nfs01", "nfs": {"clients": [{"match": "192.0.2.0/24"}]}}), 201)
    ds = out["datastore"]
    assert ds["serving"] and ds["pool"] == "backup" and ds["nfs"]["path"] == (
        "/backup/datastores/nfs01")
    assert ds["nfs"]["clients"] == [{"match": "192.0.2.0/24", "access": "rw"}]
    assert any("esxcli storage nfs add" in line for line in ds["attach"]["esxi"])
    assert any("Reverse replication" in n for n in out["notes"])
    assert ok(b.get("/api/v1/datastores/nfs01"))["serving"]


def test_refusals_use_the_error_envelope(apis: tuple[Box, TestClient, Box, TestClient]
                                         ) -> None:
    src, a, dst, b = apis
    ok(a.put("/api/v1/datastores/nfs01", json={"protocol": "nfs3", "size": "10G"}), 201)
    target = {"host": TARGET_HOST, "dataset": f"{PREFIX}/nfs01"}
    assert "a whole number with s, m, h or d" in err(a.put("/api/v1/replications/r1", json={
        "datastore": "nfs01", "target": target, "interval": "often"}), 422, "invalid_input")
    err(a.put("/api/v1/replications/r1", json={"datastore": "nfs01", "target": target,
                                               "color": "red"}), 422, "invalid_input")
    err(a.put("/api/v1/replications/r1", json={"datastore": "nope", "target": target}),
        404, "not_found")
    err(a.put("/api/v1/replications/Bad", json={"datastore": "nfs01", "target": target}),
        422, "invalid_input")
    assert ok(a.get("/api/v1/replications")) == []
    err(a.get("/api/v1/replications/r1"), 404, "not_found")
    err(a.post("/api/v1/replications/r1/run"), 404, "not_found")

    ok(a.put("/api/v1/replications/r1", json={"datastore": "nfs01", "target": target}), 201)
    # no key authorized on the target yet
    assert "authorize" in err(a.post("/api/v1/replications/r1/check"), 409, "key_refused")
    job = ok(a.post("/api/v1/replications/r1/run", params={"wait": 10}), 202)
    assert job["state"] == "failed" and job["error"]["code"] == "key_refused"
    health = ok(a.get("/api/v1/system/health"))
    assert health["status"] == "degraded" and not health["components"]["replication"]["ok"]
    assert "r1: last run failed" in health["message"]
    # a replicated datastore is not deleted
    assert "replicated by r1" in err(a.delete("/api/v1/datastores/nfs01"), 409, "conflict")
    ok(a.get("/api/v1/datastores/nfs01"))
    # unreachable
    dst.ssh.up = False
    err(a.post("/api/v1/replications/r1/check"), 503, "target_unreachable")
    dst.ssh.up = True
    # bad keys on the target
    err(b.put("/api/v1/replication/authorized-keys/x", json={
        "public_key": "ssh-ed25519 AAAA", "dataset_prefix": "backup/r"}), 422, "invalid_input")
    err(b.put("/api/v1/replication/authorized-keys/x", json={
        "public_key": src.ssh.public_key(), "dataset_prefix": "backup"}), 422, "invalid_input")
    err(b.delete("/api/v1/replication/authorized-keys/x"), 404, "not_found")
    # a prefix in ZDS's own datasets (422), or nested with another key's (409)
    msg = err(b.put("/api/v1/replication/authorized-keys/x", json={
        "public_key": src.ssh.public_key(), "dataset_prefix": "backup/zds-probes/x"}), 422,
        "invalid_input")
    assert "backup/zds-probes" in msg
    ok(b.put("/api/v1/replication/authorized-keys/zds-c", json={
        "public_key": dst.ssh.public_key(), "dataset_prefix": "backup/replicas/zds-c"}), 201)
    resp = b.put("/api/v1/replication/authorized-keys/x", json={
        "public_key": src.ssh.public_key(), "dataset_prefix": "backup/replicas/zds-c/b"})
    assert "backup/replicas/zds-c" in err(resp, 409, "conflict") and \
        "zds-c" in resp.json()["error"]["message"]
    assert resp.json()["error"]["detail"] == {"key": "zds-c",
                                              "dataset_prefix": "backup/replicas/zds-c"}
    ok(b.delete("/api/v1/replication/authorized-keys/zds-c"), 204)
    assert ok(b.get("/api/v1/replication/authorized-keys")) == []
    err(b.post("/api/v1/replications/r1/promote"), 404, "not_found")
    # readonly tokens read only
    ro = src.engine.tokens.create("ro", "readonly")
    resp = a.post("/api/v1/replications/r1/run", headers={"Authorization": f"Bearer {ro}"})
    err(resp, 403, "forbidden")
    ok(a.delete("/api/v1/replications/r1"), 204)
    ok(a.delete("/api/v1/datastores/nfs01", params={"wait": 5}), 202)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_cli_drives_replication(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    net = FakeNetwork()
    src = make_box(tmp_path, "zds-a", "tank")
    dst = make_box(tmp_path, "zds-b", "backup")
    net.attach("198.51.100.10", src.ssh)
    net.attach(TARGET_HOST, dst.ssh)
    servers = []
    urls = []
    for box in (src, dst):
        port = free_port()
        srv = uvicorn.Server(uvicorn.Config(create_app(box.engine, start=False),
                                            host="127.0.0.1", port=port, log_level="warning"))
        threading.Thread(target=srv.run, daemon=True).start()
        deadline = time.monotonic() + 10
        while not srv.started and time.monotonic() < deadline:
            time.sleep(0.02)
        servers.append(srv)
        urls.append(f"http://127.0.0.1:{port}")
    tokens = [b.engine.tokens.create("cli", "admin") for b in (src, dst)]

    def zds(i: int, *argv: str) -> tuple[int, str]:
        rc = main(["--server", urls[i], "--token", tokens[i], *argv])
        return rc, capsys.readouterr().out

    try:
        rc, out = zds(0, "replication", "identity")
        key = out.strip()
        assert rc == 0 and key.startswith("ssh-ed25519")
        rc, out = zds(1, "replication", "authorize", "zds-a", "--public-key", key,
                      "--prefix", PREFIX)
        assert rc == 0 and "authorized zds-a" in out
        zds(0, "datastore", "put", "nfs01", "--protocol", "nfs3", "--size", "10G",
            "--client", "192.0.2.0/24")
        rc, out = zds(0, "--json", "replication", "put", "r1", "--datastore", "nfs01",
                      "--target-host", TARGET_HOST, "--target-dataset", f"{PREFIX}/nfs01",
                      "--interval", "1h")
        assert rc == 0 and json.loads(out)["outgoing"]["interval"] == 3600
        rc, out = zds(0, "replication", "run", "r1", "--wait", "10")
        assert rc == 0 and "succeeded" in out
        rc, out = zds(0, "replication", "list")
        assert "r1" in out and "source" in out and "ok" in out
        rc, out = zds(1, "replication", "list")
        assert "target" in out and "replica" in out
        rc, out = zds(1, "replication", "promote", "r1", "--as", "nfs01-dr", "--keep-access")
        assert rc == 0 and "promoted to datastore nfs01-dr" in out
        rec = dst.engine.store.get_datastore("nfs01-dr")
        assert rec is not None and [c.match for c in rec.spec.nfs_clients] == ["192.0.2.0/24"]
        dst.ssh.up = False
        rc, out = zds(0, "replication", "run", "r1", "--wait", "10")
        assert rc == 1 and "target_unreachable" not in out and "cannot reach" in out
    finally:
        for srv in servers:
            srv.should_exit = True
        src.engine.close()
        dst.engine.close()
