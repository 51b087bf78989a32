"""NVMe/TCP datastores on the fakes: identity derived from the record and never the
kernel's, plan/apply and drift on FakeNvmet, access by host NQN and initiator groups,
the refusals with their codes, clients, growth, clones, adoption and the API's answer."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from appliance.adoption import record_from_properties
from appliance.errors import Conflict, InvalidInput, NotFound, Unsupported
from appliance.host.fakes.nvmet import FakeNvmet
from appliance.host.fakes.zfs import FakeZfs, GiB
from appliance.host.local import FakeLocalHost
from appliance.host.nvmet import check_nqn, parse_connects, parse_tcp_peers
from appliance.host.zfs import DatasetInfo
from appliance.model import DatastoreRecord, DatastoreSpec, InitiatorGroup, NvmeAccess
from appliance.services.datastores import DatastoreRequest
from appliance.store import Store
from appliance.transports.nvme import (
    ESXI_STATEMENT,
    NvmeTransport,
    namespace_identity,
    subsystem_spec,
)
from tests.unit.conftest import Rig

PREFIX = "nqn.2026-11.io.zds"
KVM1 = "nqn.2014-08.org.nvmexpress:uuid:5b1e0c2a-7d4f-4e8b-9a61-0c3f2d8e7b14"
KVM2 = "nqn.2026-11.org.example:kvm-02"
ESX_IQN = "iqn.1998-01.com.vmware:esxi01-4f2a"
API = "/api/v1/datastores"


def transport(tmp_path: Path, nvmet: FakeNvmet | None = None) -> NvmeTransport:
    return NvmeTransport(nvmet or FakeNvmet(), FakeZfs.with_pool("tank", 10 * GiB),
                         FakeLocalHost(name="box"), Store(tmp_path / "db"), PREFIX,
                         ("0.0.0.0", 4420))


def record(name: str, hosts: tuple[str, ...] = (KVM1,), groups: tuple[str, ...] = (),
           serial: str = "1f0e6a4c-2b7d-49e0-8a11-3c5d7e9f0b21") -> DatastoreRecord:
    spec = DatastoreSpec(name, "tank", "nvme-tcp", 1 << 30, nvme=NvmeAccess(hosts, groups))
    return DatastoreRecord(spec, "ready", nqn=f"{PREFIX}:box.{name}", serial=serial)


def info(rec: DatastoreRecord) -> DatasetInfo:
    return DatasetInfo(rec.spec.dataset, "volume", {"volsize": str(rec.spec.size)})


# --- identity -------------------------------------------------------------------------------

def test_identity_is_derived_from_the_record_by_a_fixed_rule() -> None:
    """Pinned values: a change of rule would give every host a new device."""
    assert namespace_identity("1F0E6A4C-2B7D-49E0-8A11-3C5D7E9F0B21") == (
        "1f0e6a4c-2b7d-49e0-8a11-3c5d7e9f0b21", "1f0e6a4c2b7d49e08a113c5d7e9f0b21",
        "1f0e6a4c2b7d49e08a11")
    spec = subsystem_spec(record("ds1"), "/dev/zvol/tank/datastores/ds1", {})
    (ns,) = spec.namespaces
    assert (spec.nqn, spec.serial, spec.model) == (f"{PREFIX}:box.ds1",
                                                   "1f0e6a4c2b7d49e08a11", "ZDS")
    assert (ns.nsid, ns.uuid, ns.nguid, ns.ana_group, ns.enabled) == (
        1, "1f0e6a4c-2b7d-49e0-8a11-3c5d7e9f0b21", "1f0e6a4c2b7d49e08a113c5d7e9f0b21", 1, True)
    assert spec.hosts == (KVM1,) and not spec.allow_any_host


def test_new_identities_are_the_hosts_nqn_and_a_fresh_uuid(tmp_path: Path) -> None:
    t = transport(tmp_path)
    a, b = (t.new_identity(record(n).spec) for n in ("ds1", "ds1"))
    assert a.nqn == b.nqn == f"{PREFIX}:box.ds1" and a.iqn is None and a.export_id is None
    assert a.serial != b.serial and uuid.UUID(a.serial or "").version == 4


# --- plan/apply on the fake ------------------------------------------------------------------

def test_plan_and_apply_converge_and_repair_drift(tmp_path: Path) -> None:
    nvmet = FakeNvmet()
    t = transport(tmp_path, nvmet)
    t.store.put_group(InitiatorGroup("kvm", (ESX_IQN, KVM2)))
    rec = record("ds1", groups=("kvm",))
    want = t.desired([(rec, info(rec))])
    assert want[0].hosts == (KVM1, KVM2)  # its own and its group's NQNs, not the IQN
    actions = t.plan(want, t.read_live(view=False))
    assert [(a.kind, a.subject) for a in actions] == [
        ("apply_port", "nvme port 1"), ("apply_subsystem", rec.nqn)]
    assert t.apply(actions).ok
    assert t.plan(want, t.read_live(view=False)) == []
    assert nvmet.ana_state[1] == "optimized" and nvmet.ports[1].address == "0.0.0.0"
    assert t.serving(t.read_live(view=True), rec)
    # behind ZDS's back: the namespace and a host link go
    assert rec.nqn is not None
    sub = nvmet.subsystems[rec.nqn]
    sub.namespaces.clear()
    sub.hosts.discard(KVM2)
    (action,) = t.plan(want, t.read_live(view=False))
    assert action.kind == "apply_subsystem"
    assert "namespace 1 is missing" in action.reason and KVM2 in action.reason
    assert not t.serving(t.read_live(view=True), rec)
    assert t.apply([action]).ok and t.plan(want, t.read_live(view=False)) == []
    # a subsystem of ours nobody wants goes; a foreign one stays
    nvmet.apply_subsystem(replace_nqn(want[0], "nqn.2014-08.org.example:foreign"), [1])
    actions = t.plan([], t.read_live(view=False))
    assert [(a.kind, a.subject) for a in actions] == [("remove_subsystem", rec.nqn)]
    assert t.apply(actions).ok
    assert list(nvmet.subsystems) == ["nqn.2014-08.org.example:foreign"]


def replace_nqn(spec: Any, nqn: str) -> Any:
    from dataclasses import replace

    return replace(spec, nqn=nqn)


def test_with_the_target_down(tmp_path: Path) -> None:
    nvmet = FakeNvmet()
    nvmet.down = True
    t = transport(tmp_path, nvmet)
    rec = record("ds1")
    assert not t.read_live(view=True).up and not t.read_for([rec]).up
    assert t.unserved(t.desired([(rec, info(rec))])) == [
        (rec.nqn, f"apply_subsystem {rec.nqn}: the NVMe target is not available")]
    with pytest.raises(Exception, match="NVMe/TCP target is not available"):
        t.require()


def test_a_refused_host_cannot_connect_and_clients_are_listed(tmp_path: Path) -> None:
    nvmet = FakeNvmet()
    t = transport(tmp_path, nvmet)
    rec = record("ds1")
    assert t.apply(t.plan(t.desired([(rec, info(rec))]), t.read_live(view=False))).ok
    assert rec.nqn is not None
    with pytest.raises(NotFound, match="not allowed"):
        nvmet.connect(rec.nqn, KVM2)
    nvmet.connect(rec.nqn, KVM1)
    assert t.clients(t.read_one(rec, clients=True), rec, None) == [KVM1]
    assert t.clients(t.read_live(view=True), rec, None) == [KVM1]
    with pytest.raises(Conflict, match="fixed by the kernel"):  # seen: serial is fixed
        spec = t.desired([(rec, info(rec))])[0]
        from dataclasses import replace
        nvmet.apply_subsystem(replace(spec, serial="other"), [1])


# --- the kernel's words ----------------------------------------------------------------------

def test_nqn_rules() -> None:
    for good in (KVM1, KVM2, "nqn.2014-08.com.vmware:nvme:ESX-01"):
        assert check_nqn(good) == good
    for bad in ("nqn.2014-08.org.nvmexpress:uuid:zz", "nqn.2014-8.org.example:x",
                "nqn.2014-08.example:x", "nqn.2014-08.org.example", "nqn.2014-08.org.e:a b",
                "nqn.2014-08.org.nvmexpress.discovery", "nqn.2014-08.org.e:" + "x" * 220):
        with pytest.raises(InvalidInput, match=r"NVMe Qualified Name|discovery"):
            check_nqn(bad)


def test_connections_parse_the_kernel_log_and_proc_net_tcp() -> None:
    log = ("6,1502,83211430,-;nvmet: creating nvm controller 1 for subsystem "
           f"{PREFIX}:box.ds1 for NQN {KVM1}.\n"
           "6,1503,83211431,-;nvmet: creating discovery controller 2 for subsystem "
           f"nqn.2014-08.org.nvmexpress.discovery for NQN {KVM2}.\n"
           f"nvmet: creating controller 3 for subsystem {PREFIX}:box.ds2 for NQN {KVM2}.\n"
           "nvmet: creating controller 4 for subsystem nqn.2014-08.org.nvmexpress.discovery "
           f"for NQN {KVM1}.\n")
    assert parse_connects(log) == {f"{PREFIX}:box.ds1": (KVM1,), f"{PREFIX}:box.ds2": (KVM2,)}
    table = ("  sl  local_address rem_address   st tx_queue rx_queue\n"
             "   0: 00000000:1144 00000000:0000 0A 00000000:00000000\n"
             "   1: 0100007F:1144 0100007F:D2A6 01 00000000:00000000\n"
             "   2: 0100007F:0CBC 0100007F:D2A7 01 00000000:00000000\n")
    assert parse_tcp_peers(table, 4420) == ["127.0.0.1"]


# --- the engine and the API --------------------------------------------------------------

def put(client: TestClient, name: str, body: dict[str, Any], status: int = 201
        ) -> dict[str, Any]:
    r = client.put(f"{API}/{name}", json={"protocol": "nvme-tcp", "size": "1G", **body})
    assert r.status_code == status, r.text
    return dict(r.json())


def test_put_serves_a_namespace_with_its_identity(client: TestClient, rig: Rig) -> None:
    d = put(client, "ns1", {"nvme": {"hosts": [KVM1]}})
    nvme = d["nvme"]
    assert d["serving"] and d["iscsi"] is None and d["nfs"] is None
    assert nvme["nqn"] == "nqn.2026-11.io.zds:zds-test.ns1" and nvme["hosts"] == [KVM1]
    ns_uuid, nguid, serial = namespace_identity(nvme["uuid"])
    assert (nvme["nguid"], nvme["serial"]) == (nguid, serial)
    live = rig.hosts.nvmet.subsystems[nvme["nqn"]]
    assert live.serial == serial and live.namespaces[1].uuid == ns_uuid
    assert live.namespaces[1].nguid == nguid and live.hosts == {KVM1}
    ds = rig.zfs.get_dataset("tank/datastores/ns1")
    assert ds is not None and ds.type == "volume"
    assert ds.prop("zds:nqn") == nvme["nqn"] and ds.prop("zds:serial") == ns_uuid
    assert json.loads(ds.prop("zds:access"))["nvme_hosts"] == [KVM1]
    attach = d["attach"]
    assert any(f"nvme connect -t tcp -a testserver -s 4420 -n {nvme['nqn']}" in c
               for c in attach["linux"]), attach["linux"]
    assert any("/etc/nvme/discovery.conf" in c for c in attach["linux"])
    assert attach["esxi"] == [f"# {ESXI_STATEMENT}"] and ESXI_STATEMENT in attach["notes"]
    assert f"/dev/disk/by-id/nvme-uuid.{ns_uuid}" in attach["libvirt_pool_xml"]
    # the same body again changes nothing; the list shows it served
    changes = rig.hosts.nvmet.changes
    put(client, "ns1", {"nvme": {"hosts": [KVM1]}}, status=200)
    assert rig.hosts.nvmet.changes == changes
    assert [x["serving"] for x in client.get(API).json()] == [True]
    assert client.get("/api/v1/system/drift").json()["in_sync"]


@pytest.mark.parametrize("body, code, words", [
    ({"nvme": {"hosts": ["nqn.2014-08.example:x"]}}, "invalid_input", "NVMe Qualified Name"),
    ({"nvme": {"hosts": [ESX_IQN]}}, "invalid_input", "NVMe Qualified Name"),
    ({"nvme": {"dhchap": {"host_secret": "DHHC-1:00:abc:"}}}, "unsupported",
     "CONFIG_NVME_TARGET_AUTH"),
    ({"nvme": {"hosts": [KVM1], "allow_any_host": True}}, "invalid_input", "allow_any_host"),
    ({"iscsi": {"initiators": [ESX_IQN]}}, "invalid_input", "use nvme.hosts"),
    ({"nfs": {"clients": [{"match": "192.0.2.1"}]}}, "invalid_input", "nfs3/nfs41"),
    ({"overrides": {"recordsize": "64K"}}, "invalid_input", "use volblocksize"),
])
def test_refusals_change_nothing(client: TestClient, rig: Rig, body: dict[str, Any],
                                 code: str, words: str) -> None:
    r = client.put(f"{API}/bad", json={"protocol": "nvme-tcp", "size": "1G", **body})
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == code and words in error["message"], error
    assert rig.zfs.get_dataset("tank/datastores/bad") is None
    assert rig.hosts.nvmet.subsystems == {} and client.get(API).json() == []


def test_nvme_fields_on_an_iscsi_datastore_are_refused(client: TestClient) -> None:
    r = client.put(f"{API}/lun", json={"protocol": "iscsi", "size": "1G",
                                       "nvme": {"hosts": [KVM1]}})
    assert r.status_code == 422 and "nvme hosts" in r.json()["error"]["message"]


def test_one_group_names_a_hosts_iqn_and_nqn(client: TestClient, rig: Rig) -> None:
    r = client.put("/api/v1/initiator-groups/cluster",
                   json={"initiators": [ESX_IQN, KVM2]})
    assert r.status_code == 201, r.text
    r = client.put("/api/v1/initiator-groups/bad", json={"initiators": ["nqn.x"]})
    assert r.status_code == 422
    lun = put(client, "lun", {"protocol": "iscsi", "iscsi": {"initiator_groups": ["cluster"]}})
    ns = put(client, "ns", {"nvme": {"initiator_groups": ["cluster"]}})
    target = rig.lio.targets[lun["iscsi"]["iqn"]]
    assert set(target.acls) == {ESX_IQN}  # the iSCSI target takes the IQN only
    assert rig.hosts.nvmet.subsystems[ns["nvme"]["nqn"]].hosts == {KVM2}
    used = client.get("/api/v1/initiator-groups/cluster").json()["used_by"]
    assert sorted(used) == ["lun", "ns"]
    # a new member reaches the subsystem; the group cannot go while used
    r = client.put("/api/v1/initiator-groups/cluster", json={"initiators": [ESX_IQN, KVM1]})
    assert r.status_code == 200
    assert rig.hosts.nvmet.subsystems[ns["nvme"]["nqn"]].hosts == {KVM1}
    assert client.delete("/api/v1/initiator-groups/cluster").status_code == 409


def test_delete_is_refused_while_hosts_are_connected(client: TestClient, rig: Rig) -> None:
    d = put(client, "ns1", {"nvme": {"hosts": [KVM1]}})
    nqn = d["nvme"]["nqn"]
    rig.hosts.nvmet.connect(nqn, KVM1)
    assert client.get(f"{API}/ns1").json()["connected_clients"] == [KVM1]
    r = client.delete(f"{API}/ns1")
    assert r.status_code == 409 and "hosts connected" in r.json()["error"]["message"]
    r = client.delete(f"{API}/ns1", params={"force": "true", "wait": 10})
    assert r.status_code == 202 and r.json()["state"] == "succeeded", r.text
    assert nqn not in rig.hosts.nvmet.subsystems
    assert rig.zfs.get_dataset("tank/datastores/ns1") is None


def test_grow_tells_the_hosts_and_keeps_the_identity(client: TestClient, rig: Rig) -> None:
    d = put(client, "ns1", {"nvme": {"hosts": [KVM1]}})
    grown = put(client, "ns1", {"size": "2G", "nvme": {"hosts": [KVM1]}}, status=200)
    assert grown["size"] == 2 * GiB and grown["nvme"] == d["nvme"]
    assert rig.hosts.nvmet.subsystems[d["nvme"]["nqn"]].revalidated == 1


def test_a_clone_is_a_new_nvme_datastore(client: TestClient, rig: Rig) -> None:
    d = put(client, "ns1", {"nvme": {"hosts": [KVM1]}})
    assert client.post(f"{API}/ns1/snapshots", json={"name": "s1"}).status_code == 201
    r = client.post(f"{API}/ns1/snapshots/s1/clones", json={"name": "ns1-clone"})
    assert r.status_code == 201, r.text
    c = r.json()
    assert c["protocol"] == "nvme-tcp" and c["origin"] == "tank/datastores/ns1@s1"
    assert c["nvme"]["hosts"] == [KVM1] and c["serving"]
    assert c["nvme"]["nqn"] != d["nvme"]["nqn"] and c["nvme"]["uuid"] != d["nvme"]["uuid"]


def test_adoption_keeps_the_identity(rig: Rig) -> None:
    view, _ = rig.engine.datastores.put("ns1", DatastoreRequest(
        protocol="nvme-tcp", size="1G", nvme_hosts=[KVM1]))
    rec = view.record
    ds = rig.zfs.get_dataset("tank/datastores/ns1", ("zds:name", "zds:protocol", "zds:size",
                                                    "zds:access", "zds:nqn", "zds:serial",
                                                    "zds:managed", "zds:thin",
                                                    "zds:profile"))
    assert ds is not None
    adopted = record_from_properties("tank", ds)
    assert adopted is not None
    assert (adopted.nqn, adopted.serial, adopted.spec.nvme) == (rec.nqn, rec.serial,
                                                                rec.spec.nvme)


def test_unsupported_is_a_422_of_its_own() -> None:
    assert Unsupported.status == 422 and Unsupported.code == "unsupported"
    assert issubclass(Unsupported, InvalidInput)


def test_promote_keeps_the_identity_or_makes_a_new_one(tmp_path: Path) -> None:
    t = transport(tmp_path)
    source = record("ds1")
    identity, notes = t.promote_identity(source, True, [], "ds1")
    assert (identity.nqn, identity.serial) == (source.nqn, source.serial)
    assert "1f0e6a4c2b7d49e08a113c5d7e9f0b21" in notes[0]
    with pytest.raises(Conflict, match="in use here by ds1"):
        t.promote_identity(source, True, [source], "ds1-copy")
    fresh, notes = t.promote_identity(source, False, [source], "ds1-copy")
    assert fresh.nqn == f"{PREFIX}:box.ds1-copy" and fresh.serial != source.serial
    assert "new NGUID" in notes[0]
