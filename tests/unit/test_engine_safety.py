"""The engine must never tear down what it serves because of a hiccup, must leave other
owners' objects alone, and must adopt pools from other appliances without clashes."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from appliance import pool_secrets
from appliance.adoption import adopt
from appliance.host.ganesha_config import ClientRule, ExportSpec
from appliance.model import ChapSettings
from appliance.services.datastores import DatastoreRequest
from appliance.transports.iscsi import IscsiTransport
from tests.unit.conftest import Rig, make_rig
from tests.unit.test_api_datastores import ESX, ESX2, iscsi_body, nfs_body

API = "/api/v1"
CHAP = ChapSettings("esx", "abcdefghijkl")
SECURE_FILE = Path("/tank/datastores/.zds-secrets/secure.json")


def nfs(**kw: object) -> DatastoreRequest:
    return DatastoreRequest(protocol="nfs3", size="1G", **kw)  # type: ignore[arg-type]


def test_zfs_hiccup_tears_nothing_down(client: TestClient, rig: Rig) -> None:
    client.put(f"{API}/datastores/ds", json=nfs_body())
    client.put(f"{API}/datastores/lun", json=iscsi_body())
    rig.zfs.down = True
    report = rig.engine.reconciler.full()
    assert report.applied == [] and "ZFS is not available" in report.errors[0]
    rig.zfs.down = False
    assert len(rig.ganesha.list_exports()) == 1 and len(rig.lio.list_targets()) == 1
    assert client.get(f"{API}/system/drift").json()["in_sync"] is True


def test_probe_exports_are_left_alone(rig: Rig) -> None:
    rig.ganesha.add_export(ExportSpec(65500, "/tank/probe", "/tank/probe", (3,),
                                      (ClientRule(("127.0.0.1",), "RW"),)))
    assert rig.engine.reconciler.drift() == []
    rig.engine.reconciler.full()
    assert [e.export_id for e in rig.ganesha.list_exports()] == [65500]


def test_unmounted_nfs_dataset_is_reported(rig: Rig) -> None:
    rig.engine.datastores.put("ds", nfs())
    rig.zfs.set_properties("tank/datastores/ds", {"mountpoint": "none"})
    view = rig.engine.reconciler.read_zfs()
    problems = {i.subject: i.reason for i in rig.engine.reconciler.zfs_problems(
        rig.engine.store.list_datastores(), view)}
    assert "not mounted" in problems["ds"]
    assert rig.engine.system.drift().in_sync is False


def test_failure_of_one_lun_does_not_block_a_similar_name(rig: Rig) -> None:
    rig.engine.datastores.put("lun10", DatastoreRequest(protocol="iscsi", size="1G",
                                                        initiators=[ESX]))
    report = rig.engine.reconciler.full()
    iqn10 = rig.engine.datastores.record("lun10").iqn
    report.fail(str(iqn10), "apply_target lun10: broken")
    iscsi = rig.engine.ctx.transports.of("iscsi")
    assert isinstance(iscsi, IscsiTransport)
    iqn1 = iscsi.target_iqn("lun1")
    assert report.failures_for(iqn1) == [] and report.failures_for(iqn10)


def test_adopting_a_pool_from_another_appliance(tmp_path: Path) -> None:
    a = make_rig(tmp_path / "a")
    a.engine.start()
    a.engine.datastores.put("mine", nfs())  # export id 100 here
    a.engine.datastores.put("secure", DatastoreRequest(protocol="iscsi", size="1G",
                                                       initiators=[ESX], chap=CHAP))
    a.engine.datastores.put("other", nfs())
    # "other" came from another appliance whose counter also started at 100
    ds = a.zfs.get_dataset("tank/datastores/other")
    assert ds is not None
    a.zfs.set_properties("tank/datastores/other", {"zds:export_id": "100"})
    for name in ("other", "secure"):
        a.engine.store.delete_datastore(name)
    adopted = adopt(a.engine.ctx, ["tank"])
    assert sorted(adopted) == ["other", "secure"]
    other = a.engine.datastores.record("other")
    assert other.export_id not in (None, 100)
    assert a.zfs.get_dataset("tank/datastores/other").prop(  # type: ignore[union-attr]
        "zds:export_id") == str(other.export_id)
    # the CHAP credentials came with the pool (its root-only file), never in a property
    secure = a.engine.datastores.record("secure")
    assert secure.state == "ready" and secure.spec.iscsi.chap == CHAP, secure
    props = a.zfs.get_dataset("tank/datastores/secure")
    assert props is not None and CHAP.secret not in str(props)
    a.engine.reconciler.full()
    (target,) = a.lio.list_targets()
    assert target.authentication and all(
        acl.chap is not None and acl.chap.secret == CHAP.secret for acl in target.spec.acls)
    a.engine.close()


def test_a_chap_datastore_without_its_credentials_on_the_pool_waits_for_a_put(
        tmp_path: Path) -> None:
    a = make_rig(tmp_path / "a")
    a.engine.start()
    a.engine.datastores.put("secure", DatastoreRequest(protocol="iscsi", size="1G",
                                                       initiators=[ESX], chap=CHAP))
    # a pool from before the credentials were kept on it
    assert a.local.remove_file(SECURE_FILE)
    a.engine.store.delete_datastore("secure")
    assert adopt(a.engine.ctx, ["tank"]) == ["secure"]
    secure = a.engine.datastores.record("secure")
    assert secure.state == "error" and "CHAP" in (secure.error or "")
    a.engine.reconciler.full()
    assert a.lio.list_targets() == []  # not served without its CHAP secret
    # a PUT with the CHAP settings repairs it, and keeps them on the pool from now on
    view, _ = a.engine.datastores.put("secure", DatastoreRequest(
        protocol="iscsi", size="1G", initiators=[ESX], chap=CHAP))
    assert view.record.state == "ready" and view.serving
    assert a.local.read_text(SECURE_FILE) is not None
    a.engine.close()


def test_chap_credentials_on_the_pool_follow_the_datastore(tmp_path: Path) -> None:
    """Written when made, rewritten when changed, removed when CHAP is dropped or the
    datastore deleted; a file that is not what ZDS wrote is ignored."""
    a = make_rig(tmp_path / "a")
    a.engine.start()
    a.engine.datastores.put("secure", DatastoreRequest(protocol="iscsi", size="1G",
                                                       initiators=[ESX], chap=CHAP))
    kept = json.loads(a.local.read_text(SECURE_FILE) or "{}")
    assert kept == {"user": "esx", "secret": CHAP.secret, "mutual_user": None,
                    "mutual_secret": None}
    mutual = ChapSettings("esx", "abcdefghijkl", "zds", "mnopqrstuvwx")
    a.engine.datastores.put("secure", DatastoreRequest(protocol="iscsi", size="1G",
                                                       initiators=[ESX], chap=mutual))
    assert pool_secrets.read(a.local, "/tank/datastores", "secure") == mutual
    a.engine.datastores.put("secure", DatastoreRequest(protocol="iscsi", size="1G",
                                                       initiators=[ESX]))
    assert a.local.read_text(SECURE_FILE) is None
    a.engine.datastores.put("secure", DatastoreRequest(protocol="iscsi", size="1G",
                                                       initiators=[ESX], chap=CHAP))
    job = a.engine.datastores.delete("secure", force=True)
    assert a.engine.ctx.jobs.wait(job.id, 30).state == "succeeded"
    assert a.local.read_text(SECURE_FILE) is None
    a.local.write_secret(SECURE_FILE, '{"user": "esx"}')
    assert pool_secrets.read(a.local, "/tank/datastores", "secure") is None
    a.engine.close()


ESX3 = "iqn.1998-01.com.vmware:esxi03-9b3e"
GROUP_FILE = Path("/tank/datastores/.zds-groups/esx.json")


def _served_initiators(rig: Rig) -> set[str]:
    rig.engine.reconciler.full()
    (target,) = rig.lio.list_targets()
    return {acl.initiator for acl in target.spec.acls}


def test_initiator_groups_move_with_the_pool(tmp_path: Path) -> None:
    """A node that takes the pool without the group a LUN names would serve it to no
    host: the pool keeps the group, and adoption makes it where it is missing."""
    a = make_rig(tmp_path / "a")
    a.engine.start()
    a.engine.groups.put("esx", [ESX, ESX2])
    a.engine.datastores.put("lun", DatastoreRequest(protocol="iscsi", size="1G",
                                                    initiator_groups=["esx"]))
    assert json.loads(a.local.read_text(GROUP_FILE) or "{}") == {
        "name": "esx", "initiators": sorted([ESX, ESX2])}
    assert _served_initiators(a) == {ESX, ESX2}
    # the other node: the pool's datastores and groups are not in its database
    a.engine.store.delete_datastore("lun")
    a.engine.store.delete_group("esx")
    assert adopt(a.engine.ctx, ["tank"]) == ["lun"]
    group = a.engine.store.get_group("esx")
    assert group is not None and group.initiators == tuple(sorted([ESX, ESX2]))
    assert a.engine.datastores.record("lun").spec.iscsi.initiator_groups == ("esx",)
    assert _served_initiators(a) == {ESX, ESX2}
    # a change of the group is kept on the pool too
    a.engine.groups.put("esx", [ESX3])
    assert json.loads(a.local.read_text(GROUP_FILE) or "{}")["initiators"] == [ESX3]
    a.engine.close()


def _pool_with_a_lun_named_by_group(tmp_path: Path) -> Rig:
    """A rig whose pool carries LUN ``lun`` named through group ``esx`` (ESX), the
    datastore's record gone, as on a node that has just taken the pool."""
    a = make_rig(tmp_path / "a")
    a.engine.start()
    a.engine.groups.put("esx", [ESX])
    a.engine.datastores.put("lun", DatastoreRequest(protocol="iscsi", size="1G",
                                                    initiator_groups=["esx"]))
    a.engine.store.delete_datastore("lun")
    return a


def test_adoption_keeps_this_nodes_group_and_says_when_the_pools_copy_differs(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    a = _pool_with_a_lun_named_by_group(tmp_path)
    a.engine.groups.put("esx", [ESX2])  # this node's group is not the pool's any more
    with caplog.at_level(logging.WARNING, logger="appliance.adoption"):
        assert adopt(a.engine.ctx, ["tank"]) == ["lun"]
    assert "differs from the pool's copy" in caplog.text
    assert _served_initiators(a) == {ESX2}
    a.engine.close()


def test_a_group_neither_here_nor_on_the_pool_is_reported_not_invented(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    a = _pool_with_a_lun_named_by_group(tmp_path)
    a.engine.store.delete_group("esx")
    a.local.write_secret(GROUP_FILE, '{"name": "esx", "initiators": ["not an iqn"]}')
    with caplog.at_level(logging.INFO):
        assert adopt(a.engine.ctx, ["tank"]) == ["lun"]
    assert a.engine.store.get_group("esx") is None
    assert "ignoring" in caplog.text and "neither here nor on the pool" in caplog.text
    assert pool_secrets.read_group(a.local, "/tank/datastores", "other") is None
    a.engine.close()


def test_nfs_rollback_with_active_clients_needs_force(client: TestClient, rig: Rig) -> None:
    d = client.put(f"{API}/datastores/ds", json=nfs_body()).json()
    client.post(f"{API}/datastores/ds/snapshots", json={"name": "s1"})
    rig.ganesha.set_connected(d["nfs"]["export_id"], ["192.0.2.10"])
    r = client.post(f"{API}/datastores/ds/snapshots/s1/rollback", json={})
    assert r.status_code == 409 and "192.0.2.10" in r.json()["error"]["message"]
    r = client.post(f"{API}/datastores/ds/snapshots/s1/rollback", json={"force": True})
    assert r.status_code == 200
    # withdrawn and served again (fresh ganesha caches), same id and path
    removes = [c for c in rig.ganesha.calls if c == ("RemoveExport", d["nfs"]["export_id"])]
    assert len(removes) == 1
    assert [e.export_id for e in rig.ganesha.list_exports()] == [d["nfs"]["export_id"]]


def test_iscsi_rollback_across_a_resize_is_refused(client: TestClient, rig: Rig) -> None:
    client.put(f"{API}/datastores/lun", json=iscsi_body())
    client.post(f"{API}/datastores/lun/snapshots", json={"name": "small"})
    assert client.put(f"{API}/datastores/lun", json=iscsi_body(size="20G")).status_code == 200
    r = client.post(f"{API}/datastores/lun/snapshots/small/rollback", json={})
    assert r.status_code == 409 and "resized" in r.json()["error"]["message"]
    vol = rig.zfs.get_dataset("tank/datastores/lun")
    assert vol is not None and vol.prop("volsize") == str(20 << 30)  # untouched


def test_clone_inherits_access(client: TestClient, rig: Rig) -> None:
    client.put(f"{API}/datastores/lun", json=iscsi_body(iscsi={
        "initiators": [ESX], "chap": {"user": "esx", "secret": "abcdefghijkl"}}))
    client.post(f"{API}/datastores/lun/snapshots", json={"name": "s1"})
    c = client.post(f"{API}/datastores/lun/snapshots/s1/clones", json={"name": "copy"}).json()
    assert c["iscsi"]["initiators"] == [ESX] and c["iscsi"]["chap_user"] == "esx"


def test_inputs_the_adapters_would_refuse_are_422(client: TestClient, rig: Rig) -> None:
    long_label = "a" * 64 + ".example.org"
    r = client.put(f"{API}/datastores/ds", json=nfs_body(nfs={"clients": [
        {"match": long_label}]}))
    assert r.status_code == 422
    r = client.put(f"{API}/datastores/lun", json=iscsi_body(iscsi={
        "initiators": [ESX], "chap": {"user": "NULL", "secret": "abcdefghijkl"}}))
    assert r.status_code == 422
    r = client.put(f"{API}/datastores/a_b", json=iscsi_body())
    assert r.status_code == 422 and "a_b" in r.json()["error"]["message"]
    assert rig.zfs.list_datasets("tank/datastores") == [] or all(
        d.name == "tank/datastores" for d in rig.zfs.list_datasets("tank/datastores"))
