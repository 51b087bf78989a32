"""Every mutating operation killed at every crash point, then repaired at start-up
(issue 25).

For each operation the harness first runs it whole, counting its crash points (every
host call, and every point between the steps of a host command the fakes model as
several: tests/unit/crashpoints.py); then, for N = 1 .. that count, it runs it again on
a fresh appliance killed at the Nth, starts a new engine on the same SQLite file and the
same fake host (as systemd restarts the API), and checks:

- drift is what it was before the operation or what it is after a whole run (empty, for
  all but a pool export or import), and a second reconcile has nothing to do;
- every datastore is served and shows ``ready`` (or is gone, with nothing left of it:
  dataset, export, target, backstore); health is ok, but for what an interrupted run
  reports with its repair action (a snapshot policy's run);
- the operation's own check (sizes, access, snapshots, pools as recorded), including
  that the client's retry completes.

A new step in an operation is a new crash point, covered without a new test. The
operation finishing before the Nth point ends the enumeration (asserted, so a count that
drifts between runs shows).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from appliance.engine import Engine
from appliance.fake_hosts import FakeHosts, fake_hosts
from appliance.host.fakes.replication import FakeNetwork
from appliance.host.fakes.zfs import GiB, MiB
from appliance.host.ganesha_config import ExportSpec
from appliance.jobs import Job
from appliance.model import ChapSettings, DatastoreRecord, DatastoreSpec
from appliance.policies.service import PolicyRequest
from appliance.properties import user_properties
from appliance.replication.views import PromoteRequest, ReplicationRequest, TargetRequest
from appliance.services.datastores import DatastoreRequest
from appliance.services.pools import PoolRequest, VdevRequest
from appliance.settings import Settings
from appliance.transports.iscsi import backstore_name, target_matches
from appliance.transports.nfs import export_spec
from tests.unit.conftest import SPARE_DISKS
from tests.unit.crashpoints import (
    Killer,
    Outcome,
    die,
    fresh_settings,
    killable,
    restart,
    run_killable,
)

ESX = "iqn.1998-01.com.vmware:esxi01-4f2a"
ESX2 = "iqn.1998-01.com.vmware:esxi02-77c1"
NFS = DatastoreRequest(protocol="nfs3", size="128M",
                       nfs_clients=[{"match": "192.0.2.0/24", "access": "rw"}])
LUN = DatastoreRequest(protocol="iscsi", size="128M", initiators=[ESX],
                       chap=ChapSettings("esxuser", "esxsecret12345"))
KVM = "nqn.2014-08.org.nvmexpress:uuid:5b1e0c2a-7d4f-4e8b-9a61-0c3f2d8e7b14"
KVM2 = "nqn.2026-11.org.example:kvm-02"
NVME = DatastoreRequest(protocol="nvme-tcp", size="128M", nvme_hosts=[KVM])
TARGET_HOST = "192.0.2.20"
REPLICAS = "backup/replicas/zds-a"


@dataclass
class Case:
    """One appliance an operation runs on: its engine (the restarted one, in checks), its
    fake host, and what the setup made for the operation."""

    engine: Engine
    hosts: FakeHosts
    settings: Settings
    extra: dict[str, Any] = field(default_factory=dict)
    closers: list[Callable[[], None]] = field(default_factory=list)


Step = Callable[[Case], object]


def _nothing(case: Case) -> None:
    return None


@dataclass(frozen=True)
class Operation:
    name: str
    run: Step  # the operation as the API makes it (a Job it returns is waited for)
    setup: Step = _nothing  # uninstrumented: what exists before
    check: Step = _nothing  # after the restart, besides the common checks
    # the health component that reports this run interrupted (with what repairs it)
    reports: str | None = None
    # crash points that must be among the enumerated ones, by the name issues gave them
    named: tuple[tuple[str, str], ...] = ()


def wait(case: Case, job: object) -> None:
    assert isinstance(job, Job)
    done = case.engine.jobs.wait(job.id, 10)
    assert done.state == "succeeded", done.error


def put(case: Case, name: str, req: DatastoreRequest) -> None:
    case.engine.datastores.put(name, req)


def served_or_gone(case: Case, name: str) -> DatastoreRecord | None:
    """The datastore is served and ready, or nothing of it is left."""
    rec = case.engine.store.get_datastore(name)
    if rec is not None:
        view = case.engine.datastores.get(name)
        assert (view.state, view.serving) == ("ready", True), (name, view.state,
                                                               view.problem, view.action)
        return rec
    hosts = case.hosts
    assert hosts.zfs.get_dataset(f"tank/datastores/{name}") is None, name
    assert backstore_name(name) not in hosts.lio.list_backstores(), name
    assert not [t for t in hosts.lio.list_targets() if t.spec.iqn.endswith(f".{name}")]
    assert not [n for n in hosts.nvmet.subsystems if n.endswith(f".{name}")]
    return None


def retry_put(case: Case, name: str, req: DatastoreRequest) -> DatastoreRecord:
    """The client saw no answer and sends its PUT again: it completes."""
    view, _created = case.engine.datastores.put(name, req)
    assert (view.state, view.serving) == ("ready", True), view
    return view.record


def zfs_matches(case: Case, rec: DatastoreRecord) -> None:
    """The dataset carries what the record says (size, zds:*)."""
    info = case.hosts.zfs.get_dataset(rec.spec.dataset)
    assert info is not None
    t = case.engine.ctx.transports.of(rec.spec.protocol)
    assert t.storage.size_of(info) == rec.spec.size
    for key, value in user_properties(t, rec).items():
        assert info.prop(key) == value, (key, info.prop(key), value)


def export_of(case: Case, rec: DatastoreRecord) -> ExportSpec:
    return export_spec(rec, f"/{rec.spec.dataset}")


def nfs_access_matches(case: Case, rec: DatastoreRecord) -> None:
    g = case.hosts.ganesha
    assert rec.export_id is not None
    assert g.rendered(rec.export_id) == g.render(export_of(case, rec))
    shown = g.get_export(rec.export_id)
    assert shown is not None and set(shown.clients) == {c.match for c in rec.spec.nfs_clients}


def nvme_access_matches(case: Case, rec: DatastoreRecord) -> None:
    assert rec.nqn is not None
    live = case.hosts.nvmet.get_subsystem(rec.nqn)
    assert live is not None
    assert set(live.spec.hosts) == set(rec.spec.nvme.hosts), (live.spec.hosts, rec.spec.nvme)


def lun_access_matches(case: Case, rec: DatastoreRecord) -> None:
    assert rec.iqn is not None
    live = case.hosts.lio.get_target(rec.iqn)
    assert live is not None and live.enabled
    t = case.engine.ctx.transports.of("iscsi")
    info = case.hosts.zfs.get_dataset(rec.spec.dataset)
    assert info is not None
    (want,) = t.desired([(rec, info)])
    assert target_matches(want, live.spec), (want, live.spec)
    assert live.authentication == (rec.spec.iscsi.chap is not None)


# --- the operations ------------------------------------------------------------------------

def create(name: str, req: DatastoreRequest) -> Operation:
    def check(case: Case) -> None:
        served_or_gone(case, name)
        rec = retry_put(case, name, req)
        zfs_matches(case, rec)

    # issue 25's crash06: killed inside `zfs create`, the dataset made and not mounted
    named = (("crash06", f"zfs create tank/datastores/{name}: created, not mounted yet"),) \
        if req.protocol.startswith("nfs") else ()
    return Operation(f"create-{req.protocol}", lambda c: put(c, name, req), check=check,
                     named=named)


def create_batch() -> Operation:
    """Three creates queued together (issue 24.1: one batch, one reconcile), killed at
    every point of the batch: each ends served or absent, and its PUT again completes."""
    reqs = [("ds", NFS), ("lun", LUN), ("ns", NVME)]

    def run(case: Case) -> None:
        datastores = case.engine.datastores
        with case.engine.ctx.lock.hold("queueing a batch"):  # so all three queue
            started = [datastores.put_start(name, req) for name, req in reqs]
        for f in started:
            assert isinstance(f, Future)
            f.result(timeout=10)  # a kill in the writer is raised here
        assert datastores.creates.batches == [3]

    def check(case: Case) -> None:
        for name, req in reqs:
            served_or_gone(case, name)
            zfs_matches(case, retry_put(case, name, req))

    return Operation("create-batch", run, check=check)


def grow(name: str, req: DatastoreRequest) -> Operation:
    bigger = DatastoreRequest(**{**req.__dict__, "size": "256M"})

    def check(case: Case) -> None:
        rec = served_or_gone(case, name)
        assert rec is not None and rec.spec.size in (128 * MiB, 256 * MiB)
        zfs_matches(case, rec)
        zfs_matches(case, retry_put(case, name, bigger))

    return Operation(f"grow-{req.protocol}", lambda c: put(c, name, bigger),
                     setup=lambda c: put(c, name, req), check=check)


def change_access(name: str, before: DatastoreRequest, after: DatastoreRequest,
                  matches: Callable[[Case, DatastoreRecord], None]) -> Operation:
    def check(case: Case) -> None:
        rec = served_or_gone(case, name)
        assert rec is not None
        matches(case, rec)
        zfs_matches(case, rec)
        matches(case, retry_put(case, name, after))

    return Operation(f"access-{before.protocol}", lambda c: put(c, name, after),
                     setup=lambda c: put(c, name, before), check=check)


def delete(name: str, req: DatastoreRequest) -> Operation:
    def check(case: Case) -> None:
        if served_or_gone(case, name) is not None:  # killed before it was recorded
            wait(case, case.engine.datastores.delete(name))
        assert served_or_gone(case, name) is None

    return Operation(f"delete-{req.protocol}", lambda c: c.engine.datastores.delete(name),
                     setup=lambda c: put(c, name, req), check=check)


def snapshot() -> Operation:
    def check(case: Case) -> None:
        served_or_gone(case, "ds")
        names = [s.name for s in case.engine.snapshots.list("ds")]
        assert names in ([], ["s1"])
        if not names:
            case.engine.snapshots.create("ds", "s1")

    return Operation("snapshot", lambda c: c.engine.snapshots.create("ds", "s1"),
                     setup=lambda c: put(c, "ds", NFS), check=check)


def rollback(name: str, req: DatastoreRequest) -> Operation:
    dataset = f"tank/datastores/{name}"

    def setup(case: Case) -> None:
        put(case, name, req)
        case.hosts.zfs.write(dataset, 4 * MiB, content="then")
        case.engine.snapshots.create(name, "s1")
        case.hosts.zfs.write(dataset, 8 * MiB, content="now")

    def check(case: Case) -> None:
        served_or_gone(case, name)
        assert case.hosts.zfs._ds(dataset).content in ("then", "now")
        case.engine.snapshots.rollback(name, "s1", force=True)
        assert case.hosts.zfs._ds(dataset).content == "then"
        served_or_gone(case, name)

    return Operation(f"rollback-{req.protocol}",
                     lambda c: c.engine.snapshots.rollback(name, "s1", force=True),
                     setup=setup, check=check)


def clone(name: str, req: DatastoreRequest) -> Operation:
    bigger = DatastoreRequest(**{**req.__dict__, "size": "256M"})  # a zvol clone grows

    def setup(case: Case) -> None:
        put(case, name, req)
        case.engine.snapshots.create(name, "s1")

    def check(case: Case) -> None:
        rec = served_or_gone(case, "c1")
        if rec is None:
            case.engine.snapshots.clone(name, "s1", "c1", bigger)
            rec = served_or_gone(case, "c1")
        assert rec is not None and rec.origin == f"tank/datastores/{name}@s1"
        zfs_matches(case, rec)

    return Operation(f"clone-{req.protocol}",
                     lambda c: c.engine.snapshots.clone(name, "s1", "c1", bigger),
                     setup=setup, check=check)


def group_change() -> Operation:
    def setup(case: Case) -> None:
        case.engine.groups.put("esx", [ESX])
        put(case, "lun", DatastoreRequest(protocol="iscsi", size="128M",
                                          initiator_groups=["esx"]))

    def check(case: Case) -> None:
        rec = served_or_gone(case, "lun")
        assert rec is not None
        lun_access_matches(case, rec)
        case.engine.groups.put("esx", [ESX, ESX2])
        lun_access_matches(case, rec)

    return Operation("initiator-group", lambda c: c.engine.groups.put("esx", [ESX, ESX2]),
                     setup=setup, check=check)


def policy_run() -> Operation:
    def setup(case: Case) -> None:
        for name in ("ds1", "ds2"):
            put(case, name, NFS)
        case.engine.policies.put("p", PolicyRequest(every="15m", retention={"frequent": 1},
                                                    all_datastores=True))
        wait(case, case.engine.policies.run_now("p"))  # the one the next run prunes

    def check(case: Case) -> None:
        for name in ("ds1", "ds2"):
            served_or_gone(case, name)
        mine = [sorted(s.name for s in case.engine.snapshots.list(n, policy="p"))
                for n in ("ds1", "ds2")]
        assert mine[0] == mine[1], mine  # one `zfs snapshot` for the pool: both or none
        assert 1 <= len(mine[0]) <= 2, mine
        wait(case, case.engine.policies.run_now("p"))  # the next run: all well again
        case.engine.reconciler.check()
        assert case.engine.system.health().components["snapshot_policies"].ok

    return Operation("policy-run", lambda c: c.engine.policies.run_now("p"), setup=setup,
                     check=check, reports="snapshot_policies")


def pool_export() -> Operation:
    def setup(case: Case) -> None:
        put(case, "ds", NFS)
        put(case, "lun", LUN)

    def check(case: Case) -> None:
        if "tank" in case.engine.pools.imported():
            for name in ("ds", "lun"):
                served_or_gone(case, name)
        else:
            assert case.hosts.ganesha.list_exports() == []
            assert case.hosts.lio.list_targets() == []
            wait(case, case.engine.pools.import_("tank"))
            for name in ("ds", "lun"):
                served_or_gone(case, name)

    return Operation("pool-export", lambda c: c.engine.pools.export("tank", force=True),
                     setup=setup, check=check)


def pool_import() -> Operation:
    def setup(case: Case) -> None:
        put(case, "ds", NFS)
        put(case, "lun", LUN)
        wait(case, case.engine.pools.export("tank", force=True))

    def check(case: Case) -> None:
        if "tank" not in case.engine.pools.imported():
            wait(case, case.engine.pools.import_("tank"))
        for name in ("ds", "lun"):
            served_or_gone(case, name)

    return Operation("pool-import", lambda c: c.engine.pools.import_("tank"), setup=setup,
                     check=check)


def disk_replace() -> Operation:
    spare = sorted(SPARE_DISKS)

    def setup(case: Case) -> None:
        wait(case, case.engine.pools.create(PoolRequest(
            name="p2", vdevs=[VdevRequest("mirror", spare[:2])])))
        put(case, "ds", DatastoreRequest(**{**NFS.__dict__, "pool": "p2"}))

    def check(case: Case) -> None:
        served_or_gone(case, "ds")
        view = case.engine.pools.get("p2")
        assert view.info.health == "ONLINE"
        disks = {d.name for g in view.status.config.children for d in g.children} \
            if view.status else set()
        assert disks in ({"virtio-spare1", "virtio-spare2"},
                         {"virtio-spare3", "virtio-spare2"}), disks

    return Operation("disk-replace", lambda c: c.engine.pools.disk(
        "p2", "replace", "virtio-spare1", new_disk=spare[2]), setup=setup, check=check)


def replica_on(case: Case, name: str, req: DatastoreRequest) -> None:
    """A replica of datastore ``name`` of another appliance, as a receive leaves it."""
    zfs = case.hosts.zfs
    t = case.engine.ctx.transports.of(req.protocol)
    spec = DatastoreSpec(name=name, pool="src", protocol=req.protocol, size=128 * MiB)
    source = DatastoreRecord(spec, "ready", export_id=100 if not t.storage.is_volume else None,
                             iqn=f"iqn.2026-11.io.zds:zds-a.{name}" if t.storage.is_volume
                             else None, serial="6a1e5c3d-0000-4000-8000-00000000aaaa"
                             if t.storage.is_volume else None)
    props = {**user_properties(t, source), "zds:replication": "r1",
             "zds:replica_of": f"zds-a/{name}", "readonly": "on"}
    dataset = f"tank/replicas/zds-a/{name}"
    if t.storage.is_volume:
        zfs.create_volume(dataset, 128 * MiB, True, props)
    else:
        zfs.create_filesystem(dataset, {**props, "canmount": "noauto",
                                        "zds:source_path": f"/tank/datastores/{name}"})
    zfs.write(dataset, 4 * MiB, content="replicated")
    zfs.snapshot(dataset, "r1-1")


def promote(req: DatastoreRequest) -> Operation:
    replica = "tank/replicas/zds-a/src1"

    def check(case: Case) -> None:
        rec = served_or_gone(case, "src1")
        if rec is None:
            info = case.hosts.zfs.get_dataset(replica, ("zds:replication",))
            assert info is not None and info.prop("zds:replication") == "r1", "replica lost"
            case.engine.replication.promote("r1", PromoteRequest())
            rec = served_or_gone(case, "src1")
        assert rec is not None
        assert case.hosts.zfs.get_dataset(replica) is None
        assert case.hosts.zfs._ds(rec.spec.dataset).content == "replicated"
        zfs_matches(case, rec)

    return Operation(f"promote-{req.protocol}",
                     lambda c: c.engine.replication.promote("r1", PromoteRequest()),
                     setup=lambda c: replica_on(c, "src1", req), check=check)


def replication_run(take_snapshot: bool = True) -> Operation:
    """The source's run: snapshot, send | receive (killed mid-stream, the target keeps a
    resumable partial), then the cursor (hold + bookmark) moved. Without
    ``take_snapshot`` it sends the snapshots taken by hand, and the next run has nothing
    new to send (its cursor is the one the killed run set, or half set)."""

    def by_hand(case: Case, name: str) -> None:
        if not take_snapshot:
            case.engine.snapshots.create("ds", name)

    def setup(case: Case) -> None:
        net = FakeNetwork()
        dst_hosts = fake_hosts("backup", 100 * GiB, hostname="zds-b")
        dst = Engine.create(fresh_settings(case.settings.state_dir.parent / "target"),
                            dst_hosts.adapters())
        dst.start(daemon_wait=0.0)
        case.closers.append(dst.close)
        assert case.hosts.ssh is not None and dst_hosts.ssh is not None
        net.attach("198.51.100.10", case.hosts.ssh)
        net.attach(TARGET_HOST, dst_hosts.ssh)
        dst.replication.authorize("zds-a", case.engine.replication.identity().public_key,
                                  REPLICAS)
        put(case, "ds", NFS)
        case.hosts.zfs.write("tank/datastores/ds", 3 * MiB, content="first")
        case.engine.replication.put("r1", ReplicationRequest(
            datastore="ds", target=TargetRequest(host=TARGET_HOST, dataset=f"{REPLICAS}/ds"),
            take_snapshot=take_snapshot))
        by_hand(case, "h1")
        wait(case, case.engine.replication.run_now("r1"))  # the full send
        case.hosts.zfs.write("tank/datastores/ds", 6 * MiB, content="second")
        by_hand(case, "h2")
        case.extra["target"] = dst_hosts

    def check(case: Case) -> None:
        served_or_gone(case, "ds")
        wait(case, case.engine.replication.run_now("r1"))  # the next run completes
        target: FakeHosts = case.extra["target"]
        assert target.zfs._ds(f"{REPLICAS}/ds").content == "second"
        assert case.engine.replication.check("r1").in_sync
        source = case.hosts.zfs
        held = [s for s in source.list_snapshots("tank/datastores/ds")
                if s.int_prop("userrefs") > 0]
        assert len(held) == 1, held  # the cursor: one hold, on the newest sent
        assert held[0].name == source.list_snapshots("tank/datastores/ds")[-1].name
        assert case.hosts.zfs_send is not None
        marks = case.hosts.zfs_send.bookmarks("tank/datastores/ds")
        assert len(marks) == 1, marks

    return Operation("replication-run" if take_snapshot else "replication-run-untaken",
                     lambda c: c.engine.replication.run_now("r1"),
                     setup=setup, check=check, reports="replication")


OPERATIONS = [
    create("ds", NFS),
    create("lun", LUN),
    grow("ds", NFS),
    grow("lun", LUN),
    change_access("ds", NFS, DatastoreRequest(
        protocol="nfs3", size="128M", nfs_clients=[{"match": "198.51.100.0/24",
                                                    "access": "ro"}]), nfs_access_matches),
    change_access("lun", DatastoreRequest(protocol="iscsi", size="128M", initiators=[ESX]),
                  DatastoreRequest(protocol="iscsi", size="128M", initiators=[ESX, ESX2],
                                   chap=ChapSettings("esxuser", "esxsecret12345",
                                                    "tgtuser", "tgtsecret12345")),
                  lun_access_matches),
    create("ns", NVME),
    create_batch(),
    grow("ns", NVME),
    change_access("ns", NVME, DatastoreRequest(protocol="nvme-tcp", size="128M",
                                               nvme_hosts=[KVM, KVM2]),
                  nvme_access_matches),
    delete("ds", NFS),
    delete("lun", LUN),
    delete("ns", NVME),
    snapshot(),
    rollback("ds", NFS),
    rollback("lun", LUN),
    clone("ds", NFS),
    clone("lun", LUN),
    group_change(),
    policy_run(),
    pool_export(),
    pool_import(),
    disk_replace(),
    promote(NFS),
    promote(DatastoreRequest(protocol="iscsi", size="128M")),
    promote(DatastoreRequest(protocol="nvme-tcp", size="128M")),
    replication_run(),
    replication_run(take_snapshot=False),
]


# --- the harness ---------------------------------------------------------------------------

DriftKey = frozenset[tuple[str, str, str]]


@dataclass
class Run:
    outcome: Outcome
    points: int  # crash points the run went through
    before: DriftKey  # drift before the operation
    after: DriftKey  # drift after the restart


def all_served(case: Case) -> None:
    """Every datastore of an imported pool served and ready; nothing live that no record
    wants (an export, a target, a backstore a crash left behind)."""
    records = case.engine.store.list_datastores()
    imported = case.engine.pools.imported()
    for rec in records:
        if rec.spec.pool in imported:
            served_or_gone(case, rec.name)
    ids = {r.export_id for r in records}
    assert {e.export_id for e in case.hosts.ganesha.list_exports()} <= ids
    targets = case.hosts.lio.list_targets()
    assert {t.spec.iqn for t in targets} <= {r.iqn for r in records}
    used = {lun.backstore for t in targets for lun in t.spec.luns}
    assert set(case.hosts.lio.list_backstores()) <= used


def drift_key(engine: Engine) -> DriftKey:
    return frozenset((i.kind, i.subject, i.reason) for i in engine.reconciler.drift())


def crash_at(op: Operation, n: int | None, base: Path) -> Run:
    """``op`` on a fresh appliance killed at crash point ``n`` (None: never), restarted,
    checked; returns how it went."""
    hosts = fake_hosts("tank", 100 * GiB, SPARE_DISKS)
    settings = fresh_settings(base / "appliance")
    killer = Killer()
    engine = Engine.create(settings, killable(hosts, killer))
    engine.start(daemon_wait=0.0)
    case = Case(engine, hosts, settings)
    try:
        op.setup(case)
        before = drift_key(engine)
        killer.arm(n if n is not None else 1 << 30)
        outcome = run_killable(engine, killer, lambda: op.run(case))
        assert outcome.error is None, f"{op.name} at {n}: {outcome.error!r}"
        die(engine)
        case.engine = restart(settings, hosts)
        try:
            after = drift_key(case.engine)
            again = case.engine.reconciler.full()
            assert not again.applied and not again.errors, (
                f"{op.name} killed at {outcome.killed}: a second reconcile still had "
                f"work: {again.applied} {again.errors}")
            case.engine.reconciler.check()
            health = case.engine.system.health()
            sick = {k: c.detail for k, c in health.components.items() if not c.ok}
            if op.reports is not None and set(sick) == {op.reports}:
                assert "stopped" in sick[op.reports], sick  # says so, and what to do
            else:
                assert not sick, f"{op.name} killed at {outcome.killed}: {sick}"
            all_served(case)
            op.check(case)
        finally:
            case.engine.close()
        return Run(outcome, killer.count, before, after)
    finally:
        for close in case.closers:
            close()


@pytest.mark.parametrize("op", OPERATIONS, ids=[op.name for op in OPERATIONS])
def test_every_crash_point_is_repaired(op: Operation, tmp_path: Path) -> None:
    whole = crash_at(op, None, tmp_path / "whole")
    assert whole.outcome.killed is None
    points = whole.points
    assert points > 0
    allowed = {whole.before, whole.after}
    killed_at: list[str] = []
    for n in itertools.count(1):
        run = crash_at(op, n, tmp_path / f"n{n}")
        if run.outcome.killed is None:
            assert n == points + 1, f"{op.name}: {points} points counted, done at {n}"
            break
        killed_at.append(run.outcome.killed)
        assert run.after in allowed, (
            f"{op.name} killed at {run.outcome.killed}: drift after the restart is "
            f"{sorted(run.after)}, expected one of {[sorted(a) for a in allowed]}")
    for label, point in op.named:
        assert any(k.endswith(f" {point}") for k in killed_at), (label, killed_at)
    print(f"{op.name}: {points} crash points")
