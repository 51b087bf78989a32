"""Health without a token is status and codes only (issue 22, item 7): the details can
carry what a snapshot hook printed (a password, say), pool names and replication
targets. A valid token of any role gets the full answer."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient

from api.app import create_app
from tests.unit.conftest import Rig
from tests.unit.test_policies_api import ds, policy, run

API = "/api/v1"
PUBLIC = {"status", "components", "in_sync", "checked_at", "age", "started_at"}


def test_health_without_a_token_tells_status_and_codes_only(client: TestClient,
                                                            rig: Rig) -> None:
    rig.hosts.hooks.programs["leaky"] = (3, "", "login failed for db password=hunter2\n", 0.1)
    ds(client, "a", labels={"protect": "gold"})
    policy(client, "p", hooks={"pre": ["leaky"]})
    run(client, "p", state="failed")
    rig.hosts.zfs.down = True  # and ZFS down: a 503 has the same two shapes
    rig.engine.reconciler.check()

    full = client.get(f"{API}/system/health")
    assert full.status_code == 503
    assert "hunter2" in json.dumps(full.json())  # what an operator needs, with a token
    assert {"message", "pools", "alerts", "drift"} <= set(full.json())

    readonly = rig.engine.tokens.create("monitor", "readonly")
    with TestClient(create_app(rig.engine, start=False)) as anonymous:
        for headers in ({}, {"Authorization": "Bearer zds_000000000000_" + "x" * 43},
                        {"Authorization": "Basic dXNlcjpwdw=="}):
            r = anonymous.get(f"{API}/system/health", headers=headers)
            body = r.json()
            assert r.status_code == 503 and set(body) == PUBLIC, body
            assert body["status"] == "down"
            assert body["components"]["snapshot_policies"] == {"ok": False}
            assert all(set(c) == {"ok"} for c in body["components"].values())
            assert "hunter2" not in r.text and "leaky" not in r.text
        r = anonymous.get(f"{API}/system/health", headers={"Authorization": f"Bearer {readonly}"})
        assert "hunter2" in r.text and r.json()["components"]["zfs"]["detail"]


def test_the_openapi_document_shows_both_shapes(client: TestClient) -> None:
    op = client.get("/openapi.json").json()["paths"][f"{API}/system/health"]["get"]
    for status in ("200", "503"):
        refs = {s["$ref"].rsplit("/", 1)[1]
                for s in op["responses"][status]["content"]["application/json"]["schema"]
                ["anyOf"]}
        assert refs == {"HealthOut", "HealthSummaryOut"}, status
