"""e2e fixtures: the appliance image booted once per test session under QEMU.

`appliance` takes the run's image (tests/e2e/imagecache.py: this tree's, built once and
cached by images/build.py), boots it from a fresh
qcow2 overlay with fresh sparse data disks (serials zdsdata0, zdsdata1) and random free
host ports on 127.0.0.1, and yields an :class:`E2EAppliance`:

  api_url, admin_token, nfs_port, mountd_port, iscsi_port   what clients on the host use
  exec(cmd, timeout) -> (rc, output)     a root shell command in the guest (test-only
                                         virtio-serial agent, see images/vm.py)
  reboot()                               reboots the guest, waits for the agent and the API
  power_cycle(fresh_system, disks)       off and on again: a new system disk, other disks
  api_healthy                            whether the API answered before the tests started
  ssh(cmd)                               the same as root over SSH (127.0.0.1:ssh_port), with
                                         a key handed in by fw_cfg as the Vagrant box does

Teardown powers the guest off through the monitor and then by the pidfile PID.

Reboots are shared (issue 26: each one costs minutes under TCG). A test that must run on
a rebooted appliance is marked ``@pytest.mark.after_reboot``; one that needs the power
cycle of an update with a failed disk (a fresh system disk, zdsdata1 gone, an empty
zdsdata2) ``@pytest.mark.after_power_cycle``. Every other test of the session runs first
(phase 0), then the appliance reboots once and every ``after_reboot`` test runs (phase 1),
then it power-cycles once and every ``after_power_cycle`` test runs (phase 2). The tests
that follow a marked one in its module go with it, so a module's later steps (cleanups)
keep their order; within a phase modules keep theirs, unless the marker says
``order=N`` (lower first).
`booted(image_dir, Boot(...), ...)` does the same for modules that need appliances of
their own, e.g. two joined by a QEMU socket link (test_replication_pair_e2e.py); the
session appliance, when up, is paused while they run (it would take their CPU).
Hazard: LIO advertises the guest's 10.0.2.15 in iSCSI discovery; connect only to the
127.0.0.1 ports given here, never to a discovered portal.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from images.vm import (
    OVMF_CODE,
    OVMF_VARS,
    Appliance,
    Ports,
    SocketLink,
    VmError,
    kvm_works,
    qemu_version,
)
from tests.e2e import imagecache

if TYPE_CHECKING:
    from tests.e2e.habed import HaBed

BOOT_TIMEOUT = float(os.environ.get("ZDS_E2E_BOOT_TIMEOUT", "900"))
# a restore takes seconds; one that has not answered by then is booted instead
RESTORE_TIMEOUT = 180.0
PHASES = {"after_reboot": 1, "after_power_cycle": 2}
# the data disks after the shared power cycle: zdsdata1 failed, zdsdata2 new and empty
POWER_CYCLE_DISKS = (0, 2)
# what a saved guest keeps beside its disks: the SSH key it trusts (booted() makes it)
SAVED_FILES = ("ssh-key", "ssh-key.pub")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "after_reboot(order=0): runs after the session "
                                       "appliance's one shared reboot (phase 1)")
    config.addinivalue_line("markers", "after_power_cycle(order=0): runs after its one "
                                       "shared power cycle: a fresh system disk and a "
                                       "failed data disk (phase 2)")


def _phase_of(item: pytest.Item) -> tuple[int, int] | None:
    for name, phase in PHASES.items():
        mark = item.get_closest_marker(name)
        if mark is not None:
            return phase, int(mark.kwargs.get("order", 0))
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Phase 0, then phase 1, then phase 2 (see the module docstring); stable otherwise."""
    keys: dict[int, tuple[int, int, int]] = {}
    current: dict[str, tuple[int, int]] = {}  # module -> the phase its last mark set
    for index, item in enumerate(items):
        module = str(item.fspath)
        marked = _phase_of(item)
        if marked is not None:
            current[module] = marked
        phase, order = current.get(module, (0, 0))
        keys[id(item)] = (phase, order, index)
    items.sort(key=lambda it: keys[id(it)])


@pytest.fixture(autouse=True)
def _shared_restarts(request: pytest.FixtureRequest) -> None:
    """Reboots (or power-cycles) the session appliance once, before the first test of
    phase 1 (or 2) that needs it."""
    marked = _phase_of(request.node)
    if marked is not None:
        request.getfixturevalue("shared_reboot" if marked[0] == 1 else "shared_power_cycle")


@dataclass
class E2EAppliance:
    vm: Appliance
    image_dir: Path
    timings: dict[str, float] = field(default_factory=dict)
    api_healthy: bool = False

    @property
    def api_url(self) -> str:
        return self.vm.api_url

    @property
    def admin_token(self) -> str:
        return self.vm.admin_token()

    @property
    def nfs_port(self) -> int:
        return self.vm.ports.nfs

    @property
    def mountd_port(self) -> int:
        return self.vm.ports.mountd

    @property
    def iscsi_port(self) -> int:
        return self.vm.ports.iscsi

    @property
    def serial_log(self) -> Path:
        return self.vm.serial_log

    def exec(self, cmd: str, timeout: float = 300.0) -> tuple[int, str]:
        return self.vm.exec(cmd, timeout)

    def check(self, cmd: str, timeout: float = 300.0) -> str:
        """exec() that fails the test on a non-zero exit, with the output in the message."""
        rc, out = self.vm.exec(cmd, timeout)
        assert rc == 0, f"guest command failed ({rc}): {cmd}\n{out}"
        return out

    @property
    def ssh_port(self) -> int:
        assert self.vm.ssh_port is not None
        return self.vm.ssh_port

    @property
    def ssh_key(self) -> Path:
        """The private half of the key the appliance got through fw_cfg."""
        return self.vm.state_dir / "ssh-key"

    def ssh(self, cmd: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ssh", "-i", str(self.ssh_key), "-p", str(self.ssh_port), "-o", "BatchMode=yes",
             "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
             "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=30", "root@127.0.0.1", cmd],
            capture_output=True, text=True, timeout=timeout, check=False)

    def reboot(self, timeout: float = BOOT_TIMEOUT) -> None:
        self.vm.reboot(timeout=timeout, wait_api=True)


    def restart_with_disks(self, indexes: tuple[int, ...],
                           timeout: float = BOOT_TIMEOUT) -> None:
        """Powers off and boots with only the data disks zdsdata<i> for ``indexes``
        attached (a missing one is a failed disk; a new index is a new empty disk)."""
        self.power_cycle(fresh_system=False, disks=indexes, timeout=timeout)

    def power_cycle(self, *, fresh_system: bool, disks: tuple[int, ...] | None = None,
                    timeout: float = BOOT_TIMEOUT) -> None:
        """Powers off and boots again: with ``fresh_system`` on a new copy of the image
        (an update: the data disks and the fw_cfg admin token stay), with ``disks`` on
        only those data disks zdsdata<i> (a missing one is a failed disk; a new index a
        new empty disk)."""
        self.vm.stop(timeout=120)
        if disks is not None:
            self.vm.disk_indexes = disks
        old_data = self.vm.prepare(fresh_system=fresh_system)
        assert old_data or not fresh_system, "the data disks should have been reused"
        self.vm.start(kvm=bool(self.timings.get("accel_kvm")))
        self.vm.wait_control(timeout)
        self.api_healthy = _wait_api(self.vm, timeout)

    def kill(self) -> float:
        """kill -9 of this guest's QEMU (an unplanned power loss); time.time() of it."""
        return self.vm.kill()

    def boot_again(self, timeout: float = BOOT_TIMEOUT) -> None:
        """Starts the same machine again (its disks and links as they were), waits for
        the agent and the API."""
        self.vm.start(kvm=bool(self.timings.get("accel_kvm")))
        self.vm.wait_control(timeout)
        self.api_healthy = _wait_api(self.vm, timeout)


def _wait_api(vm: Appliance, timeout: float, status: str | None = None) -> bool:
    """Waits for a 200 from the health endpoint; gives up early when zds-api cannot start.
    With ``status``, also waits (up to 2 minutes more) for the body to say it: a restored
    guest's last check is as old as the state until the watcher's next round."""
    deadline = time.monotonic() + timeout
    settle: float | None = None
    while time.monotonic() < deadline:
        h = vm.health()
        if h is not None and h[0] == 200:
            if status is None or f'"status":"{status}"' in h[1].replace(" ", ""):
                return True
            settle = settle or time.monotonic() + 120
            if time.monotonic() > settle:
                return True
        else:
            _, out = vm.exec("systemctl show -p LoadState -p ActiveState zds-api.service")
            if "LoadState=not-found" in out or "ActiveState=failed" in out:
                return False
        time.sleep(2 if status else 3)
    return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Boot:
    """One appliance to boot: its name (state dir, kept serial log) and its VM options."""

    name: str = "appliance"
    links: tuple[SocketLink, ...] = ()
    memory_mib: int = 4096
    cpus: int = 2
    data_disks: int = 2  # zdsdata0.. (first boot pools them as tank)


def warm_state(image_dir: Path, boot: Boot, kvm: bool) -> Path:
    """Where the guest ``boot`` describes is kept once booted from ``image_dir``: a state
    saved right after its first boot reached a healthy API, restored by later runs instead
    of booting (issue 26). Kept in the image's build directory, so it goes with the image;
    the key holds everything else that a restore must match (QEMU, firmware, the machine)."""
    spec = {"format": 1, "kvm": kvm, "qemu": qemu_version(),
            "firmware": [[str(f), f.stat().st_size, f.stat().st_mtime_ns]
                         for f in (OVMF_CODE, OVMF_VARS)],
            "boot": [boot.name, boot.memory_mib, boot.cpus, boot.data_disks,
                     [[link.mode, link.mac] for link in boot.links]]}
    key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
    return image_dir / "warm" / f"{boot.name}-{key}"


def restores_wanted() -> bool:
    """False when ZDS_E2E_COLD_BOOT says to boot every guest (and save none)."""
    return os.environ.get("ZDS_E2E_COLD_BOOT", "") not in ("1", "yes", "true")


@contextlib.contextmanager
def booted(image_dir: Path, *boots: Boot,
           restore_from: tuple[Path, ...] = ()) -> Iterator[list[E2EAppliance]]:
    """:func:`_booted`, with the session appliance paused meanwhile when these are guests
    of a module's own (:meth:`_SessionBoot.set_aside`)."""
    own = any(boot.name != "appliance" for boot in boots)
    with _session_boot.set_aside() if own else contextlib.nullcontext(), \
            _booted(image_dir, *boots, restore_from=restore_from) as apps:
        yield apps


@contextlib.contextmanager
def _booted(image_dir: Path, *boots: Boot,
            restore_from: tuple[Path, ...] = ()) -> Iterator[list[E2EAppliance]]:
    """Boots one appliance per ``boots`` from ``image_dir`` (fresh overlay and data disks,
    random host ports, a fresh SSH key each), all started before any is waited for (a
    socket link's listening side first), and powers them off afterwards. Serial logs are
    kept as $ZDS_E2E_KEEP_LOG (default /tmp/zds-e2e-serial.log), or next to it as
    ``<stem>-<name>.log`` for a name other than "appliance".

    A first boot that reached a healthy API is saved (:func:`warm_state`); later runs of
    the same image restore the saved guests instead, on new ports and with the host's
    clock, in seconds instead of minutes under TCG. ZDS_E2E_COLD_BOOT=1 always boots.
    ``restore_from`` names other saved states to restore, one per boot (a configured
    cluster saved with :func:`images.vm.save_states`); they are loaded first and then
    resumed one right after the other."""
    kvm = kvm_works()
    warm = [warm_state(image_dir, boot, kvm) for boot in boots] if restores_wanted() else []
    if restore_from:
        warm = list(restore_from)
    restore = bool(warm) and all((w / "ram.state").exists() for w in warm)
    apps: list[E2EAppliance] = []

    def new_vm(boot: Boot) -> Appliance:
        state = Path(tempfile.mkdtemp(prefix=f"zds-e2e-{boot.name}-"))
        return Appliance(state_dir=state, base_image=image_dir / "zds.raw",
                         ports=Ports.random_free(), test_control=True, ssh_port=_free_port(),
                         ssh_authorized_keys=state / "ssh-key.pub", links=boot.links,
                         memory_mib=boot.memory_mib, cpus=boot.cpus,
                         data_disks=boot.data_disks)

    try:
        t1 = time.monotonic()
        if restore:
            try:
                for boot, saved in zip(boots, warm, strict=True):
                    # the saved guest trusts the saved SSH key, which comes with it
                    apps.append(E2EAppliance(vm=new_vm(boot), image_dir=image_dir))
                    apps[-1].vm.restore_state(saved, kvm=kvm, timeout=RESTORE_TIMEOUT)
                for app in apps:  # together: guests saved together talk to each other
                    app.vm.monitor_command("cont")
                for app in apps:
                    app.vm.wait_control(RESTORE_TIMEOUT)
                    app.vm.set_guest_clock()
                    app.timings = {"restored_s": round(time.monotonic() - t1, 1),
                                   "accel_kvm": float(kvm)}
            except (VmError, OSError, subprocess.CalledProcessError) as e:
                if restore_from:  # the caller needs those very states
                    raise
                print(f"\n[e2e] the saved guests did not come back ({e}): booting instead")
                for app in apps:
                    app.vm.stop(timeout=5)
                    shutil.rmtree(app.vm.state_dir, ignore_errors=True)
                for saved in warm:
                    shutil.rmtree(saved, ignore_errors=True)
                apps.clear()
                restore, t1 = False, time.monotonic()
        if not restore:
            for boot in boots:
                vm = new_vm(boot)
                subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C",
                                "zds-e2e", "-f", str(vm.state_dir / "ssh-key")], check=True)
                vm.prepare(fresh_system=True, fresh_data=True)
                apps.append(E2EAppliance(vm=vm, image_dir=image_dir))
                vm.start(kvm=kvm)
        for boot, app in zip(boots, apps, strict=True):
            if restore:  # a just-booted guest's health says ok (a cluster node's need not)
                app.api_healthy = _wait_api(app.vm, BOOT_TIMEOUT,
                                            status=None if restore_from else "ok")
                app.timings["restored_to_health_s"] = round(time.monotonic() - t1, 1)
                continue
            try:
                app.vm.wait_control(BOOT_TIMEOUT)
            except VmError as e:
                tail = app.serial_log.read_bytes().decode(errors="replace").splitlines()[-40:]
                pytest.fail(f"the {boot.name} did not boot: {e}\n" + "\n".join(tail))
            t_control = time.monotonic() - t1
            app.api_healthy = _wait_api(app.vm, BOOT_TIMEOUT - t_control)
            app.timings = {"boot_to_control_s": round(t_control, 1),
                           "boot_to_health_s": round(time.monotonic() - t1, 1),
                           "accel_kvm": float(kvm)}
        if not restore and warm and not restore_from and all(a.api_healthy for a in apps):
            for app, w in zip(apps, warm, strict=True):
                _save_warm(app, w)
        yield apps
    finally:
        for boot, app in zip(boots, apps, strict=False):
            # the guest is thrown away: no point waiting a minute for a cluster node's
            # clean shutdown (pacemaker stops its resources first)
            app.vm.stop(timeout=20)
            log = app.vm.state_dir / "serial.log"
            keep = Path(os.environ.get("ZDS_E2E_KEEP_LOG", "/tmp/zds-e2e-serial.log"))
            if boot.name != "appliance":
                keep = keep.with_name(f"{keep.stem}-{boot.name}{keep.suffix}")
            if log.exists():
                shutil.copy(log, keep)
            shutil.rmtree(app.vm.state_dir, ignore_errors=True)


def _save_warm(app: E2EAppliance, dest: Path) -> None:
    """Saves a first-booted guest for later runs; a failure costs those runs a boot only."""
    for old in (dest.parent.glob(f"{dest.name.rsplit('-', 1)[0]}-*") if dest.parent.exists()
                else ()):
        if old != dest and ".tmp-" not in old.name:  # a state for another QEMU or machine
            shutil.rmtree(old, ignore_errors=True)
    try:
        app.timings["saved_paused_s"] = round(app.vm.save_state(dest, files=SAVED_FILES), 1)
    except (VmError, OSError, subprocess.CalledProcessError) as e:
        print(f"\n[e2e] could not save the booted {dest.name} for later runs: {e}")


def built_image() -> Path:
    """The appliance image this run tests, the same for every module (tests/e2e/
    imagecache.py: this tree's image already built with its guests saved, else built)."""
    if os.geteuid() != 0:
        pytest.fail("the e2e suite needs root (image build with mmdebstrap, chroot)")
    return imagecache.tested_image()


@pytest.fixture(scope="session")
def shared_reboot(appliance: E2EAppliance) -> float:
    """The session appliance's one reboot (phase 1); seconds until the API was healthy."""
    t0 = time.monotonic()
    appliance.reboot()
    took = round(time.monotonic() - t0, 1)
    appliance.timings["shared_reboot_s"] = took
    print(f"\n[e2e] shared reboot: healthy after {took:.0f} s")
    return took


@pytest.fixture(scope="session")
def shared_power_cycle(appliance: E2EAppliance) -> float:
    """The session appliance's one power cycle (phase 2): a fresh system disk (an update)
    and a failed mirror disk (zdsdata1 gone, an empty zdsdata2 in its place)."""
    t0 = time.monotonic()
    appliance.power_cycle(fresh_system=True, disks=POWER_CYCLE_DISKS)
    took = round(time.monotonic() - t0, 1)
    appliance.timings["shared_power_cycle_s"] = took
    print(f"\n[e2e] shared power cycle: API up after {took:.0f} s "
          f"(healthy: {appliance.api_healthy})")
    return took


@pytest.fixture(scope="module")
def ha_bed() -> Iterator[HaBed]:
    """The HA test bed (tests/e2e/habed.py): switch, shared-disk guest and two nodes in a
    pacemaker pair, booted and configured (or restored configured) for the module that
    asks for it, and powered off after it: three idle guests would slow every module
    that runs after (pacemaker monitors, MMP writes each second)."""
    from tests.e2e.habed import ha_bed as boot_bed  # habed imports this module

    with boot_bed(built_image()) as bed:
        yield bed


class _SessionBoot:
    """The session appliance, built (or reused) and booted in a thread of its own: started
    at collection when other tests run first (issue 26: the integration tests then run
    while the guest boots), or by the fixture itself otherwise."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self._thread: threading.Thread | None = None
        self._app: E2EAppliance | None = None
        self._error: BaseException | None = None
        self.early = False

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._boot, name="zds-e2e-boot",
                                            daemon=True)
            self._thread.start()

    def _boot(self) -> None:
        try:
            t0 = time.monotonic()
            image_dir = built_image()
            t_build = time.monotonic() - t0
            (app,) = self._stack.enter_context(booted(image_dir, Boot()))
            app.timings = {"build_or_reuse_s": round(t_build, 1), **app.timings,
                           "booted_in_background": float(self.early)}
            self._app = app
        except BaseException as exc:  # pytest.fail is a BaseException: the fixture re-raises
            self._error = exc

    @contextlib.contextmanager
    def set_aside(self) -> Iterator[None]:
        """Pauses the session appliance, when it is up, while a module runs guests of its
        own (the replication pair, the HA bed), and runs it on afterwards with the host's
        clock (as after a restore). Idle, it still costs 15% of a core under TCG (the
        collector, the watcher, timers), taken from the guests the module waits on."""
        app = self._app
        if app is None or app.vm.pid() is None:
            yield
            return
        app.vm.monitor_command("stop")
        try:
            yield
        finally:
            app.vm.monitor_command("cont")
            app.vm.set_guest_clock()
            app.api_healthy = _wait_api(app.vm, RESTORE_TIMEOUT)

    def wait(self) -> E2EAppliance:
        self.start()
        assert self._thread is not None
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._app is not None
        return self._app

    def close(self) -> None:
        if self._thread is not None:
            self._thread.join()
        self._stack.close()


_session_boot = _SessionBoot()
# habed.py and the replication pair call booted() as tests.e2e.conftest's: pytest must
# import this file under that name too (tests/e2e/__init__.py), or there are two modules
# and booted() sets aside a session appliance that never started, leaving the real one
# running beside the module's own guests
assert __name__ == "tests.e2e.conftest", f"tests/e2e/conftest.py imported as {__name__}"


def pytest_collection_finish(session: pytest.Session) -> None:
    """Starts the session appliance's boot now when tests without it (integration) come
    first: they take a core, the guest the rest, and the first e2e test waits less."""
    wants = [i for i, item in enumerate(session.items)
             if "appliance" in getattr(item, "fixturenames", ())]
    if wants and wants[0] > 0 and not session.config.option.collectonly:
        _session_boot.early = True
        _session_boot.start()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Powers off a session appliance booted early that no test took (a run stopped
    before reaching the e2e tests)."""
    _session_boot.close()


@pytest.fixture(scope="session")
def appliance() -> Iterator[E2EAppliance]:
    app = _session_boot.wait()
    print(f"\n[e2e] appliance up: {app.timings}, state {app.vm.state_dir}")
    yield app
    _session_boot.close()
