"""In-memory twins of the probes' loopback clients: the NFS mounter, the iSCSI initiator
and the throw-away file system on a scratch device. They record what they were asked to
do; ``events`` (shared by the initiator and the file system) keeps the order of steps, so
tests can check teardown order."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class FakeMounter:
    mounts: list[tuple[str, str, str, int]] = field(default_factory=list)
    unmounts: list[str] = field(default_factory=list)

    def mount(self, server: str, export_path: str, mountpoint: str, version: int = 3,
              port: int = 2049, mountport: int = 20048) -> None:
        self.mounts.append((server, export_path, mountpoint, version))

    def umount(self, mountpoint: str) -> None:
        self.unmounts.append(mountpoint)


@dataclass
class FakeInitiator:
    events: list[str] = field(default_factory=list)
    logins: list[str] = field(default_factory=list)
    logouts: list[str] = field(default_factory=list)
    name: str = "iqn.1993-08.org.debian:01:zdsself"

    def initiator_name(self) -> str:
        return self.name

    def login(self, iqn: str, host: str, port: int, timeout: float = 30.0) -> str:
        self.logins.append(iqn)
        self.events.append("login")
        return "/dev/sdz"

    def logout(self, iqn: str, host: str, port: int) -> None:
        self.logouts.append(iqn)
        self.events.append("logout")


@dataclass
class FakeDevFs:
    """Records the ext4 made on scratch devices."""

    events: list[str] = field(default_factory=list)
    made: list[tuple[str, str]] = field(default_factory=list)
    unmounted: list[str] = field(default_factory=list)

    def mount_new_filesystem(self, device: str, mountpoint: str) -> str:
        self.made.append((device, mountpoint))
        self.events.append(f"mount {device}")
        return "ext4"

    def unmount(self, mountpoint: str) -> None:
        self.unmounted.append(mountpoint)
        self.events.append(f"unmount {mountpoint}")
