"""The in-memory twins of every host adapter, made together for tests and ``zds demo``
(the real ones: appliance/host/factory.py). Above the host layer: the pool they start
with has the root properties ZDS gives every pool (appliance/transports/storage.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from appliance.host.factory import HostAdapters, ProbeHosts
from appliance.host.fakes.cluster import FakeCluster
from appliance.host.fakes.ganesha import FakeGanesha
from appliance.host.fakes.iostats import FakeIoStats
from appliance.host.fakes.lio import FakeLio
from appliance.host.fakes.nvmet import FakeNvmet
from appliance.host.fakes.probes import FakeDevFs, FakeInitiator, FakeMounter
from appliance.host.fakes.replication import FakeSsh, FakeZfsSend
from appliance.host.fakes.zfs import FakeZfs, GiB
from appliance.host.fio import FakeFio
from appliance.host.hooks import FakeHooks
from appliance.host.local import FakeLocalHost
from appliance.host.nvme_initiator import FakeNvmeInitiator
from appliance.host.vsphere import FakeVsphere
from appliance.transports.storage import ROOT_FS_PROPERTIES


@dataclass
class FakeHosts:
    """The in-memory twins, typed as such so tests can steer them; ``adapters()`` is what
    the engine gets. Each fake is held to its real adapter by appliance.host.contract."""

    zfs: FakeZfs
    lio: FakeLio
    ganesha: FakeGanesha
    local: FakeLocalHost
    fio: FakeFio = field(default_factory=FakeFio)
    mounter: FakeMounter = field(default_factory=FakeMounter)
    initiator: FakeInitiator = field(default_factory=FakeInitiator)
    devfs: FakeDevFs | None = None
    vsphere: FakeVsphere = field(default_factory=FakeVsphere)
    hooks: FakeHooks = field(default_factory=FakeHooks)
    iostats: FakeIoStats | None = None
    ssh: FakeSsh | None = None  # made in __post_init__ (joined to no network)
    zfs_send: FakeZfsSend | None = None
    nvmet: FakeNvmet = field(default_factory=FakeNvmet)
    nvme: FakeNvmeInitiator = field(default_factory=FakeNvmeInitiator)
    cluster: FakeCluster = field(default_factory=FakeCluster)  # not in a pair until set

    def __post_init__(self) -> None:
        if self.ssh is None:
            self.ssh = FakeSsh(self.zfs, name=self.local.name)
        if self.zfs_send is None:
            self.zfs_send = FakeZfsSend(self.zfs, self.ssh)

    def adapters(self) -> HostAdapters:
        return HostAdapters(self.zfs, self.lio, self.ganesha, self.local,
                            ProbeHosts(fio=self.fio, mounter=self.mounter,
                                       initiator=self.initiator, devfs=self.devfs,
                                       nvme=self.nvme),
                            ssh=self.ssh, zfs_send=self.zfs_send, vsphere=self.vsphere,
                            hooks=self.hooks, iostats=self.iostats, nvmet=self.nvmet,
                            cluster=self.cluster)


def fake_hosts(pool: str | None = "tank", pool_size: int = 100 * GiB,
               disks: dict[str, int] | None = None, hostname: str = "zds-test") -> FakeHosts:
    """Fakes with one imported pool (``pool=None``: none) and spare ``disks``
    (path -> size) that pools can be made of."""
    zfs = (FakeZfs.with_pool(pool, pool_size, fs_properties=ROOT_FS_PROPERTIES)
           if pool else FakeZfs())
    for path, size in (disks or {}).items():
        zfs.add_disk(path, size)
    ganesha = FakeGanesha()
    return FakeHosts(zfs=zfs, lio=FakeLio.linked_to(zfs), ganesha=ganesha,
                     local=FakeLocalHost(devices=set(disks or {}), name=hostname),
                     iostats=FakeIoStats(ganesha, zfs), nvmet=FakeNvmet.linked_to(zfs))
