"""The real IoStats reader against a real nfs-ganesha 4.3: GetNFSIO over DBus, one call
for every export, and the collector's NFS numbers equal the bytes a client moved."""

from __future__ import annotations

import os

import pytest
from ganesha_harness import GaneshaHarness

from appliance.host.contract.iostats_checks import check_counters_grow, check_shapes
from appliance.host.ganesha_config import ClientRule, ExportSpec
from appliance.host.iostats import IoStats
from appliance.host.run import SubprocessRunner

pytestmark = pytest.mark.integration

RW = (ClientRule(("127.0.0.1",), "RW"),)


def test_export_counters_over_dbus(ganesha_env: GaneshaHarness) -> None:
    h = ganesha_env
    g = h.adapter()
    a, b = h.make_export_dir("io-a"), h.make_export_dir("io-b")
    g.add_export(ExportSpec(131, a, a, (3,), RW))
    g.add_export(ExportSpec(132, b, b, (3,), RW))
    stats = IoStats(SubprocessRunner(), h.dbus_address)
    payload = os.urandom(200_000)

    def io() -> None:
        h.nfs_write(a, "f.bin", payload)
        assert h.nfs_read(a, "f.bin") == payload

    check_counters_grow(stats, 131, io)
    check_shapes(stats)
    before = {r.export_id: r for r in stats.nfs_io()}
    h.nfs_write(b, "g.bin", payload)
    after = {r.export_id: r for r in stats.nfs_io()}
    moved = after[132].write.transferred - (before[132].write.transferred
                                            if 132 in before else 0)
    assert moved == len(payload)
    assert after[131] == before[131], "I/O on 132 leaves 131's counters alone"
