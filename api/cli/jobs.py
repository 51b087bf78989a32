"""``zds job``: list | get (over the REST API)."""

from __future__ import annotations

import argparse
from typing import Any

from api.cli.common import client, out, out_job, table


def cmd_job(args: argparse.Namespace) -> int:
    c = client(args)
    if args.job_cmd == "list":
        out(args, c.call("GET", "/jobs"), lambda rows: table(
            rows, ["id", "kind", "target", "state", "progress"]))
        return 0
    return out_job(args, c.call("GET", f"/jobs/{args.id}", params={"wait": args.wait}))


def register(sub: Any) -> None:
    j = sub.add_parser("job", help="jobs (over the API)")
    jsub = j.add_subparsers(dest="job_cmd", required=True)
    jsub.add_parser("list")
    jg = jsub.add_parser("get")
    jg.add_argument("id")
    jg.add_argument("--wait", type=float, default=0)
    j.set_defaults(func=cmd_job)
