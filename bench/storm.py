"""A provisioning storm: N datastore PUTs sent at once against the same PUTs one by one.

    python -m bench.storm [--counts 40,100] [--disk-size 32G] [--state DIR] [--json FILE]

Boots its own appliance from the cached image (QEMU; TCG here). For each N it makes N
datastores (64 MiB, thin; nfs3, iscsi and nvme-tcp in turn) two ways, in one run:

- one by one: each PUT waits for the previous answer (the time a careful script takes);
- a storm: N clients send their PUT at the same moment (Terraform's parallelism, Ansible
  forks, a template deploy); a 202 answer is followed to its job's end.

It reports each way's total seconds and their ratio (storm / one by one: the target is
<= 1), every status code the storm got (the target: only 201 and 202, no 503), how many
batches the writer made (from the appliance's journal), health's slowest answer sampled
every 0.5 s during the storm (target < 1 s), and whether every datastore was served and
drift was empty at the end. Issue 24.1; record runs in docs/performance.md. Never a timed
test.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from bench.scale import parse_size
from images import build
from images.vm import Appliance, Ports, kvm_works

INITIATOR = "iqn.2026-11.org.example:bench"
HOST_NQN = "nqn.2026-11.org.example:bench"
HOST_AS_SEEN = "10.0.2.2"


def body(i: int) -> dict[str, Any]:
    """nfs3, iscsi and nvme-tcp in turn, 64 MiB thin, as a storm of a template sends."""
    if i % 3 == 0:
        return {"protocol": "nfs3", "size": "64M",
                "nfs": {"clients": [{"match": HOST_AS_SEEN, "access": "rw"}]}}
    if i % 3 == 1:
        return {"protocol": "iscsi", "size": "64M", "iscsi": {"initiators": [INITIATOR]}}
    return {"protocol": "nvme-tcp", "size": "64M", "nvme": {"hosts": [HOST_NQN]}}


class Storm:
    def __init__(self, vm: Appliance) -> None:
        self.vm = vm
        self.token = vm.admin_token()
        self.base = vm.api_url + "/api/v1"

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.base, verify=False, timeout=1800,
                            headers={"Authorization": f"Bearer {self.token}"})

    def put(self, http: httpx.Client, name: str, i: int) -> tuple[int, str]:
        """One PUT as a client tool makes it: a 202 is followed to its job's end.
        Returns (first status, how it ended)."""
        r = http.put(f"/datastores/{name}", json=body(i))
        if r.status_code == 202:
            job = r.json()["id"]
            while True:
                j = http.get(f"/jobs/{job}", params={"wait": 60}).json()
                if j["state"] not in ("queued", "running"):
                    return 202, j["state"]
        return r.status_code, "succeeded" if r.status_code in (200, 201) else r.text[:200]

    def one_by_one(self, prefix: str, n: int) -> dict[str, Any]:
        codes: Counter[str] = Counter()
        t0 = time.monotonic()
        with self.client() as http:
            for i in range(n):
                code, end = self.put(http, f"{prefix}{i:03d}", i)
                codes[f"{code} {end}"] += 1
        return {"seconds": time.monotonic() - t0, "codes": dict(codes)}

    def storm(self, prefix: str, n: int) -> dict[str, Any]:
        """N clients, each with its own connection, released at the same moment.

        Every connection (the health sampler's too) is opened before the release, one
        after another: QEMU's user networking listens on the host with a backlog of 1
        (``ss -ltn`` shows it), so N connects at once overflow its accept queue and the
        kernel drops them: SYN retries of 1, 3, 7 s and, past the retries, a reset. That
        measured QEMU's NAT, not the appliance (a real NIC reaches uvicorn's backlog of
        2048); the PUTs themselves still arrive together."""
        clients = [self.client() for _ in range(n)]
        for c in clients:
            c.get("/system/whoami").raise_for_status()
        start = threading.Barrier(n + 2)
        health: list[float] = []
        stop = threading.Event()

        def one(i: int) -> tuple[int, str]:
            start.wait()
            return self.put(clients[i], f"{prefix}{i:03d}", i)

        def sample() -> None:
            with httpx.Client(base_url=self.base, verify=False, timeout=30) as h:
                h.get("/system/health")  # connected before the storm
                start.wait()
                while not stop.is_set():
                    t = time.monotonic()
                    h.get("/system/health")
                    health.append(time.monotonic() - t)
                    stop.wait(0.5)

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            with ThreadPoolExecutor(max_workers=n) as pool:
                futures = [pool.submit(one, i) for i in range(n)]
                start.wait()
                t0 = time.monotonic()
                outcomes = [f.result() for f in futures]
                took = time.monotonic() - t0
        finally:
            stop.set()
            sampler.join()
            for c in clients:
                c.close()
        codes = Counter(f"{code} {end}" for code, end in outcomes)
        return {"seconds": took, "codes": dict(codes),
                "health_max": max(health, default=0.0),
                "health_p50": statistics.median(health) if health else 0.0,
                "health_samples": len(health)}

    def served(self, prefixes: list[str]) -> dict[str, Any]:
        with self.client() as http:
            listed = http.get("/datastores").json()
            drift = http.get("/system/drift").json()
        mine = [d for d in listed if any(d["name"].startswith(p) for p in prefixes)]
        return {"datastores": len(mine), "served": sum(1 for d in mine if d["serving"]),
                "in_sync": drift["in_sync"]}

    def batches(self) -> list[int]:
        """The writer's batch sizes, from the API's journal (services/create_queue.py)."""
        rc, out = self.vm.exec("journalctl -u zds-api -o cat --no-pager | "
                               "grep -o 'create batch of [0-9]*' | awk '{print $4}'")
        return [int(x) for x in out.split()] if rc == 0 else []


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--counts", default="40,100")
    ap.add_argument("--disk-size", default="32G", help="each of the two data disks")
    ap.add_argument("--memory", type=int, default=4096, help="guest MiB")
    ap.add_argument("--state", help="keep the appliance's files here (default: a temp dir)")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args(argv)
    counts = [int(c) for c in args.counts.split(",")]
    state = Path(args.state) if args.state else Path(tempfile.mkdtemp(prefix="zds-storm-"))
    vm = Appliance(state_dir=state, base_image=build.build() / "zds.raw",
                   ports=Ports.random_free(), test_control=True,
                   data_disk_size=parse_size(args.disk_size), memory_mib=args.memory)
    vm.prepare(fresh_system=True, fresh_data=True)
    vm.start(kvm=kvm_works())
    rows: list[dict[str, Any]] = []
    try:
        vm.wait_control(900)
        vm.wait_healthy(900)
        bench = Storm(vm)
        for n in counts:
            before = len(bench.batches())
            serial = bench.one_by_one(f"seq{n}-", n)
            print(f"  N={n} one by one: {serial['seconds']:.0f} s {serial['codes']}",
                  file=sys.stderr, flush=True)
            storm = bench.storm(f"storm{n}-", n)
            print(f"  N={n} storm: {storm['seconds']:.0f} s {storm['codes']}, health max "
                  f"{storm['health_max']:.2f} s", file=sys.stderr, flush=True)
            end = bench.served([f"seq{n}-", f"storm{n}-"])
            batches = bench.batches()[before:]
            rows.append({"n": n, "one_by_one": serial, "storm": storm,
                         "ratio": storm["seconds"] / serial["seconds"],
                         "batches": batches, **end})
    finally:
        vm.stop(timeout=120)
        if not args.state:
            shutil.rmtree(state, ignore_errors=True)
    report(rows)
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows}, indent=2) + "\n")
    return 0


def report(rows: list[dict[str, Any]]) -> None:
    print("| N | one by one | storm | storm / one by one | storm's answers | writer's "
          "batches | health max (p50) | served | drift |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        s = r["storm"]
        answers = ", ".join(f"{v} x {k}" for k, v in sorted(s["codes"].items()))
        print(f"| {r['n']} | {r['one_by_one']['seconds']:.0f} s | {s['seconds']:.0f} s | "
              f"{r['ratio']:.2f} | {answers} | {r['batches']} | {s['health_max']:.2f} s "
              f"({s['health_p50']:.2f} s) | {r['served']}/{r['datastores']} | "
              f"{'empty' if r['in_sync'] else 'NOT EMPTY'} |")


if __name__ == "__main__":
    raise SystemExit(main())
