"""A zvol through LIO + open-iscsi on loopback against the raw zvol, settings varied.

    python -m bench.iscsi_lun [--image zds.raw] [--rounds 3] [--out DIR]
    python -m bench.iscsi_lun --report DIR/results.jsonl [--img-dir docs/img]

Boots the appliance once (or runs inside bench/nfs_servers.py's boot with --iscsi). In
the guest it makes a sparse zvol with the properties of a ZDS iSCSI datastore
(volblocksize 16K, lz4, sync=standard, logbias=latency), fills the region the probes
use (a never-written zvol reads holes, which cost nothing), exports it from a LIO target
of its own with ZDS's LUN attributes (VAAI, is_nonrot), logs the appliance's own
open-iscsi initiator in on 127.0.0.1:3260 (no discovery) and runs the probes' job files
on the raw zvol (/dev/zvol/...) and on the LUN (/dev/sdX), with the probes' iSCSI
semantics (O_DIRECT on both; writes complete in the LUN's write cache, as the zvol
reports WCE=1).

Parts (results appended to DIR/results.jsonl):

1. ``lun-tune``: one change at a time against the LUN as ZDS makes it, each round beside
   the raw zvol: LIO default_cmdsn_depth + the ACL's queue depth + open-iscsi's
   queue_depth/cmds_max 128 (default 64/32), the initiator's max_sectors_kb raised to
   the LUN's hardware limit, a fileio backstore (write-through) instead of block,
   emulate_write_cache (refused on block backstores: the zvol's own cache decides), zvol
   volthreading=off, and volblocksize 64K (a second zvol). On randread-4k-qd32 and
   streaming-read, the issue's targets (LUN >= 0.9x raw zvol).
2. ``lun``: raw zvol vs the LUN as ZDS makes it, all four profiles, ``--rounds`` rounds.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from appliance.host.lio import VAAI_ATTRIBUTES
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

IQN = "iqn.2026-11.org.example.zdsbench:lun"
ZVOL = "bench-lun"
PROFILES = ("randread-4k-qd32", "streaming-read", "vm-mixed-4k", "streaming-write")
TARGETS = ("randread-4k-qd32", "streaming-read")
FILL = "512m"  # >= every profile's region (vm-mixed-4k: 4 workers x 64m on one device)
ZVOL_PROPS = "-o volblocksize=16K -o compression=lz4 -o sync=standard -o logbias=latency"

# What the guest runs to (re)make the LIO target: rtslib in one process (a targetcli per
# step costs seconds under emulation). argv[1] is a JSON config; prints what it set.
LIO_SCRIPT = r'''
import json, sys
import rtslib_fb as r
cfg = json.loads(sys.argv[1])
root = r.RTSRoot()
for t in list(root.targets):
    if t.wwn == cfg["iqn"]:
        t.delete()
for so in list(root.storage_objects):
    if so.name == "zdsbench":
        so.delete()
if cfg.get("remove"):
    sys.exit(0)
if cfg["backstore"] == "fileio":
    so = r.FileIOStorageObject("zdsbench", dev=cfg["dev"], write_back=cfg.get("write_back", False))
else:
    so = r.BlockStorageObject("zdsbench", dev=cfg["dev"])
done = {}
for k, v in cfg["attrs"].items():
    try:
        so.set_attribute(k, str(v))
        done[k] = so.get_attribute(k)
    except Exception as exc:
        done[k] = "refused: " + str(exc)[:120]
t = r.Target(r.FabricModule("iscsi"), cfg["iqn"])
tpg = r.TPG(t, 1)
r.NetworkPortal(tpg, "0.0.0.0", 3260)
lun = r.LUN(tpg, 0, so)
for k, v in cfg.get("tpg", {}).items():
    tpg.set_attribute(k, str(v))
    done["tpg." + k] = tpg.get_attribute(k)
tpg.set_attribute("authentication", "0")
acl = r.NodeACL(tpg, cfg["initiator"])
if cfg.get("acl_depth"):
    try:
        acl.tcq_depth = str(cfg["acl_depth"])
        done["acl.queue_depth"] = acl.tcq_depth
    except Exception as exc:
        done["acl.queue_depth"] = "refused: " + str(exc)[:120]
r.MappedLUN(acl, 0, lun)
tpg.enable = True
for k in ("hw_max_sectors", "hw_queue_depth", "queue_depth", "emulate_write_cache"):
    try:
        done.setdefault(k, so.get_attribute(k))
    except Exception:
        pass
print(json.dumps(done))
'''

# One change at a time against ZDS's LUN ("lun"); "zvol" keys change the zvol (both sides)
VARIANTS: dict[str, dict[str, Any]] = {
    "lun": {},
    "qd-128": {"tpg": {"default_cmdsn_depth": 128}, "acl_depth": 128,
               "node": {"node.session.queue_depth": 128, "node.session.cmds_max": 128}},
    "max-sectors": {"max_sectors": True},
    "fileio": {"backstore": "fileio"},
    "wce-1": {"attrs": {"emulate_write_cache": 1}},
    "volthreading-off": {"zvol": {"volthreading": "off"}},
    "volblocksize-64k": {"volblocksize": "64K"},
}


class IscsiBench:
    def __init__(self, g: Guest, pool: str) -> None:
        self.g = g
        self.pool = pool
        self.initiator = ""
        self.device = ""
        self.logged_in = False

    def zvol(self, vbs: str = "16K") -> str:
        return f"{self.pool}/{ZVOL}" + ("" if vbs == "16K" else f"-{vbs.lower()}")

    def setup(self) -> None:
        g = self.g
        g.write("/root/zds-bench/lio.py", LIO_SCRIPT)
        g.sh("f=/etc/iscsi/initiatorname.iscsi; grep -q '^InitiatorName=' $f || "
             "echo \"InitiatorName=$(iscsi-iname -p iqn.1993-08.org.debian:01)\" > $f; "
             "systemctl restart iscsid.service")
        self.initiator = g.sh("sed -n 's/^InitiatorName=//p' "
                              "/etc/iscsi/initiatorname.iscsi").strip()
        for vbs in ("16K", "64K"):
            vol = self.zvol(vbs)
            g.sh(f"zfs create -s -V 4G {ZVOL_PROPS.replace('16K', vbs)} {vol} && "
                 f"udevadm settle && test -b /dev/zvol/{vol}")
            g.sh(f"fio --name=fill --filename=/dev/zvol/{vol} --rw=write --bs=1m "
                 f"--size={FILL} --direct=1 --ioengine=libaio --iodepth=8 >/dev/null", 900)
        log(f"zvols {self.zvol()} and {self.zvol('64K')} filled ({FILL}); initiator "
            f"{self.initiator}")

    def export(self, v: dict[str, Any]) -> dict[str, str]:
        """Target on the variant's zvol, logged in; returns the attributes LIO shows."""
        self.logout()
        g = self.g
        vol = self.zvol(v.get("volblocksize", "16K"))
        g.sh(f"zfs set volthreading={v.get('zvol', {}).get('volthreading', 'on')} {vol}")
        cfg = {"iqn": IQN, "dev": f"/dev/zvol/{vol}", "initiator": self.initiator,
               "backstore": v.get("backstore", "block"),
               "attrs": {**VAAI_ATTRIBUTES, **v.get("attrs", {})},
               "tpg": v.get("tpg", {}), "acl_depth": v.get("acl_depth", 0)}
        shown: dict[str, str] = json.loads(g.sh(f"python3 /root/zds-bench/lio.py "
                                f"{shlex.quote(json.dumps(cfg))}").strip().splitlines()[-1])
        portal = "127.0.0.1:3260"
        g.sh(f"iscsiadm -m node -T {IQN} -p {portal} -o new >/dev/null")
        for key, value in v.get("node", {}).items():
            g.sh(f"iscsiadm -m node -T {IQN} -p {portal} -o update -n {key} -v {value}")
        g.sh(f"iscsiadm -m node -T {IQN} -p {portal} --login >/dev/null", 120)
        self.logged_in = True
        link = f"/dev/disk/by-path/ip-{portal}-iscsi-{IQN}-lun-0"
        g.sh(f"for i in $(seq 60); do test -b {link} && break; sleep 0.5; done; "
             f"udevadm settle; test -b {link}")
        self.device = g.sh(f"readlink -f {link}").strip()
        name = self.device.rsplit("/", 1)[-1]
        q = f"/sys/block/{name}/queue"
        if v.get("max_sectors"):
            g.sh(f"cat {q}/max_hw_sectors_kb > {q}/max_sectors_kb")
        shown["initiator.max_sectors_kb"] = g.sh(f"cat {q}/max_sectors_kb").strip()
        shown["initiator.max_hw_sectors_kb"] = g.sh(f"cat {q}/max_hw_sectors_kb").strip()
        shown["initiator.queue_depth"] = g.sh(
            f"cat /sys/block/{name}/device/queue_depth").strip()
        # what the initiator was told of the LUN's cache: "write back" = WCE=1
        shown["initiator.cache_type"] = g.try_sh(
            f"cat /sys/block/{name}/device/scsi_disk/*/cache_type")[1].strip()
        return shown

    def logout(self) -> None:
        if self.logged_in:
            self.g.try_sh(f"iscsiadm -m node -T {IQN} -p 127.0.0.1:3260 --logout; "
                          f"iscsiadm -m node -T {IQN} -p 127.0.0.1:3260 -o delete", 120)
            self.logged_in = False

    def remove(self) -> None:
        self.logout()
        self.g.try_sh(f"python3 /root/zds-bench/lio.py "
                      f"{shlex.quote(json.dumps({'iqn': IQN, 'remove': True}))}")

    def run(self, part: str, config: str, profile: str, rnd: int, path: str
            ) -> Measurement:
        return self.g.fio(part, config, profile, rnd, path, layer="block", protocol="iscsi",
                          is_device=True)

    def part_tune(self, rounds: int) -> None:
        names = list(VARIANTS)
        for r in range(rounds):
            for name in (names if r % 2 == 0 else list(reversed(names))):
                v = VARIANTS[name]
                try:
                    shown = self.export(v)
                except Exception as exc:
                    log(f"  lun-tune {name}: {exc}")
                    continue
                log(f"  {name}: " + json.dumps(shown))
                vol = self.zvol(v.get("volblocksize", "16K"))
                for p in TARGETS:
                    self.run("lun-tune", f"zvol:{name}", p, r, f"/dev/zvol/{vol}")
                    self.run("lun-tune", f"lun:{name}", p, r, self.device)
        self.g.sh(f"zfs set volthreading=on {self.zvol()}")

    def part_lun(self, rounds: int) -> None:
        self.export(VARIANTS["lun"])
        for r in range(rounds):
            for p in PROFILES:
                sides = [("zvol", f"/dev/zvol/{self.zvol()}"), ("lun", self.device)]
                for c, path in (sides if r % 2 == 0 else list(reversed(sides))):
                    self.run("lun", c, p, r, path)


def run_all(g: Guest, rounds: int, tune_rounds: int, parts: str = "lun-tune,lun") -> None:
    pools = g.api("GET", "/pools")
    b = IscsiBench(g, pools[0]["name"])
    b.setup()
    try:
        if "lun-tune" in parts:
            log("part lun-tune: one LIO/initiator/zvol change at a time, raw zvol beside")
            b.part_tune(tune_rounds)
        if "lun" in parts.split(","):
            log("part lun: raw zvol vs ZDS's LUN, all profiles")
            b.part_lun(rounds)
    finally:
        b.remove()


def report(results: Path, img_dir: Path | None) -> str:
    runs = load(results)
    out = [f"# bench.iscsi_lun {results}"]
    tune: list[Ratio] = []
    for name in VARIANTS:
        for p in TARGETS:
            if (r := ratio(runs, "lun-tune", p, f"zvol:{name}", f"lun:{name}")) is not None:
                tune.append(r)
    if tune:
        out.append(ratio_table(tune, "lun-tune: LUN / raw zvol, per variant (same round)"))
    vs_default = [r for name in VARIANTS if name != "lun" for p in TARGETS
                  if (r := ratio(runs, "lun-tune", p, "lun:lun", f"lun:{name}")) is not None]
    if vs_default:
        out.append(ratio_table(vs_default, "lun-tune: LUN variant / LUN as ZDS makes it"))
    main = [r for p in PROFILES if (r := ratio(runs, "lun", p, "zvol", "lun")) is not None]
    if main:
        out.append(ratio_table(main, "lun: LUN / raw zvol (target >= 0.9 on "
                                     "randread-4k-qd32 and streaming-read)"))
    raw: dict[str, list[float]] = {}
    for m in runs:
        if not m.error and m.part in ("lun", "lun-tune"):
            raw.setdefault(f"{m.part}/{m.config}/{m.profile}", []).append(
                round(m.summary.get("mbps" if m.profile.startswith("streaming") else "iops",
                                    0.0), 1))
    out.append("# raw (per round): " + json.dumps(raw))
    if img_dir is not None and main:
        plot_ratios(main, "LIO LUN (open-iscsi on loopback) / raw zvol (QEMU TCG; "
                          "interleaved rounds)", img_dir / "iscsi-lun-vs-zvol.png", target=0.9)
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--image")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runtime", type=int,
                    help="measured seconds per fio step (default: the probes' 5 s)")
    ap.add_argument("--tune-rounds", type=int, default=1)
    ap.add_argument("--parts", default="lun-tune,lun")
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
    print(f"# bench.iscsi_lun, {machine_line(False)}; results {results}")
    t0 = time.monotonic()
    with booted(args.image) as vm:
        run_all(Guest(vm, results, args.runtime), args.rounds, args.tune_rounds, args.parts)
    print(report(results, img))
    print(f"# took {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
