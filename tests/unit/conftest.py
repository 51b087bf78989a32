"""Engine and API on fake host adapters (no root, no daemons)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from appliance.engine import Engine
from appliance.host.fakes.ganesha import FakeGanesha
from appliance.host.fakes.lio import FakeLio
from appliance.host.fakes.zfs import FakeZfs, GiB
from appliance.host.local import FakeLocalHost
from appliance.services.pools import ROOT_FS_PROPERTIES
from appliance.settings import Settings
from appliance.store import Store


@dataclass
class Rig:
    engine: Engine
    zfs: FakeZfs
    lio: FakeLio
    ganesha: FakeGanesha
    local: FakeLocalHost


def make_rig(state_dir: Path, pool_size: int = 100 * GiB) -> Rig:
    zfs = FakeZfs.with_pool("tank", pool_size, fs_properties=ROOT_FS_PROPERTIES)
    for i in range(1, 6):
        zfs.add_disk(f"/dev/disk/by-id/virtio-spare{i}", 20 * GiB)
    lio = FakeLio.linked_to(zfs)
    ganesha = FakeGanesha()
    local = FakeLocalHost(devices={f"/dev/disk/by-id/virtio-spare{i}" for i in range(1, 6)})
    settings = Settings().with_state_dir(state_dir)
    engine = Engine(settings, Store(state_dir / "zds.db"), zfs, lio, ganesha, local)
    return Rig(engine, zfs, lio, ganesha, local)


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
