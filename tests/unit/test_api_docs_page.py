"""/docs is a page of our own under the console's CSP, loading nothing from elsewhere
(FastAPI's Swagger UI loads from a CDN); /openapi.json stays; there is no /redoc."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from api.console import CSP

ASSET = re.compile(r"""(?:src|href)="([^"]*)\"""")


def test_docs_is_local_under_the_consoles_csp(client: TestClient) -> None:
    page = client.get("/docs", headers={"Authorization": ""})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert page.headers["content-security-policy"] == CSP
    assert page.headers["x-content-type-options"] == "nosniff"
    assets = ASSET.findall(page.text)
    assert "/ui/static/docs.js" in assets
    assert all(a.startswith(("/", "#", "data:")) for a in assets), assets
    # the CSP allows no inline script or style: none is needed
    assert not re.search(r"<script(?![^>]*\bsrc=)", page.text) and "style=" not in page.text
    for asset in ("docs.js", "docs.css"):
        r = client.get(f"/ui/static/{asset}", headers={"Authorization": ""})
        assert r.status_code == 200 and r.headers["content-security-policy"] == CSP
        assert not re.findall(r"https?://", r.text), asset
    assert 'fetch("/openapi.json")' in client.get("/ui/static/docs.js").text
    assert "innerHTML" not in client.get("/ui/static/docs.js").text  # text nodes only


def test_openapi_json_stays_and_redoc_is_gone(client: TestClient) -> None:
    anonymous = {"Authorization": ""}
    doc = client.get("/openapi.json", headers=anonymous)
    assert doc.status_code == 200 and "/api/v1/datastores" in doc.json()["paths"]
    assert client.get("/redoc", headers=anonymous).status_code == 404
    assert "/docs" not in doc.json()["paths"]
