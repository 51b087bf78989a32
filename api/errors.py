"""The API's one error envelope: ``{"error": {"code", "message", "detail"}}``.

Everything that refuses a request builds its answer here: the exception handlers of
api/app.py (engine errors, the framework's own refusals) and the guard in front of the
routes (api/guard.py: token, size, load).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi.responses import JSONResponse

from appliance.errors import ZdsError


def error_response(status: int, code: str, message: str, detail: Mapping[str, Any] | None = None,
                   headers: Mapping[str, str] | None = None) -> JSONResponse:
    """A refusal in the envelope; a 401 says which scheme to use (``WWW-Authenticate``)."""
    all_headers = dict(headers or {})
    if status == 401:
        all_headers.setdefault("WWW-Authenticate", "Bearer")
    return JSONResponse(status_code=status, headers=all_headers, content={
        "error": {"code": code, "message": message, "detail": dict(detail or {})}})


def engine_error_response(exc: ZdsError, headers: Mapping[str, str] | None = None
                          ) -> JSONResponse:
    """An engine error as the HTTP status it names."""
    return error_response(exc.status, exc.code, exc.message, exc.detail, headers)
