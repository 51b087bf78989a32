"""OVA packaging for ESXi: an OVF 1.0 descriptor, a SHA256 manifest and a stream-optimized VMDK.

The virtual machine: 2 vCPU, 4 GiB, EFI firmware, one VMXNET3 NIC, a PVSCSI controller with
the system disk (unit 0) and empty thin data-disk placeholders (units 1, 2) that ESXi creates
at import; disk.EnableUUID makes the data disks show up in /dev/disk/by-id.
"""

from __future__ import annotations

import hashlib
import tarfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

NS = {
    "ovf": "http://schemas.dmtf.org/ovf/envelope/1",
    "rasd": "http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_ResourceAllocationSettingData",
    "vssd": "http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_VirtualSystemSettingData",
    "vmw": "http://www.vmware.com/schema/ovf",
    "xsi": "http://www.w3.org/2001/XMLSchema-instance",
}
GIB = 1024**3


@dataclass(frozen=True)
class VmSpec:
    name: str = "zds"
    cpus: int = 2
    memory_mib: int = 4096
    data_disks_gib: tuple[int, ...] = (100, 100)
    nic: str = "VMXNET3"
    scsi: str = "VirtualSCSI"  # PVSCSI
    hw_version: str = "vmx-14"  # ESXi 6.7 and later


def _q(prefix: str, tag: str) -> str:
    return f"{{{NS[prefix]}}}{tag}"


def descriptor(disk_file: str, disk_file_size: int, capacity_bytes: int, spec: VmSpec,
               version: str) -> bytes:
    for p, uri in NS.items():
        ET.register_namespace(p, uri)
    env = ET.Element(_q("ovf", "Envelope"), {_q("vmw", "buildId"): f"zds-{version}"})
    refs = ET.SubElement(env, _q("ovf", "References"))
    ET.SubElement(refs, _q("ovf", "File"), {
        _q("ovf", "id"): "file1", _q("ovf", "href"): disk_file,
        _q("ovf", "size"): str(disk_file_size)})
    disks = ET.SubElement(env, _q("ovf", "DiskSection"))
    ET.SubElement(disks, _q("ovf", "Info")).text = "Virtual disks"
    fmt = "http://www.vmware.com/interfaces/specifications/vmdk.html#streamOptimized"
    ET.SubElement(disks, _q("ovf", "Disk"), {
        _q("ovf", "diskId"): "system", _q("ovf", "fileRef"): "file1",
        _q("ovf", "capacity"): str(capacity_bytes), _q("ovf", "format"): fmt})
    for i, gib in enumerate(spec.data_disks_gib):
        # No fileRef: an empty disk ESXi creates at import (a placeholder for ZFS data).
        ET.SubElement(disks, _q("ovf", "Disk"), {
            _q("ovf", "diskId"): f"data{i}", _q("ovf", "capacity"): str(gib),
            _q("ovf", "capacityAllocationUnits"): "byte * 2^30", _q("ovf", "format"): fmt})
    nets = ET.SubElement(env, _q("ovf", "NetworkSection"))
    ET.SubElement(nets, _q("ovf", "Info")).text = "Logical networks"
    net = ET.SubElement(nets, _q("ovf", "Network"), {_q("ovf", "name"): "VM Network"})
    ET.SubElement(net, _q("ovf", "Description")).text = "Storage network (NFS, iSCSI, API)"

    vs = ET.SubElement(env, _q("ovf", "VirtualSystem"), {_q("ovf", "id"): spec.name})
    ET.SubElement(vs, _q("ovf", "Info")).text = "ZDS storage appliance"
    ET.SubElement(vs, _q("ovf", "Name")).text = spec.name
    os_sec = ET.SubElement(vs, _q("ovf", "OperatingSystemSection"), {
        _q("ovf", "id"): "96", _q("vmw", "osType"): "debian11_64Guest"})
    ET.SubElement(os_sec, _q("ovf", "Info")).text = "Debian GNU/Linux 12 (64-bit)"
    prod = ET.SubElement(vs, _q("ovf", "ProductSection"))
    ET.SubElement(prod, _q("ovf", "Info")).text = "ZFS Datastore Server"
    ET.SubElement(prod, _q("ovf", "Product")).text = "ZDS"
    ET.SubElement(prod, _q("ovf", "Version")).text = version

    hw = ET.SubElement(vs, _q("ovf", "VirtualHardwareSection"))
    ET.SubElement(hw, _q("ovf", "Info")).text = "Virtual hardware requirements"
    sysel = ET.SubElement(hw, _q("ovf", "System"))
    for tag, text in (("ElementName", "Virtual Hardware Family"), ("InstanceID", "0"),
                      ("VirtualSystemIdentifier", spec.name),
                      ("VirtualSystemType", spec.hw_version)):
        ET.SubElement(sysel, _q("vssd", tag)).text = text

    next_id = iter(range(1, 100))

    def item(fields: list[tuple[str, str]]) -> str:
        iid = str(next(next_id))
        it = ET.SubElement(hw, _q("ovf", "Item"))
        for tag, text in sorted([*fields, ("InstanceID", iid)]):  # rasd elements: alphabetical
            ET.SubElement(it, _q("rasd", tag)).text = text
        return iid

    item([("AllocationUnits", "hertz * 10^6"), ("Description", "Number of virtual CPUs"),
          ("ElementName", f"{spec.cpus} virtual CPU(s)"), ("ResourceType", "3"),
          ("VirtualQuantity", str(spec.cpus))])
    item([("AllocationUnits", "byte * 2^20"), ("Description", "Memory size"),
          ("ElementName", f"{spec.memory_mib}MB of memory"), ("ResourceType", "4"),
          ("VirtualQuantity", str(spec.memory_mib))])
    scsi = item([("Address", "0"), ("Description", "SCSI Controller"),
                 ("ElementName", "SCSI controller 0"), ("ResourceSubType", spec.scsi),
                 ("ResourceType", "6")])
    item([("AddressOnParent", "0"), ("ElementName", "Hard disk 1 (system)"),
          ("HostResource", "ovf:/disk/system"), ("Parent", scsi), ("ResourceType", "17")])
    for i in range(len(spec.data_disks_gib)):
        item([("AddressOnParent", str(i + 1)), ("ElementName", f"Hard disk {i + 2} (data)"),
              ("HostResource", f"ovf:/disk/data{i}"), ("Parent", scsi), ("ResourceType", "17")])
    item([("AddressOnParent", "7"), ("AutomaticAllocation", "true"), ("Connection", "VM Network"),
          ("Description", f"{spec.nic} ethernet adapter on \"VM Network\""),
          ("ElementName", "Network adapter 1"), ("ResourceSubType", spec.nic),
          ("ResourceType", "10")])
    for key, value in (("firmware", "efi"), ("disk.EnableUUID", "TRUE")):
        tag = "Config" if key == "firmware" else "ExtraConfig"
        ET.SubElement(hw, _q("vmw", tag), {
            _q("ovf", "required"): "false", _q("vmw", "key"): key, _q("vmw", "value"): value})
    ET.indent(env)
    out: bytes = ET.tostring(env, encoding="utf-8", xml_declaration=True)
    return out


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_ova(ova: Path, vmdk: Path, *, capacity_bytes: int, version: str,
              spec: VmSpec | None = None) -> None:
    """Writes the OVA: a tar with the .ovf first, then the .mf, then the disk (OVF 1.0 rule)."""
    spec = spec or VmSpec()
    disk_name = f"{spec.name}-disk1.vmdk"
    desc = descriptor(disk_name, vmdk.stat().st_size, capacity_bytes, spec, version)
    work = ova.parent
    ovf_path = work / f"{spec.name}.ovf"
    ovf_path.write_bytes(desc)
    mf_path = work / f"{spec.name}.mf"
    mf_path.write_text(
        f"SHA256({ovf_path.name})= {hashlib.sha256(desc).hexdigest()}\n"
        f"SHA256({disk_name})= {_sha256(vmdk)}\n")
    tmp = ova.with_suffix(".ova.tmp")
    with tarfile.open(tmp, "w", format=tarfile.USTAR_FORMAT) as tar:
        for path, name in ((ovf_path, ovf_path.name), (mf_path, mf_path.name), (vmdk, disk_name)):
            info = tar.gettarinfo(str(path), arcname=name)
            info.uid = info.gid = 64
            info.uname = info.gname = "someone"
            with path.open("rb") as f:
                tar.addfile(info, f)
    tmp.replace(ova)
    ovf_path.unlink()
    mf_path.unlink()


@dataclass(frozen=True)
class OvaInfo:
    members: list[str]
    cpus: int
    memory_mib: int
    nic: str
    scsi: str
    disks: dict[str, int]  # diskId -> capacity in bytes
    disk_files: dict[str, str]  # diskId -> file name (system disk only)
    firmware: str


def read_ova(ova: Path) -> OvaInfo:
    """Parses an OVA back and checks its manifest; raises ValueError when it is not valid."""
    with tarfile.open(ova, "r") as tar:
        members = tar.getnames()
        if not members or not members[0].endswith(".ovf"):
            raise ValueError(f"the .ovf must be the first member: {members}")
        data = {m: tar.extractfile(m).read() for m in members[:2]}  # type: ignore[union-attr]
        hashes: dict[str, str] = {}
        for line in data[members[1]].decode().splitlines():
            name, digest = line.split("= ")
            hashes[name[len("SHA256("):-1]] = digest
        for m in members:
            f = tar.extractfile(m)
            assert f is not None
            h = hashlib.sha256()
            for chunk in iter(lambda f=f: f.read(1 << 20), b""):  # type: ignore[misc]
                h.update(chunk)
            if m != members[1] and hashes.get(m) != h.hexdigest():
                raise ValueError(f"manifest digest mismatch for {m}")
    root = ET.fromstring(data[members[0]])
    files = {f.get(_q("ovf", "id")): f.get(_q("ovf", "href"))
             for f in root.iterfind("ovf:References/ovf:File", NS)}
    disks: dict[str, int] = {}
    disk_files: dict[str, str] = {}
    for d in root.iterfind("ovf:DiskSection/ovf:Disk", NS):
        did = d.get(_q("ovf", "diskId")) or ""
        cap = int(d.get(_q("ovf", "capacity")) or 0)
        units = d.get(_q("ovf", "capacityAllocationUnits"))
        disks[did] = cap * (GIB if units == "byte * 2^30" else 1)
        ref = d.get(_q("ovf", "fileRef"))
        if ref:
            if files.get(ref) not in members:
                raise ValueError(f"disk {did} refers to a missing file {files.get(ref)}")
            disk_files[did] = files[ref] or ""
    by_type: dict[str, list[ET.Element]] = {}
    for it in root.iterfind("ovf:VirtualSystem/ovf:VirtualHardwareSection/ovf:Item", NS):
        by_type.setdefault(it.findtext("rasd:ResourceType", "", NS), []).append(it)

    def one(rtype: str, tag: str) -> str:
        return by_type[rtype][0].findtext(f"rasd:{tag}", "", NS)

    fw = ""
    for c in root.iterfind("ovf:VirtualSystem/ovf:VirtualHardwareSection/vmw:Config", NS):
        if c.get(_q("vmw", "key")) == "firmware":
            fw = c.get(_q("vmw", "value")) or ""
    return OvaInfo(members=members, cpus=int(one("3", "VirtualQuantity")),
                   memory_mib=int(one("4", "VirtualQuantity")), nic=one("10", "ResourceSubType"),
                   scsi=one("6", "ResourceSubType"), disks=disks, disk_files=disk_files,
                   firmware=fw)
