"""Health answers while every worker thread is busy: a burst of requests (a provisioning
storm) queues on the shared worker threads, and health has threads of its own
(api/routes/system.py). bench/storm.py measured the difference on the appliance."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from appliance.demo import demo_engine
from tests.unit.http_server import serve

WORKERS = 40  # anyio's default limit of worker threads


def test_health_answers_while_every_worker_thread_is_taken(tmp_path: Path) -> None:
    engine = demo_engine(tmp_path)
    token = engine.tokens.create("storm", "admin")
    release = threading.Event()
    entered = threading.Semaphore(0)
    real = engine.datastores.put_start

    def held(*args: Any, **kw: Any) -> Any:  # a check that takes its time
        entered.release()
        release.wait(30)
        return real(*args, **kw)

    engine.datastores.put_start = held  # type: ignore[method-assign]
    try:
        for url in serve(engine):
            headers = {"Authorization": f"Bearer {token}"}

            def put(i: int, url: str = url, headers: dict[str, str] = headers) -> int:
                r = httpx.put(f"{url}/api/v1/datastores/held{i:02d}", headers=headers,
                              timeout=60, json={"protocol": "nfs3", "size": "64M"})
                return r.status_code

            with ThreadPoolExecutor(WORKERS + 10) as pool:
                codes = [pool.submit(put, i) for i in range(WORKERS + 10)]
                for _ in range(WORKERS):  # every worker thread is in a held check
                    assert entered.acquire(timeout=20)
                try:
                    h = httpx.get(f"{url}/api/v1/system/health", timeout=5)
                    assert h.status_code in (200, 503) and h.json()["status"]
                finally:
                    release.set()
                assert sorted({c.result() for c in codes}) == [201]
    finally:
        release.set()
        engine.close()
