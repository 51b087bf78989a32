"""A real nfs-ganesha (4.3 from Debian, FSAL VFS) for integration tests, fully private.

Layout (everything under one temporary directory, nothing on the host's system bus,
rpcbind or /run is touched):

- a private ``dbus-daemon`` with its own config (system-bus type, socket in the work
  dir, a policy that lets root own ``org.ganesha.nfsd``); ganesha finds it through
  ``DBUS_SYSTEM_BUS_ADDRESS``, the adapter through ``--bus=ADDRESS``;
- a network namespace ``zds-it-<pid>`` with only ``lo`` up, so ganesha can take the
  standard ports (NFS 2049, mountd 20048, NLM 32803, rquota 875) and clients run in it
  with ``ip netns exec``;
- a private mount namespace (held by a ``sleep`` process) with a tmpfs on /run, so
  rpcbind's lock/socket and ganesha's /run/ganesha never clash with the host's or with
  another harness running at the same time;
- rpcbind (NFSv3 needs it: ganesha registers MOUNT/NLM with it) and ganesha, both in
  those two namespaces, ganesha with NFS_CORE_PARAM Protocols 3,4, fixed ports, no
  exports, Graceless (no grace period to wait out), state/log/pid in the work dir.

``GaneshaHarness.start()`` polls for readiness (DBus answers and the log says NFS SERVER
INITIALIZED: ~1 s here); ``stop()`` stops every process it started by PID, deletes the
namespace and the work dir, and is safe to call after a failed start.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from appliance.host.ganesha import Ganesha
from appliance.host.run import SubprocessRunner

NFS_PORT = 2049
MNT_PORT = 20048
NLM_PORT = 32803
RQUOTA_PORT = 875

REQUIRED_BINARIES = ("ganesha.nfsd", "rpcbind", "dbus-daemon", "dbus-send", "ip", "nsenter",
                     "unshare", "nfs-cp", "nfs-ls")
PACKAGES_HINT = "nfs-ganesha nfs-ganesha-vfs rpcbind dbus iproute2 util-linux libnfs-utils"

DBUS_CONFIG = """\
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={socket}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="root"/>
    <deny own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
  <policy user="root">
    <allow own="org.ganesha.nfsd"/>
  </policy>
</busconfig>
"""

GANESHA_CONFIG = """\
# ZDS integration-test ganesha: no exports here, they are added over DBus.
NFS_CORE_PARAM {{
    Protocols = 3, 4;{plugins}
    NFS_Port = {nfs};
    MNT_Port = {mnt};
    NLM_Port = {nlm};
    Rquota_Port = {rquota};
    Enable_RQUOTA = false;
}}
NFSV4 {{
    RecoveryRoot = "{recovery}";
    Graceless = true;
}}
NFS_KRB5 {{
    Active_krb5 = false;
}}
LOG {{
    Default_Log_Level = EVENT;
}}
"""

_names = itertools.count()


class HarnessError(RuntimeError):
    pass


@dataclass
class GaneshaHarness:
    workdir: Path = field(
        default_factory=lambda: Path(tempfile.mkdtemp(prefix=f"zds-it-{os.getpid()}-")))
    netns: str = ""
    start_timeout: float = 30.0
    # Run another ganesha build unpacked under this root (dpkg-deb -x of the nfs-ganesha,
    # nfs-ganesha-vfs and libntirpc .debs), e.g. 5.9 from bookworm-backports like the
    # appliance; default: ZDS_GANESHA_ROOT from the environment, else the host's ganesha.
    ganesha_root: Path | None = field(
        default_factory=lambda: Path(r) if (r := os.environ.get("ZDS_GANESHA_ROOT")) else None)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _netns_created: bool = False

    # -- paths -----------------------------------------------------------------------------

    @property
    def dbus_socket(self) -> Path:
        return self.workdir / "dbus.sock"

    @property
    def dbus_address(self) -> str:
        return f"unix:path={self.dbus_socket}"

    @property
    def exports_dir(self) -> Path:
        return self.workdir / "exports"

    @property
    def export_base(self) -> Path:
        """Directory under which tests create the directories they export."""
        return self.workdir / "data"

    @property
    def log_path(self) -> Path:
        return self.workdir / "ganesha.log"

    @property
    def ganesha_pid(self) -> int:
        return self.procs["ganesha"].pid

    def adapter(self, active_window: float | None = 600.0) -> Ganesha:
        """A real ``Ganesha`` adapter on this harness's bus and exports dir."""
        return Ganesha(SubprocessRunner(), self.exports_dir, self.dbus_address,
                       active_window=active_window)

    def make_export_dir(self, name: str) -> str:
        path = self.export_base / name
        path.mkdir(parents=True, exist_ok=True)
        return str(path)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no ganesha log)"

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> GaneshaHarness:
        try:
            missing = [b for b in REQUIRED_BINARIES if shutil.which(b) is None]
            if missing:
                raise HarnessError(
                    f"missing {', '.join(missing)}: run scripts/setup-host.sh ({PACKAGES_HINT})"
                )
            if os.geteuid() != 0:
                raise HarnessError("the ganesha harness needs root (namespaces, rpcbind, ganesha)")
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        for d in (self.exports_dir, self.export_base, self.workdir / "recovery"):
            d.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        reap_stale_harnesses()
        # 1. network namespace with lo up
        for _ in range(100):
            name = f"zds-it-{os.getpid()}-{next(_names)}"
            if not Path("/run/netns", name).exists():
                break
        self.netns = name
        _run(["ip", "netns", "add", name])
        self._netns_created = True
        _run(["ip", "-n", name, "link", "set", "lo", "up"])
        # 2. private bus; it runs in the namespace too (its socket is a path, reachable
        # from outside) so that every process of a harness can be found by its netns
        conf = self.workdir / "dbus.conf"
        conf.write_text(DBUS_CONFIG.format(socket=self.dbus_socket))
        self._spawn("dbus", ["ip", "netns", "exec", name, "dbus-daemon", "--nofork",
                             f"--config-file={conf}"])
        self._wait(lambda: self.dbus_socket.exists(), "dbus-daemon socket", "dbus")
        # 3. mount namespace holder, tmpfs on /run inside it
        self._spawn("holder", ["ip", "netns", "exec", name, "unshare", "--mount",
                               "--propagation", "private", "sleep", "infinity"])
        own_mnt = os.readlink("/proc/self/ns/mnt")
        holder = self.procs["holder"].pid
        self._wait(lambda: _readlink(f"/proc/{holder}/ns/mnt") not in (None, own_mnt)
                   and _comm(holder) == "sleep", "mount namespace", "holder")
        self.ns_run(["mount", "-t", "tmpfs", "-o", "mode=0755", "zds-it-run", "/run"])
        self.ns_run(["mkdir", "-p", "/run/ganesha", "/run/rpcbind"])
        # 4. rpcbind
        self._spawn("rpcbind", [*self._nsenter(), "rpcbind", "-f", "-w"])
        self._wait(lambda: Path(f"/proc/{holder}/root/run/rpcbind.sock").exists(),
                   "rpcbind socket", "rpcbind")
        # 5. ganesha
        gconf = self.workdir / "ganesha.conf"
        env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=self.dbus_address)
        binary, plugins = "ganesha.nfsd", ""
        if self.ganesha_root is not None:
            libdir = self.ganesha_root / "usr/lib/x86_64-linux-gnu"
            binary = str(self.ganesha_root / "usr/bin/ganesha.nfsd")
            plugins = f'\n    Plugins_Dir = "{libdir / "ganesha"}";'
            env["LD_LIBRARY_PATH"] = f"{libdir}:{self.ganesha_root / 'usr/lib/ganesha'}"
        gconf.write_text(GANESHA_CONFIG.format(
            nfs=NFS_PORT, mnt=MNT_PORT, nlm=NLM_PORT, rquota=RQUOTA_PORT,
            recovery=self.workdir / "recovery", plugins=plugins))
        self._spawn("ganesha", [*self._nsenter(), binary, "-F", "-f", str(gconf),
                                "-L", str(self.log_path), "-p", str(self.workdir / "ganesha.pid"),
                                "-N", "NIV_EVENT"], env=env)
        adapter = self.adapter()
        self._wait(lambda: "NFS SERVER INITIALIZED" in _read(self.log_path)
                   and adapter.available(), "ganesha start", "ganesha")
        self.started_in = time.monotonic() - t0
        self.version = next((ln.split("Ganesha Version", 1)[1].strip()
                             for ln in _read(self.log_path).splitlines()
                             if "Ganesha Version" in ln), "unknown")

    def stop(self) -> None:
        """Stop what was started (by PID), delete the namespace and the work dir."""
        for name in ("ganesha", "rpcbind", "holder", "dbus"):
            proc = self.procs.pop(name, None)
            if proc is not None:
                _terminate(proc)
        if self._netns_created:
            subprocess.run(["ip", "netns", "del", self.netns], check=False,
                           capture_output=True)
            self._netns_created = False
        if os.environ.get("ZDS_KEEP_IT_DIR"):
            return
        shutil.rmtree(self.workdir, ignore_errors=True)

    # -- running things in the namespaces --------------------------------------------------

    def _nsenter(self) -> list[str]:
        return ["nsenter", "-t", str(self.procs["holder"].pid), "-m", "-n", "--"]

    def ns_run(self, argv: Sequence[str], check: bool = True,
               timeout: float = 60.0) -> subprocess.CompletedProcess[bytes]:
        """Run a command inside the harness's network + mount namespaces."""
        return _run([*self._nsenter(), *argv], check=check, timeout=timeout)

    def nfs_url(self, export_path: str, name: str = "") -> str:
        path = export_path.rstrip("/") + (f"/{name}" if name else "")
        return f"nfs://127.0.0.1{path}?nfsport={NFS_PORT}&mountport={MNT_PORT}"

    def nfs_client(self, argv: Sequence[str],
                   timeout: float = 60.0) -> subprocess.CompletedProcess[bytes]:
        """A libnfs client (nfs-cp, nfs-ls, ...) inside the namespace; never raises."""
        return _run(["ip", "netns", "exec", self.netns, *argv], check=False, timeout=timeout)

    def nfs_write(self, export_path: str, name: str, data: bytes) -> None:
        """Create ``name`` in the export with ``data`` over NFSv3 (libnfs nfs-cp)."""
        result = self.try_nfs_write(export_path, name, data)
        if result.returncode != 0:
            raise HarnessError(f"nfs-cp to {export_path}/{name} failed: {_out(result)}")

    def try_nfs_write(self, export_path: str, name: str,
                      data: bytes) -> subprocess.CompletedProcess[bytes]:
        with tempfile.NamedTemporaryFile(dir=self.workdir, prefix="src-") as src:
            src.write(data)
            src.flush()
            return self.nfs_client(["nfs-cp", src.name, self.nfs_url(export_path, name)])

    def nfs_read(self, export_path: str, name: str) -> bytes:
        fd, dst = tempfile.mkstemp(dir=self.workdir, prefix="dst-")
        os.close(fd)
        os.unlink(dst)  # nfs-cp opens its local destination with O_EXCL
        try:
            result = self.nfs_client(["nfs-cp", self.nfs_url(export_path, name), dst])
            if result.returncode != 0:
                raise HarnessError(f"nfs-cp from {export_path}/{name} failed: {_out(result)}")
            return Path(dst).read_bytes()
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(dst)

    def try_nfs_ls(self, export_path: str) -> subprocess.CompletedProcess[bytes]:
        return self.nfs_client(["nfs-ls", self.nfs_url(export_path)])

    def nfs_ls(self, export_path: str) -> list[str]:
        """Names in the export's top directory (nfs-ls over NFSv3)."""
        result = self.try_nfs_ls(export_path)
        if result.returncode != 0:
            raise HarnessError(f"nfs-ls {export_path} failed: {_out(result)}")
        # "-rw-rw----  1     0     0       100000 f1.bin"
        return sorted(ln.split()[-1] for ln in result.stdout.decode().splitlines()
                      if ln.strip() and ln.split()[-1] not in (".", ".."))

    # -- internals ---------------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str], env: Mapping[str, str] | None = None) -> None:
        out = open(self.workdir / f"{name}.out", "wb")  # noqa: SIM115 - closed by the child's exit
        try:
            self.procs[name] = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None, start_new_session=True)
        finally:
            out.close()

    def _wait(self, ready: Callable[[], bool], what: str, proc_name: str) -> None:
        deadline = time.monotonic() + self.start_timeout
        delay = 0.01
        while True:
            proc = self.procs[proc_name]
            if proc.poll() is not None:
                raise HarnessError(
                    f"{proc_name} exited ({proc.returncode}) while waiting for {what}: "
                    f"{_read(self.workdir / f'{proc_name}.out')[-2000:]}\n{self.log_tail()}")
            if ready():
                return
            if time.monotonic() > deadline:
                raise HarnessError(f"timed out waiting for {what}\n{self.log_tail()}")
            time.sleep(delay)
            delay = min(delay * 1.5, 0.2)


_STALE = re.compile(r"^zds-it-(\d+)-\d+$")
_STALE_DIR = re.compile(r"^zds-it-(\d+)-[A-Za-z0-9_]{8}$")


def reap_stale_harnesses() -> list[str]:
    """Clean up after harnesses whose pytest died without teardown (SIGKILL, timeout):
    for each namespace ``zds-it-<pid>-<n>`` whose creating process is gone, SIGKILL the
    processes inside that network namespace (found by namespace inode, i.e. by PID, not
    by name), delete the namespace and the dead run's work dir. Returns the namespaces
    removed."""
    removed: list[str] = []
    try:
        names = os.listdir("/run/netns")
    except FileNotFoundError:
        return removed
    for name in names:
        m = _STALE.match(name)
        if m is None or _alive(int(m.group(1))):
            continue
        try:
            ns = os.stat(f"/run/netns/{name}")
        except OSError:
            continue
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                st = os.stat(f"/proc/{entry}/ns/net")
            except OSError:
                continue
            if (st.st_ino, st.st_dev) == (ns.st_ino, ns.st_dev):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(entry), signal.SIGKILL)
        subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)
        removed.append(name)
    for d in Path(tempfile.gettempdir()).glob("zds-it-*-*"):
        m = _STALE_DIR.match(d.name)
        if m is not None and d.is_dir() and not _alive(int(m.group(1))):
            shutil.rmtree(d, ignore_errors=True)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def start_private_bus(workdir: Path, name: str = "bus") -> tuple[subprocess.Popen[bytes], str]:
    """A private system-type dbus-daemon with the harness policy; returns (process,
    address) once its socket exists. The caller stops the process."""
    sock = workdir / f"{name}.sock"
    conf = workdir / f"{name}.conf"
    conf.write_text(DBUS_CONFIG.format(socket=sock))
    proc = subprocess.Popen(["dbus-daemon", "--nofork", f"--config-file={conf}"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 10
    while not sock.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            _terminate(proc)
            raise HarnessError(f"dbus-daemon with {conf} did not start")
        time.sleep(0.01)
    return proc, f"unix:path={sock}"


def _run(argv: Sequence[str], check: bool = True,
         timeout: float = 60.0) -> subprocess.CompletedProcess[bytes]:
    result = subprocess.run(list(argv), capture_output=True, timeout=timeout, check=False)
    if check and result.returncode != 0:
        raise HarnessError(f"{' '.join(argv)} failed ({result.returncode}): {_out(result)}")
    return result


def _out(result: subprocess.CompletedProcess[bytes]) -> str:
    return (result.stderr + result.stdout).decode(errors="replace").strip()


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def _readlink(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None


def _comm(pid: int) -> str:
    return _read(Path(f"/proc/{pid}/comm")).strip()


def _terminate(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(timeout=10)
