"""``zds probe``: list | profiles | run | show | compare | plot | report | cancel |
protocols | comparison.

``zds probe run PROFILE --datastore D`` asks the appliance to run a probe (a job) and
prints the result. With ``--path P`` (or ``--device DEV --force``, or ``--here`` for
rtt/net-throughput) it runs in *client mode*: fio runs on this machine against the mounted
datastore and the result is posted to the API, so it sits beside the appliance's own.

``zds probe protocols PROFILE --pool P`` runs the protocol comparison (the same profile
through every protocol and on a dataset and a zvol, interleaved) and prints its table;
``zds probe comparison ID`` prints one again, ``--plot``/``--report`` write its chart or
HTML page.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from api.cli.common import client, out, table, wiring
from appliance.transports.registry import probe_targets

STEP_COLS = [("iops", "IOPS"), ("mbps", "MB/s"), ("lat_mean_ms", "mean ms"),
             ("lat_p50_ms", "p50"), ("lat_p95_ms", "p95"), ("lat_p99_ms", "p99"),
             ("lat_p999_ms", "p99.9")]


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        if v == 0:
            return "0"
        if abs(v) >= 100:
            return f"{v:,.0f}"
        if abs(v) >= 1:
            return f"{v:.2f}"
        return f"{v:.4f}"
    return "-" if v is None else str(v)


def describe_result(r: dict[str, Any]) -> str:
    t = r.get("target", {})
    lines = [f"{r['id']}  {r['profile']} on {t.get('kind')}:{t.get('datastore')}  "
             f"{r['status']}  {r['started_at']} .. {r['ended_at']}"]
    if r.get("error"):
        lines.append(f"  error: {r['error']}")
    s = r.get("summary", {})
    if s:
        lines.append("  " + "  ".join(f"{label} {_fmt(s[k])}" for k, label in STEP_COLS
                                      if k in s))
        extra = {k: v for k, v in s.items() if k.endswith("_ms") and k not in
                 dict(STEP_COLS) and not k.startswith(("read_lat", "write_lat", "lat_"))}
        extra.update({k: s[k] for k in ("gbps", "peak_at") if k in s})
        if extra:
            lines.append("  " + "  ".join(f"{k} {_fmt(v)}" for k, v in extra.items()))
    cpu = r.get("cpu") or {}
    arc = r.get("arc") or {}
    if cpu.get("mean_pct") is not None or arc:
        lines.append(f"  cpu {_fmt(cpu.get('mean_pct'))}%  arc hit ratio "
                     f"{_fmt(arc.get('hit_ratio'))}")
    steps = r.get("steps", [])
    if len(steps) > 1:
        rows = [{"step": st["label"], **{label: _fmt(st["metrics"].get(k))
                                         for k, label in STEP_COLS}} for st in steps]
        lines.append(table(rows, ["step", *(label for _, label in STEP_COLS)]))
    pub = r.get("published") or []
    if pub:
        lines.append("published figures:")
        lines.append(table([{"metric": p["metric"], "step": p["step"] or "-",
                              "context": p["context"],
                              "published": f"{_fmt(p['published'])} {p['unit']}",
                              "measured": _fmt(p["measured"]), "ratio": _fmt(p["ratio"])}
                             for p in pub],
                            ["metric", "step", "context", "published", "measured", "ratio"]))
    return "\n".join(lines)


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in args.set or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"zds: --set wants KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    if args.preset:
        out["preset"] = args.preset
    return out


def _client_run(args: argparse.Namespace) -> dict[str, Any]:
    from appliance.probes.client import run_on_client
    from appliance.probes.execute import CancelToken

    workroot = args.workdir or str(Path.home() / ".cache" / "zds" / "probe-work")
    tools = wiring(args).client_tools(workroot)
    token = CancelToken()
    host = urlparse(args.server).hostname or "127.0.0.1"
    try:
        result = run_on_client(
            tools.executor, args.profile, _overrides(args), args.datastore, path=args.path,
            device=args.device, force=args.force, usage=tools.usage,
            make_dir=tools.make_dir, remove_tree=tools.remove_tree, is_block=tools.is_block,
            cancel=token, hostname=tools.hostname, appliance_host=host)
    except KeyboardInterrupt:
        token.cancel()
        raise
    body = result.to_dict()
    if args.no_post:
        return body
    posted: dict[str, Any] = client(args).call("POST", "/probes/results", body)
    return posted


def _follow(c: Any, job: dict[str, Any], wait: float) -> dict[str, Any]:
    """The job as it stands when it ends, or after ``wait`` seconds."""
    deadline = time.monotonic() + wait
    while job["state"] in ("queued", "running") and time.monotonic() < deadline:
        job = c.call("GET", f"/jobs/{job['id']}",
                     params={"wait": min(600, max(1, deadline - time.monotonic()))})
    return job


def cmd_probe(args: argparse.Namespace) -> int:
    cmd = args.probe_cmd
    if cmd == "run" and (args.path or args.device or args.here):
        r = _client_run(args)
        out(args, r, describe_result)
        return 0 if r["status"] == "ok" else 1
    c = client(args)
    if cmd == "profiles" or (cmd == "list" and args.profiles):
        out(args, c.call("GET", "/probes/profiles"),
             lambda rows: table(rows, ["name", "kind", "what"]))
    elif cmd == "list":
        params = {k: v for k, v in (("profile", args.profile), ("datastore", args.datastore),
                                    ("target", args.target), ("status", args.status),
                                    ("limit", args.limit)) if v is not None}
        rows = c.call("GET", "/probes/results", params=params)
        out(args, rows, lambda rs: table([{
            "id": r["id"], "profile": r["profile"], "target": r["target"].get("kind"),
            "datastore": r["target"].get("datastore"), "status": r["status"],
            "started": r["started_at"], "iops": _fmt(r["summary"].get("iops")),
            "mbps": _fmt(r["summary"].get("mbps")),
            "p99_ms": _fmt(r["summary"].get("lat_p99_ms"))} for r in rs],
            ["id", "profile", "target", "datastore", "status", "started", "iops", "mbps",
             "p99_ms"]))
    elif cmd == "run":
        job = c.call("POST", "/probes", {"profile": args.profile, "datastore": args.datastore,
                                         "target": args.target or "local",
                                         "overrides": _overrides(args)},
                     params={"wait": min(args.wait, 600)})
        rid = job["result_id"]
        job = _follow(c, job, args.wait)
        if job["state"] in ("queued", "running"):
            out(args, job, lambda j: f"probe {rid} still {j['state']} (job {j['id']})")
            return 0
        try:
            r = c.call("GET", f"/probes/results/{rid}")
        except SystemExit:
            out(args, job, lambda j: f"job {j['id']} {j['state']}: {j.get('error')}")
            return 1
        out(args, r, describe_result)
        return 0 if r["status"] == "ok" else 1
    elif cmd == "show":
        out(args, c.call("GET", f"/probes/results/{args.id}"), describe_result)
    elif cmd == "compare":
        d = c.call("GET", "/probes/compare", params={"a": args.a, "b": args.b})
        out(args, d, lambda x: f"a={x['a']} ({x['profile_a']})  b={x['b']} "
                                f"({x['profile_b']})\n" + table(
            [{"metric": m["metric"], "a": _fmt(m["a"]), "b": _fmt(m["b"]),
              "b/a": _fmt(m["ratio"]), "better": m["better"]} for m in x["summary"]],
            ["metric", "a", "b", "b/a", "better"]))
    elif cmd == "plot":
        query: dict[str, Any] = {"format": args.format}
        if args.kind:
            query["kind"] = args.kind
        if args.with_:
            query["with"] = ",".join(args.with_)
        resp = c.http.get(f"/probes/results/{args.id}/plot", params=query)
        if resp.status_code >= 400:
            raise SystemExit(f"zds: {resp.status_code} {resp.text}")
        Path(args.output).write_bytes(resp.content)
        out(args, {"written": args.output}, lambda d: f"wrote {d['written']}")
    elif cmd == "report":
        resp = c.http.get("/probes/report", params={"ids": ",".join(args.ids),
                                                    "title": args.title})
        if resp.status_code >= 400:
            raise SystemExit(f"zds: {resp.status_code} {resp.text}")
        if args.output == "-":
            sys.stdout.write(resp.text)
        else:
            Path(args.output).write_text(resp.text)
            out(args, {"written": args.output}, lambda d: f"wrote {d['written']}")
    elif cmd == "protocols":
        body: dict[str, Any] = {"pool": args.pool, "profile": args.profile,
                                "rounds": args.rounds, "overrides": _overrides(args)}
        if args.leg:
            body["legs"] = args.leg
        job = c.call("POST", "/probes/comparisons", body, params={"wait": min(args.wait, 600)})
        cid = job["comparison_id"]  # the job's own record (GET /jobs) does not carry it
        job = _follow(c, job, args.wait)
        if job["state"] in ("queued", "running"):
            out(args, job, lambda j: f"comparison {cid} still {j['state']} (job {j['id']})")
            return 0
        return _show_comparison(args, c, cid)
    elif cmd == "comparison":
        return _show_comparison(args, c, args.id)
    elif cmd == "cancel":
        out(args, c.call("POST", f"/probes/{args.id}/cancel"),
             lambda d: f"cancelled {d['cancelled']}")
    return 0


COMPARISON_COLS = [("leg", "leg"), ("baseline", "vs"), ("runs", "runs"), ("iops", "IOPS"),
                   ("mbps", "MB/s"), ("lat_p50_ms", "p50 ms"), ("lat_p99_ms", "p99 ms"),
                   ("cpu_us_per_io", "CPU us/IO"), ("iops_vs_baseline", "IOPS/vs"),
                   ("p99_vs_baseline", "p99/vs")]


def describe_comparison(v: dict[str, Any]) -> str:
    lines = [f"comparison {v['id']}: {v['profile']} on pool {v['pool']}, {v['rounds']} "
             f"round(s){'' if v['complete'] else ' (not complete)'}",
             table([{label: _fmt(row.get(k)) if k not in ("leg", "baseline") else
                     (row[k] or "-") for k, label in COMPARISON_COLS} for row in v["rows"]],
                   [label for _, label in COMPARISON_COLS])]
    failed = [r for r in v["results"] if r["status"] != "ok"]
    lines += [f"  {r['leg']} round {r['round']}: {r['status']} {r['error']} ({r['id']})"
              for r in failed]
    return "\n".join(lines)


def _show_comparison(args: argparse.Namespace, c: Any, comparison_id: str) -> int:
    v = c.call("GET", f"/probes/comparisons/{comparison_id}")
    for path, what, query in ((args.plot, "plot", {"format": "png" if str(args.plot)
                                                    .endswith(".png") else "svg"}),
                              (args.report, "report", {})):
        if path:
            resp = c.http.get(f"/probes/comparisons/{comparison_id}/{what}", params=query)
            if resp.status_code >= 400:
                raise SystemExit(f"zds: {resp.status_code} {resp.text}")
            Path(path).write_bytes(resp.content)
    out(args, v, describe_comparison)
    return 0 if v["complete"] and all(r["status"] == "ok" for r in v["results"]) else 1


def register(sub: Any) -> None:
    p = sub.add_parser("probe", help="performance probes (profiles from the probe catalogue)",
                       description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    ps = p.add_subparsers(dest="probe_cmd", required=True)
    lst = ps.add_parser("list", help="results (newest first); --profiles: the catalogue")
    lst.add_argument("--profiles", action="store_true")
    lst.add_argument("--profile")
    lst.add_argument("--datastore")
    lst.add_argument("--target", choices=["local", *probe_targets(), "client"])
    lst.add_argument("--status", choices=["ok", "failed", "cancelled"])
    lst.add_argument("--limit", type=int)
    ps.add_parser("profiles", help="the profile catalogue")

    run = ps.add_parser("run", help="run a profile on a datastore (or here, client mode)")
    run.add_argument("profile")
    run.add_argument("--datastore", required=True)
    run.add_argument("--target", choices=["local", *probe_targets()],
                     help="on the appliance: local (default), or over loopback: "
                          + " or ".join(probe_targets()))
    run.add_argument("--set", action="append", metavar="KEY=VALUE",
                     help="override a parameter (runtime=60, workers=1,4,8, size=1g ...)")
    run.add_argument("--preset", choices=["default", "full"],
                     help="full: the published source's parameters (long)")
    run.add_argument("--wait", type=float, default=3600,
                     help="seconds to wait for the result")
    run.add_argument("--path", help="client mode: a directory on the mounted datastore")
    run.add_argument("--device", help="client mode: a block device of the datastore "
                                      "(overwritten! needs --force)")
    run.add_argument("--force", action="store_true")
    run.add_argument("--here", action="store_true",
                     help="client mode for rtt/net-throughput (measures this host <-> "
                          "the --server host)")
    run.add_argument("--no-post", action="store_true",
                     help="client mode: print the result, do not post it")
    run.add_argument("--workdir", help="client mode: where fio keeps its job file and logs")
    # accepted after the subcommand too (zds probe run --server URL --token T ...)
    run.add_argument("--server", default=argparse.SUPPRESS)
    run.add_argument("--token", default=argparse.SUPPRESS)
    run.add_argument("--insecure", action="store_true", default=argparse.SUPPRESS)

    ps.add_parser("show", help="one result").add_argument("id")
    cmp_ = ps.add_parser("compare", help="b / a per metric")
    cmp_.add_argument("a")
    cmp_.add_argument("b")
    pl = ps.add_parser("plot", help="write a chart (svg or png)")
    pl.add_argument("id")
    pl.add_argument("--with", dest="with_", action="append", metavar="ID",
                    help="overlay another result")
    pl.add_argument("--kind", choices=["timeseries", "percentiles", "sweep", "size-sweep"])
    pl.add_argument("--format", choices=["svg", "png"], default="png")
    pl.add_argument("-o", "--output", required=True)
    rp = ps.add_parser("report", help="a self-contained HTML page for some results")
    rp.add_argument("ids", nargs="+")
    rp.add_argument("-o", "--output", default="zds-probe-report.html", help="'-' = stdout")
    rp.add_argument("--title", default="ZDS probe report")
    ps.add_parser("cancel", help="stop a running probe").add_argument("id")
    pr = ps.add_parser("protocols", help="one profile through every protocol and on ZFS, "
                                         "side by side (the protocol comparison)")
    pr.add_argument("profile")
    pr.add_argument("--pool", required=True)
    pr.add_argument("--leg", action="append", metavar="LEG",
                    help="a protocol or baseline (dataset, zvol) to run; repeat; "
                         "default: every one")
    pr.add_argument("--rounds", type=int, default=1)
    pr.add_argument("--set", action="append", metavar="KEY=VALUE",
                    help="override a parameter of the profile (runtime=30, size=1g ...)")
    pr.add_argument("--preset", choices=["default", "full"])
    pr.add_argument("--wait", type=float, default=3600)
    for cp in (pr, cm := ps.add_parser("comparison", help="one protocol comparison again")):
        cp.add_argument("--plot", metavar="FILE", help="write its chart (.png or .svg)")
        cp.add_argument("--report", metavar="FILE", help="write its HTML page")
    cm.add_argument("id")
    p.set_defaults(func=cmd_probe)
