"""Contract checks for :class:`appliance.host.cluster.ClusterHost` (real ``Pacemaker``
and ``FakeCluster``), run on the node that holds ``pool`` in a formed pair:

    python -m appliance.host.contract.cluster_checks POOL

(the HA bed's e2e runs it on the active node). Read-only but for moves refused before
pacemaker changes anything (an unknown node or resource)."""

from __future__ import annotations

import sys

from appliance.errors import NotFound
from appliance.host.cluster import AGENT_NAME, ClusterHost
from appliance.host.contract import expect


def check_cluster(host: ClusterHost, pool: str) -> None:
    assert host.configured()
    state = host.state()
    assert state.running, state.error
    assert state.local and state.node(state.local) is not None, state
    # corosync.conf's nodeid for this node: its block of NFS export ids
    assert (node_id := host.node_id()) is not None and node_id >= 1, node_id
    assert state.quorum and state.dc, state
    assert len(state.nodes) == 2 and all(n.online for n in state.nodes), state.nodes
    group = state.group_of(pool)
    assert group is not None, state.pools
    assert group.group and group.resource, group
    rsc = state.resource(group.resource)
    assert rsc is not None and rsc.agent == AGENT_NAME and rsc.group == group.group, rsc
    assert state.holder(pool) == state.local, (state.holder(pool), state.local)
    assert state.holder("no-such-pool") == ""
    expect(NotFound, host.move, group.group, "no-such-node")
    expect(NotFound, host.move, "no-such-group", state.local)
    # nothing moved
    assert host.state().holder(pool) == state.local


def main(argv: list[str] | None = None) -> int:
    from appliance.host.cluster import Pacemaker
    from appliance.host.run import SubprocessRunner

    args = sys.argv[1:] if argv is None else argv
    check_cluster(Pacemaker(SubprocessRunner()), args[0])
    print("ok   cluster", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
