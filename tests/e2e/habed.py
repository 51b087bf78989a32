"""The HA test bed: two ZDS nodes in a Pacemaker/Corosync pair with fence_scsi, over
shared disks that a third guest serves with LIO (real SCSI-3 persistent reservations),
all booted from the one appliance image (docs/ha.md, "Test bed").

    host (127.0.0.1 only)                    QEMU switch (-machine none, one hub per segment)
    ---------------------------------------------------------------------------------------
    storage 10.98.0.0/24   jbod .10 (LIO target)  ha-a .1   ha-b .2      iSCSI, PR
    cluster 10.97.0.0/24                          ha-a .1   ha-b .2      corosync (knet)
    service 10.96.0.0/24   client .100 (the jbod) ha-a .1   ha-b .2      VIP .50 (IPaddr2)

    jbod:  LIO target TARGET_IQN, LUN i = zvol tank/habed/disk<i> (sparse), ACLs for the
           two nodes' initiators; also the client on the service segment.
    ha-a, ha-b: open-iscsi logged in (node.startup=automatic), the LUNs at
           /dev/disk/by-id/wwn-0x6001405...; corosync two_node + wait_for_all on the
           cluster segment; pacemaker with stonith:fence_scsi on the LUNs (unfencing
           registers each node's key) and the group POOL_RSC (ocf:heartbeat:ZFS, pool
           made with multihost=on) -> IP_RSC (IPaddr2, VIP) -> WWW_RSC (ocf:heartbeat:
           anything: python3 -m http.server on VIP:WWW_PORT serving the pool's /www).

Each guest keeps its QEMU user network (API, SSH, test agent) as every e2e guest does. The
switch's ports outlive the guests (a node killed and booted again joins the same
segments) and can be cut one by one (``bed.switch.set_link("cluster", "a", False)``).

The pure parts (renderers of the guests' files, parsers of sg_persist, crm_mon and the
journal) are unit-tested in tests/unit/test_habed.py; ``ha_bed()`` does the rest live.
"""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import gzip
import hashlib
import json
import os
import re
import secrets
import shlex
import shutil
import subprocess
import tempfile
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import jinja2

from appliance.model import naa_wwn
from images.paths import REPO
from images.vm import Switch, VmError, kvm_works, save_states
from tests.e2e.conftest import (
    SAVED_FILES,
    Boot,
    E2EAppliance,
    booted,
    restores_wanted,
    warm_state,
)
from tests.e2e.rest import api_client

CLUSTER = "zdsha"
POOL = "hapool"
TARGET_IQN = "iqn.2026-11.org.example.habed:jbod"
INITIATOR_PREFIX = "iqn.2026-11.org.example.habed"
JBOD_STORAGE_IP = "10.98.0.10"
CLIENT_IP = "10.96.0.100"
VIP = "10.96.0.50"
WWW_PORT = 8080
DATA = "habed-data-1"  # /POOL/www/data, what the client reads through the VIP
# the ha role's names (templates/cluster.crm.j2): zds-fence, zds-<pool>{,-pool,-ip}; the
# bed's small web server is a third member of the group
FENCE_RSC, POOL_RSC, IP_RSC, WWW_RSC, GROUP = "zds-fence", f"zds-{POOL}-pool", \
    f"zds-{POOL}-ip", "ha-www", f"zds-{POOL}"
GROUP_MEMBERS = (POOL_RSC, IP_RSC, WWW_RSC)
CLIENT_INITIATOR = "iqn.2026-11.org.example.habed:client"
SEGMENTS = {"storage": ("jbod", "a", "b"), "cluster": ("a", "b"), "service": ("client", "a", "b")}
SEGMENT_BYTE = {"storage": 1, "cluster": 2, "service": 3}
SUBNET = {"storage": "10.98.0", "cluster": "10.97.0", "service": "10.96.0"}
LUN_COUNT = 2
LUN_SIZE = "4G"
# Under TCG every step is slow: generous operation timeouts (the agents' own defaults are
# 20-60 s). The totem token is 5 s, not corosync's 3 s: on a loaded host the bed saw knet
# links flap and "Token has not been received in 2324 ms" (75% of 3 s) while both nodes
# were fine; a lost token there would fence a healthy node.
TOKEN_MS = 5000
MMP_FAIL_INTERVALS = 0  # see prepare_node()
# the nodes' iSCSI NOP-Out ping: every 10 s, 60 s to answer (the default 5 s drops the
# session when a loaded host stalls the JBOD guest, and the re-login takes ~45 s)
NOOP_INTERVAL_S, NOOP_TIMEOUT_S = 10, 60
# ... and when a stall outlasts even that (the 13:16 split-brain run: the serving node's
# session to the JBOD timed out while the fenced node rebooted, the SCSI layer's 30-s
# command timeout escalated through aborts and resets, and after open-iscsi's default
# 120-s replacement timeout the kernel offlined both LUNs under the imported pool), the
# nodes queue I/O across the re-login instead of failing it. The JBOD guest is the bed's
# stand-in for dual-ported SAS disks, which do not stall like this: production keeps
# the defaults.
LUN_COMMAND_TIMEOUT_S, LUN_REPLACEMENT_TIMEOUT_S = 300, 900
# The split brain's tie-breaker must outlast the winner's whole fence_scsi -o off: after
# a kill it takes ~6 s here, but in a split brain, with both nodes fencing at once, it
# took 23-24 s, and with 15 s the idle node's delayed attempt began before the serving
# node's had finished: each took the other's key off one LUN, neither could complete
# (safe, but the serving node lost a side of its mirror). It is one more term of every
# unplanned takeover of the serving node.
PRIORITY_FENCING_DELAY = "45s"
# fence_scsi's check is a Python start under TCG: every 10 s it took 38% of a vCPU on
# each node (335 s of CPU in 870 s), much of the bed's load; 30 s keeps a fenced node's
# self-reboot within the fence round's waits and costs a third.
WATCHDOG_INTERVAL_S = 30
# The pool agent's monitor: with a node rebooting beside it under TCG, one on the serving
# node took over 60 s (the role's default) and pacemaker restarted the group there.
POOL_MONITOR_TIMEOUT = "180s"
# The quorum device's arbiter (test 7): corosync-qnetd on the jbod guest, which both
# nodes reach on the storage segment, a path of its own beside the cluster link.
QNETD_PORT = 5403
QNETD_NSSDB, QDEVICE_NSSDB = "/etc/corosync/qnetd/nssdb", "/etc/corosync/qdevice/net/nssdb"
SELF_FENCE_CHECK = "fence_scsi_check_hardreboot"
ROLE_TEMPLATES = REPO / "ansible" / "roles" / "ha" / "templates"


@dataclass(frozen=True)
class NodeSpec:
    """One cluster node: its pacemaker name, corosync nodeid and switch port ("a", "b")."""

    name: str
    nodeid: int
    port: str

    @property
    def host(self) -> int:
        return self.nodeid

    @property
    def initiator(self) -> str:
        return f"{INITIATOR_PREFIX}:{self.name}"

    def address(self, segment: str) -> str:
        return f"{SUBNET[segment]}.{self.host}"


NODES = (NodeSpec("ha-a", 1, "a"), NodeSpec("ha-b", 2, "b"))


def mac(segment: str, host: int) -> str:
    """The MAC of a guest's NIC on a segment: 52:54:00:5b:<segment>:<host>."""
    return f"52:54:00:5b:{SEGMENT_BYTE[segment]:02x}:{host:02x}"


def lun_serial(i: int) -> str:
    """A fixed unit serial per LUN: the same WWN (and by-id name) in every run."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"zds-habed-lun{i}"))


def lun_path(i: int) -> str:
    """The LUN's stable name on the nodes: udev's wwn- link from LIO's NAA id."""
    return "/dev/disk/by-id/wwn-0x" + naa_wwn(lun_serial(i))[len("naa."):]


# ---------------------------------------------------------------------------- renderers


def networkd_unit(mac_address: str, cidr: str) -> str:
    """A static address on the NIC with this MAC (a lower number than the image's
    DHCP-everywhere 80-zds-dhcp.network, so it wins)."""
    return (f"[Match]\nMACAddress={mac_address}\n\n[Network]\nAddress={cidr}\n"
            "LinkLocalAddressing=no\nIPv6AcceptRA=no\n")


def lio_config(luns: int, initiators: list[str], portal_ip: str) -> dict[str, Any]:
    """The JBOD's LIO configuration in rtslib-fb's saveconfig format (RTSRoot.restore):
    block backstores on the zvols with fixed unit serials, one iSCSI target with every
    LUN mapped to every node's initiator, a portal on the storage address only (never
    0.0.0.0: discovery would then advertise the user network's 10.0.2.15)."""
    return {
        "storage_objects": [
            {"plugin": "block", "name": f"habed-disk{i}", "dev": f"/dev/zvol/tank/habed/disk{i}",
             "wwn": lun_serial(i), "readonly": False, "write_back": False,
             "attributes": {"emulate_tpu": 1}}
            for i in range(luns)],
        "targets": [{
            "fabric": "iscsi", "wwn": TARGET_IQN,
            "tpgs": [{
                "tag": 1, "enable": True,
                "attributes": {"authentication": 0, "generate_node_acls": 0,
                               "demo_mode_write_protect": 0},
                "parameters": {},
                "luns": [{"index": i, "storage_object": f"/backstores/block/habed-disk{i}"}
                         for i in range(luns)],
                "portals": [{"ip_address": portal_ip, "port": 3260}],
                "node_acls": [
                    {"node_wwn": iqn,
                     "mapped_luns": [{"index": i, "tpg_lun": i, "write_protect": False}
                                     for i in range(luns)]}
                    for iqn in initiators],
            }],
        }],
    }


def _role_template(name: str, **variables: Any) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(ROLE_TEMPLATES),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    # Ansible's `search` test (the firewall templates pick IPv4/IPv6 networks with it)
    env.tests["search"] = lambda value, pattern: re.search(pattern, str(value)) is not None
    return env.get_template(name).render(**variables)


@dataclass(frozen=True)
class QuorumDevice:
    """The third vote: corosync-qnetd at ``host`` (the role's ha__qdevice_* settings)."""

    host: str
    tie_breaker: str = "lowest"
    tls: str = "on"
    heuristics: bool = True
    port: int = QNETD_PORT


def corosync_conf(nodes: tuple[NodeSpec, ...] = NODES, token_ms: int = TOKEN_MS,
                  qdevice: QuorumDevice | None = None) -> str:
    """corosync.conf from the ha role's own template (one source for the image's pairs
    and this bed), the cluster segment as knet link 0; two_node, or ``qdevice``."""
    return _role_template(
        "corosync.conf.j2", ha__cluster_name=CLUSTER, ha__token_ms=token_ms,
        ha__two_node=qdevice is None and len(nodes) == 2,
        ha__nodes=[{"name": n.name, "nodeid": n.nodeid, "addrs": [n.address("cluster")]}
                   for n in nodes],
        ha__qdevice_host=qdevice.host if qdevice else "",
        ha__qdevice_port=qdevice.port if qdevice else QNETD_PORT,
        ha__qdevice_algorithm="ffsplit",
        ha__qdevice_tie_breaker=qdevice.tie_breaker if qdevice else "lowest",
        ha__qdevice_tls=qdevice.tls if qdevice else "on",
        ha__qdevice_heuristics=qdevice.heuristics if qdevice else False,
        ha__pools=[{"name": POOL}])


def qnetd_nft(networks: Iterable[str]) -> str:
    """The arbiter's firewall drop-in from the ha role's template (tasks/qnetd.yml)."""
    return _role_template("qnetd.nft.j2", ha__qnetd_firewall_networks=list(networks),
                          ha__qdevice_port=QNETD_PORT)


def shared_disks_rules(luns: int = LUN_COUNT) -> str:
    """The ha role's udev rule taking the watch off the shared LUNs (see its template)."""
    return _role_template("shared-disks.rules.j2", ha__shared_disk_wwns=[
        "0x" + naa_wwn(lun_serial(i))[len("naa."):] for i in range(luns)])


def lun_timeout_rules(luns: int = LUN_COUNT) -> str:
    """A udev rule giving the JBOD's LUNs LUN_COMMAND_TIMEOUT_S as their SCSI command
    timeout, at every login (after 60-persistent-storage.rules, which sets the WWN)."""
    wwns = "|".join("0x" + naa_wwn(lun_serial(i))[len("naa."):] for i in range(luns))
    return (f'ACTION=="add|change", SUBSYSTEM=="block", ENV{{DEVTYPE}}=="disk", '
            f'ENV{{ID_WWN_WITH_EXTENSION}}=="{wwns}", '
            f'RUN+="/bin/sh -c \'echo {LUN_COMMAND_TIMEOUT_S} > /sys$DEVPATH/device/timeout\'"\n')


def watchdog_files() -> dict[str, str]:
    """The ha role's self-fencing files (path: text): the watchdog daemon running
    fence_scsi_check_hardreboot every WATCHDOG_INTERVAL_S, and the check's retries."""
    role = {"ha__watchdog_interval": WATCHDOG_INTERVAL_S, "ha__watchdog_device": "",
            "ha__self_fence_retries": 2, "ha__self_fence_retry_sleep": 5}
    return {"/etc/watchdog.conf": _role_template("watchdog.conf.j2", **role),
            "/etc/default/watchdog": _role_template("watchdog.default.j2", **role),
            "/etc/sysconfig/stonith": _role_template("stonith.j2", **role)}


def crm_config(nodes: tuple[NodeSpec, ...] = NODES, luns: int = LUN_COUNT) -> str:
    """The pacemaker configuration from the ha role's own template (crmsh's language,
    ``crm configure load update``): fence_scsi on the LUNs (``provides=unfencing``), and
    the pool's group: the ZDS agent ocf:zds:pool (import, adopt, serve), the VIP, then
    the bed's small web server (``ha__crm_extra``). Timeouts are for TCG (an import
    waits out the MMP activity check)."""
    www = f"-m http.server {WWW_PORT} --bind {VIP} --directory /{POOL}/www"
    extra = (f"primitive {WWW_RSC} ocf:heartbeat:anything \\\n"
             f"    params binfile=/usr/bin/python3 cmdline_options=\"{www}\" \\\n"
             "    op start timeout=60s interval=0 \\\n"
             "    op monitor interval=10s timeout=60s\n")
    return _role_template(
        "cluster.crm.j2",
        ha__nodes=[{"name": n.name} for n in nodes],
        ha__fence_devices=[lun_path(i) for i in range(luns)],
        ha__fence_resource=FENCE_RSC, ha__stonith_timeout="180s", ha__stickiness=100,
        ha__priority_fencing_delay=PRIORITY_FENCING_DELAY, ha__pool_priority=10,
        ha__cluster_recheck_interval="2min",
        ha__pool_start_timeout="300s", ha__pool_stop_timeout="180s",
        ha__pool_monitor_interval="20s", ha__pool_monitor_timeout=POOL_MONITOR_TIMEOUT,
        ha__pools=[{"name": POOL, "address": VIP, "cidr_netmask": 24, "also": [WWW_RSC]}],
        ha__crm_extra=extra)


def fence_scsi_key(cluster: str, node: str) -> str:
    """The key fence_scsi registers for a node with key_value=hash: the first 4 hex
    digits of md5(cluster name), then the first 4 of md5(node name); leading zeros
    dropped, as sg_persist prints it (without 0x). (Its default, key_value=id, takes the
    node's position in corosync's nodelist, not its nodeid: keys then change when the
    nodelist does; upstream recommends hash.)"""
    def md5(s: str) -> str:
        return hashlib.md5(s.encode(), usedforsecurity=False).hexdigest()
    return f"{md5(cluster)[:4]}{md5(node)[:4]}".lstrip("0")


# ---------------------------------------------------------------------------- parsers


def parse_keys(out: str) -> list[str]:
    """Registered keys from ``sg_persist -n -i -k -d DEV``, without 0x, lower case.

    Sample:
      PR generation=0x2, 2 registered reservation keys follow:
        0x6d3c0001
        0x6d3c0002
    or "PR generation=0x0, there are NO registered reservation keys".
    """
    return [m.group(1).lower() for m in re.finditer(r"^\s+0x([0-9a-fA-F]+)\s*$", out, re.M)]


def parse_reservation(out: str) -> tuple[str, str] | None:
    """(holder key, type) from ``sg_persist -n -i -r -d DEV``; None when unreserved.

    Sample:
      PR generation=0x2, Reservation follows:
        Key=0x6d3c0001
        scope: LU_SCOPE,  type: Write Exclusive, registrants only
    or "PR generation=0x0, there is NO reservation held".
    """
    key = re.search(r"Key\s*=\s*0x([0-9a-fA-F]+)", out)
    kind = re.search(r"type:\s*(.+?)\s*$", out, re.M)
    if key is None:
        return None
    return key.group(1).lower(), kind.group(1) if kind else ""


@dataclass(frozen=True)
class ClusterStatus:
    """What ``crm_mon --output-as=xml`` says: nodes online, resources and where they run."""

    online: tuple[str, ...]
    unclean: tuple[str, ...]
    quorum: bool
    # resource id -> (role, node or "")
    resources: dict[str, tuple[str, str]]
    failed: tuple[str, ...]  # "rsc op on node: status"

    def node_of(self, rsc: str) -> str:
        role, node = self.resources.get(rsc, ("", ""))
        return node if role == "Started" else ""


def parse_crm_mon(xml: str) -> ClusterStatus:
    """``crm_mon -1 --output-as=xml`` (pacemaker 2.1).

    Sample (shortened):
      <pacemaker-result api-version="2.25" request="crm_mon -1 --output-as=xml">
        <summary><current_dc present="true" ... with_quorum="true"/>...</summary>
        <nodes>
          <node name="ha-a" id="1" online="true" standby="false" unclean="false" .../>
        </nodes>
        <resources>
          <resource id="fence-scsi" resource_agent="stonith:fence_scsi" role="Started"
                    active="true" failed="false" nodes_running_on="1">
            <node name="ha-a" id="1" cached="true"/>
          </resource>
          <group id="ha-group" number_resources="3" ...>
            <resource id="ha-pool" resource_agent="ocf:heartbeat:ZFS" role="Started" ...>
              <node name="ha-a" id="1" cached="true"/>
            </resource> ...
          </group>
        </resources>
        <failures><failure op_key="ha-pool_monitor_10000" node="ha-b" exitstatus="error"
                  exitreason="" exitcode="1" call="20" status="complete" .../></failures>
      </pacemaker-result>
    """
    root = ET.fromstring(xml)
    dc = root.find("./summary/current_dc")
    nodes = root.findall("./nodes/node")
    resources: dict[str, tuple[str, str]] = {}
    for r in root.iter("resource"):
        on = r.find("node")
        resources[r.get("id", "")] = (r.get("role", ""), on.get("name", "") if on is not None
                                      else "")
    failed = tuple(f"{f.get('op_key')} on {f.get('node')}: {f.get('exitstatus')}"
                   for f in root.findall("./failures/failure"))
    return ClusterStatus(
        online=tuple(n.get("name", "") for n in nodes if n.get("online") == "true"),
        unclean=tuple(n.get("name", "") for n in nodes if n.get("unclean") == "true"),
        quorum=dc is not None and dc.get("with_quorum") == "true",
        resources=resources, failed=failed)


@dataclass(frozen=True)
class ClientLog:
    """The client loop's reads: (unix time on the client's clock, ok)."""

    reads: tuple[tuple[float, bool], ...]

    @property
    def total(self) -> int:
        return len(self.reads)

    @property
    def fails(self) -> int:
        return sum(1 for _, good in self.reads if not good)

    def outage(self) -> float:
        """Seconds from the last good read before the first failure to the first good read
        after the last failure (0 when no read failed)."""
        bad = [i for i, (_, good) in enumerate(self.reads) if not good]
        if not bad:
            return 0.0
        before = self.reads[bad[0] - 1][0] if bad[0] > 0 else self.reads[0][0]
        after = self.reads[bad[-1] + 1][0] if bad[-1] + 1 < len(self.reads) \
            else self.reads[-1][0]
        return after - before


def parse_client_log(out: str) -> ClientLog:
    """Lines "1764139200.123456789 ok" or "... fail" (anything else is skipped)."""
    reads = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] in ("ok", "fail"):
            with contextlib.suppress(ValueError):
                reads.append((float(parts[0]), parts[1] == "ok"))
    return ClientLog(tuple(reads))


# The numbered-records writers (HaBed.start_writers): record i is "rec-%011d\n" (16
# bytes) at byte 16*i of the NFS file, and at the start of block RECORDS_AT_BLOCK + i of
# the LUN (4096-byte blocks, the rest zeros).
RECORD = 16
RECORDS_AT_BLOCK = 1024
LUN_BLOCK = 4096


def record(i: int) -> bytes:
    return b"rec-%011d\n" % i


def parse_acked(out: str) -> list[tuple[int, float]]:
    """A writer's log, lines "<record number> <unix time on the client's clock>": each
    line written once that record's write returned (fsync, or O_DIRECT|O_DSYNC)."""
    acked = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2:
            with contextlib.suppress(ValueError):
                acked.append((int(parts[0]), float(parts[1])))
    return acked


def lost_records(data: bytes, stride: int, acked: Iterable[int], first: int = 0) -> list[int]:
    """The acknowledged records that ``data`` (read back from the file or LUN, starting at
    record ``first``) does not hold at their place: lost, or not what was written."""
    lost = []
    for i in acked:
        at = (i - first) * stride
        if data[at:at + RECORD] != record(i):
            lost.append(i)
    return lost


def writers_script(nfs_file: str, lun_dev: str, home: str = "/root") -> str:
    """Starts two writers in the background, one numbered record at a time (see RECORD):
    to ``nfs_file`` (dd conv=fsync: committed when dd exits 0) and to ``lun_dev``
    (O_DIRECT|O_DSYNC). Each appends "<i> <unix time>" to ``home``/acked-nfs or acked-lun
    (the client's own disk) once record i's write returned: what the client was told is
    stable. A failed write is retried as the next number after a second."""
    nfs = (f"printf 'rec-%011d\\n' $i | dd of={shlex.quote(nfs_file)} bs={RECORD} "
           "seek=$i count=1 conv=notrunc,fsync status=none")
    lun = (f"printf 'rec-%011d\\n' $i | dd of={shlex.quote(lun_dev)} bs={LUN_BLOCK} "
           f"seek=$(({RECORDS_AT_BLOCK} + i)) count=1 conv=sync,notrunc oflag=direct,dsync "
           "status=none")
    script = [f"rm -f {home}/writers.stop {home}/acked-nfs {home}/acked-lun"]
    for kind, write in (("nfs", nfs), ("lun", lun)):
        loop = (f"i=0; while [ ! -e {home}/writers.stop ]; do i=$((i+1)); "
                f"if {write}; then echo \"$i $(date +%s.%N)\" >> {home}/acked-{kind}; "
                "else sleep 1; fi; done")
        script.append(f"nohup bash -c {shlex.quote(loop)} >{home}/writer-{kind}.log 2>&1 "
                      f"& echo $! > {home}/writer-{kind}.pid")
    return "\n".join(script)


def stop_writers_script(timeout: float, home: str = "/root") -> str:
    """Stops writers_script's writers, waiting up to ``timeout`` s for each to exit (a
    write blocked on a takeover finishes first); fails when one is still blocked."""
    return f"""touch {home}/writers.stop
for kind in nfs lun; do
  pid=$(cat {home}/writer-$kind.pid)
  for i in $(seq {int(timeout)}); do kill -0 $pid 2>/dev/null || break; sleep 1; done
  if kill -0 $pid 2>/dev/null; then echo "the $kind writer is still blocked"; exit 1; fi
done"""


@dataclass(frozen=True)
class JournalEntry:
    t: float  # unix time (the node's clock)
    ident: str  # SYSLOG_IDENTIFIER: corosync, pacemaker-fenced, ...
    message: str


def parse_journal(out: str) -> list[JournalEntry]:
    """``journalctl -o json`` lines (one JSON object each; MESSAGE may be an array of
    bytes when it is not valid UTF-8).

    Sample (shortened):
      {"__REALTIME_TIMESTAMP":"1764139200123456","SYSLOG_IDENTIFIER":"corosync",
       "MESSAGE":"[TOTEM ] A processor failed, forming new configuration: ..."}
    """
    entries = []
    for line in out.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        msg = rec.get("MESSAGE", "")
        if isinstance(msg, list):
            msg = bytes(msg).decode(errors="replace")
        entries.append(JournalEntry(int(rec["__REALTIME_TIMESTAMP"]) / 1e6,
                                    str(rec.get("SYSLOG_IDENTIFIER", "")), str(msg)))
    return entries


@dataclass(frozen=True)
class Timeline:
    """A takeover read from the survivor's journal, in seconds after the kill (None: not
    seen). Detection: knet saw the link go, totem declared the token lost, the new
    membership without the victim; then pacemaker asked for fencing, fencing completed;
    then each resource's start was requested and returned ok."""

    knet_down: float | None = None
    token_lost: float | None = None
    membership: float | None = None
    fence_requested: float | None = None
    fenced: float | None = None
    starts: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)

    def complete(self) -> bool:
        return None not in (self.token_lost, self.membership, self.fence_requested,
                            self.fenced) and bool(self.starts) and all(
            a is not None and b is not None for a, b in self.starts.values())

    def start_of(self, rsc: str) -> float:
        t = self.starts.get(rsc, (None, None))[0]
        assert t is not None, f"no start of {rsc} in {self}"
        return t

    def started(self, rsc: str) -> float:
        t = self.starts.get(rsc, (None, None))[1]
        assert t is not None, f"{rsc} never started in {self}"
        return t

    def steps(self) -> dict[str, float]:
        """The durations of the steps (what the report prints and docs/ha.md tabulates)."""
        out: dict[str, float] = {}
        if self.membership is not None:
            out["detect"] = self.membership
        if self.fence_requested is not None and self.membership is not None:
            out["decide"] = self.fence_requested - self.membership
        if self.fenced is not None and self.fence_requested is not None:
            out["fence"] = self.fenced - self.fence_requested
        prev = self.fenced
        for rsc, (begin, end) in self.starts.items():
            if begin is not None and end is not None:
                if prev is not None:
                    out[f"{rsc} wait"] = begin - prev
                out[rsc] = end - begin
                prev = end
        if prev is not None:
            out["total"] = prev
        return {k: round(v, 1) for k, v in out.items()}

    def summary(self) -> str:
        marks = {"knet link down": self.knet_down, "token lost": self.token_lost,
                 "membership": self.membership, "fence asked": self.fence_requested,
                 "fenced": self.fenced}
        at = ", ".join(f"{k} {v:.1f}" for k, v in marks.items() if v is not None)
        return f"at: {at}; steps (s): {self.steps()}"


def failover_timeline(entries: list[JournalEntry], t_kill: float, victim: str,
                      survivor: str, resources: tuple[str, ...] = (POOL_RSC, IP_RSC,
                                                                    WWW_RSC)) -> Timeline:
    """Reads a takeover from the survivor's journal (corosync 3.1, pacemaker 2.1);
    ``t_kill`` on the survivor's clock. The first match after the kill counts, except a
    start: the last request before its first "ok" (a failed try comes before).

    Sample (journalctl -o short-precise, shortened):
      07:48:32.19 corosync: [KNET  ] link: host: 2 link: 0 is down
      07:48:33.74 corosync: [TOTEM ] A processor failed, forming new configuration: ...
      07:48:37.75 corosync: [QUORUM] Members[1]: 1
      07:48:42.01 pacemaker-controld: notice: Requesting fencing (reboot) of node ha-b
      07:49:03.34 pacemaker-controld: notice: Peer ha-b was terminated (reboot) by ha-a
                  on behalf of pacemaker-controld.1243@ha-a: OK
      07:49:05.78 pacemaker-controld: notice: Requesting local execution of start
                  operation for ha-pool on ha-a
      07:49:50.87 pacemaker-controld: notice: Result of start operation for ha-pool on
                  ha-a: ok
    """
    after = [e for e in entries if e.t >= t_kill]

    def first(ident: str, pattern: str, since: float | None = None) -> float | None:
        rx = re.compile(pattern)
        for e in after:
            if e.ident == ident and (since is None or e.t >= since) and rx.search(e.message):
                return e.t - t_kill
        return None

    token = first("corosync", r"\[TOTEM \] A processor failed")
    starts: dict[str, tuple[float | None, float | None]] = {}
    for rsc in resources:
        ok = first("pacemaker-controld",
                   rf"Result of start operation for {re.escape(rsc)} on "
                   rf"{re.escape(survivor)}: ok\b")
        asked = [e.t - t_kill for e in after if e.ident == "pacemaker-controld"
                 and "Requesting local execution of start operation for "
                     f"{rsc} on {survivor}" in e.message
                 and (ok is None or e.t - t_kill <= ok)]
        starts[rsc] = (asked[-1] if asked else None, ok)
    return Timeline(
        knet_down=first("corosync", r"\[KNET  ?\] link: host: \d+ link: \d+ is down"),
        token_lost=token,
        membership=first("corosync", r"\[QUORUM\] Members\[",
                         None if token is None else token + t_kill),
        fence_requested=first("pacemaker-controld",
                              rf"Requesting fencing \(\w+\) of node {re.escape(victim)}\b"),
        fenced=first("pacemaker-controld",
                     rf"Peer {re.escape(victim)} was terminated \(\w+\) by .*: OK"),
        starts=starts)


@dataclass(frozen=True)
class FenceEvent:
    action: str  # "reboot" (what pacemaker asks; fence_scsi does "off"), "off", "on"
    target: str
    status: str  # "success", "failed", "pending"
    delegate: str  # the node that ran the agent


def parse_fence_history(xml: str) -> list[FenceEvent]:
    """``stonith_admin --history NODE --verbose --output-as=xml`` (without --verbose it
    lists one event per target only).

    Sample:
      <pacemaker-result api-version="2.25" request="stonith_admin --history * ...">
        <list name="fencing history" count="2">
          <fence_event action="reboot" target="ha-a" client="pacemaker-controld.1140"
                       origin="ha-b" status="success" delegate="ha-b"
                       completed="2026-11-26 08:52:22Z"/>
          <fence_event action="on" target="ha-a" client="pacemaker-fenced.1135"
                       origin="ha-b" status="success" delegate="ha-a"
                       completed="2026-11-26 08:42:52Z"/>
        </list>
        <status code="0" message="OK"/>
      </pacemaker-result>
    """
    return [FenceEvent(e.get("action", ""), e.get("target", ""), e.get("status", ""),
                       e.get("delegate", ""))
            for e in ET.fromstring(xml).iter("fence_event")]


# ---------------------------------------------------------------------------- the bed


@dataclass
class HaBed:
    """The booted, configured bed. ``nodes`` maps pacemaker node names to guests."""

    switch: Switch
    jbod: E2EAppliance
    nodes: dict[str, E2EAppliance]
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def client(self) -> E2EAppliance:
        """The client on the service segment (the jbod guest's service NIC)."""
        return self.jbod

    def spec(self, name: str) -> NodeSpec:
        return next(n for n in NODES if n.name == name)

    def peer(self, name: str) -> str:
        return next(n.name for n in NODES if n.name != name)

    def status(self, on: str) -> ClusterStatus:
        return parse_crm_mon(self.nodes[on].check("crm_mon -1 --output-as=xml", timeout=120))

    def wait_status(self, on: str, ready: Callable[[ClusterStatus], bool],
                    timeout: float = 600, what: str = "") -> ClusterStatus:
        """Polls crm_mon on ``on`` until ``ready(status)``."""
        deadline = time.monotonic() + timeout
        last: ClusterStatus | None = None
        while time.monotonic() < deadline:
            rc, out = self.nodes[on].exec("crm_mon -1 --output-as=xml", timeout=120)
            if rc == 0:
                last = parse_crm_mon(out)
                if ready(last):
                    return last
            time.sleep(2)
        raise AssertionError(f"cluster not {what or 'ready'} after {timeout:.0f} s: {last}")

    def active(self, on: str | None = None) -> str:
        """The node running the whole group ('' when it runs nowhere)."""
        s = self.status(on or NODES[0].name)
        where = {s.node_of(r) for r in (POOL_RSC, IP_RSC, WWW_RSC)}
        return where.pop() if len(where) == 1 else ""

    def keys(self, on: str) -> dict[str, list[str]]:
        """Registered PR keys per LUN, read from node ``on``."""
        return {lun_path(i): parse_keys(self.nodes[on].check(
            f"sg_persist -n -i -k -d {lun_path(i)}")) for i in range(LUN_COUNT)}

    def reservations(self, on: str) -> dict[str, tuple[str, str] | None]:
        return {lun_path(i): parse_reservation(self.nodes[on].check(
            f"sg_persist -n -i -r -d {lun_path(i)}")) for i in range(LUN_COUNT)}

    def fence_history(self, on: str, target: str) -> list[FenceEvent]:
        return parse_fence_history(self.nodes[on].check(
            f"stonith_admin --history {target} --verbose --output-as=xml"))

    def client_get(self, path: str = "/data", timeout: float = 5) -> tuple[int, str]:
        """The client fetches http://VIP:WWW_PORT/path: (exit code, body). The image has
        no curl: bash's /dev/tcp speaks the HTTP/1.0 request."""
        rc, out = self.client.exec(f"timeout {timeout:g} {http_get(path)}", timeout=60)
        head, _, body = out.partition("\r\n\r\n")
        return (rc if head.startswith("HTTP/1.0 200") else rc or 1), body

    def start_client_loop(self, period: float = 0.5) -> None:
        """The client reads VIP's /data every ``period`` s in the background, one line per
        read ("<unix time> ok|fail") in /root/habed-client.log, until stop_client_loop()."""
        loop = (f"while :; do t=$(date +%s.%N); "
                f"if timeout 2 {http_get('/data')} 2>/dev/null | grep -q '^{DATA}'; "
                f'then echo "$t ok"; else echo "$t fail"; fi; sleep {period:g}; done')
        self.client.check(f"rm -f /root/habed-client.log; nohup bash -c {shlex.quote(loop)} "
                          ">/root/habed-client.log 2>&1 & echo $! > /root/habed-client.pid")

    def stop_client_loop(self) -> ClientLog:
        out = self.client.check("kill $(cat /root/habed-client.pid); cat /root/habed-client.log")
        return parse_client_log(out)

    def start_writers(self, nfs_file: str, lun_dev: str) -> None:
        """Two writers on the client in the background (writers_script), through the NFS
        mount and the iSCSI session. They write on through a takeover (the mount is
        hard, the session's replacement timeout long) until stop_writers()."""
        self.client.check(writers_script(nfs_file, lun_dev))

    def stop_writers(self, timeout: float = 600) -> dict[str, list[tuple[int, float]]]:
        """Asks the writers to stop, waits (a write blocked on the takeover has to finish
        first) and returns what each acknowledged (parse_acked)."""
        self.client.check(stop_writers_script(timeout), timeout=timeout + 60)
        return {kind: parse_acked(self.client.check(f"cat /root/acked-{kind}"))
                for kind in ("nfs", "lun")}

    def read_back(self, path: str, skip_blocks: int = 0, blocks: int | None = None) -> bytes:
        """``path`` (a file on the NFS mount or the LUN) read on the client with O_DIRECT,
        so from the server and not the client's cache: the whole file, or ``blocks``
        4096-byte blocks from block ``skip_blocks``."""
        count = f" skip={skip_blocks} count={blocks}" if blocks is not None else ""
        out = self.client.check(f"dd if={shlex.quote(path)} bs={LUN_BLOCK}{count} "
                                "iflag=direct status=none | gzip -1 | base64 -w0",
                                timeout=600)
        return gzip.decompress(base64.b64decode(out.strip()))

    def journal(self, on: str, since: float) -> list[JournalEntry]:
        """The node's journal from ``since`` (unix time on the node's clock)."""
        out = self.nodes[on].check(
            f"journalctl -q -o json --since=@{since:.0f} --output-fields=MESSAGE,"
            "SYSLOG_IDENTIFIER", timeout=120)
        return parse_journal(out)

    def clock_offset(self, app: E2EAppliance, samples: int = 5) -> tuple[float, float]:
        """(the guest's clock minus the host's, its error bound) in seconds: from the
        sample with the shortest round trip through the control channel (half of it is
        the bound; under TCG a round trip takes 0.1-2 s)."""
        best: tuple[float, float] | None = None
        for _ in range(samples):
            t0 = time.time()
            out = app.check("date +%s.%N")
            t1 = time.time()
            if best is None or (t1 - t0) / 2 < best[1]:
                best = (float(out.strip()) - (t0 + t1) / 2, (t1 - t0) / 2)
        assert best is not None
        return best


    # --- the ZDS datastores the client uses through the VIP ---------------------------

    @contextlib.contextmanager
    def api(self, node: str) -> Iterator[httpx.Client]:
        """The REST API of ``node`` (through its own user network, not the VIP)."""
        app = self.nodes[node]
        with api_client(app.api_url, app.admin_token) as client:
            yield client

    def client_mount(self, export_path: str, mountpoint: str = "/mnt/hanfs") -> None:
        """NFSv3 through the VIP, hard (a takeover is a pause, not an error), with the
        ports ganesha pins (no portmapper), no NLM (nolock)."""
        self.client.check(
            f"mount -t nfs -o vers=3,proto=tcp,port=2049,mountport=20048,mountproto=tcp,"
            f"nolock,hard,timeo=100,retrans=3 {VIP}:{shlex.quote(export_path)} "
            f"{mountpoint}", timeout=180)

    def client_login(self, iqn: str, serial: str) -> str:
        """Logs the client in to ``iqn`` at the VIP (a node record made by hand: never
        SendTargets discovery, which would also name the nodes' user-network address),
        with a replacement timeout long enough for a takeover; returns the LUN's
        by-id path (LIO's NAA id from the unit serial)."""
        dev = "/dev/disk/by-id/wwn-0x" + naa_wwn(serial)[len("naa."):]
        node = f"-m node -T {iqn} -p {VIP}:3260"
        self.client.check(f"""iscsiadm {node} -o new >/dev/null
iscsiadm {node} -o update -n node.session.timeo.replacement_timeout -v 900
iscsiadm {node} --login
for i in $(seq 60); do udevadm settle; test -b {dev} && exit 0; sleep 1; done
ls -l /dev/disk/by-id; exit 1""", timeout=180)
        return dev


def http_get(path: str) -> str:
    """A bash command printing the answer to GET http://VIP:WWW_PORT/path (HTTP/1.0)."""
    script = (f'exec 3<>/dev/tcp/{VIP}/{WWW_PORT} && '
              f'printf "GET {path} HTTP/1.0\\r\\n\\r\\n" >&3 && cat <&3')
    return f"bash -c {shlex.quote(script)}"


def _in_parallel(jobs: dict[str, Callable[[], None]]) -> None:
    """Runs one job per guest side by side (each guest's control channel is used by one
    thread only) and re-raises the first failure."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        futures = {name: pool.submit(job) for name, job in jobs.items()}
        for name, fut in futures.items():
            try:
                fut.result()
            except Exception as e:
                raise AssertionError(f"bed setup on {name}: {e}") from e


def _put(app: E2EAppliance, path: str, text: str | bytes, mode: str = "0644") -> None:
    data = text.encode() if isinstance(text, str) else text
    b64 = base64.b64encode(data).decode()
    app.check(f"mkdir -p {shlex.quote(str(Path(path).parent))} && "
              f"echo {b64} | base64 -d > {shlex.quote(path)} && chmod {mode} {shlex.quote(path)}")


def configure_links(app: E2EAppliance, links: list[tuple[str, str]]) -> None:
    """Static addresses (MAC, CIDR) through systemd-networkd; waits until all are up."""
    for m, cidr in links:
        _put(app, f"/etc/systemd/network/10-habed-{m.replace(':', '')}.network",
             networkd_unit(m, cidr))
    ifaces = " ".join(f'"$(ip -o link | grep -i "link/ether {m} " | cut -d: -f2 | tr -d " ")"'
                      for m, _ in links)
    wanted = " ".join(f"' {cidr.split('/')[0]}/'" for _, cidr in links)
    app.check(f"""networkctl reload && networkctl reconfigure {ifaces}
for i in $(seq 90); do
  ok=1; for a in {wanted}; do ip -4 -o addr show | grep -q "$a" || ok=0; done
  [ $ok = 1 ] && exit 0; sleep 1
done
ip addr; exit 1""", timeout=150)


def setup_jbod(jbod: E2EAppliance) -> None:
    """The shared disks: sparse zvols on the jbod's own pool, exported by LIO."""
    configure_links(jbod, [(mac("storage", 10), f"{JBOD_STORAGE_IP}/24"),
                           (mac("service", 100), f"{CLIENT_IP}/24")])
    zvols = " && ".join(f"zfs create -s -V {LUN_SIZE} -o volblocksize=16K tank/habed/disk{i}"
                        for i in range(LUN_COUNT))
    jbod.check(f"zfs create -o mountpoint=none tank/habed && {zvols} && udevadm settle && "
               + " && ".join(f"test -b /dev/zvol/tank/habed/disk{i}" for i in range(LUN_COUNT)))
    _put(jbod, "/root/habed-lio.json",
         json.dumps(lio_config(LUN_COUNT, [n.initiator for n in NODES], JBOD_STORAGE_IP)))
    jbod.check("python3 -c 'import json; from rtslib_fb import RTSRoot; "
               "RTSRoot().restore(json.load(open(\"/root/habed-lio.json\")), "
               "abort_on_error=True)'", timeout=120)
    # the jbod is also the client: an initiator name of its own (the image's is shared by
    # every guest booted from it) for the LUNs ZDS serves through the VIP
    _put(jbod, "/etc/iscsi/initiatorname.iscsi", f"InitiatorName={CLIENT_INITIATOR}\n",
         "0600")
    jbod.check("systemctl restart iscsid && mkdir -p /mnt/hanfs")


def prepare_node(app: E2EAppliance, spec: NodeSpec, authkey: bytes) -> None:
    """Name, addresses, initiator, corosync key and configuration (not started)."""
    app.check(f"hostnamectl set-hostname {spec.name}")
    configure_links(app, [(mac(seg, spec.host), f"{spec.address(seg)}/24")
                          for seg in ("storage", "cluster", "service")])
    _put(app, "/etc/iscsi/initiatorname.iscsi", f"InitiatorName={spec.initiator}\n", "0600")
    _put(app, "/etc/corosync/authkey", authkey, "0400")
    _put(app, "/etc/corosync/corosync.conf", corosync_conf())
    _put(app, "/etc/udev/rules.d/61-zds-ha-shared-disks.rules", shared_disks_rules())
    _put(app, "/etc/udev/rules.d/62-habed-lun-timeout.rules", lun_timeout_rules())
    for path, text in watchdog_files().items():
        _put(app, path, text)
    app.check(f"mkdir -p /etc/watchdog.d && ln -sf /usr/share/cluster/{SELF_FENCE_CHECK} "
              f"/etc/watchdog.d/{SELF_FENCE_CHECK}")
    # the bed's service port on the node's firewall (a drop-in, like the ha role's)
    _put(app, "/etc/nftables.zds.d/habed.nft",
         f'tcp dport {WWW_PORT} accept comment "habed www"\n')
    # TCG: a loaded host stalls a guest's I/O for 10-50 s now and then (seen: an iSCSI
    # NOP timeout, a re-login, 48 s of delayed writes); MMP would suspend the pool after
    # 10 failed 1 s intervals. With fail_intervals=0 MMP still writes and an import still
    # waits out the activity check (20 x 1 s), but a stall no longer suspends the pool.
    _put(app, "/etc/modprobe.d/zz-habed.conf",
         f"options zfs zfs_multihost_fail_intervals={MMP_FAIL_INTERVALS}\n")
    app.check(f"echo {MMP_FAIL_INTERVALS} > "
              "/sys/module/zfs/parameters/zfs_multihost_fail_intervals && "
              "udevadm control --reload && systemctl restart nftables iscsid")


# Where each node keeps the pair's shared API token (what the ha role's ha__api_tokens
# imports), for the tests to read back from the configured bed.
PAIR_TOKEN_FILE = "/root/habed-pair-token"


def pair_certificate(app: E2EAppliance) -> tuple[str, str]:
    """A certificate for the service address and both nodes (what an admin gives the ha
    role's ha__tls_cert_file), made on ``app``: (certificate, key) in PEM."""
    names = ",".join([f"IP:{VIP}", "IP:127.0.0.1", *(f"DNS:{n.name}" for n in NODES)])
    app.check("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
              f"-days 3650 -subj /CN={CLUSTER} -addext subjectAltName={names} "
              "-keyout /root/pair-key.pem -out /root/pair-cert.pem 2>/dev/null", timeout=120)
    return app.check("cat /root/pair-cert.pem"), app.check("cat /root/pair-key.pem")


def one_api(app: E2EAppliance, cert: str, key: str, token: str) -> None:
    """What the ha role does with ha__tls_cert_file/key and ha__api_tokens: the same
    certificate and the same token on this node, the API restarted on the certificate."""
    _put(app, "/etc/zds/tls/cert.pem", cert, "0644")
    _put(app, "/etc/zds/tls/key.pem", key, "0600")
    _put(app, PAIR_TOKEN_FILE, token + "\n", "0600")
    app.check(f"/opt/zds/venv/bin/zds token create --name pair --role admin --stdin "
              f"< {PAIR_TOKEN_FILE} >/dev/null && systemctl restart zds-api", timeout=300)
    deadline = time.monotonic() + 300
    while True:
        with contextlib.suppress(httpx.HTTPError), api_client(app.api_url, token) as api:
            if api.get("/system/health").status_code == 200:
                return
        assert time.monotonic() < deadline, "the API did not come back on the pair's certificate"
        time.sleep(3)


def attach_luns(app: E2EAppliance) -> None:
    """Logs in to the jbod's target (a node record with startup=automatic, so a rebooted
    node logs in again), waits for the LUNs' wwn- links and checks that the bed's
    command timeout (lun_timeout_rules) took."""
    portal = f"{JBOD_STORAGE_IP}:3260"
    node = f"-m node -T {TARGET_IQN} -p {portal}"
    waits = " && ".join(
        f"test -b {lun_path(i)} && test \"$(cat /sys/block/$(basename $(readlink -f "
        f"{lun_path(i)}))/device/timeout)\" = {LUN_COMMAND_TIMEOUT_S}"
        for i in range(LUN_COUNT))
    app.check(f"""iscsiadm {node} -o new >/dev/null
iscsiadm {node} -o update -n node.startup -v automatic
iscsiadm {node} -o update -n node.session.timeo.replacement_timeout -v {LUN_REPLACEMENT_TIMEOUT_S}
iscsiadm {node} -o update -n 'node.conn[0].timeo.noop_out_interval' -v {NOOP_INTERVAL_S}
iscsiadm {node} -o update -n 'node.conn[0].timeo.noop_out_timeout' -v {NOOP_TIMEOUT_S}
iscsiadm {node} --login
for i in $(seq 60); do udevadm settle; {waits} && exit 0; sleep 1; done
ls -l /dev/disk/by-id; grep . /sys/block/sd*/device/timeout; exit 1""", timeout=180)


def reread_partitions(app: E2EAppliance) -> None:
    """Makes a node's kernel read the LUNs' partition tables again. A pool made on the
    other node partitioned them after this node logged in: until it re-reads, it sees
    whole disks without the ZFS partition, and `zpool import` says "no such pool
    available" (seen in the bed once udev's watch, which re-read them as a side effect
    of fence_scsi's sg_persist, was turned off on the shared disks)."""
    disks = " ".join(lun_path(i) for i in range(LUN_COUNT))
    parts = " && ".join(f"test -b {lun_path(i)}-part1" for i in range(LUN_COUNT))
    app.check(f"for d in {disks}; do blockdev --rereadpt $d; done; udevadm settle; {parts}",
              timeout=120)


def start_cluster(app: E2EAppliance) -> None:
    """Starts the stack and the watchdog's self-check, and at every boot from now on (a
    configured pair: a node that comes back rejoins, and pacemaker unfences it before it
    runs anything). The start is not waited for: pacemaker's waits for quorum, that is
    for the peer's corosync, and the enabling alone can outlast a bound (the 20:59 run:
    seven systemd reloads of about 20 s each, the units' SysV scripts going through
    update-rc.d, then 180 s ran out while the peer was still enabling). The bed waits
    for the pair to form instead."""
    app.check("systemctl enable corosync pacemaker watchdog", timeout=900)
    app.check("systemctl start --no-block corosync pacemaker watchdog", timeout=120)


def start_arbiter(jbod: E2EAppliance) -> None:
    """corosync-qnetd on the jbod, as the ha role's tasks/qnetd.yml runs it: a CA of its
    own (the image carries none), readable by the daemon's group, its port open to the
    storage segment."""
    jbod.check(f"corosync-qnetd-certutil -i -G >/dev/null && chgrp coroqnetd {QNETD_NSSDB} "
               f"{QNETD_NSSDB}/cert9.db {QNETD_NSSDB}/key4.db", timeout=120)
    _put(jbod, "/etc/nftables.zds.d/qnetd.nft", qnetd_nft([f"{SUBNET['storage']}.0/24"]))
    jbod.check("systemctl restart nftables && systemctl enable --now corosync-qnetd",
               timeout=120)


def qdevice_certificate(jbod: E2EAppliance, app: E2EAppliance, node: str) -> None:
    """The node's TLS client certificate for the quorum device, as the ha role's
    tasks/qdevice-certs.yml makes it: trust the arbiter's CA, ask in the cluster's name,
    the arbiter signs, the node imports it."""
    net = QDEVICE_NSSDB.rsplit("/", 1)[0]
    _put(app, f"{net}/qnetd-cacert.crt", jbod.check(f"cat {QNETD_NSSDB}/qnetd-cacert.crt"))
    app.check(f"rm -rf {QDEVICE_NSSDB} && corosync-qdevice-net-certutil -i -c "
              f"{net}/qnetd-cacert.crt >/dev/null && "
              f"corosync-qdevice-net-certutil -r -n {CLUSTER} >/dev/null", timeout=120)
    # the request and the signed certificate are DER (binary): carried in base64
    crq = f"{QNETD_NSSDB}/{CLUSTER}-{node}.crq"
    _put(jbod, crq, base64.b64decode(
        app.check(f"base64 -w0 {QDEVICE_NSSDB}/qdevice-net-node.crq")), "0600")
    # (the guest agent returns stdout and stderr together: the tool's chatter is dropped)
    signed = jbod.check(f"corosync-qnetd-certutil -s -n {CLUSTER} -c {crq} >/dev/null 2>&1 && "
                        f"base64 -w0 {QNETD_NSSDB}/cluster-{CLUSTER}.crt", timeout=120)
    _put(app, f"{net}/cluster-{CLUSTER}.crt", base64.b64decode(signed))
    app.check(f"corosync-qdevice-net-certutil -M -c {net}/cluster-{CLUSTER}.crt >/dev/null "
              f"&& certutil -L -d {QDEVICE_NSSDB} -n 'Cluster Cert' >/dev/null", timeout=120)


def start_qdevice(app: E2EAppliance) -> None:
    """The quorum device's client, now and at every boot (the role enables it in a pair
    that has ha__qdevice_host)."""
    app.check("systemctl enable --now corosync-qdevice", timeout=180)


def use_quorum_device(bed: HaBed, qdevice: QuorumDevice) -> None:
    """Turns the running pair from two_node to ``qdevice`` without stopping it: the
    arbiter, the certificates, the new corosync.conf on both nodes, one reload (corosync
    can drop two_node at run time; wait_for_all stays as it was), then the qdevice
    client on both. Returns once both nodes count the device's vote."""
    start_arbiter(bed.jbod)
    for n in NODES:
        qdevice_certificate(bed.jbod, bed.nodes[n.name], n.name)
    conf = corosync_conf(qdevice=qdevice)
    for n in NODES:
        _put(bed.nodes[n.name], "/etc/corosync/corosync.conf", conf)
    bed.nodes[NODES[0].name].check("corosync-cfgtool -R", timeout=120)
    _in_parallel({n.name: partial(start_qdevice, bed.nodes[n.name]) for n in NODES})
    deadline = time.monotonic() + 300
    for n in NODES:
        while True:
            _rc, out = bed.nodes[n.name].exec("corosync-quorumtool -s", timeout=60)
            if device_votes(out) == 1 and re.search(r"^Quorate:\s+Yes", out, re.M):
                break
            assert time.monotonic() < deadline, f"no quorum device vote on {n.name}: {out}"
            time.sleep(3)


def device_votes(quorumtool: str) -> int | None:
    """The votes the quorum device casts on this node, from ``corosync-quorumtool -s``
    (None: no device registered). corosync's tools/corosync-quorumtool.c prints, after
    the nodes, a line for node id 0; its votes are 0 while the device casts none here:

        Membership information
        ----------------------
            Nodeid      Votes    Qdevice Name
                 1          1    A,V,NMW 10.97.0.1 (local)
                 2          1    A,V,NMW 10.97.0.2
                 0          1            Qdevice
    (or ``         0          0            Qdevice (votes 1)``)
    """
    m = re.search(r"^\s+0\s+(\d+)\s+Qdevice\b", quorumtool, re.M)
    return int(m.group(1)) if m else None


def make_pool(app: E2EAppliance) -> None:
    """The shared pool, on the node that makes it, then exported for pacemaker. multihost
    (MMP) needs each node's own hostid (zds-hostid.service: from the machine UUID)."""
    disks = " ".join(lun_path(i) for i in range(LUN_COUNT))
    app.check(f"zpool create -f -o ashift=12 -o multihost=on -o cachefile=none "
              f"-O mountpoint=/{POOL} {POOL} mirror {disks} && "
              f"mkdir /{POOL}/www && echo {DATA} > /{POOL}/www/data && "
              f"zpool export {POOL}", timeout=300)


def bed_state(image_dir: Path, boots: tuple[Boot, ...], kvm: bool) -> Path:
    """Where the configured bed is kept once set up: its three guests saved together
    (issue 26: the setup takes 10-15 minutes under TCG). The key holds this module's
    source, which is the configuration the bed ran, and each guest's own key (QEMU,
    firmware, machine); it goes with the image, as every saved guest does."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    for boot in boots:
        h.update(warm_state(image_dir, boot, kvm).name.encode())
    return image_dir / "warm" / f"habed-{h.hexdigest()[:16]}"


def serving(s: ClusterStatus) -> bool:
    """Both nodes online with quorum, and the whole group started on one of them."""
    where = {s.node_of(r) for r in (POOL_RSC, IP_RSC, WWW_RSC)}
    return set(s.online) == {n.name for n in NODES} and s.quorum and len(where) == 1 \
        and "" not in where


@contextlib.contextmanager
def ha_bed(image_dir: Path, memory_mib: int = 3072) -> Iterator[HaBed]:
    """Boots and configures the bed, or restores it as a run of the same image and the
    same bed code saved it once configured; powers it all off afterwards.
    ZDS_E2E_COLD_BOOT=1 always boots and configures."""
    t0 = time.monotonic()
    timings: dict[str, float] = {}
    state = Path(tempfile.mkdtemp(prefix="zds-e2e-habed-switch-"))
    switch = Switch(state_dir=state, segments={k: v for k, v in SEGMENTS.items()})
    switch.start()
    try:
        jbod_boot = Boot("jbod", memory_mib=2048, links=(
            switch.link("storage", "jbod", mac("storage", 10)),
            switch.link("service", "client", mac("service", 100))))
        node_boots = [Boot(n.name, memory_mib=memory_mib, links=tuple(
            switch.link(seg, n.port, mac(seg, n.host))
            for seg in ("storage", "cluster", "service"))) for n in NODES]
        boots = (jbod_boot, *node_boots)
        saved = bed_state(image_dir, boots, kvm_works()) if restores_wanted() else None
        restore = saved is not None and (saved / "timings.json").exists()
        with booted(image_dir, *boots, restore_from=tuple(
                saved / b.name for b in boots) if saved and restore else ()) as apps:
            jbod, *node_apps = apps
            for app in apps:
                assert app.api_healthy, f"the API never became healthy; see {app.serial_log}"
            timings["boot_s"] = round(time.monotonic() - t0, 1)
            bed = HaBed(switch, jbod, {n.name: a for n, a in zip(NODES, node_apps,
                                                                  strict=True)}, timings)
            try:
                if saved is not None and restore:
                    timings["restored_s"] = timings.pop("boot_s")
                    bed.wait_status(NODES[0].name, serving, what="serving again")
                    timings["serving_again_s"] = round(time.monotonic() - t0, 1)
                    timings.update({f"saved_{k}": v for k, v in json.loads(
                        (saved / "timings.json").read_text()).items()})
                else:
                    _configure(bed, timings)
                    timings["total_setup_s"] = round(time.monotonic() - t0, 1)
                    if saved is not None:
                        _save_bed(bed, boots, saved, timings)
                yield bed
            finally:
                keep_journals(bed)
    finally:
        switch.stop()
        with contextlib.suppress(OSError):
            for p in state.iterdir():
                p.unlink()
            state.rmdir()


def _save_bed(bed: HaBed, boots: tuple[Boot, ...], saved: Path,
              timings: dict[str, float]) -> None:
    """Saves the configured bed for later runs; a failure costs those runs a setup only.
    timings.json, written last, marks a whole save."""
    for old in saved.parent.glob("habed-*"):
        if old != saved:  # another version of the bed
            shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(saved, ignore_errors=True)
    saved.mkdir(parents=True)
    apps = (bed.jbod, *(bed.nodes[n.name] for n in NODES))
    try:
        timings["saved_paused_s"] = round(save_states(
            [(app.vm, saved / boot.name) for app, boot in zip(apps, boots, strict=True)],
            files=SAVED_FILES), 1)
        (saved / "timings.json").write_text(json.dumps(timings) + "\n")
    except (VmError, OSError, subprocess.CalledProcessError) as e:
        print(f"\n[e2e] could not save the configured HA bed for later runs: {e}")
        shutil.rmtree(saved, ignore_errors=True)


def keep_journals(bed: HaBed) -> None:
    """Each running guest's journal of this boot, next to the kept serial logs
    ($ZDS_E2E_KEEP_LOG's directory, <stem>-<guest>-journal.log): what pacemaker, corosync
    and ZFS said is gone with the guests otherwise."""
    keep = Path(os.environ.get("ZDS_E2E_KEEP_LOG", "/tmp/zds-e2e-serial.log"))
    for name, app in (("jbod", bed.jbod), *bed.nodes.items()):
        if app.vm.pid() is None:
            continue
        with contextlib.suppress(Exception):
            _rc, out = app.exec("journalctl -b --no-pager -o short-precise", timeout=300)
            keep.with_name(f"{keep.stem}-{name}-journal.log").write_text(out)


def wait_first_serving(bed: HaBed, node: str, rounds: int = 3, each: float = 240) -> int:
    """Waits for the group's first start after the resources are loaded; returns how
    many ``crm_resource --refresh`` it took. Under TCG with four guests on two cores,
    fence_scsi's meta-data once timed out in pacemaker-fenced (2026-11-28 16:24): the
    first unfencing then failed with "No fence device", and the controller gave up "for
    now", until the cluster-recheck-interval (15 min). A refresh makes it try again."""
    for refreshes in range(rounds):
        try:
            bed.wait_status(node, lambda s: all(s.node_of(r) for r in GROUP_MEMBERS)
                            and len({s.node_of(r) for r in GROUP_MEMBERS}) == 1,
                            timeout=each, what="serving")
            return refreshes
        except AssertionError:
            if refreshes == rounds - 1:
                raise
            bed.nodes[node].check("crm_resource --refresh", timeout=180)
    raise AssertionError("unreachable")


def _configure(bed: HaBed, timings: dict[str, float]) -> None:
    def step(name: str, jobs: dict[str, Callable[[], None]]) -> None:
        t = time.monotonic()
        _in_parallel(jobs)
        timings[f"{name}_s"] = round(time.monotonic() - t, 1)

    authkey = secrets.token_bytes(256)
    a, b = NODES
    step("network_jbod_nodes", {
        "jbod": partial(setup_jbod, bed.jbod),
        **{n.name: partial(prepare_node, bed.nodes[n.name], n, authkey) for n in NODES}})
    cert, key = pair_certificate(bed.nodes[a.name])
    token = f"zds_{secrets.token_hex(6)}_{secrets.token_urlsafe(32)}"
    step("one_api", {n.name: partial(one_api, bed.nodes[n.name], cert, key, token)
                     for n in NODES})
    step("iscsi_login", {n.name: partial(attach_luns, bed.nodes[n.name]) for n in NODES})
    step("pool_create", {a.name: partial(make_pool, bed.nodes[a.name])})
    step("partitions_reread", {b.name: partial(reread_partitions, bed.nodes[b.name])})
    step("cluster_start", {n.name: partial(start_cluster, bed.nodes[n.name]) for n in NODES})
    t = time.monotonic()
    bed.wait_status(a.name, lambda s: set(s.online) == {a.name, b.name} and s.quorum,
                    what="formed")
    timings["cluster_formed_s"] = round(time.monotonic() - t, 1)
    t = time.monotonic()
    _put(bed.nodes[a.name], "/root/habed.crm", crm_config())
    bed.nodes[a.name].check("crm configure load update /root/habed.crm", timeout=300)
    timings["refreshes"] = wait_first_serving(bed, a.name)
    timings["resources_started_s"] = round(time.monotonic() - t, 1)
