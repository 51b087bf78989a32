"""The one place the real host adapters are made, and the types that carry them.

The engine, the probes and the CLI take theirs from here; the in-memory twins for tests
and ``zds demo`` are made in appliance/fake_hosts.py, so the appliance imports no
fake (tests/unit/test_architecture.py checks it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from appliance.host.cluster import ClusterHost
from appliance.host.fio import FioHost
from appliance.host.hooks import HookHost
from appliance.host.iostats import IoStatsHost
from appliance.host.iscsi_initiator import Initiator
from appliance.host.lio import LioHost
from appliance.host.local import LocalHost
from appliance.host.localfs import DeviceFs, LocalFs
from appliance.host.net import Iperf3
from appliance.host.nfs_server import GaneshaHost
from appliance.host.nfs_units import NfsUnits
from appliance.host.nfsclient import NfsMounter
from appliance.host.nvme_initiator import NvmeInitiator
from appliance.host.nvmet import NvmetHost
from appliance.host.run import Runner
from appliance.host.ssh import SshHost
from appliance.host.sysstat import SysStats
from appliance.host.vsphere import VsphereConnector
from appliance.host.zfs import ZfsHost
from appliance.host.zfs_send import ZfsSendHost


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
    """Everything of the OS the engine touches. ``probes`` is None where the engine has
    no probe tools: every probe is then refused as unavailable."""

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


class HostConfig(Protocol):
    """What of the appliance's settings the real adapters are made from (appliance
    Settings has these; the host layer does not import it)."""

    @property
    def state_dir(self) -> Path: ...

    @property
    def ganesha_exports_dir(self) -> Path: ...

    @property
    def ganesha_dbus_address(self) -> str | None: ...

    @property
    def hooks_dir(self) -> Path: ...

    @property
    def nfs_server(self) -> str: ...


def real_client_hosts(runner: Runner | None = None) -> tuple[ProbeHosts, LocalFs]:
    """fio, iperf3, the kernel NFS client, open-iscsi and nvme-cli on this machine, and
    the file-system helper they share (client-mode probes make and remove their
    directories with it)."""
    from appliance.host.fio import Fio
    from appliance.host.iscsi_initiator import IscsiInitiator
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
                      nvme=NvmeCli(runner)), fs


def real_probe_hosts(runner: Runner | None = None) -> ProbeHosts:
    """fio, iperf3, the kernel NFS client, open-iscsi and nvme-cli on this machine."""
    return real_client_hosts(runner)[0]


def real_nfs_units(runner: Runner | None = None) -> NfsUnits:
    """The systemd units of the two NFS servers (``zds nfs-server``)."""
    from appliance.host.nfs_units import SystemdNfsUnits
    from appliance.host.run import SubprocessRunner

    return SystemdNfsUnits(runner or SubprocessRunner())


def real_hosts(config: HostConfig, runner: Runner | None = None) -> HostAdapters:
    """ZFS, LIO (rtslib-fb), the NFS server (nfs-ganesha over DBus, or the kernel's when
    ``config.nfs_server`` is "knfsd") and the probe tools of this machine."""
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
    ssh = OpenSsh(runner, config.state_dir / "replication", hostname=local.hostname())
    dbus = config.ganesha_dbus_address
    return HostAdapters(
        # demo/test pools on sparse files live in <state>/pools/<pool>/: import
        # searches there too, besides the disks
        zfs=Zfs(runner, import_dirs=(str(config.state_dir / "pools" / "*"),)),
        lio=Lio(),
        ganesha=(Knfsd(runner) if config.nfs_server == "knfsd"
                 else Ganesha(runner, config.ganesha_exports_dir, dbus)),
        local=local,
        probes=real_probe_hosts(runner),
        ssh=ssh,
        zfs_send=ZfsSend(runner, ssh),
        vsphere=PyVmomiConnector(),
        hooks=Hooks(runner, config.hooks_dir),
        iostats=IoStats(runner, dbus, nfs_counters=config.nfs_server == "ganesha"),
        nvmet=Nvmet(runner),
        cluster=Pacemaker(runner),
    )
