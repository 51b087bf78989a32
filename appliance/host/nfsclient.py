"""The kernel NFS client: the appliance mounts its own export over loopback (probes).

``mount -t nfs -o vers=3,proto=tcp,port=2049,mountport=20048,mountproto=tcp,nolock
127.0.0.1:/tank/zds-probes/ds1-p1 /run/zds/probes/p1`` needs no rpcbind lookup (both
ports given) and no NLM (nolock: the probe is the only user of its scratch export).
NFSv4.1: ``-o vers=4.1,proto=tcp,port=2049``. The twin for unit tests is
``RecordingRunner`` (every step is one command).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from appliance.errors import ZdsError
from appliance.host.localfs import unmount_and_remove
from appliance.host.run import Runner


class NfsMounter(Protocol):
    """Mounts an NFS export on this machine (:class:`NfsClient`; fakes in tests)."""

    def mount(self, server: str, export_path: str, mountpoint: str, version: int = 3,
              port: int = 2049, mountport: int = 20048) -> None: ...

    def umount(self, mountpoint: str) -> None: ...


def mount_options(version: int = 3, port: int = 2049, mountport: int = 20048) -> str:
    """The kernel client's options for the probes' loopback mount (also what
    bench/nfs_servers.py mounts nfs-ganesha and knfsd with: the same client for both)."""
    if version == 3:
        return (f"vers=3,proto=tcp,port={port},mountport={mountport},mountproto=tcp,"
                "nolock,hard,timeo=600")
    return f"vers=4.1,proto=tcp,port={port},hard,timeo=600"


class NfsClient:
    def __init__(self, runner: Runner) -> None:
        self._runner = runner

    def mount(self, server: str, export_path: str, mountpoint: str, version: int = 3,
              port: int = 2049, mountport: int = 20048) -> None:
        Path(mountpoint).mkdir(parents=True, exist_ok=True, mode=0o700)
        opts = mount_options(version, port, mountport)
        self._runner.run(["mount", "-t", "nfs", "-o", opts, f"{server}:{export_path}",
                          mountpoint], timeout=60)

    def umount(self, mountpoint: str) -> None:
        """Unmounts (lazily if busy) and removes the empty mountpoint."""
        unmount_and_remove(self._runner, mountpoint)

    def mounted(self, mountpoint: str) -> bool:
        try:
            res = self._runner.run(["findmnt", "-n", "-o", "FSTYPE", mountpoint], check=False,
                                   timeout=10)
        except ZdsError:
            return False
        return res.ok and res.stdout.strip().startswith("nfs")
