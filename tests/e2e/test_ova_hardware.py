"""The OVA's own disk (the stream-optimized VMDK, read through a qcow2 overlay) boots under
EFI with the devices its OVF descriptor asks for: a VMXNET3 NIC and a PVSCSI controller
(holding a data disk). The system disk sits on SATA here because this host's OVMF cannot
boot from PVSCSI (ESXi's firmware can); the pvscsi driver is proven by the data disk."""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
import time
from pathlib import Path

import pytest

from images import ovf
from images.vm import Appliance, Ports, kvm_works
from tests.e2e.conftest import BOOT_TIMEOUT, E2EAppliance

pytestmark = pytest.mark.e2e


def test_ova_disk_boots_on_pvscsi_and_vmxnet3(appliance: E2EAppliance) -> None:
    ova = appliance.image_dir / "zds.ova"
    info = ovf.read_ova(ova)
    assert (info.scsi, info.nic, info.firmware) == ("VirtualSCSI", "VMXNET3", "efi")
    state = Path(tempfile.mkdtemp(prefix="zds-e2e-ova-"))
    try:
        with tarfile.open(ova) as tar:
            tar.extract(info.disk_files["system"], state, filter="data")
        vm = Appliance(state_dir=state, base_image=state / info.disk_files["system"],
                       base_format="vmdk", hardware="esxi", ports=Ports.random_free(),
                       data_disks=1, data_disk_size=1 << 30, memory_mib=2048,
                       test_control=True)
        vm.prepare(fresh_system=True)
        t0 = time.monotonic()
        vm.start(kvm=kvm_works())
        try:
            vm.wait_control(BOOT_TIMEOUT)
            boot_s = time.monotonic() - t0
            rc, out = vm.exec("findmnt -n -o SOURCE,FSTYPE /; for n in /sys/class/net/e*; "
                              "do basename $(readlink $n/device/driver); done")
            assert rc == 0, out
            lines = out.split("\n")
            assert lines[0].split()[1] == "ext4", out
            assert "vmxnet3" in lines, out
            rc, out = vm.exec("ls /sys/bus/pci/drivers/vmw_pvscsi/; lsblk -dn -o SERIAL")
            assert rc == 0 and "0000:" in out and "zdsdata0" in out, out
            print(f"\n[e2e] OVA disk, VMXNET3, PVSCSI data disk: agent after {boot_s:.0f} s")
        finally:
            vm.stop(timeout=60)
    finally:
        if os.environ.get("ZDS_E2E_KEEP_OVA_LOG"):
            shutil.copy(state / "serial.log", os.environ["ZDS_E2E_KEEP_OVA_LOG"])
        shutil.rmtree(state, ignore_errors=True)
