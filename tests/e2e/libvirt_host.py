"""A private libvirtd for the e2e tests: Debian's libvirt with the QEMU driver (TCG) and
the storage driver (iscsi-direct = libiscsi, no kernel initiator), nothing else.

It must not touch this machine's networking or its libvirt state, so it runs in a mount
namespace of its own (``unshare --mount --propagation private``) where /etc/libvirt,
/var/lib/libvirt, /var/cache/libvirt, /var/log/libvirt and /run/libvirt are directories
under the test's temporary directory, and it loads only the qemu, storage and secret
connection drivers (``LIBVIRT_DRIVER_DIR``): no network driver (no default network, no
bridge, no NAT, no firewall rules), no nwfilter. Domains it starts have no network device.
The namespace also sees a copy of /etc/passwd and /etc/group with the libvirt-qemu user
the QEMU driver insists on resolving (libvirt-daemon-system would create it on the host);
qemu.conf runs QEMU as root without namespaces, cgroups or a security driver.

Clients connect with ``qemu:///system?socket=<dir>/sock/libvirt-sock``. Stopped by the PID
of the libvirtd process started here.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from types import TracebackType

DRIVERS = Path("/usr/lib/x86_64-linux-gnu/libvirt/connection-driver")
HOST_DIRS = {"etc": "/etc/libvirt", "lib": "/var/lib/libvirt", "cache": "/var/cache/libvirt",
             "log": "/var/log/libvirt", "run": "/run/libvirt"}
QEMU_CONF = """\
user = "root"
group = "root"
dynamic_ownership = 0
remember_owner = 0
security_driver = "none"
namespaces = [ ]
cgroup_controllers = [ ]
stdio_handler = "file"
"""


class PrivateLibvirt:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def uri(self) -> str:
        return f"qemu:///system?socket={self.root / 'sock' / 'libvirt-sock'}"

    @property
    def log(self) -> Path:
        return self.root / "log" / "libvirtd.log"

    def _prepare(self) -> Path:
        r = self.root
        for d in (*HOST_DIRS, "sock", "drivers"):
            (r / d).mkdir(parents=True, exist_ok=True)
        for name in ("qemu", "storage", "secret"):
            link = r / "drivers" / f"libvirt_driver_{name}.so"
            if not link.exists():
                link.symlink_to(DRIVERS / link.name)
        (r / "etc" / "libvirtd.conf").write_text(
            f'unix_sock_dir = "{r / "sock"}"\nunix_sock_rw_perms = "0700"\n'
            'auth_unix_rw = "none"\nauth_unix_ro = "none"\n'
            f'log_outputs = "3:file:{self.log}"\n')
        (r / "etc" / "qemu.conf").write_text(QEMU_CONF)
        passwd = Path("/etc/passwd").read_text()
        group = Path("/etc/group").read_text()
        if "\nlibvirt-qemu:" not in "\n" + passwd:
            passwd += ("libvirt-qemu:x:64055:64055:libvirt (e2e):/var/lib/libvirt:"
                       "/usr/sbin/nologin\n")
        for g, gid in (("libvirt-qemu", 64055), ("kvm", 64056)):
            if f"\n{g}:" not in "\n" + group:
                group += f"{g}:x:{gid}:\n"
        (r / "passwd").write_text(passwd)
        (r / "group").write_text(group)
        binds = [(r / k, v) for k, v in HOST_DIRS.items()]
        files = [(r / "passwd", "/etc/passwd"), (r / "group", "/etc/group")]
        script = r / "start.sh"
        script.write_text(
            "set -e\n"
            + "".join(f"mkdir -p {dst}\nmount --bind {src} {dst}\n" for src, dst in binds)
            + "".join(f"mount --bind {src} {dst}\n" for src, dst in files)
            + f"export LIBVIRT_DRIVER_DIR={r / 'drivers'}\n"
            + f"exec libvirtd --config {r / 'etc' / 'libvirtd.conf'}"
              f" --pid-file {r / 'libvirtd.pid'}\n")
        return script

    def start(self, timeout: float = 60.0) -> None:
        script = self._prepare()
        out = (self.root / "libvirtd.out").open("wb")
        # unshare execs sh, which execs libvirtd: self.proc.pid is libvirtd's PID
        self.proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", str(script)],
            stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"libvirtd exited: {self.diagnostics()}")
            if self.virsh("version", check=False).returncode == 0:
                return
            time.sleep(0.5)
        raise RuntimeError(f"libvirtd did not answer: {self.diagnostics()}")

    def diagnostics(self) -> str:
        parts = []
        for f in (self.root / "libvirtd.out", self.log):
            if f.exists():
                parts.append(f"{f}:\n" + "\n".join(f.read_text(errors="replace")
                                                   .splitlines()[-15:]))
        return "\n".join(parts)

    def virsh(self, *args: str, check: bool = True,
              timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        p = subprocess.run(["virsh", "-c", self.uri, *args], capture_output=True, text=True,
                           timeout=timeout, check=False)
        if check and p.returncode != 0:
            raise AssertionError(f"virsh {' '.join(args)} failed ({p.returncode}): "
                                 f"{p.stderr}{p.stdout}\n{self.diagnostics()}")
        return p

    def stop(self) -> None:
        if self.proc is None:
            return
        # domains first (QEMU children), then the daemon itself, by the PID we started
        for name in self.virsh("list", "--name", check=False).stdout.split():
            self.virsh("destroy", name, check=False)
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def __enter__(self) -> PrivateLibvirt:
        self.start()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def available() -> bool:
    return shutil.which("libvirtd") is not None and shutil.which("virsh") is not None \
        and (DRIVERS / "libvirt_driver_qemu.so").exists()
