"""FakeZfs behaviours the engine tests lean on, beyond the shared contract checks."""

from __future__ import annotations

from typing import Any

import pytest

from appliance.errors import Conflict, InsufficientSpace, InvalidInput, NotFound
from appliance.host.fakes.lio import FakeLio
from appliance.host.fakes.zfs import FakeZfs, GiB, MiB
from appliance.host.lio import AclSpec, LunSpec, TargetSpec
from appliance.host.zfs import PoolLayout, VdevSpec


def test_with_pool_and_space_accounting() -> None:
    zfs = FakeZfs.with_pool("tank", size=10 * GiB, fs_properties={"compression": "lz4"})
    (pool,) = zfs.list_pools()
    assert pool.name == "tank" and pool.size == 10 * GiB and pool.health == "ONLINE"
    root = zfs.get_dataset("tank")
    assert root is not None and root.prop("compression") == "lz4"
    free = root.int_prop("available")
    assert 9 * GiB < free < 10 * GiB  # slop space is held back
    zfs.create_volume("tank/thick", 4 * GiB, sparse=False, properties={})
    after = zfs.get_dataset("tank")
    assert after is not None and after.int_prop("available") == free - 4 * GiB
    assert after.int_prop("used") == 4 * GiB
    with pytest.raises(InsufficientSpace):
        zfs.create_volume("tank/big", 6 * GiB, sparse=False, properties={})
    zfs.create_volume("tank/thin", 50 * GiB, sparse=True, properties={})
    thin = zfs.get_dataset("tank/thin")
    assert thin is not None and thin.int_prop("used") == 0
    zfs.write("tank/thin", 1 * GiB)
    thin = zfs.get_dataset("tank/thin")
    assert thin is not None and thin.int_prop("referenced") == 1 * GiB
    with pytest.raises(InsufficientSpace):
        zfs.write("tank/thin", 40 * GiB)
    with pytest.raises(InsufficientSpace):
        zfs.create_filesystem("tank/fs", {"refreservation": "8G"})


def test_pool_layouts_sizes_and_status_tree() -> None:
    disks = {f"/dev/disk/by-id/virtio-zdsdata{i}": 10 * GiB for i in range(8)}
    zfs = FakeZfs(disks=disks)
    d = sorted(disks)
    layout = PoolLayout(data=(VdevSpec("raidz2", tuple(d[:4])), VdevSpec("mirror", (d[4], d[5]))),
                        log=(VdevSpec("disk", (d[6],)),), cache=(d[7],))
    zfs.create_pool("tank", layout, {"ashift": "12"}, {})
    (pool,) = zfs.list_pools()
    assert pool.size == 40 * GiB + 10 * GiB
    root = zfs.pool_status("tank").config
    assert [c.name for c in root.children] == ["raidz2-0", "mirror-1", "logs", "cache"]
    assert root.children[0].children[0].name == "virtio-zdsdata0"
    assert root.children[2].children[0].name == "virtio-zdsdata6"
    usable = zfs.get_dataset("tank")
    assert usable is not None and usable.int_prop("available") < 30 * GiB


def test_pool_errors() -> None:
    zfs = FakeZfs(disks={"/dev/sdb": 10 * GiB, "/dev/sdc": 20 * GiB, "/dev/tiny": 32 * MiB})
    with pytest.raises(InvalidInput):
        zfs.create_pool("p", PoolLayout(data=(VdevSpec("mirror", ("/dev/sdb",)),)), {}, {})
    with pytest.raises(InvalidInput):
        zfs.create_pool("p", PoolLayout(data=(VdevSpec("mirror", ("/dev/sdb", "/dev/sdc")),)),
                        {}, {})
    with pytest.raises(InvalidInput):
        zfs.create_pool("p", PoolLayout(data=(VdevSpec("disk", ("/dev/tiny",)),)), {}, {})
    with pytest.raises(InvalidInput):
        zfs.create_pool("p", PoolLayout(data=(VdevSpec("disk", ("/dev/sdb",)),)),
                        {"nosuch": "1"}, {})
    zfs.create_pool("p", PoolLayout(data=(VdevSpec("mirror", ("/dev/sdb", "/dev/sdc")),)),
                    {}, {}, force=True)
    assert zfs.list_pools()[0].size == 10 * GiB
    assert zfs.list_pools() and zfs.importable_pools() == []


def test_export_hides_datasets_and_devices() -> None:
    zfs = FakeZfs.with_pool()
    zfs.create_volume("tank/zds/v", 1 * GiB, sparse=True, properties={"zds:serial": "abc"})
    assert zfs.wait_for_device("tank/zds/v") == "/dev/zvol/tank/zds/v"
    zfs.export_pool("tank")
    assert zfs.get_dataset("tank/zds/v") is None
    assert not zfs.device_exists("/dev/zvol/tank/zds/v")
    with pytest.raises(NotFound):
        zfs.wait_for_device("tank/zds/v")
    zfs.import_pool("tank")
    v = zfs.get_dataset("tank/zds/v")
    assert v is not None and v.prop("zds:serial") == "abc"
    assert zfs.device_exists("/dev/zvol/tank/zds/v")


def test_zvol_exported_by_lio_is_busy() -> None:
    zfs = FakeZfs.with_pool()
    lio = FakeLio.linked_to(zfs)
    zfs.create_volume("tank/zds/v", 1 * GiB, sparse=True, properties={})
    lio.apply_target(TargetSpec("iqn.2026-11.org.zds:v", (
        LunSpec("zds-v", "/dev/zvol/tank/zds/v", "6a1e5c3d-0000-4000-8000-000000000001"),),
        (AclSpec("iqn.1998-01.com.vmware:esx1"),)))
    with pytest.raises(Conflict):
        zfs.destroy("tank/zds/v")
    with pytest.raises(Conflict):
        zfs.destroy("tank/zds", recursive=True)
    with pytest.raises(Conflict):
        zfs.export_pool("tank")
    lio.remove_target("iqn.2026-11.org.zds:v")
    zfs.destroy("tank/zds", recursive=True)
    assert zfs.get_dataset("tank/zds") is None


def test_resize_thin_and_thick() -> None:
    zfs = FakeZfs.with_pool(size=10 * GiB)
    zfs.create_volume("tank/thin", 1 * GiB, sparse=True, properties={})
    zfs.set_properties("tank/thin", {"volsize": str(2 * GiB)})
    thin = zfs.get_dataset("tank/thin")
    assert thin is not None and thin.int_prop("refreservation") == 0
    zfs.create_volume("tank/thick", 1 * GiB, sparse=False, properties={})
    zfs.set_properties("tank/thick", {"volsize": "3G"})
    thick = zfs.get_dataset("tank/thick")
    assert thick is not None
    assert thick.int_prop("volsize") == thick.int_prop("refreservation") == 3 * GiB
    with pytest.raises(InvalidInput):
        zfs.set_properties("tank/thick", {"volsize": str(3 * GiB + 1)})


def test_clone_of_volume_resized_like_the_engine_does() -> None:
    zfs = FakeZfs.with_pool()
    zfs.create_volume("tank/zds/a", 1 * GiB, sparse=False, properties={"zds:kind": "a"})
    zfs.snapshot("tank/zds/a", "s1")
    zfs.clone("tank/zds/a@s1", "tank/zds/b", {"zds:kind": "b"})
    zfs.set_properties("tank/zds/b", {"volsize": str(2 * GiB)})
    b = zfs.get_dataset("tank/zds/b")
    assert b is not None and b.int_prop("volsize") == 2 * GiB
    assert b.prop("origin") == "tank/zds/a@s1" and b.prop("zds:kind") == "b"
    snap = zfs.get_dataset("tank/zds/a@s1")
    assert snap is not None and snap.prop("clones") == "tank/zds/b"


def test_user_property_on_snapshot_only() -> None:
    zfs = FakeZfs.with_pool()
    zfs.create_filesystem("tank/a", {})
    zfs.snapshot("tank/a", "s", {"zds:note": "before upgrade"})
    zfs.set_properties("tank/a@s", {"zds:note": "changed"})
    (snap,) = zfs.list_snapshots("tank/a")
    assert snap.prop("zds:note") == "changed"
    with pytest.raises(InvalidInput):
        zfs.set_properties("tank/a@s", {"compression": "lz4"})
    with pytest.raises(InvalidInput):
        zfs.snapshot("tank/a", "t", {"compression": "lz4"})


def _tree(n: int) -> FakeZfs:
    zfs = FakeZfs.with_pool("tank", size=100 * GiB)
    zfs.create_filesystem("tank/datastores", {})
    for i in range(n):
        if i % 2:
            zfs.create_volume(f"tank/datastores/v{i}", 64 * MiB, sparse=i % 4 == 1,
                              properties={})
        else:
            zfs.create_filesystem(f"tank/datastores/f{i}", {})
            zfs.write(f"tank/datastores/f{i}", (i + 1) * MiB)
    return zfs


def test_a_list_says_what_each_dataset_read_says() -> None:
    """The list computes space once for the pool: its used/available must still be what
    a read of each dataset alone answers."""
    zfs = _tree(12)
    zfs.set_properties("tank/datastores", {"snapshot_limit": "1000"})  # ZFS counts now
    zfs.snapshot("tank/datastores/f0", "a")
    zfs.snapshot("tank/datastores/v1", "a")
    listed = {d.name: d for d in zfs.list_datasets("tank")}
    assert listed["tank/datastores"].prop("snapshot_count") == "2"
    for name, info in listed.items():
        alone = zfs.get_dataset(name)
        assert alone is not None
        for key in ("used", "available", "usedbychildren", "referenced", "snapshot_count"):
            assert info.prop(key) == alone.prop(key), (name, key)
    children = [d for n, d in listed.items() if n.startswith("tank/datastores/")]
    assert listed["tank/datastores"].int_prop("used") == sum(
        d.int_prop("used") for d in children) > 0


def test_a_list_costs_linear_work_in_the_datasets(monkeypatch: pytest.MonkeyPatch) -> None:
    """FakeZfs answers lists of 1,000 datastores in the scale tests: each dataset's
    space figures and snapshot count must not be summed over every other dataset (N
    squared)."""
    charges = 0
    real = FakeZfs._charge

    def counted(ds: object) -> int:
        nonlocal charges
        charges += 1
        return real(ds)  # type: ignore[arg-type]

    monkeypatch.setattr(FakeZfs, "_charge", staticmethod(counted))
    class Walks(dict[str, object]):
        """A pool's datasets that count how often something walks all of them."""

        walks = 0

        def items(self) -> Any:
            Walks.walks += 1
            return super().items()

    costs = []
    for n in (100, 400):
        zfs = _tree(n)
        zfs.set_properties("tank/datastores", {"snapshot_limit": "10000"})  # counted now
        pool = zfs._pools["tank"]
        pool.datasets = Walks(pool.datasets)  # type: ignore[assignment]
        charges, Walks.walks = 0, 0
        zfs.list_datasets("tank")
        costs.append(charges)
        # the snapshot counts too: one walk for the whole list, not one per dataset
        assert Walks.walks <= 2, Walks.walks
    assert costs[1] < 5 * costs[0], costs  # 4x the datasets: about 4x the work, not 16x
