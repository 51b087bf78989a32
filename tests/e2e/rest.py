"""The REST side of the e2e tests: one way to open the appliance's API and to read an
answer, so every test module fails with the same message (method, URL, status, body)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
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


def wait_for_health(api: httpx.Client, want: Callable[[dict[str, Any]], bool],
                    timeout: float = 300) -> dict[str, Any]:
    """Polls /system/health until ``want(health)`` holds, through an API that may be
    restarting (connection errors and 5xx are waited out); fails with the last answer."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            resp = api.get("/system/health")
            last = resp.json() if resp.status_code == 200 else resp.text
            if resp.status_code == 200 and want(last):
                return dict(last)
        except (httpx.HTTPError, ValueError) as exc:
            last = repr(exc)
        time.sleep(2)
    raise AssertionError(f"health did not come to what was wanted within {timeout} s: {last}")
