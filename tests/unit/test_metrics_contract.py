"""The iostats contract on the fake (the real reader runs it in tests/integration)."""

from __future__ import annotations

from appliance.host.contract import iostats_checks
from appliance.host.fakes.ganesha import FakeGanesha
from appliance.host.fakes.iostats import FakeIoStats
from appliance.host.fakes.zfs import FakeZfs


def test_fake_counters_grow() -> None:
    st = FakeIoStats(FakeGanesha(), FakeZfs.with_pool())

    def io() -> None:
        st.nfs(901, read_ops=3, read_bytes=3000, read_latency_ns=9000, write_ops=2,
               write_bytes=5000, write_latency_ns=7000)

    iostats_checks.check_counters_grow(st, 901, io)
    st.initiator("iqn.2026-11.io.zds:zds.lun1", "iqn.2026-11.org.example:h1", commands=4)
    st.initiator("iqn.2026-11.io.zds:zds.lun2", "iqn.2026-11.org.example:h2", commands=9)
    iostats_checks.check_shapes(st)


def test_fake_down_ganesha_is_unavailable() -> None:
    import pytest

    from appliance.errors import Unavailable

    g = FakeGanesha()
    g.down = True
    with pytest.raises(Unavailable):
        FakeIoStats(g).nfs_io()
