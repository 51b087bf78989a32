"""An engine on the in-memory fakes: ``zds demo`` serves the real API over it, so the API
can be tried (and its docs browsed) on any machine, without ZFS, LIO or ganesha."""

from __future__ import annotations

from pathlib import Path

from appliance.engine import Engine
from appliance.host.fakes.ganesha import FakeGanesha
from appliance.host.fakes.lio import FakeLio
from appliance.host.fakes.zfs import FakeZfs, GiB
from appliance.host.local import FakeLocalHost
from appliance.services.pools import ROOT_FS_PROPERTIES
from appliance.settings import Settings
from appliance.store import Store

DEMO_DISKS = tuple(f"/dev/disk/by-id/virtio-demo{i}" for i in range(4))


def demo_engine(state_dir: Path, pool_size: int = 1024 * GiB) -> Engine:
    """A pool ``tank`` of ``pool_size`` and four spare 512 GiB demo disks."""
    zfs = FakeZfs.with_pool("tank", pool_size, fs_properties=ROOT_FS_PROPERTIES)
    for disk in DEMO_DISKS:
        zfs.add_disk(disk, 512 * GiB)
    settings = Settings().with_state_dir(state_dir)
    engine = Engine(settings, Store(settings.db_path), zfs, FakeLio.linked_to(zfs),
                    FakeGanesha(), FakeLocalHost(devices=set(DEMO_DISKS), name="zds-demo"))
    engine.start()
    return engine
