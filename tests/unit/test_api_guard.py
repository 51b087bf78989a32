"""The guard in front of the routes (api/guard.py): the token and the role are checked,
and the body's size capped, before a byte of the body is read; too many requests in
flight are an envelope 503 ``busy``; a token is verified once per request."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api import guard
from api.app import create_app
from appliance.services.tokens import Principal
from appliance.settings import Settings
from tests.unit.conftest import Rig, make_rig
from tests.unit.test_api_datastores import nfs_body

API = "/api/v1"


@pytest.fixture
def small(tmp_path: Path) -> Iterator[Rig]:
    """A rig whose API takes 4 KiB bodies (8 KiB probe results) and 2 requests at once."""
    settings = Settings(max_body=4096, max_result_body=8192, max_in_flight=2,
                        health_interval=0, reconcile_interval=0).with_state_dir(tmp_path)
    rig = make_rig(tmp_path, settings=settings)
    rig.engine.start()
    yield rig
    rig.engine.close()


class Sent:
    """What the app answered to :func:`call`, and how much of the body it read."""

    def __init__(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.body = b""
        self.chunks_read = 0
        self.read_when_answered = -1  # chunks read when the answer began
        self.asked_past_the_end = False  # receive() called after the last chunk

    @property
    def error(self) -> dict[str, Any]:
        err: dict[str, Any] = json.loads(self.body)["error"]
        return err


def call(app: FastAPI, method: str, path: str, headers: dict[str, str],
         chunks: list[bytes], *, stall: bool = False) -> Sent:
    """One request straight through the ASGI interface, its body sent in ``chunks``, so
    the test sees how many of them the app asked for; with ``stall`` the client stops
    sending after them without ending the body."""
    sent = Sent()

    async def run() -> None:
        done = asyncio.Event()

        async def receive() -> dict[str, Any]:
            if sent.chunks_read < len(chunks):
                sent.chunks_read += 1
                return {"type": "http.request", "body": chunks[sent.chunks_read - 1],
                        "more_body": stall or sent.chunks_read < len(chunks)}
            sent.asked_past_the_end = not stall
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                sent.read_when_answered = sent.chunks_read
                sent.status = message["status"]
                sent.headers = {k.decode().lower(): v.decode() for k, v in message["headers"]}
            elif message["type"] == "http.response.body":
                sent.body += message.get("body", b"")
                if not message.get("more_body"):
                    done.set()

        scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
                 "http_version": "1.1", "method": method, "scheme": "http", "path": path,
                 "raw_path": path.encode(), "query_string": b"", "root_path": "",
                 "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
                 "client": ("127.0.0.1", 40000), "server": ("127.0.0.1", 8443), "state": {}}
        await app(scope, receive, send)

    asyncio.run(run())
    return sent


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


BROKEN = [b'{"protocol": "nfs3", ', b"x" * 1000, b"not json at all"]


def test_the_token_and_role_are_checked_before_the_body_is_read(rig: Rig) -> None:
    app = create_app(rig.engine, start=False)
    ro = rig.engine.tokens.create("viewer", "readonly")
    announced = {"Content-Length": str(10 << 30), "Content-Type": "application/json"}
    for headers, status, code in [
        ({}, 401, "unauthorized"),
        (bearer("zds_000000000000_" + "x" * 43), 401, "unauthorized"),
        (bearer("garbage"), 401, "unauthorized"),
        (bearer(ro), 403, "forbidden"),
    ]:
        sent = call(app, "PUT", f"{API}/datastores/x", {**announced, **headers}, BROKEN)
        assert (sent.status, sent.error["code"]) == (status, code), sent.body
        assert sent.chunks_read == 0, "the body was read before the token was checked"
        # the client is still sending 10 GiB: the connection is not kept for another request
        assert sent.headers["connection"] == "close"
        if status == 401:
            assert sent.headers["www-authenticate"] == "Bearer"
    assert rig.engine.store.get_datastore("x") is None


def test_broken_json_without_a_token_is_a_401_not_a_parse_error(rig: Rig) -> None:
    with TestClient(create_app(rig.engine, start=False)) as c:
        r = c.put(f"{API}/datastores/x", content=b"{broken",
                  headers={"Content-Type": "application/json"})
        assert r.status_code == 401, r.text
        assert r.json()["error"]["code"] == "unauthorized"
        r = c.put("/metrics", content=b"{broken")
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"


def test_a_body_over_max_body_is_413_and_changes_nothing(small: Rig) -> None:
    app = create_app(small.engine, start=False)
    admin = bearer(small.engine.tokens.create("boss", "admin"))
    body = json.dumps({**nfs_body(), "pad": "x" * 5000}).encode()
    chunks = [body[i:i + 1000] for i in range(0, len(body), 1000)]
    # announced by Content-Length or streamed without one, the 413 comes once the rest of
    # the body was read and dropped (so closing the connection sends no reset)
    for framing in ({"Content-Length": str(len(body))}, {"Transfer-Encoding": "chunked"}):
        sent = call(app, "PUT", f"{API}/datastores/big", {**admin, **framing}, chunks)
        assert (sent.status, sent.error["code"]) == (413, "too_large"), sent.body
        assert sent.read_when_answered == len(chunks), framing
        assert not sent.asked_past_the_end, framing
        assert sent.error["detail"] == {"limit": 4096} and "max_body" in sent.error["message"]
        assert sent.headers["connection"] == "close"
    # the chunk that crosses the limit is the last: answered without asking for more
    sent = call(app, "PUT", f"{API}/datastores/big", {**admin, "Transfer-Encoding": "chunked"},
                [body])
    assert (sent.status, sent.read_when_answered, sent.asked_past_the_end) == (413, 1, False)
    # a length beyond what the guard drops: refused before reading a byte
    huge = {**admin, "Content-Length": str(4096 + guard.DISCARD_BYTES + 1)}
    sent = call(app, "PUT", f"{API}/datastores/big", huge, chunks)
    assert (sent.status, sent.chunks_read) == (413, 0), sent.body
    with TestClient(app, headers=admin) as c:
        r = c.put(f"{API}/datastores/big", content=iter([body]))  # chunked over HTTP
        assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"
        assert small.engine.store.get_datastore("big") is None
        # a body under the limit goes through
        assert c.put(f"{API}/datastores/small", json=nfs_body()).status_code == 201


def test_a_413_waits_no_longer_than_discard_seconds_for_a_stalled_body(
        small: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(guard, "DISCARD_SECONDS", 0.2)
    app = create_app(small.engine, start=False)
    admin = bearer(small.engine.tokens.create("boss", "admin"))
    sent = call(app, "PUT", f"{API}/datastores/big", {**admin, "Content-Length": "9000"},
                [b"x" * 5000], stall=True)
    assert (sent.status, sent.error["code"]) == (413, "too_large"), sent.body
    assert sent.headers["connection"] == "close"


def test_a_client_probe_result_may_be_larger_up_to_max_result_body(small: Rig) -> None:
    with TestClient(create_app(small.engine, start=False),
                    headers=bearer(small.engine.tokens.create("boss", "admin"))) as c:
        r = c.post(f"{API}/probes/results", json={"pad": "x" * 6000})
        assert r.status_code == 422, r.text  # read and refused by the service, not the size
        r = c.post(f"{API}/probes/results", json={"pad": "x" * 9000})
        assert r.status_code == 413 and "max_result_body" in r.json()["error"]["message"]
        r = c.put(f"{API}/datastores/x", json={**nfs_body(), "pad": "x" * 6000})
        assert r.status_code == 413  # the larger limit is for probe results only


def test_too_many_requests_in_flight_is_an_envelope_503_busy(small: Rig) -> None:
    """Two requests held in flight (max_in_flight=2): a third is a 503 ``busy`` with
    Retry-After; health without a token still answers; the slots free up afterwards."""
    gate = threading.Event()
    job = small.engine.jobs.submit("test.hold", None, lambda ctx: {"released": gate.wait(30)})
    app = create_app(small.engine, start=False)
    admin = bearer(small.engine.tokens.create("boss", "admin"))

    async def run() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://zds",
                                     headers=admin, timeout=30) as c:
            held = [asyncio.create_task(c.get(f"{API}/jobs/{job.id}", params={"wait": 20}))
                    for _ in range(2)]
            try:
                await asyncio.sleep(0.5)  # both in flight, waiting on the job
                assert not any(t.done() for t in held)
                r = await c.get(f"{API}/datastores")
                assert r.status_code == 503, r.text
                err = r.json()["error"]
                assert err["code"] == "busy" and err["detail"] == {"limit": 2}
                assert r.headers["retry-after"] == "1"
                health = await c.get(f"{API}/system/health", headers={"Authorization": ""})
                assert health.status_code == 200, health.text
                # with a token too: health is never refused, it gives the public answer
                health = await c.get(f"{API}/system/health")
                assert health.status_code == 200 and "message" not in health.json()
            finally:
                gate.set()
            assert [(await t).status_code for t in held] == [200, 200]
            for _ in range(3):
                assert (await c.get(f"{API}/datastores")).status_code == 200

    asyncio.run(run())


def test_a_token_is_verified_once_per_request(rig: Rig, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    tokens = rig.engine.tokens
    admin = tokens.create("boss", "admin")
    calls: list[str] = []
    real = tokens.verify

    def counting(token: str) -> Principal:
        calls.append(token)
        return real(token)

    monkeypatch.setattr(tokens, "verify", counting)
    with TestClient(create_app(rig.engine, start=False)) as c:
        assert c.get(f"{API}/datastores", headers=bearer(admin)).status_code == 200
        assert calls == [admin]
        # a token that is not even shaped like one costs no lookup at all
        assert c.get(f"{API}/datastores", headers=bearer("nope")).status_code == 401
        assert calls == [admin]
