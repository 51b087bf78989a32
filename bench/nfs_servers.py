"""nfs-ganesha against the kernel NFS server (knfsd) on the same dataset, same client.

    python -m bench.nfs_servers [--image zds.raw] [--rounds 3] [--out DIR] [--iscsi]
    python -m bench.nfs_servers --report DIR/results.jsonl      # tables + plots again

Boots the appliance once (QEMU; TCG here) with a small extra disk (serial zdslog0) for
the SLOG part, makes an NFSv3 datastore through the REST API (so the dataset has ZDS's
VM-tuned properties) and, in the guest, mounts it over loopback with the probes' own
kernel-client options (appliance.host.nfsclient.mount_options: the same for both
servers) and runs the probes' job files on the mount: vm-mixed-4k, randread-4k-qd32,
streaming-read and streaming-write, with the probes' NFS semantics (client page cache
bypassed, reads from the ARC, every write stable: O_DIRECT + O_SYNC, what ESXi's
FILE_SYNC writes ask of the server).

Parts, each in interleaved rounds, results appended to DIR/results.jsonl as they come:

1. ``tune``: nfs-ganesha as shipped vs one NFS_CORE_PARAM change at a time (worker
   threads, RPC I/O threads, the duplicate request cache, RPC buffer sizes), on the two
   target profiles (vm-mixed-4k, streaming-read). A change that lifts either by more than
   ``--keep`` (5%) without costing the other as much joins "ganesha-tuned".
2. ``servers``: ganesha as shipped, ganesha-tuned and knfsd (Debian's nfs-kernel-server,
   8 threads, export options rw,sync,no_subtree_check,no_root_squash), all four profiles,
   ``--rounds`` rounds; the server order alternates per round. knfsd is masked in the
   image: the bench stops ganesha, unmasks and starts knfsd on the same ports (2049,
   mountd 20048), and puts everything back afterwards.
3. ``zfs``: the dataset's recordsize (16K, 64K = ZDS's default, 128K) on vm-mixed-4k and
   streaming-read, logbias (latency = default, throughput) on streaming-write.
4. ``sync``: streaming-write and vm-mixed-4k (sync writes) without a SLOG, with the
   small extra disk as SLOG, and with sync=disabled on the dataset (the ceiling, never a
   default).
5. ``probes``: the appliance's own probes through the REST API, local vs nfs on the
   datastore (size-sweep, randread-4k-qd32, vm-mixed-4k), with the semantics each result
   records: the probes' like-with-like check (needs an image of this checkout).

The iSCSI parts of bench/iscsi_lun.py (``lun``, ``lun-tune``) run in the same boot when
named in ``--parts`` (they are by default); ``--iscsi`` prints their tables too.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from appliance.host.nfsclient import mount_options
from bench.guest import (
    GUEST_DIR,
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

DATASTORE = "bench-nfs"
MOUNT = "/mnt/zds-bench-nfs"
FSID = 7001
PROFILES = ("vm-mixed-4k", "randread-4k-qd32", "streaming-read", "streaming-write")
TARGETS = ("vm-mixed-4k", "streaming-read")  # the issue's targets: ganesha >= 1.0x knfsd
KNFSD_UNITS = ("nfs-server.service", "nfs-kernel-server.service", "nfs-mountd.service",
               "nfsdcld.service", "nfs-blkmap.service")
LOG_DISK = ("zdslog0", 2 << 30)
# NFS_CORE_PARAM changes tried one at a time (ganesha 5.9 names; defaults in comments)
GANESHA_VARIANTS: dict[str, dict[str, str]] = {
    "workers-16": {"Nb_Worker": "16"},  # 256
    "ioq-thr-16": {"RPC_Ioq_ThrdMax": "16"},  # 200
    "drc-off": {"DRC_Disabled": "true"},  # false: a reply cache for non-idempotent ops
    "rpcbuf-4m": {"MaxRPCSendBufferSize": "4194304",
                  "MaxRPCRecvBufferSize": "4194304"},  # 1 MiB each
}


def core_param_text(base: str, params: dict[str, str]) -> str:
    """ganesha.conf with ``params`` set in its NFS_CORE_PARAM block (existing keys
    replaced, new ones added before the block's closing brace)."""
    m = re.search(r"NFS_CORE_PARAM\s*\{(.*?)\n\}", base, re.S)
    if m is None:
        raise ValueError("no NFS_CORE_PARAM block in ganesha.conf")
    body = m.group(1)
    for key, value in params.items():
        pat = re.compile(rf"^\s*{re.escape(key)}\s*=.*$", re.M | re.I)
        if pat.search(body):
            body = pat.sub(f"\t{key} = {value};", body)
        else:
            body += f"\n\t{key} = {value};"
    return base[:m.start(1)] + body + base[m.end(1):]


class NfsBench:
    def __init__(self, g: Guest, rounds: int) -> None:
        self.g = g
        self.rounds = rounds
        self.server = "ganesha"
        self.ganesha_conf = ""
        self.path = ""
        self.dataset = ""
        self.conf_now: dict[str, str] = {}

    # ---------------------------------------------------------------- setup
    def setup(self) -> None:
        g = self.g
        ds = g.api("PUT", f"/datastores/{DATASTORE}", json={
            "protocol": "nfs3", "size": "16G",
            "nfs": {"clients": [{"match": "127.0.0.1", "access": "rw"}]}})
        self.dataset = ds["dataset"]
        self.path = g.sh(f"zfs get -H -o value mountpoint {self.dataset}").strip()
        self.ganesha_conf = g.sh("cat /etc/ganesha/ganesha.conf")
        props = g.sh(f"zfs get -H -o property,value recordsize,compression,sync,logbias,"
                     f"atime,xattr,acltype,primarycache {self.dataset}")
        log(f"datastore {DATASTORE}: {self.dataset} at {self.path}; "
            + ", ".join(" ".join(ln.split()) for ln in props.splitlines()))
        g.sh(f"mkdir -p {MOUNT} && mkdir -p {self.path}/bench && chmod 777 {self.path}/bench")
        self.mount()

    def mount(self, timeout: float = 120.0) -> None:
        opts = mount_options(3, 2049, 20048)
        deadline = time.monotonic() + timeout
        while True:
            rc, out = self.g.try_sh(f"mountpoint -q {MOUNT} || mount -t nfs -o {opts} "
                                    f"127.0.0.1:{self.path} {MOUNT}", 90)
            if rc == 0 and self.g.try_sh(f"ls {MOUNT}/bench >/dev/null", 60)[0] == 0:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"cannot mount {self.path} from {self.server}: {out}")
            time.sleep(3)

    def umount(self) -> None:
        self.g.try_sh(f"umount {MOUNT} || umount -l {MOUNT}", 120)

    # ---------------------------------------------------------------- servers
    def use_ganesha(self, params: dict[str, str]) -> None:
        """ganesha with ``params`` in NFS_CORE_PARAM ({} = as shipped), mounted."""
        if self.server == "ganesha" and self.conf_now == params:
            return
        self.umount()
        g = self.g
        was, self.server = self.server, "switching"  # a failure half-way leaves this
        if was != "ganesha":
            g.try_sh("systemctl stop nfs-server.service; exportfs -ua; "
                     "rm -f /etc/exports.d/zds-bench.exports /etc/nfs.conf.d/zds-bench.conf; "
                     f"cp {GUEST_DIR}/nfs.conf.orig /etc/nfs.conf")
            g.sh(" && ".join(f"ln -sf /dev/null /etc/systemd/system/{u}"
                             for u in KNFSD_UNITS) + " && systemctl daemon-reload")
        g.write("/etc/ganesha/ganesha.conf", core_param_text(self.ganesha_conf, params)
                if params else self.ganesha_conf)
        g.sh("systemctl restart nfs-ganesha.service")
        self.server, self.conf_now = "ganesha", dict(params)
        time.sleep(2)
        _rc, state = g.try_sh("systemctl is-active nfs-ganesha.service")
        if state.strip() != "active":
            raise RuntimeError(f"ganesha did not start with {params}: "
                               + g.try_sh("journalctl -u nfs-ganesha -n 20 --no-pager")[1])
        deadline = time.monotonic() + 90
        while True:  # re-adds the datastore's export once ganesha answers on DBus
            try:
                g.api("POST", "/system/reconcile")
                break
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(3)
        self.mount()

    def use_knfsd(self) -> None:
        if self.server == "knfsd":
            return
        self.umount()
        g = self.g
        self.server = "switching"
        g.sh("systemctl stop nfs-ganesha.service")
        # mountd on ganesha's MNT port, so the client's options stay the same
        g.sh(f"test -f {GUEST_DIR}/nfs.conf.orig || cp /etc/nfs.conf {GUEST_DIR}/nfs.conf.orig")
        g.sh("mkdir -p /etc/exports.d /etc/nfs.conf.d && "
             "printf '[mountd]\\nport=20048\\n' > /etc/nfs.conf.d/zds-bench.conf && "
             "printf '\\n[mountd]\\nport=20048\\n' >> /etc/nfs.conf && "
             f"echo '{self.path} 127.0.0.1(rw,sync,no_subtree_check,no_root_squash,"
             f"fsid={FSID})' > /etc/exports.d/zds-bench.exports")
        g.sh("rm -f " + " ".join(f"/etc/systemd/system/{u}" for u in KNFSD_UNITS)
             + " && systemctl daemon-reload && systemctl start nfs-server.service")
        self.server, self.conf_now = "knfsd", {}
        threads = g.try_sh("cat /proc/fs/nfsd/threads")[1].strip()
        log(f"knfsd up ({threads} threads): "
            + g.try_sh("ss -Htlnp 'sport = :2049 or sport = :20048'")[1].replace("\n", "; "))
        self.mount()

    def restore(self) -> None:
        """ganesha as shipped, knfsd masked (what the image has)."""
        try:
            self.use_ganesha({})
        except Exception as exc:  # report, the VM is thrown away anyway
            log(f"restore failed: {exc}")

    # ---------------------------------------------------------------- running
    def run(self, part: str, config: str, profile: str, rnd: int,
            overrides: dict[str, str] | None = None) -> Measurement:
        return self.g.fio(part, config, profile, rnd, f"{MOUNT}/bench", layer="nfs",
                          protocol="nfs3", overrides=overrides)

    def fresh_files(self) -> None:
        """New fio files (a dataset property such as recordsize applies to new files)."""
        self.g.sh(f"rm -f {self.path}/bench/zds-probe.* && sync")

    def part_tune(self, rounds: int, keep: float) -> dict[str, str]:
        configs = ["ganesha", *GANESHA_VARIANTS]
        for r in range(rounds):
            order = configs if r % 2 == 0 else list(reversed(configs))
            for c in order:
                try:
                    self.use_ganesha(GANESHA_VARIANTS.get(c, {}))
                except Exception as exc:
                    log(f"  tune {c}: {exc}")
                    continue
                for p in TARGETS:
                    self.run("tune", c, p, r)
        runs = load(self.g.results)
        tuned: dict[str, str] = {}
        for c, params in GANESHA_VARIANTS.items():
            rs = [ratio(runs, "tune", p, "ganesha", c) for p in TARGETS]
            if any(x is None for x in rs):
                continue
            gains = [x.ratio for x in rs if x is not None]
            if max(gains) >= 1.0 + keep and min(gains) >= 1.0 - keep / 2:
                tuned.update(params)
                log(f"  keep {c}: " + ", ".join(f"{x.profile} {x.ratio:.2f}" for x in rs
                                                 if x is not None))
            else:
                log(f"  drop {c}: " + ", ".join(f"{x.profile} {x.ratio:.2f}" for x in rs
                                                 if x is not None))
        return tuned

    def part_servers(self, tuned: dict[str, str], profiles: Sequence[str] = PROFILES,
                     part: str = "servers") -> None:
        configs = ["ganesha", "ganesha-tuned", "knfsd"] if tuned else ["ganesha", "knfsd"]
        for r in range(self.rounds):
            order = configs if r % 2 == 0 else list(reversed(configs))
            for c in order:
                try:
                    if c == "knfsd":
                        self.use_knfsd()
                    else:
                        self.use_ganesha(tuned if c == "ganesha-tuned" else {})
                except Exception as exc:
                    log(f"  {part} {c}: {exc}")
                    continue
                for p in profiles:
                    self.run(part, c, p, r)

    def part_zfs(self, rounds: int) -> None:
        self.use_ganesha({})
        ds = self.dataset
        plan = [("recordsize-64k", "recordsize=64K logbias=latency", TARGETS),
                ("recordsize-16k", "recordsize=16K", TARGETS),
                ("recordsize-128k", "recordsize=128K", TARGETS),
                ("logbias-latency", "recordsize=64K logbias=latency", ("streaming-write",)),
                ("logbias-throughput", "logbias=throughput", ("streaming-write",))]
        for r in range(rounds):
            for name, props, profs in (plan if r % 2 == 0 else list(reversed(plan))):
                self.g.sh(f"zfs set {props} {ds}")
                self.fresh_files()
                for p in profs:
                    self.run("zfs", name, p, r)
        self.g.sh(f"zfs set recordsize=64K logbias=latency {ds}")
        self.fresh_files()

    def part_probes(self, rounds: int) -> None:
        """The probes themselves through the API (needs an image with this checkout's
        appliance code): local vs nfs on the datastore, each result's semantics kept.
        The issue's case: size-sweep's cache-path writes were faster through NFS than
        locally because they stopped in the NFS client's page cache."""
        self.use_ganesha({})
        g = self.g
        plan = [("size-sweep", {"sizes": "100k,1m,10m", "transfers": 10}),
                ("randread-4k-qd32", {"size": "128m"}),
                ("vm-mixed-4k", {"workers": "4", "size": "64m"})]
        for r in range(rounds):
            for profile, over in plan:
                for target in (("local", "nfs") if r % 2 == 0 else ("nfs", "local")):
                    m = Measurement("probes", target, profile, r)
                    t0 = time.monotonic()
                    try:
                        job = g.api("POST", "/probes", params={"wait": 600}, json={
                            "profile": profile, "datastore": DATASTORE, "target": target,
                            "overrides": over})
                        while job["state"] in ("queued", "running"):
                            job = g.api("GET", f"/jobs/{job['id']}", params={"wait": 600})
                        res = g.api("GET", f"/probes/results/{job['result_id']}")
                        m.summary = dict(res["summary"])
                        m.semantics = dict(res.get("semantics") or {})
                        m.cpu_busy_pct = float(res.get("cpu", {}).get("mean_pct") or 0.0)
                        if res["status"] != "ok":
                            m.error = str(res.get("error"))[-1500:]
                    except Exception as exc:
                        m.error = str(exc)[-1500:]
                    m.seconds = round(time.monotonic() - t0, 1)
                    with g.results.open("a") as f:
                        f.write(json.dumps(asdict(m)) + "\n")
                    log(f"  probes {profile} {target} r{r}: "
                        + (m.error[:200] if m.error else json.dumps(
                            {k: round(v, 2) for k, v in m.summary.items()})))

    def part_sync(self) -> None:
        self.use_ganesha({})
        g, ds = self.g, self.dataset
        pool = ds.split("/")[0]
        disk = f"/dev/disk/by-id/virtio-{LOG_DISK[0]}"
        have_disk = g.try_sh(f"test -b {disk}")[0] == 0
        configs = ["no-slog", "slog", "sync-disabled"] if have_disk else \
            ["no-slog", "sync-disabled"]
        for r in range(self.rounds):
            for c in (configs if r % 2 == 0 else list(reversed(configs))):
                g.try_sh(f"zpool remove {pool} {disk}; zpool wait -t remove {pool}")
                g.sh(f"zfs set sync=standard {ds}")
                if c == "slog":
                    g.sh(f"zpool add -f {pool} log {disk}")
                elif c == "sync-disabled":
                    g.sh(f"zfs set sync=disabled {ds}")
                for p in ("streaming-write", "vm-mixed-4k"):
                    self.run("sync", c, p, r)
        g.try_sh(f"zpool remove {pool} {disk}")
        g.sh(f"zfs set sync=standard {ds}")


# -------------------------------------------------------------------- report

def report(results: Path, img_dir: Path | None) -> str:
    runs = load(results)
    out = [f"# bench.nfs_servers {results}"]
    head = next((m.at for m in runs), "")
    out.append(f"# first measurement {head}, {len(runs)} runs, "
               f"{sum(1 for m in runs if m.error)} failed")
    tune = [r for c in GANESHA_VARIANTS for p in TARGETS
            if (r := ratio(runs, "tune", p, "ganesha", c)) is not None]
    if tune:
        out.append(ratio_table(tune, "tune: ganesha variant / ganesha as shipped"))
    servers: list[Ratio] = []
    for p in PROFILES:
        for a, b in (("ganesha", "knfsd"), ("knfsd", "ganesha"), ("knfsd", "ganesha-tuned"),
                     ("ganesha", "ganesha-tuned")):
            if (r := ratio(runs, "servers", p, a, b)) is not None:
                servers.append(r)
    if servers:
        out.append(ratio_table(servers, "servers: b/a (knfsd/ganesha; ganesha/knfsd is the "
                                        "target >= 1.0)"))
    confirm = [r for p in TARGETS for a, b in (("knfsd", "ganesha"), ("knfsd", "ganesha-tuned"),
                                               ("ganesha", "ganesha-tuned"))
               if (r := ratio(runs, "confirm", p, a, b)) is not None]
    if confirm:
        out.append(ratio_table(confirm, "confirm: the kept tuning, 3 rounds"))
    zfs = [r for a, b, p in (("recordsize-64k", "recordsize-16k", TARGETS[0]),
                             ("recordsize-64k", "recordsize-16k", TARGETS[1]),
                             ("recordsize-64k", "recordsize-128k", TARGETS[0]),
                             ("recordsize-64k", "recordsize-128k", TARGETS[1]),
                             ("logbias-latency", "logbias-throughput", "streaming-write"))
           if (r := ratio(runs, "zfs", p, a, b)) is not None]
    if zfs:
        out.append(ratio_table(zfs, "zfs: dataset property / ZDS's default (ganesha)"))
    probes = [r for p, m in (("size-sweep", "write_cache_ms"), ("size-sweep", "read_cache_ms"),
                             ("size-sweep", "write_ms"), ("size-sweep", "read_ms"),
                             ("randread-4k-qd32", "iops"), ("vm-mixed-4k", "iops"))
              if (r := ratio(runs, "probes", p, "local", "nfs", m)) is not None]
    if probes:
        out.append(ratio_table(probes, "probes through the API, nfs/local with the same "
                                       "semantics (size-sweep: ms per object, lower is "
                                       "faster; ratio > 1 = NFS slower)"))
    sync = [r for p in ("streaming-write", "vm-mixed-4k")
            for b in ("slog", "sync-disabled")
            if (r := ratio(runs, "sync", p, "no-slog", b)) is not None]
    if sync:
        out.append(ratio_table(sync, "sync writes: with a SLOG / sync=disabled vs no SLOG "
                                     "(ganesha)"))
    raw: dict[str, list[float]] = {}
    for m in runs:
        if not m.error:
            raw.setdefault(f"{m.part}/{m.config}/{m.profile}", []).append(
                round(m.summary.get("mbps" if m.profile.startswith("streaming") else "iops",
                                    0.0), 1))
    out.append("# raw (per round): " + json.dumps(raw))
    if img_dir is not None:
        g_over_k = [r for p in PROFILES
                    if (r := ratio(runs, "servers", p, "knfsd", "ganesha")) is not None]
        g_over_k += [r for p in TARGETS
                     if (r := ratio(runs, "confirm", p, "knfsd", "ganesha-tuned")) is not None]
        if g_over_k:
            plot_ratios(g_over_k, "nfs-ganesha / knfsd, same dataset and client "
                                  "(QEMU TCG; 3 interleaved rounds)",
                        img_dir / "nfs-ganesha-vs-knfsd.png", target=1.0)
        if sync:
            plot_ratios(sync, "sync writes through NFS: SLOG and sync=disabled vs no SLOG",
                        img_dir / "nfs-sync-slog.png")
    return "\n".join(out)


DEFAULT_PARTS = "servers,lun,sync,probes,tune,confirm,zfs,lun-tune"


def run_all(g: Guest, args: argparse.Namespace) -> None:
    """The parts in the order given (the issue's headline figures first, so a run cut
    short by the machine's time still has them); iSCSI parts (lun, lun-tune) run in
    the same boot through bench.iscsi_lun."""
    from bench import iscsi_lun

    b = NfsBench(g, args.rounds)
    b.setup()
    lun: iscsi_lun.IscsiBench | None = None
    tuned: dict[str, str] = {}
    try:
        for part in args.parts.split(","):
            t0 = time.monotonic()
            if part == "servers":
                log("part servers: ganesha as shipped vs knfsd")
                b.part_servers({})
            elif part == "tune":
                log("part tune: ganesha NFS_CORE_PARAM, one change at a time")
                tuned = b.part_tune(args.tune_rounds, args.keep)
                (Path(args.out) / "tuned.json").write_text(json.dumps(tuned) + "\n")
            elif part == "confirm" and tuned:
                log(f"part confirm: ganesha-tuned {tuned} vs ganesha vs knfsd")
                b.part_servers(tuned, TARGETS, "confirm")
            elif part == "zfs":
                log("part zfs: recordsize, logbias")
                b.part_zfs(args.tune_rounds)
            elif part == "probes":
                log("part probes: the API's own probes, local vs nfs, like with like")
                b.part_probes(1)  # a check of the semantics, not a figure to tune by
            elif part == "sync":
                log("part sync: no SLOG, SLOG, sync=disabled")
                b.part_sync()
            elif part in ("lun", "lun-tune"):
                b.use_ganesha({})
                if lun is None:
                    lun = iscsi_lun.IscsiBench(g, b.dataset.split("/")[0])
                    lun.setup()
                if part == "lun":
                    log("part lun: raw zvol vs ZDS's LUN, all profiles")
                    lun.part_lun(args.rounds)
                else:
                    log("part lun-tune: one LIO/initiator/zvol change at a time")
                    lun.part_tune(max(1, args.tune_rounds))
            log(f"part {part} took {time.monotonic() - t0:.0f} s")
    finally:
        if lun is not None:
            lun.remove()
        b.umount()
        b.restore()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--image", help="a zds.raw to boot (default: build or reuse the cache)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runtime", type=int,
                    help="measured seconds per fio step (default: the probes' 5 s)")
    ap.add_argument("--tune-rounds", type=int, default=2)
    ap.add_argument("--keep", type=float, default=0.05,
                    help="a tuning change is kept when it lifts a target profile this much")
    ap.add_argument("--parts", default=DEFAULT_PARTS,
                    help=f"in this order (default {DEFAULT_PARTS})")
    ap.add_argument("--iscsi", action="store_true",
                    help="print bench/iscsi_lun.py's tables too (its parts are in --parts)")
    ap.add_argument("--out", default=f"/tmp/zds-bench-{datetime.now(UTC):%Y%m%d-%H%M}")
    ap.add_argument("--report", help="print the tables of an earlier results.jsonl")
    ap.add_argument("--img-dir", help="write the plots here (e.g. docs/img)")
    args = ap.parse_args(argv)
    img = Path(args.img_dir) if args.img_dir else None
    if args.report:
        print(report(Path(args.report), img))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.jsonl"

    def stop(_sig: int, _frame: object) -> None:  # SIGTERM: power the VM off, then report
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    print(f"# bench.nfs_servers, {machine_line(False)}; results {results}")
    t0 = time.monotonic()
    try:
        with booted(args.image, extra_disks=(LOG_DISK,)) as vm:
            g = Guest(vm, results, args.runtime)
            log("appliance up: " + g.sh("uname -r; zfs version | head -1; "
                                       "dpkg-query -W -f='${Version}' nfs-ganesha").replace(
                                           "\n", " "))
            run_all(g, args)
    except KeyboardInterrupt:
        log("stopped before the end: the tables hold what was measured")
    print(report(results, img))
    if args.iscsi:
        from bench import iscsi_lun

        print(iscsi_lun.report(results, img))
    print(f"# took {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
