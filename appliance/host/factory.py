"""The one place host adapters are made: real ones for the appliance, fakes for tests and
``zds demo``. The engine, the probes, the CLI and the tests all take theirs from here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from appliance.host.cluster import ClusterHost
from appliance.host.fakes.cluster import FakeCluster
from appliance.host.fakes.ganesha import FakeGanesha
from appliance.host.fakes.iostats import FakeIoStats
from appliance.host.fakes.lio import FakeLio
from appliance.host.fakes.nvmet import FakeNvmet
from appliance.host.fakes.probes import FakeDevFs, FakeInitiator, FakeMounter
from appliance.host.fakes.replication import FakeSsh, FakeZfsSend
from appliance.host.fakes.zfs import FakeZfs, GiB
from appliance.host.fio import FakeFio, FioHost
from appliance.host.ganesha import GaneshaHost
from appliance.host.hooks import FakeHooks, HookHost
from appliance.host.iostats import IoStatsHost
from appliance.host.iscsi_initiator import Initiator
from appliance.host.lio import LioHost
from appliance.host.local import FakeLocalHost, LocalHost
from appliance.host.localfs import DeviceFs
from appliance.host.net import Iperf3
from appliance.host.nfsclient import NfsMounter
from appliance.host.nvme_initiator import FakeNvmeInitiator, NvmeInitiator
from appliance.host.nvmet import NvmetHost
from appliance.host.run import Runner
from appliance.host.ssh import SshHost
from appliance.host.sysstat import SysStats
from appliance.host.vsphere import FakeVsphere, VsphereConnector
from appliance.host.zfs import ZfsHost
from appliance.host.zfs_send import ZfsSendHost

# Properties every pool's root file system gets (VM-tuned; ganesha needs posixacl).
ROOT_FS_PROPERTIES = {"compression": "lz4", "atime": "off", "xattr": "sa",
                      "acltype": "posixacl", "dnodesize": "auto"}


@dataclass(frozen=True)
class ProbeHosts:
    """What the performance probes drive: fio, and the loopback NFS/iSCSI/NVMe clients."""

    fio: FioHost
    mounter: NfsMounter
    initiator: Initiator
    devfs: DeviceFs | None
    iperf: Iperf3 | None = None
    stats: SysStats | None = None
    sync: Callable[[str], float] | None = None
    nvme: NvmeInitiator | None = None


@dataclass(frozen=True)
class HostAdapters:
    """Everything of the OS the engine touches. ``probes`` is None where probes cannot
    reach a datastore through a protocol (only the local target runs)."""

    zfs: ZfsHost
    lio: LioHost
    ganesha: GaneshaHost
    local: LocalHost
    probes: ProbeHosts | None = None
    ssh: SshHost | None = None  # replication: keys, pinned host keys, authorized sources
    zfs_send: ZfsSendHost | None = None  # replication: holds, bookmarks, send | receive
    vsphere: VsphereConnector | None = None  # snapshot policies' VMware step
    hooks: HookHost | None = None  # snapshot policies' pre/post commands
    iostats: IoStatsHost | None = None  # the metrics collector's sources (None: no metrics)
    nvmet: NvmetHost | None = None  # the kernel NVMe target (None: NVMe/TCP is down)
    cluster: ClusterHost | None = None  # pacemaker (None: never in an HA pair)


def real_probe_hosts(runner: Runner | None = None) -> ProbeHosts:
    """fio, iperf3, the kernel NFS client and open-iscsi on this machine."""
    from appliance.host.fio import Fio
    from appliance.host.iscsi_initiator import IscsiInitiator
    from appliance.host.localfs import LocalFs
    from appliance.host.nfsclient import NfsClient
    from appliance.host.nvme_initiator import NvmeCli
    from appliance.host.run import SubprocessRunner
    from appliance.host.spawn import PopenSpawner

    runner = runner or SubprocessRunner()
    spawner = PopenSpawner()
    fs = LocalFs(runner)
    return ProbeHosts(fio=Fio(runner, spawner), mounter=NfsClient(runner),
                      initiator=IscsiInitiator(runner), devfs=fs,
                      iperf=Iperf3(runner, spawner), stats=SysStats(), sync=fs.sync,
                      nvme=NvmeCli(runner))


def real_hosts(state_dir: Path, ganesha_exports_dir: Path, ganesha_dbus_address: str | None,
               runner: Runner | None = None,
               hooks_dir: Path = Path("/etc/zds/hooks"), nfs_server: str = "ganesha"
               ) -> HostAdapters:
    """ZFS, LIO (rtslib-fb), the NFS server (nfs-ganesha over DBus, or the kernel's when
    ``nfs_server`` is "knfsd") and the probe tools of this machine."""
    from appliance.host.cluster import Pacemaker
    from appliance.host.ganesha import Ganesha
    from appliance.host.hooks import Hooks
    from appliance.host.iostats import IoStats
    from appliance.host.knfsd import Knfsd
    from appliance.host.lio import Lio
    from appliance.host.local import RealLocalHost
    from appliance.host.nvmet import Nvmet
    from appliance.host.run import SubprocessRunner
    from appliance.host.ssh import OpenSsh
    from appliance.host.vsphere import PyVmomiConnector
    from appliance.host.zfs import Zfs
    from appliance.host.zfs_send import ZfsSend

    runner = runner or SubprocessRunner()
    local = RealLocalHost(runner)
    ssh = OpenSsh(runner, state_dir / "replication", hostname=local.hostname())
    return HostAdapters(
        # demo/test pools on sparse files live in <state>/pools/<pool>/: import
        # searches there too, besides the disks
        zfs=Zfs(runner, import_dirs=(str(state_dir / "pools" / "*"),)),
        lio=Lio(),
        ganesha=(Knfsd(runner) if nfs_server == "knfsd"
                 else Ganesha(runner, ganesha_exports_dir, ganesha_dbus_address)),
        local=local,
        probes=real_probe_hosts(runner),
        ssh=ssh,
        zfs_send=ZfsSend(runner, ssh),
        vsphere=PyVmomiConnector(),
        hooks=Hooks(runner, hooks_dir),
        iostats=IoStats(runner, ganesha_dbus_address, nfs_counters=nfs_server == "ganesha"),
        nvmet=Nvmet(runner),
        cluster=Pacemaker(runner),
    )


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
