"""bench/storm.py against the API on fakes (uvicorn in a thread): every client connects
before the release, the PUTs then go out together, and health is sampled throughout."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.demo import demo_engine
from bench.storm import Storm
from tests.unit.http_server import serve


class StubVm:
    """What Storm asks of the appliance: its API's address and an admin token."""

    def __init__(self, url: str, token: str) -> None:
        self.api_url = url
        self.token = token

    def admin_token(self) -> str:
        return self.token


@pytest.fixture
def storm(tmp_path: Path) -> Iterator[Storm]:
    engine = demo_engine(tmp_path)
    token = engine.tokens.create("bench", "admin")
    for url in serve(engine):
        yield Storm(StubVm(url, token))  # type: ignore[arg-type]
    engine.close()


def test_the_storm_connects_first_then_sends_every_put_together(storm: Storm) -> None:
    out = storm.storm("s", 6)
    assert out["codes"] == {"201 succeeded": 6}, out
    assert out["health_samples"] >= 1 and out["health_max"] < 5
    assert storm.served(["s"]) == {"datastores": 6, "served": 6, "in_sync": True}
    one = storm.one_by_one("o", 3)
    assert one["codes"] == {"201 succeeded": 3}
