"""The web console at /ui and the API reference at /docs: static files only (HTML, JS, CSS
shipped in the wheel).

The console is a client of the public REST API: it reads and changes everything through
/api/v1 with the token the user logs in with (kept in the tab's sessionStorage), so
everything a person does there a script can do with curl. A readonly token gets a console
without the controls that change anything (and the API refuses such changes anyway).
/docs renders the API's own /openapi.json (docs.js) instead of FastAPI's Swagger UI, which
loads from a CDN (docs/architecture.md says why not a local copy). Nothing is loaded from
anywhere else: the Content-Security-Policy of both allows this origin only.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

UI_DIR = Path(__file__).resolve().parent / "ui"
CSP = ("default-src 'self'; img-src 'self' blob: data:; style-src 'self'; "
       "script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
       "form-action 'self'")


def mount(app: FastAPI) -> None:
    """/ui (the console), /ui/static (its files and the reference's), /docs."""
    app.mount("/ui/static", StaticFiles(directory=UI_DIR / "static"), name="ui-static")

    @app.get("/ui", include_in_schema=False)
    def console() -> FileResponse:
        return FileResponse(UI_DIR / "index.html", headers={"Cache-Control": "no-cache"})

    @app.get("/ui/", include_in_schema=False)
    def console_slash() -> RedirectResponse:
        return RedirectResponse("/ui")

    @app.get("/docs", include_in_schema=False)
    def reference() -> FileResponse:
        return FileResponse(UI_DIR / "docs.html", headers={"Cache-Control": "no-cache"})

    app.add_middleware(SecurityHeaders)


def _covered(path: str) -> bool:
    return path == "/docs" or path == "/ui" or path.startswith("/ui/")


class SecurityHeaders:
    """The CSP and ``nosniff`` on every answer under /ui and /docs (a pure ASGI middleware:
    it only adds two headers to the response's start)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _covered(scope["path"]):
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers.setdefault("Content-Security-Policy", CSP)
                headers.setdefault("X-Content-Type-Options", "nosniff")
            await send(message)

        await self.app(scope, receive, send_with_headers)
