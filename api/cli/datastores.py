"""``zds datastore``: list | get | put | delete | attach (over the REST API)."""

from __future__ import annotations

import argparse
from typing import Any

from api.cli.common import client, out, out_job, table
from appliance.transports.registry import protocols, transport_type

COLUMNS = ["name", "protocol", "pool", "size", "state", "serving", "connected_clients"]


def cmd_datastore(args: argparse.Namespace) -> int:
    c = client(args)
    if args.ds_cmd == "list":
        out(args, c.call("GET", "/datastores"), lambda rows: table(rows, COLUMNS))
    elif args.ds_cmd == "get":
        out(args, c.call("GET", f"/datastores/{args.name}"), describe)
    elif args.ds_cmd == "put":
        body: dict[str, Any] = {"protocol": args.protocol, "size": args.size,
                                "thin": not args.thick, "profile": args.profile}
        if args.pool:
            body["pool"] = args.pool
        if args.label:
            if not all("=" in kv for kv in args.label):
                raise SystemExit("zds: --label wants KEY=VALUE")
            body["labels"] = dict(kv.split("=", 1) for kv in args.label)
        # the access section of the fields the protocol's transport takes
        fields = t.access_fields if (t := transport_type(args.protocol)) else ()
        if "initiators" in fields:
            body["iscsi"] = {"initiators": args.initiator or [],
                             "initiator_groups": args.group or []}
        if "nfs_clients" in fields:
            body["nfs"] = {"clients": [nfs_client(c_) for c_ in args.client or []]}
        if "nvme_hosts" in fields:
            body["nvme"] = {"hosts": args.host_nqn or [], "initiator_groups": args.group or []}
        out(args, c.call("PUT", f"/datastores/{args.name}", body), describe)
    elif args.ds_cmd == "delete":
        return out_job(args, c.call("DELETE", f"/datastores/{args.name}",
                                    params={"force": args.force, "wait": args.wait}))
    elif args.ds_cmd == "attach":
        params = {k: v for k, v in (("server", args.address), ("port", args.port)) if v}
        out(args, c.call("GET", f"/datastores/{args.name}/attach", params=params or None),
            lambda d: "\n".join([*(["# Linux", *d["linux"], ""] if d.get("linux") else []),
                                 "# ESXi", *d["esxi"], "", "# libvirt pool XML",
                                 d["libvirt_pool_xml"], *d["virsh"]]))
    return 0


def nfs_client(text: str) -> dict[str, str]:
    """``MATCH[:rw|ro]`` -> an NFS client rule (an IPv6 address keeps its colons)."""
    match, _, access = text.partition(":")
    if access and access not in ("rw", "ro"):  # an IPv6 address: no access suffix given
        return {"match": text, "access": "rw"}
    return {"match": match, "access": access or "rw"}


def describe(d: dict[str, Any]) -> str:
    lines = [f"{d['name']}: {d['protocol']} on {d['pool']}, {d['size']} bytes, {d['state']}"
             f"{' (serving)' if d['serving'] else ''}"]
    if d.get("nfs"):
        lines.append(f"  export {d['nfs']['export_id']} path {d['nfs']['path']}")
    if d.get("iscsi"):
        lines.append(f"  target {d['iscsi']['iqn']} LUN 0 {d['iscsi']['wwn']}")
    if d.get("nvme"):
        lines.append(f"  subsystem {d['nvme']['nqn']} namespace 1 eui.{d['nvme']['nguid']}")
    if d.get("labels"):
        lines.append("  labels " + ", ".join(f"{k}={v}" for k, v in d["labels"].items()))
    p = d.get("protection")
    if p:
        lines.append(f"  snapshot policies {', '.join(p['policies']) or '-'}: last snapshot "
                     + (f"{p['last_snapshot']} ({p['age']:.0f} s ago)" if p["last_snapshot"]
                        else "none yet")
                     + (f"; last failure: {p['last_error']}" if p["last_error"] else ""))
    if d.get("attach"):
        lines += ["  ESXi:", *(f"    {c}" for c in d["attach"]["esxi"])]
    return "\n".join(lines)


def register(sub: Any) -> None:
    d = sub.add_parser("datastore", help="datastores (over the API)")
    dsub = d.add_subparsers(dest="ds_cmd", required=True)
    dsub.add_parser("list")
    dsub.add_parser("get").add_argument("name")
    da = dsub.add_parser("attach", help="esxcli commands and the libvirt pool XML")
    da.add_argument("name")
    da.add_argument("--address", help="the appliance's address as clients know it")
    da.add_argument("--port", type=int,
                    help="the port clients reach iSCSI at, when forwarded (NAT)")
    dp = dsub.add_parser("put", help="create or update")
    dp.add_argument("name")
    dp.add_argument("--protocol", choices=protocols(), required=True)
    dp.add_argument("--size", required=True)
    dp.add_argument("--pool")
    dp.add_argument("--thick", action="store_true")
    dp.add_argument("--profile", choices=["vmware", "kvm"], default="vmware")
    dp.add_argument("--client", action="append", help="NFS client[:rw|ro], repeatable")
    dp.add_argument("--initiator", action="append", help="initiator IQN, repeatable")
    dp.add_argument("--group", action="append", help="initiator group, repeatable")
    dp.add_argument("--host-nqn", action="append",
                    help="NVMe host NQN allowed to connect (nvme-tcp), repeatable")
    dp.add_argument("--label", action="append",
                    help="KEY=VALUE that snapshot policies select by, repeatable")
    dd = dsub.add_parser("delete")
    dd.add_argument("name")
    dd.add_argument("--force", action="store_true")
    dd.add_argument("--wait", type=float, default=60)
    d.set_defaults(func=cmd_datastore)
