"""Protocol overhead inside the appliance, in one run: nfs/local and iscsi/local ratios.

    python -m bench.protocol_overhead --server https://127.0.0.1:8443 --token T \
        [--insecure] [--create] [--runtime 10] [--rounds 1] [PROFILE ...]

For each profile (default randread-4k-qd32, vm-mixed-4k, streaming-read) it asks the
appliance, over its API, for probes on an NFS datastore (targets local and nfs) and on an
iSCSI datastore (targets local and iscsi), interleaved, and prints IOPS, MB/s and p99
latency with the ratios nfs/local and iscsi/local. ``--create`` makes the two datastores
(bench-nfs, bench-iscsi) first and deletes them at the end.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from typing import Any

import httpx

DEFAULT_PROFILES = ("randread-4k-qd32", "vm-mixed-4k", "streaming-read")


class Api:
    def __init__(self, server: str, token: str, insecure: bool) -> None:
        self.http = httpx.Client(base_url=server.rstrip("/") + "/api/v1", verify=not insecure,
                                 headers={"Authorization": f"Bearer {token}"}, timeout=900)

    def call(self, method: str, path: str, **kw: Any) -> Any:
        r = self.http.request(method, path, **kw)
        if r.status_code >= 400:
            raise SystemExit(f"{method} {path}: {r.status_code} {r.text}")
        return r.json() if r.content else None

    def finish(self, job: dict[str, Any]) -> dict[str, Any]:
        """``job`` once it has ended: the API waits at most 600 s per request, so a longer
        job is asked for again."""
        while job["state"] in ("queued", "running"):
            job = self.call("GET", f"/jobs/{job['id']}", params={"wait": 600})
        return job

    def probe(self, profile: str, datastore: str, target: str,
              overrides: dict[str, Any]) -> dict[str, Any]:
        job = self.call("POST", "/probes", params={"wait": 600},
                        json={"profile": profile, "datastore": datastore, "target": target,
                              "overrides": overrides})
        job = self.finish(job)
        result: dict[str, Any] = self.call("GET", f"/probes/results/{job['result_id']}")
        if result["status"] != "ok":
            raise SystemExit(f"{profile} on {target}:{datastore} {result['status']}: "
                             f"{result['error']}")
        return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profiles", nargs="*", default=list(DEFAULT_PROFILES))
    ap.add_argument("--server", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--insecure", action="store_true")
    ap.add_argument("--nfs-datastore", default="bench-nfs")
    ap.add_argument("--iscsi-datastore", default="bench-iscsi")
    ap.add_argument("--create", action="store_true")
    ap.add_argument("--size", default="2G", help="datastore size with --create")
    ap.add_argument("--runtime", type=int, default=10)
    ap.add_argument("--probe-size", default="128m", help="fio size per worker")
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args(argv)
    api = Api(args.server, args.token, args.insecure)
    if args.create:
        api.call("PUT", f"/datastores/{args.nfs_datastore}",
                 json={"protocol": "nfs3", "size": args.size,
                       "nfs": {"clients": [{"match": "127.0.0.1", "access": "rw"}]}})
        api.call("PUT", f"/datastores/{args.iscsi_datastore}",
                 json={"protocol": "iscsi", "size": args.size, "iscsi": {"initiators": []}})
    version = api.call("GET", "/system/version")
    print(f"# protocol overhead, {datetime.now(UTC).isoformat(timespec='seconds')}, "
          f"appliance {version}, runner {platform.node()}")
    print(f"# runtime {args.runtime}s per point, size {args.probe_size}, "
          f"{args.rounds} round(s), medians")
    rows = []
    try:
        for profile in args.profiles:
            over: dict[str, Any] = {"runtime": args.runtime, "size": args.probe_size,
                                    "ramp": 2}
            if profile.startswith("vm-mixed"):
                over["workers"] = "4"
            got: dict[str, list[dict[str, float]]] = {}
            for _ in range(args.rounds):
                for ds, target in ((args.nfs_datastore, "local"), (args.nfs_datastore, "nfs"),
                                   (args.iscsi_datastore, "local"),
                                   (args.iscsi_datastore, "iscsi")):
                    key = f"{target}@{'nfs' if ds == args.nfs_datastore else 'iscsi'}"
                    r = api.probe(profile, ds, target, over)
                    got.setdefault(key, []).append(r["summary"])
                    print(f"  {profile:<18} {key:<12} {r['summary']['iops']:>12,.0f} IOPS "
                          f"{r['summary']['mbps']:>9,.1f} MB/s  p99 "
                          f"{r['summary']['lat_p99_ms']:.3f} ms", file=sys.stderr)
            med = {k: {m: statistics.median(s[m] for s in v)
                       for m in ("iops", "mbps", "lat_p99_ms")} for k, v in got.items()}
            rows.append((profile, med))
    finally:
        if args.create:
            for ds in (args.nfs_datastore, args.iscsi_datastore):
                api.call("DELETE", f"/datastores/{ds}", params={"wait": 120, "force": True})
    print(f"{'profile':<18} {'path':<16} {'IOPS':>10} {'MB/s':>9} {'p99 ms':>8} "
          f"{'IOPS ratio':>11} {'p99 ratio':>10}")
    for profile, med in rows:
        for proto in ("nfs", "iscsi"):
            base = med[f"local@{proto}"]
            over_ = med[f"{proto}@{proto}"]
            for label, m in ((f"local ({proto} ds)", base), (proto, over_)):
                ratio = m["iops"] / base["iops"] if base["iops"] else 0.0
                lat = m["lat_p99_ms"] / base["lat_p99_ms"] if base["lat_p99_ms"] else 0.0
                print(f"{profile:<18} {label:<16} {m['iops']:>10,.0f} {m['mbps']:>9,.1f} "
                      f"{m['lat_p99_ms']:>8.3f} {ratio:>11.2f} {lat:>10.2f}")
    return 0


if __name__ == "__main__":
    started = time.monotonic()
    rc = main()
    print(f"# took {time.monotonic() - started:.0f} s")
    raise SystemExit(rc)
