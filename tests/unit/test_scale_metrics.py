"""The collector's host calls do not grow with datastores (like test_scale_host_calls.py).

The engine runs on the real adapters, including the real :class:`IoStats`: commands and
DBus calls go to a RecordingRunner answering like zfs 2.3 and nfs-ganesha 5 (GetNFSIO
with a row per export), /proc/diskstats and /dev/zvol are files laid out for N zvols, and
configfs is the simulated LIO tree. One collection at N = 2 and at N = 200 must make the
same commands, and read each source once.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from appliance.engine import Engine
from appliance.host.factory import HostAdapters
from appliance.host.ganesha import Ganesha
from appliance.host.iostats import IoStats
from appliance.host.lio import Lio
from appliance.host.local import FakeLocalHost
from appliance.host.run import CommandResult
from appliance.host.zfs import Zfs
from appliance.settings import Settings
from tests.unit.test_scale_host_calls import SimulatedHost, is_zvol

POOL_IOSTAT = ("tank\t552960\t8052510720\t0\t11\t26584\t108863\t11033178\t8243411\t10293007\t"
               "5275154\t951235\t20315\t-\t3286997\t-\t19456\t-\n")


def get_nfsio(sim: SimulatedHost, ops: int) -> str:
    out = ["method return time=1 sender=:1.0 -> destination=:1.7 serial=10 reply_serial=2",
           "   boolean true", '   string "OK"', "   struct {", "      uint64 1795404934",
           "      uint64 0", "   }", "   array ["]
    for r in sim.records:
        if r.export_id is None:
            continue
        out += ["      struct {", f"         uint16 {r.export_id}", '         string "NFSv3"']
        for _ in ("read", "write"):
            out += ["         struct {"] + [f"            uint64 {v}" for v in
                                            (ops * 4096, ops * 4096, ops, 0, ops * 1000, 0)]
            out += ["         }"]
        out += ["      }"]
    return "\n".join([*out, "   ]"]) + "\n"


class CountingStats(IoStats):
    def __init__(self, *a: object, **kw: object) -> None:
        super().__init__(*a, **kw)  # type: ignore[arg-type]
        self.reads: Counter[str] = Counter()

    def block_io(self):  # type: ignore[no-untyped-def]
        self.reads["block_io"] += 1
        return super().block_io()

    def zvol_devices(self):  # type: ignore[no-untyped-def]
        self.reads["zvol_devices"] += 1
        return super().zvol_devices()

    def initiator_io(self, acls=None):  # type: ignore[no-untyped-def]
        self.reads["initiator_io"] += 1
        return super().initiator_io(acls)

    def arcstats(self):  # type: ignore[no-untyped-def]
        self.reads["arcstats"] += 1
        return super().arcstats()


def make(tmp: Path, n: int) -> tuple[Engine, SimulatedHost, CountingStats]:
    sim = SimulatedHost(tmp, n)
    ops = [0]

    def answer(argv: tuple[str, ...], _input: str | None) -> CommandResult | None:
        if argv[0] == "dbus-send" and argv[-1].endswith("GetNFSIO"):
            ops[0] += 100
            return CommandResult(argv, 0, get_nfsio(sim, ops[0]), "")
        if argv[:2] == ("zpool", "iostat"):
            return CommandResult(argv, 0, POOL_IOSTAT, "")
        return None

    sim.runner.responders.insert(0, answer)
    proc, dev = tmp / "proc", tmp / "dev"
    proc.mkdir()
    lines = []
    for i, rec in enumerate(r for r in sim.records if is_zvol(r)):
        zd = f"zd{i * 16}"
        lines.append(f" 230 {i * 16} {zd} {i} 0 8 1 2 0 16 1 0 1 1 0 0 0 0 0 0")
        link = dev / "zvol" / rec.spec.dataset
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(f"../../../{zd}", link)
    (proc / "diskstats").write_text("\n".join(lines) + "\n")
    dev_zfs = tmp / "zfs-node"
    dev_zfs.write_text("")
    stats = CountingStats(sim.runner, proc_root=str(proc), dev_root=str(dev),
                          configfs_root=str(sim.configfs))
    sim.set_commands(0)
    hosts = HostAdapters(zfs=Zfs(sim.runner, dev_zfs=str(dev_zfs)),
                         lio=Lio(device_check=lambda p: True, configfs_root=str(sim.configfs)),
                         ganesha=Ganesha(sim.runner, sim.exports_dir),
                         local=FakeLocalHost(name="zds-test"), iostats=stats)
    engine = Engine.create(Settings(health_interval=0, reconcile_interval=0)
                           .with_state_dir(tmp / "state"), hosts)
    for rec in sim.records:
        engine.store.put_datastore(rec)
    return engine, sim, stats


@pytest.mark.parametrize("n", [200])
def test_collector_host_calls_do_not_grow_with_datastores(tmp_path: Path, n: int) -> None:
    measured = []
    for size in (3, n):  # one datastore of each protocol, then n
        engine, sim, stats = make(tmp_path / f"n{size}", size)
        try:
            engine.metrics.collect()  # baseline
            sim.set_commands(7)
            calls0, reads0 = len(sim.runner.calls), stats.reads.copy()
            col = engine.metrics.collect()
            assert len(col.datastores) == size, col.errors
            nfs = [s for s in col.datastores if s.protocol == "nfs3"]
            assert all(s.counts["read_ops"] == 100 for s in nfs)
            luns = [s for s in col.datastores if s.protocol == "iscsi"]
            assert luns and all(s.counts["initiator_commands"] == 7 for s in luns), \
                "every mapped LUN's LIO counter was read"
            namespaces = [s for s in col.datastores if s.protocol == "nvme-tcp"]
            assert namespaces and all("read_ops" in s.counts and "write_bytes" in s.counts
                                      for s in namespaces), \
                "every NVMe/TCP namespace has its zvol's counters"
            argv0 = [a[:2] if a[0] != "dbus-send" else a[-1:]
                     for a in sim.runner.calls[calls0:]]
            measured.append((len(argv0), sorted(map(str, argv0)),
                             dict(stats.reads - reads0)))
        finally:
            engine.close()
    (small, small_cmds, small_reads), (large, large_cmds, large_reads) = measured
    assert small == large and small_cmds == large_cmds, (small_cmds, large_cmds)
    assert small_reads == large_reads
    assert all(v == 1 for v in small_reads.values()), small_reads
    assert sum("GetNFSIO" in c for c in small_cmds) == 1
