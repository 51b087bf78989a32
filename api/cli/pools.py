"""``zds pool``: list | get | create | scrub | export | import (over the REST API)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from api.cli.common import client, out, out_job, table


def cmd_pool(args: argparse.Namespace) -> int:
    c = client(args)
    if args.pool_cmd == "list":
        out(args, c.call("GET", "/pools"), lambda rows: table(
            rows, ["name", "health", "size", "allocated", "free", "capacity", "demo"]))
    elif args.pool_cmd == "get":
        out(args, c.call("GET", f"/pools/{args.name}"), lambda d: json.dumps(d, indent=2))
    elif args.pool_cmd == "create":
        body: dict[str, Any] = {"name": args.name, "force": args.force}
        if args.sparse:
            body["sparse_files"] = {"count": len(args.disks) or 2, "size": args.sparse,
                                    "type": args.layout}
        else:
            body["vdevs"] = ([{"type": "disk", "disks": [d]} for d in args.disks]
                             if args.layout == "disk"
                             else [{"type": args.layout, "disks": args.disks}])
        return out_job(args, c.call("POST", "/pools", body, params={"wait": args.wait}))
    elif args.pool_cmd in ("scrub", "export", "import"):
        params: dict[str, Any] = {"wait": args.wait}
        if args.pool_cmd in ("export", "import"):
            params["force"] = args.force
        return out_job(args, c.call("POST", f"/pools/{args.name}/{args.pool_cmd}",
                                    params=params))
    return 0


def register(sub: Any) -> None:
    pl = sub.add_parser("pool", help="pools (over the API)")
    psub = pl.add_subparsers(dest="pool_cmd", required=True)
    psub.add_parser("list")
    psub.add_parser("get").add_argument("name")
    pc = psub.add_parser("create")
    pc.add_argument("name")
    pc.add_argument("disks", nargs="*")
    pc.add_argument("--layout", default="mirror",
                    choices=["disk", "mirror", "raidz1", "raidz2", "raidz3"])
    pc.add_argument("--sparse", metavar="SIZE", help="demo pool on sparse files of SIZE")
    pc.add_argument("--force", action="store_true")
    pc.add_argument("--wait", type=float, default=120)
    for name in ("scrub", "export", "import"):
        x = psub.add_parser(name)
        x.add_argument("name")
        x.add_argument("--wait", type=float, default=0)
        x.add_argument("--force", action="store_true")
    pl.set_defaults(func=cmd_pool)
