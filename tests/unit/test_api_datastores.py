"""Datastores through the REST API, on fake ZFS/LIO/ganesha."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.unit.conftest import Rig

ESX = "iqn.1998-01.com.vmware:esxi01-4f2a"
ESX2 = "iqn.1998-01.com.vmware:esxi02-77c1"


def nfs_body(**kw: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"protocol": "nfs3", "size": "10G",
                            "nfs": {"clients": [{"match": "192.0.2.0/24", "access": "rw"}]}}
    body.update(kw)
    return body


def iscsi_body(**kw: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"protocol": "iscsi", "size": "10G", "iscsi": {"initiators": [ESX]}}
    body.update(kw)
    return body


def writes(rig: Rig) -> list[tuple[str, int]]:
    return [c for c in rig.ganesha.calls if c[0] in ("AddExport", "UpdateExport",
                                                     "RemoveExport")]


def snapshot_state(rig: Rig) -> tuple[Any, ...]:
    """Everything a failed request must leave unchanged."""
    return (
        tuple(d.name for d in rig.zfs.list_datasets("tank")),
        tuple((e.export_id, e.path) for e in rig.ganesha.list_exports()),
        tuple(t.spec for t in rig.lio.list_targets()),
        tuple(r.name for r in rig.engine.store.list_datastores()),
    )


def test_create_nfs_datastore(client: TestClient, rig: Rig) -> None:
    r = client.put("/api/v1/datastores/vmfs01", json=nfs_body())
    assert r.status_code == 201, r.text
    d = r.json()
    assert d["state"] == "ready" and d["serving"] is True
    assert d["nfs"]["path"] == "/tank/datastores/vmfs01"
    export_id = d["nfs"]["export_id"]
    assert export_id >= 100
    live = {e.export_id: e for e in rig.ganesha.list_exports()}
    assert live[export_id].path == "/tank/datastores/vmfs01"
    ds = rig.zfs.get_dataset("tank/datastores/vmfs01")
    assert ds is not None
    assert ds.prop("acltype") == "posixacl" and ds.prop("xattr") == "sa"
    assert ds.prop("refquota") == str(10 << 30)
    assert ds.prop("zds:export_id") == str(export_id) and ds.prop("zds:protocol") == "nfs3"
    esxi = "\n".join(d["attach"]["esxi"])
    assert "esxcli storage nfs add --host=testserver --share=/tank/datastores/vmfs01" in esxi
    assert "<pool type='netfs'>" in d["attach"]["libvirt_pool_xml"]
    # idempotent: same body again changes nothing
    calls = writes(rig)
    r2 = client.put("/api/v1/datastores/vmfs01", json=nfs_body())
    assert r2.status_code == 200
    assert r2.json()["nfs"]["export_id"] == export_id
    assert writes(rig) == calls


def test_create_iscsi_datastore_with_vaai(client: TestClient, rig: Rig) -> None:
    r = client.put("/api/v1/datastores/lun01", json=iscsi_body(size="10000M"))
    assert r.status_code == 201, r.text
    d = r.json()
    assert d["size"] % 16384 == 0 and d["size"] >= 10000 << 20
    iqn = d["iscsi"]["iqn"]
    assert iqn == "iqn.2026-11.io.zds:zds-test.lun01"
    assert d["iscsi"]["wwn"].startswith("naa.6001405")
    (target,) = [t for t in rig.lio.list_targets() if t.spec.iqn == iqn]
    lun = target.spec.luns[0]
    assert lun.device == "/dev/zvol/tank/datastores/lun01"
    assert lun.serial == d["iscsi"]["serial"]
    for attr in ("emulate_caw", "emulate_3pc", "emulate_tpu", "emulate_tpws", "is_nonrot"):
        assert lun.attributes[attr] == 1
    assert [a.initiator for a in target.spec.acls] == [ESX]
    vol = rig.zfs.get_dataset("tank/datastores/lun01")
    assert vol is not None and vol.type == "volume"
    assert vol.prop("volblocksize") == "16384"
    assert vol.prop("refreservation") in ("0", "none")  # thin
    esxi = "\n".join(d["attach"]["esxi"])
    assert f"--name={iqn}" in esxi and "vaai status get" in esxi


def test_thick_reserves_space_and_grow(client: TestClient, rig: Rig) -> None:
    r = client.put("/api/v1/datastores/thick", json=iscsi_body(thin=False))
    assert r.status_code == 201
    vol = rig.zfs.get_dataset("tank/datastores/thick")
    assert vol is not None and vol.int_prop("refreservation") >= 10 << 30
    r = client.put("/api/v1/datastores/thick", json=iscsi_body(thin=False, size="20G"))
    assert r.status_code == 200, r.text
    vol = rig.zfs.get_dataset("tank/datastores/thick")
    assert vol is not None and vol.prop("volsize") == str(20 << 30)


@pytest.mark.parametrize("name", ["../etc", "a b", "x;reboot", "$(id)", "UPPER", "a" * 70,
                                  "-rf", "a..b"])
def test_hostile_names_are_refused_and_change_nothing(client: TestClient, rig: Rig,
                                                      name: str) -> None:
    before = snapshot_state(rig)
    r = client.put(f"/api/v1/datastores/{name}", json=nfs_body())
    assert r.status_code in (404, 405, 422), r.text  # '/' splits paths: no route at all
    assert snapshot_state(rig) == before


@pytest.mark.parametrize("patch", [
    {"nfs": {"clients": [{"match": "10.0.0.0/8; rm -rf /"}]}},
    {"nfs": {"clients": [{"match": "host\"}EXPORT{"}]}},
    {"nfs": {"clients": [{"match": "192.0.2.1", "access": "all"}]}},
    {"size": "1G; reboot"},
    {"size": "-5G"},
    {"protocol": "smb"},
    {"overrides": {"recordsize": "100K"}},
    {"overrides": {"compression": "lz4 -o mountpoint=/"}},
    {"overrides": {"volblocksize": "16K"}},
    {"iscsi": {"initiators": [ESX]}},
    {"unknown_field": 1},
    {"pool": "mirror"},
])
def test_bad_nfs_input_is_refused(client: TestClient, rig: Rig, patch: dict[str, Any]) -> None:
    before = snapshot_state(rig)
    r = client.put("/api/v1/datastores/good", json=nfs_body(**patch))
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "invalid_input"
    assert r.json()["error"]["message"]
    assert snapshot_state(rig) == before


@pytest.mark.parametrize("iscsi", [
    {"initiators": ["iqn.2026-11.test:host1"]},
    {"initiators": ["iqn.2026-11.org.example:a\nb"]},
    {"initiators": [ESX], "chap": {"user": "u", "secret": "short"}},
    {"initiators": [ESX], "chap": {"user": "u", "secret": "abcdefghijkl", "mutual_user": "m"}},
    {"initiators": [ESX], "chap": {"user": "u", "secret": "abcdefghijkl",
                                   "mutual_user": "m", "mutual_secret": "abcdefghijkl"}},
])
def test_bad_iscsi_input_is_refused(client: TestClient, rig: Rig,
                                    iscsi: dict[str, Any]) -> None:
    before = snapshot_state(rig)
    r = client.put("/api/v1/datastores/good", json=iscsi_body(iscsi=iscsi))
    assert r.status_code == 422, r.text
    assert snapshot_state(rig) == before


def test_unknown_initiator_group_is_404(client: TestClient, rig: Rig) -> None:
    r = client.put("/api/v1/datastores/good",
                   json=iscsi_body(iscsi={"initiator_groups": ["nope"]}))
    assert r.status_code == 404
    assert "nope" in r.json()["error"]["message"]


def test_size_larger_than_pool_is_409_and_changes_nothing(client: TestClient, rig: Rig) -> None:
    before = snapshot_state(rig)
    r = client.put("/api/v1/datastores/huge", json=nfs_body(size="10T"))
    assert r.status_code == 409
    assert r.json()["error"]["code"] == "insufficient_space"
    r = client.put("/api/v1/datastores/huge", json=iscsi_body(size="99G", thin=False))
    assert r.status_code == 409 and "free" in r.json()["error"]["message"]
    assert snapshot_state(rig) == before


def test_missing_pool_is_404(client: TestClient, rig: Rig) -> None:
    r = client.put("/api/v1/datastores/x", json=nfs_body(pool="nopool"))
    assert r.status_code == 404


def test_stopped_daemon_is_503_and_changes_nothing(client: TestClient, rig: Rig) -> None:
    before = snapshot_state(rig)
    rig.ganesha.down = True
    r = client.put("/api/v1/datastores/nfsx", json=nfs_body())
    assert r.status_code == 503 and "ganesha" in r.json()["error"]["message"]
    rig.lio.down = True
    r = client.put("/api/v1/datastores/lunx", json=iscsi_body())
    assert r.status_code == 503 and "LIO" in r.json()["error"]["message"]
    rig.ganesha.down = rig.lio.down = False
    assert snapshot_state(rig) == before


def test_name_clash_with_foreign_dataset_is_409(client: TestClient, rig: Rig) -> None:
    rig.zfs.create_filesystem("tank/datastores/taken", {})
    r = client.put("/api/v1/datastores/taken", json=nfs_body())
    assert r.status_code == 409 and "already exists" in r.json()["error"]["message"]


def test_protocol_change_and_shrink_are_refused(client: TestClient, rig: Rig) -> None:
    assert client.put("/api/v1/datastores/ds", json=nfs_body()).status_code == 201
    before = snapshot_state(rig)
    r = client.put("/api/v1/datastores/ds", json=nfs_body(protocol="nfs41"))
    assert r.status_code == 409 and "protocol" in r.json()["error"]["message"]
    r = client.put("/api/v1/datastores/ds", json=nfs_body(size="5G"))
    assert r.status_code == 409 and "shrink" in r.json()["error"]["message"]
    assert snapshot_state(rig) == before


def test_change_nfs_access_updates_export_live(client: TestClient, rig: Rig) -> None:
    d = client.put("/api/v1/datastores/ds", json=nfs_body()).json()
    eid = d["nfs"]["export_id"]
    rig.ganesha.set_connected(eid, ["192.0.2.10"])
    r = client.put("/api/v1/datastores/ds", json=nfs_body(
        nfs={"clients": [{"match": "192.0.2.0/24", "access": "ro"}]}))
    assert r.status_code == 200, r.text
    assert ("UpdateExport", eid) in rig.ganesha.calls
    assert ("RemoveExport", eid) not in rig.ganesha.calls
    assert rig.ganesha.connected_clients(eid) == ["192.0.2.10"]  # clients kept
    assert "Access_Type = RO" in (rig.ganesha.rendered(eid) or "")


def test_change_iscsi_access_keeps_sessions(client: TestClient, rig: Rig) -> None:
    d = client.put("/api/v1/datastores/lun", json=iscsi_body()).json()
    iqn = d["iscsi"]["iqn"]
    rig.lio.login(iqn, ESX)
    r = client.put("/api/v1/datastores/lun", json=iscsi_body(iscsi={"initiators": [ESX, ESX2]}))
    assert r.status_code == 200, r.text
    (t,) = [t for t in rig.lio.list_targets() if t.spec.iqn == iqn]
    assert {a.initiator for a in t.spec.acls} == {ESX, ESX2}
    assert t.sessions == (ESX,)
    assert r.json()["connected_clients"] == [ESX]


def test_chap_is_applied_and_never_returned(client: TestClient, rig: Rig) -> None:
    chap = {"user": "esx", "secret": "abcdefghijkl", "mutual_user": "zds",
            "mutual_secret": "mnopqrstuvwx"}
    d = client.put("/api/v1/datastores/lun", json=iscsi_body(
        iscsi={"initiators": [ESX], "chap": chap})).json()
    assert d["iscsi"]["chap_user"] == "esx" and "abcdefghijkl" not in str(d)
    (t,) = rig.lio.list_targets()
    assert t.spec.acls[0].chap is not None and t.spec.acls[0].chap.secret == "abcdefghijkl"
    assert t.spec.acls[0].chap.mutual_secret == "mnopqrstuvwx"
    assert rig.lio.tpg_attributes(d["iscsi"]["iqn"])["authentication"] == 1
    vol = rig.zfs.get_dataset("tank/datastores/lun")
    assert vol is not None and "abcdefghijkl" not in str(vol.properties)


def test_delete_refused_with_clients_unless_forced(client: TestClient, rig: Rig) -> None:
    d = client.put("/api/v1/datastores/lun", json=iscsi_body()).json()
    rig.lio.login(d["iscsi"]["iqn"], ESX)
    before = snapshot_state(rig)
    r = client.delete("/api/v1/datastores/lun")
    assert r.status_code == 409 and ESX in r.json()["error"]["message"]
    assert snapshot_state(rig) == before
    r = client.delete("/api/v1/datastores/lun", params={"force": True, "wait": 10})
    assert r.status_code == 202 and r.json()["state"] == "succeeded", r.text
    assert rig.lio.list_targets() == [] and rig.lio.list_backstores() == []
    assert rig.zfs.get_dataset("tank/datastores/lun") is None
    assert client.get("/api/v1/datastores/lun").status_code == 404


def test_delete_nfs_with_clients(client: TestClient, rig: Rig) -> None:
    d = client.put("/api/v1/datastores/ds", json=nfs_body()).json()
    rig.ganesha.set_connected(d["nfs"]["export_id"], ["192.0.2.10"])
    assert client.delete("/api/v1/datastores/ds").status_code == 409
    rig.ganesha.set_connected(d["nfs"]["export_id"], [])
    r = client.delete("/api/v1/datastores/ds", params={"wait": 10})
    assert r.json()["state"] == "succeeded"
    assert rig.ganesha.list_exports() == []
    assert client.get("/api/v1/system/drift").json() == {"in_sync": True, "items": []}


def test_list_and_get(client: TestClient) -> None:
    client.put("/api/v1/datastores/b", json=nfs_body())
    client.put("/api/v1/datastores/a", json=iscsi_body())
    names = [d["name"] for d in client.get("/api/v1/datastores").json()]
    assert names == ["a", "b"]
    assert client.get("/api/v1/datastores/zz").status_code == 404
    attach = client.get("/api/v1/datastores/b/attach", params={"server": "nas.example.org"})
    assert "--host=nas.example.org" in attach.json()["esxi"][0]
    bad = client.get("/api/v1/datastores/b/attach", params={"server": "x;reboot"})
    assert bad.status_code == 422


@pytest.mark.parametrize("protocol", ["nfs3", "iscsi"])
def test_a_view_put_back_with_a_new_size_keeps_labels_and_overrides(
        client: TestClient, rig: Rig, protocol: str) -> None:
    """A PUT is the whole desired state, so a client that grows a datastore by sending
    back what GET showed (the console does) must find labels and overrides in the view:
    without them, growing dropped the datastore out of its label-selected policies and
    reset sync/compression to the profile's defaults."""
    extra: dict[str, Any] = {"labels": {"protect": "gold"},
                             "overrides": {"sync": "always", "compression": "zstd"}}
    body = nfs_body(**extra) if protocol == "nfs3" else iscsi_body(**extra)
    assert client.put("/api/v1/datastores/keep", json=body).status_code == 201
    view = client.get("/api/v1/datastores/keep").json()
    assert view["labels"] == {"protect": "gold"}
    assert view["overrides"]["sync"] == "always" and view["overrides"]["compression"] == "zstd"

    back: dict[str, Any] = {k: view[k] for k in ("protocol", "pool", "thin", "profile",
                                                 "labels", "overrides")}
    back["size"] = "20G"
    if view["nfs"]:
        back["nfs"] = {"clients": view["nfs"]["clients"]}
    else:
        back["iscsi"] = {"initiators": view["iscsi"]["initiators"]}
    r = client.put("/api/v1/datastores/keep", json=back)
    assert r.status_code == 200, r.text
    grown = client.get("/api/v1/datastores/keep").json()
    assert grown["size"] == 20 << 30
    assert grown["labels"] == {"protect": "gold"}
    assert grown["overrides"] == view["overrides"]
    ds = rig.zfs.list_datasets("tank")
    props = next(d for d in ds if d.name.endswith("/keep")).properties
    assert props["sync"] == "always" and props["compression"] == "zstd"
