"""A snapshot policy over N datastores: how many zfs commands a run costs, and how long
the engine takes (on the fakes: engine overhead only, no disk).

    python -m bench.policy_batch [--datastores 10 100 1000] [--runs 6] [--keep 4]

The engine runs the REAL ZFS adapter (appliance.host.zfs.Zfs) on a RecordingRunner
whose answers come from an in-memory FakeZfs: every ``zfs`` command line the adapter
builds is counted and carried out on the fake, so the counts are those the appliance
would run. For each N it prints the commands of the first run (nothing to prune yet) and
of a run in steady state (one snapshot per datastore to prune), and the median run time.

    python -m bench.policy_batch --guest-script POOL --datastores 100 | ssh root@APPLIANCE sh

prints a shell script for a machine with ZFS (the appliance): N scratch file systems
under POOL/zds-bench, one batched ``zfs snapshot`` vs one per file system, one ``zfs
destroy -r`` vs one per file system, timed; then everything is destroyed. The e2e suite
runs it with ZDS_E2E_BENCH=1 (tests/e2e/test_policies_e2e.py).
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from appliance.engine import Engine
from appliance.fake_hosts import fake_hosts
from appliance.host.fakes.zfs import FakeZfs, GiB
from appliance.host.run import CommandResult, RecordingRunner
from appliance.host.zfs import Zfs
from appliance.model import DatastoreRecord, DatastoreSpec, NfsClient
from appliance.policies.service import PolicyRequest
from appliance.settings import Settings


class ZfsCli:
    """Answers ``zfs`` command lines from a FakeZfs (the few a policy run uses)."""

    def __init__(self, fake: FakeZfs) -> None:
        self.fake = fake

    def __call__(self, argv: tuple[str, ...], _input: str | None) -> CommandResult | None:
        if argv[0] != "zfs":
            return None
        out = ""
        try:
            if argv[1] == "get" and "snapshot" in argv:
                wanted, root = argv[-2].split(","), argv[-1]
                lines = []
                for s in self.fake.list_snapshots_under(root, wanted):
                    for k, v in s.properties.items():
                        source = "local" if ":" in k else "-"
                        lines.append(f"{s.name}\t{k}\t{v}\t{source}")
                out = "\n".join(lines) + "\n"
            elif argv[1] == "snapshot":
                rest = list(argv[2:])
                props: dict[str, str] = {}
                while rest and rest[0] == "-o":
                    k, v = rest[1].split("=", 1)
                    props[k] = v
                    rest = rest[2:]
                self.fake.snapshot_many(rest, props)
            elif argv[1] == "destroy" and argv[2] == "-r":
                root, name = argv[-1].split("@", 1)
                self.fake.destroy_snapshot_recursive(root, name)
            elif argv[1] == "destroy":
                ds, names = argv[-1].split("@", 1)
                self.fake.destroy_snapshots(ds, names.split(","))
            elif argv[1] == "holds":
                held = self.fake.holds(list(argv[4:]))
                out = "".join(f"{s}\t{t}\t0\n" for s, tags in held.items() for t in tags)
            else:
                raise SystemExit(f"bench: unexpected command {shlex.join(argv)}")
        except Exception as exc:
            return CommandResult(argv, 1, "", f"{exc}\n")
        return CommandResult(argv, 0, out, "")


def engine_for(n: int, state_dir: Path) -> tuple[Engine, RecordingRunner]:
    fakes = fake_hosts("tank", pool_size=100 * n * GiB)
    fake = fakes.zfs
    runner = RecordingRunner()
    runner.responders.append(ZfsCli(fake))
    # the real adapter, so the bench counts the command lines the appliance would run
    hosts = replace(fakes.adapters(), zfs=Zfs(runner))
    engine = Engine.create(Settings().with_state_dir(state_dir), hosts)
    for i in range(n):
        spec = DatastoreSpec(name=f"ds{i:04d}", pool="tank", protocol="nfs3", size=GiB,
                             nfs_clients=(NfsClient("192.0.2.0/24"),),
                             labels=(("protect", "gold"),))
        fake.create_filesystem(spec.dataset, {})
        engine.store.put_datastore(DatastoreRecord(spec, "ready", export_id=100 + i,
                                                   created=time.time()))
    return engine, runner


def bench(n: int, runs: int, keep: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        engine, runner = engine_for(n, Path(tmp))
        engine.policies.put("gold", PolicyRequest(every="15m", retention={"frequent": keep},
                                                  labels={"protect": "gold"}))
        per_run: list[Counter[str]] = []
        seconds: list[float] = []
        for _ in range(runs):
            before = len(runner.calls)
            t0 = time.perf_counter()
            job = engine.jobs.wait(engine.policies.run_now("gold").id, 600)
            seconds.append(time.perf_counter() - t0)
            assert job.state == "succeeded", job
            per_run.append(Counter(" ".join(c[:2]) for c in runner.calls[before:]))
        snaps = engine.ctx.zfs.list_snapshots_under("tank/datastores", ["type"])
        engine.close()
    assert len(snaps) == n * keep, (len(snaps), n * keep)
    return {"n": n, "first": per_run[0], "steady": per_run[-1],
            "median_s": statistics.median(seconds[keep:] or seconds),
            "snapshots": len(snaps)}


def fmt(c: Counter[str]) -> str:
    return f"{sum(c.values()):5d}  (" + ", ".join(f"{k}: {v}" for k, v in sorted(c.items())) \
        + ")"


def guest_script(pool: str, n: int) -> str:
    """A POSIX sh script for a machine with ZFS (the appliance): N scratch file systems
    under POOL/zds-bench, then N snapshots with one ``zfs snapshot`` vs one command each,
    and their removal with one ``zfs destroy -r`` vs one command each; prints the times
    and destroys everything."""
    root = f"{pool}/zds-bench"
    return f"""set -e
root={shlex.quote(root)}; n={int(n)}
now() {{ date +%s.%N; }}
zfs create "$root"
trap 'zfs destroy -r "$root"' EXIT
i=0; while [ $i -lt $n ]; do zfs create "$root/d$i"; i=$((i+1)); done
names=""; i=0; while [ $i -lt $n ]; do names="$names $root/d$i@batch"; i=$((i+1)); done
t0=$(now); zfs snapshot $names; t1=$(now)
i=0; while [ $i -lt $n ]; do zfs snapshot "$root/d$i@single"; i=$((i+1)); done; t2=$(now)
zfs destroy -r "$root@batch"; t3=$(now)
i=0; while [ $i -lt $n ]; do zfs destroy "$root/d$i@single"; i=$((i+1)); done; t4=$(now)
awk -v n=$n -v a=$t0 -v b=$t1 -v c=$t2 -v d=$t3 -v e=$t4 'BEGIN {{
  printf "%d datasets: snapshot all in one command %.2f s, ", n, b-a
  printf "one command each %.2f s (%.1fx)\\n", c-b, (c-b)/(b-a)
  printf "%d datasets: destroy all in one zfs destroy -r %.2f s, ", n, d-c
  printf "one command each %.2f s (%.1fx)\\n", e-d, (e-d)/(d-c) }}'
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datastores", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--keep", type=int, default=4)
    ap.add_argument("--guest-script", metavar="POOL",
                    help="print the sh script that times the same on a real pool")
    args = ap.parse_args(argv)
    if args.guest_script:
        print(guest_script(args.guest_script, args.datastores[0]), end="")
        return 0
    print(f"{'datastores':>10}  {'zfs commands, first run':<48} {'steady-state run':<56} "
          "median run s")
    for n in args.datastores:
        r = bench(n, max(args.runs, args.keep + 2), args.keep)
        print(f"{r['n']:>10}  {fmt(r['first']):<48} {fmt(r['steady']):<56} "  # type: ignore[arg-type]
              f"{r['median_s']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
