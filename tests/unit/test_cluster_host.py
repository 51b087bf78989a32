"""The pacemaker adapter (appliance/host/cluster.py): its parsers on documents in the
format pacemaker 2.1.5 prints (api-version 2.25, as the HA bed's crm_mon,
cibadmin and stonith_admin print them), the commands it runs, and the contract checks
on its fake."""

from __future__ import annotations

import calendar
from pathlib import Path

import pytest

from appliance.errors import HostCommandFailed, NotFound
from appliance.host.cluster import (
    Pacemaker,
    parse_completed,
    parse_corosync_nodes,
    parse_crm_mon,
    parse_fence_history,
    parse_pool_groups,
)
from appliance.host.contract import cluster_checks
from appliance.host.fakes.cluster import FakeCluster
from appliance.host.run import RecordingRunner
from tests.e2e import habed

# Real-format documents (pacemaker 2.1.5, api-version 2.25), one per file
FIXTURES = Path(__file__).parent / "fixtures" / "pacemaker"

# crm_mon --one-shot --inactive --output-as=xml on ha-b after ha-a was killed, fenced,
# and the group moved (pacemaker 2.1.5, shortened only in attributes repeated per node)
CRM_MON = (FIXTURES / "crm_mon.xml").read_text()

# crm_mon when the stack is down on this node
CRM_MON_DOWN = (FIXTURES / "crm_mon_down.xml").read_text()

# cibadmin --query --scope resources
CIB_RESOURCES = (FIXTURES / "cib_resources.xml").read_text()

# stonith_admin --history '*' --verbose --output-as=xml
FENCE_HISTORY = (FIXTURES / "stonith_history.xml").read_text()


def test_crm_mon_nodes_resources_groups_and_failures() -> None:
    s = parse_crm_mon(CRM_MON)
    assert s.running and s.dc == "ha-b" and s.quorum and s.stonith_enabled
    assert [(n.name, n.online, n.is_dc) for n in s.nodes] == [("ha-a", False, False),
                                                              ("ha-b", True, True)]
    pool = s.resource("zds-hapool-pool")
    assert pool is not None and pool.agent == "ocf:zds:pool" and pool.node == "ha-b"
    assert pool.group == "zds-hapool" and pool.role == "Started"
    www = s.resource("ha-www")
    assert www is not None and www.role == "Stopped" and www.node == ""
    fence = s.resource("zds-fence")
    assert fence is not None and fence.group == "" and fence.node == "ha-b"
    assert s.failures == ("zds-hapool-pool_monitor_10000 on ha-b: error "
                          "(pool hapool is SUSPENDED)",)


def test_crm_mon_when_the_stack_does_not_answer() -> None:
    s = parse_crm_mon(CRM_MON_DOWN)
    assert not s.running and "Not connected" in s.error and "not available" in s.error
    with pytest.raises(HostCommandFailed):
        parse_crm_mon("crm_mon: invalid option")


def test_pool_groups_from_the_cib_with_their_addresses() -> None:
    groups = parse_pool_groups(CIB_RESOURCES)
    assert [(g.pool, g.resource, g.group, g.address) for g in groups] == [
        ("solo", "zds-solo", "zds-solo", ""),
        ("hapool", "zds-hapool-pool", "zds-hapool", "10.96.0.50")]


def test_fence_history_with_times() -> None:
    events = parse_fence_history(FENCE_HISTORY)
    assert [(e.action, e.target, e.status, e.delegate) for e in events] == [
        ("reboot", "ha-a", "success", "ha-b"), ("on", "ha-a", "success", "ha-a"),
        ("on", "ha-b", "failed", "ha-b")]
    assert events[0].completed == calendar.timegm((2026, 11, 26, 9, 11, 3, 0, 0, 0))
    assert events[2].completed is None
    assert parse_completed("yesterday") is None


def runner_with_pair() -> RecordingRunner:
    r = RecordingRunner()
    r.on(["crm_mon"], CRM_MON)
    r.on(["cibadmin"], CIB_RESOURCES)
    r.on(["stonith_admin"], FENCE_HISTORY)
    r.on(["crm_node", "--name"], "ha-b\n")
    return r


def test_state_reads_mon_cib_and_history_and_who_holds_what(tmp_path: Path) -> None:
    conf = tmp_path / "corosync.conf"
    conf.write_text("totem {}\n")
    r = runner_with_pair()
    host = Pacemaker(r, corosync_conf=conf)
    s = host.state()
    assert [c[0] for c in r.calls] == ["crm_mon", "cibadmin", "stonith_admin", "crm_node"]
    assert r.calls[0] == ("crm_mon", "--one-shot", "--inactive", "--output-as=xml")
    assert r.calls[2] == ("stonith_admin", "--history", "*", "--verbose", "--output-as=xml")
    assert s.local == "ha-b" and s.holder("hapool") == "ha-b" and s.holder("solo") == ""
    assert s.fencing[0].target == "ha-a"
    host.state()
    assert [c[0] for c in r.calls].count("crm_node") == 1  # the name is asked once


def test_not_in_a_pair_runs_nothing(tmp_path: Path) -> None:
    r = runner_with_pair()
    host = Pacemaker(r, corosync_conf=tmp_path / "missing.conf")
    assert not host.configured()
    s = host.state()
    assert not s.running and r.calls == []
    assert host.node_id() is None and r.calls == []


def test_corosync_nodes_from_the_ha_roles_own_template() -> None:
    conf = habed.corosync_conf()
    assert parse_corosync_nodes(conf) == {n.name: n.nodeid for n in habed.NODES}
    assert parse_corosync_nodes("# node { name: x nodeid: 9 }\nnodelist {\n node {\n"
                                "  name: a # the first\n  nodeid: 7\n }\n node {\n"
                                "  name: b\n }\n}\n") == {"a": 7}  # b has no nodeid


def test_node_id_is_the_local_nodes_in_corosync_conf_asked_once(tmp_path: Path) -> None:
    conf = tmp_path / "corosync.conf"
    conf.write_text(habed.corosync_conf())
    r = runner_with_pair()  # crm_node --name: ha-b
    host = Pacemaker(r, corosync_conf=conf)
    want = {n.name: n.nodeid for n in habed.NODES}["ha-b"]
    assert host.node_id() == want and host.node_id() == want
    assert r.calls == [("crm_node", "--name")]
    stranger = RecordingRunner()
    stranger.on(["crm_node", "--name"], "ha-z\n")  # not in the nodelist
    assert Pacemaker(stranger, corosync_conf=conf).node_id() is None


def test_stack_down_is_not_running(tmp_path: Path) -> None:
    conf = tmp_path / "corosync.conf"
    conf.write_text("totem {}\n")
    r = RecordingRunner()
    r.on(["crm_mon"], CRM_MON_DOWN, returncode=102)
    s = Pacemaker(r, corosync_conf=conf).state()
    assert not s.running and "Not connected" in s.error
    assert [c[0] for c in r.calls] == ["crm_mon"]


def test_move_and_clear_commands_and_their_errors(tmp_path: Path) -> None:
    r = RecordingRunner()
    host = Pacemaker(r, corosync_conf=tmp_path / "c.conf")
    host.move("zds-hapool", "ha-a")
    host.clear("zds-hapool")
    assert r.calls == [("crm_resource", "--move", "--resource", "zds-hapool", "--node", "ha-a"),
                       ("crm_resource", "--clear", "--resource", "zds-hapool")]
    r.on(["crm_resource", "--move"], stderr="crm_resource: Resource 'nope' not found\n",
         returncode=105)
    with pytest.raises(NotFound):
        host.move("nope", "ha-a")
    with pytest.raises(HostCommandFailed):
        host.move("--all", "ha-a")  # never reaches an argv
    with pytest.raises(HostCommandFailed):
        host.clear("a b")


def test_the_fake_passes_the_contract() -> None:
    fake = FakeCluster.pair("ha-a", "ha-b", {"hapool": "ha-a"})
    cluster_checks.check_cluster(fake, "hapool")
    assert fake.moves == []


def test_documents_captured_from_the_bed_after_a_takeover() -> None:
    """crm_mon, cibadmin and stonith_admin as the HA bed's survivor printed them after
    ha-b was killed (tests/e2e/test_ha_bed_e2e.py keeps them beside the serial logs)."""
    s = parse_crm_mon((FIXTURES / "bed-crm_mon.xml").read_text())
    assert s.running and s.dc == "ha-a" and s.quorum and s.stonith_enabled
    assert [(n.name, n.online) for n in s.nodes] == [("ha-a", True), ("ha-b", False)]
    assert [(r.id, r.role, r.node, r.group) for r in s.resources] == [
        ("zds-fence", "Started", "ha-a", ""),
        ("zds-hapool-pool", "Started", "ha-a", "zds-hapool"),
        ("zds-hapool-ip", "Started", "ha-a", "zds-hapool"),
        ("ha-www", "Started", "ha-a", "zds-hapool")]
    (g,) = parse_pool_groups((FIXTURES / "bed-cib_resources.xml").read_text())
    assert (g.pool, g.resource, g.group, g.address) == ("hapool", "zds-hapool-pool",
                                                        "zds-hapool", "10.96.0.50")
    events = parse_fence_history((FIXTURES / "bed-stonith_history.xml").read_text())
    assert [(e.action, e.target, e.status, e.delegate) for e in events] == [
        ("reboot", "ha-b", "success", "ha-a"), ("on", "ha-b", "success", "ha-b"),
        ("on", "ha-a", "success", "ha-a")]
    assert all(e.completed for e in events)
