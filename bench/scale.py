"""The engine at scale: API latency at 10 .. 1,000 datastores, and boot-to-all-served.

    python -m bench.scale [--counts 10,100,300,1000] [--disk-size 160G] [--state DIR]
                          [--json FILE] [--plot PNG]
    python -m bench.scale --replot FILE --plot PNG      # a saved run's plot, no boot

Boots its own appliance from the cached image (QEMU; TCG here), with two sparse data
disks large enough for the default pool to hold every datastore (64 MiB each, thin),
then creates datastores through the REST API, alternating nfs3 and iscsi. At each count
N it reports, from the host:

- PUT p50/p95: the last ``--sample`` PUTs before reaching N, one at a time (each
  creates a dataset or zvol and its export or LUN; the bulk before them is made by
  ``--parallel`` clients);
- GET list (all N), GET one (an NFS and an iSCSI datastore), health and drift: medians;
  the list answers from the ZFS read the API keeps (issue 24), so also: the first list
  after the timed PUTs (it reads their datastores again, or everything when more than a
  few changed), the age its answers said (``ZDS-ZFS-Age``) and a page of 100
  (``?limit=100``);
- GET /metrics and the console's /ui page (issue 12: < 1 s at 100): medians;
- the API's resident memory (``ps`` of zds-api's main PID in the guest);

and the ratio of each to its value at the first count. Then it reboots the appliance and
reports, from the guest's own clocks (systemd unit timestamps and the API's health
``started_at``): the time ``zpool import`` + mounts took, the time until every export
and LUN was served again, their ratio, and the slowest health answer while starting.

Targets (issue 8, and issue 24 for the list): PUT p50 at 1,000 <= 1.5x at 10; list at
1,000 <= 5x at 10 (the median of the kept read's answers); health
< 1 s at every N; boot-to-all-served <= 2x import + mount. Never a timed test: a run
takes hours under emulation; record it in docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from images import build
from images.vm import Appliance, Ports, kvm_works

INITIATOR = "iqn.2026-11.org.example:bench"
HOST_AS_SEEN = "10.0.2.2"


def parallel_script(lines: list[str], ways: int) -> str:
    """A bash script running ``lines`` in ``ways`` background groups (each stops at its
    first failure) that exits non-zero if any group failed, with every group's output."""
    parts = ["pids=()"]
    for g in range(ways):
        group = lines[g::ways]
        if group:
            parts.append("( set -e\n" + "\n".join(group) + f"\n) > /tmp/zds-seed.{g}.log 2>&1 &")
            parts.append("pids+=($!)")
    parts.append('rc=0; for p in "${pids[@]}"; do wait "$p" || rc=1; done')
    parts.append("cat /tmp/zds-seed.*.log; rm -f /tmp/zds-seed.*.log; exit $rc")
    return "\n".join(parts) + "\n"


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].isalpha() \
        else int(text)


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.monotonic()
    fn()
    return time.monotonic() - t0


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


class Bench:
    def __init__(self, vm: Appliance, seed_parallel: int = 4) -> None:
        self.vm = vm
        self.seed_parallel = seed_parallel
        self.http = httpx.Client(base_url=vm.api_url + "/api/v1", verify=False, timeout=1800,
                                 headers={"Authorization": f"Bearer {vm.admin_token()}"})

    def ok(self, method: str, path: str, **kw: Any) -> Any:
        r = self.http.request(method, path, **kw)
        if r.status_code >= 400:
            raise SystemExit(f"{method} {path}: {r.status_code} {r.text[:500]}")
        return r.json() if r.content else None

    def put(self, i: int) -> float:
        name = f"bench{i:04d}"
        body: dict[str, Any] = (
            {"protocol": "nfs3", "size": "64M",
             "nfs": {"clients": [{"match": HOST_AS_SEEN, "access": "rw"}]}}
            if i % 2 == 0 else
            {"protocol": "iscsi", "size": "64M", "iscsi": {"initiators": [INITIATOR]}})
        return timed(lambda: self.ok("PUT", f"/datastores/{name}", json=body))

    def seed(self, start: int, end: int) -> float:
        """Makes datastores ``start .. end-1`` inside the guest the way the API does, with
        ``zfs create`` and the same native and ``zds:*`` properties as the two the API
        made first (bench0000 nfs, bench0001 iscsi; their own name, export id, IQN and
        serial), then restarts the API, which adopts them from their properties and
        serves them all with its batched start-up reconcile. Returns that restart's
        seconds until health answered again. Only the untimed bulk is made so: under
        emulation each API PUT costs seconds and 1,000 of them take hours."""
        templates = {}
        for i, name in ((0, "bench0000"), (1, "bench0001")):
            rec = self.ok("GET", f"/datastores/{name}")
            ds = rec["dataset"]
            rc, out = self.vm.exec(f"zfs get -H -p -o property,value -s local all {ds}")
            if rc != 0:
                raise SystemExit(f"cannot read {ds}'s properties: {out}")
            props = dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)
            templates[i % 2] = (ds, props)
        lines = []
        for i in range(start, end):
            ds, props = templates[i % 2]
            name = f"bench{i:04d}"
            mine = dict(props)
            mine["zds:name"] = name
            if "zds:export_id" in mine:
                mine["zds:export_id"] = str(20000 + i)  # above any the API hands out here
            if "zds:iqn" in mine:
                mine["zds:iqn"] = mine["zds:iqn"].rsplit(".", 1)[0] + f".{name}"
            if "zds:serial" in mine:
                mine["zds:serial"] = str(uuid.uuid4())
            size = mine.pop("volsize", None)
            if mine.get("zds:protocol") == "iscsi":
                size = size or mine["zds:size"]
            for creation_only in ("refreservation", "reservation"):
                mine.pop(creation_only, None)
            for counted in ("snapshot_count", "filesystem_count"):  # read-only; ZFS shows
                mine.pop(counted, None)  # them as "local" below POOL/datastores' limit
            opts = " ".join(f"-o {shlex.quote(f'{k}={v}')}" for k, v in sorted(mine.items()))
            target = shlex.quote(ds.rsplit("/", 1)[0] + f"/{name}")
            lines.append(f"zfs create -s -V {size} {opts} {target}" if size
                         else f"zfs create {opts} {target}")
        # Several creates in flight share a transaction group: one `zfs create` at a time
        # waits for a txg sync each, about 8 s under TCG on a busy host.
        step = 20 * self.seed_parallel
        for k in range(0, len(lines), step):
            rc, out = self.vm.exec(parallel_script(lines[k:k + step], self.seed_parallel),
                                   timeout=1800)
            if rc != 0:
                raise SystemExit(f"seeding datastores failed: {out[-2000:]}")
        t0 = time.monotonic()
        self.vm.exec("systemctl restart zds-api", timeout=1800)
        while time.monotonic() - t0 < 3600:
            try:
                r = self.http.get("/system/health")
                if r.status_code in (200, 503) and r.json().get("started_at") and \
                        r.json().get("status") != "starting":
                    break
            except httpx.HTTPError:
                pass
            time.sleep(2)
        took = time.monotonic() - t0
        listed = self.ok("GET", "/datastores")
        if len(listed) < end:
            raise SystemExit(f"after seeding, the API lists {len(listed)} of {end} datastores")
        return took

    def health(self) -> tuple[float, dict[str, Any]]:
        t0 = time.monotonic()
        r = self.http.get("/system/health")
        return time.monotonic() - t0, r.json()

    def rss_mib(self) -> float:
        rc, out = self.vm.exec("ps -o rss= -p $(systemctl show -p MainPID --value zds-api)")
        return int(out.strip()) / 1024 if rc == 0 and out.strip().isdigit() else 0.0

    def measure(self, n: int, puts: list[float]) -> dict[str, float]:
        names = [f"bench{n - 2:04d}", f"bench{n - 1:04d}"]  # one nfs, one iscsi
        # the first list reads what the timed PUTs changed; the next ones are the kept read
        first = timed(lambda: self.ok("GET", "/datastores"))
        lists, ages = [], []
        for _ in range(3):
            t0 = time.monotonic()
            r = self.http.get("/datastores")
            lists.append(time.monotonic() - t0)
            r.raise_for_status()
            ages.append(float(r.headers.get("ZDS-ZFS-Age", "nan")))
        pages = [timed(lambda: self.ok("GET", "/datastores", params={"limit": 100}))
                 for _ in range(3)]
        gets = [timed(lambda nm=nm: self.ok("GET", f"/datastores/{nm}"))  # type: ignore[misc]
                for _ in range(3) for nm in names]
        healths = [self.health()[0] for _ in range(5)]
        drifts: list[float] = []
        for _ in range(3):
            t0 = time.monotonic()
            d = self.ok("GET", "/system/drift")
            drifts.append(time.monotonic() - t0)
            if not d["in_sync"]:
                print(f"  drift at N={n}: {d['items'][:5]}", file=sys.stderr)
        # issue 12's figures ride along: /metrics (Prometheus) and the console's page
        root = self.vm.api_url
        metrics = [timed(lambda: self.http.get(root + "/metrics").raise_for_status())
                   for _ in range(3)]
        ui = [timed(lambda: self.http.get(root + "/ui").raise_for_status()) for _ in range(3)]
        return {"n": n, "put_p50": statistics.median(puts), "put_p95": pct(puts, 0.95),
                "list": statistics.median(lists), "list_first": first,
                "list_age": max(ages), "list_page": statistics.median(pages),
                "get": statistics.median(gets),
                "health": statistics.median(healths), "health_max": max(healths),
                "drift": statistics.median(drifts), "metrics": statistics.median(metrics),
                "ui": statistics.median(ui), "rss_mib": self.rss_mib()}

    def guest_profile(self) -> Any:
        """bench/guest_profile.py in the guest: the list's and drift's time split into host
        commands, configfs walks and the engine's Python."""
        src = (Path(__file__).parent / "guest_profile.py").read_text()
        rc, out = self.vm.exec(f"cat > /tmp/zds-guest-profile.py <<'ZDS_EOF'\n{src}ZDS_EOF\n"
                               "/opt/zds/venv/bin/python3 /tmp/zds-guest-profile.py",
                               timeout=1800)
        if rc != 0:
            return {"error": out[-1000:]}
        return json.loads(out.strip().splitlines()[-1])

    def unit_times(self) -> dict[str, tuple[float, float]]:
        """(start, end) unix times of the boot's ZFS units, from systemd."""
        out: dict[str, tuple[float, float]] = {}
        for unit in ("zfs-import-cache.service", "zfs-import-scan.service",
                     "zfs-mount.service", "zfs-volume-wait.service", "zds-api.service"):
            rc, text = self.vm.exec(
                f"systemctl show --timestamp=unix -p ExecMainStartTimestamp "
                f"-p ExecMainExitTimestamp -p ActiveEnterTimestamp {unit}")
            vals = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
            start = vals.get("ExecMainStartTimestamp", "").lstrip("@")
            end = (vals.get("ExecMainExitTimestamp") or vals.get("ActiveEnterTimestamp", "")
                   ).lstrip("@")
            if rc == 0 and start.replace(".", "").isdigit() and end.replace(".", "").isdigit():
                out[unit] = (float(start), float(end))
        return out

    def reboot(self) -> dict[str, float]:
        """Reboots, polls health while the API restores everything, reads the timings."""
        old = self.vm.boot_id()
        self.vm.exec("systemctl reboot", timeout=30)
        deadline = time.monotonic() + 3600
        while time.monotonic() < deadline:
            time.sleep(2)
            try:
                if self.vm.boot_id() not in ("", old):
                    break
            except Exception:  # the control channel is down while it reboots
                continue
        slowest, started = 0.0, 0.0
        while time.monotonic() < deadline:
            try:
                took, h = self.health()
            except httpx.HTTPError:
                time.sleep(1)
                continue
            slowest = max(slowest, took)
            if h.get("status") != "starting" and h.get("started_at"):
                started = float(h["started_at"])
                break
            time.sleep(1)
        units = self.unit_times()
        imp = units.get("zfs-import-cache.service") or units.get("zfs-import-scan.service")
        mount = units.get("zfs-mount.service")
        vols = units.get("zfs-volume-wait.service")
        if imp is None or mount is None:
            raise SystemExit(f"no ZFS import/mount timestamps in the guest: {units}")
        zfs_end = max(mount[1], vols[1] if vols else 0.0)
        return {"import_mount_s": mount[1] - imp[0], "zfs_with_zvols_s": zfs_end - imp[0],
                "all_served_s": started - imp[0] if started else -1.0,
                "api_restore_s": started - zfs_end if started else -1.0,
                "health_max_while_starting_s": slowest}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--counts", default="10,100,300,1000")
    ap.add_argument("--disk-size", default="160G", help="each of the two data disks")
    ap.add_argument("--memory", type=int, default=4096, help="guest MiB")
    ap.add_argument("--sample", type=int, default=10, help="PUTs timed per count")
    ap.add_argument("--parallel", type=int, default=2, help="clients making the bulk")
    ap.add_argument("--seed-parallel", type=int, default=4,
                    help="`zfs create`s in flight at once when seeding in the guest")
    ap.add_argument("--bulk", choices=("guest", "api"), default="guest",
                    help="make the untimed bulk in the guest and let the API adopt it "
                         "(fast), or through API PUTs (hours under emulation)")
    ap.add_argument("--state", help="keep the appliance's files here (default: a temp dir)")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--plot", help="also draw seconds and ratios per N to this PNG")
    ap.add_argument("--replot", metavar="JSON",
                    help="only draw --plot from a run saved with --json (no appliance)")
    ap.add_argument("--no-reboot", action="store_true", help="skip the closing reboot")
    ap.add_argument("--profile", action="store_true",
                    help="at each count, split the list's and drift's time inside the guest "
                         "(bench/guest_profile.py)")
    args = ap.parse_args(argv)
    if args.replot:
        if not args.plot:
            ap.error("--replot needs --plot")
        plot(json.loads(Path(args.replot).read_text())["rows"], Path(args.plot))
        return 0
    counts = [int(c) for c in args.counts.split(",")]
    state = Path(args.state) if args.state else Path(tempfile.mkdtemp(prefix="zds-scale-"))
    vm = Appliance(state_dir=state, base_image=build.build() / "zds.raw",
                   ports=Ports.random_free(), test_control=True,
                   data_disk_size=parse_size(args.disk_size), memory_mib=args.memory)
    vm.prepare(fresh_system=True, fresh_data=True)
    kvm = kvm_works()
    vm.start(kvm=kvm)
    rows: list[dict[str, float]] = []
    boot: dict[str, float] = {}
    profiles: dict[int, Any] = {}
    started = datetime.now(UTC)
    try:
        vm.wait_control(900)
        vm.wait_healthy(900)
        bench = Bench(vm, args.seed_parallel)
        made = 0
        for n in counts:
            # the bulk two at a time (the lock serializes the changes; the TLS and HTTP
            # work overlaps), then the timed sample one by one
            bulk_end = max(made, n - args.sample)
            if args.bulk == "guest" and made >= 2 and bulk_end > made:
                took = bench.seed(made, bulk_end)
                print(f"  seeded {bulk_end - made} datastores in the guest; the API's "
                      f"restart adopted and served all {bulk_end} in {took:.0f} s",
                      file=sys.stderr, flush=True)
                made = bulk_end
            with ThreadPoolExecutor(max_workers=args.parallel) as pool:
                for i, took in enumerate(pool.map(bench.put, range(made, bulk_end))):
                    if (made + i + 1) % 50 == 0:
                        print(f"  {made + i + 1} datastores, last PUT {took:.2f} s",
                              file=sys.stderr)
            made = bulk_end
            puts: list[float] = []
            while made < n:
                puts.append(bench.put(made))
                made += 1
            row = bench.measure(n, puts)
            rows.append(row)
            print("  " + json.dumps(row), file=sys.stderr, flush=True)
            if args.profile:
                profiles[n] = bench.guest_profile()
                print(f"  profile at N={n}: " + json.dumps(profiles[n]), file=sys.stderr,
                      flush=True)
        if not args.no_reboot:
            boot = bench.reboot()
            after = bench.ok("GET", "/datastores")
            served = sum(1 for d in after if d["serving"])
            drift = bench.ok("GET", "/system/drift")
            boot.update(datastores=len(after), served=served, in_sync=float(drift["in_sync"]))
    finally:
        vm.stop(timeout=120)
        if not args.state:
            shutil.rmtree(state, ignore_errors=True)
    report(rows, boot, kvm, started)
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "boot": boot,
                                               "profiles": profiles}, indent=2) + "\n")
    if args.plot:
        plot(rows, Path(args.plot))
    return 0


# (row key, label, issue 8's target as a ratio to the first count, if it has one)
PLOTTED = (("list", "GET /datastores", 5.0), ("list_page", "GET /datastores?limit=100", None),
           ("drift", "GET /system/drift", None),
           ("put_p50", "PUT one more (p50)", 1.5), ("get", "GET one datastore", None),
           ("metrics", "GET /metrics", None), ("health", "GET /system/health", None))


def plot(rows: list[dict[str, float]], path: Path) -> None:
    """Two panels: seconds per call against N (log-log), and each call's ratio to its
    value at the first N with issue 8's targets as dashed lines of the same colour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = [int(r["n"]) for r in rows]
    fig, (secs, ratio) = plt.subplots(1, 2, figsize=(11, 4.2))
    for key, label, target in PLOTTED:
        if not all(key in r for r in rows):  # a run saved before the figure was measured
            continue
        ys = [r[key] for r in rows]
        line, = secs.plot(ns, ys, marker="o", label=label)
        ratio.plot(ns, [y / ys[0] for y in ys], marker="o", color=line.get_color(),
                   label=label)
        if target is not None:
            ratio.axhline(target, color=line.get_color(), linestyle="--", linewidth=1)
            ratio.annotate(f"target {target:g}x", (ns[0], target), color=line.get_color(),
                           textcoords="offset points", xytext=(2, 3), fontsize=8)
    secs.set(xscale="log", yscale="log", xlabel="datastores (N)", ylabel="seconds",
             title="Seconds per call (QEMU TCG guest)")
    ratio.set(xscale="log", yscale="log", xlabel="datastores (N)",
              ylabel=f"x its value at N = {ns[0]}",
              title="Growth from the first N")
    for ax in (secs, ratio):
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.grid(True, which="both", alpha=0.3)
    secs.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(rows: list[dict[str, float]], boot: dict[str, float], kvm: bool,
           started: datetime) -> None:
    base = rows[0]
    print(f"# bench.scale, {started.isoformat(timespec='seconds')}, "
          f"{'KVM' if kvm else 'QEMU TCG'} guest, host {platform.node()}")
    print(f"{'N':>5} {'PUT p50':>8} {'PUT p95':>8} {'list':>7} {'get':>6} {'health':>7} "
          f"{'drift':>7} {'metrics':>7} {'ui':>6} {'RSS MiB':>8} | {'PUT/N0':>7} {'list/N0':>8} "
          f"{'health/N0':>9} | {'list 1st':>8} {'age s':>6} {'page100':>7}")
    for r in rows:
        print(f"{int(r['n']):>5} {r['put_p50']:>8.2f} {r['put_p95']:>8.2f} {r['list']:>7.2f} "
              f"{r['get']:>6.2f} {r['health']:>7.3f} {r['drift']:>7.2f} {r['metrics']:>7.3f} "
              f"{r['ui']:>6.3f} {r['rss_mib']:>8.0f} | "
              f"{r['put_p50'] / base['put_p50']:>7.2f} {r['list'] / base['list']:>8.2f} "
              f"{r['health'] / base['health']:>9.2f} | {r.get('list_first', 0):>8.2f} "
              f"{r.get('list_age', 0):>6.1f} {r.get('list_page', 0):>7.2f}")
    if boot:
        ratio = boot["all_served_s"] / boot["import_mount_s"] if boot["import_mount_s"] else 0
        print(f"# reboot with {int(boot.get('datastores', 0))} datastores: zpool import + "
              f"mounts {boot['import_mount_s']:.1f} s (with zvol links "
              f"{boot['zfs_with_zvols_s']:.1f} s); all served {boot['all_served_s']:.1f} s "
              f"after the import started ({ratio:.2f}x import + mounts; the API's restore "
              f"itself {boot['api_restore_s']:.1f} s); {int(boot.get('served', 0))} serving, "
              f"drift {'empty' if boot.get('in_sync') else 'NOT empty'}; slowest health while "
              f"starting {boot['health_max_while_starting_s']:.3f} s")


if __name__ == "__main__":
    t0 = time.monotonic()
    rc = main()
    print(f"# took {time.monotonic() - t0:.0f} s")
    raise SystemExit(rc)
