"""The API over an engine on a real local HTTP server (uvicorn in a thread), for tests
that need a socket: the CLI, the benchmark's client, health under a burst."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import uvicorn

from api.app import create_app
from appliance.engine import Engine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_in_thread(srv: uvicorn.Server) -> threading.Thread:
    """Runs ``srv`` in a daemon thread; returns once it accepts connections."""
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert srv.started
    return thread


def serve(engine: Engine) -> Iterator[str]:
    """Yields the server's base URL once it accepts connections; stops it after."""
    port = free_port()
    srv = uvicorn.Server(uvicorn.Config(create_app(engine, start=False), host="127.0.0.1",
                                        port=port, log_level="warning"))
    thread = start_in_thread(srv)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(timeout=10)
