"""An engine on the in-memory fakes: ``zds demo`` serves the real API over it, so the API
can be tried (and its docs browsed) on any machine, without ZFS, LIO or ganesha."""

from __future__ import annotations

from pathlib import Path

from appliance.engine import Engine
from appliance.host.factory import fake_hosts
from appliance.host.fakes.zfs import GiB
from appliance.settings import Settings

DEMO_DISKS = tuple(f"/dev/disk/by-id/virtio-demo{i}" for i in range(4))


def demo_engine(state_dir: Path, pool_size: int = 1024 * GiB) -> Engine:
    """A pool ``tank`` of ``pool_size`` and four spare 512 GiB demo disks."""
    hosts = fake_hosts("tank", pool_size, {d: 512 * GiB for d in DEMO_DISKS},
                       hostname="zds-demo")
    if hosts.iostats is not None:
        hosts.iostats.synthetic = True  # the console's charts move: made-up I/O
    engine = Engine.create(Settings().with_state_dir(state_dir), hosts.adapters())
    engine.start()
    return engine
