"""Commands run on the appliance itself: serve the API, the demo, the OpenAPI document,
first boot, the ZFS hostid, the NFS server, and tokens."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import Any

from api.cli.common import out, settings_of, table, wiring


def journal_logging() -> None:
    """The engine's INFO lines (the start-up summary, adoptions, create batches: a
    handful, none per request) reach the journal beside its warnings. uvicorn configures
    only its own loggers; without a handler on the root, Python prints WARNING and above
    and drops the rest."""
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s",
                        force=True)  # at start-up nothing else has configured it
    logging.getLogger("appliance").setLevel(logging.INFO)


def cmd_serve(args: argparse.Namespace) -> int:
    from api import serve
    from api.app import create_app

    journal_logging()
    settings = settings_of(args)
    engine = wiring(args).engine(settings)
    tls = settings.tls and not args.no_tls
    if tls:
        local = engine.ctx.local
        local.ensure_tls_certificate(settings.tls_cert, settings.tls_key, local.hostname())
    serve.run(
        create_app(engine),
        host=args.host or settings.listen,
        port=args.port or settings.port,
        ssl_certfile=str(settings.tls_cert) if tls else None,
        ssl_keyfile=str(settings.tls_key) if tls else None,
        log_level="info",
        # connections at once: beyond, uvicorn's own plain 503 (the guard's busy, in the
        # envelope, comes first at max_in_flight requests)
        limit_concurrency=settings.limit_concurrency,
        timeout_keep_alive=settings.keep_alive,
    )
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """The API on in-memory fakes (no ZFS/LIO/ganesha needed): to try the API anywhere."""
    import tempfile
    from pathlib import Path

    from api import serve
    from api.app import create_app
    from appliance.demo import demo_engine

    engine = demo_engine(Path(args.state_dir or tempfile.mkdtemp(prefix="zds-demo-")))
    token = engine.tokens.create("demo", "admin")
    print(f"ZDS demo API (in-memory fakes, nothing is stored on disk devices)\n"
          f"  http://{args.host}:{args.port}/docs\n  console: http://{args.host}:{args.port}/ui\n"
          f"  token: {token}", flush=True)
    serve.run(create_app(engine), host=args.host, port=args.port, log_level="warning",
              limit_concurrency=engine.settings.limit_concurrency,
              timeout_keep_alive=engine.settings.keep_alive)
    return 0


def cmd_openapi(args: argparse.Namespace) -> int:
    from api.openapi import openapi_document

    print(json.dumps(openapi_document(), indent=2))
    return 0


def cmd_token(args: argparse.Namespace) -> int:
    tokens = wiring(args).tokens(settings_of(args))
    if args.token_cmd == "create":
        given = sys.stdin.readline().strip() if args.stdin else None
        token = tokens.create(args.name, args.role, given)
        out(args, {"token": token, "role": args.role, "name": args.name}, lambda d: d["token"])
    elif args.token_cmd == "list":
        out(args, tokens.list(), lambda rows: table(rows, ["id", "name", "role", "created",
                                                           "last_used"]))
    elif args.token_cmd == "revoke":
        tokens.revoke(args.id)
        out(args, {"revoked": args.id}, lambda d: f"revoked {d['revoked']}")
    return 0


def cmd_hostid(args: argparse.Namespace) -> int:
    from appliance.hostid import describe, ensure_machine_hostid

    result = ensure_machine_hostid(wiring(args).hosts(settings_of(args)).local)
    print(json.dumps(asdict(result)) if args.json else describe(result))
    return 0


def cmd_firstboot(args: argparse.Namespace) -> int:
    from appliance.firstboot import run_firstboot

    settings = settings_of(args)
    engine = wiring(args).engine(settings)
    try:
        result = run_firstboot(engine)
    finally:
        engine.close()
    if args.json:
        print(json.dumps(asdict(result), indent=2))
        return 0
    for msg in result.messages:
        print(f"zds: {msg}")
    print("=" * 72)
    if result.token:  # the first boot: shown once, never again at a later boot
        print(f"ZDS appliance ready. Admin API token (also in {settings.admin_token_file}):")
        print(f"  {result.token}")
    else:
        print(f"ZDS appliance ready. The admin API token was shown at the first boot "
              f"(root can read {settings.admin_token_file}; `zds token create` makes more)")
    if result.demo_pool:
        print(f"  pool {result.pool!r} is a DEMO pool on sparse files: not for real data")
    print("=" * 72)
    return 0


def cmd_nfs_server(args: argparse.Namespace) -> int:
    """Show or switch the appliance's NFS server (nfs-ganesha or the kernel's knfsd).

    A switch stops and masks the other server, starts this one, records it in zds.toml
    and restarts zds-api, whose start-up reconcile serves every NFS datastore again."""
    from pathlib import Path

    from appliance.settings import config_path, write_nfs_server

    settings = settings_of(args)
    units = wiring(args).nfs_units()
    if args.server is None:
        data = {"configured": settings.nfs_server, "running": units.active()}
        out(args, data, lambda d: f"configured: {d['configured']}, running: "
                                  f"{d['running'] or 'none'}")
        return 0
    done = units.use(args.server)
    if write_nfs_server(config_path(Path(args.config) if args.config else None), args.server):
        done.append(f"set [nfs] server = {args.server}")
    if done and not args.no_restart:
        units.restart_api()
        done.append("restarted zds-api (it serves every NFS datastore again)")
    out(args, {"server": args.server, "done": done},
        lambda d: "\n".join(f"zds: {x}" for x in d["done"])
        or f"zds: {d['server']} already serves NFS; nothing to do")
    return 0


def register(sub: Any) -> None:
    s = sub.add_parser("serve", help="run the REST API")
    s.add_argument("--host")
    s.add_argument("--port", type=int)
    s.add_argument("--no-tls", action="store_true")
    s.set_defaults(func=cmd_serve)

    sub.add_parser("openapi", help="print the OpenAPI document").set_defaults(func=cmd_openapi)
    dm = sub.add_parser("demo", help="run the API on in-memory fakes (try it anywhere)")
    dm.add_argument("--host", default="127.0.0.1")
    dm.add_argument("--port", type=int, default=8080)
    dm.set_defaults(func=cmd_demo)
    sub.add_parser("firstboot", help="TLS cert, admin token, default pool (idempotent)") \
        .set_defaults(func=cmd_firstboot)
    sub.add_parser("hostid", help="set the ZFS hostid from the machine UUID (boot unit)") \
        .set_defaults(func=cmd_hostid)

    ns = sub.add_parser("nfs-server", help="show or switch the NFS server: ganesha (default) "
                                           "or knfsd (docs/architecture.md)")
    ns.add_argument("server", nargs="?", choices=["ganesha", "knfsd"])
    ns.add_argument("--no-restart", action="store_true",
                    help="do not restart zds-api (the switch takes effect when it restarts)")
    ns.set_defaults(func=cmd_nfs_server)

    t = sub.add_parser("token", help="API tokens (local, on the appliance)")
    tsub = t.add_subparsers(dest="token_cmd", required=True)
    tc = tsub.add_parser("create")
    tc.add_argument("--role", choices=["admin", "readonly"], default="readonly")
    tc.add_argument("--name", default="cli")
    tc.add_argument("--stdin", action="store_true",
                    help="import the token read from standard input instead of making one "
                         "(the same token on both nodes of an HA pair: docs/ha.md)")
    tsub.add_parser("list")
    tr = tsub.add_parser("revoke")
    tr.add_argument("id")
    t.set_defaults(func=cmd_token)
