"""The probe catalogue (../shared/PROBES.md) as a declarative table, registered by name.

Each :class:`Profile` turns its parameters (defaults, merged with the caller's overrides)
into a plan of :class:`Step` s. For fio profiles a step is one fio job section, and
:func:`appliance.probes.jobfile.render` turns the plan plus a target path or device into
the INI job file. Steps after the first carry ``stonewall`` + ``new_group`` so a sweep
(worker counts, block sizes, object sizes) runs point after point in ONE fio process and
reports one group per point.

Defaults are scaled so a default run takes seconds on a small machine; ``preset=full``
selects the parameters of the published source (minutes to hours), and every parameter
can be overridden one by one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from appliance.errors import InvalidInput, NotFound
from appliance.probes.params import (
    ParamKind,
    Params,
    ParamValue,
    coerce,
    fio_size,
    human_size,
)

ProfileKind = Literal["fio", "rtt", "net"]
SummaryRule = Literal["peak", "first", "last", "total"]


@dataclass(frozen=True)
class ParamSpec:
    name: str
    kind: ParamKind
    help: str
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class PublishedFigure:
    """A number from the source, to put beside a measured one.

    ``kind="absolute"`` compares with the result's own metric; ``kind="ratio_vs_local"``
    compares with (this result / a local baseline result) for the same metric.
    ``step`` names the sweep point it belongs to ('' = the result's summary).
    """

    metric: str
    value: float
    unit: str
    context: str
    kind: Literal["absolute", "ratio_vs_local"] = "absolute"
    step: str = ""


@dataclass(frozen=True)
class Step:
    """One point of a probe: one fio job section (or one iperf3/rtt measurement)."""

    name: str  # fio section name: [a-z0-9-]+
    label: str  # human label, e.g. "workers=4"
    point: Mapping[str, ParamValue]  # the x coordinate(s) of this point
    options: tuple[tuple[str, str], ...] = ()  # fio options of the section, in order
    # this step's own reads/writes semantics over the probe's (size-sweep's cache and disk
    # passes), e.g. (("reads", "disk"), ("writes", "sync")): see appliance.probes.semantics
    io: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Profile:
    name: str
    kind: ProfileKind
    what: str  # what it is
    tells_you: str
    reports: str
    source: str
    params: tuple[ParamSpec, ...]
    defaults: Mapping[str, ParamValue]
    full: Mapping[str, ParamValue]  # the source's parameters (preset=full)
    plan_fn: Callable[[Params], list[Step]]
    global_fn: Callable[[Params], list[tuple[str, str]]] | None = None
    published: tuple[PublishedFigure, ...] = ()
    needs_directory: bool = False  # multi-file personalities need a file system
    summary_rule: SummaryRule = "last"
    sweep_axis: str | None = None  # the point key plotted on the x axis
    measure_drain: bool = False  # time a file-system sync after the run
    notes: str = ""

    def spec(self, name: str) -> ParamSpec:
        for p in self.params:
            if p.name == name:
                return p
        allowed = ", ".join(["preset", *(p.name for p in self.params)])
        raise InvalidInput(f"profile {self.name} has no parameter {name!r} (allowed: {allowed})")

    def resolve(self, overrides: Mapping[str, object] | None = None) -> Params:
        """Defaults (or the source's parameters with preset=full) + validated overrides."""
        given = dict(overrides or {})
        preset = given.pop("preset", "default")
        if preset not in ("default", "full"):
            raise InvalidInput(f"preset: expected default or full, got {preset!r}")
        params: Params = dict(self.defaults)
        if preset == "full":
            params.update(self.full)
        for key, value in given.items():
            spec = self.spec(key)
            params[key] = coerce(spec.kind, value, f"{self.name}.{key}", spec.choices)
        return params

    def plan(self, params: Params) -> list[Step]:
        return self.plan_fn(params)

    def global_options(self, params: Params) -> list[tuple[str, str]]:
        return self.global_fn(params) if self.global_fn else []


# ---------------------------------------------------------------- parameter helpers

def _i(params: Params, key: str) -> int:
    v = params[key]
    assert isinstance(v, int) and not isinstance(v, bool), (key, v)
    return v


def _b(params: Params, key: str) -> bool:
    v = params[key]
    assert isinstance(v, bool), (key, v)
    return v


def _s(params: Params, key: str) -> str:
    v = params[key]
    assert isinstance(v, str), (key, v)
    return v


def _l(params: Params, key: str) -> list[int]:
    v = params[key]
    assert isinstance(v, list), (key, v)
    return v


P_RUNTIME = ParamSpec("runtime", "seconds", "measured seconds per step (after ramp)")
P_RAMP = ParamSpec("ramp", "seconds", "warm-up seconds per step, not measured")
P_SIZE = ParamSpec("size", "size", "file (or device region) size per worker, e.g. 1g")
P_IODEPTH = ParamSpec("iodepth", "int", "outstanding I/Os per worker")
P_WORKERS = ParamSpec("workers", "int", "concurrent workers (fio numjobs)")
P_SWEEP = ParamSpec("workers", "int_list", "worker counts to sweep, e.g. 1,3,5,8")
P_BS = ParamSpec("bs", "size", "block size")
P_BS_LIST = ParamSpec("bs", "size_list", "block sizes to sweep, e.g. 4k,64k,256k")
P_MIX = ParamSpec("rwmixread", "percent", "percentage of reads in the mix")
P_DIRECT = ParamSpec("direct", "bool",
                     "bypass the client's page cache (NFS client, block device, ext4) as "
                     "ESXi and KVM cache=none do; no effect on a ZFS dataset, where the "
                     "ARC is governed by reads=")
P_READS = ParamSpec("reads", "choice",
                    "cache: the appliance's ARC may serve reads; disk: the scratch gets "
                    "primarycache=metadata, every read goes to disk", ("cache", "disk"))
P_WRITES = ParamSpec("writes", "choice",
                     "sync: a write completes on stable storage (ZIL/SLOG), as ESXi's NFS "
                     "writes; async: in the appliance's memory; auto: sync on NFS "
                     "datastores, async on iSCSI ones (a LUN with a write cache)",
                     ("auto", "sync", "async"))
P_ENGINE = ParamSpec("ioengine", "choice", "fio I/O engine",
                     ("libaio", "io_uring", "psync", "posixaio"))
P_PATTERN = ParamSpec("pattern", "choice", "random or sequential access",
                      ("random", "sequential"))
P_FILES = ParamSpec("files", "int", "number of files in the set")
P_FILESIZE = ParamSpec("filesize", "size", "size of each file")
P_THREADS = ParamSpec("threads", "int", "concurrent threads")

_IO_COMMON = (P_RUNTIME, P_RAMP, P_SIZE, P_IODEPTH, P_DIRECT, P_READS, P_WRITES, P_ENGINE)


def _io_globals(params: Params) -> list[tuple[str, str]]:
    """[global] of the time-based block/file profiles (direct= and sync= are added by the
    job file renderer from the target's semantics: appliance.probes.semantics)."""
    return [
        ("ioengine", _s(params, "ioengine")),
        ("time_based", "1"),
        ("runtime", str(_i(params, "runtime"))),
        ("ramp_time", str(_i(params, "ramp"))),
        ("size", fio_size(_i(params, "size"))),
        ("group_reporting", "1"),
        ("randrepeat", "0"),
        ("filename_format", "zds-probe.$jobnum.$filenum"),
    ]


def _rw(pattern: str, mix: int) -> list[tuple[str, str]]:
    """fio rw= (and rwmixread=) for a pattern and a read percentage."""
    rnd = pattern == "random"
    if mix == 100:
        return [("rw", "randread" if rnd else "read")]
    if mix == 0:
        return [("rw", "randwrite" if rnd else "write")]
    return [("rw", "randrw" if rnd else "rw"), ("rwmixread", str(mix))]


def _sectioned(steps: list[Step]) -> list[Step]:
    """Adds stonewall + new_group to every step after the first."""
    out: list[Step] = []
    for n, st in enumerate(steps):
        opts = st.options if n == 0 else (*st.options, ("stonewall", "1"), ("new_group", "1"))
        out.append(Step(st.name, st.label, st.point, opts, st.io))
    return out


def _single(name: str, pattern: str, mix: int | None = None) -> Callable[[Params], list[Step]]:
    """A one-step mixed/pure workload; mix None = take rwmixread from params."""

    def plan(params: Params) -> list[Step]:
        m = _i(params, "rwmixread") if mix is None else mix
        pat = _s(params, "pattern") if "pattern" in params else pattern
        opts = [
            *_rw(pat, m),
            ("bs", fio_size(_i(params, "bs"))),
            ("iodepth", str(_i(params, "iodepth"))),
            ("numjobs", str(_i(params, "workers"))),
        ]
        w = _i(params, "workers")
        return [Step(name, f"workers={w}", {"workers": w}, tuple(opts))]

    return plan


def _worker_sweep(params: Params) -> list[Step]:
    steps = []
    for w in _l(params, "workers"):
        opts = (
            *_rw("random", _i(params, "rwmixread")),
            ("bs", fio_size(_i(params, "bs"))),
            ("iodepth", str(_i(params, "iodepth"))),
            ("numjobs", str(w)),
        )
        steps.append(Step(f"w{w}", f"workers={w}", {"workers": w}, opts))
    return _sectioned(steps)


def _bs_sweep(params: Params) -> list[Step]:
    steps = []
    for bs in _l(params, "bs"):
        opts = (
            *_rw("random", 100),
            ("bs", fio_size(bs)),
            ("iodepth", str(_i(params, "iodepth"))),
            ("numjobs", "1"),
        )
        steps.append(Step(f"bs{fio_size(bs)}", f"bs={human_size(bs)}", {"bs": bs}, opts))
    return _sectioned(steps)


# ---------------------------------------------------------------- size sweep

def _size_globals(params: Params) -> list[tuple[str, str]]:
    return [
        ("ioengine", "psync"),
        ("group_reporting", "1"),
        ("randrepeat", "0"),
    ]


SIZE_SWEEP_PASSES: dict[str, tuple[tuple[str, str], ...]] = {
    "cache": (("reads", "cache"), ("writes", "async")),
    "disk": (("reads", "disk"), ("writes", "sync")),
}


def _size_sweep(params: Params) -> list[Step]:
    """Per object size: write + read through the cache, then write + read from disk.

    One fio I/O is one object (bs = object size), so the completion latency of an I/O
    is the transfer time of one object. ``transfers`` objects per round, ``rounds``
    rounds (fio loops). The two passes differ only in their semantics (Step.io), which
    the executor applies on the appliance between them, the same for local and protocol
    targets: cache = writes complete in the appliance's memory, reads may come from the
    ARC; disk = every write is stable (ZIL), reads go to disk (primarycache=metadata).
    The client's page cache is bypassed in both (``direct``), so an NFS "cache" write
    travels to the appliance like a local one reaches ZFS.
    """
    steps = []
    transfers = _i(params, "transfers")
    rounds = _i(params, "rounds")
    for cache in ("cache", "disk"):  # one pass after the other: two phases, not 2 x sizes
        for size in _l(params, "sizes"):
            tag = fio_size(size)
            total = fio_size(size * transfers)
            for op in ("write", "read"):
                opts: list[tuple[str, str]] = [
                    ("rw", op),
                    ("bs", tag),
                    ("size", total),
                    ("filename", f"zds-size-{tag}"),
                    ("loops", str(rounds)),
                    ("invalidate", "1" if cache == "disk" else "0"),
                ]
                steps.append(Step(
                    f"{op[0]}-{tag}-{cache}",
                    f"{op} {human_size(size)} {cache}",
                    {"size": size, "op": op, "cache": cache},
                    tuple(opts),
                    SIZE_SWEEP_PASSES[cache],
                ))
    return _sectioned(steps)


# ---------------------------------------------------------------- personalities

def _personality_globals(params: Params) -> list[tuple[str, str]]:
    return [
        ("ioengine", "psync"),
        ("time_based", "1"),
        ("runtime", str(_i(params, "runtime"))),
        ("ramp_time", str(_i(params, "ramp"))),
        ("group_reporting", "1"),
        ("randrepeat", "0"),
        ("file_service_type", "random"),
        ("filename_format", "zds-$jobname.$jobnum.$filenum"),
    ]


def _personality(name: str, rw: list[tuple[str, str]], bs: str,
                 extra: tuple[tuple[str, str], ...] = ()) -> Callable[[Params], list[Step]]:
    """Filebench personality as one fio section: the file set split across threads."""

    def plan(params: Params) -> list[Step]:
        files = _i(params, "files")
        threads = _i(params, "threads")
        per_thread = max(1, -(-files // threads))
        filesize = _i(params, "filesize")
        blk = fio_size(min(filesize, _i(params, bs))) if bs in params else bs
        opts = (
            *rw,
            ("bs", blk),
            ("nrfiles", str(per_thread)),
            ("filesize", fio_size(filesize)),
            ("size", fio_size(per_thread * filesize)),
            ("numjobs", str(threads)),
            ("openfiles", str(min(per_thread, 64))),
            *extra,
        )
        return [Step(name, f"threads={threads}", {"threads": threads, "files": files}, opts)]

    return plan


_PERSONALITY_PARAMS = (P_RUNTIME, P_RAMP, P_FILES, P_FILESIZE, P_THREADS, P_DIRECT, P_READS,
                       P_WRITES, ParamSpec("iosize", "size", "I/O size (capped at the file size)"))


def _net_plan(params: Params) -> list[Step]:
    return [Step(f"p{n}", f"streams={n}", {"streams": n}, (("streams", str(n)),))
            for n in _l(params, "streams")]


def _rtt_plan(params: Params) -> list[Step]:
    mode = _s(params, "mode")
    return [Step("rtt", f"rtt {mode}", {"mode": mode},
                 (("samples", str(_i(params, "samples"))), ("mode", mode),
                  ("message", str(_i(params, "message")))))]


# ---------------------------------------------------------------- the table

_SHORT: Params = {"runtime": 5, "ramp": 1, "direct": True, "reads": "cache", "writes": "auto",
                  "ioengine": "libaio"}
_IO_SEMANTICS: Params = {"direct": True, "reads": "cache", "writes": "auto"}
_TR3808 = "NetApp/VMware TR-3808 (Iometer; FC vs iSCSI vs NFS)"
_FVP = "PernixData FVP blog (fio, 3 hosts, flash cache)"
_VSAN = "vSAN 3D-VACS paper (Iometer, 16 outstanding I/O)"
_NFSESX = "NFS-as-ESXi-datastore paper (1 GbE)"
_FB = "hypervisor file-system paper (Filebench 1.4.9, native CentOS)"


def _vm_mixed(bs_k: int) -> Profile:
    return Profile(
        name=f"vm-mixed-{bs_k}k",
        kind="fio",
        what=f"OLTP-like VM mix: {bs_k} KiB, 75% read / 25% write, 100% random, "
             "4 outstanding I/O per worker, worker count swept",
        tells_you="how IOPS and latency scale as more VMs (workers) share the datastore; "
                  "the knee of the curve is the datastore's useful capacity",
        reports="IOPS, mean/p99 latency per worker count, appliance CPU %",
        source=_TR3808,
        params=(P_RUNTIME, P_RAMP, P_SIZE, P_IODEPTH, P_SWEEP, P_MIX, P_DIRECT, P_READS,
                P_WRITES, P_ENGINE, P_BS),
        defaults={**_SHORT, "size": 32 << 20, "iodepth": 4, "workers": [1, 2, 4],
                  "rwmixread": 75, "bs": bs_k << 10},
        full={"runtime": 300, "ramp": 300, "size": 1 << 30,
              "workers": [1, 3, 5, 8, 16, 32, 64, 128, 160]},
        plan_fn=_worker_sweep,
        global_fn=_io_globals,
        summary_rule="peak",
        sweep_axis="workers",
        notes="The source sweeps 1 to 160 Iometer workers with 5 min ramp + 5 min run; the "
              "intermediate worker counts of preset=full are ours.",
    )


def _simple(name: str, what: str, tells: str, reports: str, source: str, pattern: str,
            mix: int | None, bs: int, iodepth: int, size: int, full_size: int,
            published: tuple[PublishedFigure, ...] = (), full: Params | None = None,
            measure_drain: bool = False, notes: str = "") -> Profile:
    params: tuple[ParamSpec, ...] = (*_IO_COMMON, P_WORKERS, P_BS)
    defaults: Params = {**_SHORT, "size": size, "iodepth": iodepth, "workers": 1, "bs": bs}
    if mix is None:
        params = (*params, P_MIX)
        defaults["rwmixread"] = 75
    if mix in (0, 100):
        params = (*params, P_PATTERN)
        defaults["pattern"] = pattern
    return Profile(
        name=name, kind="fio", what=what, tells_you=tells, reports=reports, source=source,
        params=params, defaults=defaults,
        full={"runtime": 300, "ramp": 60, "size": full_size, **(full or {})},
        plan_fn=_single(name, pattern, mix), global_fn=_io_globals, published=published,
        measure_drain=measure_drain, notes=notes,
    )


def _build_table() -> dict[str, Profile]:
    profiles: list[Profile] = [
        _vm_mixed(4),
        _vm_mixed(8),
        _simple(
            "randread-4k-qd32", "hot random read: 4 KiB, 100% random read, iodepth 32",
            "the small-block read ceiling of the datastore once the working set is cached "
            "(ARC); workers = concurrent clients",
            "IOPS, latency over time", _FVP, "random", 100, 4 << 10, 32, 128 << 20, 1 << 30,
            published=(
                PublishedFigure("iops", 52000, "IOPS", "1 host, from flash cache"),
                PublishedFigure("iops", 154659, "IOPS", "3 hosts (workers=3)"),
            ),
            full={"runtime": 60, "ramp": 10},
        ),
        _simple(
            "randrw-4k-qd32", "hot random mix: 4 KiB, 75% read / 25% write, iodepth 32",
            "what writes cost on top of the cached read path, and how long the write-back "
            "drain takes after the run (drain_s)",
            "IOPS, latency over time, write-back drain", _FVP, "random", 75, 4 << 10, 32,
            128 << 20, 1 << 30,
            published=(PublishedFigure("iops", 66025, "IOPS", "3 hosts (workers=3)"),),
            full={"runtime": 60, "ramp": 10}, measure_drain=True,
        ),
        _simple(
            "bst", "basic sanity test: 70% read / 30% write, 4 KiB random, 16 outstanding I/O",
            "a quick all-round health number for a datastore; run it after any change",
            "IOPS, latency, MB/s", _VSAN, "random", 70, 4 << 10, 16, 128 << 20, 1 << 30,
            notes="The catalogue gives no block size for BST; 4 KiB is ours (override bs).",
        ),
        _simple(
            "hybrid-64k", "big-block mix (HT): 64 KiB, 70% read / 30% write, random",
            "bandwidth for large-block VM I/O (backups inside guests, databases scans)",
            "IOPS, MB/s", _VSAN, "random", 70, 64 << 10, 16, 256 << 20, 30 << 30,
            published=(
                PublishedFigure("mbps", 267, "MB/s", "10 GbE"),
                PublishedFigure("mbps", 301, "MB/s", "40 GbE"),
            ),
        ),
        _simple(
            "small-hybrid-4k", "small-block mix (SHT): 4 KiB, 70% read / 30% write, random",
            "small-block IOPS with a working set larger than the cache (30 GiB in the source)",
            "IOPS", _VSAN, "random", 70, 4 << 10, 16, 256 << 20, 30 << 30,
        ),
        _simple(
            "read-only", "cache-tier read (RT): 100% read, 4 KiB random, 16 outstanding I/O",
            "the read side alone: ARC/L2ARC hit path and the protocol's read overhead",
            "IOPS, MB/s", _VSAN, "random", 100, 4 << 10, 16, 256 << 20, 10 << 30,
            notes="Block size and pattern are not in the catalogue: 4 KiB random is ours "
                  "(override bs, pattern).",
        ),
        _simple(
            "write-only", "cache-tier write (WT): 100% write, 4 KiB random, 16 outstanding I/O",
            "the write side alone: ZIL/SLOG and sync write latency dominate for ESXi",
            "IOPS, MB/s", _VSAN, "random", 0, 4 << 10, 16, 256 << 20, 5 << 30,
            notes="Block size and pattern are not in the catalogue: 4 KiB random is ours.",
        ),
        _simple(
            "streaming-read", "media server (SRT): sequential 1 MiB reads of a large file",
            "the sequential bandwidth ceiling: network or disks, whichever is lower",
            "MB/s", _VSAN, "sequential", 100, 1 << 20, 8, 256 << 20, 10 << 30,
            notes="'large file' in the source; preset=full uses 10 GiB.",
        ),
        _simple(
            "streaming-write", "backup target (SWT): sequential 1 MiB writes of a large file",
            "sequential write bandwidth (backups, clones, Storage vMotion)",
            "MB/s", _VSAN, "sequential", 0, 1 << 20, 8, 256 << 20, 10 << 30,
            notes="'large file' in the source; preset=full uses 10 GiB.",
        ),
        Profile(
            name="block-size-sweep",
            kind="fio",
            what="100% random read at 4 KiB, 64 KiB, 256 KiB with 16 outstanding I/O",
            tells_you="where the datastore turns from IOPS-bound to bandwidth-bound",
            reports="(latency ms, IOPS) per block size",
            source=_VSAN,
            params=(P_RUNTIME, P_RAMP, P_SIZE, P_IODEPTH, P_BS_LIST, P_DIRECT, P_READS,
                    P_WRITES, P_ENGINE),
            defaults={**_SHORT, "size": 128 << 20, "iodepth": 16,
                      "bs": [4 << 10, 64 << 10, 256 << 10]},
            full={"runtime": 300, "ramp": 60, "size": 10 << 30},
            plan_fn=_bs_sweep,
            global_fn=_io_globals,
            summary_rule="first",
            sweep_axis="bs",
            published=(
                PublishedFigure("lat_mean_ms", 1.09, "ms", "baseline", step="bs=4KiB"),
                PublishedFigure("iops", 14693, "IOPS", "baseline", step="bs=4KiB"),
                PublishedFigure("lat_mean_ms", 4.19, "ms", "baseline", step="bs=64KiB"),
                PublishedFigure("iops", 3818, "IOPS", "baseline", step="bs=64KiB"),
                PublishedFigure("lat_mean_ms", 31.87, "ms", "baseline", step="bs=256KiB"),
                PublishedFigure("iops", 501, "IOPS", "baseline", step="bs=256KiB"),
            ),
        ),
        Profile(
            name="size-sweep",
            kind="fio",
            what="write and read objects of 100 KB, 1 MB, 10 MB, 100 MB; once from cache, "
                 "once from disk",
            tells_you="transfer time per object size, and how much of it the cache hides; "
                      "compare a local result with a datastore result (bars)",
            reports="mean ms per object size and direction, cache vs disk",
            source=_NFSESX,
            params=(
                ParamSpec("sizes", "size_list", "object sizes, e.g. 100k,1m,10m,100m"),
                ParamSpec("transfers", "int", "objects per round"),
                ParamSpec("rounds", "int", "rounds (fio loops)"),
                P_DIRECT,
            ),
            defaults={"sizes": [100 << 10, 1 << 20, 10 << 20], "transfers": 10, "rounds": 1,
                      "direct": True},
            full={"sizes": [100 << 10, 1 << 20, 10 << 20, 100 << 20], "transfers": 100,
                  "rounds": 10},
            plan_fn=_size_sweep,
            global_fn=_size_globals,
            summary_rule="total",
            sweep_axis="size",
            published=(
                PublishedFigure("write_ms", 1.7, "x local", "disk path, NFS vs local, 1 GbE",
                                kind="ratio_vs_local"),
                PublishedFigure("read_ms", 3.5, "x local", "disk path, NFS vs local, 1 GbE",
                                kind="ratio_vs_local"),
            ),
            notes="'KB/MB' objects are binary (100 KiB ...). The 100 MB size is in "
                  "preset=full only (10 x 100 MiB per pass by default is too slow here).",
        ),
        Profile(
            name="fileserver",
            kind="fio",
            what="Filebench fileserver as fio: whole-file 128 KiB reads/writes, 1/3 read, "
                 "files spread over threads",
            tells_you="metadata + mixed file I/O of a file share on the datastore",
            reports="MB/s, ops/s",
            source=_FB,
            params=_PERSONALITY_PARAMS,
            defaults={"runtime": 5, "ramp": 1, "files": 1000, "filesize": 128 << 10,
                      "threads": 10, **_IO_SEMANTICS, "iosize": 128 << 10},
            full={"runtime": 60, "files": 10000, "threads": 50},
            plan_fn=_personality("fileserver", _rw("random", 33), "iosize"),
            global_fn=_personality_globals,
            needs_directory=True,
            published=(PublishedFigure("mbps", 3885, "MB/s", "native CentOS"),),
        ),
        Profile(
            name="webserver",
            kind="fio",
            what="Filebench webserver as fio: whole-file 16 KiB reads, 1 in 10 a log write",
            tells_you="read-mostly small-file serving across many threads",
            reports="MB/s, ops/s",
            source=_FB,
            params=_PERSONALITY_PARAMS,
            defaults={"runtime": 5, "ramp": 1, "files": 1000, "filesize": 16 << 10,
                      "threads": 20, **_IO_SEMANTICS, "iosize": 16 << 10},
            full={"runtime": 60, "threads": 100},
            plan_fn=_personality("webserver", _rw("random", 90), "iosize"),
            global_fn=_personality_globals,
            needs_directory=True,
            published=(PublishedFigure("mbps", 476, "MB/s", "native CentOS"),),
        ),
        Profile(
            name="varmail",
            kind="fio",
            what="Filebench varmail as fio: 16 KiB files, 50/50 read/write, fsync after "
                 "every write",
            tells_you="sync write latency (mail spools, databases): ZIL/SLOG and the "
                      "protocol's COMMIT path",
            reports="MB/s, ops/s",
            source=_FB,
            params=_PERSONALITY_PARAMS,
            defaults={"runtime": 5, "ramp": 1, "files": 1000, "filesize": 16 << 10,
                      "threads": 8, **_IO_SEMANTICS, "iosize": 16 << 10},
            full={"runtime": 60, "threads": 16},
            plan_fn=_personality("varmail", _rw("random", 50), "iosize",
                                 (("fsync", "1"),)),
            global_fn=_personality_globals,
            needs_directory=True,
            published=(PublishedFigure("mbps", 187, "MB/s", "native CentOS"),),
        ),
        Profile(
            name="rfa",
            kind="fio",
            what="random-file-access as fio: whole-file random reads across a file set",
            tells_you="cached read throughput across many files (memory + protocol path)",
            reports="MB/s, ops/s",
            source=_FB,
            params=_PERSONALITY_PARAMS,
            defaults={"runtime": 5, "ramp": 1, "files": 1000, "filesize": 128 << 10,
                      "threads": 5, **_IO_SEMANTICS, "iosize": 128 << 10},
            full={"runtime": 60, "files": 10000},
            plan_fn=_personality("rfa", _rw("random", 100), "iosize"),
            global_fn=_personality_globals,
            needs_directory=True,
            published=(PublishedFigure("mbps", 16700, "MB/s", "native CentOS"),),
            notes="The catalogue gives no file size for rfa: 128 KiB is ours.",
        ),
        Profile(
            name="rtt",
            kind="rtt",
            what="network round trip client <-> appliance: many small TCP exchanges",
            tells_you="the latency floor every NFS/iSCSI operation pays before any disk work",
            reports="mean / p50 / p99 ms",
            source=_NFSESX,
            params=(
                ParamSpec("samples", "int", "round trips to measure"),
                ParamSpec("mode", "choice",
                          "connect: TCP handshake time to the port; pingpong: echo "
                          "exchanges over one connection", ("connect", "pingpong")),
                ParamSpec("message", "int", "pingpong message bytes"),
                ParamSpec("port", "int", "TCP port (connect: the NFS port 2049)"),
            ),
            defaults={"samples": 200, "mode": "connect", "message": 64, "port": 2049},
            full={"samples": 10000},
            plan_fn=_rtt_plan,
            published=(
                PublishedFigure("lat_mean_ms", 1.15, "ms", "local"),
                PublishedFigure("lat_mean_ms", 1.09, "ms", "NFS"),
            ),
        ),
        Profile(
            name="net-throughput",
            kind="net",
            what="raw TCP capacity to the appliance with iperf3, 1 and N streams",
            tells_you="the network ceiling under every other number (MB/s x 8 / 1000 = Gbit/s)",
            reports="Gbit/s per stream count",
            source="vSAN paper (iperf)",
            params=(
                ParamSpec("streams", "int_list", "parallel stream counts, e.g. 1,4"),
                ParamSpec("seconds", "int", "seconds per measurement"),
                ParamSpec("port", "int", "iperf3 server port"),
            ),
            defaults={"streams": [1, 4], "seconds": 3, "port": 5201},
            full={"streams": [1, 4, 8], "seconds": 30},
            plan_fn=_net_plan,
            summary_rule="peak",
            sweep_axis="streams",
            published=(
                PublishedFigure("gbps", 9.1, "Gbit/s", "10 GbE"),
                PublishedFigure("gbps", 36, "Gbit/s", "40 GbE after tuning (14 before)"),
            ),
        ),
    ]
    return {p.name: p for p in profiles}


PROFILES: dict[str, Profile] = _build_table()


def get(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise NotFound(
            f"no probe profile {name!r}; known: {', '.join(sorted(PROFILES))}"
        ) from None


def names() -> list[str]:
    return list(PROFILES)


@dataclass(frozen=True)
class ProfileInfo:
    """What the API lists for each profile."""

    name: str
    kind: str
    what: str
    tells_you: str
    reports: str
    source: str
    defaults: dict[str, ParamValue]
    full: dict[str, ParamValue]
    params: list[dict[str, object]] = field(default_factory=list)
    published: list[dict[str, object]] = field(default_factory=list)
    needs_directory: bool = False
    notes: str = ""


def info(p: Profile) -> ProfileInfo:
    return ProfileInfo(
        name=p.name, kind=p.kind, what=p.what, tells_you=p.tells_you, reports=p.reports,
        source=p.source, defaults=dict(p.defaults), full={**p.defaults, **p.full},
        params=[{"name": s.name, "kind": s.kind, "help": s.help, "choices": list(s.choices)}
                for s in p.params],
        published=[{"metric": f.metric, "value": f.value, "unit": f.unit,
                    "context": f.context, "kind": f.kind, "step": f.step}
                   for f in p.published],
        needs_directory=p.needs_directory, notes=p.notes,
    )
