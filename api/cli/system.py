"""``zds system``: health | drift | version | reconcile (over the REST API)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from api.cli.common import client, out

PATHS = {"health": "/system/health", "drift": "/system/drift", "version": "/system/version"}


def cmd_system(args: argparse.Namespace) -> int:
    c = client(args)
    if args.sys_cmd == "reconcile":
        out(args, c.call("POST", "/system/reconcile"), lambda d: json.dumps(d, indent=2))
        return 0
    out(args, c.call("GET", PATHS[args.sys_cmd]), lambda d: json.dumps(d, indent=2))
    return 0


def register(sub: Any) -> None:
    sy = sub.add_parser("system", help="health, drift, version, reconcile (over the API)")
    sy.add_argument("sys_cmd", choices=["health", "drift", "version", "reconcile"])
    sy.set_defaults(func=cmd_system)
