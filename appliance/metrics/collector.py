"""The collector: one batched read per source, turned into per-datastore and per-pool
samples (differences of cumulative counters over the interval).

Per datastore, what its transport reads (``Transport.metrics_read``, once per collection
for all its datastores) and finds for it (``metrics_sources``):
- NFS: ganesha's GetNFSIO row(s) of its export (ops, bytes, latency sum in ns);
- iSCSI: its zvol's block-layer counters (ops, bytes, time incl. queue, discards) and the
  commands LIO counted per initiator on its target.
A probe's scratch (``POOL/zds-probes/DATASTORE-ID``: its zvol, or its transport's
temporary export, ``probe_sources``) counts as I/O of the datastore it probes, and the
sample says so (``probe``).

Per pool: ``zpool iostat -l`` (ops, bandwidth, total/disk/sync-queue/async-queue waits),
fill and fragmentation (zpool list), SLOG / L2ARC present (zpool status), ARC and L2ARC
hits (arcstats: machine-wide, recorded with every pool).

The first read of a counter only sets a baseline; a counter that went backwards (ganesha
restarted, a zvol re-created) starts a new baseline instead of a negative sample.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from appliance.errors import ZdsError
from appliance.host.iostats import IoStatsHost
from appliance.host.zfs import PoolInfo, ZfsHost
from appliance.metrics.counters import DS_COUNTERS, NO_BLOCKS, BlockReading, Source
from appliance.model import PROBE_SCRATCH_PARENT, DatastoreRecord
from appliance.transports.base import AnyTransport
from appliance.transports.registry import Transports

log = logging.getLogger(__name__)

POOL_INFO_TTL = 60.0  # seconds a pool's fill/fragmentation/vdev groups are reused


@dataclass(frozen=True)
class DatastoreSample:
    """One datastore over one interval: counts (not rates) so they add up when summed."""

    ts: float  # end of the interval (unix time)
    interval: float  # seconds
    name: str
    pool: str
    protocol: str
    counts: Mapping[str, int]
    probe: bool = False  # a probe's I/O is included

    def rate(self, key: str) -> float:
        return self.counts.get(key, 0) / self.interval if self.interval > 0 else 0.0

    def latency_ms(self, op: str) -> float | None:
        """Mean latency of ``op`` (read/write) over the interval; None without ops."""
        ops = self.counts.get(f"{op}_ops", 0)
        return self.counts.get(f"{op}_latency_ns", 0) / ops / 1e6 if ops else None


@dataclass(frozen=True)
class PoolSample:
    ts: float
    interval: float
    pool: str
    size: int
    allocated: int
    fragmentation: int | None
    capacity: int
    slog: bool
    l2arc: bool
    iostat: Mapping[str, int | None]  # zpool iostat -l over 1 s: ops/s, bytes/s, waits ns
    arc: Mapping[str, int]  # deltas: hits, misses, l2_hits, l2_misses


@dataclass
class Totals:
    """Counters summed since the API started (what Prometheus scrapes)."""

    datastores: dict[str, dict[str, int]] = field(default_factory=dict)
    labels: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> pool, protocol
    arc: dict[str, int] = field(default_factory=dict)
    runs: int = 0
    failures: int = 0
    last_success: float = 0.0
    last_duration: float = 0.0


@dataclass(frozen=True)
class Collection:
    ts: float
    datastores: list[DatastoreSample]
    pools: list[PoolSample]
    errors: list[str]


class Collector:
    """Reads the sources once and keeps the previous counters to difference against."""

    def __init__(self, stats: IoStatsHost, zfs: ZfsHost, transports: Transports,
                 records: Callable[[], Iterable[DatastoreRecord]],
                 probes: Callable[[], Mapping[str, str]] = dict,
                 clock: Callable[[], float] = time.time) -> None:
        self.stats = stats
        self.zfs = zfs
        self.transports = transports
        self.records = records
        self.probes = probes
        self.clock = clock
        self._prev: dict[str, tuple[float, tuple[int, ...]]] = {}  # key -> (ts, counters)
        self._prev_arc: dict[str, int] | None = None
        self._prev_ts: float | None = None
        self.totals = Totals()
        self.latest: Collection | None = None
        self._pool_cache: tuple[float, list[PoolInfo], dict[str, set[str]]] | None = None
        self._lock = threading.Lock()  # a scheduled collection vs a probe's checkpoint
        self._carry: dict[str, dict[str, int]] = {}  # datastore -> probe counts not yet sampled

    # --- one collection -----------------------------------------------------------------

    def collect(self) -> Collection:
        with self._lock:
            return self._collect()

    def checkpoint_probe(self, datastore: str, probe_id: str) -> None:
        """Reads the probe's counters one last time before its export or zvol goes away
        (the probe calls it before cleaning up), so the I/O since the last collection
        lands in the next sample instead of being lost with the export's counters."""
        with self._lock:
            if self._prev_ts is None:
                return
            rec = next((r for r in self.records() if r.name == datastore), None)
            t = self.transports.get(rec.spec.protocol) if rec is not None else None
            if rec is None or t is None:
                return
            now = self.clock()
            sources = self._probe_sources(rec, probe_id, self._blocks(), t,
                                          t.probe_read(self.stats))
            carry = self._carry.setdefault(datastore, dict.fromkeys(DS_COUNTERS, 0))
            for key, values in sources:
                d = self._delta(key, now, values)  # keeps the reading as the new baseline
                if d is not None:
                    for k, v in zip(DS_COUNTERS, d[1], strict=True):
                        carry[k] += v

    def _blocks(self) -> BlockReading:
        return BlockReading(self.stats.block_io(), self.stats.zvol_devices())

    def _collect(self) -> Collection:
        t0 = time.monotonic()
        errors: list[str] = []
        running = dict(self.probes())
        now = self.clock()
        # each transport with datastores reads its sources once, for all of them; the
        # zvols' counters are read once for every transport on zvols and every probe
        grouped = [(t, recs) for t, recs in self.transports.grouped(
            r for r in self.records() if r.state == "ready") if recs]
        blocks = (self._blocks() if running or any(t.storage.is_volume for t, _ in grouped)
                  else NO_BLOCKS)
        readings = [(t, recs, t.metrics_read(self.stats, recs, errors))
                    for t, recs in grouped]

        samples = self._datastores(now, readings, running, blocks)
        pools = self._pools(now, errors)
        self._prev_ts = now
        col = Collection(now, samples, pools, errors)
        self.latest = col
        t = self.totals
        t.runs += 1
        t.last_duration = time.monotonic() - t0
        if errors:
            t.failures += 1
        else:
            t.last_success = now
        return col

    def _delta(self, key: str, now: float, values: tuple[int, ...]) -> tuple[float,
                                                                           tuple[int, ...]] | None:
        """(seconds, differences) since the last read of ``key``; None for a baseline.

        A key first seen after the first collection counts from zero: ganesha lists an
        export in GetNFSIO only once it has I/O, and a new zvol or ACL starts at zero."""
        prev = self._prev.get(key)
        self._prev[key] = (now, values)
        if prev is None and self._prev_ts is not None:
            prev = (self._prev_ts, (0,) * len(values))
        if prev is None or len(prev[1]) != len(values):
            return None
        diffs = tuple(v - p for v, p in zip(values, prev[1], strict=True))
        if any(d < 0 for d in diffs) or now <= prev[0]:
            return None  # reset: a new baseline
        return now - prev[0], diffs

    def _datastores(self, now: float,
                    readings: list[tuple[AnyTransport, list[DatastoreRecord], object]],
                    running: Mapping[str, str], blocks: BlockReading) -> list[DatastoreSample]:
        out: list[DatastoreSample] = []
        seen: set[str] = set()
        recs = [(t, rec, reading) for t, trecs, reading in readings for rec in trecs]
        for t, rec, reading in recs:
            own = t.metrics_sources(reading, rec, blocks)
            if own is None:
                continue  # its server keeps no counters per datastore: no series at all
            counts = dict.fromkeys(DS_COUNTERS, 0)
            interval: float | None = None
            probe = False
            sources = [(key, values, False) for key, values in own]  # key, counters, probe
            pid = running.get(rec.name)
            if pid is not None:
                sources += [(key, values, True) for key, values in
                            self._probe_sources(rec, pid, blocks, t, reading)]
            carried = self._carry.pop(rec.name, None)
            if carried is not None:
                for k, v in carried.items():
                    counts[k] += v
                probe = any(carried.values())
            for key, values, of_probe in sources:
                seen.add(key)
                d = self._delta(key, now, values)
                if d is None:
                    continue
                secs, diffs = d
                interval = max(interval or 0.0, secs)
                for k, v in zip(DS_COUNTERS, diffs, strict=True):
                    counts[k] += v
                probe = probe or (of_probe and any(diffs))
            if interval is None and carried is not None and self._prev_ts is not None:
                interval = now - self._prev_ts
            tot = self._total(rec)
            if interval is None:
                continue  # a baseline, or no counters yet: its series stay at what they are
            sample = DatastoreSample(now, interval, rec.name, rec.spec.pool, rec.spec.protocol,
                                     counts, probe)
            out.append(sample)
            for k, v in counts.items():
                tot[k] += v
        for key in [k for k in self._prev if k not in seen and not k.startswith("arc")]:
            del self._prev[key]  # gone: a deleted datastore, a finished probe
        names = {r.name for _t, r, _reading in recs}
        for name in [n for n in self.totals.datastores if n not in names]:
            del self.totals.datastores[name]
            self.totals.labels.pop(name, None)
        return out

    def _total(self, rec: DatastoreRecord) -> dict[str, int]:
        """``rec``'s running totals (what /metrics exposes), made at zero on first sight:
        every datastore has its series from the first collection, even one without I/O
        (ganesha lists an export in GetNFSIO only once it had some), so a scrape sees
        all of them and ``rate()`` starts from the first sample."""
        self.totals.labels[rec.name] = (rec.spec.pool, rec.spec.protocol)
        return self.totals.datastores.setdefault(rec.name, dict.fromkeys(DS_COUNTERS, 0))

    @staticmethod
    def _probe_sources(rec: DatastoreRecord, pid: str, blocks: BlockReading,
                       t: AnyTransport, reading: object) -> list[Source]:
        """The counters of a running probe's scratch: its zvol, or what its transport
        made of it (an NFS export)."""
        scratch = blocks.zvol(f"{rec.spec.pool}/{PROBE_SCRATCH_PARENT}/{rec.name}-{pid}")
        return [*((scratch,) if scratch else ()), *t.probe_sources(reading, rec, pid)]

    def _pool_layout(self, errors: list[str]) -> tuple[list[PoolInfo], dict[str, set[str]]]:
        """Pools (fill, fragmentation) and their vdev groups (logs, cache): re-read at
        most every POOL_INFO_TTL seconds, as they change slowly and cost two commands per
        pool (zpool get, zpool status)."""
        cached = self._pool_cache
        if cached is not None and time.monotonic() - cached[0] < POOL_INFO_TTL:
            return cached[1], cached[2]
        infos = self.zfs.list_pools()
        groups: dict[str, set[str]] = {}
        for info in infos:
            try:
                groups[info.name] = {c.name for c in
                                     self.zfs.pool_status(info.name).config.children}
            except ZdsError as exc:
                errors.append(exc.message)
        self._pool_cache = (time.monotonic(), infos, groups)
        return infos, groups

    def _pools(self, now: float, errors: list[str]) -> list[PoolSample]:
        try:
            if not self.zfs.available():
                return []
            iostat = {p.pool: p for p in self.stats.pool_iostat()}
            infos, groups = self._pool_layout(errors)
        except ZdsError as exc:
            errors.append(exc.message)
            return []
        arc_now = self.stats.arcstats() or {}
        arc: dict[str, int] = {}
        if self._prev_arc is not None:
            for k in ("hits", "misses", "l2_hits", "l2_misses"):
                d = arc_now.get(k, 0) - self._prev_arc.get(k, 0)
                arc[k] = d if d >= 0 else 0
        self._prev_arc = arc_now
        for k in ("hits", "misses", "l2_hits", "l2_misses"):
            if k in arc_now:
                self.totals.arc[k] = arc_now[k]
        interval = now - self._prev_ts if self._prev_ts else 0.0
        out = []
        for info in infos:
            g = groups.get(info.name, set())
            io = iostat.get(info.name)
            allocated, capacity = info.allocated, info.capacity
            if io is not None and io.get("alloc") is not None and info.size:
                # zpool iostat's alloc is this second's: fresher than the cached list
                allocated = int(io.get("alloc") or 0)
                capacity = allocated * 100 // info.size
            out.append(PoolSample(now, interval, info.name, info.size, allocated,
                                  info.fragmentation, capacity, "logs" in g, "cache" in g,
                                  dict(io.values) if io else {}, arc))
        return out

