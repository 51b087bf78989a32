"""The VMware step and the hooks on their in-memory twins (held to the real adapters by
the same contract checks: vcsim in tests/integration, real programs here)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from fastapi.testclient import TestClient

from appliance.host.contract.hooks_checks import check_hooks
from appliance.host.contract.vsphere_checks import check_vsphere
from appliance.host.hooks import FakeHooks, Hooks
from appliance.host.run import SubprocessRunner
from appliance.host.vsphere import FakeDatastore, FakeVsphere
from appliance.model import naa_wwn
from tests.unit.conftest import Rig

API = "/api/v1"
ESX = "iqn.1998-01.com.vmware:esxi01-4f2a"


def vcenter(rig: Rig) -> FakeVsphere:
    vc = rig.hosts.vsphere
    vc.users["zds@vsphere.local"] = "pw-123456"
    return vc


def test_fake_vsphere_holds_the_contract() -> None:
    vc = FakeVsphere()
    vc.users["u"] = "p"
    vc.datastores.append(FakeDatastore("zds-nfs01", nfs_path="/tank/datastores/nfs01"))
    vc.add_vm("web01", ["zds-nfs01"])
    vc.add_vm("db01", ["zds-nfs01"], powered_on=False)
    vc.port, vc.self_signed = 443, True  # like vcsim
    check_vsphere(vc, "127.0.0.1", 443, "u", "p", "/tank/datastores/nfs01",
                  "web01", "db01", closed_port=1)


def test_hooks_hold_the_contract_real_and_fake(tmp_path: Path) -> None:
    hooks_dir = tmp_path / "hooks"
    hooks_dir.mkdir()
    for name, body in (("zds-ok", "echo frozen $ZDS_POLICY"),
                       ("zds-fail", "echo cannot freeze >&2; exit 3"),
                       ("zds-slow", "sleep 5")):
        f = hooks_dir / name
        f.write_text(f"#!/bin/sh\n{body}\n")
        f.chmod(f.stat().st_mode | stat.S_IXUSR)
    real = Hooks(SubprocessRunner(), hooks_dir)
    check_hooks(real, str(hooks_dir.resolve()))
    assert real.run(["zds-ok"], 10, {"ZDS_POLICY": "nightly"}).stdout == "frozen nightly\n"
    (hooks_dir / "not-exec").write_text("#!/bin/sh\n")
    assert "not executable" in (real.run(["not-exec"], 5, {}).error or "")
    os.symlink("/bin/sh", hooks_dir / "sh-link")  # a link out of the directory
    assert "not in the hooks directory" in (real.run(["sh-link"], 5, {}).error or "")
    fake = FakeHooks(hooks_dir=Path("/etc/zds/hooks"), programs={
        "zds-ok": (0, "frozen\n", "", 0.01), "zds-fail": (3, "", "cannot freeze\n", 0.01),
        "zds-slow": (0, "", "", 5.0)})
    check_hooks(fake, "/etc/zds/hooks")


def setup_vmware(client: TestClient, rig: Rig) -> FakeVsphere:
    vc = vcenter(rig)
    r = client.put(f"{API}/datastores/nfs01", json={"protocol": "nfs3", "size": "1G"})
    assert r.status_code == 201
    r = client.put(f"{API}/datastores/lun01", json={"protocol": "iscsi", "size": "1G",
                                                     "iscsi": {"initiators": [ESX]}})
    assert r.status_code == 201
    wwn = r.json()["iscsi"]["wwn"]
    assert wwn == naa_wwn(r.json()["iscsi"]["serial"])
    vc.datastores += [FakeDatastore("ds-nfs", nfs_path="/tank/datastores/nfs01"),
                      FakeDatastore("ds-vmfs", naa=wwn),
                      FakeDatastore("other", nfs_path="/elsewhere")]
    vc.add_vm("web01", ["ds-nfs"])
    vc.add_vm("app01", ["ds-vmfs", "ds-nfs"])  # disks on both: snapshotted once
    vc.add_vm("sql01", ["ds-vmfs"], quiesce_error="An error occurred while quiescing the "
                                                  "virtual machine (VMware Tools not running)")
    vc.add_vm("off01", ["ds-vmfs"], powered_on=False)
    vc.add_vm("elsewhere", ["other"])
    r = client.put(f"{API}/vcenters/vc1", json={"host": "vc.example.org",
                                                "user": "zds@vsphere.local",
                                                "password": "pw-123456"})
    assert r.status_code == 201, r.text
    return vc


def test_vmfs_by_naa_and_nfs_by_path_every_vm_accounted_for(
        client: TestClient, rig: Rig) -> None:
    vc = setup_vmware(client, rig)
    r = client.put(f"{API}/snapshot-policies/vmw", json={
        "schedule": {"every": "1h"}, "retention": {"frequent": 5},
        "datastores": {"all": True}, "vmware": {"vcenter": "vc1", "parallel": 2}})
    assert r.status_code == 201, r.text
    job = client.post(f"{API}/snapshot-policies/vmw/run", params={"wait": 30}).json()
    assert job["state"] == "succeeded", job
    vm = job["result"]["vmware"]
    assert sorted(v["vm"] for v in vm["quiesced"]) == ["app01", "web01"]
    assert [v["vm"] for v in vm["not_quiesced"]] == ["sql01"]
    assert "VMware Tools not running" in vm["not_quiesced"][0]["reason"]
    assert [v["vm"] for v in vm["powered_off"]] == ["off01"]
    assert sorted(v for v, _n, q in vc.created) == sorted(
        [vc_moid(vc, "web01"), vc_moid(vc, "app01"), vc_moid(vc, "sql01")])
    assert all(q for _v, _n, q in vc.created), "quiesce asked for"
    assert vm["removed"] == 2 and all(not v.snapshots for v in vc.vms.values())
    res = job["result"]
    assert res["consistency"] == "partial" and res["taken"] == 2
    assert any("1 VM(s) not quiesced: sql01" in w for w in res["warnings"])
    h = client.get(f"{API}/system/health").json()
    assert h["status"] == "degraded" and "sql01" in h["message"]


def vc_moid(vc: FakeVsphere, name: str) -> str:
    return next(v.moid for v in vc.vms.values() if v.name == name)


def test_a_vm_that_does_not_quiesce_in_time_is_reported_and_cleaned_up(
        client: TestClient, rig: Rig) -> None:
    vc = setup_vmware(client, rig)
    vc.vms[vc_moid(vc, "web01")].hang = True
    client.put(f"{API}/snapshot-policies/vmw", json={
        "schedule": {"every": "1h"}, "retention": {"frequent": 5},
        "datastores": {"names": ["nfs01"]}, "vmware": {"vcenter": "vc1", "timeout": 1}})
    job = client.post(f"{API}/snapshot-policies/vmw/run", params={"wait": 30}).json()
    vm = job["result"]["vmware"]
    assert [v["vm"] for v in vm["not_quiesced"]] == ["web01"]
    assert "not quiesced within 1 s (task cancelled)" in vm["not_quiesced"][0]["reason"]
    assert vm["removed"] == 1  # app01
    assert job["result"]["taken"] == 1, "the ZFS snapshot is taken anyway"


def test_credentials_are_checked_and_never_returned(client: TestClient, rig: Rig) -> None:
    vc = vcenter(rig)
    body = {"host": "vc.example.org", "user": "zds@vsphere.local", "password": "nope"}
    r = client.put(f"{API}/vcenters/vc1", json=body)
    # a well formed request the vCenter refuses: 409, not 422
    assert r.status_code == 409 and "refused" in r.json()["error"]["message"]
    assert r.json()["error"]["code"] == "vcenter_refused"
    vc.reachable = False
    r = client.put(f"{API}/vcenters/vc1", json={**body, "password": "pw-123456"})
    assert r.status_code == 503 and "unreachable" in r.json()["error"]["message"]
    assert client.get(f"{API}/vcenters").json() == []
    vc.reachable = True
    r = client.put(f"{API}/vcenters/vc1", json={**body, "password": "pw-123456"})
    assert r.status_code == 201
    for text in (r.text, client.get(f"{API}/vcenters").text,
                 client.get(f"{API}/vcenters/vc1").text):
        assert "pw-123456" not in text
    for bad in ({"host": "a b"}, {"port": 0}, {"host": "10.0.0.0/8"}):
        r = client.put(f"{API}/vcenters/vc2", json={**body, **bad, "verify": False})
        assert r.status_code == 422, (bad, r.text)
    client.put(f"{API}/datastores/nfs01", json={"protocol": "nfs3", "size": "1G"})
    client.put(f"{API}/snapshot-policies/vmw", json={
        "schedule": {"every": "1h"}, "retention": {"daily": 1},
        "datastores": {"names": ["nfs01"]}, "vmware": {"vcenter": "vc1"}})
    r = client.delete(f"{API}/vcenters/vc1")
    assert r.status_code == 409 and "vmw" in r.json()["error"]["message"]
    assert client.get(f"{API}/vcenters/vc1").json()["used_by"] == ["vmw"]
