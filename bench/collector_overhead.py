"""Collector overhead: randread-4k-qd32 IOPS on one datastore with the metrics collector on
vs off, in interleaved rounds (the order flips every round), inside the appliance.

    python -m bench.collector_overhead --server https://127.0.0.1:8443 --token T \
        [--insecure] [--datastore bench-nfs] [--create] [--rounds 3] [--runtime 15]

Run ON the appliance (it switches the collector by rewriting ``[metrics] interval`` in
/etc/zds/zds.toml and restarting zds-api); the e2e suite runs the same rounds from the
host with its guest shell (``ZDS_E2E_BENCH=1``, tests/e2e/test_console_e2e.py).
Target: on/off >= 0.98 (docs/performance.md).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.protocol_overhead import Api

CONFIG = Path("/etc/zds/zds.toml")
Shell = Callable[[str], str]


def set_interval_cmd(seconds: int, config: Path = CONFIG) -> str:
    """A shell command that sets [metrics] interval (adding the table when missing) and
    restarts the API."""
    return (f"if grep -q '^\\[metrics\\]' {config}; then "
            f"sed -i '/^\\[metrics\\]/,/^\\[/ s/^interval = .*/interval = {seconds}/' {config}; "
            f"else printf '\\n[metrics]\\ninterval = {seconds}\\n' >> {config}; fi; "
            "systemctl restart zds-api")


def wait_healthy(api: Api, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            r = api.http.get("/system/health")
            if r.status_code == 200:
                return
        except Exception:  # restarting: connection refused for a while
            pass
        time.sleep(2)
    raise SystemExit("the API did not come back healthy")


def measure(api: Api, shell: Shell, datastore: str, rounds: int, runtime: int,
            settle: float = 25.0) -> dict[str, Any]:
    """Interleaved rounds; returns the IOPS lists and the ratio of medians."""
    iops: dict[str, list[float]] = {"on": [], "off": []}
    for i in range(rounds):
        order = ("on", "off") if i % 2 == 0 else ("off", "on")
        for state in order:
            shell(set_interval_cmd(10 if state == "on" else 0))
            wait_healthy(api)
            time.sleep(settle)  # on: a few collections have run before fio starts
            r = api.probe("randread-4k-qd32", datastore, "local",
                          {"runtime": runtime, "ramp": 2, "size": "256m"})
            iops[state].append(float(r["summary"]["iops"]))
            print(f"round {i + 1} collector {state:3}: {iops[state][-1]:,.0f} IOPS", flush=True)
    shell(set_interval_cmd(10))
    wait_healthy(api)
    ratio = statistics.median(iops["on"]) / statistics.median(iops["off"])
    pairs = [a / b for a, b in zip(iops["on"], iops["off"], strict=True)]
    print(f"on/off (medians) {ratio:.3f}; per round {[round(p, 3) for p in pairs]}")
    return {"iops": iops, "ratio": ratio, "pairs": pairs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", default="https://127.0.0.1:8443")
    ap.add_argument("--token", required=True)
    ap.add_argument("--insecure", action="store_true")
    ap.add_argument("--datastore", default="bench-nfs")
    ap.add_argument("--create", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runtime", type=int, default=15)
    args = ap.parse_args(argv)
    api = Api(args.server, args.token, args.insecure)
    if args.create:
        api.call("PUT", f"/datastores/{args.datastore}", json={
            "protocol": "nfs3", "size": "2G", "nfs": {"clients": [{"match": "127.0.0.1"}]}})

    def shell(cmd: str) -> str:
        return subprocess.run(["sh", "-c", cmd], check=True, capture_output=True,
                              text=True).stdout

    measure(api, shell, args.datastore, args.rounds, args.runtime)
    if args.create:
        api.call("DELETE", f"/datastores/{args.datastore}", params={"wait": 300})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())



