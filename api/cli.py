"""The ``zds`` command: serve the API, print OpenAPI, manage tokens, first boot, and
script the appliance over its REST API (``--json`` for machine-readable output)."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from appliance.settings import Settings, load_settings

DEFAULT_SERVER = "https://127.0.0.1:8443"


# --- local commands (run on the appliance itself) -------------------------------------

def _settings(args: argparse.Namespace) -> Settings:
    settings = load_settings(Path(args.config) if args.config else None)
    if getattr(args, "state_dir", None):
        settings = settings.with_state_dir(Path(args.state_dir))
    return settings


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from api.app import create_app
    from appliance.engine import Engine

    settings = _settings(args)
    engine = Engine.real(settings)
    tls = settings.tls and not args.no_tls
    if tls:
        engine.local.ensure_tls_certificate(settings.tls_cert, settings.tls_key,
                                            engine.local.hostname())
    uvicorn.run(
        create_app(engine),
        host=args.host or settings.listen,
        port=args.port or settings.port,
        ssl_certfile=str(settings.tls_cert) if tls else None,
        ssl_keyfile=str(settings.tls_key) if tls else None,
        log_level="info",
    )
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """The API on in-memory fakes (no ZFS/LIO/ganesha needed): to try the API anywhere."""
    import tempfile

    import uvicorn

    from api.app import create_app
    from appliance.demo import demo_engine

    engine = demo_engine(Path(args.state_dir or tempfile.mkdtemp(prefix="zds-demo-")))
    token = engine.tokens.create("demo", "admin")
    print(f"ZDS demo API (in-memory fakes, nothing is stored on disk devices)\n"
          f"  http://{args.host}:{args.port}/docs\n  token: {token}", flush=True)
    uvicorn.run(create_app(engine), host=args.host, port=args.port, log_level="warning")
    return 0


def cmd_openapi(args: argparse.Namespace) -> int:
    from api.openapi import openapi_document

    print(json.dumps(openapi_document(), indent=2))
    return 0


def _local_engine(args: argparse.Namespace) -> Any:
    from appliance.engine import Engine

    return Engine.real(_settings(args))


def cmd_token(args: argparse.Namespace) -> int:
    from appliance.services.tokens import TokenService
    from appliance.store import Store

    tokens = TokenService(Store(_settings(args).db_path))
    if args.token_cmd == "create":
        token = tokens.create(args.name, args.role)
        _out(args, {"token": token, "role": args.role, "name": args.name}, lambda d: d["token"])
    elif args.token_cmd == "list":
        _out(args, tokens.list(), lambda rows: _table(rows, ["id", "name", "role", "created",
                                                             "last_used"]))
    elif args.token_cmd == "revoke":
        tokens.revoke(args.id)
        _out(args, {"revoked": args.id}, lambda d: f"revoked {d['revoked']}")
    return 0


def cmd_hostid(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from appliance.host.local import RealLocalHost
    from appliance.host.run import SubprocessRunner
    from appliance.hostid import ensure_machine_hostid

    result = ensure_machine_hostid(RealLocalHost(SubprocessRunner()))
    if args.json:
        print(json.dumps(asdict(result)))
    elif result.source == "kept":
        print(f"zds: no machine UUID; hostid {result.hostid or '(none)'} kept")
    else:
        print(f"zds: hostid {result.hostid} from the machine UUID"
              + (" (changed)" if result.changed else ""))
    return 0


def cmd_firstboot(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from appliance.firstboot import run_firstboot

    engine = _local_engine(args)
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
    print("ZDS appliance ready. Admin API token (also in "
          f"{_settings(args).admin_token_file}):")
    print(f"  {result.token}")
    if result.demo_pool:
        print(f"  pool {result.pool!r} is a DEMO pool on sparse files: not for real data")
    print("=" * 72)
    return 0


# --- remote commands (over the REST API) ----------------------------------------------

class Client:
    def __init__(self, args: argparse.Namespace) -> None:
        import httpx

        token = args.token or os.environ.get("ZDS_TOKEN")
        if not token:
            try:
                token = Path(os.environ.get("ZDS_TOKEN_FILE", "/etc/zds/admin-token")) \
                    .read_text().strip()
            except OSError:
                token = None
        verify: bool | str = args.cacert or not args.insecure
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=args.server.rstrip("/") + "/api/v1",
                                 headers=headers, verify=verify, timeout=660)

    def call(self, method: str, path: str, body: Any = None,
             params: dict[str, Any] | None = None) -> Any:
        resp = self.http.request(method, path, json=body, params=params)
        if resp.status_code >= 400:
            try:
                err = resp.json()["error"]
                msg = f"{err['code']}: {err['message']}"
            except (ValueError, KeyError, TypeError):
                msg = resp.text
            raise SystemExit(f"zds: {resp.status_code} {msg}")
        return resp.json() if resp.content else None


def _table(rows: Sequence[dict[str, Any]], cols: list[str]) -> str:
    if not rows:
        return "(none)"
    cells = [[_cell(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(cols, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ",".join(str(v) for v in value) or "-"
    return str(value)


def _out(args: argparse.Namespace, data: Any, human: Callable[[Any], str]) -> None:
    print(json.dumps(data, indent=2) if args.json else human(data))


def _job_line(job: dict[str, Any]) -> str:
    err = f" error: {job['error']['message']}" if job.get("error") else ""
    return f"job {job['id']} {job['kind']} {job['state']}{err}"


def _out_job(args: argparse.Namespace, job: dict[str, Any]) -> int:
    """Prints a job; the exit status is 1 when it failed or was cancelled (scripts)."""
    _out(args, job, _job_line)
    return 1 if job["state"] in ("failed", "cancelled") else 0


def cmd_datastore(args: argparse.Namespace) -> int:
    c = Client(args)
    cols = ["name", "protocol", "pool", "size", "state", "serving", "connected_clients"]
    if args.ds_cmd == "list":
        _out(args, c.call("GET", "/datastores"), lambda rows: _table(rows, cols))
    elif args.ds_cmd == "get":
        _out(args, c.call("GET", f"/datastores/{args.name}"), _describe_datastore)
    elif args.ds_cmd == "put":
        body: dict[str, Any] = {"protocol": args.protocol, "size": args.size,
                                "thin": not args.thick, "profile": args.profile}
        if args.pool:
            body["pool"] = args.pool
        if args.protocol == "iscsi":
            body["iscsi"] = {"initiators": args.initiator or [],
                             "initiator_groups": args.group or []}
        else:
            body["nfs"] = {"clients": [_client(c_) for c_ in args.client or []]}
        _out(args, c.call("PUT", f"/datastores/{args.name}", body), _describe_datastore)
    elif args.ds_cmd == "delete":
        return _out_job(args, c.call("DELETE", f"/datastores/{args.name}",
                                     params={"force": args.force, "wait": args.wait}))
    elif args.ds_cmd == "attach":
        _out(args, c.call("GET", f"/datastores/{args.name}/attach"),
             lambda d: "\n".join(["# ESXi", *d["esxi"], "", "# libvirt pool XML",
                                  d["libvirt_pool_xml"], *d["virsh"]]))
    return 0


def _client(text: str) -> dict[str, str]:
    match, _, access = text.partition(":")
    if access and access not in ("rw", "ro"):  # an IPv6 address: no access suffix given
        return {"match": text, "access": "rw"}
    return {"match": match, "access": access or "rw"}


def _describe_datastore(d: dict[str, Any]) -> str:
    lines = [f"{d['name']}: {d['protocol']} on {d['pool']}, {d['size']} bytes, {d['state']}"
             f"{' (serving)' if d['serving'] else ''}"]
    if d.get("nfs"):
        lines.append(f"  export {d['nfs']['export_id']} path {d['nfs']['path']}")
    if d.get("iscsi"):
        lines.append(f"  target {d['iscsi']['iqn']} LUN 0 {d['iscsi']['wwn']}")
    if d.get("attach"):
        lines += ["  ESXi:", *(f"    {c}" for c in d["attach"]["esxi"])]
    return "\n".join(lines)


def cmd_pool(args: argparse.Namespace) -> int:
    c = Client(args)
    if args.pool_cmd == "list":
        _out(args, c.call("GET", "/pools"), lambda rows: _table(
            rows, ["name", "health", "size", "allocated", "free", "capacity", "demo"]))
    elif args.pool_cmd == "get":
        _out(args, c.call("GET", f"/pools/{args.name}"), lambda d: json.dumps(d, indent=2))
    elif args.pool_cmd == "create":
        body: dict[str, Any] = {"name": args.name, "force": args.force}
        if args.sparse:
            body["sparse_files"] = {"count": len(args.disks) or 2, "size": args.sparse,
                                    "type": args.layout}
        else:
            body["vdevs"] = ([{"type": "disk", "disks": [d]} for d in args.disks]
                             if args.layout == "disk"
                             else [{"type": args.layout, "disks": args.disks}])
        return _out_job(args, c.call("POST", "/pools", body, params={"wait": args.wait}))
    elif args.pool_cmd in ("scrub", "export", "import"):
        params: dict[str, Any] = {"wait": args.wait}
        if args.pool_cmd in ("export", "import"):
            params["force"] = args.force
        return _out_job(args, c.call("POST", f"/pools/{args.name}/{args.pool_cmd}",
                                     params=params))
    return 0


def cmd_snapshot(args: argparse.Namespace) -> int:
    c = Client(args)
    base = f"/datastores/{args.datastore}/snapshots"
    if args.snap_cmd == "list":
        _out(args, c.call("GET", base), lambda rows: _table(
            rows, ["name", "created", "used", "referenced", "clones"]))
    elif args.snap_cmd == "create":
        _out(args, c.call("POST", base, {"name": args.name}), lambda d: f"created {d['full_name']}")
    elif args.snap_cmd == "rollback":
        _out(args, c.call("POST", f"{base}/{args.name}/rollback",
                          {"destroy_newer": args.destroy_newer, "force": args.force}),
             lambda d: f"rolled back to {d['full_name']}")
    elif args.snap_cmd == "delete":
        c.call("DELETE", f"{base}/{args.name}")
        _out(args, {"deleted": args.name}, lambda d: f"deleted {d['deleted']}")
    return 0


def cmd_igroup(args: argparse.Namespace) -> int:
    c = Client(args)
    if args.ig_cmd == "list":
        _out(args, c.call("GET", "/initiator-groups"),
             lambda rows: _table(rows, ["name", "initiators", "used_by"]))
    elif args.ig_cmd == "put":
        _out(args, c.call("PUT", f"/initiator-groups/{args.name}",
                          {"initiators": args.initiators}),
             lambda d: f"{d['name']}: {', '.join(d['initiators'])}")
    elif args.ig_cmd == "delete":
        c.call("DELETE", f"/initiator-groups/{args.name}")
        _out(args, {"deleted": args.name}, lambda d: f"deleted {d['deleted']}")
    return 0


def cmd_job(args: argparse.Namespace) -> int:
    c = Client(args)
    if args.job_cmd == "list":
        _out(args, c.call("GET", "/jobs"), lambda rows: _table(
            rows, ["id", "kind", "target", "state", "progress"]))
    else:
        return _out_job(args, c.call("GET", f"/jobs/{args.id}", params={"wait": args.wait}))
    return 0


def cmd_system(args: argparse.Namespace) -> int:
    c = Client(args)
    path = {"health": "/system/health", "drift": "/system/drift",
            "version": "/system/version"}[args.sys_cmd]
    if args.sys_cmd == "reconcile":
        _out(args, c.call("POST", "/system/reconcile"), lambda d: json.dumps(d, indent=2))
        return 0
    _out(args, c.call("GET", path), lambda d: json.dumps(d, indent=2))
    return 0


# --- parser ---------------------------------------------------------------------------

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

    t = sub.add_parser("token", help="API tokens (local, on the appliance)")
    tsub = t.add_subparsers(dest="token_cmd", required=True)
    tc = tsub.add_parser("create")
    tc.add_argument("--role", choices=["admin", "readonly"], default="readonly")
    tc.add_argument("--name", default="cli")
    tsub.add_parser("list")
    tr = tsub.add_parser("revoke")
    tr.add_argument("id")
    t.set_defaults(func=cmd_token)

    d = sub.add_parser("datastore", help="datastores (over the API)")
    dsub = d.add_subparsers(dest="ds_cmd", required=True)
    dsub.add_parser("list")
    for name in ("get", "attach"):
        dsub.add_parser(name).add_argument("name")
    dp = dsub.add_parser("put", help="create or update")
    dp.add_argument("name")
    dp.add_argument("--protocol", choices=["nfs3", "nfs41", "iscsi"], required=True)
    dp.add_argument("--size", required=True)
    dp.add_argument("--pool")
    dp.add_argument("--thick", action="store_true")
    dp.add_argument("--profile", choices=["vmware", "kvm"], default="vmware")
    dp.add_argument("--client", action="append", help="NFS client[:rw|ro], repeatable")
    dp.add_argument("--initiator", action="append", help="initiator IQN, repeatable")
    dp.add_argument("--group", action="append", help="initiator group, repeatable")
    dd = dsub.add_parser("delete")
    dd.add_argument("name")
    dd.add_argument("--force", action="store_true")
    dd.add_argument("--wait", type=float, default=60)
    d.set_defaults(func=cmd_datastore)

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

    ig = sub.add_parser("igroup", help="initiator groups (over the API)")
    isub = ig.add_subparsers(dest="ig_cmd", required=True)
    isub.add_parser("list")
    ip = isub.add_parser("put")
    ip.add_argument("name")
    ip.add_argument("initiators", nargs="+")
    isub.add_parser("delete").add_argument("name")
    ig.set_defaults(func=cmd_igroup)

    j = sub.add_parser("job", help="jobs (over the API)")
    jsub = j.add_subparsers(dest="job_cmd", required=True)
    jsub.add_parser("list")
    jg = jsub.add_parser("get")
    jg.add_argument("id")
    jg.add_argument("--wait", type=float, default=0)
    j.set_defaults(func=cmd_job)

    sy = sub.add_parser("system", help="health, drift, version, reconcile (over the API)")
    sy.add_argument("sys_cmd", choices=["health", "drift", "version", "reconcile"])
    sy.set_defaults(func=cmd_system)

    _optional_commands(sub)
    return p


def _optional_commands(sub: Any) -> None:
    """Command groups other modules contribute (probes)."""
    try:
        mod = importlib.import_module("api.cli_probe")
    except ModuleNotFoundError as exc:
        if exc.name != "api.cli_probe":
            raise
        return
    mod.add_probe_commands(sub)


def main(argv: Sequence[str] | None = None) -> int:
    from appliance.errors import ZdsError

    args = build_parser().parse_args(argv)
    try:
        rc: int = args.func(args)
    except ZdsError as exc:
        print(f"zds: {exc.message}", file=sys.stderr)
        return 2
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
