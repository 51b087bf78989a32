"""Appliance CPU use (/proc/stat) and ZFS ARC counters (/proc/spl/kstat/zfs/arcstats).

Sample of /proc/stat's first line (USER_HZ ticks: user nice system idle iowait irq
softirq steal guest guest_nice)::

    cpu  1210093 2046 540180 37520212 60129 0 19262 0 0 0
    cpu0 605046 1023 270090 18760106 30064 0 9631 0 0 0
    cpu1 605047 1023 270090 18760106 30065 0 9631 0 0 0

Busy = everything but idle + iowait; the ``cpuN`` lines count the CPUs it is spread over.
Sample of arcstats (kstat: name type data)::

    13 1 0x01 147 39984 6171196286 1212483766371
    name                            type data
    hits                            4    1034877
    misses                          4    20301

Both readers take a ``proc_root`` so unit tests point them at a directory of sample
files (the fake twin); the real appliance uses "/proc".
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path


def parse_proc_stat(text: str) -> tuple[int, int]:
    """(busy, total) ticks from the aggregate 'cpu' line."""
    for line in text.splitlines():
        cols = line.split()
        if cols and cols[0] == "cpu":
            vals = [int(c) for c in cols[1:]]
            total = sum(vals[:8])  # guest time is already in user/nice
            idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
            return total - idle, total
    raise ValueError("no aggregate cpu line in /proc/stat")


def count_cpus(text: str) -> int:
    """The online CPUs: the ``cpuN`` lines after the aggregate one."""
    return sum(1 for line in text.splitlines()
               if line.startswith("cpu") and line[3:4].isdigit())


def parse_arcstats(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines()[2:]:
        cols = line.split()
        if len(cols) == 3 and cols[2].lstrip("-").isdigit():
            out[cols[0]] = int(cols[2])
    return out


@dataclass(frozen=True)
class ArcDelta:
    hits: int
    misses: int

    @property
    def hit_ratio(self) -> float | None:
        total = self.hits + self.misses
        return self.hits / total if total else None


class SysStats:
    def __init__(self, proc_root: str = "/proc") -> None:
        self.root = Path(proc_root)

    def cpu_ticks(self) -> tuple[int, int]:
        return parse_proc_stat((self.root / "stat").read_text())

    def cpus(self) -> int:
        """How many CPUs the busy % of :meth:`cpu_ticks` is spread over."""
        return count_cpus((self.root / "stat").read_text())

    def arcstats(self) -> dict[str, int] | None:
        """None when ZFS is not loaded (no arcstats file)."""
        path = self.root / "spl" / "kstat" / "zfs" / "arcstats"
        try:
            return parse_arcstats(path.read_text())
        except OSError:
            return None


def arc_delta(before: dict[str, int] | None, after: dict[str, int] | None) -> ArcDelta | None:
    if before is None or after is None:
        return None
    return ArcDelta(after.get("hits", 0) - before.get("hits", 0),
                    after.get("misses", 0) - before.get("misses", 0))


@dataclass
class CpuSampler:
    """Samples whole-machine CPU busy % every ``interval`` seconds in a thread."""

    stats: SysStats
    interval: float = 1.0
    samples: list[tuple[float, float]] = field(default_factory=list)  # (seconds, percent)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _first: tuple[int, int] | None = None
    _t0: float = 0.0

    def start(self) -> None:
        self._t0 = time.monotonic()
        self._first = self.stats.cpu_ticks()
        self._thread = threading.Thread(target=self._loop, name="zds-cpu-sampler", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        prev = self._first
        while not self._stop.wait(self.interval):
            cur = self.stats.cpu_ticks()
            assert prev is not None
            self.samples.append((round(time.monotonic() - self._t0, 3), _pct(prev, cur)))
            prev = cur

    def stop(self) -> float | None:
        """Stops sampling; returns the mean busy % over the whole sampled period."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._first is None:
            return None
        last = self.stats.cpu_ticks()
        return _pct(self._first, last) if last[1] > self._first[1] else None


def _pct(a: tuple[int, int], b: tuple[int, int]) -> float:
    dt = b[1] - a[1]
    return round(100.0 * (b[0] - a[0]) / dt, 2) if dt > 0 else 0.0
