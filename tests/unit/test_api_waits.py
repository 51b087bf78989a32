"""Long-polls hold no server thread, and no token takes all the capacity (issue 22, item 4).

Against a real uvicorn on 127.0.0.1 (the fakes behind it): the routes that are not async
run on anyio's 40 threads, so waits that held one each (as they did) stalled every other
request, health included, for as long as the waits lasted."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from api.app import create_app
from api.guard import Guard
from appliance.jobs import Job
from appliance.settings import Settings
from tests.unit.conftest import Rig, make_rig
from tests.unit.http_server import free_port, start_in_thread

API = "/api/v1"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class Served:
    """The app on a real uvicorn in a thread; ``guard`` once the first request built it."""

    def __init__(self, rig: Rig) -> None:
        self.rig = rig
        self.app: FastAPI = create_app(rig.engine, start=False)
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=port,
                                                    log_level="warning"))
        self.thread: threading.Thread | None = None

    @property
    def guard(self) -> Guard:
        node: Any = self.app.middleware_stack
        while not isinstance(node, Guard):
            node = node.app
        return node

    def __enter__(self) -> Served:
        self.thread = start_in_thread(self.server)
        return self

    def __exit__(self, *_: object) -> None:
        self.server.should_exit = True
        if self.thread is not None:
            self.thread.join(timeout=10)


def rig_with(tmp_path: Path, **limits: int) -> Rig:
    settings = Settings(health_interval=0, reconcile_interval=0, **limits)  # type: ignore[arg-type]
    rig = make_rig(tmp_path, settings=settings.with_state_dir(tmp_path))
    rig.engine.start()
    return rig


@pytest.fixture
def held_job(rig: Rig) -> Iterator[tuple[Job, threading.Event]]:
    """A job that runs until the test lets it finish."""
    gate = threading.Event()
    job = rig.engine.jobs.submit("test.hold", None, lambda ctx: {"released": gate.wait(60)})
    yield job, gate
    gate.set()


async def until(check: Any, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


def test_long_waits_hold_no_thread_health_and_other_tokens_answer_at_once(
        rig: Rig, held_job: tuple[Job, threading.Event]) -> None:
    job, gate = held_job
    readers = [rig.engine.tokens.create(f"poller{i}", "readonly") for i in range(3)]
    other = rig.engine.tokens.create("other", "readonly")
    n = 45  # more than anyio's 40 worker threads; 15 per token, under max_per_token

    async def scenario(srv: Served) -> None:
        async with httpx.AsyncClient(base_url=srv.base, timeout=30) as c:
            assert (await c.get(f"{API}/system/health")).status_code == 200  # builds the app
            waits = [asyncio.create_task(c.get(f"{API}/jobs/{job.id}", params={"wait": 60},
                                               headers=bearer(readers[i % 3])))
                     for i in range(n)]
            try:
                await until(lambda: srv.guard.in_flight >= n)
                await asyncio.sleep(0.3)  # let every wait reach its route
                t0 = time.monotonic()
                health = await c.get(f"{API}/system/health", timeout=5)
                took_health = time.monotonic() - t0
                t0 = time.monotonic()
                listed = await c.get(f"{API}/datastores", headers=bearer(other), timeout=5)
                took_list = time.monotonic() - t0
                # seconds, against the waits' 60: room for a loaded CI machine
                assert health.status_code == 200 and took_health < 3, took_health
                assert listed.status_code == 200 and took_list < 3, took_list
                assert not any(w.done() for w in waits), "the waits ended early"
            finally:
                gate.set()
            answers = await asyncio.gather(*waits)
            assert {(a.status_code, a.json()["state"]) for a in answers} == {(200, "succeeded")}
            # the client has its answer before the guard's `finally` gives the slot back
            await until(lambda: srv.guard.in_flight == 0 and srv.guard.per_token == {},
                        timeout=5)

    with Served(rig) as srv:
        asyncio.run(scenario(srv))


def test_one_token_may_not_take_all_the_capacity(tmp_path: Path) -> None:
    rig = rig_with(tmp_path, max_per_token=3)
    gate = threading.Event()
    job = rig.engine.jobs.submit("test.hold", None, lambda ctx: {"released": gate.wait(60)})
    greedy = bearer(rig.engine.tokens.create("greedy", "readonly"))
    other = bearer(rig.engine.tokens.create("other", "readonly"))

    async def scenario(srv: Served) -> None:
        async with httpx.AsyncClient(base_url=srv.base, timeout=30) as c:
            waits = [asyncio.create_task(c.get(f"{API}/jobs/{job.id}", params={"wait": 60},
                                               headers=greedy)) for _ in range(3)]
            try:
                await until(lambda: srv.guard.per_token.get(job_token(greedy)) == 3)
                r = await c.get(f"{API}/datastores", headers=greedy)
                assert r.status_code == 429, r.text
                err = r.json()["error"]
                assert err["code"] == "too_many_requests" and err["detail"] == {"limit": 3}
                assert "greedy" in err["message"] and r.headers["retry-after"] == "1"
                assert (await c.get(f"{API}/datastores", headers=other)).status_code == 200
            finally:
                gate.set()
            assert [(await w).status_code for w in waits] == [200, 200, 200]
            assert (await c.get(f"{API}/datastores", headers=greedy)).status_code == 200

    try:
        with Served(rig) as srv:
            asyncio.run(scenario(srv))
    finally:
        gate.set()
        rig.engine.close()


def job_token(headers: dict[str, str]) -> str:
    """The token id of an Authorization header (what the guard counts by)."""
    return headers["Authorization"].split("_")[1]


def test_a_wait_whose_client_left_frees_its_slot_at_once(tmp_path: Path) -> None:
    rig = rig_with(tmp_path, max_per_token=2)
    gate = threading.Event()
    job = rig.engine.jobs.submit("test.hold", None, lambda ctx: {"released": gate.wait(60)})
    token = bearer(rig.engine.tokens.create("leaver", "readonly"))

    async def scenario(srv: Served) -> None:
        async with httpx.AsyncClient(base_url=srv.base, timeout=30) as gone:
            waits = [asyncio.create_task(gone.get(f"{API}/jobs/{job.id}",
                                                  params={"wait": 60}, headers=token))
                     for _ in range(2)]
            await until(lambda: srv.guard.per_token.get(job_token(token)) == 2)
            for w in waits:
                w.cancel()
        # the connections are closed: the server notices and ends both waits
        await until(lambda: job_token(token) not in srv.guard.per_token, timeout=5)
        async with httpx.AsyncClient(base_url=srv.base, timeout=30) as c:
            assert (await c.get(f"{API}/datastores", headers=token)).status_code == 200
        assert rig.engine.jobs.get(job.id).state == "running"  # the job itself goes on

    try:
        with Served(rig) as srv:
            asyncio.run(scenario(srv))
    finally:
        gate.set()
        rig.engine.close()


def test_an_async_wait_wakes_when_the_job_finishes(rig: Rig) -> None:
    """The wait answers as the job ends (woken from its thread), not at its timeout."""
    gate = threading.Event()
    job = rig.engine.jobs.submit("test.hold", None, lambda ctx: {"released": gate.wait(60)})

    async def scenario() -> tuple[Job, float]:
        loop = asyncio.get_running_loop()
        loop.call_later(0.2, gate.set)
        t0 = time.monotonic()
        done = await rig.engine.jobs.wait_async(job.id, 30)
        return done, time.monotonic() - t0

    done, took = asyncio.run(scenario())
    assert done.state == "succeeded" and done.result == {"released": True}
    assert took < 10, took  # against its 30-s timeout and the job's 60 s
    # a wait that runs out answers the job as it is
    held = threading.Event()
    other = rig.engine.jobs.submit("test.hold", None, lambda ctx: {"released": held.wait(60)})
    t0 = time.monotonic()
    assert asyncio.run(rig.engine.jobs.wait_async(other.id, 0.3)).state == "running"
    assert 0.3 <= time.monotonic() - t0 < 10  # not the job's 60 s
    held.set()
    assert rig.engine.jobs._waiters == {}, "a finished wait left its waiter behind"
