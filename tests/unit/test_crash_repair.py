"""What a crash leaves, repaired by the start-up reconcile (and by every reconcile after),
and what cannot be repaired safely reported with its reason and action (issue 25).
The crash-point harness over every operation is tests/unit/test_crash_points.py."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from appliance.engine import Engine
from appliance.fake_hosts import FakeHosts, fake_hosts
from appliance.host.fakes.zfs import GiB
from appliance.model import DatastoreRecord
from appliance.services.datastores import DatastoreRequest
from tests.unit.conftest import SPARE_DISKS, Rig
from tests.unit.crashpoints import Killed, Killer, die, fresh_settings, killable, restart

NFS = DatastoreRequest(protocol="nfs3", size="128M",
                       nfs_clients=[{"match": "192.0.2.0/24", "access": "rw"}])


def booted(tmp_path: Path) -> tuple[Engine, FakeHosts, Killer]:
    hosts = fake_hosts("tank", 100 * GiB, SPARE_DISKS)
    killer = Killer()
    engine = Engine.create(fresh_settings(tmp_path), killable(hosts, killer))
    engine.start(daemon_wait=0.0)
    return engine, hosts, killer


def test_crash06_a_dataset_created_and_not_mounted_is_mounted_and_served(
        tmp_path: Path) -> None:
    """Issue 25's crash06: the kill landed inside ``zfs create``, after the dataset existed
    and before it was mounted. Before the fix the restarted API showed it ready and not
    served, drift said "not mounted", and no reconcile ever repaired it."""
    engine, hosts, _killer = booted(tmp_path)

    def inside_zfs_create(what: str) -> None:
        if what.startswith("zfs create tank/datastores/crash06:"):
            raise Killed(what)

    hosts.zfs.on_step = inside_zfs_create
    with pytest.raises(Killed):
        engine.datastores.put("crash06", NFS)
    die(engine)
    left = hosts.zfs.get_dataset("tank/datastores/crash06", ("mounted", "canmount"))
    assert left is not None and left.prop("mounted") == "no" and left.prop("canmount") == "on"

    engine = restart(fresh_settings(tmp_path), hosts)
    assert engine.reconciler.drift() == []
    view = engine.datastores.get("crash06")
    assert (view.state, view.serving, view.path) == ("ready", True,
                                                     "/tank/datastores/crash06")
    assert [e.path for e in hosts.ganesha.list_exports()] == ["/tank/datastores/crash06"]
    engine.close()


def test_a_reconcile_mounts_what_was_unmounted_under_it(rig: Rig) -> None:
    """Not only at start-up: POST /system/reconcile (and the watcher) mount and serve a
    datastore whose file system is not mounted, instead of answering "applied: []"."""
    rig.engine.datastores.put("ds", NFS)
    rig.zfs.unmount("tank/datastores/ds")
    rig.ganesha.restart()  # and what it served is gone with it
    assert rig.engine.datastores.get("ds").state == "unserved"
    report = rig.engine.reconciler.full()
    assert [(a.kind, a.subject) for a in report.applied][:1] == [("mount", "ds")], report
    assert rig.engine.reconciler.drift() == []
    view = rig.engine.datastores.get("ds")
    assert view.state == "ready" and view.serving


def test_the_datastores_parent_is_mounted_first(rig: Rig) -> None:
    rig.engine.datastores.put("ds", NFS)
    rig.zfs.unmount("tank/datastores/ds")
    rig.zfs.unmount("tank/datastores")
    rig.engine.reconciler.full()
    for name in ("tank/datastores", "tank/datastores/ds"):
        info = rig.zfs.get_dataset(name, ("mounted",))
        assert info is not None and info.prop("mounted") == "yes", name
    assert rig.engine.reconciler.drift() == []


def test_what_is_not_safe_to_mount_is_reported_with_its_action(rig: Rig,
                                                                admin_token: str) -> None:
    """canmount=off is someone's decision: not undone, but said everywhere a user looks
    (drift, health, the datastore's view), with what to do; never "ready"."""
    rig.engine.datastores.put("ds", NFS)
    rig.zfs.set_properties("tank/datastores/ds", {"canmount": "off"})
    rig.zfs.unmount("tank/datastores/ds")
    report = rig.engine.reconciler.full()
    assert not any(a.kind == "mount" for a in report.applied)
    assert report.failures_for("ds"), report
    items = [i for i in rig.engine.reconciler.drift() if i.subject == "ds"]
    assert items and "not mounted" in items[0].reason
    assert "zfs set canmount=on tank/datastores/ds" in items[0].action
    rig.engine.reconciler.check()
    with TestClient(create_app(rig.engine, start=False)) as client:
        client.headers["Authorization"] = f"Bearer {admin_token}"
        ds = client.get("/api/v1/datastores/ds").json()
        assert ds["state"] == "unserved" and ds["serving"] is False
        assert "not mounted" in ds["error"] and "canmount=on" in ds["action"]
        health = client.get("/api/v1/system/health").json()
        assert health["status"] == "degraded"
        assert "ds: dataset tank/datastores/ds is not mounted" in health["message"]
        assert "canmount=on" in health["message"]
        drift = client.get("/api/v1/system/drift").json()
        assert any("canmount=on" in i["action"] for i in drift["items"])


def test_a_mountpoint_outside_the_datastores_is_not_mounted(rig: Rig) -> None:
    """A mountpoint anywhere but below POOL/datastores may be a stream's (replication):
    mounting it could cover the appliance's own files."""
    rig.engine.datastores.put("ds", NFS)
    rig.zfs.set_properties("tank/datastores/ds", {"mountpoint": "/usr/local/sbin"})
    rig.zfs.unmount("tank/datastores/ds")
    rig.engine.reconciler.full()
    info = rig.zfs.get_dataset("tank/datastores/ds", ("mounted",))
    assert info is not None and info.prop("mounted") == "no"
    item = next(i for i in rig.engine.reconciler.drift() if i.subject == "ds")
    assert "not ZDS's to mount" in item.action


def lun_without_its_link(rig: Rig) -> str:
    """A LUN whose target is gone and whose /dev/zvol link udev lost; its IQN."""
    rig.engine.datastores.put("lun", DatastoreRequest(
        protocol="iscsi", size="128M", initiators=["iqn.2026-11.org.example:esx1"]))
    iqn = rig.engine.datastores.record("lun").iqn
    assert iqn is not None
    rig.lio.remove_target(iqn)
    rig.zfs.drop_link("/dev/zvol/tank/datastores/lun")
    return iqn


def test_a_zvol_whose_link_udev_lost_is_waited_for_and_served(rig: Rig) -> None:
    """After an import of many zvols udev has been seen to drop events: the LUN's device
    is missing, the reconcile re-triggers udev (the wait does) and serves it."""
    iqn = lun_without_its_link(rig)
    report = rig.engine.reconciler.full()
    assert report.ok, report.errors
    assert rig.lio.get_target(iqn) is not None
    assert rig.engine.reconciler.drift() == []


def test_a_zvol_link_that_never_comes_is_reported(rig: Rig) -> None:
    iqn = lun_without_its_link(rig)
    rig.zfs.stuck_links.add("/dev/zvol/tank/datastores/lun")
    report = rig.engine.reconciler.full()
    assert report.failures_for("lun") and report.failures_for(iqn)
    view = rig.engine.datastores.get("lun")
    assert view.state == "unserved" and "no such block device" in (view.problem or "")
    assert view.action and "reconcile" in view.action
    assert any("did not appear" in i.reason for i in rig.engine.reconciler.status.drift)


def test_a_put_cut_before_zfs_had_it_is_finished(rig: Rig) -> None:
    """A PUT records the new spec, then sets ZFS: killed between the two, the dataset's
    zds:* and size lag the record, and the reconcile sets them."""
    rig.engine.datastores.put("ds", NFS)
    rec = rig.engine.datastores.record("ds")
    grown = replace(rec, spec=replace(rec.spec, size=256 << 20, labels=(("tier", "gold"),)))
    rig.engine.store.put_datastore(grown)  # what the PUT committed before it died
    assert any("lags its record" in i.reason for i in rig.engine.reconciler.drift())
    report = rig.engine.reconciler.full()
    assert ("set_properties", "ds") in [(a.kind, a.subject) for a in report.applied]
    info = rig.zfs.get_dataset("tank/datastores/ds")
    assert info is not None
    assert info.int_prop("refquota") == 256 << 20 and info.prop("zds:size") == str(256 << 20)
    assert info.prop("zds:labels") == '{"tier":"gold"}'
    assert rig.engine.reconciler.drift() == []


def test_the_watcher_finishes_a_create_start_up_could_not(rig: Rig) -> None:
    """Start-up met ZFS down: the interrupted create waits for the watcher's round."""
    spec = rig.engine.datastores.validate_request("ds", NFS)
    rig.engine.store.put_datastore(DatastoreRecord(spec, "creating", export_id=150))
    rig.engine.watcher.repair()
    view = rig.engine.datastores.get("ds")
    assert (view.state, view.serving) == ("ready", True)
    assert rig.engine.reconciler.drift() == []


def test_a_create_that_cannot_be_finished_is_rolled_back(rig: Rig) -> None:
    """A clone whose snapshot is gone by the time the API is back: the recorded intent
    cannot be carried out, so the record goes (its PUT never answered)."""
    rig.engine.datastores.put("ds", NFS)
    spec = rig.engine.datastores.validate_request("c1", NFS)
    rig.engine.store.put_datastore(DatastoreRecord(spec, "creating", export_id=151,
                                                   origin="tank/datastores/ds@gone"))
    rig.engine.watcher.repair()
    assert rig.engine.store.get_datastore("c1") is None
    assert rig.zfs.get_dataset("tank/datastores/c1") is None
    assert rig.engine.reconciler.drift() == []
