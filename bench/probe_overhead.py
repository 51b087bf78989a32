"""The probe's own overhead: a probe's IOPS vs plain fio running the same job file.

    python -m bench.probe_overhead [--dir DIR] [--runtime 5] [--rounds 3] [PROFILE ...]

For each profile the job file is rendered once; "plain" runs it with ``fio
--output-format=json`` exactly as a user would, "probe" runs the same profile through the
ProbeExecutor (per-second logs, json+, CPU sampler thread, parsing). The two alternate
(plain, probe, plain, probe ...) in one run on the same directory so drift on a shared
machine hits both; the table shows the medians and the median of the pairwise ratios
probe/plain, which must stay within 3%. On a busy shared machine, disk I/O varies by
±20% between runs: use more rounds, or --dir on tmpfs with --buffered to take the disk
out and measure the probe's CPU overhead alone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from appliance.host.fio import Fio
from appliance.host.run import SubprocessRunner
from appliance.host.spawn import PopenSpawner
from appliance.host.sysstat import SysStats
from appliance.probes import fioparse, jobfile, profiles
from appliance.probes.execute import ProbeExecutor, ProbeTarget

DEFAULT_PROFILES = ("randread-4k-qd32", "bst", "streaming-read")
LIMIT = 0.03


def plain_iops(runner: SubprocessRunner, job_text: str, workdir: Path) -> float:
    job = workdir / "plain.fio"
    job.write_text(job_text)
    res = runner.run(["fio", "--output-format=json", str(job)], timeout=3600)
    return sum(g.iops for g in fioparse.parse_json(res.stdout).groups)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profiles", nargs="*", default=list(DEFAULT_PROFILES))
    ap.add_argument("--dir", help="directory to run in (default: a temp dir in /var/tmp)")
    ap.add_argument("--runtime", type=int, default=5)
    ap.add_argument("--size", default="64m")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--buffered", action="store_true",
                    help="direct=0 (needed on tmpfs, e.g. --dir /dev/shm/zds-bench)")
    args = ap.parse_args(argv)

    runner = SubprocessRunner()
    spawner = PopenSpawner()
    base = Path(args.dir or tempfile.mkdtemp(prefix="zds-bench-", dir="/var/tmp"))
    base.mkdir(parents=True, exist_ok=True)
    data = base / "data"
    data.mkdir(exist_ok=True)
    executor = ProbeExecutor(Fio(runner, spawner), str(base / "work"), stats=SysStats())
    print(f"# probe overhead, fio {Fio(runner, spawner).version()}, dir {data}, "
          f"runtime {args.runtime}s, {args.rounds} rounds (medians)")
    rows = []
    failed = False
    for name in args.profiles:
        prof = profiles.get(name)
        over: dict[str, object] = {"runtime": args.runtime, "size": args.size}
        if args.buffered:
            over["direct"] = False
        if "workers" in prof.defaults and isinstance(prof.defaults["workers"], list):
            over["workers"] = "2"
        params = prof.resolve(over)
        text = jobfile.render(prof, params, jobfile.FioTarget(str(data)))
        plain, probe = [], []
        for _ in range(args.rounds):
            plain.append(plain_iops(runner, text, base))
            r = executor.run(name, over, ProbeTarget("local", "bench", str(data)))
            if r.status != "ok":
                print(f"{name}: probe failed: {r.error}", file=sys.stderr)
                return 2
            probe.append(sum(s.metrics["iops"] for s in r.steps))
        p, q = statistics.median(plain), statistics.median(probe)
        # each probe run against the plain run just before it: robust to slow drift
        ratio = statistics.median(b / a for a, b in zip(plain, probe, strict=True) if a)
        ok = abs(ratio - 1.0) <= LIMIT
        failed |= not ok
        rows.append((name, p, q, ratio, ok, plain, probe))
    print(f"{'profile':<18} {'plain IOPS':>12} {'probe IOPS':>12} {'of medians':>11} "
          f"{'pairwise':>9}  within 3%")
    for name, p, q, ratio, ok, _pl, _pr in rows:
        print(f"{name:<18} {p:>12,.0f} {q:>12,.0f} {q / p if p else 0:>11.3f} {ratio:>9.3f}"
              f"  {'yes' if ok else 'NO'}")
    print("# raw:", json.dumps({n: {"plain": [round(x) for x in pl],
                                    "probe": [round(x) for x in pr]}
                                for n, _p, _q, _r, _ok, pl, pr in rows}))
    if not args.dir:
        import shutil

        shutil.rmtree(base, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
