"""The in-memory twin of :class:`appliance.host.cluster.Pacemaker`: a pair whose nodes,
pool groups and fencing history a test sets, and whose moves a test can turn into what
pacemaker would do (``on_move``: stop the group on one node's engine, start it on the
other's). Held to the real adapter by appliance/host/contract/cluster_checks.py."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from appliance.errors import NotFound
from appliance.host.cluster import (
    AGENT_NAME,
    IP_AGENT,
    ClusterNode,
    ClusterResource,
    ClusterState,
    FenceEvent,
    PoolGroup,
)


@dataclass
class FakeCluster:
    """Not configured (a single appliance) until :meth:`pair` makes it a pair seen from
    ``local``."""

    local: str = ""
    nodes: dict[str, bool] = field(default_factory=dict)  # name -> online
    groups: dict[str, PoolGroup] = field(default_factory=dict)  # pool -> its group
    holders: dict[str, str] = field(default_factory=dict)  # group -> node ("" nowhere)
    fencing: list[FenceEvent] = field(default_factory=list)
    running: bool = True  # pacemaker answers
    moves: list[tuple[str, str]] = field(default_factory=list)  # (group, node; "" = clear)
    preferred: dict[str, str] = field(default_factory=dict)  # group -> node asked by move
    # what pacemaker does on a move: (group, from node, to node); default: nothing more
    on_move: Callable[[str, str, str], None] | None = None
    calls: int = 0  # state() reads, for tests that count host calls
    node_ids: dict[str, int] = field(default_factory=dict)  # name -> corosync nodeid

    @classmethod
    def pair(cls, local: str, peer: str, pools: dict[str, str] | None = None,
             address: str = "192.0.2.50") -> FakeCluster:
        """``local`` and ``peer`` online; ``pools``: pool -> the node holding it."""
        # nodeids by name, as one corosync.conf gives them to both nodes' views
        fake = cls(local=local, nodes={local: True, peer: True},
                   node_ids={n: i for i, n in enumerate(sorted((local, peer)), 1)})
        for pool, node in (pools or {}).items():
            fake.add_pool(pool, node, address)
        return fake

    def add_pool(self, pool: str, node: str, address: str = "") -> PoolGroup:
        g = PoolGroup(pool, f"zds-{pool}-pool", f"zds-{pool}", address)
        self.groups[pool] = g
        self.holders[g.group] = node
        return g

    def configured(self) -> bool:
        return bool(self.local)

    def node_id(self) -> int | None:
        return self.node_ids.get(self.local) if self.configured() else None

    def state(self) -> ClusterState:
        self.calls += 1
        if not self.configured():
            return ClusterState(running=False, error="this node is not in a cluster")
        if not self.running:
            return ClusterState(running=False, local=self.local,
                                error="crm_mon: Connection to cluster failed")
        online = sorted(n for n, up in self.nodes.items() if up)
        resources: list[ClusterResource] = []
        for g in self.groups.values():
            node = self.holders.get(g.group, "")
            role = "Started" if node else "Stopped"
            resources.append(ClusterResource(g.resource, AGENT_NAME, role, node, g.group))
            if g.address:
                resources.append(ClusterResource(f"{g.group}-ip", IP_AGENT, role, node,
                                                 g.group))
        return ClusterState(
            running=True, local=self.local, dc=online[0] if online else "",
            quorum=bool(online), stonith_enabled=True,
            nodes=tuple(ClusterNode(n, up, is_dc=bool(online) and n == online[0])
                        for n, up in sorted(self.nodes.items())),
            resources=tuple(resources), fencing=tuple(self.fencing),
            pools=tuple(self.groups.values()))

    def _group(self, resource: str) -> str:
        for g in self.groups.values():
            if resource in (g.group, g.resource):
                return g.group
        raise NotFound(f"pacemaker: Resource '{resource}' not found")

    def move(self, resource: str, node: str) -> None:
        group = self._group(resource)
        if node not in self.nodes:
            raise NotFound(f"pacemaker: Node '{node}' not found")
        self.moves.append((group, node))
        self.preferred[group] = node
        before = self.holders.get(group, "")
        if self.nodes[node] and before != node:
            if self.on_move is not None:
                self.on_move(group, before, node)
            self.holders[group] = node

    def clear(self, resource: str) -> None:
        group = self._group(resource)
        self.moves.append((group, ""))
        self.preferred.pop(group, None)

    # what a test makes happen --------------------------------------------------------

    def kill(self, node: str, fenced_by: str) -> None:
        """``node`` dies and ``fenced_by`` fences it and takes its groups."""
        self.nodes[node] = False
        self.fencing.append(FenceEvent("reboot", node, "success", fenced_by, fenced_by,
                                       time.time()))
        for group, holder in self.holders.items():
            if holder == node:
                self.holders[group] = fenced_by
