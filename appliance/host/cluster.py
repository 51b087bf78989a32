"""Pacemaker, as ZDS sees it: who is in the pair, which node holds which pool's resource
group, what fencing did; and the one change ZDS asks of it (move a group, then forget
the move). Through pacemaker's own tools (``crm_mon``, ``cibadmin``, ``crm_resource``,
``crm_node``), never crmsh's or pcs's shells, so the answers are pacemaker's XML.

A node is *in a cluster* when ``/etc/corosync/corosync.conf`` exists: the ``ha`` role
writes it only for a configured pair and removes Debian's sample otherwise
(docs/ha.md), so a single appliance never runs a cluster command.

``crm_mon --one-shot --inactive --output-as=xml`` (pacemaker 2.1.5, api-version 2.25),
shortened from the test bed (docs/ha.md; whole documents captured there are in
tests/unit/fixtures/pacemaker/bed-*.xml)::

    <pacemaker-result api-version="2.25" request="crm_mon --one-shot --inactive ...">
      <pacemakerd sys_from="pacemakerd" state="running" last_updated="2026-11-26 12:50:02Z"/>
      <summary>
        <stack type="corosync"/>
        <current_dc present="true" version="2.1.5-a3f44794f94" name="ha-a" id="1"
                    with_quorum="true" mixed_version="false"/>
        <last_update time="Thu Nov 26 09:12:01 2026"/>
        <nodes_configured number="2"/>
        <resources_configured number="3" disabled="0" blocked="0"/>
        <cluster_options stonith-enabled="true" symmetric-cluster="true"
                         no-quorum-policy="stop" maintenance-mode="false"
                         stop-all-resources="false" stonith-timeout-ms="180000"/>
      </summary>
      <nodes>
        <node name="ha-a" id="1" online="true" standby="false" standby_onfail="false"
              maintenance="false" pending="false" unclean="false" health="green"
              shutdown="false" expected_up="true" is_dc="true" resources_running="3"
              type="member"/>
        <node name="ha-b" id="2" online="false" standby="false" ... unclean="false"
              is_dc="false" resources_running="0" type="member"/>
      </nodes>
      <resources>
        <resource id="fence-scsi" resource_agent="stonith:fence_scsi" role="Started"
                  active="true" orphaned="false" blocked="false" managed="true"
                  failed="false" failure_ignored="false" nodes_running_on="1">
          <node name="ha-a" id="1" cached="true"/>
        </resource>
        <group id="zds-hapool" number_resources="2" maintenance="false" managed="true"
               disabled="false">
          <resource id="zds-hapool-pool" resource_agent="ocf:zds:pool" role="Started"
                    active="true" ... failed="false" nodes_running_on="1">
            <node name="ha-a" id="1" cached="true"/>
          </resource>
          <resource id="zds-hapool-ip" resource_agent="ocf:heartbeat:IPaddr2"
                    role="Stopped" active="false" ... nodes_running_on="0"/>
        </group>
      </resources>
      <failures>
        <failure op_key="zds-hapool-pool_monitor_10000" node="ha-b" exitstatus="not running"
                 exitreason="" exitcode="7" call="20" status="complete"
                 last-rc-change="2026-11-26 09:10:02Z" queued="0" exec="0" interval="10000"
                 task="monitor"/>
      </failures>
      <status code="0" message="OK"/>
    </pacemaker-result>

Fencing's history, every target, every event (``stonith_admin --history '*' --verbose
--output-as=xml``; without ``--verbose`` one event per target)::

    <pacemaker-result api-version="2.25" request="stonith_admin --history * --verbose ...">
      <list name="fencing history" count="2">
        <fence_event action="reboot" target="ha-b" client="pacemaker-controld.1243"
                     origin="ha-a" status="success" delegate="ha-a"
                     completed="2026-11-26 09:11:03Z"/>
        <fence_event action="on" target="ha-b" client="pacemaker-fenced.1135"
                     origin="ha-a" status="success" delegate="ha-b"
                     completed="2026-11-26 08:42:52Z"/>
      </list>
      <status code="0" message="OK"/>
    </pacemaker-result>

``crm_mon`` does not show resources' parameters; which pool a ``ocf:zds:pool`` resource
serves is read from the configuration (``cibadmin --query --scope resources``)::

    <resources>
      <primitive id="fence-scsi" class="stonith" type="fence_scsi">...</primitive>
      <group id="zds-hapool">
        <primitive id="zds-hapool-pool" class="ocf" provider="zds" type="pool">
          <instance_attributes id="zds-hapool-pool-instance_attributes">
            <nvpair name="pool" value="hapool" id="zds-hapool-pool-instance_attributes-pool"/>
          </instance_attributes>
          <operations>...</operations>
        </primitive>
        <primitive id="zds-hapool-ip" class="ocf" provider="heartbeat" type="IPaddr2">
          ...<nvpair name="ip" value="10.96.0.50" .../>...
        </primitive>
      </group>
    </resources>
"""

from __future__ import annotations

import calendar
import re
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from appliance.errors import Conflict, HostCommandFailed, NotFound
from appliance.host.run import CommandError, Runner

COROSYNC_CONF = Path("/etc/corosync/corosync.conf")
# The ZDS resource agent (ansible/roles/ha/files/zds-pool): class ocf, provider zds.
AGENT = ("ocf", "zds", "pool")
AGENT_NAME = "ocf:zds:pool"
IP_AGENT = "ocf:heartbeat:IPaddr2"


@dataclass(frozen=True)
class ClusterNode:
    name: str
    online: bool
    standby: bool = False
    unclean: bool = False  # lost and not fenced yet
    maintenance: bool = False
    is_dc: bool = False  # the node whose controller decides for the cluster


@dataclass(frozen=True)
class ClusterResource:
    id: str
    agent: str  # "ocf:zds:pool", "stonith:fence_scsi"...
    role: str  # Started, Stopped, Starting, Stopping...
    node: str = ""  # where it runs ("" when it runs nowhere)
    group: str = ""  # the group it is in ("" when none)
    failed: bool = False
    managed: bool = True


@dataclass(frozen=True)
class FenceEvent:
    action: str  # reboot (what pacemaker asks), off, on (unfencing)
    target: str
    status: str  # success, failed, pending
    delegate: str = ""  # the node that ran the fence agent
    origin: str = ""  # the node that asked
    completed: float | None = None  # unix time


@dataclass(frozen=True)
class PoolGroup:
    """A pool pacemaker moves: its ``ocf:zds:pool`` resource, the group around it (the
    resource itself when it is in none) and the group's floating address, if any."""

    pool: str
    resource: str
    group: str
    address: str = ""


@dataclass(frozen=True)
class ClusterState:
    """What pacemaker says now. ``running`` False: the stack does not answer on this node
    (stopped, starting, or this node was fenced and waits to rejoin)."""

    running: bool
    local: str = ""  # this node's name in the cluster
    dc: str = ""
    quorum: bool = False
    stonith_enabled: bool = False
    nodes: tuple[ClusterNode, ...] = ()
    resources: tuple[ClusterResource, ...] = ()
    fencing: tuple[FenceEvent, ...] = ()
    failures: tuple[str, ...] = ()
    pools: tuple[PoolGroup, ...] = ()
    error: str = ""  # why it is not running, when it is not

    def resource(self, rid: str) -> ClusterResource | None:
        return next((r for r in self.resources if r.id == rid), None)

    def holder(self, pool: str) -> str:
        """The node running ``pool``'s ZDS resource ("" when none does)."""
        for g in self.pools:
            if g.pool == pool:
                r = self.resource(g.resource)
                return r.node if r is not None and r.role == "Started" else ""
        return ""

    def group_of(self, pool: str) -> PoolGroup | None:
        return next((g for g in self.pools if g.pool == pool), None)

    def node(self, name: str) -> ClusterNode | None:
        return next((n for n in self.nodes if n.name == name), None)


class ClusterHost(Protocol):
    """Pacemaker on this node (real: :class:`Pacemaker`; twin:
    :class:`appliance.host.fakes.cluster.FakeCluster`)."""

    def configured(self) -> bool:
        """This node is in a pair (its corosync.conf exists): one file check."""

    def state(self) -> ClusterState:
        """Nodes, resources, fencing history and the pools' groups; ``running`` False
        (with ``error``) when pacemaker does not answer. Three commands."""

    def node_id(self) -> int | None:
        """This node's corosync ``nodeid`` (None: not in a pair, or the local node's
        name is not known yet). Read once, then remembered: it never changes while the
        API runs."""

    def move(self, resource: str, node: str) -> None:
        """Asks pacemaker to run ``resource`` (a group) on ``node``: a location
        preference it keeps until :meth:`clear`. Unknown resource or node: NotFound."""

    def clear(self, resource: str) -> None:
        """Forgets what :meth:`move` asked (the group then stays where it is:
        stickiness)."""


# --------------------------------------------------------------------------- parsers


def _bool(el: ET.Element, key: str) -> bool:
    return el.get(key) == "true"


def parse_completed(text: str) -> float | None:
    """'2026-11-26 09:11:03Z' (fence_event's completed, UTC) -> unix time."""
    try:
        return float(calendar.timegm(time.strptime(text.strip(), "%Y-%m-%d %H:%M:%SZ")))
    except (ValueError, AttributeError):
        return None


def parse_fence_history(xml: str) -> tuple[FenceEvent, ...]:
    """``stonith_admin --history '*' --verbose --output-as=xml`` (the module's sample);
    also the ``fence_event`` elements of any other pacemaker document."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as exc:
        raise HostCommandFailed(f"stonith_admin printed no XML: {exc}") from exc
    return tuple(FenceEvent(
        action=e.get("action", ""), target=e.get("target", ""), status=e.get("status", ""),
        delegate=e.get("delegate", ""), origin=e.get("origin", ""),
        completed=parse_completed(e.get("completed", "")))
        for e in root.iter("fence_event"))


def parse_crm_mon(xml: str) -> ClusterState:
    """``crm_mon --one-shot --inactive --output-as=xml`` (the module's sample). A
    document without ``<nodes>`` (pacemaker not answering) is not running."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as exc:
        raise HostCommandFailed(f"crm_mon printed no XML: {exc}") from exc
    status = root.find("status")
    nodes_el = root.find("nodes")
    if nodes_el is None:
        msg = status.get("message", "") if status is not None else ""
        errors = [e.text or "" for e in root.iter("error")]
        return ClusterState(running=False, error="; ".join(filter(None, [msg, *errors]))
                            or "pacemaker is not answering")
    dc = root.find("./summary/current_dc")
    options = root.find("./summary/cluster_options")
    nodes = tuple(ClusterNode(
        name=n.get("name", ""), online=_bool(n, "online"), standby=_bool(n, "standby"),
        unclean=_bool(n, "unclean"), maintenance=_bool(n, "maintenance"),
        is_dc=_bool(n, "is_dc")) for n in nodes_el.findall("node"))
    resources: list[ClusterResource] = []
    res_root = root.find("resources")

    def add(r: ET.Element, group: str) -> None:
        on = r.find("node")
        resources.append(ClusterResource(
            id=r.get("id", ""), agent=r.get("resource_agent", ""), role=r.get("role", ""),
            node=on.get("name", "") if on is not None else "", group=group,
            failed=_bool(r, "failed"), managed=r.get("managed", "true") == "true"))

    if res_root is not None:
        for el in res_root:
            if el.tag == "resource":
                add(el, "")
            elif el.tag == "group":
                for r in el.findall("resource"):
                    add(r, el.get("id", ""))
            # clones and bundles hold no pool of ZDS's: not read
    failures = tuple(
        f"{f.get('op_key')} on {f.get('node')}: {f.get('exitstatus')}"
        + (f" ({f.get('exitreason')})" if f.get("exitreason") else "")
        for f in root.findall("./failures/failure"))
    return ClusterState(
        running=True,
        dc=dc.get("name", "") if dc is not None and dc.get("present") == "true" else "",
        quorum=dc is not None and dc.get("with_quorum") == "true",
        stonith_enabled=options is not None and options.get("stonith-enabled") == "true",
        nodes=nodes, resources=tuple(resources), failures=failures)


_NODE_BLOCK = re.compile(r"\bnode\s*\{([^{}]*)\}")
_KEY_VALUE = re.compile(r"^\s*([A-Za-z0-9_]+)\s*:\s*(\S+)\s*$", re.MULTILINE)


def parse_corosync_nodes(text: str) -> dict[str, int]:
    """Node name -> nodeid from corosync.conf's nodelist, as the ha role writes it::

        nodelist {
            node {
                name: ha-a
                nodeid: 1
                ring0_addr: 10.77.0.11
            }
            node {
                name: ha-b
                nodeid: 2
                ring0_addr: 10.77.0.12
            }
        }

    Comments (``#`` to the end of a line) are ignored; a node without a name or a
    numeric nodeid is left out."""
    text = re.sub(r"#[^\n]*", "", text)
    nodes: dict[str, int] = {}
    for block in _NODE_BLOCK.findall(text):
        keys = dict(_KEY_VALUE.findall(block))
        name, nodeid = keys.get("name", ""), keys.get("nodeid", "")
        if name and nodeid.isdigit():
            nodes[name] = int(nodeid)
    return nodes


def parse_pool_groups(xml: str) -> tuple[PoolGroup, ...]:
    """The ``ocf:zds:pool`` primitives of ``cibadmin --query --scope resources`` (the
    module's sample): the pool each serves, its group and the group's IPaddr2 address."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as exc:
        raise HostCommandFailed(f"cibadmin printed no XML: {exc}") from exc

    def params(p: ET.Element) -> dict[str, str]:
        return {nv.get("name", ""): nv.get("value", "")
                for nv in p.findall("./instance_attributes/nvpair")}

    def is_agent(p: ET.Element, agent: tuple[str, str, str]) -> bool:
        return (p.get("class"), p.get("provider"), p.get("type")) == agent

    found: list[PoolGroup] = []
    for container in [root, *root.iter("group")]:
        group = container.get("id", "") if container.tag == "group" else ""
        members = container.findall("primitive")
        address = next((params(p).get("ip", "") for p in members
                        if is_agent(p, ("ocf", "heartbeat", "IPaddr2"))), "")
        for p in members:
            pool = params(p).get("pool", "")
            if is_agent(p, AGENT) and pool:
                found.append(PoolGroup(pool, p.get("id", ""), group or p.get("id", ""),
                                       address))
    return tuple(found)


# --------------------------------------------------------------------------- adapter


class Pacemaker:
    """The real adapter (runs on the appliance, as root: the API's unit)."""

    def __init__(self, runner: Runner, corosync_conf: Path = COROSYNC_CONF) -> None:
        self.runner = runner
        self.corosync_conf = corosync_conf
        self._local = ""
        self._node_id: int | None = None

    def configured(self) -> bool:
        return self.corosync_conf.exists()

    def node_id(self) -> int | None:
        if self._node_id is None and self.configured():
            name = self._local_name()
            try:
                nodes = parse_corosync_nodes(self.corosync_conf.read_text())
            except OSError:
                return None
            self._node_id = nodes.get(name) if name else None
        return self._node_id

    def _local_name(self) -> str:
        if not self._local:
            result = self.runner.run(["crm_node", "--name"], check=False, timeout=30)
            if result.ok:
                self._local = result.stdout.strip()
        return self._local

    def state(self) -> ClusterState:
        if not self.configured():
            return ClusterState(running=False, error="this node is not in a cluster")
        mon = self.runner.run(["crm_mon", "--one-shot", "--inactive", "--output-as=xml"],
                              check=False, timeout=60)
        # crm_mon prints its XML (with a <status> saying why) also when it fails
        try:
            state = parse_crm_mon(mon.stdout)
        except HostCommandFailed:
            return ClusterState(running=False, error=mon.stderr.strip()
                                or f"crm_mon exited {mon.returncode}")
        if not state.running:
            return state
        cib = self.runner.run(["cibadmin", "--query", "--scope", "resources"], check=False,
                              timeout=60)
        pools = parse_pool_groups(cib.stdout) if cib.ok else ()
        history = self.runner.run(["stonith_admin", "--history", "*", "--verbose",
                                   "--output-as=xml"], check=False, timeout=60)
        try:
            fencing = parse_fence_history(history.stdout) if history.stdout else ()
        except HostCommandFailed:
            fencing = ()  # the history is a nicety; the state stands without it
        return replace(state, pools=pools, fencing=fencing, local=self._local_name())

    def _resource(self, argv: list[str]) -> None:
        try:
            self.runner.run(argv, timeout=120)
        except CommandError as exc:
            text = exc.result.stderr + exc.result.stdout
            if "not found" in text.lower() or "no such" in text.lower():
                raise NotFound(f"pacemaker: {text.strip()}") from exc
            if "already" in text.lower():
                raise Conflict(f"pacemaker: {text.strip()}") from exc
            raise

    def move(self, resource: str, node: str) -> None:
        self._resource(["crm_resource", "--move", "--resource", _name(resource),
                        "--node", _name(node)])

    def clear(self, resource: str) -> None:
        self._resource(["crm_resource", "--clear", "--resource", _name(resource)])


def _name(text: str) -> str:
    """A resource or node name as pacemaker's tools take it (checked: no option-like or
    odd text reaches an argv)."""
    if not text or text.startswith("-") or not all(c.isalnum() or c in "-_.:" for c in text):
        raise HostCommandFailed(f"not a pacemaker name: {text!r}")
    return text
