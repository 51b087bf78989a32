"""In-memory twin of :class:`appliance.host.iostats.IoStats`.

Tests add I/O with :meth:`FakeIoStats.nfs` / :meth:`block` / :meth:`initiator` (counters
only grow, like the kernel's and ganesha's); ``synthetic=True`` (``zds demo``) makes every
export and zvol the other fakes hold do some I/O as time passes, so the console's charts
move. Held to the real reader by appliance.host.contract.iostats_checks.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import replace

from appliance.errors import Unavailable
from appliance.host.fakes.ganesha import FakeGanesha
from appliance.host.fakes.zfs import FakeZfs
from appliance.host.iostats import BlockStat, InitiatorIo, NfsIo, PoolIostat, Xfer

ZERO = Xfer(0, 0, 0, 0, 0)


class FakeIoStats:
    def __init__(self, ganesha: FakeGanesha | None = None, zfs: FakeZfs | None = None, *,
                 synthetic: bool = False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ganesha = ganesha
        self.zfs = zfs
        self.synthetic = synthetic
        self.clock = clock
        self.nfs_counters = True
        self._nfs: dict[tuple[int, str], NfsIo] = {}
        self._blocks: dict[str, BlockStat] = {}
        self._zvols: dict[str, str] = {}
        self._initiators: dict[tuple[str, str, int], InitiatorIo] = {}
        self.pool_waits: dict[str, dict[str, int | None]] = {}
        self.arc: dict[str, int] | None = {"hits": 0, "misses": 0, "l2_hits": 0,
                                            "l2_misses": 0, "size": 0, "c_max": 1 << 30}
        self.reads: dict[str, int] = {}  # method -> calls (tests count them)
        self._last = clock()

    # -- test controls -------------------------------------------------------------------

    def nfs(self, export_id: int, *, protocol: str = "NFSv3", read_ops: int = 0,
            read_bytes: int = 0, read_latency_ns: int = 0, write_ops: int = 0,
            write_bytes: int = 0, write_latency_ns: int = 0) -> None:
        """Adds I/O to an export's counters."""
        row = self._nfs.get((export_id, protocol), NfsIo(export_id, protocol, ZERO, ZERO))
        self._nfs[(export_id, protocol)] = NfsIo(
            export_id, protocol,
            _add(row.read, read_ops, read_bytes, read_latency_ns),
            _add(row.write, write_ops, write_bytes, write_latency_ns))

    def zvol(self, name: str, device: str) -> None:
        """udev made /dev/zvol/NAME -> DEVICE."""
        self._zvols[name] = device
        self._blocks.setdefault(device, BlockStat(0, 0, 0, 0, 0, 0, 0, 0))

    def block(self, device: str, *, reads: int = 0, read_bytes: int = 0, read_ms: int = 0,
              writes: int = 0, write_bytes: int = 0, write_ms: int = 0, discards: int = 0,
              discard_bytes: int = 0) -> None:
        b = self._blocks.get(device, BlockStat(0, 0, 0, 0, 0, 0, 0, 0))
        self._blocks[device] = replace(
            b, reads=b.reads + reads, read_sectors=b.read_sectors + read_bytes // 512,
            read_ms=b.read_ms + read_ms, writes=b.writes + writes,
            write_sectors=b.write_sectors + write_bytes // 512, write_ms=b.write_ms + write_ms,
            io_ms=b.io_ms + read_ms + write_ms, discards=b.discards + discards,
            discard_sectors=b.discard_sectors + discard_bytes // 512)

    def initiator(self, target: str, initiator: str, *, lun: int = 0,
                  commands: int = 0) -> None:
        key = (target, initiator, lun)
        r = self._initiators.get(key, InitiatorIo(target, initiator, lun, 0))
        self._initiators[key] = replace(r, commands=r.commands + commands)

    def arc_io(self, hits: int, misses: int, l2_hits: int = 0, l2_misses: int = 0) -> None:
        assert self.arc is not None
        self.arc = {**self.arc, "hits": self.arc["hits"] + hits,
                    "misses": self.arc["misses"] + misses,
                    "l2_hits": self.arc["l2_hits"] + l2_hits,
                    "l2_misses": self.arc["l2_misses"] + l2_misses}

    # -- IoStatsHost -----------------------------------------------------------------------

    def nfs_io(self) -> list[NfsIo]:
        self._count("nfs_io")
        if self.ganesha is not None and self.ganesha.down:
            raise Unavailable("nfs-ganesha is not running or not answering on DBus")
        self._advance()
        return [self._nfs[k] for k in sorted(self._nfs)]

    def block_io(self) -> dict[str, BlockStat]:
        self._count("block_io")
        self._advance()
        return dict(self._blocks)

    def zvol_devices(self) -> dict[str, str]:
        self._count("zvol_devices")
        if self.synthetic:
            self._sync_zvols()
        return dict(self._zvols)

    def initiator_io(self, acls: Iterable[tuple[str, str, int]] | None = None
                     ) -> list[InitiatorIo]:
        self._count("initiator_io")
        keys = sorted(self._initiators) if acls is None else \
            [k for k in acls if k in self._initiators]
        return [self._initiators[k] for k in keys]

    def pool_iostat(self) -> list[PoolIostat]:
        self._count("pool_iostat")
        if self.zfs is None:
            return []
        if self.zfs.down:
            raise Unavailable("ZFS is not available")
        out = []
        for p in self.zfs.list_pools():
            waits = self.pool_waits.get(p.name, {})
            values: dict[str, int | None] = {
                "alloc": p.allocated, "free": p.free, "read_ops": 0, "write_ops": 0,
                "read_bytes": 0, "write_bytes": 0}
            if self.synthetic:
                phase = math.sin(self.clock() / 60.0) + 1.5
                values.update(read_ops=int(200 * phase), write_ops=int(80 * phase),
                              total_wait_read=int(400_000 * phase),
                              total_wait_write=int(900_000 * phase),
                              disk_wait_read=int(300_000 * phase),
                              disk_wait_write=int(500_000 * phase),
                              syncq_wait_write=int(250_000 * phase))
            values.update(waits)
            out.append(PoolIostat(p.name, values))
        return out

    def arcstats(self) -> dict[str, int] | None:
        self._count("arcstats")
        if self.synthetic and self.arc is not None:
            self.arc_io(900, 100)
        return dict(self.arc) if self.arc is not None else None

    # -- synthetic load (zds demo) -----------------------------------------------------------

    def _count(self, method: str) -> None:
        self.reads[method] = self.reads.get(method, 0) + 1

    def _sync_zvols(self) -> None:
        if self.zfs is None or not self.zfs.available():
            return
        names = sorted(n for n in self.zfs.iter_names() if "@" not in n
                       and (info := self.zfs.get_dataset(n, ("type",))) is not None
                       and info.type == "volume")
        for i, name in enumerate(names):
            if name not in self._zvols:
                self.zvol(name, f"zd{i * 16}")

    def _advance(self) -> None:
        """Every live export and zvol does some I/O for the time since the last read."""
        now = self.clock()
        dt, self._last = max(0.0, now - self._last), now
        if not self.synthetic or dt <= 0:
            return
        if self.ganesha is not None and not self.ganesha.down:
            for e in self.ganesha.list_exports():
                r, w = _rates(e.export_id, now)
                self.nfs(e.export_id, read_ops=int(r * dt), read_bytes=int(r * dt) * 8192,
                         read_latency_ns=int(r * dt) * 450_000, write_ops=int(w * dt),
                         write_bytes=int(w * dt) * 16384,
                         write_latency_ns=int(w * dt) * 1_800_000)
        self._sync_zvols()
        for name, dev in self._zvols.items():
            r, w = _rates(zlib.crc32(name.encode()), now)
            self.block(dev, reads=int(r * dt), read_bytes=int(r * dt) * 4096,
                       read_ms=int(r * dt * 0.6), writes=int(w * dt),
                       write_bytes=int(w * dt) * 4096, write_ms=int(w * dt * 2.5))


def _rates(key: int, now: float) -> tuple[float, float]:
    """Read and write ops/s for one object: steady, different per object, slowly waving."""
    base = 50 + (key * 7919) % 400
    wave = 1.0 + 0.5 * math.sin(now / 45.0 + key)
    return base * wave, base * 0.4 * wave


def _add(x: Xfer, ops: int, nbytes: int, latency_ns: int) -> Xfer:
    return Xfer(x.requested + nbytes, x.transferred + nbytes, x.ops + ops, x.errors,
                x.latency_ns + latency_ns)
