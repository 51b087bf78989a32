"""Scratch datasets, the 80% rule, one probe per datastore, cancellation, cleanup."""

from __future__ import annotations

import threading

import pytest

from appliance.errors import Conflict, InsufficientSpace, InvalidInput
from appliance.host.fakes.zfs import FakeZfs
from appliance.probes import profiles
from appliance.probes.execute import CancelToken
from appliance.probes.safety import (
    SCRATCH_PROPERTY,
    ProbeRegistry,
    ScratchManager,
    footprint,
    scratch_name,
)

GiB = 1 << 30
MiB = 1 << 20


def test_footprint_per_profile_shape() -> None:
    vm = profiles.get("vm-mixed-4k")
    # sweep steps share files: the largest step (4 workers x 32 MiB)
    assert footprint(vm, vm.resolve()) == 4 * 32 * MiB
    assert footprint(vm, vm.resolve(), is_device=True) == 32 * MiB
    ss = profiles.get("size-sweep")
    # one file per object size: 10 x (100 KiB + 1 MiB + 10 MiB)
    assert footprint(ss, ss.resolve()) == 10 * ((100 << 10) + MiB + 10 * MiB)
    fs = profiles.get("fileserver")
    assert footprint(fs, fs.resolve({"preset": "full"})) == 50 * 200 * (128 << 10)
    assert footprint(profiles.get("rtt"), profiles.get("rtt").resolve()) == 0


def test_scratch_names_are_validated() -> None:
    assert scratch_name("tank", "ds1", "ab12") == "tank/zds-probes/ds1-ab12"
    for bad in ("AB", "a/b", "", "x" * 33, "a b"):
        with pytest.raises(InvalidInput):
            scratch_name("tank", "ds1", bad)
    with pytest.raises(InvalidInput):
        scratch_name("tank", "../x", "ab")


def test_scratch_filesystem_copies_the_datastores_io_properties() -> None:
    zfs = FakeZfs.with_pool("tank", 10 * GiB)
    zfs.create_filesystem("tank/datastores/ds1", {"recordsize": "65536", "sync": "always",
                                                  "compression": "lz4"})
    like = zfs.get_dataset("tank/datastores/ds1")
    mgr = ScratchManager(zfs)
    s = mgr.create("tank", "ds1", "p1", 100 * MiB, volume=False, like=like)
    info = zfs.get_dataset(s.name)
    assert info is not None and s.name == "tank/zds-probes/ds1-p1"
    assert info.prop("recordsize") == "65536" and info.prop("sync") == "always"
    assert info.prop(SCRATCH_PROPERTY) == "p1"
    assert int(info.prop("refquota")) == s.size >= 100 * MiB
    assert s.path == info.prop("mountpoint") and s.path.startswith("/")
    assert mgr.leftovers("tank") == [s.name]
    assert mgr.leftovers("tank", keep={s.name}) == []
    mgr.destroy(s)
    assert zfs.get_dataset(s.name) is None
    mgr.destroy(s)  # twice is fine


def test_scratch_volume_keeps_volblocksize_and_is_sparse() -> None:
    zfs = FakeZfs.with_pool("tank", 10 * GiB)
    zfs.create_volume("tank/datastores/lun1", GiB, True, {"volblocksize": "16384"})
    like = zfs.get_dataset("tank/datastores/lun1")
    s = ScratchManager(zfs).create("tank", "lun1", "p2", 200 * MiB, volume=True, like=like)
    info = zfs.get_dataset(s.name)
    assert info is not None and info.type == "volume"
    assert info.prop("volblocksize") == "16384"
    assert s.is_volume and s.path == zfs.zvol_device(s.name)
    assert s.size % MiB == 0 and s.size >= 200 * MiB


def test_refuses_to_fill_a_pool_past_80_percent_and_creates_nothing() -> None:
    zfs = FakeZfs.with_pool("tank", 10 * GiB)
    mgr = ScratchManager(zfs)
    before = [d.name for d in zfs.list_datasets("tank")]
    with pytest.raises(InsufficientSpace, match="80%"):
        mgr.create("tank", "ds1", "p3", 9 * GiB, volume=False)
    assert [d.name for d in zfs.list_datasets("tank")] == before
    mgr.check_space("tank", 7 * GiB)  # about 70% after: allowed


def test_cleaning_leftovers_after_a_crash() -> None:
    zfs = FakeZfs.with_pool("tank", 10 * GiB)
    mgr = ScratchManager(zfs)
    a = mgr.create("tank", "ds1", "aa", MiB, volume=False)
    b = mgr.create("tank", "ds2", "bb", MiB, volume=False)
    assert mgr.clean_leftovers("tank", keep={b.name}) == [a.name]
    assert zfs.get_dataset(a.name) is None and zfs.get_dataset(b.name) is not None
    with pytest.raises(Conflict):
        mgr.create("tank", "ds2", "bb", MiB, volume=False)


def test_one_probe_per_datastore_and_cancel_by_id() -> None:
    reg = ProbeRegistry()
    token = CancelToken()
    fired = threading.Event()
    token.on_cancel(fired.set)
    with reg.hold("ds1", "p1", token):
        assert reg.busy("ds1") == "p1"
        with pytest.raises(Conflict, match="already running"), reg.hold("ds1", "p2",
                                                                         CancelToken()):
            pass
        with reg.hold("ds2", "p3", CancelToken()):  # another datastore: fine
            assert reg.running() == {"ds1": "p1", "ds2": "p3"}
        assert reg.cancel("p1") is True
        assert fired.is_set() and token.cancelled
    assert reg.busy("ds1") is None
    assert reg.cancel("p1") is False
