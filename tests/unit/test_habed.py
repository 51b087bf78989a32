"""The HA test bed's pure parts (tests/e2e/habed.py): what it writes into the guests
(networkd, LIO, corosync, the udev rule, the pacemaker configuration) and how it reads
sg_persist, crm_mon, the journal and the client's log. Samples are real outputs from the
bed (pacemaker 2.1.5, corosync 3.1.7, sg3-utils 1.46), shortened."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import subprocess
import time
from itertools import pairwise
from pathlib import Path

import pytest

from appliance.host.cluster import parse_corosync_nodes
from tests.e2e import habed as H

CRM_MON = """\
<pacemaker-result api-version="2.25" request="crm_mon -1 --output-as=xml">
  <pacemakerd sys_from="pacemakerd" state="running" last_updated="2026-11-26 07:48:09Z"/>
  <summary>
    <stack type="corosync"/>
    <current_dc present="true" version="2.1.5-a3f44794f94" name="ha-b" id="2"
                with_quorum="true" mixed_version="false"/>
  </summary>
  <nodes>
    <node name="ha-a" id="1" online="true" standby="false" unclean="false" is_dc="false"/>
    <node name="ha-b" id="2" online="true" standby="false" unclean="false" is_dc="true"/>
  </nodes>
  <resources>
    <resource id="fence-scsi" resource_agent="stonith:fence_scsi" role="Started"
              active="true" failed="false" nodes_running_on="1">
      <node name="ha-a" id="1" cached="true"/>
    </resource>
    <group id="ha-group" number_resources="3" managed="true" disabled="false">
      <resource id="ha-pool" resource_agent="ocf:heartbeat:ZFS" role="Started" active="true"
                failed="false" nodes_running_on="1">
        <node name="ha-b" id="2" cached="true"/>
      </resource>
      <resource id="ha-ip" resource_agent="ocf:heartbeat:IPaddr2" role="Started"
                active="true" failed="false" nodes_running_on="1">
        <node name="ha-b" id="2" cached="true"/>
      </resource>
      <resource id="ha-www" resource_agent="ocf:heartbeat:anything" role="Stopped"
                active="false" failed="false" nodes_running_on="0"/>
    </group>
  </resources>
  <failures>
    <failure op_key="ha-pool_start_0" node="ha-a" exitstatus="error" exitreason=""
             exitcode="1" call="27" status="complete" task="start"/>
  </failures>
  <status code="0" message="OK"/>
</pacemaker-result>
"""

CRM_MON_FORMING = """\
<pacemaker-result api-version="2.25" request="crm_mon -1 --output-as=xml">
  <summary><stack type="unknown"/><current_dc present="false"/></summary>
  <nodes>
    <node name="ha-a" id="1" online="false" standby="false" unclean="true"/>
    <node name="ha-b" id="2" online="false" standby="false" unclean="true"/>
  </nodes>
  <resources/>
</pacemaker-result>
"""

KEYS = """\
  PR generation=0x2, 2 registered reservation keys follow:
    0x27710001
    0x27710000
"""
NO_KEYS = "  PR generation=0x0, there are NO registered reservation keys\n"
RESERVATION = """\
  PR generation=0x2, Reservation follows:
    Key=0x27710000
    scope: LU_SCOPE,  type: Write Exclusive, registrants only
"""
NO_RESERVATION = "  PR generation=0x0, there is NO reservation held\n"

T = 1795679312.0  # the kill, on the survivor's clock


def journal_line(dt: float, ident: str, message: str) -> str:
    return json.dumps({"__REALTIME_TIMESTAMP": str(int((T + dt) * 1e6)),
                       "SYSLOG_IDENTIFIER": ident, "MESSAGE": message,
                       "__CURSOR": "s=x", "_BOOT_ID": "b"})


JOURNAL = "\n".join([
    journal_line(-20, "pacemaker-controld",
                 " notice: Result of start operation for ha-pool on ha-a: ok"),  # before
    journal_line(0.19, "corosync", "  [KNET  ] link: host: 2 link: 0 is down"),
    journal_line(1.05, "corosync", "  [TOTEM ] Token has not been received in 2301 ms"),
    journal_line(1.74, "corosync", "  [TOTEM ] A processor failed, forming new "
                 "configuration: token timed out (3000ms), waiting 3600ms for consensus."),
    journal_line(5.75, "corosync", "  [QUORUM] Members[1]: 1"),
    journal_line(10.0, "pacemaker-controld", " notice: Requesting fencing (reboot) of node "
                 "ha-b"),
    journal_line(10.1, "pacemaker-fenced", " notice: Remapping 'reboot' action targeting "
                 "ha-b using fence-scsi to 'off' because agent 'fence_scsi' does not support "
                 "reboot"),
    journal_line(31.3, "pacemaker-controld", " notice: Peer ha-b was terminated (reboot) by "
                 "ha-a on behalf of pacemaker-controld.1243@ha-a: OK"),
    journal_line(33.7, "pacemaker-controld", " notice: Requesting local execution of start "
                 "operation for ha-pool on ha-a"),
    journal_line(38.9, "pacemaker-controld", " notice: Result of start operation for ha-pool "
                 "on ha-a: error"),
    journal_line(41.0, "pacemaker-controld", " notice: Requesting local execution of start "
                 "operation for ha-pool on ha-a"),
    journal_line(96.0, "pacemaker-controld", " notice: Result of start operation for ha-pool "
                 "on ha-a: ok"),
    journal_line(98.0, "pacemaker-controld", " notice: Requesting local execution of start "
                 "operation for ha-ip on ha-a"),
    journal_line(109.0, "pacemaker-controld", " notice: Result of start operation for ha-ip "
                 "on ha-a: ok"),
    "not json: skipped",
])


def test_addresses_and_macs_follow_the_topology() -> None:
    a, b = H.NODES
    assert (a.address("storage"), b.address("cluster"), a.address("service")) == \
        ("10.98.0.1", "10.97.0.2", "10.96.0.1")
    assert H.mac("cluster", 2) == "52:54:00:5b:02:02"
    assert H.mac("service", 100) == "52:54:00:5b:03:64"
    # a NIC per segment of every guest, all different
    macs = [H.mac(s, n.host) for s in ("storage", "cluster", "service") for n in H.NODES]
    assert len(set(macs)) == len(macs)
    assert set(H.SEGMENTS["cluster"]) == {n.port for n in H.NODES}  # corosync: nodes only


def test_lun_names_are_the_wwns_lio_derives_from_fixed_serials() -> None:
    paths = [H.lun_path(i) for i in range(H.LUN_COUNT)]
    assert all(re.fullmatch(r"/dev/disk/by-id/wwn-0x6001405[0-9a-f]{25}", p) for p in paths)
    assert len(set(paths)) == H.LUN_COUNT
    assert paths == [H.lun_path(i) for i in range(H.LUN_COUNT)]  # the same every run
    # seen in the bed: LUN 0's serial gives this udev link
    assert paths[0] == "/dev/disk/by-id/wwn-0x6001405f834403990ef52caa697b6824"


def test_lio_config_maps_every_lun_to_both_nodes_on_the_storage_address_only() -> None:
    cfg = H.lio_config(2, ["iqn.x:ha-a", "iqn.x:ha-b"], "10.98.0.10")
    sos = cfg["storage_objects"]
    assert [so["dev"] for so in sos] == ["/dev/zvol/tank/habed/disk0",
                                         "/dev/zvol/tank/habed/disk1"]
    assert [so["wwn"] for so in sos] == [H.lun_serial(0), H.lun_serial(1)]
    (tpg,) = cfg["targets"][0]["tpgs"]
    assert tpg["portals"] == [{"ip_address": "10.98.0.10", "port": 3260}]  # never 0.0.0.0
    assert tpg["attributes"]["generate_node_acls"] == 0  # only the two nodes
    assert [acl["node_wwn"] for acl in tpg["node_acls"]] == ["iqn.x:ha-a", "iqn.x:ha-b"]
    for acl in tpg["node_acls"]:
        assert [m["tpg_lun"] for m in acl["mapped_luns"]] == [0, 1]
        assert not any(m["write_protect"] for m in acl["mapped_luns"])
    json.dumps(cfg)  # what the guest's rtslib reads


def test_corosync_conf_comes_from_the_role_template_with_two_node_quorum() -> None:
    conf = H.corosync_conf()
    assert "cluster_name: zdsha" in conf and "transport: knet" in conf
    assert f"token: {H.TOKEN_MS}" in conf and "crypto_cipher: aes256" in conf
    assert re.search(r"name: ha-a\s+nodeid: 1\s+ring0_addr: 10\.97\.0\.1\b", conf)
    assert re.search(r"name: ha-b\s+nodeid: 2\s+ring0_addr: 10\.97\.0\.2\b", conf)
    assert "two_node: 1" in conf and "wait_for_all: 1" in conf
    three = (*H.NODES, H.NodeSpec("ha-c", 3, "c"))
    assert "two_node" not in H.corosync_conf(three)  # three votes need no tie-breaker
    assert conf.count("{") == conf.count("}")


def test_corosync_conf_with_a_quorum_device_drops_two_node_and_keeps_wait_for_all() -> None:
    conf = H.corosync_conf(qdevice=H.QuorumDevice("10.98.0.10", tie_breaker="2"))
    assert "two_node:" not in conf  # corosync refuses two_node beside a device
    assert "wait_for_all: 1" in conf  # what the bed's running pair keeps (not reloadable)
    device = conf[conf.index("device {"):conf.index("logging {")]
    for line in ("model: net", "votes: 1", "host: 10.98.0.10", "port: 5403",
                 "algorithm: ffsplit", "tie_breaker: 2", "tls: on", "mode: sync"):
        assert line in device, (line, device)
    assert conf.count("{") == conf.count("}")
    # the appliance's own reader of the nodelist is not misled by the nested sections
    assert parse_corosync_nodes(conf) == {n.name: n.nodeid for n in H.NODES}
    two_node = H.corosync_conf()
    assert "device {" not in two_node and "two_node: 1" in two_node


def _heuristic(conf: str) -> list[str]:
    line = next(ln for ln in conf.splitlines() if ln.strip().startswith("exec_"))
    # corosync-qdevice splits the value as a Bourne shell would
    return shlex.split(line.split(":", 1)[1])


@pytest.mark.parametrize(("imported", "passes"), [
    ("tank\nhapool\n", True), ("hapool\n", True), ("tank\n", False), ("", False),
    ("hapool2\ntank\n", False), ("xhapool\n", False)])
def test_the_quorum_device_heuristic_passes_exactly_where_a_pairs_pool_is_imported(
        imported: str, passes: bool) -> None:
    argv = _heuristic(H.corosync_conf(qdevice=H.QuorumDevice("10.98.0.10")))
    assert argv[:2] == ["/bin/sh", "-c"] and len(argv) == 3, argv
    listing = "/sbin/zpool list -H -o name"
    assert argv[2].startswith(listing), argv
    script = argv[2].replace(listing, f"printf '{imported}'")
    assert (subprocess.run(["/bin/sh", "-c", script]).returncode == 0) is passes


def test_no_heuristic_without_pools_or_when_turned_off() -> None:
    conf = H._role_template(
        "corosync.conf.j2", ha__cluster_name="c", ha__token_ms=3000, ha__two_node=False,
        ha__nodes=[], ha__qdevice_host="q", ha__qdevice_port=5403,
        ha__qdevice_algorithm="ffsplit", ha__qdevice_tie_breaker="lowest",
        ha__qdevice_tls="on", ha__qdevice_heuristics=True, ha__pools=[])
    assert "device {" in conf and "heuristics" not in conf
    off = H.corosync_conf(qdevice=H.QuorumDevice("10.98.0.10", heuristics=False))
    assert "heuristics" not in off and "exec_" not in off


def test_device_votes_reads_the_qdevice_line_of_corosync_quorumtool() -> None:
    head = ("Quorate:          Yes\n\nMembership information\n----------------------\n"
            "    Nodeid      Votes    Qdevice Name\n"
            "         1          1    A,V,NMW 10.97.0.1 (local)\n"
            "         2          1    A,V,NMW 10.97.0.2\n")
    assert H.device_votes(head + "         0          1            Qdevice\n") == 1
    assert H.device_votes(head + "         0          0            Qdevice (votes 1)\n") == 0
    assert H.device_votes(head) is None
    two_node = ("    Nodeid      Votes Name\n         1          1 10.97.0.1 (local)\n")
    assert H.device_votes(two_node) is None


def test_qnetd_firewall_drop_in_opens_its_tcp_port_to_the_given_networks() -> None:
    nft = H.qnetd_nft(["10.98.0.0/24", "fd00::/64"])
    assert 'tcp dport 5403 ip saddr { 10.98.0.0/24 } accept comment "corosync-qnetd"' in nft
    assert 'tcp dport 5403 ip6 saddr { fd00::/64 } accept' in nft
    assert "ip6" not in H.qnetd_nft(["10.98.0.0/24"])


def test_udev_rule_takes_the_watch_off_exactly_the_shared_luns() -> None:
    rule = [line for line in H.shared_disks_rules().splitlines()
            if line and not line.startswith("#")]
    assert len(rule) == 1
    assert 'OPTIONS+="nowatch"' in rule[0] and 'ENV{DEVTYPE}=="disk"' in rule[0]
    wwns = re.search(r'ENV\{ID_WWN_WITH_EXTENSION\}=="([^"]+)"', rule[0])
    assert wwns is not None
    assert wwns.group(1).split("|") == [H.lun_path(i).split("wwn-")[1]
                                        for i in range(H.LUN_COUNT)]


def test_lun_timeout_rule_sets_the_command_timeout_of_exactly_the_shared_luns() -> None:
    rule = H.lun_timeout_rules().strip()
    assert "\n" not in rule and 'ENV{DEVTYPE}=="disk"' in rule
    wwns = re.search(r'ENV\{ID_WWN_WITH_EXTENSION\}=="([^"]+)"', rule)
    assert wwns is not None
    assert wwns.group(1).split("|") == [H.lun_path(i).split("wwn-")[1]
                                        for i in range(H.LUN_COUNT)]
    # the block device's DEVPATH, whose SCSI device holds the timeout
    run = re.search(r"RUN\+=\"/bin/sh -c '(.+)'\"$", rule)
    assert run is not None
    assert run.group(1) == f"echo {H.LUN_COMMAND_TIMEOUT_S} > /sys$DEVPATH/device/timeout"
    assert H.LUN_COMMAND_TIMEOUT_S > 30  # longer than the kernel's default


def test_crm_config_fences_with_scsi_keys_and_groups_zds_agent_ip_service() -> None:
    crm = H.crm_config()  # the ha role's template
    assert "stonith-enabled=true" in crm
    fence = crm[crm.index("primitive zds-fence"):crm.index("primitive ha-www")]
    assert "stonith:fence_scsi" in fence and "provides=unfencing" in fence
    assert 'pcmk_host_list="ha-a ha-b"' in fence and "key_value=hash" in fence
    devices = re.search(r'devices="([^"]+)"', fence)
    assert devices is not None
    assert devices.group(1).split(",") == [H.lun_path(i) for i in range(H.LUN_COUNT)]
    agent = crm[crm.index("primitive zds-hapool-pool"):crm.index("primitive zds-hapool-ip")]
    assert "ocf:zds:pool" in agent and "pool=hapool" in agent
    assert f"op monitor interval=20s timeout={H.POOL_MONITOR_TIMEOUT}" in agent, agent
    assert "op start timeout=300s" in agent  # the MMP activity check, under TCG
    assert f"ip={H.VIP} cidr_netmask=24" in crm
    assert crm.rstrip().endswith("group zds-hapool zds-hapool-pool zds-hapool-ip ha-www")
    assert not any(line.startswith("#") for line in crm.splitlines())  # CIB comments
    # the split brain's tie-breaker: fencing aimed at the node serving the pool waits,
    # and only the pool's agent carries the priority it weighs
    assert f"priority-fencing-delay={H.PRIORITY_FENCING_DELAY}" in crm
    assert "meta priority=10" in agent and crm.count(" priority=") == 1
    # crmsh continues a definition with a trailing backslash: none may be left dangling
    lines = crm.splitlines()
    assert all(not a.endswith("\\") or b.startswith("    ") for a, b in pairwise(lines))


def test_watchdog_runs_the_hardreboot_self_check_and_never_times_it_out() -> None:
    files = H.watchdog_files()
    conf = dict(line.split(" = ", 1) for line in files["/etc/watchdog.conf"].splitlines()
                if line and not line.startswith("#"))
    assert conf["test-directory"] == "/etc/watchdog.d"
    assert conf["interval"] == str(H.WATCHDOG_INTERVAL_S)
    # a check hanging on a path that is down must not count as a failure (a reboot)
    assert conf["test-timeout"] == "0"
    assert "watchdog-device" not in conf  # none given: the daemon runs the check only
    assert "run_watchdog=1" in files["/etc/default/watchdog"].splitlines()
    # fence_scsi_check reads /etc/sysconfig/stonith with this pattern; a comment with an
    # "=" would be read as an option too
    options = dict(re.findall(r"^\s*(\S*)\s*=\s*(\S*)\s*", files["/etc/sysconfig/stonith"],
                              re.MULTILINE))
    assert options == {"retry": "2", "retry-sleep": "5"}


def test_fence_scsi_key_is_cluster_hash_then_node_hash() -> None:
    def md5(s: str) -> str:
        return hashlib.md5(s.encode(), usedforsecurity=False).hexdigest()

    assert H.fence_scsi_key("zdsha", "ha-a") == (md5("zdsha")[:4] + md5("ha-a")[:4]).lstrip("0")
    assert H.fence_scsi_key("zdsha", "ha-a") != H.fence_scsi_key("zdsha", "ha-b")
    assert H.fence_scsi_key("zdsha", "ha-a").startswith("2771")  # as seen on the LUNs
    # sg_persist prints keys without leading zeros: so does the expected key
    cluster = next(c for c in (f"c{i}" for i in range(1000)) if md5(c).startswith("0"))
    assert not H.fence_scsi_key(cluster, "ha-a").startswith("0")


def test_sg_persist_keys_and_reservation() -> None:
    assert H.parse_keys(KEYS) == ["27710001", "27710000"]
    assert H.parse_keys(NO_KEYS) == []
    assert H.parse_reservation(RESERVATION) == ("27710000", "Write Exclusive, registrants only")
    assert H.parse_reservation(NO_RESERVATION) is None


def test_crm_mon_nodes_resources_and_failures() -> None:
    s = H.parse_crm_mon(CRM_MON)
    assert s.online == ("ha-a", "ha-b") and s.quorum and s.unclean == ()
    assert s.node_of("fence-scsi") == "ha-a"
    assert s.node_of("ha-pool") == s.node_of("ha-ip") == "ha-b"
    assert s.node_of("ha-www") == "" and s.resources["ha-www"] == ("Stopped", "")
    assert s.node_of("nothing") == ""
    assert s.failed == ("ha-pool_start_0 on ha-a: error",)
    forming = H.parse_crm_mon(CRM_MON_FORMING)
    assert forming.online == () and not forming.quorum and forming.unclean == ("ha-a", "ha-b")


def test_journal_json_lines() -> None:
    entries = H.parse_journal(JOURNAL)
    assert len(entries) == 14  # the line that is not JSON is skipped
    assert entries[1] == H.JournalEntry(T + 0.19, "corosync",
                                        "  [KNET  ] link: host: 2 link: 0 is down")
    raw = json.dumps({"__REALTIME_TIMESTAMP": "1000000", "MESSAGE": [104, 105, 255]})
    (e,) = H.parse_journal(raw)
    assert e.t == 1.0 and e.message.startswith("hi") and e.ident == ""


def test_failover_timeline_from_the_survivors_journal() -> None:
    tl = H.failover_timeline(H.parse_journal(JOURNAL), T, victim="ha-b", survivor="ha-a",
                             resources=("ha-pool", "ha-ip", "ha-www"))
    assert tl.knet_down == pytest.approx(0.19, abs=1e-3)
    assert tl.token_lost == pytest.approx(1.74, abs=1e-3)
    assert tl.membership == pytest.approx(5.75, abs=1e-3)
    assert tl.fence_requested == pytest.approx(10.0, abs=1e-3)
    assert tl.fenced == pytest.approx(31.3, abs=1e-3)
    # the retried start counts from its last request; the one before the kill is ignored
    assert tl.start_of("ha-pool") == pytest.approx(41.0, abs=1e-3)
    assert tl.started("ha-pool") == pytest.approx(96.0, abs=1e-3)
    assert tl.started("ha-ip") == pytest.approx(109.0, abs=1e-3)
    assert tl.starts["ha-www"] == (None, None) and not tl.complete()
    steps = tl.steps()
    assert steps["detect"] == 5.8 and steps["fence"] == 21.3 and steps["ha-pool"] == 55.0
    assert steps["ha-pool wait"] == 9.7 and steps["ha-ip"] == 11.0 and steps["total"] == 109.0
    assert "fenced 31.3" in tl.summary()
    done = H.failover_timeline(H.parse_journal(JOURNAL), T, "ha-b", "ha-a",
                               resources=("ha-pool", "ha-ip"))
    assert done.complete()
    with pytest.raises(AssertionError):
        done.started("ha-www")


def test_client_log_outage() -> None:
    log = H.parse_client_log("""\
100.0 ok
100.5 ok
101.0 fail
103.0 fail
120.0 ok
garbage
120.5 ok
""")
    assert (log.total, log.fails) == (6, 2)
    assert log.outage() == pytest.approx(19.5)  # last good read 100.5, next good 120.0
    assert H.parse_client_log("1.0 ok\n2.0 ok\n").outage() == 0.0


def test_http_get_is_one_bash_command_to_the_vip() -> None:
    cmd = H.http_get("/data")
    assert cmd.startswith("bash -c '") and f"/dev/tcp/{H.VIP}/{H.WWW_PORT}" in cmd
    assert "GET /data HTTP/1.0" in cmd


def test_fence_history() -> None:
    xml = """\
<pacemaker-result api-version="2.25" request="stonith_admin --history ha-a --verbose">
  <list name="fencing history" count="2">
    <fence_event action="reboot" target="ha-a" client="pacemaker-controld.1140"
                 origin="ha-b" status="success" delegate="ha-b"
                 completed="2026-11-26 08:52:22Z"/>
    <fence_event action="on" target="ha-a" client="pacemaker-fenced.1135" origin="ha-b"
                 status="success" delegate="ha-a" completed="2026-11-26 08:42:52Z"/>
  </list>
  <status code="0" message="OK"/>
</pacemaker-result>
"""
    assert H.parse_fence_history(xml) == [H.FenceEvent("reboot", "ha-a", "success", "ha-b"),
                                          H.FenceEvent("on", "ha-a", "success", "ha-a")]


def test_the_writers_acknowledge_only_records_that_are_in_place(tmp_path: Path) -> None:
    """The numbered-records writers, run by bash on two files here (the LUN a file of
    blocks): every record they acknowledge is read back at its place; a record changed
    afterwards (what a lost write looks like) is found."""
    nfs, lun = tmp_path / "records", tmp_path / "lun"
    lun.write_bytes(b"\0" * H.LUN_BLOCK)
    subprocess.run(["bash", "-c", H.writers_script(str(nfs), str(lun), str(tmp_path))],
                   check=True, timeout=30)
    time.sleep(1.5)
    subprocess.run(["bash", "-c", H.stop_writers_script(30, str(tmp_path))], check=True,
                   timeout=60)
    acked = {k: H.parse_acked((tmp_path / f"acked-{k}").read_text()) for k in ("nfs", "lun")}
    for kind in ("nfs", "lun"):
        numbers = [i for i, _ in acked[kind]]
        assert numbers[:3] == [1, 2, 3], (kind, numbers)  # both wrote, in order
        times = [t for _, t in acked[kind]]
        assert times == sorted(times) and times[0] > 1.7e9
    lun_data = lun.read_bytes()[H.RECORDS_AT_BLOCK * H.LUN_BLOCK:]
    lun_acked = [i for i, _ in acked["lun"]]
    assert H.lost_records(nfs.read_bytes(), H.RECORD, [i for i, _ in acked["nfs"]]) == []
    assert H.lost_records(lun_data, H.LUN_BLOCK, lun_acked) == []
    # one record overwritten, one beyond what was read back: both lost
    broken = bytearray(lun_data)
    broken[2 * H.LUN_BLOCK:2 * H.LUN_BLOCK + H.RECORD] = H.record(7)
    assert H.lost_records(bytes(broken), H.LUN_BLOCK, [*lun_acked, 10**6]) == [2, 10**6]
    assert lun.read_bytes()[:H.LUN_BLOCK] == b"\0" * H.LUN_BLOCK  # block 0 untouched


def test_parse_acked_skips_what_is_not_a_record_line() -> None:
    out = "1 1764139200.5\n2 1764139201.25\ndd: error writing\n\n3 x\n"
    assert H.parse_acked(out) == [(1, 1764139200.5), (2, 1764139201.25)]


QUORATE = """Quorum information
------------------
Date:             Sat Nov 28 11:18:40 2026
Quorum provider:  corosync_votequorum
Nodes:            2
Node ID:          1
Ring ID:          1.d
Quorate:          {}
"""


def test_pacemaker_waits_for_quorum_before_it_starts() -> None:
    """A fenced node that boots while the link is down must not start pacemaker, which
    would unfence it without quorum (its key back on the disks): the role's drop-in
    waits until corosync-quorumtool says Quorate: Yes (its own pattern, run through
    grep -E here against the tool's output)."""
    dropin = H._role_template("pacemaker-zds.conf.j2", ha__zds_api_unit="zds-api.service")
    pre = next(line for line in dropin.splitlines() if line.startswith("ExecStartPre="))
    assert "corosync-quorumtool -s" in pre and "TimeoutStartSec=infinity" in dropin
    pattern = re.search(r'grep -Eq "([^"]+)"', pre)
    assert pattern is not None

    def quorate(answer: str) -> bool:
        return subprocess.run(["grep", "-Eq", pattern.group(1)], check=False,
                              input=QUORATE.format(answer), text=True).returncode == 0

    assert quorate("Yes") and not quorate("No")


class _StubNode:
    def __init__(self) -> None:
        self.commands: list[str] = []

    def check(self, cmd: str, timeout: float = 0) -> str:
        self.commands.append(cmd)
        return ""


class _StubBed:
    """wait_status fails ``fails`` times (the group never started), then succeeds."""

    def __init__(self, fails: int) -> None:
        self.fails = fails
        self.nodes = {"ha-a": _StubNode()}

    def wait_status(self, on: str, ready: object, timeout: float = 0, what: str = "") -> None:
        if self.fails:
            self.fails -= 1
            raise AssertionError(f"cluster not {what}")


@pytest.mark.parametrize("fails", [0, 1, 2])
def test_the_first_start_is_retried_with_a_refresh_after_a_given_up_unfencing(
        fails: int) -> None:
    bed = _StubBed(fails)
    assert H.wait_first_serving(bed, "ha-a") == fails  # type: ignore[arg-type]
    assert bed.nodes["ha-a"].commands == ["crm_resource --refresh"] * fails


def test_the_first_start_gives_up_after_its_rounds() -> None:
    bed = _StubBed(3)
    with pytest.raises(AssertionError, match="serving"):
        H.wait_first_serving(bed, "ha-a")  # type: ignore[arg-type]
    assert bed.nodes["ha-a"].commands == ["crm_resource --refresh"] * 2
