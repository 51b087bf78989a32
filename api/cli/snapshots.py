"""``zds snapshot``: list | create | delete | rollback (over the REST API)."""

from __future__ import annotations

import argparse
from typing import Any

from api.cli.common import client, out, table


def cmd_snapshot(args: argparse.Namespace) -> int:
    c = client(args)
    base = f"/datastores/{args.datastore}/snapshots"
    if args.snap_cmd == "list":
        out(args, c.call("GET", base), lambda rows: table(
            rows, ["name", "created", "used", "referenced", "clones"]))
    elif args.snap_cmd == "create":
        out(args, c.call("POST", base, {"name": args.name}),
            lambda d: f"created {d['full_name']}")
    elif args.snap_cmd == "rollback":
        out(args, c.call("POST", f"{base}/{args.name}/rollback",
                         {"destroy_newer": args.destroy_newer, "force": args.force}),
            lambda d: f"rolled back to {d['full_name']}")
    elif args.snap_cmd == "delete":
        c.call("DELETE", f"{base}/{args.name}")
        out(args, {"deleted": args.name}, lambda d: f"deleted {d['deleted']}")
    return 0


def register(sub: Any) -> None:
    sn = sub.add_parser("snapshot", help="snapshots of a datastore (over the API)")
    ssub = sn.add_subparsers(dest="snap_cmd", required=True)
    ssub.add_parser("list").add_argument("datastore")
    for name in ("create", "delete", "rollback"):
        x = ssub.add_parser(name)
        x.add_argument("datastore")
        x.add_argument("name")
        if name == "rollback":
            x.add_argument("--destroy-newer", action="store_true")
            x.add_argument("--force", action="store_true")
    sn.set_defaults(func=cmd_snapshot)
