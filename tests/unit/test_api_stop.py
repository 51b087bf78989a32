"""The API server's stop over TLS: an idle keep-alive client does not hold it 30 s
(asyncio's wait for the client's close_notify), a request in flight still gets its answer.
A real uvicorn server on 127.0.0.1 in a thread, with a certificate made by openssl."""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from api.serve import PromptStopServer
from tests.unit.http_server import free_port, start_in_thread


async def quick(_: Request) -> PlainTextResponse:
    return PlainTextResponse("quick")


async def slow(_: Request) -> PlainTextResponse:
    await asyncio.sleep(1.5)
    return PlainTextResponse("slow")


APP = Starlette(routes=[Route("/quick", quick), Route("/slow", slow)])


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj",
                    "/CN=localhost", "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem")],
                   check=True, capture_output=True)
    return d / "cert.pem", d / "key.pem"


class Running:
    def __init__(self, server: uvicorn.Server, thread: threading.Thread, url: str) -> None:
        self.server, self.thread, self.url = server, thread, url

    def stop(self) -> float:
        """Asks the server to stop (as SIGTERM does); the seconds until it has."""
        t0 = time.monotonic()
        self.server.should_exit = True
        self.thread.join(timeout=60)
        assert not self.thread.is_alive()
        return time.monotonic() - t0


@pytest.fixture
def running(certificate: tuple[Path, Path]) -> Iterator[Running]:
    port = free_port()
    server = PromptStopServer(uvicorn.Config(
        APP, host="127.0.0.1", port=port, log_level="warning", timeout_keep_alive=75,
        ssl_certfile=str(certificate[0]), ssl_keyfile=str(certificate[1])))
    thread = start_in_thread(server)
    r = Running(server, thread, f"https://127.0.0.1:{port}")
    yield r
    server.should_exit = True
    thread.join(timeout=60)


def test_an_idle_tls_connection_does_not_hold_the_stop(running: Running) -> None:
    """Before: 30 s, until asyncio gave up on the client's close_notify (uvicorn.Server)."""
    with httpx.Client(verify=False) as client:
        assert client.get(f"{running.url}/quick").text == "quick"  # now idle in the pool
        took = running.stop()
    assert took < 10, f"the stop waited {took:.1f} s for an idle client"


def test_a_request_in_flight_is_answered_before_the_stop(running: Running) -> None:
    answer: dict[str, Any] = {}

    def ask() -> None:
        with httpx.Client(verify=False) as client:
            r = client.get(f"{running.url}/slow")
            answer["status"], answer["text"] = r.status_code, r.text

    asker = threading.Thread(target=ask)
    asker.start()
    time.sleep(0.5)  # the request is in the app's sleep
    took = running.stop()
    asker.join(timeout=10)
    assert answer == {"status": 200, "text": "slow"}
    assert took < 10
