"""An engine on the in-memory fakes: ``zds demo`` serves the real API over it, so the API
can be tried (and its docs browsed) on any machine, without ZFS, LIO or ganesha."""

from __future__ import annotations

from pathlib import Path

from appliance.engine import Engine
from appliance.fake_hosts import fake_hosts
from appliance.host.fakes.zfs import GiB
from appliance.settings import Settings

DEMO_DISKS = tuple(f"/dev/disk/by-id/virtio-demo{i}" for i in range(4))


def demo_engine(state_dir: Path, pool_size: int = 1024 * GiB) -> Engine:
    """A pool ``tank`` of ``pool_size`` and four spare 512 GiB demo disks."""
    hosts = fake_hosts("tank", pool_size, {d: 512 * GiB for d in DEMO_DISKS},
                       hostname="zds-demo")
    # a vCenter to try the VMware step on: any host, this user and password, two VMs on
    # the datastore that will be made as tank/datastores/vmfs-nfs01
    from appliance.host.vsphere import FakeDatastore

    hosts.vsphere.users["zds@vsphere.local"] = "demo-password"
    hosts.vsphere.datastores.append(FakeDatastore("vmfs-nfs01",
                                                  nfs_path="/tank/datastores/vmfs-nfs01"))
    hosts.vsphere.add_vm("web01", ["vmfs-nfs01"])
    hosts.vsphere.add_vm("template01", ["vmfs-nfs01"], powered_on=False)
    # hook programs "installed" in /etc/zds/hooks: (exit status, stdout, stderr, seconds)
    hosts.hooks.programs.update({"freeze-db": (0, "flushed and locked 2 databases\n", "", 0.2),
                                 "thaw-db": (0, "unlocked 2 databases\n", "", 0.1)})
    if hosts.iostats is not None:
        hosts.iostats.synthetic = True  # the console's charts move: made-up I/O
    engine = Engine.create(Settings().with_state_dir(state_dir), hosts.adapters())
    engine.start()
    return engine
