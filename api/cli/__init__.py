"""The ``zds`` command: serve the API, print OpenAPI, manage tokens, first boot, and
script the appliance over its REST API (``--json`` for machine-readable output).

One module per command group, each with ``register(subparsers)``; they share
:mod:`api.cli.common` only, so no group imports another.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from api.cli import (
    cluster,
    datastores,
    igroups,
    jobs,
    local,
    policies,
    pools,
    probes,
    replication,
    snapshots,
    system,
)
from api.cli.common import DEFAULT_SERVER, REAL, Wiring

GROUPS = (local, datastores, pools, snapshots, igroups, jobs, system, probes, replication,
          policies, cluster)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="zds", description=__doc__)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--config", help="config file (default /etc/zds/zds.toml or $ZDS_CONFIG)")
    p.add_argument("--state-dir", help="override the state directory (dev/test)")
    p.add_argument("--server", default=os.environ.get("ZDS_SERVER", DEFAULT_SERVER))
    p.add_argument("--token", help="API token (default $ZDS_TOKEN or /etc/zds/admin-token)")
    p.add_argument("--insecure", action="store_true",
                   help="do not verify the appliance's (self-signed) certificate")
    p.add_argument("--cacert", help="verify the appliance's certificate against this file")
    sub = p.add_subparsers(dest="cmd", required=True)
    for group in GROUPS:
        group.register(sub)
    return p


def main(argv: Sequence[str] | None = None, wiring: Wiring = REAL) -> int:
    """Runs one command; ``wiring`` says where it gets the API client, the engine and
    the probe tools (tests give fakes)."""
    from appliance.errors import ZdsError

    args = build_parser().parse_args(argv)
    args.wiring = wiring
    try:
        rc: int = args.func(args)
    except ZdsError as exc:
        print(f"zds: {exc.message}", file=sys.stderr)
        return 2
    return rc


__all__ = ["Wiring", "build_parser", "main"]
