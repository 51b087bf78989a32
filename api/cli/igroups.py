"""``zds igroup``: list | put | delete initiator groups (over the REST API)."""

from __future__ import annotations

import argparse
from typing import Any

from api.cli.common import client, out, table


def cmd_igroup(args: argparse.Namespace) -> int:
    c = client(args)
    if args.ig_cmd == "list":
        out(args, c.call("GET", "/initiator-groups"),
            lambda rows: table(rows, ["name", "initiators", "used_by"]))
    elif args.ig_cmd == "put":
        out(args, c.call("PUT", f"/initiator-groups/{args.name}",
                         {"initiators": args.initiators}),
            lambda d: f"{d['name']}: {', '.join(d['initiators'])}")
    elif args.ig_cmd == "delete":
        c.call("DELETE", f"/initiator-groups/{args.name}")
        out(args, {"deleted": args.name}, lambda d: f"deleted {d['deleted']}")
    return 0


def register(sub: Any) -> None:
    ig = sub.add_parser("igroup", help="initiator groups (over the API)")
    isub = ig.add_subparsers(dest="ig_cmd", required=True)
    isub.add_parser("list")
    ip = isub.add_parser("put")
    ip.add_argument("name")
    ip.add_argument("initiators", nargs="+")
    isub.add_parser("delete").add_argument("name")
    ig.set_defaults(func=cmd_igroup)
