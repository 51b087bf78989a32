"""A plain Debian 12 machine under QEMU, to install ZDS on with ansible/playbooks/host.yml
as a user would (tests/e2e/test_ansible_host_e2e.py).

The machine: a minimal bookworm made with mmdebstrap (systemd, udev, openssh-server,
python3, sudo and the kernel the appliance image uses, so the ZFS modules the image build
cached fit it), DHCP with systemd-networkd, a sudo user ``admin`` who logs in with a key
made for this cache, root on an ext4 disk booted directly with its own kernel and initrd.
Nothing of ZDS is in it. It is cached under ${ZDS_CACHE}/hostvm/<key>/ and every boot
starts from a fresh qcow2 overlay, with two empty data disks (serials zdsdata0/zdsdata1).

Networking is QEMU user mode with restrict=on: SSH, the API, NFS, mountd and iSCSI are
forwarded from 127.0.0.1, and the only address the guest can open is 10.0.2.100:80, a
guestfwd to tests/e2e/aptmirror.py run by QEMU per connection (a Debian mirror fed from
this host's caches): the playbook's apt runs against it (base__apt_mirror).

  python -m images.hostvm build      # outside the VM lock: CPU work only
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from images.paths import REPO, cache_root, images_dir

FORMAT = "1"
DISK_SIZE = "8G"
MIRROR_ADDR = "10.0.2.100"
PACKAGES = ["systemd-sysv", "udev", "dbus", "kmod", "iproute2", "netbase", "ca-certificates",
            "openssh-server", "python3", "sudo", "e2fsprogs", "initramfs-tools", "zstd",
            "procps", "less"]
NETWORK = "[Match]\nName=en* eth*\n\n[Network]\nDHCP=yes\n"


def log(msg: str) -> None:
    print(f"[hostvm {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class HostImage:
    dir: Path
    kernel_abi: str

    @property
    def root(self) -> Path:
        return self.dir / "root.raw"

    @property
    def kernel(self) -> Path:
        return self.dir / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.dir / "initrd.img"

    @property
    def key(self) -> Path:
        """The private key of the ``admin`` user."""
        return self.dir / "admin-key"


def current_kernel_abi() -> str:
    """The appliance image's kernel (its cached ZFS modules are built for it)."""
    manifest = images_dir() / "current" / "manifest.json"
    return str(json.loads(manifest.read_text())["kernel_abi"])


def build(kernel_abi: str | None = None, force: bool = False) -> HostImage:
    """Builds (or reuses) the Debian machine's disk, kernel and initrd. Root only."""
    from images import build as image_build

    abi = kernel_abi or current_kernel_abi()
    h = hashlib.sha256(json.dumps([FORMAT, abi, PACKAGES, NETWORK, DISK_SIZE]).encode())
    out = HostImage(cache_root() / "hostvm" / h.hexdigest()[:16], abi)
    if not force and (out.dir / "manifest.json").exists():
        return out
    t0 = time.monotonic()
    shutil.rmtree(out.dir, ignore_errors=True)
    out.dir.mkdir(parents=True)
    work = out.dir / "work"
    tree = work / "root"
    work.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "zds-hostvm-admin",
                    "-f", str(out.key)], check=True)
    files = work / "files"
    files.mkdir()
    (files / "80-dhcp.network").write_text(NETWORK)
    (files / "fstab").write_text("/dev/vda\t/\text4\terrors=remount-ro\t0\t1\n")
    (files / "hosts").write_text("127.0.0.1\tlocalhost\n127.0.1.1\tzds-host\n")
    (files / "sudoers").write_text("admin ALL=(ALL) NOPASSWD: ALL\n")
    debs = cache_root() / "hostvm" / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    log(f"mmdebstrap bookworm with linux-image-{abi} into {tree}")
    subprocess.run([
        "mmdebstrap", "--mode=root", "--variant=apt", "--format=directory",
        "--aptopt=APT::Install-Recommends \"false\"",
        f"--include={','.join([*PACKAGES, f'linux-image-{abi}'])}",
        "--skip=download/empty",
        "--setup-hook=mkdir -p \"$1\"/var/cache/apt/archives",
        f"--setup-hook=sync-in {images_dir() / 'debs'} /var/cache/apt/archives/",
        f"--setup-hook=sync-in {debs} /var/cache/apt/archives/",
        f"--customize-hook=sync-out /var/cache/apt/archives {debs}",
        "--customize-hook=rm -f \"$1\"/var/cache/apt/archives/*.deb",
        "--customize-hook=echo zds-host > \"$1\"/etc/hostname",
        f"--customize-hook=cp {files / 'hosts'} {files / 'fstab'} \"$1\"/etc/",
        f"--customize-hook=cp {files / '80-dhcp.network'} \"$1\"/etc/systemd/network/",
        "--customize-hook=chroot \"$1\" systemctl enable systemd-networkd.service",
        "--customize-hook=chroot \"$1\" useradd -m -s /bin/bash -G sudo admin",
        f"--customize-hook=install -m 0440 {files / 'sudoers'} \"$1\"/etc/sudoers.d/admin",
        "--customize-hook=install -d -m 0700 \"$1\"/home/admin/.ssh",
        f"--customize-hook=install -m 0600 {out.key}.pub \"$1\"/home/admin/.ssh/authorized_keys",
        "--customize-hook=chroot \"$1\" chown -R admin:admin /home/admin/.ssh",
        "--customize-hook=rm -f \"$1\"/etc/machine-id && touch \"$1\"/etc/machine-id",
        "bookworm", str(tree), *image_build.sources(),
    ], check=True)
    shutil.copy(tree / "boot" / f"vmlinuz-{abi}", out.kernel)
    shutil.copy(tree / "boot" / f"initrd.img-{abi}", out.initrd)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-L", "zds-host-root", "-d", str(tree),
                    str(out.root), DISK_SIZE], check=True)
    shutil.rmtree(work)
    (out.dir / "manifest.json").write_text(json.dumps(
        {"kernel_abi": abi, "packages": PACKAGES, "seconds": round(time.monotonic() - t0, 1)},
        indent=2) + "\n")
    log(f"built {out.dir} in {time.monotonic() - t0:.0f} s")
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class HostVm:
    """One boot of the Debian machine; files in state_dir; stopped by the PID started here."""

    image: HostImage
    state_dir: Path
    mirror_cmd: str  # the guestfwd command serving http://10.0.2.100/
    memory_mib: int = 3072
    cpus: int = 2
    data_disk_size: int = 16 << 30
    ports: dict[str, int] = field(default_factory=dict)  # ssh, api, nfs, mountd, iscsi
    proc: subprocess.Popen[bytes] | None = None

    GUEST_PORTS = {"ssh": 22, "api": 8443, "nfs": 2049, "mountd": 20048, "iscsi": 3260}

    @property
    def serial_log(self) -> Path:
        return self.state_dir / "serial.log"

    def argv(self) -> list[str]:
        s = self.state_dir
        fwd = ",".join(f"hostfwd=tcp:127.0.0.1:{self.ports[n]}-:{p}"
                       for n, p in self.GUEST_PORTS.items())
        if "," in self.mirror_cmd:
            raise ValueError("the guestfwd command cannot hold a comma")
        argv = [
            "qemu-system-x86_64", "-name", "zds-debian-host", "-machine", "q35",
            "-accel", "tcg,thread=multi", "-cpu", "max", "-smp", str(self.cpus),
            "-m", str(self.memory_mib), "-display", "none", "-no-user-config",
            "-kernel", str(self.image.kernel), "-initrd", str(self.image.initrd),
            "-append", "root=/dev/vda rw console=ttyS0,115200n8 net.ifnames=1",
            "-drive", f"if=none,id=sys,file={s / 'system.qcow2'},format=qcow2,cache=unsafe",
            "-device", "virtio-blk-pci,drive=sys",
            "-netdev", f"user,id=n0,restrict=on,{fwd},"
                       f"guestfwd=tcp:{MIRROR_ADDR}:80-cmd:{self.mirror_cmd}",
            "-device", "virtio-net-pci,netdev=n0",
            "-serial", f"file:{self.serial_log}",
        ]
        for i in range(2):
            argv += ["-drive", f"if=none,id=d{i},file={s / f'zdsdata{i}.raw'},format=raw,"
                               "cache=unsafe,discard=unmap",
                     "-device", f"virtio-blk-pci,drive=d{i},serial=zdsdata{i}"]
        return argv

    def start(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b",
                        str(self.image.root), str(self.state_dir / "system.qcow2")], check=True)
        for i in range(2):
            with (self.state_dir / f"zdsdata{i}.raw").open("wb") as f:
                f.truncate(self.data_disk_size)
        self.ports = {n: free_port() for n in self.GUEST_PORTS}
        argv = self.argv()
        (self.state_dir / "qemu.argv").write_text(json.dumps(argv) + "\n")
        out = (self.state_dir / "qemu.out").open("wb")
        self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)

    def ssh_argv(self, user: str = "admin") -> list[str]:
        return ["ssh", "-i", str(self.image.key), "-p", str(self.ports["ssh"]),
                "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
                "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
                "-o", "ConnectTimeout=30", f"{user}@127.0.0.1"]

    def ssh(self, cmd: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.ssh_argv(), cmd], capture_output=True, text=True,
                              timeout=timeout, check=False)

    def wait_ssh(self, timeout: float = 900.0) -> float:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"QEMU exited; see {self.serial_log}")
            if self.ssh("true", timeout=60).returncode == 0:
                return time.monotonic() - t0
            time.sleep(5)
        raise RuntimeError(f"no SSH after {timeout:.0f} s; see {self.serial_log}")

    def stop(self, timeout: float = 120.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.ssh("sudo systemctl poweroff", timeout=30)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(15)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        self.proc = None


def mirror_command(cache: Path, log_file: Path) -> str:
    """The guestfwd command: tests/e2e/aptmirror.py in inetd mode over this host's caches."""
    script = REPO / "tests" / "e2e" / "aptmirror.py"
    return (f"{sys.executable} {script} --debs {images_dir() / 'debs'} "
            f"--debs {cache_root() / 'hostvm' / 'debs'} --cache {cache} --log {log_file}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m images.hostvm", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["build"])
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("hostvm: run as root (mmdebstrap root mode)")
    print(build(force=args.force).dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
