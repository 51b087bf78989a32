"""Data-path benchmarks inside a booted appliance: one boot, many measurements.

bench/nfs_servers.py and bench/iscsi_lun.py drive the appliance's own data path from the
host: the REST API makes the datastores (so they carry ZDS's VM-tuned properties), and
the test control channel (``Appliance.exec``, root in the guest) runs fio on the NFS
mount, the LUN or the zvol. The fio job files are the probes' own (appliance.probes:
profiles + semantics + jobfile, rendered here from this checkout), so a figure here is
what ``zds probe run PROFILE --target nfs|iscsi`` measures, with one thing changed at a
time. Results go to a JSON-lines file as they come (a late failure keeps the rest).

Under QEMU TCG (no KVM on the machines this is built on) every instruction of the guest
is emulated: absolute figures are far below real hardware; ratios measured side by side,
in interleaved rounds, are what these benchmarks report.
"""

from __future__ import annotations

import base64
import json
import os
import platform
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from appliance.probes import fioparse, jobfile, profiles, semantics
from appliance.probes.model import StepResult, group_metrics, summarize

GUEST_DIR = os.environ.get("ZDS_BENCH_GUEST_DIR", "/root/zds-bench")
# the probes' short defaults, one point per profile (vm-mixed-4k: 4 workers, TR-3808's
# 4 outstanding I/O each); sizes keep every working set inside the guest's ARC
PROFILE_OVERRIDES: dict[str, dict[str, Any]] = {
    "vm-mixed-4k": {"workers": "4", "size": "64m"},
    "randread-4k-qd32": {"size": "128m"},
    "streaming-read": {"size": "256m"},
    "streaming-write": {"size": "256m"},
}


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@dataclass
class Measurement:
    """One fio run: which part/config/profile/round, its summary and the guest's CPU."""

    part: str
    config: str
    profile: str
    round: int
    summary: dict[str, float] = field(default_factory=dict)
    cpu_busy_pct: float = 0.0  # whole guest, over the fio run (2 vCPUs = 100%)
    seconds: float = 0.0
    semantics: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    at: str = ""


def parse_proc_stat(line: str) -> tuple[int, int]:
    """(busy, total) jiffies from the first line of /proc/stat.

    Sample: ``cpu  4705 356 584 3699176 23060 0 277 0 0 0`` (user nice system idle iowait
    irq softirq steal guest guest_nice); busy = all but idle and iowait.
    """
    parts = line.split()
    if not parts or parts[0] != "cpu":
        raise ValueError(f"not a /proc/stat cpu line: {line!r}")
    vals = [int(x) for x in parts[1:9]]
    total = sum(vals)
    return total - vals[3] - vals[4], total


class Guest:
    """The booted appliance: root shell, files, its REST API, fio with the probes' jobs."""

    def __init__(self, vm: Any, results: Path, runtime: int | None = None) -> None:
        self.vm = vm
        self.results = results
        # measured seconds per fio step (None: the probes' short default, 5 s)
        self.runtime = runtime
        self.http = httpx.Client(base_url=vm.api_url + "/api/v1", verify=False, timeout=900,
                                 headers={"Authorization": f"Bearer {vm.admin_token()}"})

    # -- shell
    def sh(self, cmd: str, timeout: float = 600.0) -> str:
        rc, out = self.vm.exec(cmd, timeout)
        if rc != 0:
            raise RuntimeError(f"guest command failed ({rc}): {cmd}\n{out[-2000:]}")
        return str(out)

    def try_sh(self, cmd: str, timeout: float = 600.0) -> tuple[int, str]:
        rc, out = self.vm.exec(cmd, timeout)
        return int(rc), str(out)

    def write(self, path: str, text: str) -> None:
        data = base64.b64encode(text.encode()).decode()
        self.sh(f"mkdir -p {shlex.quote(str(Path(path).parent))} && "
                f"echo {data} | base64 -d > {shlex.quote(path)}")

    # -- API
    def api(self, method: str, path: str, **kw: Any) -> Any:
        r = self.http.request(method, path, **kw)
        if r.status_code >= 400:
            raise RuntimeError(f"{method} {path}: {r.status_code} {r.text[:500]}")
        return r.json() if r.content else None

    # -- fio
    def fio(self, part: str, config: str, profile_name: str, rnd: int, path: str, *,
            layer: str, protocol: str, is_device: bool = False,
            overrides: Mapping[str, Any] | None = None, timeout: float = 900.0
            ) -> Measurement:
        """Runs the probe profile's job file on ``path`` in the guest; never raises."""
        over = {**PROFILE_OVERRIDES.get(profile_name, {}), **(overrides or {})}
        if self.runtime is not None:
            over["runtime"] = self.runtime
        m = Measurement(part, config, profile_name, rnd,
                        at=datetime.now(UTC).isoformat(timespec="seconds"))
        t0 = time.monotonic()
        try:
            profile = profiles.get(profile_name)
            params = profile.resolve(over)
            sem = semantics.on_layer(semantics.requested(params, protocol), layer)
            io = semantics.fio_io(sem, layer)
            m.semantics = {**sem.as_dict(), "layer": layer, "fio": dict(io.options())}
            text = jobfile.render(profile, params, jobfile.FioTarget(path, is_device), io=io)
            self.write(f"{GUEST_DIR}/job.fio", text)
            out = self.sh(
                f"cd {GUEST_DIR} && head -1 /proc/stat && "
                f"fio --output-format=json+ --output={GUEST_DIR}/fio.json job.fio "
                f">/dev/null && head -1 /proc/stat && cat {GUEST_DIR}/fio.json", timeout)
            lines = out.splitlines()
            stats = [ln for ln in lines if ln.startswith("cpu ")]
            b0, t0_ = parse_proc_stat(stats[0])
            b1, t1_ = parse_proc_stat(stats[1])
            m.cpu_busy_pct = round(100.0 * (b1 - b0) / max(1, t1_ - t0_), 1)
            report = fioparse.parse_json(out[out.index("{"):])
            steps = []
            for step in profile.plan(params):
                g = report.group(step.name)
                if g is None:
                    continue
                if g.error:
                    raise RuntimeError(f"fio job {step.name} failed with error {g.error}")
                steps.append(StepResult(step.name, step.label, dict(step.point),
                                        group_metrics(g)))
            m.summary = summarize(steps, profile.summary_rule)
        except Exception as exc:  # a failed run is recorded, the bench goes on
            m.error = str(exc)[-1500:]
            log(f"  {part}/{config}/{profile_name}: FAILED {m.error[:300]}")
        m.seconds = round(time.monotonic() - t0, 1)
        with self.results.open("a") as f:
            f.write(json.dumps(asdict(m)) + "\n")
        if not m.error:
            s = m.summary
            log(f"  {part:<6} {config:<18} {profile_name:<17} r{rnd} "
                f"{s.get('iops', 0):>9,.0f} IOPS {s.get('mbps', 0):>8,.1f} MB/s "
                f"p99 {s.get('lat_p99_ms', 0):.2f} ms cpu {m.cpu_busy_pct:.0f}% "
                f"({m.seconds:.0f} s)")
        return m


@contextmanager
def booted(image: str | None, memory_mib: int = 4096,
           extra_disks: Sequence[tuple[str, int]] = ()) -> Iterator[Any]:
    """Boots the appliance (``image``: a zds.raw; default: build or reuse the cached one)
    with the test control channel, waits for the API, powers it off at the end."""
    from images import build
    from images.vm import Appliance, Ports, kvm_works

    base = Path(image) if image else build.build() / "zds.raw"
    state = Path(tempfile.mkdtemp(prefix="zds-bench-"))
    vm = Appliance(state_dir=state, base_image=base, ports=Ports.random_free(),
                   test_control=True, memory_mib=memory_mib, extra_disks=tuple(extra_disks))
    vm.prepare(fresh_system=True, fresh_data=True)
    vm.start(kvm=kvm_works())
    try:
        vm.wait_control(900)
        vm.wait_healthy(900)
        yield vm
    finally:
        vm.stop(timeout=120)
        keep = Path(os.environ.get("ZDS_BENCH_KEEP_LOG", "/tmp/zds-bench-serial.log"))
        if (state / "serial.log").exists():
            shutil.copy(state / "serial.log", keep)
        shutil.rmtree(state, ignore_errors=True)


def machine_line(kvm: bool | None = None) -> str:
    return (f"{datetime.now(UTC).isoformat(timespec='minutes')}, host {platform.node()} "
            f"({os.cpu_count()} cores, shared), appliance under QEMU "
            f"{'KVM' if kvm else 'TCG (software emulation)'}, 2 vCPUs, 4 GiB")


# ---------------------------------------------------------------- reading results

def load(path: Path) -> list[Measurement]:
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            out.append(Measurement(**json.loads(line)))
    return out


def metric_of(profile: str) -> str:
    """The headline metric per profile: MB/s for streaming, IOPS otherwise."""
    return "mbps" if profile.startswith("streaming") else "iops"


@dataclass(frozen=True)
class Ratio:
    """b/a for one profile: median of the per-round ratios, their min and max, and the
    medians of each side."""

    profile: str
    metric: str
    a: str
    b: str
    median_a: float
    median_b: float
    ratio: float
    low: float
    high: float
    rounds: int
    cpu_a: float
    cpu_b: float


def ratio(runs: Sequence[Measurement], part: str, profile: str, a: str, b: str,
          metric: str | None = None) -> Ratio | None:
    """Per round, b's metric / a's; rounds where either failed are left out."""
    metric = metric or metric_of(profile)
    by: dict[tuple[str, int], Measurement] = {}
    for m in runs:
        if m.part == part and m.profile == profile and not m.error and metric in m.summary:
            by[(m.config, m.round)] = m
    rounds = sorted({r for (c, r) in by if c == a} & {r for (c, r) in by if c == b})
    if not rounds:
        return None
    va = [by[(a, r)].summary[metric] for r in rounds]
    vb = [by[(b, r)].summary[metric] for r in rounds]
    rs = [y / x for x, y in zip(va, vb, strict=True) if x]
    if not rs:
        return None
    return Ratio(profile, metric, a, b, statistics.median(va), statistics.median(vb),
                 statistics.median(rs), min(rs), max(rs), len(rs),
                 statistics.median(by[(a, r)].cpu_busy_pct for r in rounds),
                 statistics.median(by[(b, r)].cpu_busy_pct for r in rounds))


def ratio_table(rows: Sequence[Ratio], title: str) -> str:
    out = [f"# {title}",
           f"{'profile':<18} {'metric':<5} {'a':<16} {'b':<16} {'median a':>10} "
           f"{'median b':>10} {'b/a':>6} {'min':>6} {'max':>6} {'n':>2} {'cpu a':>6} "
           f"{'cpu b':>6}"]
    for r in rows:
        out.append(f"{r.profile:<18} {r.metric:<5} {r.a:<16} {r.b:<16} {r.median_a:>10,.1f} "
                   f"{r.median_b:>10,.1f} {r.ratio:>6.2f} {r.low:>6.2f} {r.high:>6.2f} "
                   f"{r.rounds:>2} {r.cpu_a:>5.0f}% {r.cpu_b:>5.0f}%")
    return "\n".join(out)


def plot_ratios(rows: Sequence[Ratio], title: str, out: Path, target: float | None = None
                ) -> None:
    """Bars of b/a per profile with min-max whiskers (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    labels = [f"{r.profile}\n{r.b} / {r.a}" for r in rows]
    vals = [r.ratio for r in rows]
    err = [[r.ratio - r.low for r in rows], [r.high - r.ratio for r in rows]]
    ax.bar(range(len(rows)), vals, yerr=err, capsize=4, color="#4a7db3")
    ax.axhline(1.0, color="black", linewidth=0.8)
    if target is not None:
        ax.axhline(target, color="#c0392b", linestyle="--", linewidth=0.8,
                   label=f"target {target:g}")
        ax.legend()
    ax.set_xticks(range(len(rows)), labels, fontsize=7)
    ax.set_ylabel("ratio (median of rounds; whiskers min-max)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
