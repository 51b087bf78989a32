"""The web console at /ui: static files only (HTML, JS, CSS shipped in the wheel).

The console is a client of the public REST API: it reads and changes everything through
/api/v1 with the token the user logs in with (kept in the tab's sessionStorage), so
everything a person does there a script can do with curl. A readonly token gets a console
without the controls that change anything (and the API refuses such changes anyway).
Nothing is loaded from anywhere else: the Content-Security-Policy allows this origin only.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request, Response
from fastapi.responses import FileResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

UI_DIR = Path(__file__).resolve().parent / "ui"
CSP = ("default-src 'self'; img-src 'self' blob: data:; style-src 'self'; "
       "script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
       "form-action 'self'")


def mount(app: FastAPI) -> None:
    app.mount("/ui/static", StaticFiles(directory=UI_DIR / "static"), name="ui-static")

    @app.get("/ui", include_in_schema=False)
    def console() -> FileResponse:
        return FileResponse(UI_DIR / "index.html", headers={"Content-Security-Policy": CSP,
                                                            "Cache-Control": "no-cache"})

    @app.get("/ui/", include_in_schema=False)
    def console_slash() -> RedirectResponse:
        return RedirectResponse("/ui")

    @app.middleware("http")
    async def csp_on_assets(request: Request, call_next):  # type: ignore[no-untyped-def]
        response: Response = await call_next(request)
        if request.url.path.startswith("/ui"):
            response.headers.setdefault("Content-Security-Policy", CSP)
            response.headers.setdefault("X-Content-Type-Options", "nosniff")
        return response
