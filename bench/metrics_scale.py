"""/metrics and the console's main page with many datastores, timed from a client.

    python -m bench.metrics_scale --server https://127.0.0.1:8443 --token T [--insecure] \
        [--datastores 100] [--repeat 5] [--keep]

Creates N thin NFS datastores (bench-mNNN; half iSCSI with --iscsi), waits for two
collections, then times (median of --repeat) GET /metrics and everything the console's
overview loads: /ui, /pools, /datastores, /metrics/datastores, /metrics/pools. Target
(docs/performance.md): each < 1 s under TCG with 100 datastores.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from bench.protocol_overhead import Api

OVERVIEW = ("/pools", "/datastores", "/metrics/datastores", "/metrics/pools")


def timed(fn: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(api: Api, n: int, repeat: int, iscsi: bool = False,
            keep: bool = False, settle: float = 25.0) -> dict[str, float]:
    names = [f"bench-m{i:03d}" for i in range(n)]
    t0 = time.monotonic()
    for i, name in enumerate(names):
        body: dict[str, Any] = {"protocol": "nfs3", "size": "64M",
                                "nfs": {"clients": [{"match": "127.0.0.1"}]}}
        if iscsi and i % 2:
            body = {"protocol": "iscsi", "size": "64M",
                    "iscsi": {"initiators": ["iqn.2026-11.org.example:bench"]}}
        api.call("PUT", f"/datastores/{name}", json=body)
    print(f"created {n} datastores in {time.monotonic() - t0:.0f} s", flush=True)
    time.sleep(settle)
    base = api.http.base_url
    root = str(base).removesuffix("/api/v1").removesuffix("/api/v1/")
    out: dict[str, float] = {}
    out["/metrics"] = timed(lambda: api.http.get(root + "/metrics").raise_for_status(), repeat)
    out["/ui"] = timed(lambda: api.http.get(root + "/ui").raise_for_status(), repeat)
    for path in OVERVIEW:
        out[path] = timed(lambda p=path: api.http.get(p).raise_for_status(), repeat)
    out["overview (all of its calls)"] = out["/ui"] + sum(out[p] for p in OVERVIEW)
    page = api.http.get(root + "/metrics").text
    series = sum(1 for ln in page.splitlines() if ln.startswith("zds_datastore_read_ops"))
    print(f"{'request':32} {'median s':>9}  ({n} datastores, {series} datastore series)")
    for k, v in out.items():
        print(f"{k:32} {v:9.3f}")
    if not keep:
        for name in names:
            api.call("DELETE", f"/datastores/{name}", params={"wait": 120})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", default="https://127.0.0.1:8443")
    ap.add_argument("--token", required=True)
    ap.add_argument("--insecure", action="store_true")
    ap.add_argument("--datastores", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--iscsi", action="store_true")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args(argv)
    measure(Api(args.server, args.token, args.insecure), args.datastores, args.repeat,
            args.iscsi, args.keep)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
