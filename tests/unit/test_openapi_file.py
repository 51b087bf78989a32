"""docs/openapi.json is what `zds openapi` prints today (regenerate it when the API moves)."""

from __future__ import annotations

import json
from pathlib import Path

from api.openapi import openapi_document

DOC = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"


def test_published_openapi_document_is_current() -> None:
    published = json.loads(DOC.read_text())
    current = json.loads(json.dumps(openapi_document()))
    assert published == current, (
        "docs/openapi.json is stale: run `zds openapi > docs/openapi.json`")


def test_published_document_lists_every_resource() -> None:
    paths = json.loads(DOC.read_text())["paths"]
    for prefix in ("/api/v1/pools", "/api/v1/datastores", "/api/v1/initiator-groups",
                   "/api/v1/jobs", "/api/v1/system/health", "/api/v1/probes",
                   "/api/v1/replications", "/api/v1/replication/identity"):
        assert any(p.startswith(prefix) for p in paths), prefix
