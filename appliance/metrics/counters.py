"""The counters a datastore sample holds, and the zvol counters every block transport
and every probe scratch zvol share (one read of /proc/diskstats per collection)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from appliance.host.iostats import BlockStat, NfsIo

# Counters of a datastore sample, all differences over the interval.
DS_COUNTERS = ("read_ops", "write_ops", "read_bytes", "write_bytes", "read_latency_ns",
               "write_latency_ns", "discards", "discard_bytes", "initiator_commands")

# A source of counters: (key the previous reading is kept under, values in DS_COUNTERS
# order). The key names what counts (``nfs:EXPORT:PROTO``, ``blk:DATASET``, ...).
Source = tuple[str, tuple[int, ...]]


@dataclass(frozen=True)
class BlockReading:
    """/proc/diskstats and the /dev/zvol links, read once per collection."""

    blocks: Mapping[str, BlockStat]  # device name (zd0) -> its counters
    zvols: Mapping[str, str]  # zvol dataset -> device name

    def zvol(self, dataset: str) -> Source | None:
        """The block-layer counters of ``dataset``'s zvol (None: not a zvol here)."""
        dev = self.zvols.get(dataset)
        if dev is None or dev not in self.blocks:
            return None
        return f"blk:{dataset}", block_values(self.blocks[dev])


NO_BLOCKS = BlockReading({}, {})


def block_values(b: BlockStat) -> tuple[int, ...]:
    return (b.reads, b.writes, b.read_sectors * 512, b.write_sectors * 512,
            b.read_ms * 1_000_000, b.write_ms * 1_000_000, b.discards,
            b.discard_sectors * 512, 0)


def nfs_values(row: NfsIo) -> tuple[int, ...]:
    return (row.read.ops, row.write.ops, row.read.transferred, row.write.transferred,
            row.read.latency_ns, row.write.latency_ns, 0, 0, 0)


def commands_values(commands: int) -> tuple[int, ...]:
    """A target's SCSI commands (counted per initiator by LIO) as a source's values."""
    return (0, 0, 0, 0, 0, 0, 0, 0, commands)
