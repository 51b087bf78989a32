"""Boots the ZDS appliance image under QEMU on this host: `./zds-appliance run|stop|status|console`.

One appliance per state directory (default ${ZDS_CACHE}/vm): a qcow2 overlay on the cached
base image, sparse data disks with serials zdsdata0, zdsdata1 (kept across stop/start),
OVMF variables, a pidfile, an HMP monitor socket and a serial log. Networking is QEMU user
mode with restrict=on: the guest reaches nothing, the host reaches the API, NFS, mountd and
iSCSI through hostfwd on 127.0.0.1 only. QEMU is stopped with system_powerdown on the
monitor, then by the PID in its pidfile (checked to be ours), never by name.

The e2e tests use the same :class:`Appliance` with test_control=True: a virtio-serial port
plus the fw_cfg file opt/zds/test-control start a root command agent in the guest
(images/overlay/usr/local/lib/zds/testctl.py), reached with :meth:`Appliance.exec`.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from images.paths import cache_root, images_dir, vm_dir

OVMF_CODE = Path("/usr/share/OVMF/OVMF_CODE_4M.fd")
OVMF_VARS = Path("/usr/share/OVMF/OVMF_VARS_4M.fd")
GUEST_PORTS = {"api": 8443, "nfs": 2049, "mountd": 20048, "iscsi": 3260, "nvme": 4420}
HEALTH_PATH = "/api/v1/system/health"
# Sparse: they take host space only as ZFS writes. 64 GiB each gives the default pool room
# for the README's examples (thin datastores may promise 20x a pool's capacity).
DATA_DISK_SIZE = 64 * 1024**3


# The API's token format (appliance/services/tokens.py): zds_<12 hex id>_<43 char secret>.
TOKEN_RE = re.compile(r"^zds_[0-9a-f]{12}_[A-Za-z0-9_-]{43}$")


def new_admin_token() -> str:
    """A fresh admin token, made on the host and handed to the guest's first boot by fw_cfg."""
    return f"zds_{secrets.token_hex(6)}_{secrets.token_urlsafe(32)}"


class VmError(RuntimeError):
    pass


@dataclass(frozen=True)
class SocketLink:
    """A guest NIC on a QEMU socket network: an Ethernet wire to another guest, carried
    by one TCP connection on 127.0.0.1 (QEMU ``-netdev socket``). The guest that
    ``listen``s must start before the one that ``connect``s; nothing else can join."""

    mode: str  # "listen" or "connect"
    port: int  # on 127.0.0.1
    mac: str  # the guest finds its NIC by it, e.g. 52:54:00:5a:00:01

    def __post_init__(self) -> None:
        if self.mode not in ("listen", "connect") or not 0 < self.port < 65536 or \
                not re.fullmatch(r"52:54:00(:[0-9a-f]{2}){3}", self.mac):
            raise ValueError(f"bad socket link {self}")


@dataclass
class Ports:
    """Host ports on 127.0.0.1 forwarded to the guest's API, NFS, mountd, iSCSI and
    NVMe/TCP ports."""

    api: int = 8443
    nfs: int = 2049
    mountd: int = 20048
    iscsi: int = 3260
    nvme: int = 4420

    @classmethod
    def random_free(cls) -> Ports:
        return cls(*_free_ports(len(GUEST_PORTS)))

    def hostfwd(self) -> str:
        return ",".join(
            f"hostfwd=tcp:127.0.0.1:{getattr(self, name)}-:{guest}"
            for name, guest in GUEST_PORTS.items()
        )


def log(msg: str) -> None:
    print(f"[vm {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def hmp_command(monitor: Path, cmd: str) -> str:
    """One command on a QEMU human monitor socket (-monitor unix:...), its reply."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(str(monitor))
        time.sleep(0.2)
        with contextlib.suppress(TimeoutError):
            s.recv(65536)  # banner
        s.sendall(cmd.encode() + b"\n")
        time.sleep(0.3)
        try:
            return s.recv(65536).decode(errors="replace")
        except TimeoutError:
            return ""


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists():
            return True
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.3)
    return not Path(f"/proc/{pid}").exists()


def _our_pid(pidfile: Path) -> int | None:
    """The PID in pidfile, only if that process's command line names the pidfile (ours)."""
    try:
        pid = int(pidfile.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    return pid if str(pidfile).encode() in cmdline else None


def save_states(guests: list[tuple[Appliance, Path]], files: tuple[str, ...] = ()) -> float:
    """Saves running guests, each in its own directory: RAM and devices as QEMU's migration
    stream (ram.state), and its disks, firmware variables, token and serial log as they
    are at that moment (:meth:`Appliance.state_files`; ``files`` names further files of
    each state_dir to keep, such as an SSH key the guest trusts). All are paused first
    and run on together at the end, so guests that talk to each other (a cluster) see no
    one of them stall; then their clocks are set again, since a pause stops them. Each
    directory appears whole or not at all. Returns the seconds they were paused."""
    tmps: list[Path] = []
    for _vm, dest in guests:
        if '"' in str(dest):
            raise VmError(f"a state path with a double quote cannot go to the monitor: {dest}")
        tmp = dest.with_name(f"{dest.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        tmps.append(tmp)
    t0 = time.monotonic()
    for vm, _dest in guests:
        vm.monitor_command("stop")
    try:
        for (vm, _dest), tmp in zip(guests, tmps, strict=True):
            vm.monitor_command(f'migrate -d "exec:cat > {tmp / "ram.state"}"')
            vm._wait_migration("saving the guest", 300)
            for name in vm.state_files(files):
                _copy_sparse(vm.state_dir / name, tmp / name)
    except BaseException:
        for tmp in tmps:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        for vm, _dest in guests:  # after a finished migration too: the guest runs on
            vm.monitor_command("cont")
    paused = time.monotonic() - t0
    for vm, _dest in guests:
        if vm.test_control:
            vm.set_guest_clock()
    for (_vm, dest), tmp in zip(guests, tmps, strict=True):
        if dest.exists():  # another run saved the same state meanwhile
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.rename(dest)
    return paused


def _copy_sparse(src: Path, dst: Path) -> None:
    """A copy that keeps a sparse disk sparse (coreutils seeks over the holes)."""
    subprocess.run(["cp", "--sparse=always", "-p", str(src), str(dst)], check=True)


# ---------------------------------------------------------------------------- accel


def qemu_version() -> str:
    """The first line of ``qemu-system-x86_64 --version``."""
    out = subprocess.run(["qemu-system-x86_64", "--version"], capture_output=True, text=True,
                         check=True).stdout
    return out.splitlines()[0]


def kvm_works(timeout: float = 20.0) -> bool:
    """True if a KVM guest really runs here (/dev/kvm may exist while guests hang).

    Boots the OVMF firmware alone under KVM and looks for its boot manager's output on the
    serial port; the answer is cached per host kernel + QEMU version. ZDS_ACCEL=kvm|tcg
    overrides the probe.
    """
    forced = os.environ.get("ZDS_ACCEL")
    if forced in ("kvm", "tcg"):
        return forced == "kvm"
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False
    key = f"{os.uname().release} {qemu_version()}"
    cache = cache_root() / "kvm-probe.json"
    with contextlib.suppress(OSError, ValueError):
        known = json.loads(cache.read_text())
        if known.get("key") == key:
            return bool(known["works"])
    works = _probe_kvm(timeout)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({"key": key, "works": works}))
    return works


def _probe_kvm(timeout: float) -> bool:
    d = Path(os.environ.get("TMPDIR", "/tmp")) / f"zds-kvm-probe-{os.getpid()}"
    d.mkdir(parents=True, exist_ok=True)
    vars_fd = d / "vars.fd"
    shutil.copy(OVMF_VARS, vars_fd)
    log_path = d / "serial.log"
    p = subprocess.Popen([
        "qemu-system-x86_64", "-accel", "kvm", "-machine", "q35", "-cpu", "host", "-m", "256",
        "-nodefaults", "-display", "none", "-no-reboot", "-net", "none",
        "-drive", f"if=pflash,format=raw,unit=0,readonly=on,file={OVMF_CODE}",
        "-drive", f"if=pflash,format=raw,unit=1,file={vars_fd}",
        "-serial", f"file:{log_path}",
    ], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ok = False
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and p.poll() is None:
            text = log_path.read_bytes() if log_path.exists() else b""
            if b"BdsDxe" in text or b"Shell" in text or b"UEFI" in text:
                ok = True
                break
            time.sleep(0.5)
    finally:
        p.kill()
        p.wait()
        shutil.rmtree(d, ignore_errors=True)
    return ok


# ---------------------------------------------------------------------------- appliance


@dataclass
class Appliance:
    """One QEMU instance of the appliance, with all its files in state_dir."""

    state_dir: Path
    base_image: Path
    ports: Ports = field(default_factory=Ports)
    data_disks: int = 2
    # which zdsdata<i> disks are attached (default 0 .. data_disks-1): tests boot without
    # one of them (a failed disk) and with a new one to replace it
    disk_indexes: tuple[int, ...] | None = None
    data_disk_size: int = DATA_DISK_SIZE
    # further sparse disks as (serial, bytes), outside the zdsdata* set first boot pools:
    # bench/nfs_servers.py adds a small one (serial zdslog0) as a SLOG
    extra_disks: tuple[tuple[str, int], ...] = ()
    test_control: bool = False
    memory_mib: int = 4096
    cpus: int = 2
    base_format: str = "raw"  # "vmdk" to boot the disk from the OVA
    # "esxi": VMXNET3 NIC and data disks on PVSCSI like the OVA; the system disk goes on
    # SATA because this host's OVMF has no PVSCSI boot driver (ESXi's EFI firmware has one).
    hardware: str = "virtio"
    # SSH: a host port on 127.0.0.1 forwarded to the guest's 22, and public keys handed in
    # by fw_cfg (opt/zds/ssh-authorized-keys: first boot adds them for root, as the
    # Vagrant box's Vagrantfile does with Vagrant's key)
    ssh_port: int | None = None
    ssh_authorized_keys: Path | None = None
    # private links to other QEMU guests: a second NIC per link, joined through a QEMU
    # socket network on 127.0.0.1 (the e2e of two appliances replicating)
    links: tuple[SocketLink, ...] = ()
    last_health: str = field(default="", repr=False)  # the last health body seen
    _ctl: socket.socket | None = field(default=None, repr=False)
    _ctl_buf: bytes = field(default=b"", repr=False)
    _ctl_id: int = field(default=0, repr=False)

    # -- files
    @property
    def pidfile(self) -> Path:
        return self.state_dir / "qemu.pid"

    @property
    def monitor(self) -> Path:
        return self.state_dir / "monitor.sock"

    @property
    def control_socket(self) -> Path:
        return self.state_dir / "control.sock"

    @property
    def serial_log(self) -> Path:
        return self.state_dir / "serial.log"

    @property
    def overlay(self) -> Path:
        return self.state_dir / "system.qcow2"

    @property
    def token_file(self) -> Path:
        return self.state_dir / "admin-token"

    @property
    def api_url(self) -> str:
        return f"https://127.0.0.1:{self.ports.api}"

    def admin_token(self) -> str:
        return self.token_file.read_text().strip()

    def machine_uuid(self) -> str:
        """This appliance's SMBIOS UUID, made once per state directory."""
        f = self.state_dir / "machine-uuid"
        if not f.exists():
            f.write_text(f"{uuid.uuid4()}\n")
        return f.read_text().strip()

    def attached_disks(self) -> tuple[int, ...]:
        return self.disk_indexes if self.disk_indexes is not None \
            else tuple(range(self.data_disks))

    def disk_path(self, i: int) -> Path:
        return self.state_dir / f"zdsdata{i}.raw"

    # -- lifecycle
    def prepare(self, *, fresh_system: bool = False, fresh_data: bool = False) -> bool:
        """Creates the overlay, data disks, OVMF vars and admin token if missing.

        Returns True when a new system disk meets data disks that were used before (their
        pool must then be imported through the API).
        """
        self.state_dir.mkdir(parents=True, exist_ok=True)
        old_data = not fresh_data and any(self.disk_path(i).exists()
                                          for i in self.attached_disks())
        base_rec = self.state_dir / "base-image"
        base = str(self.base_image.resolve())
        if not fresh_system and base_rec.exists() and base_rec.read_text() != base:
            log("the base image changed: starting from a fresh system disk (data disks kept)")
            fresh_system = True
        if fresh_system or not self.overlay.exists():
            self.overlay.unlink(missing_ok=True)
            (self.state_dir / "ovmf-vars.fd").unlink(missing_ok=True)
            subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", self.base_format,
                            "-b", base, str(self.overlay)], check=True)
            base_rec.write_text(base)
        else:
            old_data = False
        if not (self.state_dir / "ovmf-vars.fd").exists():
            shutil.copy(OVMF_VARS, self.state_dir / "ovmf-vars.fd")
        for i in self.attached_disks():
            p = self.disk_path(i)
            if fresh_data:
                p.unlink(missing_ok=True)
            if not p.exists():
                with p.open("wb") as f:
                    f.truncate(self.data_disk_size)  # sparse
        for serial, size in self.extra_disks:
            p = self.state_dir / f"{serial}.raw"
            if fresh_data:
                p.unlink(missing_ok=True)
            if not p.exists():
                with p.open("wb") as f:
                    f.truncate(size)
        if not self.token_file.exists() or not TOKEN_RE.match(self.admin_token()):
            self.token_file.unlink(missing_ok=True)
            fd = os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(new_admin_token() + "\n")
        return old_data

    def qemu_argv(self, kvm: bool) -> list[str]:
        s = self.state_dir
        accel = ["-accel", "kvm", "-cpu", "host"] if kvm else \
            ["-accel", "tcg,thread=multi", "-cpu", "max"]
        cache = "unsafe" if self.test_control else "writeback"
        argv = [
            "qemu-system-x86_64", "-name", "zds-appliance", "-machine", "q35", *accel,
            "-smp", str(self.cpus), "-m", str(self.memory_mib),
            # a machine UUID of its own, kept with the data disks: the appliance derives
            # its ZFS hostid from it, so a new system disk still owns the pool
            "-uuid", self.machine_uuid(),
            "-drive", f"if=pflash,format=raw,unit=0,readonly=on,file={OVMF_CODE}",
            "-drive", f"if=pflash,format=raw,unit=1,file={s / 'ovmf-vars.fd'}",
            "-drive", f"if=none,id=sys,file={self.overlay},format=qcow2,cache=unsafe,"
                      "discard=unmap",
        ]
        if self.hardware == "esxi":
            argv += ["-device", "ide-hd,bus=ide.0,drive=sys,bootindex=0",
                     "-device", "pvscsi,id=pvscsi0"]
        else:
            argv += ["-device", "virtio-blk-pci,drive=sys,bootindex=0"]
        for i in self.attached_disks():
            argv += ["-drive", f"if=none,id=data{i},file={self.disk_path(i)},format=raw,"
                               f"cache={cache},discard=unmap",
                     "-device", (f"scsi-hd,bus=pvscsi0.0,drive=data{i},serial=zdsdata{i}"
                                 if self.hardware == "esxi" else
                                 f"virtio-blk-pci,drive=data{i},serial=zdsdata{i}")]
        for serial, _size in self.extra_disks:
            argv += ["-drive", f"if=none,id={serial},file={self.state_dir / f'{serial}.raw'},"
                               f"format=raw,cache={cache},discard=unmap",
                     "-device", f"virtio-blk-pci,drive={serial},serial={serial}"]
        ssh_fwd = f",hostfwd=tcp:127.0.0.1:{self.ssh_port}-:22" if self.ssh_port else ""
        if self.ssh_authorized_keys is not None:
            argv += ["-fw_cfg",
                     f"name=opt/zds/ssh-authorized-keys,file={self.ssh_authorized_keys}"]
        argv += [
            "-netdev", f"user,id=n0,restrict=on,{self.ports.hostfwd()}{ssh_fwd}",
            "-device", ("vmxnet3" if self.hardware == "esxi" else "virtio-net-pci") + ",netdev=n0",
        ]
        for i, link in enumerate(self.links):
            argv += ["-netdev", f"socket,id=link{i},{link.mode}=127.0.0.1:{link.port}",
                     "-device", f"virtio-net-pci,netdev=link{i},mac={link.mac}"]
        argv += [
            "-fw_cfg", f"name=opt/zds/admin-token,file={self.token_file}",
            "-display", "none",
            # append: start() empties the log, a restored guest goes on from the saved one
            "-chardev", f"file,id=ser0,path={self.serial_log},append=on",
            "-serial", "chardev:ser0",
            "-monitor", f"unix:{self.monitor},server=on,wait=off",
            "-pidfile", str(self.pidfile), "-daemonize",
        ]
        if self.test_control:
            argv += [
                "-fw_cfg", "name=opt/zds/test-control,string=1",
                "-device", "virtio-serial-pci,id=vser0",
                "-chardev", f"socket,id=ctl,path={self.control_socket},server=on,wait=off",
                "-device", "virtserialport,bus=vser0.0,chardev=ctl,name=org.zds.control",
            ]
        return argv

    def pid(self) -> int | None:
        """The running QEMU's PID from the pidfile, only if that process is really ours."""
        return _our_pid(self.pidfile)

    def start(self, kvm: bool | None = None) -> None:
        if self.pid() is not None:
            raise VmError(f"already running (pid {self.pid()}, {self.state_dir})")
        if kvm is None:
            kvm = kvm_works()
        self.serial_log.write_bytes(b"")
        self._launch(kvm, f"starting QEMU ({'KVM' if kvm else 'TCG'}), "
                          f"serial log {self.serial_log}")

    def _launch(self, kvm: bool, what: str, extra: tuple[str, ...] = ()) -> None:
        """Starts (daemonizes) QEMU with qemu_argv and ``extra``, recording the argv and
        ports in state_dir."""
        for p in (self.monitor, self.control_socket, self.pidfile):
            p.unlink(missing_ok=True)
        argv = [*self.qemu_argv(kvm), *extra]
        (self.state_dir / "qemu.argv").write_text(json.dumps(argv) + "\n")
        (self.state_dir / "ports.json").write_text(json.dumps(asdict(self.ports)) + "\n")
        log(what)
        self.started_at = time.monotonic()
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise VmError(f"qemu failed to start: {proc.stderr.strip()}")

    def monitor_command(self, cmd: str) -> str:
        return hmp_command(self.monitor, cmd)

    def stop(self, timeout: float = 90.0) -> bool:
        """system_powerdown, wait, then SIGTERM/SIGKILL the pidfile PID. True if it was running."""
        self.close_control()
        pid = self.pid()
        if pid is None:
            return False
        with contextlib.suppress(OSError):
            self.monitor_command("system_powerdown")
        if self._wait_gone(pid, timeout):
            return True
        log(f"no clean power-off within {timeout:.0f} s: SIGTERM to pid {pid}")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if not self._wait_gone(pid, 10):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            self._wait_gone(pid, 10)
        return True

    def _wait_gone(self, pid: int, timeout: float) -> bool:
        return _wait_gone(pid, timeout)

    def kill(self) -> float:
        """SIGKILL to our QEMU (pidfile PID, checked): the machine stops between two
        instructions, as in a power cut; its sockets close, so the switch and the peers
        see its links go away. Returns time.time() of the kill; VmError if not running."""
        self.close_control()
        pid = self.pid()
        if pid is None:
            raise VmError(f"not running ({self.state_dir})")
        t = time.time()
        os.kill(pid, signal.SIGKILL)
        if not _wait_gone(pid, 10):
            raise VmError(f"QEMU pid {pid} still there after SIGKILL")
        return t

    # -- saved states: a booted test guest restored instead of booted again (issue 26)
    def save_state(self, dest: Path, files: tuple[str, ...] = ()) -> float:
        """Saves the running guest in ``dest`` (see :func:`save_states`); returns the
        seconds it was paused."""
        return save_states([(self, dest)], files)

    def state_files(self, files: tuple[str, ...] = ()) -> list[str]:
        """The names in state_dir a saved state keeps beside ram.state."""
        return ["system.qcow2", "ovmf-vars.fd", "admin-token", "machine-uuid", "serial.log",
                *(self.disk_path(i).name for i in self.attached_disks()),
                *(f"{serial}.raw" for serial, _ in self.extra_disks), *files]

    def restore_state(self, src: Path, kvm: bool = False, timeout: float = 300.0) -> float:
        """Loads a state saved by :func:`save_states` into this appliance, in its own
        (empty) state_dir and on its own host ports: the saved files are copied in and QEMU
        loads ram.state with ``-incoming``. The guest stays paused, as it was saved:
        ``cont`` on the monitor runs it on (guests saved together are loaded first, then
        run on one right after the other), and :meth:`set_guest_clock` gives it the host's
        clock. Returns the seconds taken."""
        if self.pid() is not None:
            raise VmError(f"already running (pid {self.pid()}, {self.state_dir})")
        if '"' in str(src) or " " in str(src):
            raise VmError(f"a state path QEMU's exec: cannot take: {src}")
        t0 = time.monotonic()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        for f in src.iterdir():
            if f.name != "ram.state":
                _copy_sparse(f, self.state_dir / f.name)
        self._launch(kvm, f"restoring QEMU ({'KVM' if kvm else 'TCG'}) from {src}",
                     ("-incoming", f"exec:cat {src / 'ram.state'}"))
        self._wait_migration("loading the saved guest", timeout)
        return time.monotonic() - t0

    def _wait_migration(self, what: str, timeout: float) -> None:
        # Sample of `info migrate` (QEMU 7.2): "...\nMigration status: completed\n..."
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = re.search(r"Migration status: (\S+)", self.monitor_command("info migrate"))
            if status and status.group(1) == "completed":
                return
            if status and status.group(1) in ("failed", "cancelled"):
                raise VmError(f"{what}: migration {status.group(1)}")
            if self.pid() is None:
                raise VmError(f"{what}: QEMU exited; see {self.serial_log}")
            time.sleep(0.3)
        raise VmError(f"{what}: not done after {timeout:.0f} s")

    def set_guest_clock(self) -> None:
        """Sets the guest's clock to the host's (a restored guest's stands where it was
        saved). Its active timers are stopped first and started after, so each is due
        from the new time as after a boot, instead of all firing at once for the jump."""
        timers = ("systemctl list-units --type=timer --state=active --plain --no-legend "
                  "| awk '{print $1}'")
        rc, out = self.exec(f"t=$({timers}); systemctl stop $t && "
                            f"date -u -s @{time.time():.3f} >/dev/null && systemctl start $t")
        if rc != 0:
            raise VmError(f"could not set the guest's clock: {out}")

    # -- health
    def health(self, timeout: float = 5.0) -> tuple[int, str] | None:
        """(HTTP status, body) of the API health endpoint, or None when nothing answers.
        With the admin token (when this state directory has one) the body has the details
        (``message``); without, the API answers status and codes only."""
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # the appliance's certificate is self-signed
        request = urllib.request.Request(self.api_url + HEALTH_PATH)
        if self.token_file.exists():
            request.add_header("Authorization", f"Bearer {self.admin_token()}")
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=ctx) as r:
                return r.status, r.read().decode(errors="replace")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")
        except (OSError, ssl.SSLError):
            return None

    def wait_healthy(self, timeout: float = 900.0) -> float:
        """Waits until the health endpoint answers 200 (ok, or degraded: a pool with a
        missing disk still serves); returns the seconds waited. 503 means starting or
        ZFS down. The last answer is kept in ``last_health``."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.pid() is None:
                raise VmError(f"QEMU exited; see {self.serial_log}")
            h = self.health()
            if h is not None:
                self.last_health = h[1]
            if h is not None and h[0] == 200:
                return time.monotonic() - t0
            time.sleep(2)
        raise VmError(f"API not healthy after {timeout:.0f} s; see {self.serial_log}")

    # -- test control channel
    def _ctl_connect(self) -> socket.socket:
        if self._ctl is None:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(str(self.control_socket))
            self._ctl, self._ctl_buf = s, b""
        return self._ctl

    def close_control(self) -> None:
        if self._ctl is not None:
            self._ctl.close()
            self._ctl = None

    def _ctl_send(self, obj: dict[str, object]) -> int:
        self._ctl_id += 1
        obj["id"] = self._ctl_id
        self._ctl_connect().sendall(json.dumps(obj).encode() + b"\n")
        return self._ctl_id

    def _ctl_reply(self, want: int, timeout: float) -> dict[str, object] | None:
        s = self._ctl_connect()
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" in self._ctl_buf:
                line, self._ctl_buf = self._ctl_buf.split(b"\n", 1)
                with contextlib.suppress(ValueError):
                    msg = json.loads(line)
                    if isinstance(msg, dict) and msg.get("id") == want:
                        return msg
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            s.settimeout(min(left, 1.0))
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                self.close_control()
                raise VmError("control channel closed by QEMU")
            self._ctl_buf += chunk

    def wait_control(self, timeout: float = 600.0) -> str:
        """Pings the guest agent until it answers; returns the guest's boot id."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.pid() is None:
                raise VmError(f"QEMU exited; see {self.serial_log}")
            try:
                reply = self._ctl_reply(self._ctl_send({"ping": 1}), 2.0)
            except OSError:
                self.close_control()
                time.sleep(1)
                continue
            if reply is not None:
                return str(reply.get("hello"))
        raise VmError(f"no answer on the control channel after {timeout:.0f} s")

    def exec(self, cmd: str, timeout: float = 300.0) -> tuple[int, str]:
        """Runs cmd with bash as root in the guest: (exit code, stdout+stderr)."""
        want = self._ctl_send({"cmd": cmd, "timeout": timeout})
        reply = self._ctl_reply(want, timeout + 30)
        if reply is None:
            raise VmError(f"no reply from the guest for: {cmd}")
        out = base64.b64decode(str(reply.get("out", ""))).decode(errors="replace")
        rc = reply.get("rc")
        return (rc if isinstance(rc, int) else -1), out

    def boot_id(self) -> str:
        rc, out = self.exec("cat /proc/sys/kernel/random/boot_id")
        if rc != 0:
            raise VmError(f"cannot read boot_id: {out}")
        return out.strip()

    def reboot(self, timeout: float = 900.0, wait_api: bool = True) -> None:
        """Reboots the guest through the control channel, waits for a new boot (and the API)."""
        old = self.boot_id()
        self.exec("(sleep 1; systemctl reboot) >/dev/null 2>&1 &")
        t0 = time.monotonic()
        while True:
            if time.monotonic() - t0 > timeout:
                raise VmError("the guest did not come back after reboot")
            new = self.wait_control(timeout)
            if new != old:
                break
            time.sleep(2)
        if wait_api:
            self.wait_healthy(max(60.0, timeout - (time.monotonic() - t0)))


# ---------------------------------------------------------------------------- switch

SWITCH_NAME = re.compile(r"[a-z][a-z0-9]{0,15}")


@dataclass
class Switch:
    """Ethernet segments joining several QEMU guests on this host (a socket link joins
    only two): one QEMU process without a machine (``-machine none``) holding a hub per
    segment. Each port is a TCP socket the switch listens on at 127.0.0.1; a guest joins
    with ``link()``, a SocketLink that connects to it. A hub repeats every frame to all
    its other ports, like one shared wire.

    The ports outlive the guests: QEMU accepts again on a port whose guest went away, so
    a guest killed and booted again joins the same segments. ``set_link`` cuts or
    restores one port (its frames are dropped both ways while the guest's NIC keeps its
    carrier, as behind a real switch); a guest that connects again finds its port up."""

    state_dir: Path
    # segment -> its port names, e.g. {"cluster": ("a", "b")}
    segments: dict[str, tuple[str, ...]]
    # "segment-port" -> the TCP port on 127.0.0.1, chosen by start()
    ports: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        names = [*self.segments, *(p for ps in self.segments.values() for p in ps)]
        bad = [n for n in names if not SWITCH_NAME.fullmatch(n)]
        if bad or not self.segments:
            raise ValueError(f"bad switch segments {self.segments} ({bad})")

    @property
    def pidfile(self) -> Path:
        return self.state_dir / "switch.pid"

    @property
    def monitor(self) -> Path:
        return self.state_dir / "switch-monitor.sock"

    @staticmethod
    def netdev_id(segment: str, port: str) -> str:
        return f"{segment}-{port}"

    def qemu_argv(self) -> list[str]:
        argv = ["qemu-system-x86_64", "-name", "zds-switch", "-machine", "none",
                "-nodefaults", "-display", "none"]
        for hub, (segment, names) in enumerate(self.segments.items()):
            for name in names:
                nid = self.netdev_id(segment, name)
                argv += ["-netdev", f"socket,id={nid},listen=127.0.0.1:{self.ports[nid]}",
                         "-netdev", f"hubport,id=hub-{nid},hubid={hub},netdev={nid}"]
        return [*argv, "-monitor", f"unix:{self.monitor},server=on,wait=off",
                "-pidfile", str(self.pidfile), "-daemonize"]

    def start(self) -> None:
        """Starts the switch on free ports (chosen again once if one was taken meanwhile)."""
        if self.pid() is not None:
            raise VmError(f"switch already running (pid {self.pid()})")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        err = ""
        for _attempt in range(2):
            self.monitor.unlink(missing_ok=True)
            ids = [self.netdev_id(s, p) for s, ps in self.segments.items() for p in ps]
            self.ports = dict(zip(ids, _free_ports(len(ids)), strict=True))
            proc = subprocess.run(self.qemu_argv(), capture_output=True, text=True,
                                  check=False)
            if proc.returncode == 0:
                (self.state_dir / "switch-ports.json").write_text(json.dumps(self.ports))
                return
            err = proc.stderr.strip()
        raise VmError(f"the switch did not start: {err}")

    def link(self, segment: str, port: str, mac: str) -> SocketLink:
        """A guest NIC (with this MAC) plugged into the port."""
        return SocketLink("connect", self.ports[self.netdev_id(segment, port)], mac)

    def set_link(self, segment: str, port: str, up: bool) -> None:
        """Cuts (up=False) or restores one port's cable."""
        nid = self.netdev_id(segment, port)
        if nid not in self.ports:
            raise ValueError(f"no port {nid}")
        out = hmp_command(self.monitor, f"set_link {nid} {'on' if up else 'off'}")
        if "not found" in out or "Error" in out:
            raise VmError(f"set_link {nid}: {out}")

    def pid(self) -> int | None:
        return _our_pid(self.pidfile)

    def stop(self) -> None:
        """SIGTERM to the switch's PID (pidfile, checked ours); it holds no state."""
        pid = self.pid()
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if not _wait_gone(pid, 10):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            _wait_gone(pid, 5)


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


# ---------------------------------------------------------------------------- CLI


def _ports_from_args(args: argparse.Namespace) -> Ports:
    return Ports(api=args.api_port, nfs=args.nfs_port, mountd=args.mountd_port,
                 iscsi=args.iscsi_port, nvme=args.nvme_port)


def _appliance(args: argparse.Namespace, ports: Ports | None = None) -> Appliance:
    state = Path(args.state_dir)
    if ports is None:
        saved = state / "ports.json"
        ports = Ports(**json.loads(saved.read_text())) if saved.exists() else Ports()
    return Appliance(state_dir=state, base_image=images_dir() / "current" / "zds.raw",
                     ports=ports)


def cmd_run(args: argparse.Namespace) -> int:
    from images import build

    app = _appliance(args, _ports_from_args(args))
    if app.pid() is not None:
        print(f"already running: {app.api_url} (./zds-appliance status)")
        return 0
    out = build.build()
    app.base_image = out / "zds.raw"
    reused_data = app.prepare(fresh_system=args.fresh)
    t0 = time.monotonic()
    app.start()
    log(f"waiting for {app.api_url}{HEALTH_PATH} (under TCG this takes a minute or two)")
    try:
        app.wait_healthy(args.timeout)
    except VmError as e:
        print(f"error: {e}\nthe appliance is still running: ./zds-appliance stop", file=sys.stderr)
        return 1
    token = app.admin_token()
    print(f"""
ZDS appliance is up ({time.monotonic() - t0:.0f} s to a healthy API).{_health_line(app)}
  API        {app.api_url}  (self-signed certificate)
  token      {token}
  NFS        127.0.0.1:{app.ports.nfs} (mountd {app.ports.mountd})
  iSCSI      127.0.0.1:{app.ports.iscsi}
  NVMe/TCP   127.0.0.1:{app.ports.nvme} (connect to it by NQN: discovery names the guest's
             own address)
  console    {app.serial_log}
  data disks {', '.join(str(app.disk_path(i)) for i in range(app.data_disks))}

First call (the pools; `zds --server {app.api_url} --token ...` works too):
  curl -k -H 'Authorization: Bearer {token}' {app.api_url}/api/v1/pools
Stop it with ./zds-appliance stop (the data disks are kept).""")
    if reused_data:
        print(f"""
Note: this is a new system disk (new image or --fresh) on data disks used before. It
imports their pool at boot (same machine UUID, same ZFS hostid); if the pool is not
listed, see the console and import it through the API:
  curl -k -H 'Authorization: Bearer {token}' {app.api_url}/api/v1/pools/importable
  curl -k -X POST -H 'Authorization: Bearer {token}' {app.api_url}/api/v1/pools/NAME/import""")
    return 0


def _health_line(app: Appliance) -> str:
    """'' when all is well; else the state and what to do (a degraded pool, drift...)."""
    try:
        h = json.loads(app.last_health)
    except ValueError:
        return ""
    if h.get("status") == "ok":
        return ""
    return f"\n  HEALTH     {h.get('status', '?').upper()}: {h.get('message', '')}"


def cmd_stop(args: argparse.Namespace) -> int:
    app = _appliance(args)
    if app.stop(args.timeout):
        print("stopped")
    else:
        print("not running")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    app = _appliance(args)
    pid = app.pid()
    if pid is None:
        print("not running")
        return 3
    h = app.health()
    state = "healthy" if h and h[0] == 200 else ("API answers " + str(h[0]) if h else
                                                   "API not answering yet")
    print(f"running (pid {pid}): {state}\n  API {app.api_url}\n  console {app.serial_log}")
    return 0


def cmd_console(args: argparse.Namespace) -> int:
    app = _appliance(args)
    print(app.serial_log)
    if app.serial_log.exists():
        lines = app.serial_log.read_bytes().decode(errors="replace").splitlines()
        print("\n".join(lines[-args.lines:]))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="zds-appliance", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--state-dir", default=os.environ.get("ZDS_VM_DIR", str(vm_dir())))
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="build or reuse the image, boot it, wait for the API")
    run.add_argument("--api-port", type=int, default=int(os.environ.get("ZDS_API_PORT", 8443)))
    run.add_argument("--nfs-port", type=int, default=int(os.environ.get("ZDS_NFS_PORT", 2049)))
    run.add_argument("--mountd-port", type=int,
                     default=int(os.environ.get("ZDS_MOUNTD_PORT", 20048)))
    run.add_argument("--iscsi-port", type=int,
                     default=int(os.environ.get("ZDS_ISCSI_PORT", 3260)))
    run.add_argument("--nvme-port", type=int,
                     default=int(os.environ.get("ZDS_NVME_PORT", 4420)))
    run.add_argument("--fresh", action="store_true",
                     help="start from a fresh system disk (data disks are kept)")
    run.add_argument("--timeout", type=float, default=900.0)
    stop = sub.add_parser("stop", help="power the appliance off")
    stop.add_argument("--timeout", type=float, default=90.0)
    sub.add_parser("status", help="is it running, is the API healthy")
    con = sub.add_parser("console", help="path and tail of the serial console log")
    con.add_argument("--lines", type=int, default=40)
    args = ap.parse_args(argv)
    handler = {"run": cmd_run, "stop": cmd_stop, "status": cmd_status, "console": cmd_console}
    return handler[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
