"""Transports as plug-ins: the registry, each transport's plan/apply on its fake, and a
third transport, defined and registered in this file alone, that the engine serves
datastores with (create, serve, drift, health, attach, metrics, probes, snapshots,
delete) with no change anywhere else: what a new protocol costs."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from appliance.actions import Action, ReconcileReport
from appliance.attach import AttachInstructions, virsh_commands
from appliance.engine import Engine
from appliance.errors import Conflict, InvalidInput, Unavailable, ZdsError
from appliance.fake_hosts import FakeHosts, fake_hosts
from appliance.host.factory import HostAdapters, ProbeHosts
from appliance.host.fakes.ganesha import FakeGanesha
from appliance.host.fakes.lio import FakeLio
from appliance.host.fakes.zfs import FakeZfs, GiB
from appliance.host.ganesha_config import ClientRule, ExportSpec
from appliance.host.iostats import IoStatsHost
from appliance.host.lio import AclSpec, LunSpec, TargetSpec
from appliance.host.local import FakeLocalHost
from appliance.host.zfs import DatasetInfo
from appliance.metrics.counters import BlockReading, Source
from appliance.model import (
    DatastoreRecord,
    DatastoreSpec,
    InitiatorGroup,
    IscsiAccess,
    NfsClient,
)
from appliance.probes.service import ProbeRequest
from appliance.services.datastores import DatastoreRequest
from appliance.settings import Settings
from appliance.store import Store
from appliance.transports import registry
from appliance.transports.base import (
    Identity,
    Live,
    ProbeAttacher,
    ProbeAttachment,
    Transport,
)
from appliance.transports.iscsi import IscsiTransport
from appliance.transports.nfs import NfsTransport
from appliance.transports.nvme import NvmeTransport
from appliance.transports.registry import Transports
from appliance.transports.storage import VOLUME

PREFIX = "iqn.2026-11.io.zds"
H1, H2 = "iqn.2026-11.org.example:h1", "iqn.2026-11.org.example:h2"


# --- the registry -------------------------------------------------------------------------

def test_the_registry_lists_protocols_in_the_apis_order() -> None:
    assert registry.protocols() == ("nfs3", "nfs41", "iscsi", "nvme-tcp")
    assert registry.transport_type("nfs41") is NfsTransport
    assert registry.transport_type("iscsi") is IscsiTransport
    assert registry.transport_type("nvme-tcp") is NvmeTransport
    assert registry.transport_type("nvme-rdma") is None
    assert registry.probe_targets() == ("nfs", "iscsi", "nvme")
    assert [registry.probe_writes(p) for p in ("nfs3", "nfs41", "iscsi", "nvme-tcp", "")] == [
        "sync", "sync", "async", "async", "async"]
    assert NfsTransport.storage.kind == "filesystem" and IscsiTransport.storage.is_volume
    assert NvmeTransport.storage is IscsiTransport.storage


def test_the_api_enums_come_from_the_registry() -> None:
    from api.openapi import openapi_document

    schemas = openapi_document()["components"]["schemas"]
    assert schemas["DatastorePut"]["properties"]["protocol"]["enum"] == list(
        registry.protocols())
    runs = [s for name, s in schemas.items() if name.startswith("ProbeRun")]  # per profile
    assert runs and all(s["properties"]["target"]["enum"] == [
        "local", *registry.probe_targets()] for s in runs)


def test_dispatch_by_protocol(tmp_path: Path) -> None:
    hosts = fake_hosts()
    ts = Transports.build(Settings(), hosts.adapters(), Store(tmp_path / "db"))
    assert ts.of("nfs3") is ts.of("nfs41") and isinstance(ts.of("nfs3"), NfsTransport)
    assert isinstance(ts.of("iscsi"), IscsiTransport) and ts.get("smb") is None
    with pytest.raises(InvalidInput, match="one of nfs3, nfs41, iscsi, nvme-tcp"):
        ts.of("smb")
    recs = [nfs_record("a", 100), iscsi_record("b"), replace(nfs_record("c", 101), spec=replace(
        nfs_record("c", 101).spec, protocol="smb"))]
    assert [(t.name, [r.name for r in rs]) for t, rs in ts.grouped(recs)] == [
        ("nfs", ["a"]), ("iscsi", ["b"]), ("nvme", [])]  # an unknown one is left out
    with pytest.raises(ValueError, match="protocol nfs3"):
        Transports([*ts, NfsTransport(FakeGanesha(), Store(tmp_path / "db2"))])


# --- NFS on the fake ganesha --------------------------------------------------------------

def nfs_record(name: str, export_id: int, protocol: str = "nfs3") -> DatastoreRecord:
    spec = DatastoreSpec(name, "tank", protocol, 1 << 30,
                         nfs_clients=(NfsClient("192.0.2.0/24"),))
    return DatastoreRecord(spec, "ready", export_id=export_id)


def fs_info(rec: DatastoreRecord, mounted: bool = True) -> DatasetInfo:
    return DatasetInfo(rec.spec.dataset, "filesystem", {
        "mountpoint": f"/{rec.spec.dataset}", "mounted": "yes" if mounted else "no"})


def test_nfs_plan_and_apply_converge_on_the_fake(tmp_path: Path) -> None:
    ganesha = FakeGanesha()
    t = NfsTransport(ganesha, Store(tmp_path / "db"))
    probe = "/tank/zds-probes/a-p1"  # a probe's export: not a datastore's
    ganesha.add_export(ExportSpec(65500, probe, probe, (3,), (ClientRule(("*",), "RW"),)))
    a, b = nfs_record("a", 100), nfs_record("b", 101, "nfs41")
    want = t.desired([(a, fs_info(a)), (b, fs_info(b))])
    assert [e.protocols for e in want] == [(3,), (4,)]
    actions = t.plan(want, t.read_live(view=False))
    assert [(x.kind, x.subject) for x in actions] == [("add_export", "100"),
                                                      ("add_export", "101")]
    report = t.apply(actions)
    assert report.ok and len(report.applied) == 2
    assert t.plan(want, t.read_live(view=False)) == []
    live = t.read_live(view=True)
    assert t.serving(live, a) and t.serving(live, b) and t.clients(live, a, 600) == []
    ganesha.set_connected(100, ["192.0.2.9"])
    assert t.clients(t.read_one(a, clients=True), a, 600) == ["192.0.2.9"]
    # new clients are an update in place; an export of ours nobody wants goes; the
    # probe's stays (the admin's, below 100, are the planner's: test_reconcile_plan.py)
    a2 = replace(a, spec=replace(a.spec, nfs_clients=(NfsClient("198.51.100.7", "ro"),)))
    want = t.desired([(a2, fs_info(a2))])
    actions = t.plan(want, t.read_live(view=False))
    assert [(x.kind, x.subject) for x in actions] == [("update_export", "100"),
                                                      ("remove_export", "101")]
    assert t.apply(actions).ok
    assert sorted(e.export_id for e in ganesha.list_exports()) == [100, 65500]
    assert t.read_for([a2]).exports.keys() == {100}  # one DisplayExport, nothing else
    assert t.desired([(a, fs_info(a, mounted=False))]) == []  # nothing to export yet
    assert t.subjects(a) == ("100",)


def test_nfs_with_its_server_down(tmp_path: Path) -> None:
    ganesha = FakeGanesha(down=True)
    t = NfsTransport(ganesha, Store(tmp_path / "db"))
    a = nfs_record("a", 100)
    assert not t.read_live(view=False).up and not t.read_for([a]).up
    assert not t.read_one(a, clients=True).up
    assert t.unserved(t.desired([(a, fs_info(a))])) == [
        ("100", "add_export 100: nfs-ganesha is not running")]
    with pytest.raises(Unavailable, match=r"systemctl start nfs-ganesha\.service"):
        t.require()
    assert t.health_detail(False) == "nfs-ganesha not answering on DBus"
    report = t.apply([Action("add_export", "100", "not live", t.desired([(a, fs_info(a))])[0])])
    assert report.failures_for(100) and not report.applied


# --- iSCSI on the fake LIO ----------------------------------------------------------------

def iscsi_record(name: str, groups: tuple[str, ...] = ()) -> DatastoreRecord:
    spec = DatastoreSpec(name, "tank", "iscsi", 1 << 30,
                         iscsi=IscsiAccess((H1,), groups))
    return DatastoreRecord(spec, "ready", iqn=f"{PREFIX}:box.{name}",
                           serial=str(uuid.UUID(int=len(name))))


def vol_info(rec: DatastoreRecord) -> DatasetInfo:
    return DatasetInfo(rec.spec.dataset, "volume", {"volsize": str(rec.spec.size)})


def test_iscsi_plan_and_apply_converge_on_the_fake(tmp_path: Path) -> None:
    lio, store = FakeLio(), Store(tmp_path / "db")
    store.put_group(InitiatorGroup("esx", (H2,)))
    t = IscsiTransport(lio, FakeZfs.with_pool("tank", 10 * GiB), FakeLocalHost(name="box"),
                       store, PREFIX, ("0.0.0.0", 3260))
    ident = t.new_identity(iscsi_record("lun1").spec)
    assert ident.iqn == f"{PREFIX}:box.lun1" and ident.serial and ident.export_id is None
    foreign = TargetSpec("iqn.2003-01.org.linux-iscsi.other:x",
                         (LunSpec("userbs", "/dev/sdz", "s1"),), (AclSpec(H1),))
    lio.apply_target(foreign)
    rec = iscsi_record("lun1", ("esx",))
    want = t.desired([(rec, vol_info(rec))])
    assert [a.initiator for a in want[0].acls] == [H1, H2]  # its own and its group's
    actions = t.plan(want, t.read_live(view=False))
    assert [(x.kind, x.subject) for x in actions] == [("apply_target", rec.iqn)]
    assert t.apply(actions).ok
    assert t.plan(want, t.read_live(view=False)) == []
    assert t.serving(t.read_live(view=True), rec)  # from summaries, as the list reads
    assert rec.iqn is not None
    lio.login(rec.iqn, H2)
    assert t.clients(t.read_one(rec, clients=True), rec, None) == [H2]
    # withdrawn: the target goes with its backstore; the foreign target stays
    actions = t.plan([], t.read_live(view=False))
    assert [(x.kind, x.subject) for x in actions] == [("remove_target", rec.iqn)]
    assert t.apply(actions).ok
    assert [x.spec.iqn for x in lio.list_targets()] == [foreign.iqn]
    assert lio.list_backstores() == ["userbs"]
    assert t.subjects(rec) == (rec.iqn, "zds-lun1")


def test_iscsi_with_lio_down(tmp_path: Path) -> None:
    lio = FakeLio()
    lio.down = True
    t = IscsiTransport(lio, FakeZfs.with_pool("tank", 10 * GiB), FakeLocalHost(name="box"),
                       Store(tmp_path / "db"), PREFIX, ("0.0.0.0", 3260))
    rec = iscsi_record("lun1")
    assert not t.read_live(view=True).up and not t.read_for([rec]).up
    assert t.unserved(t.desired([(rec, vol_info(rec))])) == [
        (rec.iqn, f"apply_target {rec.iqn}: LIO is not available")]
    with pytest.raises(Unavailable, match="LIO"):
        t.require()


# --- a third transport, from this file alone ----------------------------------------------

@dataclass
class FakeBlockServer:
    """An in-memory block target: zvols served by name, and hosts connected to them."""

    up: bool = True
    served: dict[str, str] = field(default_factory=dict)  # datastore -> device
    connected: dict[str, list[str]] = field(default_factory=dict)
    calls: int = 0

    def serve(self, datastore: str, device: str) -> None:
        self.served[datastore] = device

    def read(self) -> dict[str, str]:
        self.calls += 1
        if not self.up:
            raise Unavailable("the block server is down")
        return dict(self.served)


@dataclass(frozen=True)
class Served:
    datastore: str
    device: str


@dataclass(frozen=True)
class BlockLive(Live):
    served: Mapping[str, str] = field(default_factory=dict)
    connected: Mapping[str, list[str]] = field(default_factory=dict)


class LoopbackBlock(ProbeAttacher):
    def attach(self, protocol: str, datastore: str, scratch_path: str, scratch_name: str,
               probe_id: str) -> ProbeAttachment:
        return ProbeAttachment(scratch_path, True, "127.0.0.1", "block",
                               {"scratch": scratch_name})

    def detach(self, attached: ProbeAttachment) -> None:
        return None

    def clean_leftovers(self, running: set[str]) -> list[str]:
        return []


class BlockTransport(Transport[Served, BlockLive]):
    """A made-up protocol: a zvol any host may use, on a server of its own."""

    name = "blk"
    protocols = ("blk-test",)
    storage = VOLUME
    component = "blk"
    daemon = "blk-server"
    access_fields = ()
    access_said = "nothing"
    clients_said = "hosts connected"
    probe_target = "blk"
    probe_writes = "async"

    def __init__(self, server: FakeBlockServer, hosts: HostAdapters) -> None:
        self.server = server
        self.zfs = hosts.zfs

    @classmethod
    def build(cls, settings: Settings, hosts: HostAdapters, store: Store) -> BlockTransport:
        return cls(FakeBlockServer(), hosts)

    def available(self) -> bool:
        return self.server.up

    def health_detail(self, ok: bool) -> str:
        return "serving" if ok else "down"

    def require(self) -> None:
        if not self.server.up:
            raise Unavailable("the block server is down; nothing was changed")

    def access_record(self, spec: DatastoreSpec) -> dict[str, Any]:
        return {}

    def new_identity(self, spec: DatastoreSpec) -> Identity:
        return Identity(serial=str(uuid.uuid4()))

    def check(self, spec: DatastoreSpec) -> None:
        return None

    def desired(self, datastores: Sequence[tuple[DatastoreRecord, DatasetInfo]]
                ) -> list[Served]:
        return [Served(rec.name, self.zfs.zvol_device(rec.spec.dataset))
                for rec, _info in datastores]

    def read_live(self, view: bool) -> BlockLive:
        try:
            return BlockLive(True, self.server.read(), dict(self.server.connected))
        except ZdsError:
            return BlockLive(False)

    def read_for(self, records: Sequence[DatastoreRecord]) -> BlockLive:
        full = self.read_live(view=False)
        names = {r.name for r in records}
        return BlockLive(full.up, {k: v for k, v in full.served.items() if k in names})

    def read_one(self, rec: DatastoreRecord, clients: bool) -> BlockLive:
        return self.read_live(view=True)

    def serving(self, live: BlockLive, rec: DatastoreRecord) -> bool:
        return rec.name in live.served

    def clients(self, live: BlockLive, rec: DatastoreRecord, window: float | None) -> list[str]:
        return list(live.connected.get(rec.name, []))

    def plan(self, desired: Sequence[Served], live: BlockLive) -> list[Action[Any]]:
        want = {s.datastore: s for s in desired}
        actions: list[Action[Any]] = [Action("serve", s.datastore, "not served", s)
                                      for s in desired if live.served.get(s.datastore)
                                      != s.device]
        return actions + [Action("unserve", name, "not desired") for name in live.served
                          if name not in want]

    def apply(self, actions: Sequence[Action[Any]]) -> ReconcileReport:
        report = ReconcileReport(planned=list(actions))
        for a in actions:
            if isinstance(a.payload, Served):
                report.run(a, partial(self.server.serve, a.subject, a.payload.device))
            else:
                report.run(a, partial(self.server.served.pop, a.subject))
        return report

    def unserved(self, desired: Sequence[Served]) -> list[tuple[str, str]]:
        return [(s.datastore, f"serve {s.datastore}: the block server is down")
                for s in desired]

    def subjects(self, rec: DatastoreRecord) -> tuple[str, ...]:
        return (rec.name,)

    def attach(self, rec: DatastoreRecord, server: str, port: int | None,
               path: str | None) -> AttachInstructions:
        return AttachInstructions([f"# blk {server}:{port or 9} {rec.name}"], "<pool/>",
                                  virsh_commands(rec.name), [])

    def vmware_target(self, rec: DatastoreRecord) -> dict[str, str]:
        return {"naa": f"blk.{rec.serial}"}

    def metrics_read(self, stats: IoStatsHost, records: Sequence[DatastoreRecord],
                     errors: list[str]) -> object:
        return None

    def metrics_sources(self, reading: object, rec: DatastoreRecord,
                        blocks: BlockReading) -> list[Source] | None:
        return [s for s in (blocks.zvol(rec.spec.dataset),) if s is not None]

    def probe_attacher(self, hosts: ProbeHosts) -> ProbeAttacher:
        return LoopbackBlock()

    def promote_identity(self, source: DatastoreRecord, keep: bool,
                         records: Sequence[DatastoreRecord], name: str
                         ) -> tuple[Identity, list[str]]:
        return Identity(serial=source.serial if keep else str(uuid.uuid4())), []


@dataclass
class ThirdRig:
    engine: Engine
    hosts: FakeHosts

    @property
    def server(self) -> FakeBlockServer:
        t = self.engine.ctx.transports.of("blk-test")
        assert isinstance(t, BlockTransport)
        return t.server


@pytest.fixture
def third(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ThirdRig]:
    """An engine with the block transport registered next to NFS and iSCSI."""
    monkeypatch.setattr(registry, "TRANSPORT_TYPES", (*registry.TRANSPORT_TYPES,
                                                      BlockTransport))
    hosts = fake_hosts("tank", 100 * GiB)
    engine = Engine.create(Settings().with_state_dir(tmp_path), hosts.adapters())
    engine.start()
    yield ThirdRig(engine, hosts)
    engine.close()


def test_a_third_transport_serves_datastores_without_changes_elsewhere(
        third: ThirdRig) -> None:
    engine, server = third.engine, third.server
    assert "blk-test" in registry.protocols() and "blk" in registry.probe_targets()
    view, created = engine.datastores.put("b1", DatastoreRequest(protocol="blk-test",
                                                                 size="1G"))
    assert created and view.serving and view.device and view.path is None
    ds = third.hosts.zfs.get_dataset("tank/datastores/b1")
    assert ds is not None and ds.type == "volume" and ds.prop("volblocksize") == "16384"
    assert ds.prop("zds:protocol") == "blk-test" and server.served == {
        "b1": engine.ctx.zfs.zvol_device("tank/datastores/b1")}
    # refusals come from the other transports' declarations, not from code about them
    with pytest.raises(InvalidInput, match="nfs clients are for nfs3/nfs41"):
        engine.datastores.validate_request("b2", DatastoreRequest(
            protocol="blk-test", size="1G", nfs_clients=[{"match": "192.0.2.1"}]))
    with pytest.raises(InvalidInput, match="recordsize is for nfs3/nfs41"):
        engine.datastores.validate_request("b2", DatastoreRequest(
            protocol="blk-test", size="1G", recordsize="16K"))
    # listed, drift in sync, health with its component, attach instructions
    assert [v.serving for v in engine.datastores.list()] == [True]
    assert engine.system.drift().in_sync
    engine.reconciler.check()
    health = engine.system.health()
    assert health.components["blk"].ok and health.status == "ok", health
    assert engine.datastores.attach("b1", "192.0.2.10").esxi == ["# blk 192.0.2.10:9 b1"]
    # served again after it was lost behind ZDS's back, reported while its server is down
    server.served.clear()
    assert [d.kind for d in engine.system.drift().items] == ["serve"]
    engine.watcher.repair()
    assert "b1" in server.served and engine.system.drift().in_sync
    server.up = False
    assert [(d.kind, d.subject) for d in engine.system.drift().items] == [
        ("unknown", "blk-server")]
    engine.reconciler.check()
    assert engine.system.health().status == "degraded"
    with pytest.raises(Unavailable, match="block server is down"):
        engine.datastores.put("b2", DatastoreRequest(protocol="blk-test", size="1G"))
    server.up = True
    # metrics: its zvol's counters; snapshots and clones as any zvol
    stats = third.hosts.iostats
    assert stats is not None
    stats.zvol("tank/datastores/b1", "zd0")
    engine.metrics.collect()
    stats.block("zd0", writes=10, write_bytes=40960)
    (sample,) = engine.metrics.collect().datastores
    assert (sample.protocol, sample.counts["write_ops"]) == ("blk-test", 10)
    engine.snapshots.create("b1", "s1")
    clone = engine.snapshots.clone("b1", "s1", "b1-clone")
    assert clone.record.spec.protocol == "blk-test" and "b1-clone" in server.served
    # a probe through it (its loopback attachment) and locally
    assert engine.probes.plan(ProbeRequest("vm-mixed-4k", "b1", "blk")).ref.is_volume
    with pytest.raises(Conflict, match="use target local or blk"):  # the datastore's state
        engine.probes.plan(ProbeRequest("vm-mixed-4k", "b1", "nfs"))
    # a delete is refused while a host uses it, and withdraws it when forced
    job = engine.datastores.delete("b1-clone")
    assert engine.jobs.wait(job.id, 10).state == "succeeded"
    server.connected["b1"] = ["host-a"]
    with pytest.raises(Conflict, match="b1 has hosts connected: host-a"):
        engine.datastores.delete("b1")
    job = engine.datastores.delete("b1", force=True)
    assert engine.jobs.wait(job.id, 10).state == "succeeded"
    assert server.served == {} and third.hosts.zfs.get_dataset("tank/datastores/b1") is None
