"""The libvirt pool XML that GET /datastores/{name}/attach returns is usable as is: parsed
the way libvirt reads it, it names the right pool type, target, initiator, port and NFS
version (the e2e suite feeds the same XML to a real libvirtd: tests/e2e/test_kvm_guests_e2e.py).
"""

from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from appliance.transports.iscsi import PLACEHOLDER_IQN
from appliance.transports.nfs import LIBVIRT_FS_NS

KVM = "iqn.1993-08.org.debian:01:kvm01"
KVM2 = "iqn.1993-08.org.debian:01:kvm02"
FS = "{" + LIBVIRT_FS_NS + "}"


def put(client: TestClient, name: str, body: dict[str, Any]) -> dict[str, Any]:
    r = client.put(f"/api/v1/datastores/{name}", json={"size": "10G", "profile": "kvm", **body})
    assert r.status_code == 201, r.text
    return dict(r.json())


def attach(client: TestClient, name: str, **params: Any) -> dict[str, Any]:
    r = client.get(f"/api/v1/datastores/{name}/attach", params=params)
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_iscsi_pool_logs_in_as_the_datastores_initiator(client: TestClient) -> None:
    d = put(client, "lun", {"protocol": "iscsi", "iscsi": {"initiators": [KVM]}})
    a = attach(client, "lun", server="127.0.0.1")
    pool = ET.fromstring(a["libvirt_pool_xml"])
    assert pool.get("type") == "iscsi-direct"
    assert pool.findtext("name") == "lun"
    host = pool.find("source/host")
    assert host is not None and host.attrib == {"name": "127.0.0.1", "port": "3260"}
    device = pool.find("source/device")
    assert device is not None and device.get("path") == d["iscsi"]["iqn"]
    iqn = pool.find("source/initiator/iqn")
    assert iqn is not None and iqn.get("name") == KVM
    assert PLACEHOLDER_IQN not in a["libvirt_pool_xml"]
    assert a["virsh"][0] == "virsh pool-define lun-pool.xml"


def test_iscsi_port_behind_port_forwarding(client: TestClient) -> None:
    put(client, "lun", {"protocol": "iscsi", "iscsi": {"initiators": [KVM]}})
    a = attach(client, "lun", server="127.0.0.1", port=13260)
    host = ET.fromstring(a["libvirt_pool_xml"]).find("source/host")
    assert host is not None and host.get("port") == "13260"
    assert any("--address=127.0.0.1:13260" in c for c in a["esxi"])
    for bad in (0, 65536, "x"):
        r = client.get("/api/v1/datastores/lun/attach", params={"port": bad})
        assert r.status_code == 422, r.text


def test_iscsi_pool_with_groups_only_keeps_a_placeholder_and_says_so(
        client: TestClient) -> None:
    r = client.put("/api/v1/initiator-groups/kvm", json={"initiators": [KVM, KVM2]})
    assert r.status_code in (200, 201), r.text
    put(client, "lun", {"protocol": "iscsi", "iscsi": {"initiator_groups": ["kvm"]}})
    a = attach(client, "lun")
    iqn = ET.fromstring(a["libvirt_pool_xml"]).find("source/initiator/iqn")
    assert iqn is not None and iqn.get("name") == PLACEHOLDER_IQN
    assert any(PLACEHOLDER_IQN in n and "initiatorname.iscsi" in n for n in a["notes"])


def test_iscsi_pool_with_several_initiators_names_the_first(client: TestClient) -> None:
    put(client, "lun", {"protocol": "iscsi", "iscsi": {"initiators": [KVM, KVM2]}})
    a = attach(client, "lun")
    iqn = ET.fromstring(a["libvirt_pool_xml"]).find("source/initiator/iqn")
    assert iqn is not None and iqn.get("name") == KVM
    assert any(f"logs in as {KVM}" in n for n in a["notes"])


def test_netfs_pool_pins_nfsv3(client: TestClient) -> None:
    d = put(client, "kvm01", {"protocol": "nfs3",
                              "nfs": {"clients": [{"match": "192.0.2.0/24"}]}})
    a = attach(client, "kvm01", server="zds.example.org")
    pool = ET.fromstring(a["libvirt_pool_xml"])
    assert pool.get("type") == "netfs"
    src = pool.find("source")
    assert src is not None
    host, path, fmt, proto = (src.find(t) for t in ("host", "dir", "format", "protocol"))
    assert host is not None and host.get("name") == "zds.example.org"
    assert path is not None and path.get("path") == d["nfs"]["path"]
    assert fmt is not None and fmt.get("type") == "nfs"
    assert proto is not None and proto.get("ver") == "3"
    assert pool.findtext("target/path") == "/var/lib/libvirt/images/kvm01"
    assert pool.find(f"{FS}mount_opts") is None


def test_netfs_pool_for_nfs41_mounts_minor_version_1(client: TestClient) -> None:
    put(client, "kvm41", {"protocol": "nfs41", "nfs": {"clients": [{"match": "192.0.2.0/24"}]}})
    pool = ET.fromstring(attach(client, "kvm41")["libvirt_pool_xml"])
    proto = pool.find("source/protocol")
    assert proto is not None and proto.get("ver") == "4"
    opts = [o.get("name") for o in pool.findall(f"{FS}mount_opts/{FS}option")]
    assert opts == ["minorversion=1"]


@pytest.mark.skipif(shutil.which("virt-xml-validate") is None or shutil.which("xmllint") is None,
                    reason="libvirt-clients + libxml2-utils (scripts/setup-host.sh) not installed")
def test_every_pool_xml_validates_against_libvirts_schema(client: TestClient,
                                                          tmp_path: Path) -> None:
    put(client, "a", {"protocol": "nfs3", "nfs": {"clients": [{"match": "192.0.2.0/24"}]}})
    put(client, "b", {"protocol": "nfs41", "nfs": {"clients": [{"match": "192.0.2.0/24"}]}})
    put(client, "c", {"protocol": "iscsi", "iscsi": {"initiators": [KVM]}})
    put(client, "d", {"protocol": "iscsi", "iscsi": {
        "initiators": [KVM], "chap": {"user": "kvmuser", "secret": "s3cret-s3cret"}}})
    for name in "abcd":
        f = tmp_path / f"{name}.xml"
        f.write_text(attach(client, name, server="127.0.0.1")["libvirt_pool_xml"])
        p = subprocess.run(["virt-xml-validate", str(f), "storagepool"], capture_output=True,
                           text=True, check=False)
        assert p.returncode == 0, f"{name}: {p.stdout}{p.stderr}\n{f.read_text()}"
