"""Engine and API on fake host adapters (no root, no daemons)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from appliance.engine import Engine
from appliance.fake_hosts import FakeHosts, fake_hosts
from appliance.host.fakes.ganesha import FakeGanesha
from appliance.host.fakes.lio import FakeLio
from appliance.host.fakes.zfs import FakeZfs, GiB
from appliance.host.local import FakeLocalHost
from appliance.settings import Settings

SPARE_DISKS = {f"/dev/disk/by-id/virtio-spare{i}": 20 * GiB for i in range(1, 6)}


@dataclass
class Rig:
    engine: Engine
    hosts: FakeHosts

    @property
    def zfs(self) -> FakeZfs:
        return self.hosts.zfs

    @property
    def lio(self) -> FakeLio:
        return self.hosts.lio

    @property
    def ganesha(self) -> FakeGanesha:
        return self.hosts.ganesha

    @property
    def local(self) -> FakeLocalHost:
        return self.hosts.local


def make_rig(state_dir: Path, pool_size: int = 100 * GiB,
             settings: Settings | None = None) -> Rig:
    hosts = fake_hosts("tank", pool_size, SPARE_DISKS)
    settings = settings or Settings().with_state_dir(state_dir)
    return Rig(Engine.create(settings, hosts.adapters()), hosts)


def count_version_asks(rig: Rig) -> list[int]:
    """Records each time the engine asks the host for the stack's versions (three
    commands, seconds under emulation, on a real appliance); the list grows by one a call."""
    asked: list[int] = []
    real = rig.engine.ctx.local.versions

    def counted() -> dict[str, str]:
        asked.append(1)
        return real()

    rig.engine.ctx.local.versions = counted  # type: ignore[method-assign]
    return asked


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    r = make_rig(tmp_path)
    r.engine.start()
    yield r
    r.engine.close()


@pytest.fixture
def admin_token(rig: Rig) -> str:
    return rig.engine.tokens.create("test-admin", "admin")


@pytest.fixture
def client(rig: Rig, admin_token: str) -> Iterator[TestClient]:
    app = create_app(rig.engine, start=False)
    with TestClient(app) as c:
        c.headers["Authorization"] = f"Bearer {admin_token}"
        yield c
