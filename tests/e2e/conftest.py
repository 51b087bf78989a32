"""e2e fixtures: the appliance image booted once per test session under QEMU.

`appliance` builds or reuses the cached image (images/build.py), boots it from a fresh
qcow2 overlay with fresh sparse data disks (serials zdsdata0, zdsdata1) and random free
host ports on 127.0.0.1, and yields an :class:`E2EAppliance`:

  api_url, admin_token, nfs_port, mountd_port, iscsi_port   what clients on the host use
  exec(cmd, timeout) -> (rc, output)     a root shell command in the guest (test-only
                                         virtio-serial agent, see images/vm.py)
  reboot()                               reboots the guest, waits for the agent and the API
  api_healthy                            whether the API answered before the tests started

Teardown powers the guest off through the monitor and then by the pidfile PID.
Hazard: LIO advertises the guest's 10.0.2.15 in iSCSI discovery; connect only to the
127.0.0.1 ports given here, never to a discovered portal.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from images import build
from images.vm import Appliance, Ports, VmError, kvm_works

BOOT_TIMEOUT = float(os.environ.get("ZDS_E2E_BOOT_TIMEOUT", "900"))


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

    def reboot(self, timeout: float = BOOT_TIMEOUT) -> None:
        self.vm.reboot(timeout=timeout, wait_api=True)

    def swap_system_disk(self, timeout: float = BOOT_TIMEOUT) -> None:
        """Powers off, replaces the system disk with a fresh copy of the image (what an
        update does; the data disks and the fw_cfg admin token stay) and boots again."""
        self.vm.stop(timeout=120)
        assert self.vm.prepare(fresh_system=True), "the data disks should have been reused"
        self.vm.start(kvm=bool(self.timings.get("accel_kvm")))
        self.vm.wait_control(timeout)
        self.api_healthy = _wait_api(self.vm, timeout)


    def restart_with_disks(self, indexes: tuple[int, ...],
                           timeout: float = BOOT_TIMEOUT) -> None:
        """Powers off and boots with only the data disks zdsdata<i> for ``indexes``
        attached (a missing one is a failed disk; a new index is a new empty disk)."""
        self.vm.stop(timeout=120)
        self.vm.disk_indexes = indexes
        self.vm.prepare()
        self.vm.start(kvm=bool(self.timings.get("accel_kvm")))
        self.vm.wait_control(timeout)
        self.api_healthy = _wait_api(self.vm, timeout)


def _wait_api(vm: Appliance, timeout: float) -> bool:
    """Waits for a 200 from the health endpoint; gives up early when zds-api cannot start."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        h = vm.health()
        if h is not None and h[0] == 200:
            return True
        _, out = vm.exec("systemctl show -p LoadState -p ActiveState zds-api.service")
        if "LoadState=not-found" in out or "ActiveState=failed" in out:
            return False
        time.sleep(3)
    return False


@pytest.fixture(scope="session")
def appliance() -> Iterator[E2EAppliance]:
    if os.geteuid() != 0:
        pytest.fail("the e2e suite needs root (image build with mmdebstrap, chroot)")
    t0 = time.monotonic()
    image_dir = build.build()
    t_build = time.monotonic() - t0
    state = Path(tempfile.mkdtemp(prefix="zds-e2e-"))
    vm = Appliance(state_dir=state, base_image=image_dir / "zds.raw", ports=Ports.random_free(),
                   test_control=True)
    vm.prepare(fresh_system=True, fresh_data=True)
    kvm = kvm_works()
    t1 = time.monotonic()
    vm.start(kvm=kvm)
    app = E2EAppliance(vm=vm, image_dir=image_dir)
    try:
        try:
            vm.wait_control(BOOT_TIMEOUT)
        except VmError as e:
            tail = vm.serial_log.read_bytes().decode(errors="replace").splitlines()[-40:]
            pytest.fail(f"the appliance did not boot: {e}\n" + "\n".join(tail))
        t_control = time.monotonic() - t1
        app.api_healthy = _wait_api(vm, BOOT_TIMEOUT - t_control)
        app.timings = {"build_or_reuse_s": round(t_build, 1),
                       "boot_to_control_s": round(t_control, 1),
                       "boot_to_health_s": round(time.monotonic() - t1, 1),
                       "accel_kvm": float(kvm)}
        print(f"\n[e2e] appliance up: {app.timings}, state {state}")
        yield app
    finally:
        vm.stop(timeout=60)
        log = state / "serial.log"
        keep = Path(os.environ.get("ZDS_E2E_KEEP_LOG", "/tmp/zds-e2e-serial.log"))
        if log.exists():
            shutil.copy(log, keep)
        shutil.rmtree(state, ignore_errors=True)
