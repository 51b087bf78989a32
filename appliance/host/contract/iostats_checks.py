"""Contract checks for :class:`appliance.host.iostats.IoStatsHost` (real ``IoStats`` and
``FakeIoStats``): tests/unit/test_metrics_contract.py runs them on the fake,
tests/integration/test_metrics_ganesha.py on the real reader against a live nfs-ganesha.

``make_io(export_id)`` does some NFS I/O on a live export (reads and writes) between two
reads of the counters.
"""

from __future__ import annotations

from collections.abc import Callable

from appliance.host.iostats import BlockStat, InitiatorIo, IoStatsHost, NfsIo, PoolIostat


def check_counters_grow(host: IoStatsHost, export_id: int,
                        make_io: Callable[[], None]) -> None:
    """GetNFSIO rows are (export, protocol) with cumulative counters that only grow, and
    I/O on an export shows in its row."""
    before = {(r.export_id, r.protocol): r for r in host.nfs_io()}
    make_io()
    after = {(r.export_id, r.protocol): r for r in host.nfs_io()}
    assert all(isinstance(r, NfsIo) for r in after.values())
    mine = [r for (eid, _p), r in after.items() if eid == export_id]
    assert mine, f"export {export_id} not in GetNFSIO after I/O: {sorted(after)}"
    for key, r in after.items():
        b = before.get(key)
        if b is None:
            continue
        for now, then in ((r.read, b.read), (r.write, b.write)):
            assert now.ops >= then.ops and now.transferred >= then.transferred
            assert now.latency_ns >= then.latency_ns
    grew = sum(r.read.ops + r.write.ops for r in mine) - sum(
        b.read.ops + b.write.ops for k, b in before.items() if k[0] == export_id)
    assert grew > 0, "I/O on the export did not move its counters"
    written = sum(r.write.transferred for r in mine)
    assert written > 0 and all(r.write.latency_ns > 0 for r in mine if r.write.ops)


def check_shapes(host: IoStatsHost) -> None:
    """Every source answers with its types (empty is fine) and never raises for a
    missing LIO or zvol."""
    blocks = host.block_io()
    assert all(isinstance(v, BlockStat) and k.startswith("zd") for k, v in blocks.items())
    zvols = host.zvol_devices()
    assert all(isinstance(k, str) and v.startswith("zd") for k, v in zvols.items())
    walked = host.initiator_io()
    assert all(isinstance(i, InitiatorIo) for i in walked)
    # named ACLs read the same counters as the walk, and only those that exist
    named = [(i.target, i.initiator, i.lun) for i in walked]
    assert host.initiator_io(named) == walked
    assert host.initiator_io([*named[:1], ("iqn.2026-11.org.zds-contract:none",
                                          "iqn.2026-11.org.example:none", 0)]) == walked[:1]
    assert host.initiator_io([]) == []
    arc = host.arcstats()
    assert arc is None or isinstance(arc, dict)
    try:
        pools = host.pool_iostat()
    except Exception as exc:  # no ZFS on this host: Unavailable is the contract
        from appliance.errors import Unavailable

        assert isinstance(exc, Unavailable), exc
        pools = []
    assert all(isinstance(p, PoolIostat) for p in pools)
