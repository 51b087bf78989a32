"""``zds replication``: list | show | put | delete | run | check | promote | identity |
authorize | keys | revoke (over the REST API)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from api.cli.common import client, out, out_job, table


def _status_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    now = time.time()
    flat = []
    for r in rows:
        o, i = r.get("outgoing"), r.get("incoming")
        if o:
            st = o["status"]
            flat.append({"name": r["name"], "role": "source", "datastore": o["datastore"],
                         "target": f"{o['target']['host']}:{o['target']['dataset']}",
                         "state": st["state"], "last": st["last_snapshot"],
                         "lag_s": st["lag_seconds"],
                         "error": (st["last_error"] or {}).get("message")})
        if i:
            flat.append({"name": r["name"], "role": "target", "datastore": i["datastore"],
                         "target": i["dataset"],
                         "state": "resumable" if i["resume_pending"] else "replica",
                         "last": i["newest_snapshot"],
                         "lag_s": round(now - i["newest_created"]) if i["newest_created"]
                         else None, "error": None})
    return flat


def cmd_replication(args: argparse.Namespace) -> int:
    c = client(args)
    cols = ["name", "role", "datastore", "target", "state", "last", "lag_s", "error"]
    cmd = args.repl_cmd
    if cmd == "list":
        out(args, c.call("GET", "/replications"), lambda rows: table(_status_rows(rows), cols))
    elif cmd == "show":
        out(args, c.call("GET", f"/replications/{args.name}"),
            lambda d: table(_status_rows([d]), cols))
    elif cmd == "put":
        target: dict[str, Any] = {"host": args.target_host, "dataset": args.target_dataset,
                                  "port": args.target_port, "user": args.target_user}
        if args.host_key:
            target["host_key"] = args.host_key
        body: dict[str, Any] = {
            "datastore": args.datastore, "target": target, "interval": args.interval,
            "after_snapshot_policy": args.after_snapshot_policy,
            "take_snapshot": not args.no_snapshot, "raw": args.raw,
            "bandwidth_limit": args.bwlimit, "enabled": not args.disabled,
            "transport": args.transport}
        out(args, c.call("PUT", f"/replications/{args.name}", body),
            lambda d: table(_status_rows([d]), cols))
    elif cmd == "delete":
        c.call("DELETE", f"/replications/{args.name}")
        out(args, {"deleted": args.name}, lambda d: f"deleted {d['deleted']} (the replica on "
                                                    "the target is kept)")
    elif cmd == "run":
        return out_job(args, c.call("POST", f"/replications/{args.name}/run",
                                    params={"wait": args.wait}))
    elif cmd == "check":
        out(args, c.call("POST", f"/replications/{args.name}/check"),
            lambda d: "\n".join(f"{k}: {v}" for k, v in d.items()))
    elif cmd == "promote":
        pbody: dict[str, Any] = {"identity": "keep" if args.keep_identity else "new"}
        if args.as_name:
            pbody["name"] = args.as_name
        if args.nfs_path:
            pbody["nfs_path"] = args.nfs_path
        if args.client:
            pbody["nfs"] = {"clients": [{"match": m, "access": "rw"} for m in args.client]}
        if args.initiator:
            pbody["iscsi"] = {"initiators": args.initiator}
        if args.keep_access:
            pbody["keep_access"] = True
        out(args, c.call("POST", f"/replications/{args.name}/promote", pbody),
            lambda d: "\n".join([f"promoted to datastore {d['datastore']['name']} "
                                 f"(serving: {d['datastore']['serving']})", *d["notes"]]))
    elif cmd == "identity":
        out(args, c.call("GET", "/replication/identity"), lambda d: d["public_key"])
    elif cmd == "authorize":
        kbody = {"public_key": args.public_key, "dataset_prefix": args.prefix,
                 "sources": args.source or []}
        out(args, c.call("PUT", f"/replication/authorized-keys/{args.name}", kbody),
            lambda d: f"authorized {d['name']} for {d['dataset_prefix']}")
    elif cmd == "keys":
        out(args, c.call("GET", "/replication/authorized-keys"),
            lambda rows: table(rows, ["name", "dataset_prefix", "sources", "public_key"]))
    elif cmd == "revoke":
        c.call("DELETE", f"/replication/authorized-keys/{args.name}")
        out(args, {"revoked": args.name}, lambda d: f"revoked {d['revoked']}")
    return 0


def register(sub: Any) -> None:
    rp = sub.add_parser("replication", help="replicate datastores to another appliance; "
                                            "promote replicas (over the API)")
    rsub = rp.add_subparsers(dest="repl_cmd", required=True)
    rsub.add_parser("list", help="outgoing replications and replicas held here")
    for name in ("show", "delete", "check"):
        rsub.add_parser(name).add_argument("name")
    run = rsub.add_parser("run", help="run now (a job)")
    run.add_argument("name")
    run.add_argument("--wait", type=float, default=0, help="seconds to wait for the job")
    put = rsub.add_parser("put", help="create or update an outgoing replication")
    put.add_argument("name")
    put.add_argument("--datastore", required=True)
    put.add_argument("--target-host", required=True)
    put.add_argument("--target-dataset", required=True)
    put.add_argument("--target-port", type=int, default=22)
    put.add_argument("--target-user", default="root")
    put.add_argument("--host-key", help="pin this SSH host key of the target")
    put.add_argument("--interval", help="e.g. 15m; none: on request/after policies only")
    put.add_argument("--after-snapshot-policy", action="store_true")
    put.add_argument("--no-snapshot", action="store_true",
                     help="send the newest existing snapshot instead of taking one")
    put.add_argument("--raw", action="store_true", help="zfs send -w (encrypted datasets)")
    put.add_argument("--bwlimit", help="bytes/s, e.g. 50M")
    put.add_argument("--transport", choices=["ssh", "ssh+tcp"], default="ssh",
                     help="ssh+tcp: the stream over plain TCP (trusted links, ZDS targets)")
    put.add_argument("--disabled", action="store_true")
    pr = rsub.add_parser("promote", help="on the target: serve the replica as a datastore")
    pr.add_argument("name")
    pr.add_argument("--as", dest="as_name", help="datastore name (default: the source's)")
    pr.add_argument("--keep-identity", action="store_true",
                    help="iSCSI: keep the source's IQN and NAA id (source gone for good)")
    pr.add_argument("--nfs-path", choices=["source", "local"])
    pr.add_argument("--client", action="append", help="NFS client (repeat)")
    pr.add_argument("--initiator", action="append", help="iSCSI initiator IQN (repeat)")
    pr.add_argument("--keep-access", action="store_true",
                    help="use the source's NFS clients / initiators carried by the replica "
                         "for those not given (default: none)")
    rsub.add_parser("identity", help="this appliance's replication public key")
    au = rsub.add_parser("authorize", help="on the target: accept a source's key")
    au.add_argument("name")
    au.add_argument("--public-key", required=True)
    au.add_argument("--prefix", required=True, help="dataset the source may receive into")
    au.add_argument("--source", action="append", help="address/CIDR it connects from")
    rsub.add_parser("keys", help="source keys authorized here")
    rsub.add_parser("revoke").add_argument("name")
    rp.set_defaults(func=cmd_replication)
