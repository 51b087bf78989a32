"""The appliance as a Vagrant box for the libvirt provider (vagrant-libvirt), so that
``vagrant box add`` works offline from the file the image build leaves next to the qcow2.

A libvirt box is a tar of three members: ``metadata.json`` (provider, disk format, virtual
size in GB), ``box.img`` (the qcow2 system disk) and a ``Vagrantfile`` that Vagrant merges
under the user's own. Ours describes what the appliance needs: q35 with UEFI firmware (the
disk boots through systemd-boot's fallback path, so OVMF as a ROM without a variable store
is enough), 2 vCPU / 4 GiB, two empty virtio data disks with the serials ``zdsdata0``/
``zdsdata1`` that first boot makes the mirrored pool ``tank`` of, and the forwards of
the repository's Vagrantfile on 127.0.0.1. The appliance has no vagrant user: Vagrant logs
in as root with its insecure key, which the box hands to the appliance by QEMU fw_cfg
(``opt/zds/ssh-authorized-keys``; the first boot only adds it to root's authorized_keys),
and at once replaces it with a key pair of its own (``insert_key``, Vagrant's default), so
the well-known key opens nothing after ``vagrant up`` and no later boot adds it back.
"""

from __future__ import annotations

import io
import json
import math
import tarfile
from pathlib import Path

BOX_FILE = "zds-libvirt.box"
OVMF_ROM = "/usr/share/ovmf/OVMF.fd"  # Debian's ovmf package: code + variables, one file
DATA_DISK_GB = 64
# guest port -> host port on 127.0.0.1 (the same as the repository's Vagrantfile)
FORWARDS = {8443: 18443, 2049: 12049, 20048: 30048, 32803: 42803, 3260: 13260}

VAGRANTFILE = """\
# -*- mode: ruby -*-
# ZDS appliance box (libvirt provider), made by `./zds-appliance build`.
#   vagrant box add --name zds/appliance ~/.cache/zds/images/current/{box}
#   mkdir zds && cd zds && vagrant init zds/appliance && vagrant up --provider=libvirt
# Settings below are the box's defaults; the Vagrantfile of `vagrant init` can override them.
Vagrant.configure("2") do |config|
  # No vagrant user in the appliance: root, with Vagrant's insecure key handed in by
  # fw_cfg for the first login only (the first boot adds it to /root/.ssh/authorized_keys,
  # later boots never again); Vagrant then swaps it for a key pair of its own.
  config.ssh.username = "root"
  config.ssh.insert_key = true
  config.vm.synced_folder ".", "/vagrant", disabled: true
  config.vm.box_check_update = false
{forwards}
  config.vm.provider :libvirt do |lv|
    lv.cpus = 2
    lv.memory = 4096
    lv.machine_type = "q35"
    # UEFI only: systemd-boot on the ESP, found through its fallback path, so OVMF as a
    # ROM needs no per-VM variable store
    lv.loader = "{ovmf}"
    lv.disk_bus = "virtio"
    # the serials first boot looks for: a mirrored pool "tank" of these two disks
{disks}
    insecure_key = File.read(Vagrant.source_root.join("keys", "vagrant.pub")).lines.first.strip
    lv.qemuargs value: "-fw_cfg"
    lv.qemuargs value: "name=opt/zds/ssh-authorized-keys,string=#{{insecure_key}}"
  end
end
"""


def vagrantfile() -> str:
    forwards = "\n".join(
        f'  config.vm.network "forwarded_port", guest: {g}, host: {h}, host_ip: "127.0.0.1", '
        f'protocol: "tcp", id: "zds-{g}"' for g, h in FORWARDS.items())
    disks = "\n".join(
        f'    lv.storage :file, size: "{DATA_DISK_GB}G", bus: "virtio", '
        f'serial: "zdsdata{i}", discard: "unmap"' for i in range(2))
    return VAGRANTFILE.format(box=BOX_FILE, forwards=forwards, disks=disks, ovmf=OVMF_ROM)


def metadata(capacity_bytes: int) -> dict[str, object]:
    """vagrant-libvirt's box metadata: virtual_size is the disk's size in whole GB."""
    return {"provider": "libvirt", "format": "qcow2",
            "virtual_size": math.ceil(capacity_bytes / 1024**3)}


def write_box(box: Path, qcow2: Path, *, capacity_bytes: int) -> None:
    """Writes the box: metadata.json, Vagrantfile, then box.img (a plain tar: the qcow2 is
    compressed already)."""
    tmp = box.with_suffix(".box.tmp")
    with tarfile.open(tmp, "w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in (("metadata.json", json.dumps(metadata(capacity_bytes)).encode()),
                           ("Vagrantfile", vagrantfile().encode())):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            info.mtime = int(qcow2.stat().st_mtime)
            tar.addfile(info, io.BytesIO(data))
        info = tar.gettarinfo(str(qcow2), arcname="box.img")
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        with qcow2.open("rb") as f:
            tar.addfile(info, f)
    tmp.replace(box)


def box_members(box: Path) -> dict[str, bytes]:
    """metadata.json and Vagrantfile of a box (for checks), and box.img's size as text."""
    out: dict[str, bytes] = {}
    with tarfile.open(box) as tar:
        for m in tar.getmembers():
            if m.name == "box.img":
                out[m.name] = str(m.size).encode()
            else:
                f = tar.extractfile(m)
                out[m.name] = f.read() if f else b""
    return out
