"""Runs the API's ASGI app under uvicorn, with one change to how uvicorn stops."""

from __future__ import annotations

from typing import Any

import uvicorn


class PromptStopServer(uvicorn.Server):
    """uvicorn's server, except that an idle TLS keep-alive connection does not hold a stop.

    On a stop uvicorn closes each idle connection and waits until every connection is
    gone. Over TLS, asyncio's close sends close_notify and waits for the client's own (up
    to its ``ssl_shutdown_timeout``, 30 s), which a client that is not reading never sends:
    httpx's pool, a browser, any script between two requests. So while any client held an
    idle connection, each ``systemctl stop zds-api`` (a restart, a reboot, a cluster
    moving the API to the other node) took 30 s longer; measured under TCG, a restart took
    57 s against 27 s. Idle connections are aborted instead (a TCP reset; a client opens a
    new connection for its next request). A connection with a request in flight still gets
    its answer: uvicorn closes it after the response.
    """

    async def shutdown(self, sockets: Any = None) -> None:
        for connection in list(self.server_state.connections):
            # uvicorn's own test for "idle" (its protocols' shutdown()): no request yet,
            # or the last response sent
            cycle = getattr(connection, "cycle", None)
            transport = getattr(connection, "transport", None)
            if transport is not None and (cycle is None or cycle.response_complete):
                transport.abort()
        await super().shutdown(sockets)


def run(app: Any, **options: Any) -> None:
    """``uvicorn.run(app, **options)`` for an app object, on :class:`PromptStopServer`."""
    PromptStopServer(uvicorn.Config(app, **options)).run()
