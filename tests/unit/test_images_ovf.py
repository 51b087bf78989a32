"""OVA packaging: the descriptor ESXi reads back says 2 vCPU, 4 GiB, VMXNET3, PVSCSI, EFI,
with the system disk and empty data-disk placeholders, and the manifest digests hold."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from images import ovf


def _ova(tmp_path: Path) -> Path:
    disk = tmp_path / "disk.vmdk"
    disk.write_bytes(b"KDMV" + b"\0" * 4092)
    out = tmp_path / "zds.ova"
    ovf.write_ova(out, disk, capacity_bytes=6 * 1024**3, version="0.1.0")
    return out


def test_ova_parses_back_with_the_vm_shape(tmp_path: Path) -> None:
    info = ovf.read_ova(_ova(tmp_path))
    assert info.members == ["zds.ovf", "zds.mf", "zds-disk1.vmdk"]
    assert (info.cpus, info.memory_mib) == (2, 4096)
    assert info.nic == "VMXNET3"
    assert info.scsi == "VirtualSCSI"
    assert info.firmware == "efi"
    assert info.disks == {"system": 6 * 1024**3, "data0": 100 * 1024**3, "data1": 100 * 1024**3}
    assert info.disk_files == {"system": "zds-disk1.vmdk"}


def test_rasd_elements_are_in_schema_order(tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    with tarfile.open(_ova(tmp_path)) as tar:
        f = tar.extractfile("zds.ovf")
        assert f is not None
        root = ET.fromstring(f.read())
    items = root.findall(".//ovf:Item", ovf.NS)
    assert len(items) == 7  # cpu, memory, scsi, 3 disks, nic
    for it in items:
        tags = [child.tag.split("}")[1] for child in it]
        assert tags == sorted(tags)
    disks = [it for it in items if it.findtext("rasd:ResourceType", "", ovf.NS) == "17"]
    scsi_id = next(it.findtext("rasd:InstanceID", "", ovf.NS) for it in items
                   if it.findtext("rasd:ResourceType", "", ovf.NS) == "6")
    assert {d.findtext("rasd:Parent", "", ovf.NS) for d in disks} == {scsi_id}
    assert sorted(d.findtext("rasd:AddressOnParent", "", ovf.NS) for d in disks) == ["0", "1", "2"]


def test_tampered_disk_fails_the_manifest(tmp_path: Path) -> None:
    good = _ova(tmp_path)
    bad = tmp_path / "bad.ova"
    with tarfile.open(good) as src, tarfile.open(bad, "w", format=tarfile.USTAR_FORMAT) as dst:
        for m in src.getmembers():
            data = src.extractfile(m)
            assert data is not None
            body = data.read()
            if m.name.endswith(".vmdk"):
                body = body[:-1] + b"\1"
            import io

            dst.addfile(m, io.BytesIO(body))
    with pytest.raises(ValueError, match="digest mismatch"):
        ovf.read_ova(bad)


def test_ovf_first_is_enforced(tmp_path: Path) -> None:
    bad = tmp_path / "bad.ova"
    disk = tmp_path / "d.vmdk"
    disk.write_bytes(b"x")
    with tarfile.open(bad, "w") as tar:
        tar.add(disk, arcname="d.vmdk")
    with pytest.raises(ValueError, match="first member"):
        ovf.read_ova(bad)
