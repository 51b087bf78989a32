"""Attach instructions: the exact ``esxcli`` commands for ESXi and a libvirt storage-pool
XML (plus virsh commands) for KVM, for one datastore. Pure text rendering; every value
in it was validated on the way in and is XML-escaped here anyway.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

from appliance.model import DatastoreRecord

# libvirt's storage-pool namespace for extra mount options of fs/netfs pools (libvirt 5.1+)
LIBVIRT_FS_NS = "http://libvirt.org/schemas/storagepool/fs/1.0"
PLACEHOLDER_IQN = "YOUR-HOST-INITIATOR-IQN"


@dataclass(frozen=True)
class AttachInstructions:
    esxi: list[str]
    libvirt_pool_xml: str
    virsh: list[str]
    notes: list[str]


def _q(value: str) -> str:
    return shlex.quote(value)


def nfs_instructions(rec: DatastoreRecord, server: str, path: str,
                     nfs_port: int = 2049) -> AttachInstructions:
    """esxcli and a libvirt ``netfs`` pool. The pool names the NFS version the datastore
    is exported with (``<protocol ver>``; NFSv4.1 adds the ``minorversion=1`` mount
    option through libvirt's fs namespace), so libvirt's mount never negotiates another."""
    name = rec.name
    fs_ns = ""
    mount_opts = ""
    if rec.spec.protocol == "nfs3":
        esxi = [
            f"esxcli storage nfs add --host={_q(server)} --share={_q(path)} "
            f"--volume-name={_q(name)}",
            "esxcli storage nfs list",
        ]
        ver, opts = "3", "nfsvers=3,tcp"
    else:
        esxi = [
            f"esxcli storage nfs41 add --hosts={_q(server)} --share={_q(path)} "
            f"--volume-name={_q(name)} --sec=AUTH_SYS",
            "esxcli storage nfs41 list",
        ]
        ver, opts = "4", "nfsvers=4.1,tcp"
        fs_ns = f" xmlns:fs={quoteattr(LIBVIRT_FS_NS)}"
        mount_opts = ("  <fs:mount_opts>\n"
                      "    <fs:option name='minorversion=1'/>\n"
                      "  </fs:mount_opts>\n")
    xml = (
        f"<pool type='netfs'{fs_ns}>\n"
        f"  <name>{escape(name)}</name>\n"
        "  <source>\n"
        f"    <host name={quoteattr(server)}/>\n"
        f"    <dir path={quoteattr(path)}/>\n"
        "    <format type='nfs'/>\n"
        f"    <protocol ver='{ver}'/>\n"
        "  </source>\n"
        "  <target>\n"
        f"    <path>/var/lib/libvirt/images/{escape(name)}</path>\n"
        "  </target>\n"
        f"{mount_opts}"
        "</pool>\n"
    )
    notes = [f"libvirt mounts it with the kernel NFS client (mount.nfs, package nfs-common) "
             f"as {opts}; NFS port {nfs_port}"]
    if not rec.spec.nfs_clients:
        notes.append("no NFS clients are allowed yet: add them with PUT (nfs.clients)")
    if rec.origin:
        notes += restore_notes_nfs(rec, path)
    return AttachInstructions(esxi, xml, _virsh(name), notes)


def restore_notes_nfs(rec: DatastoreRecord, path: str) -> list[str]:
    """What to do with an NFS clone of a snapshot: it is a datastore of its own."""
    return [
        f"this datastore is a clone of snapshot {rec.origin}: its files are as they were "
        "then, and writes to it do not touch the source",
        f"ESXi: mount it under its own name (above), then register the VMs to restore from "
        f"it (vim-cmd solo/registervm /vmfs/volumes/{rec.name}/VM/VM.vmx) or copy single "
        "disks back; unregister and unmount it before deleting the clone",
        f"libvirt: start the pool (above) and point a domain's <disk> at an image under "
        f"{path}, or copy an image back with qemu-img convert",
    ]


def iscsi_instructions(rec: DatastoreRecord, server: str, wwn: str,
                       port: int = 3260) -> AttachInstructions:
    assert rec.iqn is not None
    name, iqn = rec.name, rec.iqn
    chap = rec.spec.iscsi.chap
    adapter = "vmhba64"
    esxi = [
        "esxcli iscsi software set --enabled=true",
        "esxcli iscsi adapter list   # note the software adapter name; vmhba64 below",
        f"esxcli iscsi adapter discovery statictarget add --adapter={adapter} "
        f"--address={_q(f'{server}:{port}')} --name={_q(iqn)}",
    ]
    if chap is not None:
        esxi.append(
            f"esxcli iscsi adapter target portal auth chap set --adapter={adapter} "
            f"--address={_q(f'{server}:{port}')} --name={_q(iqn)} --direction=uni "
            f"--level=required --authname={_q(chap.user)} --secret=<CHAP secret>"
        )
        if chap.mutual_user:
            esxi.append(
                f"esxcli iscsi adapter target portal auth chap set --adapter={adapter} "
                f"--address={_q(f'{server}:{port}')} --name={_q(iqn)} --direction=mutual "
                f"--level=required --authname={_q(chap.mutual_user)} "
                "--secret=<mutual CHAP secret>"
            )
    esxi += [
        f"esxcli storage core adapter rescan --adapter={adapter}",
        f"esxcli storage core device list -d {wwn}",
        f"esxcli storage core device vaai status get -d {wwn}   # ATS, Clone, Delete: supported",
    ]
    if not rec.origin:  # a clone already holds a VMFS: formatting it would lose it
        esxi.append("# then create the VMFS datastore on that device in the vSphere client "
                    f"(name it {name})")
    auth = ""
    if chap is not None:
        auth = (f"    <auth type='chap' username={quoteattr(chap.user)}>\n"
                f"      <secret usage={quoteattr(name + '-chap')}/>\n"
                "    </auth>\n")
    # iscsi-direct logs in with libiscsi as the initiator the XML names: the datastore's
    # own (first) initiator when it lists one, else a placeholder the admin replaces
    initiators = rec.spec.iscsi.initiators
    host_iqn = initiators[0] if initiators else PLACEHOLDER_IQN
    xml = (
        "<pool type='iscsi-direct'>\n"
        f"  <name>{escape(name)}</name>\n"
        "  <source>\n"
        f"    <host name={quoteattr(server)} port='{port}'/>\n"
        f"    <device path={quoteattr(iqn)}/>\n"
        "    <initiator>\n"
        f"      <iqn name={quoteattr(host_iqn)}/>\n"
        "    </initiator>\n"
        f"{auth}"
        "  </source>\n"
        "</pool>\n"
    )
    notes = [f"LUN 0 of {iqn}, device id {wwn} (stable for the life of the datastore)"]
    if host_iqn == PLACEHOLDER_IQN:
        notes.append(f"libvirt: put your host's initiator IQN (/etc/iscsi/initiatorname.iscsi) "
                     f"in place of {PLACEHOLDER_IQN} in the pool XML")
    elif len(initiators) > 1:
        notes.append(f"libvirt: the pool XML logs in as {host_iqn}; on another of the allowed "
                     "hosts put its own IQN there")
    if initiators or rec.spec.iscsi.initiator_groups:
        notes.append("allowed initiators: "
                     + ", ".join([*initiators, *(f"group:{g}" for g in
                                                 rec.spec.iscsi.initiator_groups)]))
    else:
        notes.append("no initiator is allowed yet: add IQNs with PUT (iscsi.initiators)")
    if chap is not None:
        notes.append(f"libvirt: virsh secret-define a secret with usage '{name}-chap' "
                     "holding the CHAP secret first")
    if rec.origin:
        esxi += [
            "# a clone carries a copy of the source's VMFS: ESXi sees a snapshot volume",
            "esxcli storage vmfs snapshot list",
            f"esxcli storage vmfs snapshot resignature --volume-label={_q(_source(rec))}",
            "# the resignatured datastore mounts as snap-XXXXXXXX-"
            f"{_source(rec)}: rename it {name}",
        ]
        notes += [
            f"this LUN is a clone of snapshot {rec.origin} (new NAA id {wwn}): its VMFS is "
            "a copy of the source's. Resignature it (above) before mounting; never mount it "
            "with its old signature while the source is mounted",
            "libvirt: the LUN holds the source's disk as it was then; attach it to a domain "
            "as a new disk (iscsi-direct pool above) and copy what you need",
        ]
    return AttachInstructions(esxi, xml, _virsh(name), notes)


def _source(rec: DatastoreRecord) -> str:
    """The name of the datastore a clone was made from (its VMFS label, as ZDS
    suggests naming the VMFS after the datastore)."""
    dataset = (rec.origin or "").split("@", 1)[0]
    return dataset.rsplit("/", 1)[-1]


def _virsh(name: str) -> list[str]:
    return [
        f"virsh pool-define {_q(name + '-pool.xml')}",
        f"virsh pool-start {_q(name)}",
        f"virsh pool-autostart {_q(name)}",
    ]
