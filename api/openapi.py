"""The OpenAPI document, generated without a running engine (for `zds openapi` and docs)."""

from __future__ import annotations

from typing import Any

from api.app import create_app


def openapi_document() -> dict[str, Any]:
    app = create_app(engine=None, start=False)  # type: ignore[arg-type]
    return app.openapi()
