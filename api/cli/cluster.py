"""``zds cluster``: status | failover (over the REST API; docs/ha.md)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from api.cli.common import client, out, out_job, table


def _status_text(d: dict[str, Any]) -> str:
    if not d["configured"]:
        return "not in an HA pair (a single appliance)"
    lines = [f"node {d['node']}: pacemaker "
             + ("answers" if d["running"] else "does not answer")
             + (f", quorum {'yes' if d['quorum'] else 'NO'}, fencing "
                f"{'on' if d['stonith_enabled'] else 'OFF'}, DC {d['dc'] or '-'}"
                if d["running"] else "")]
    if d["message"]:
        lines.append(d["message"])
    if d["nodes"]:
        lines.append(table([{**n, "pools": ", ".join(n["pools"])} for n in d["nodes"]],
                           ["name", "online", "standby", "unclean", "pools"]))
    if d["pools"]:
        lines.append(table(d["pools"], ["pool", "node", "address", "group"]))
    t = d.get("last_takeover")
    if t:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t["finished"]))
        fenced = f" after fencing {t['fenced']}" if t["fenced"] else ""
        lines.append(f"last takeover here: {t['pool']} at {when}{fenced}: "
                     + ", ".join(f"{k} {v:g} s" for k, v in t["seconds"].items()))
    if d["failures"]:
        lines.append("failed operations: " + "; ".join(d["failures"]))
    return "\n".join(lines)


def cmd_cluster(args: argparse.Namespace) -> int:
    c = client(args)
    if args.cluster_cmd == "status":
        out(args, c.call("GET", "/cluster"), _status_text)
        return 0
    body = {k: v for k, v in (("pool", args.pool), ("node", args.node)) if v}
    return out_job(args, c.call("POST", "/cluster/failover", body,
                                params={"wait": args.wait}))


def register(sub: Any) -> None:
    cl = sub.add_parser("cluster", help="the HA pair (over the API)")
    csub = cl.add_subparsers(dest="cluster_cmd", required=True)
    csub.add_parser("status", help="nodes, who holds which pool, fencing, last takeover")
    fo = csub.add_parser("failover", help="move a pool to the other node (planned)")
    fo.add_argument("--pool", help="default: the pair's only pool")
    fo.add_argument("--node", help="default: the other node")
    fo.add_argument("--wait", type=float, default=600,
                    help="seconds to wait for the move (0: return the job at once)")
    cl.set_defaults(func=cmd_cluster)
