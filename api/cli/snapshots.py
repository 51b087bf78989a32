"""``zds snapshot``: list | create | delete | rollback (over the REST API)."""

from __future__ import annotations

import argparse
from typing import Any

from api.cli.common import client, out, table


def cmd_snapshot(args: argparse.Namespace) -> int:
    c = client(args)
    base = f"/datastores/{args.datastore}/snapshots"
    if args.snap_cmd == "list":
        params = {"policy": args.policy} if args.policy is not None else None
        out(args, c.call("GET", base, params=params), lambda rows: table(
            [{**r, "age": _age(r.get("age", 0))} for r in rows],
            ["name", "policy", "age", "used", "held", "clones"]))
    elif args.snap_cmd == "create":
        out(args, c.call("POST", base, {"name": args.name}),
            lambda d: f"created {d['full_name']}")
    elif args.snap_cmd == "rollback":
        out(args, c.call("POST", f"{base}/{args.name}/rollback",
                         {"destroy_newer": args.destroy_newer, "force": args.force}),
            lambda d: f"rolled back to {d['full_name']}")
    elif args.snap_cmd == "clone":
        out(args, c.call("POST", f"{base}/{args.name}/clones", {"name": args.new_name}),
            lambda d: "\n".join([f"cloned {d['origin']} as datastore {d['name']} "
                                 f"({'serving' if d['serving'] else 'not serving'})",
                                 "# ESXi", *d["attach"]["esxi"], "# notes",
                                 *d["attach"]["notes"]]))
    elif args.snap_cmd in ("hold", "release"):
        method = "PUT" if args.snap_cmd == "hold" else "DELETE"
        out(args, c.call(method, f"{base}/{args.name}/holds/{args.tag}"),
            lambda tags: f"{args.name} held by: {', '.join(tags) or '(nothing)'}")
    elif args.snap_cmd == "delete":
        c.call("DELETE", f"{base}/{args.name}")
        out(args, {"deleted": args.name}, lambda d: f"deleted {d['deleted']}")
    return 0


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"


def register(sub: Any) -> None:
    sn = sub.add_parser("snapshot", help="snapshots of a datastore (over the API)")
    ssub = sn.add_subparsers(dest="snap_cmd", required=True)
    ls = ssub.add_parser("list")
    ls.add_argument("datastore")
    ls.add_argument("--policy", help="only this policy's snapshots ('' for manual ones)")
    for name in ("create", "delete", "rollback"):
        x = ssub.add_parser(name)
        x.add_argument("datastore")
        x.add_argument("name")
        if name == "rollback":
            x.add_argument("--destroy-newer", action="store_true")
            x.add_argument("--force", action="store_true")
    for name in ("hold", "release"):
        h = ssub.add_parser(name, help=f"{name} a zfs hold (a held snapshot is never pruned)")
        h.add_argument("datastore")
        h.add_argument("name")
        h.add_argument("--tag", default="keep")
    cl = ssub.add_parser("clone", help="a new datastore from a snapshot, with how to mount it")
    cl.add_argument("datastore")
    cl.add_argument("name")
    cl.add_argument("new_name")
    sn.set_defaults(func=cmd_snapshot)
