"""The REST side of the e2e tests: one way to open the appliance's API and to read an
answer, so every test module fails with the same message (method, URL, status, body)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx


@contextmanager
def api_client(api_url: str, token: str, timeout: float = 600) -> Iterator[httpx.Client]:
    """An httpx client on ``api_url``/api/v1 with ``token`` as the bearer. The appliance's
    certificate is self-signed, so it is not verified; timeouts are long because a call
    under QEMU TCG may take minutes."""
    with httpx.Client(base_url=api_url + "/api/v1", verify=False, timeout=timeout,
                      headers={"Authorization": f"Bearer {token}"}) as client:
        yield client


def ok(resp: httpx.Response, status: int = 200) -> Any:
    """The answer's JSON (None when empty) after asserting its status code."""
    assert resp.status_code == status, f"{resp.request.method} {resp.request.url}: " \
                                       f"{resp.status_code} {resp.text}"
    return resp.json() if resp.content else None
