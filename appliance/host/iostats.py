"""I/O counters for the metrics collector: one batched read per source per interval.

Sources (each read costs the same at 10 or 1,000 datastores):

- nfs-ganesha: ``org.ganesha.nfsd.exportstats.GetNFSIO`` on /org/ganesha/nfsd/ExportMgr,
  ONE DBus call for every export and protocol (server_stats.c server_dbus_all_iostats);
  needs NFS_CORE_PARAM Enable_NFS_Stats (default true) and Enable_Fast_Stats false (fast
  stats skip per-export counting).
- the block layer: ONE read of /proc/diskstats (the same counters as /sys/block/zdN/stat,
  including the time requests spent queued) plus ONE walk of /dev/zvol to map each zvol
  to its zdN.
- LIO: ONE walk of configfs for every initiator ACL's per-LUN counters
  (``acls/<initiator>/lun_N/statistics/scsi_auth_intr``).
- ZFS: ONE ``zpool iostat -l`` for every pool (latency split: total, disk, sync/async
  queue waits), /proc/spl/kstat/zfs/arcstats for ARC/L2ARC hits.

:class:`IoStats` is the real reader; ``appliance.host.fakes.iostats.FakeIoStats`` its
twin; ``appliance.host.contract.iostats_checks`` holds both to one contract.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from appliance.errors import HostCommandFailed, Unavailable
from appliance.host.dbus_send import as_int, as_list, as_str, as_tuple, parse_dbus_reply
from appliance.host.run import CommandError, Runner
from appliance.host.sysstat import parse_arcstats

# --- nfs-ganesha ------------------------------------------------------------------------


@dataclass(frozen=True)
class Xfer:
    """One direction of ganesha's per-export counters (struct xfer_op), cumulative."""

    requested: int  # bytes asked for
    transferred: int  # bytes moved
    ops: int
    errors: int
    latency_ns: int  # sum of every op's latency


@dataclass(frozen=True)
class NfsIo:
    """One row of GetNFSIO: an export and one NFS version used on it."""

    export_id: int
    protocol: str  # NFSv3, NFSv40, NFSv41, NFSv42
    read: Xfer
    write: Xfer


# Sample (nfs-ganesha 4.3 and 5.9 alike: tests/unit/fixtures/ganesha/GetNFSIO.txt; one
# libnfs client wrote and read 300000 bytes on export 101 and wrote 5000 on 102):
# method return time=1795404934.374824 sender=:1.0 -> destination=:1.7 serial=10 reply_serial=2
#    boolean true
#    string "OK"
#    struct {
#       uint64 1795404934
#       uint64 250611831
#    }
#    array [
#       struct {
#          uint16 101
#          string "NFSv3"
#          struct {            read: requested, transferred, ops, errors, latency ns, 0
#             uint64 300000
#             uint64 300000
#             uint64 1
#             uint64 0
#             uint64 179328
#             uint64 0
#          }
#          struct {            write: the same six
#             ...
#          }
#       }
#    ]
def parse_get_nfsio(text: str) -> list[NfsIo]:
    """GetNFSIO -> rows; a false status (stats disabled) raises ValueError with its text."""
    values = parse_dbus_reply(text)
    ok, message = values[0], values[1]
    if ok is not True:
        raise ValueError(f"GetNFSIO answered {as_str(message)!r}")
    rows: list[NfsIo] = []
    for row in as_list(values[3]):
        eid, proto, read, write = as_tuple(row)
        rows.append(NfsIo(as_int(eid), as_str(proto), _xfer(read), _xfer(write)))
    return rows


def _xfer(v: object) -> Xfer:
    fields = [as_int(x) for x in as_tuple(v)]  # type: ignore[arg-type]
    return Xfer(*fields[:5])


# --- block layer ------------------------------------------------------------------------


@dataclass(frozen=True)
class BlockStat:
    """A block device's cumulative counters (Documentation/admin-guide/iostats.rst)."""

    reads: int
    read_sectors: int  # 512-byte sectors
    read_ms: int  # time reads spent, queue included
    writes: int
    write_sectors: int
    write_ms: int
    in_flight: int
    io_ms: int
    discards: int = 0
    discard_sectors: int = 0


# Sample (/proc/diskstats in the appliance, kernel 6.1, after 4000 direct 4K writes to a
# new zvol; tests/unit/fixtures/appliance/zvol-counters.txt):
#  230       0 zd0 99 0 4200 32 4000 0 32000 980 0 1012 1012 0 0 0 0 0 0
# major minor name reads merged sectors ms writes merged sectors ms in_flight io_ms
# weighted_ms discards merged sectors ms flushes flush_ms
def parse_diskstats(text: str, prefix: str = "zd") -> dict[str, BlockStat]:
    """Devices whose name starts with ``prefix`` (zvols are zd0, zd16, ...; partitions
    zd0p1 are skipped)."""
    out: dict[str, BlockStat] = {}
    for line in text.splitlines():
        cols = line.split()
        if len(cols) < 14 or not cols[2].startswith(prefix) or "p" in cols[2][len(prefix):]:
            continue
        v = [int(c) for c in cols[3:]]
        disc = (v[11], v[13]) if len(v) >= 15 else (0, 0)
        out[cols[2]] = BlockStat(v[0], v[2], v[3], v[4], v[6], v[7], v[8], v[9], *disc)
    return out


# --- LIO ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class InitiatorIo:
    """LIO's per-initiator, per-mapped-LUN counters (scsi_auth_intr), cumulative."""

    target: str  # target IQN
    initiator: str
    lun: int
    commands: int  # num_cmds (read_mbytes/write_mbytes count whole MiB: too coarse to use)


# Sample (configfs in the appliance; tests/unit/fixtures/appliance/zvol-counters.txt):
#   iscsi/iqn.2026-11.io.zds:zds.web-lun/tpgt_1/acls/iqn.2026-11.org.example:e2e-metrics/
#     lun_0/statistics/scsi_auth_intr/num_cmds       0
#     lun_0/statistics/scsi_auth_intr/read_mbytes    0
#     lun_0/statistics/scsi_auth_intr/write_mbytes   0
#     (also att_count, creation_time, hs_num_cmds, intr_name, row_status ...)
def read_acl_stats(configfs_root: str) -> list[InitiatorIo]:
    """Every ACL's mapped-LUN counters: one walk of ``iscsi/*/tpgt_*/acls``."""
    out: list[InitiatorIo] = []
    base = os.path.join(configfs_root, "iscsi")
    for iqn in _listdir(base):
        tdir = os.path.join(base, iqn)
        for tpg in _listdir(tdir):
            if not tpg.startswith("tpgt_"):
                continue
            acls = os.path.join(tdir, tpg, "acls")
            for initiator in _listdir(acls):
                for lun in _listdir(os.path.join(acls, initiator)):
                    if not lun.startswith("lun_") or not lun[4:].isdigit():
                        continue
                    # one read per mapped LUN: at 500 LUNs every read counts (~0.5 ms
                    # each under emulation, every collection)
                    commands = _read_int(os.path.join(acls, initiator, lun, "statistics",
                                                      "scsi_auth_intr", "num_cmds"))
                    if commands is not None:
                        out.append(InitiatorIo(iqn, initiator, int(lun[4:]), commands))
    return out


def read_acl_counters(configfs_root: str,
                      acls: Iterable[tuple[str, str, int]]) -> list[InitiatorIo]:
    """``num_cmds`` of each given (target, initiator, LUN) that exists: one read each."""
    out: list[InitiatorIo] = []
    for target, initiator, lun in acls:
        commands = _read_int(os.path.join(configfs_root, "iscsi", target, "tpgt_1", "acls",
                                          initiator, f"lun_{lun}", "statistics",
                                          "scsi_auth_intr", "num_cmds"))
        if commands is not None:
            out.append(InitiatorIo(target, initiator, lun, commands))
    return out


# --- ZFS pools ------------------------------------------------------------------------------

POOL_IOSTAT_FIELDS = (
    "alloc", "free", "read_ops", "write_ops", "read_bytes", "write_bytes",
    "total_wait_read", "total_wait_write", "disk_wait_read", "disk_wait_write",
    "syncq_wait_read", "syncq_wait_write", "asyncq_wait_read", "asyncq_wait_write",
    "scrub_wait", "trim_wait", "rebuild_wait",
)


@dataclass(frozen=True)
class PoolIostat:
    """One pool's line of ``zpool iostat -H -p -l -y 1 1``: rates over that second
    (ops/s, bytes/s) and average waits in ns (None where zpool prints '-')."""

    pool: str
    values: Mapping[str, int | None]

    def get(self, key: str) -> int | None:
        return self.values.get(key)


# Sample (OpenZFS 2.3.2 in the appliance; tab-separated, shown here with spaces). With
# "-y 1 1" the one line covers the last second; without an interval (as here, captured
# after boot) the same columns hold averages since import:
# tank 552960 8052510720 0 11 26584 108863 11033178 8243411 10293007 5275154 951235 20315
#   - 3286997 - 19456 -     (one line in the output)
# pool alloc free | ops r w | bandwidth r w | total_wait r w | disk_wait r w |
# syncq_wait r w | asyncq_wait r w | scrub_wait trim_wait rebuild_wait (ns; '-': none)
def parse_pool_iostat(text: str) -> list[PoolIostat]:
    out: list[PoolIostat] = []
    for line in text.splitlines():
        cols = line.split("\t") if "\t" in line else line.split()
        if len(cols) < 7 or cols[0] in ("pool", "name") or cols[0].startswith("-"):
            continue
        values: dict[str, int | None] = {}
        for key, raw in zip(POOL_IOSTAT_FIELDS, cols[1:], strict=False):
            raw = raw.strip()
            values[key] = int(raw) if raw.isdigit() else None
        out.append(PoolIostat(cols[0], values))
    return out


# --- the host protocol ---------------------------------------------------------------------


class IoStatsHost(Protocol):
    # False when the NFS server keeps no per-export counters (knfsd): NFS datastores then
    # have no I/O series at all, rather than series stuck at zero
    nfs_counters: bool

    def nfs_io(self) -> list[NfsIo]:
        """Every export's counters in one DBus call. ganesha down: Unavailable."""

    def block_io(self) -> dict[str, BlockStat]:
        """zd* block devices' counters in one read (zvols only)."""

    def zvol_devices(self) -> dict[str, str]:
        """zvol name (pool/datastores/lun1) -> block device name (zd0): one walk."""

    def initiator_io(self, acls: Iterable[tuple[str, str, int]] | None = None
                     ) -> list[InitiatorIo]:
        """LIO's per-initiator counters: one configfs walk ([] without LIO). With
        ``acls`` (target IQN, initiator, mapped LUN) only those, one file read each and
        no listing (configfs listings cost ~1 ms each under emulation)."""

    def pool_iostat(self) -> list[PoolIostat]:
        """Every imported pool's I/O and latency split over one second: one command.
        ZFS down: Unavailable."""

    def arcstats(self) -> dict[str, int] | None:
        """ARC counters (hits, misses, l2_hits, l2_misses, size ...); None without ZFS."""


DBUS_DEST = "org.ganesha.nfsd"
EXPORT_MGR = "/org/ganesha/nfsd/ExportMgr"
GET_NFSIO = "org.ganesha.nfsd.exportstats.GetNFSIO"


class IoStats:
    """:class:`IoStatsHost` on this machine. Roots are parameters so unit tests point the
    file readers at directories laid out like /proc, /dev and configfs."""

    def __init__(self, runner: Runner, dbus_address: str | None = None, *,
                 proc_root: str = "/proc", dev_root: str = "/dev",
                 configfs_root: str = "/sys/kernel/config/target",
                 reply_timeout: float = 10.0, nfs_counters: bool = True) -> None:
        self.runner = runner
        # knfsd keeps no per-export counters: with it (False) NFS I/O is not collected
        self.nfs_counters = nfs_counters
        self.dbus_address = dbus_address
        self.proc_root = proc_root
        self.dev_root = dev_root
        self.configfs_root = configfs_root
        self.reply_timeout = reply_timeout

    def nfs_io(self) -> list[NfsIo]:
        if not self.nfs_counters:
            return []
        bus = f"--bus={self.dbus_address}" if self.dbus_address else "--system"
        argv = ["dbus-send", bus, "--print-reply",
                f"--reply-timeout={int(self.reply_timeout * 1000)}", f"--dest={DBUS_DEST}",
                EXPORT_MGR, GET_NFSIO]
        try:
            text = self.runner.run(argv, timeout=self.reply_timeout + 5).stdout
        except CommandError as exc:
            err = (exc.result.stderr or exc.result.stdout).strip()
            raise Unavailable(f"nfs-ganesha's export statistics are not readable: "
                              f"{err or 'dbus-send failed'}") from exc
        try:
            return parse_get_nfsio(text)
        except (ValueError, IndexError) as exc:
            raise HostCommandFailed(f"cannot read nfs-ganesha's GetNFSIO reply: {exc}",
                                    detail={"reply": text[:2000]}) from exc

    def block_io(self) -> dict[str, BlockStat]:
        try:
            with open(os.path.join(self.proc_root, "diskstats")) as f:
                return parse_diskstats(f.read())
        except OSError:
            return {}

    def zvol_devices(self) -> dict[str, str]:
        base = os.path.join(self.dev_root, "zvol")
        out: dict[str, str] = {}
        for dirpath, _dirs, files in os.walk(base):
            for name in files:
                path = os.path.join(dirpath, name)
                try:
                    dev = os.path.basename(os.readlink(path))
                except OSError:
                    continue
                if dev.startswith("zd") and "p" not in dev[2:]:
                    out[os.path.relpath(path, base)] = dev
        return out

    def initiator_io(self, acls: Iterable[tuple[str, str, int]] | None = None
                     ) -> list[InitiatorIo]:
        if acls is None:
            return read_acl_stats(self.configfs_root)
        return read_acl_counters(self.configfs_root, acls)

    def pool_iostat(self) -> list[PoolIostat]:
        try:
            text = self.runner.run(["zpool", "iostat", "-H", "-p", "-l", "-y", "1", "1"],
                                   timeout=30).stdout
        except CommandError as exc:
            raise Unavailable(f"zpool iostat failed: {exc.message}") from exc
        return parse_pool_iostat(text)

    def arcstats(self) -> dict[str, int] | None:
        try:
            with open(os.path.join(self.proc_root, "spl", "kstat", "zfs", "arcstats")) as f:
                return parse_arcstats(f.read())
        except OSError:
            return None


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except (FileNotFoundError, NotADirectoryError):
        return []


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None

