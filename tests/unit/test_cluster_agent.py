"""The HA pair on fakes: two engines on one FakeZfs (the shared disks), the resource
agent (api/agent.py) driving each through its own API, as pacemaker would.

What pacemaker guarantees (fencing before a take, one node at a time) is the fake
cluster's to play; what is checked here is ZDS's part: the OCF exit codes, that a stop
withdraws everything and exports the pool, that a start on the other node serves the
same export ids, IQNs and serials, the 503 on the node that does not hold the pool, and
that a single appliance behaves as before."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from functools import partialmethod
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api import agent
from api.app import create_app
from appliance.engine import Engine
from appliance.fake_hosts import FakeHosts, fake_hosts
from appliance.host.fakes.cluster import FakeCluster
from appliance.host.fakes.ganesha import FakeGanesha
from appliance.host.fakes.lio import FakeLio
from appliance.host.fakes.nvmet import FakeNvmet
from appliance.host.local import FakeLocalHost
from appliance.host.zfs import PoolLayout, VdevSpec
from appliance.jobs import JobContext
from appliance.services.cluster import JOB_NOTE_PREFIX, TAKEN_FACT
from appliance.settings import Settings
from appliance.transports import nfs
from appliance.transports.storage import ROOT_FS_PROPERTIES

ESX = "iqn.1998-01.com.vmware:esx01-1a2b3c4d"
POOL = "tank"


@dataclass
class Node:
    name: str
    engine: Engine
    hosts: FakeHosts
    client: TestClient
    token: str

    def put(self, name: str, body: dict[str, Any]) -> Any:
        return self.client.put(f"/api/v1/datastores/{name}", json=body)


class TestApi:
    """agent.Api over a node's TestClient (the agent's HTTP, without a socket)."""

    __test__ = False

    def __init__(self, node: Node) -> None:
        self.node = node
        self.calls: list[tuple[str, str]] = []

    def call(self, method: str, path: str, params: Mapping[str, Any] | None = None
             ) -> Any:
        self.calls.append((method, path))
        resp = self.node.client.request(method, "/api/v1" + path, params=dict(params or {}))
        return agent._answer(resp.status_code, resp.text)


def make_node(tmp: Path, name: str, hosts: FakeHosts, cluster: FakeCluster) -> Node:
    hosts.cluster = cluster
    engine = Engine.create(Settings().with_state_dir(tmp / name), hosts.adapters())
    engine.start()
    token = engine.tokens.create("cluster-agent", "admin")
    client = TestClient(create_app(engine, start=False))
    client.headers["Authorization"] = f"Bearer {token}"
    return Node(name, engine, hosts, client, token)


@dataclass
class Pair:
    a: Node
    b: Node
    cluster_a: FakeCluster
    cluster_b: FakeCluster

    def node(self, name: str) -> Node:
        return self.a if name == "ha-a" else self.b

    def hold(self, pool: str, node: str) -> None:
        """Both nodes' pacemaker say ``node`` runs ``pool``'s group."""
        for c in (self.cluster_a, self.cluster_b):
            c.holders[c.groups[pool].group] = node


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    """ha-a holds tank (imported there, as the bed's first start leaves it); ha-b shares
    its disks (the same FakeZfs) with LIO, ganesha and nvmet of its own."""
    hosts_a = fake_hosts(POOL, hostname="ha-a")
    zfs = hosts_a.zfs
    hosts_b = FakeHosts(zfs=zfs, lio=FakeLio.linked_to(zfs), ganesha=FakeGanesha(),
                        local=FakeLocalHost(name="ha-b"), nvmet=FakeNvmet.linked_to(zfs))
    ca = FakeCluster.pair("ha-a", "ha-b", {POOL: "ha-a"}, address="10.96.0.50")
    cb = FakeCluster.pair("ha-b", "ha-a", {POOL: "ha-a"}, address="10.96.0.50")
    a = make_node(tmp_path, "ha-a", hosts_a, ca)
    b = make_node(tmp_path, "ha-b", hosts_b, cb)
    for n in (a, b):
        n.engine.cluster.refresh()
    p = Pair(a, b, ca, cb)
    yield p
    for n in (p.a, p.b):
        n.client.close()
        n.engine.close()


def run_agent(node: Node, action: str, pool: str = POOL, **env: str) -> tuple[int, list[str]]:
    lines: list[str] = []
    token = node.engine.settings.state_dir / "cluster-token"
    token.write_text(node.token + "\n")
    full = {"OCF_RESKEY_pool": pool, "OCF_RESKEY_token_file": str(token),
            "OCF_RESKEY_CRM_meta_timeout": "60000", **env}
    rc = agent.run([action], full, make_api=lambda _u, _t, _s: TestApi(node),
                   out=lines.append)
    return rc, lines


def nfs_body(pool: str = POOL, size: str = "10G") -> dict[str, Any]:
    """A PUT body for an NFSv3 datastore the cluster segment may mount."""
    return {"protocol": "nfs3", "size": size, "pool": pool,
            "nfs": {"clients": [{"match": "10.96.0.0/24", "access": "rw"}]}}


def serve_two(node: Node) -> dict[str, dict[str, Any]]:
    """An NFS and an iSCSI datastore on the pool, as the node shows them."""
    r = node.put("nfs1", nfs_body())
    assert r.status_code in (200, 201), r.text
    r = node.put("lun1", {"protocol": "iscsi", "size": "10G", "pool": POOL,
                          "iscsi": {"initiators": [ESX]}})
    assert r.status_code in (200, 201), r.text
    return {n: node.client.get(f"/api/v1/datastores/{n}").json() for n in ("nfs1", "lun1")}


def identities(node: Node) -> dict[str, tuple[Any, ...]]:
    recs = {r.name: r for r in node.engine.store.list_datastores()}
    return {n: (r.export_id, r.iqn, r.serial) for n, r in recs.items()}


# ----------------------------------------------------------------------------- the agent


def test_stop_on_one_node_start_on_the_other_serves_the_same_identities(pair: Pair) -> None:
    a, b = pair.a, pair.b
    serve_two(a)
    before = identities(a)
    assert before["nfs1"][0] is not None and before["lun1"][1] and before["lun1"][2]
    assert [e.export_id for e in a.hosts.ganesha.list_exports()] == [before["nfs1"][0]]
    assert run_agent(a, "monitor")[0] == agent.OCF_SUCCESS
    assert run_agent(b, "monitor")[0] == agent.OCF_SUCCESS  # shared fake: see below

    rc, _ = run_agent(a, "stop")
    assert rc == agent.OCF_SUCCESS
    assert a.hosts.ganesha.list_exports() == [] and a.hosts.lio.targets == {}
    assert POOL not in {p.name for p in a.hosts.zfs.list_pools()}
    assert a.engine.store.list_datastores() == []  # the pool carries them
    assert run_agent(a, "monitor")[0] == agent.OCF_NOT_RUNNING
    assert run_agent(a, "stop")[0] == agent.OCF_SUCCESS  # stopping what is stopped

    pair.hold(POOL, "ha-b")
    rc, lines = run_agent(b, "start")
    assert rc == agent.OCF_SUCCESS, lines
    assert identities(b) == before
    assert [e.export_id for e in b.hosts.ganesha.list_exports()] == [before["nfs1"][0]]
    target = b.hosts.lio.targets[before["lun1"][1]]
    assert [b.hosts.lio.backstores[n].serial for n in target.luns.values()] == \
        [before["lun1"][2]]
    assert b.hosts.zfs.shared_imports == [POOL]  # settle, cachefile=none, forced
    assert run_agent(b, "monitor")[0] == agent.OCF_SUCCESS
    assert b.client.get("/api/v1/system/drift").json()["in_sync"] is True
    took = b.engine.cluster.last_takeover()
    assert took is not None and took.pool == POOL and "import" in took.seconds


def test_start_is_idempotent_and_start_where_the_pool_is_imported_serves_it(
        pair: Pair) -> None:
    serve_two(pair.a)
    rc, lines = run_agent(pair.a, "start")
    assert rc == agent.OCF_SUCCESS, lines
    assert pair.a.hosts.zfs.shared_imports == []  # already imported: not again
    assert run_agent(pair.a, "start")[0] == agent.OCF_SUCCESS
    assert len(pair.a.hosts.ganesha.list_exports()) == 1


def test_a_start_that_cannot_import_fails_with_a_reason(pair: Pair) -> None:
    rc, _ = run_agent(pair.a, "stop")
    assert rc == agent.OCF_SUCCESS
    rc, lines = run_agent(pair.b, "start", pool="nopool")
    assert rc == agent.OCF_ERR_GENERIC
    assert any(line.startswith("ocf-exit-reason:take nopool") for line in lines), lines
    assert run_agent(pair.b, "monitor", pool="nopool")[0] == agent.OCF_NOT_RUNNING


def test_ocf_codes_for_configuration_and_actions(pair: Pair, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert agent.run(["meta-data"], {}) == agent.OCF_SUCCESS
    meta = capsys.readouterr().out
    assert '<resource-agent name="pool"' in meta and 'name="pool" unique="1"' in meta
    assert run_agent(pair.a, "promote")[0] == agent.OCF_ERR_UNIMPLEMENTED
    assert run_agent(pair.a, "start", pool="")[0] == agent.OCF_ERR_CONFIGURED
    assert run_agent(pair.a, "start", pool="-rf")[0] == agent.OCF_ERR_CONFIGURED
    assert run_agent(pair.a, "validate-all")[0] == agent.OCF_SUCCESS
    rc, lines = run_agent(pair.a, "monitor",
                          OCF_RESKEY_token_file=str(tmp_path / "missing"))
    assert rc == agent.OCF_ERR_INSTALLED and "no API token" in lines[0]


def test_monitor_fails_when_the_pool_cannot_serve(pair: Pair) -> None:
    serve_two(pair.a)
    pair.a.engine.reconciler._update(daemons={"nfs": False, "iscsi": True})
    rc, lines = run_agent(pair.a, "monitor")
    assert rc == agent.OCF_ERR_GENERIC and "down" in lines[-1], lines


class Unreachable:
    def __init__(self) -> None:
        self.tries = 0

    def call(self, method: str, path: str, params: Mapping[str, Any] | None = None
             ) -> Any:
        self.tries += 1
        raise agent.ApiError("the ZDS API does not answer: connection refused")


def test_agent_retries_an_unreachable_api_until_its_timeout() -> None:
    now = [0.0]
    api = Unreachable()
    a = agent.Agent(POOL, api, timeout=20, out=lambda _l: None, clock=lambda: now[0],
                    sleep=lambda s: now.__setitem__(0, now[0] + s))
    assert a.monitor() == agent.OCF_ERR_GENERIC
    assert api.tries > 3 and now[0] <= 20


# ----------------------------------------------------------------------------- the 503


def test_a_change_on_the_node_without_the_pool_is_503_naming_the_active_node(
        pair: Pair) -> None:
    b = pair.b
    r = b.put("nfs9", nfs_body(size="1G"))
    assert r.status_code == 503, r.text
    err = r.json()["error"]
    assert err["code"] == "not_active"
    assert err["detail"]["active"] == "ha-a" and err["detail"]["node"] == "ha-b"
    assert "10.96.0.50" in err["message"] and "ha-a" in err["message"]
    assert b.engine.store.list_datastores() == [] and b.hosts.ganesha.list_exports() == []
    r = b.client.post(f"/api/v1/pools/{POOL}/scrub")
    assert r.status_code == 503 and r.json()["error"]["code"] == "not_active"
    # reads answer everywhere; the cluster's own calls work on either node
    assert b.client.get("/api/v1/datastores").status_code == 200
    assert b.client.get("/api/v1/cluster").status_code == 200
    # the node holding it takes changes
    assert pair.a.put("nfs9", nfs_body(size="1G")).status_code in (200, 201)


def test_without_pacemaker_answering_changes_are_refused(pair: Pair) -> None:
    pair.cluster_a.running = False
    pair.a.engine.cluster.refresh()
    r = pair.a.client.post(f"/api/v1/pools/{POOL}/scrub")
    assert r.status_code == 503 and r.json()["error"]["code"] == "not_active"


def test_a_pool_pacemaker_does_not_manage_is_local(pair: Pair) -> None:
    assert pair.b.engine.cluster.refusal("POST", "/api/v1/pools/local1/scrub") is None
    assert pair.b.engine.cluster.refusal("POST", f"/api/v1/pools/{POOL}/scrub") is not None


# ----------------------------------------------------------------------------- status


def test_cluster_status_health_role_and_last_takeover(pair: Pair) -> None:
    d = pair.a.client.get("/api/v1/cluster").json()
    assert d["configured"] and d["running"] and d["node"] == "ha-a"
    assert {n["name"]: n["pools"] for n in d["nodes"]} == {"ha-a": [POOL], "ha-b": []}
    assert d["pools"][0]["node"] == "ha-a" and d["pools"][0]["address"] == "10.96.0.50"
    assert d["stonith_enabled"] and d["quorum"]
    h = pair.a.client.get("/api/v1/system/health").json()
    assert h["cluster"] == {"node": "ha-a", "role": "active", "peer": "ha-b",
                            "peer_online": True, "pools": [POOL], "detail": ""}
    hb = pair.b.client.get("/api/v1/system/health").json()
    assert hb["cluster"]["role"] == "standby" and hb["cluster"]["peer"] == "ha-a"
    # the public health says nothing of it
    assert "cluster" not in TestClient(create_app(pair.a.engine, start=False)).get(
        "/api/v1/system/health").json()

    # ha-a dies, ha-b fences it and takes the pool
    assert run_agent(pair.a, "stop")[0] == agent.OCF_SUCCESS
    pair.cluster_b.kill("ha-a", fenced_by="ha-b")
    pair.cluster_b.fencing[0] = replace(pair.cluster_b.fencing[0],
                                        completed=time.time() - 5)
    assert run_agent(pair.b, "start")[0] == agent.OCF_SUCCESS
    d = pair.b.client.get("/api/v1/cluster").json()
    t = d["last_takeover"]
    assert t["pool"] == POOL and t["fenced"] == "ha-a" and t["seconds"]["total"] >= 0
    assert d["fencing"][0]["target"] == "ha-a" and d["fencing"][0]["status"] == "success"
    # seen from ha-a, a take of its own after it was fenced names no fenced node
    pair.cluster_a.fencing = list(pair.cluster_b.fencing)
    pair.cluster_a.nodes["ha-a"] = True
    assert run_agent(pair.b, "stop")[0] == agent.OCF_SUCCESS
    assert run_agent(pair.a, "start")[0] == agent.OCF_SUCCESS
    t = pair.a.client.get("/api/v1/cluster").json()["last_takeover"]
    assert t["pool"] == POOL and t["fenced"] == "", t


def test_a_single_appliance_is_as_before(tmp_path: Path) -> None:
    hosts = fake_hosts(POOL)
    engine = Engine.create(Settings().with_state_dir(tmp_path), hosts.adapters())
    engine.start()
    token = engine.tokens.create("t", "admin")
    with TestClient(create_app(engine, start=False)) as c:
        c.headers["Authorization"] = f"Bearer {token}"
        assert c.get("/api/v1/cluster").json()["configured"] is False
        assert "cluster" not in c.get("/api/v1/system/health").json() or \
            c.get("/api/v1/system/health").json()["cluster"] is None
        r = c.post("/api/v1/cluster/failover", json={})
        assert r.status_code == 409 and "not in an HA pair" in r.json()["error"]["message"]
        assert c.put("/api/v1/datastores/x", json={
            "protocol": "nfs3", "size": "1G",
            "nfs": {"clients": [{"match": "10.0.0.0/8", "access": "rw"}]}}).status_code \
            in (200, 201)
    assert hosts.cluster.calls == 0  # no pacemaker read at all
    engine.close()


# ----------------------------------------------------------------------------- failover


def test_planned_failover_moves_the_pool_and_clears_the_pin(pair: Pair) -> None:
    serve_two(pair.a)
    before = identities(pair.a)

    def pacemaker(group: str, src: str, dst: str) -> None:
        assert run_agent(pair.node(src), "stop")[0] == agent.OCF_SUCCESS
        pair.hold(POOL, dst)
        assert run_agent(pair.node(dst), "start")[0] == agent.OCF_SUCCESS

    pair.cluster_a.on_move = pacemaker
    r = pair.a.client.post("/api/v1/cluster/failover?wait=30", json={})
    assert r.status_code == 202, r.text
    job = r.json()
    assert job["state"] == "succeeded", job
    assert job["result"]["from"] == "ha-a" and job["result"]["to"] == "ha-b"
    assert pair.cluster_a.moves == [("zds-tank", "ha-b"), ("zds-tank", "")]
    assert identities(pair.b) == before
    # and the refusals checked first
    r = pair.a.client.post("/api/v1/cluster/failover", json={"node": "ha-c"})
    assert r.status_code == 404
    r = pair.a.client.post("/api/v1/cluster/failover", json={"pool": "other"})
    assert r.status_code == 404


def test_failover_to_an_offline_node_is_refused(pair: Pair) -> None:
    pair.cluster_a.nodes["ha-b"] = False
    r = pair.a.client.post("/api/v1/cluster/failover", json={})
    assert r.status_code == 409 and "offline" in r.json()["error"]["message"]
    assert pair.cluster_a.moves == []


def test_a_node_that_died_holding_the_pool_forgets_it_at_start(pair: Pair,
                                                             tmp_path: Path) -> None:
    serve_two(pair.a)
    assert run_agent(pair.a, "start")[0] == agent.OCF_SUCCESS  # taken as the cluster's
    assert POOL in (pair.a.engine.store.get_fact(TAKEN_FACT) or "")
    # ha-a is killed (no stop ran) and boots again with the same store; the pool is on
    # ha-b now, so ha-a's disks show it not imported (a FakeZfs of its own stands in)
    pair.a.client.close()
    pair.a.engine.close()
    hosts = fake_hosts(None, hostname="ha-a")
    again = make_node(tmp_path, "ha-a", hosts, pair.cluster_a)
    try:
        assert again.engine.store.list_datastores() == []
        assert POOL not in (again.engine.store.get_fact(TAKEN_FACT) or "")
        assert again.client.get("/api/v1/system/drift").json()["in_sync"] is True
    finally:
        again.client.close()
        pair.a = again  # the fixture closes it


def test_release_retries_an_export_the_nfs_server_still_holds(
        pair: Pair, monkeypatch: pytest.MonkeyPatch) -> None:
    from appliance.errors import Conflict
    from appliance.services import cluster as cluster_service

    serve_two(pair.a)
    real = pair.a.hosts.zfs.export_pool
    tries: list[str] = []

    def busy_twice(pool: str) -> None:
        tries.append(pool)
        if len(tries) <= 2:
            raise Conflict(f"cannot export '{pool}': pool is busy")
        real(pool)

    monkeypatch.setattr(pair.a.hosts.zfs, "export_pool", busy_twice)
    monkeypatch.setattr(cluster_service.ClusterService, "_export", partialmethod(
        cluster_service.ClusterService._export, pause=lambda _s: None))
    assert run_agent(pair.a, "stop")[0] == agent.OCF_SUCCESS
    assert tries == [POOL] * 3
    # one that stays busy fails the stop: pacemaker then fences the node
    pair.a.hosts.zfs.import_pool(POOL)
    monkeypatch.setattr(pair.a.hosts.zfs, "export_pool",
                        lambda pool: (_ for _ in ()).throw(Conflict("pool is busy")))
    rc, lines = run_agent(pair.a, "stop")
    assert rc == agent.OCF_ERR_GENERIC and "busy" in lines[-1], lines


def test_the_watcher_reads_pacemaker_at_most_every_watch_interval(pair: Pair) -> None:
    from appliance.services import cluster as cluster_service

    svc = pair.a.engine.cluster
    before = pair.cluster_a.calls
    svc.watch()
    assert pair.cluster_a.calls == before  # the fixture's read is fresh
    svc._state_at -= cluster_service.WATCH_EVERY
    svc.watch()
    assert pair.cluster_a.calls == before + 1
    pair.a.engine.watcher.check()  # the health tick calls it too
    assert pair.cluster_a.calls == before + 1


# ------------------------------------------------------------------- export ids in a pair


def test_each_node_hands_out_export_ids_from_its_own_block(pair: Pair) -> None:
    """Active/active: each node creates NFS datastores on the pools it holds. Ids from one
    counter per node collided (both started at 100), so a pool taken over was renumbered
    at adoption and its NFS clients saw ESTALE. Each node has a block by its nodeid."""
    a, b = pair.a, pair.b
    first_a, last_a = nfs.export_block(1)
    first_b, last_b = nfs.export_block(2)
    assert last_a < first_b  # disjoint, so no id is ever given twice across the pair
    serve_two(a)
    id_a = identities(a)["nfs1"][0]
    assert first_a <= id_a <= last_a

    assert run_agent(a, "stop")[0] == agent.OCF_SUCCESS
    pair.hold(POOL, "ha-b")
    b.engine.cluster.refresh()
    assert run_agent(b, "start")[0] == agent.OCF_SUCCESS
    assert identities(b)["nfs1"][0] == id_a  # adopted as it was
    r = b.put("nfs2", nfs_body())
    assert r.status_code == 201, r.text
    id_b = identities(b)["nfs2"][0]
    assert first_b <= id_b <= last_b  # ha-b's block, not the id after ha-a's

    assert run_agent(b, "stop")[0] == agent.OCF_SUCCESS
    pair.hold(POOL, "ha-a")
    a.engine.cluster.refresh()
    assert run_agent(a, "start")[0] == agent.OCF_SUCCESS
    assert {n: i[0] for n, i in identities(a).items()} == \
        {"nfs1": id_a, "lun1": None, "nfs2": id_b}  # both kept: no renumbering
    assert sorted(e.export_id for e in a.hosts.ganesha.list_exports()) == [id_a, id_b]
    r = a.put("nfs3", nfs_body())
    assert r.status_code == 201, r.text
    # ha-a counts on in its own block: ha-b's adopted id did not move its counter
    assert identities(a)["nfs3"][0] == id_a + 1


def test_a_node_whose_nodeid_is_unknown_creates_no_nfs_datastore(pair: Pair) -> None:
    pair.cluster_a.node_ids.clear()  # corosync.conf does not name this node
    r = pair.a.put("nfs1", nfs_body())
    assert r.status_code == 503, r.text
    assert "corosync nodeid" in r.json()["error"]["message"], r.text
    assert pair.a.engine.store.list_datastores() == []
    assert pair.a.hosts.ganesha.list_exports() == []
    assert pair.a.hosts.zfs.get_dataset(f"{POOL}/datastores/nfs1") is None


def test_active_active_a_pool_taken_over_keeps_its_export_ids(pair: Pair) -> None:
    """A pool on each node, an NFS datastore made on each by the node holding it; then
    ha-a stops (as when it dies) and ha-b takes tank too. Both datastores keep their
    Export_Ids: with one counter per node both had been 100, and adoption renumbered
    tank's export (ESTALE for its clients)."""
    a, b = pair.a, pair.b
    zfs = a.hosts.zfs
    zfs.add_disk("/dev/disk/by-id/shared-2", 100 << 30)
    zfs.create_pool("tank2", PoolLayout((VdevSpec("disk", ("/dev/disk/by-id/shared-2",)),)),
                    {}, ROOT_FS_PROPERTIES)
    zfs.export_pool("tank2")
    for c in (pair.cluster_a, pair.cluster_b):
        c.add_pool("tank2", "ha-b", "10.96.0.51")
    for n in (a, b):
        n.engine.cluster.refresh()
    assert run_agent(b, "start", pool="tank2")[0] == agent.OCF_SUCCESS
    assert a.put("on-a", nfs_body()).status_code == 201
    assert b.put("on-b", nfs_body("tank2")).status_code == 201
    id_a, id_b = identities(a)["on-a"][0], identities(b)["on-b"][0]
    assert id_a != id_b

    assert run_agent(a, "stop")[0] == agent.OCF_SUCCESS
    pair.hold(POOL, "ha-b")
    b.engine.cluster.refresh()
    rc, lines = run_agent(b, "start")
    assert rc == agent.OCF_SUCCESS, lines
    assert {n: i[0] for n, i in identities(b).items()} == {"on-a": id_a, "on-b": id_b}
    info = zfs.get_dataset("tank/datastores/on-a", ("zds:export_id",))
    assert info is not None
    assert info.prop("zds:export_id") == str(id_a)  # the pool's own record unchanged too
    assert sorted(e.export_id for e in b.hosts.ganesha.list_exports()) == sorted((id_a, id_b))


# ----------------------------------------------------------------------------- jobs


def held_job(node: Node | Engine, kind: str, target: str) -> tuple[str, threading.Event]:
    """A job on ``node`` that runs until the returned event is set (at most 30 s)."""
    engine = node if isinstance(node, Engine) else node.engine
    release = threading.Event()
    running = threading.Event()

    def body(_ctx: JobContext) -> dict[str, Any]:
        running.set()
        release.wait(30)
        return {"done": True}

    job = engine.jobs.submit(kind, target, body, long=True)
    assert running.wait(10)
    return job.id, release


def job_notes(zfs: Any, pool: str = POOL) -> dict[str, dict[str, Any]]:
    root = zfs.get_dataset(pool)
    assert root is not None
    return {k.removeprefix(JOB_NOTE_PREFIX): json.loads(v)
            for k, v in root.properties.items() if k.startswith(JOB_NOTE_PREFIX)}


def test_a_job_running_when_its_node_dies_reads_interrupted_on_the_survivor(
        pair: Pair) -> None:
    """ha-a runs a scrub of tank and a probe of one of its datastores when it dies (no
    stop runs); ha-b takes tank. Both jobs, under their ids, read failed/interrupted on
    ha-b, naming ha-a; the notes leave the pool. Without the journal ha-b answers 404."""
    a, b = pair.a, pair.b
    serve_two(a)
    done_id, done_release = held_job(a, "pool.scrub", POOL)
    done_release.set()
    assert a.engine.jobs.wait(done_id, 10).state == "succeeded"
    assert job_notes(a.hosts.zfs) == {}  # a job that finished leaves no note
    scrub, scrub_release = held_job(a, "pool.scrub", POOL)
    probe, probe_release = held_job(a, "probe", "nfs1")  # a datastore: its pool's
    try:
        notes = job_notes(a.hosts.zfs)
        assert set(notes) == {scrub, probe}
        assert notes[scrub]["node"] == "ha-a" and notes[scrub]["kind"] == "pool.scrub"
        assert notes[probe]["target"] == "nfs1"

        pair.hold(POOL, "ha-b")  # ha-a was killed: pacemaker fenced it, ha-b takes
        b.engine.cluster.refresh()
        rc, lines = run_agent(b, "start")
        assert rc == agent.OCF_SUCCESS, lines
        for job_id, kind in ((scrub, "pool.scrub"), (probe, "probe")):
            r = b.client.get(f"/api/v1/jobs/{job_id}")
            assert r.status_code == 200, r.text
            job = r.json()
            assert job["state"] == "failed" and job["kind"] == kind, job
            assert job["error"]["code"] == "interrupted", job
            assert "ha-a stopped" in job["error"]["message"], job
            assert job["error"]["detail"] == {"node": "ha-a", "pool": POOL,
                                              "taken_by": "ha-b"}
        assert b.client.get(f"/api/v1/jobs/{done_id}").status_code == 404
        assert job_notes(b.hosts.zfs) == {}
        take = b.engine.jobs.list(kind="cluster.take", limit=1)[0]
        assert take.result is not None
        assert sorted(take.result["interrupted_jobs"]) == sorted((scrub, probe))
        # a second take (pacemaker restarting the group) records nothing twice
        assert run_agent(b, "start")[0] == agent.OCF_SUCCESS
        assert b.engine.jobs.list(kind="cluster.take", limit=1)[0].result[  # type: ignore[index]
            "interrupted_jobs"] == []
    finally:
        scrub_release.set()
        probe_release.set()


def test_a_job_running_on_the_survivor_keeps_its_note_and_a_restart_settles_its_own(
        pair: Pair, tmp_path: Path) -> None:
    """The node holding the pool restarts its API while a job runs: its own store marks
    the job interrupted and the start-up clears the job's note (it is not the peer's to
    report). A job running on the node at a take keeps its note."""
    a = pair.a
    job_id, release = held_job(a, "pool.scrub", POOL)
    try:
        rc, lines = run_agent(a, "start")  # the pool is here already: serve it again
        assert rc == agent.OCF_SUCCESS, lines
        assert set(job_notes(a.hosts.zfs)) == {job_id}  # it runs here: not interrupted
        assert a.engine.jobs.get(job_id).state == "running"

        a.client.close()
        a.engine.close()  # a stopping API leaves the note: the pool may move next
        assert set(job_notes(a.hosts.zfs)) == {job_id}
        again = make_node(tmp_path, "ha-a", a.hosts, pair.cluster_a)
        pair.a = again  # the fixture closes it
        job = again.engine.jobs.get(job_id)
        assert job.state == "failed" and job.error is not None
        assert job.error["code"] == "interrupted"
        assert "API stopped" in job.error["message"]  # its own store's word
        assert job_notes(again.hosts.zfs) == {}
    finally:
        release.set()


def test_jobs_are_not_noted_on_a_single_appliance_nor_off_the_pairs_pools(
        pair: Pair, tmp_path: Path) -> None:
    hosts = fake_hosts(POOL)
    engine = Engine.create(Settings().with_state_dir(tmp_path / "single"), hosts.adapters())
    engine.start()
    try:
        job_id, release = held_job(engine, "pool.scrub", POOL)
        assert job_notes(hosts.zfs) == {}
        release.set()
        assert engine.jobs.wait(job_id, 10).state == "succeeded"
    finally:
        engine.close()
    # in the pair: a job about something that is not one of the pair's pools, and a
    # take (it moves the pool itself), are not noted
    other, release = held_job(pair.a, "replication.run", "nightly")
    try:
        assert job_notes(pair.a.hosts.zfs) == {}
    finally:
        release.set()
    assert pair.a.engine.jobs.wait(other, 10).state == "succeeded"


def test_a_note_that_cannot_be_cleared_does_not_fail_the_take(
        pair: Pair, monkeypatch: pytest.MonkeyPatch) -> None:
    """ZFS refusing the clear (a pool gone read-only, say) is logged; the take serves the
    pool and the job still reads interrupted (the note is cleared by a later take)."""
    from appliance.errors import HostCommandFailed

    job_id, release = held_job(pair.a, "pool.scrub", POOL)
    try:
        def refuse(*_args: Any) -> None:
            raise HostCommandFailed("cannot inherit: pool is read-only")

        monkeypatch.setattr(pair.b.hosts.zfs, "clear_root_user_properties", refuse)
        pair.hold(POOL, "ha-b")
        pair.b.engine.cluster.refresh()
        rc, lines = run_agent(pair.b, "start")
        assert rc == agent.OCF_SUCCESS, lines
        assert pair.b.engine.jobs.get(job_id).error["code"] == "interrupted"  # type: ignore[index]
        assert set(job_notes(pair.b.hosts.zfs)) == {job_id}
    finally:
        release.set()
