"""NVMe/TCP against iSCSI on the same zvol, with the raw zvol beside them.

    python -m bench.nvme_iscsi [--image zds.raw] [--rounds 3] [--out DIR]
    python -m bench.nvme_iscsi --report DIR/results.jsonl [--img-dir docs/img]

Boots the appliance once. In the guest it makes the sparse zvol bench/iscsi_lun.py makes
(ZDS's iSCSI/NVMe datastore properties: volblocksize 16K, lz4, sync=standard,
logbias=latency) and fills the region the probes use. Each round, in alternating order:

- ``zvol``: fio on /dev/zvol/... (no protocol: the baseline);
- ``iscsi``: the zvol as ZDS's LUN (LIO block backstore with ZDS's attributes), the
  appliance's open-iscsi logged in on 127.0.0.1:3260; fio on /dev/sdX;
- ``nvme``: the zvol as namespace 1 of a subsystem written by ZDS's own adapter
  (appliance.host.nvmet, as a datastore gets it), on a port of its own (127.0.0.1:4430),
  nvme-cli connected over loopback; fio on /dev/nvmeXnY.

Only one export exists at a time. fio runs the probes' job files with the same I/O
options on all three (the block layer's: O_DIRECT, libaio). The guest's CPU is read from
/proc/stat around each run, so ``cpu_us_per_io`` = busy fraction x 2 vCPUs / IOPS: what
an I/O costs the appliance, initiator and target together (both are in the guest).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from bench.guest import (
    Guest,
    Measurement,
    Ratio,
    booted,
    load,
    log,
    machine_line,
    plot_ratios,
    ratio,
    ratio_table,
)
from bench.iscsi_lun import VARIANTS, IscsiBench

NQN = "nqn.2026-11.org.example.zdsbench:ns"
PORT_ID, PORT = 9902, 4430
VCPUS = 2
PROFILES = ("randread-4k-qd32", "vm-mixed-4k")
CONFIGS = ("zvol", "iscsi", "nvme")

# Run in the guest with the appliance's venv: the datastore's subsystem as ZDS makes it.
NVME_SCRIPT = r'''
import json, sys, uuid
from appliance.host.nvmet import Nvmet, NamespaceSpec, PortSpec, SubsystemSpec
from appliance.host.run import SubprocessRunner
cfg = json.loads(sys.argv[1])
n = Nvmet(SubprocessRunner())
assert n.available(), "no configfs nvmet/"
if cfg.get("remove"):
    n.remove_subsystem(cfg["nqn"])
    n.remove_port(cfg["port_id"])
    sys.exit(0)
u = uuid.UUID(cfg["uuid"])
n.apply_port(PortSpec(cfg["port_id"], "127.0.0.1", cfg["port"]))
n.apply_subsystem(SubsystemSpec(cfg["nqn"], u.hex[:20], (NamespaceSpec(cfg["dev"], str(u),
                  u.hex),), hosts=(cfg["host"],)), [cfg["port_id"]])
print(json.dumps({"nguid": u.hex}))
'''
BENCH_UUID = "6a1e5c3d-0000-4000-8000-00000000be01"


class NvmeSide:
    def __init__(self, g: Guest, zvol: str) -> None:
        self.g = g
        self.zvol = zvol
        self.host = ""
        self.device = ""

    def setup(self) -> None:
        self.g.write("/root/zds-bench/nvme.py", NVME_SCRIPT)
        self.g.sh("modprobe nvme-tcp; test -s /etc/nvme/hostnqn || "
                  "nvme gen-hostnqn > /etc/nvme/hostnqn")
        self.host = self.g.sh("cat /etc/nvme/hostnqn").strip()

    def _script(self, cfg: dict[str, object]) -> str:
        return self.g.sh("/opt/zds/venv/bin/python /root/zds-bench/nvme.py "
                         f"{shlex.quote(json.dumps(cfg))}")

    def export(self) -> str:
        out = self._script({"nqn": NQN, "port_id": PORT_ID, "port": PORT, "uuid": BENCH_UUID,
                            "dev": f"/dev/zvol/{self.zvol}", "host": self.host})
        json.loads(out.strip().splitlines()[-1])
        self.g.sh(f"nvme connect -t tcp -a 127.0.0.1 -s {PORT} -n {NQN} -q {self.host}", 120)
        link = f"/dev/disk/by-id/nvme-uuid.{BENCH_UUID}"
        self.g.sh(f"for i in $(seq 60); do test -b {link} && break; sleep 0.5; done; "
                  f"udevadm settle; test -b {link}")
        self.device = self.g.sh(f"readlink -f {link}").strip()
        name = self.device.rsplit("/", 1)[-1]
        q = f"/sys/block/{name}/queue"
        log(f"  nvme {self.device}: nr_requests {self.g.sh(f'cat {q}/nr_requests').strip()}, "
            f"queues {self.g.try_sh(f'ls /sys/block/{name}/mq | wc -l')[1].strip()}")
        return self.device

    def remove(self) -> None:
        self.g.try_sh(f"nvme disconnect -n {NQN}", 120)
        self.g.try_sh("/opt/zds/venv/bin/python /root/zds-bench/nvme.py "
                      + shlex.quote(json.dumps({"nqn": NQN, "port_id": PORT_ID,
                                                "remove": True})))


def run_all(g: Guest, rounds: int) -> None:
    pools = g.api("GET", "/pools")
    lun = IscsiBench(g, pools[0]["name"])
    lun.setup()
    nvme = NvmeSide(g, lun.zvol())
    nvme.setup()
    raw = f"/dev/zvol/{lun.zvol()}"
    try:
        for r in range(rounds):
            order = list(CONFIGS) if r % 2 == 0 else list(reversed(CONFIGS))
            for config in order:
                if config == "iscsi":
                    lun.export(VARIANTS["lun"])
                    path = lun.device
                elif config == "nvme":
                    path = nvme.export()
                else:
                    path = raw
                try:
                    for p in PROFILES:
                        # the block layer's options on all three: one job file
                        g.fio("nvme", config, p, r, path, layer="block", protocol="iscsi",
                              is_device=True)
                finally:
                    if config == "iscsi":
                        lun.remove()
                    elif config == "nvme":
                        nvme.remove()
    finally:
        lun.remove()
        nvme.remove()


def cpu_us_per_io(m: Measurement) -> float:
    iops = m.summary.get("iops", 0.0)
    return (m.cpu_busy_pct / 100.0 * VCPUS * 1e6 / iops) if iops else 0.0


def report(results: Path, img_dir: Path | None) -> str:
    runs = load(results)
    out = [f"# bench.nvme_iscsi {results}"]
    rows: list[Ratio] = []
    for p in PROFILES:
        for a, b in (("iscsi", "nvme"), ("zvol", "iscsi"), ("zvol", "nvme")):
            if (r := ratio(runs, "nvme", p, a, b)) is not None:
                rows.append(r)
    if rows:
        out.append(ratio_table(rows, "IOPS b/a per round (nvme/iscsi: target >= 1.3 on "
                                     "randread-4k-qd32)"))
    out.append("# per config: median IOPS, p99 latency (ms), guest CPU busy, CPU us per I/O")
    for p in PROFILES:
        for c in CONFIGS:
            ms = [m for m in runs if m.part == "nvme" and m.profile == p and m.config == c
                  and not m.error]
            if not ms:
                continue
            out.append(
                f"{p:<18} {c:<6} {statistics.median(m.summary.get('iops', 0) for m in ms):>9,.0f}"
                f" IOPS  p99 {statistics.median(m.summary.get('lat_p99_ms', 0) for m in ms):7.2f}"
                f" ms  cpu {statistics.median(m.cpu_busy_pct for m in ms):4.0f}%"
                f"  {statistics.median(cpu_us_per_io(m) for m in ms):7.1f} us/IO  n={len(ms)}")
    if img_dir is not None and rows:
        plot_ratios([r for r in rows if r.a == "iscsi"],
                    "NVMe/TCP / iSCSI on the same zvol (nvmet vs LIO, loopback in the "
                    "appliance; QEMU TCG)", img_dir / "nvme-vs-iscsi.png", target=1.3)
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--image")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runtime", type=int,
                    help="measured seconds per fio step (default: the probes' 5 s)")
    ap.add_argument("--out", default=f"/tmp/zds-bench-{datetime.now(UTC):%Y%m%d-%H%M}")
    ap.add_argument("--report")
    ap.add_argument("--img-dir")
    args = ap.parse_args(argv)
    img = Path(args.img_dir) if args.img_dir else None
    if args.report:
        print(report(Path(args.report), img))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.jsonl"
    print(f"# bench.nvme_iscsi, {machine_line(False)}; results {results}")
    t0 = time.monotonic()
    with booted(args.image) as vm:
        run_all(Guest(vm, results, args.runtime), args.rounds)
    print(report(results, img))
    print(f"# took {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
