"""``zds policy``: list | get | put | delete | run, and ``zds vcenter``: list | get | put |
delete (over the REST API)."""

from __future__ import annotations

import argparse
import getpass
import os
import shlex
import time
from typing import Any

from api.cli.common import client, out, table

COLUMNS = ["name", "schedule", "retention", "covered", "last_run", "next_run"]


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(t)) if t else "-"


def _every(seconds: int) -> str:
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def run_summary(job: dict[str, Any]) -> str:
    """A run's job in a few lines: what was taken, pruned, kept, quiesced, and why not."""
    lines = [f"job {job['id']} {job['kind']} {job['state']}"]
    if job.get("error"):
        lines.append(f"  error: {job['error']['message']}")
    r = job.get("result") or {}
    if r.get("snapshot"):
        lines.append(f"  snapshot {r['snapshot']} of {r['taken']} datastore(s) "
                     f"({r['consistency']}-consistent)")
        pruned = sum(len(v) for v in r["pruned"].values())
        kept = [f"{k['snapshot']} ({k['reason']})" for v in r["kept"].values() for k in v]
        lines.append(f"  pruned {pruned}" + (f"; kept past retention: {', '.join(kept)}"
                                             if kept else ""))
    vm = r.get("vmware")
    if vm:
        lines.append(f"  VMs quiesced: {', '.join(v['vm'] for v in vm['quiesced']) or '-'}; "
                     f"powered off: {', '.join(v['vm'] for v in vm['powered_off']) or '-'}")
    for h in r.get("hooks", []):
        lines.append(f"  {h['phase']} hook {' '.join(h['argv'])}: {h['summary']}"
                     + (f": {h['stdout'].strip()}" if h["stdout"].strip() else ""))
    lines += [f"  warning: {w}" for w in r.get("warnings", [])]
    return "\n".join(lines)


def _row(p: dict[str, Any]) -> dict[str, Any]:
    s = p["schedule"]
    keep = ",".join(f"{k}={v}" for k, v in p["retention"].items() if v)
    last = p.get("last_run")
    return {"name": p["name"] + ("" if p["enabled"] else " (disabled)"),
            "schedule": f"every {_every(s['every'])}" if s.get("every") else
            f"{s['cron']} {s['timezone']}",
            "retention": keep, "covered": p["covered"],
            "last_run": f"{last['state']} {_when(last['at'])}" if last else "-",
            "next_run": _when(p.get("next_run"))}


def describe(p: dict[str, Any]) -> str:
    r = _row(p)
    lines = [f"{p['name']}: {r['schedule']}, keep {r['retention']}",
             f"  datastores: {', '.join(p['covered']) or '(none)'}"
             + (f"  (missing: {', '.join(p['missing'])})" if p["missing"] else ""),
             f"  next run: {r['next_run']}"]
    if p.get("last_run"):
        lines.append(f"  last run: {p['last_run']['state']} at {_when(p['last_run']['at'])}: "
                     f"{p['last_run']['message']}")
    if p.get("vmware"):
        lines.append(f"  VMware: quiesce through {p['vmware']['vcenter']}")
    if p.get("hooks"):
        lines.append(f"  hooks: pre {p['hooks']['pre']} post {p['hooks']['post']}")
    return "\n".join(lines)


def body_of(args: argparse.Namespace) -> dict[str, Any]:
    if bool(args.every) == bool(args.cron):
        raise SystemExit("zds: give exactly one of --every and --cron")
    schedule: dict[str, Any] = {"timezone": args.timezone}
    if args.every:
        schedule["every"] = args.every
    else:
        schedule["cron"] = args.cron
    retention = {k: getattr(args, k) for k in ("frequent", "hourly", "daily", "weekly",
                                               "monthly", "yearly") if getattr(args, k)}
    labels = dict(kv.split("=", 1) for kv in args.label or [] if "=" in kv)
    if len(labels) != len(args.label or []):
        raise SystemExit("zds: --label wants KEY=VALUE")
    body: dict[str, Any] = {
        "schedule": schedule, "retention": retention, "enabled": not args.disabled,
        "datastores": {"names": args.datastore or [], "all": args.all, "labels": labels}}
    if args.vcenter:
        body["vmware"] = {"vcenter": args.vcenter, "quiesce": not args.no_quiesce,
                          "timeout": args.vmware_timeout}
    if args.pre or args.post:
        body["hooks"] = {"pre": shlex.split(args.pre) if args.pre else [],
                         "post": shlex.split(args.post) if args.post else [],
                         "timeout": args.hook_timeout}
    return body


def cmd_policy(args: argparse.Namespace) -> int:
    c = client(args)
    if args.policy_cmd == "list":
        out(args, c.call("GET", "/snapshot-policies"),
            lambda rows: table([_row(p) for p in rows], COLUMNS))
    elif args.policy_cmd == "get":
        out(args, c.call("GET", f"/snapshot-policies/{args.name}"), describe)
    elif args.policy_cmd == "put":
        out(args, c.call("PUT", f"/snapshot-policies/{args.name}", body_of(args)), describe)
    elif args.policy_cmd == "delete":
        c.call("DELETE", f"/snapshot-policies/{args.name}")
        out(args, {"deleted": args.name}, lambda d: f"deleted {d['deleted']}")
    elif args.policy_cmd == "run":
        job = c.call("POST", f"/snapshot-policies/{args.name}/run", params={"wait": args.wait})
        out(args, job, run_summary)
        return 1 if job["state"] in ("failed", "cancelled") else 0
    return 0


def cmd_vcenter(args: argparse.Namespace) -> int:
    c = client(args)
    cols = ["name", "host", "port", "user", "insecure", "used_by"]
    if args.vc_cmd == "list":
        out(args, c.call("GET", "/vcenters"), lambda rows: table(rows, cols))
    elif args.vc_cmd == "get":
        out(args, c.call("GET", f"/vcenters/{args.name}"), lambda d: table([d], cols))
    elif args.vc_cmd == "put":
        # the password from the environment or a prompt: never on the command line
        password = os.environ.get("ZDS_VCENTER_PASSWORD") or getpass.getpass(
            f"password of {args.user} on {args.host}: ")
        out(args, c.call("PUT", f"/vcenters/{args.name}", {
            "host": args.host, "port": args.port, "user": args.user, "password": password,
            "insecure": args.insecure, "verify": not args.no_verify}),
            lambda d: f"vCenter {d['name']}: {d['user']}@{d['host']}:{d['port']}")
    elif args.vc_cmd == "delete":
        c.call("DELETE", f"/vcenters/{args.name}")
        out(args, {"deleted": args.name}, lambda d: f"deleted {d['deleted']}")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("policy", help="snapshot policies (over the API)")
    psub = p.add_subparsers(dest="policy_cmd", required=True)
    psub.add_parser("list")
    for name in ("get", "delete"):
        psub.add_parser(name).add_argument("name")
    run = psub.add_parser("run", help="run now; exit 1 when the run failed")
    run.add_argument("name")
    run.add_argument("--wait", type=float, default=300)
    put = psub.add_parser("put", help="create or replace")
    put.add_argument("name")
    put.add_argument("--every", help="interval: 30s, 15m, 6h, 1d")
    put.add_argument("--cron", help="cron times, e.g. '0 2 * * *'")
    put.add_argument("--timezone", default="UTC", help="IANA zone for --cron and retention")
    for cls in ("frequent", "hourly", "daily", "weekly", "monthly", "yearly"):
        put.add_argument(f"--{cls}", type=int, default=0, help=f"keep N {cls} snapshots")
    put.add_argument("--datastore", action="append", help="datastore name, repeatable")
    put.add_argument("--all", action="store_true", help="every datastore")
    put.add_argument("--label", action="append", help="KEY=VALUE on datastores, repeatable")
    put.add_argument("--disabled", action="store_true")
    put.add_argument("--vcenter", help="quiesce VMs through this registered vCenter")
    put.add_argument("--no-quiesce", action="store_true")
    put.add_argument("--vmware-timeout", type=float, default=300)
    put.add_argument("--pre", help="pre hook: program (in /etc/zds/hooks) and arguments, "
                                   "split like a shell would (no shell runs it)")
    put.add_argument("--post", help="post hook")
    put.add_argument("--hook-timeout", type=float, default=60)
    p.set_defaults(func=cmd_policy)

    v = sub.add_parser("vcenter", help="vCenters for VM-consistent snapshots (over the API)")
    vsub = v.add_subparsers(dest="vc_cmd", required=True)
    vsub.add_parser("list")
    for name in ("get", "delete"):
        vsub.add_parser(name).add_argument("name")
    vp = vsub.add_parser("put", help="register; the password comes from "
                                     "$ZDS_VCENTER_PASSWORD or a prompt")
    vp.add_argument("name")
    vp.add_argument("--host", required=True)
    vp.add_argument("--port", type=int, default=443)
    vp.add_argument("--user", required=True)
    vp.add_argument("--insecure", action="store_true", help="accept a self-signed certificate")
    vp.add_argument("--no-verify", action="store_true", help="store without logging in")
    v.set_defaults(func=cmd_vcenter)
