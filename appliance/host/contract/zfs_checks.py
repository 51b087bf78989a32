"""Contract checks for :class:`appliance.host.zfs.ZfsHost` (real ``Zfs`` and ``FakeZfs``).

``check_pools`` creates and destroys its own pools on ``disks`` (at least three unused
devices of the same size, 256 MiB or more). The dataset checks work below an existing
``pool`` in a scratch dataset ``<pool>/zds-contract`` and remove it when they pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from appliance.errors import Conflict, InsufficientSpace, InvalidInput, NotFound
from appliance.host.contract import expect
from appliance.host.zfs import DatasetInfo, PoolLayout, VdevSpec, ZfsHost

MiB = 1 << 20
SCRATCH = "zds-contract"


def _names(infos: Sequence[DatasetInfo]) -> list[str]:
    return [i.name for i in infos]


def _numeric(info: DatasetInfo, *keys: str) -> None:
    for key in keys:
        value = info.properties.get(key, "")
        assert value.isdigit(), f"{info.name} {key}={value!r} is not a raw -p number"


def _scratch(zfs: ZfsHost, pool: str) -> str:
    root = f"{pool}/{SCRATCH}"
    if zfs.get_dataset(root) is not None:
        zfs.destroy(root, recursive=True)
    zfs.create_filesystem(root, {})
    return root


def check_available(zfs: ZfsHost) -> None:
    assert zfs.available() is True


def check_pools(zfs: ZfsHost, disks: Sequence[str], missing_disk: str,
                pool: str = "zdsct") -> None:
    """Pool create (mirror + spare), list, status tree, user properties, scrub,
    export/import, destroy and the errors of each."""
    assert len(disks) >= 3, "check_pools needs three unused disks"
    a, b, c = disks[0], disks[1], disks[2]
    assert pool not in [p.name for p in zfs.list_pools()], f"pool {pool} already exists"
    layout = PoolLayout(data=(VdevSpec("mirror", (a, b)),), spares=(c,))
    zfs.create_pool(pool, layout, {"ashift": "12", "zds:role": "contract"},
                    {"compression": "lz4", "atime": "off"})
    try:
        pools = {p.name: p for p in zfs.list_pools()}
        assert pool in pools
        info = pools[pool]
        assert info.health == "ONLINE", info
        assert info.size > 0 and 0 <= info.free <= info.size, info
        assert info.allocated + info.free <= info.size + info.size // 50, info
        assert 0 <= info.capacity <= 100
        assert info.fragmentation is None or 0 <= info.fragmentation <= 100
        assert info.properties.get("zds:role") == "contract", info.properties
        assert info.properties.get("ashift") == "12", info.properties

        status = zfs.pool_status(pool)
        assert status.name == pool and status.state == "ONLINE", status
        assert status.config.name == pool
        top = status.config.children
        assert top[0].name.startswith("mirror-"), top
        assert len(top[0].children) == 2 and all(d.state == "ONLINE" for d in top[0].children)
        assert top[-1].name == "spares" and len(top[-1].children) == 1, top
        assert "No known data errors" in status.errors, status.errors

        root = zfs.get_dataset(pool)
        assert root is not None and root.type == "filesystem"
        assert root.prop("compression") == "lz4" and root.prop("atime") == "off"

        zfs.set_pool_properties(pool, {"zds:role": "changed", "autotrim": "on"})
        info = {p.name: p for p in zfs.list_pools()}[pool]
        assert info.properties.get("zds:role") == "changed"
        assert info.properties.get("autotrim") == "on"

        # the root dataset's user properties (the pair's job journal): set, read as the
        # root's own, cleared; a native property is refused and changes nothing
        note = '{"kind": "pool.scrub", "target": "p, q"}'
        zfs.set_root_user_properties(pool, {"zds:job:c0ffee": note})
        root = zfs.get_dataset(pool)
        assert root is not None and root.prop("zds:job:c0ffee") == note, root
        expect(InvalidInput, zfs.set_root_user_properties, pool, {"atime": "on"})
        expect(InvalidInput, zfs.clear_root_user_properties, pool, ["atime"])
        atime = zfs.get_dataset(pool, ["atime"])
        assert atime is not None and atime.prop("atime") == "off", atime
        zfs.clear_root_user_properties(pool, ["zds:job:c0ffee"])
        root = zfs.get_dataset(pool)
        assert root is not None and "zds:job:c0ffee" not in root.properties, root

        expect(Conflict, zfs.create_pool, pool, PoolLayout(data=(VdevSpec("disk", (c,)),)),
               {}, {})
        expect(Conflict, zfs.create_pool, pool + "x", PoolLayout(
            data=(VdevSpec("disk", (a,)),)), {}, {})
        expect(NotFound, zfs.create_pool, pool + "y", PoolLayout(
            data=(VdevSpec("disk", (missing_disk,)),)), {}, {})
        assert pool + "x" not in [p.name for p in zfs.list_pools()]

        zfs.scrub(pool)
        deadline = time.monotonic() + 60
        while "scrub" not in zfs.pool_status(pool).scan and time.monotonic() < deadline:
            time.sleep(0.5)
        assert "scrub" in zfs.pool_status(pool).scan, zfs.pool_status(pool).scan

        zfs.export_pool(pool)
        assert pool not in [p.name for p in zfs.list_pools()]
        assert pool in zfs.importable_pools()
        expect(NotFound, zfs.pool_status, pool)
        expect(NotFound, zfs.scrub, pool)
        zfs.import_pool(pool)
        assert pool in [p.name for p in zfs.list_pools()]
        assert pool not in zfs.importable_pools()
        expect(Conflict, zfs.import_pool, pool)
        expect(NotFound, zfs.import_pool, "zdsnosuchpool")
    finally:
        if pool in [p.name for p in zfs.list_pools()]:
            zfs.destroy_pool(pool)
    assert pool not in [p.name for p in zfs.list_pools()]
    expect(NotFound, zfs.destroy_pool, pool)
    expect(NotFound, zfs.pool_status, "zdsnosuchpool")
    # The disks are free again: a plain stripe pool on one of them works.
    zfs.create_pool(pool, PoolLayout(data=(VdevSpec("disk", (a,)),)), {}, {})
    zfs.destroy_pool(pool)


def _device_states(zfs: ZfsHost, pool: str) -> dict[str, str]:
    """name as zpool status shows it -> state, for the data vdevs' devices."""
    out: dict[str, str] = {}
    for top in zfs.pool_status(pool).config.children:
        if top.name in ("logs", "cache", "spares"):
            continue
        for node in top.children or (top,):
            out[node.name] = node.state
    return out


def _resilvered(zfs: ZfsHost, pool: str, timeout: float = 120.0) -> str:
    deadline = time.monotonic() + timeout
    scan = zfs.pool_status(pool).scan
    while "in progress" in scan and time.monotonic() < deadline:
        time.sleep(0.5)
        scan = zfs.pool_status(pool).scan
    assert "in progress" not in scan, f"resilver still running: {scan}"
    return scan


def check_devices(zfs: ZfsHost, disks: Sequence[str], missing_disk: str,
                  pool: str = "zdsctdev") -> None:
    """A mirror member offlined (DEGRADED) and back, replaced (resilver), a third disk
    attached and detached, and the errors: no valid replicas, a missing or foreign
    device, detach from a plain disk."""
    assert len(disks) >= 4, "check_devices needs four unused disks"
    a, b, c, d = disks[0], disks[1], disks[2], disks[3]
    zfs.create_pool(pool, PoolLayout(data=(VdevSpec("mirror", (a, b)),)), {}, {})
    try:
        names = list(_device_states(zfs, pool))
        assert len(names) == 2, names
        name_a, name_b = names
        zfs.offline_device(pool, b)
        assert {p.name: p.health for p in zfs.list_pools()}[pool] == "DEGRADED"
        assert _device_states(zfs, pool)[name_b] == "OFFLINE"
        status = zfs.pool_status(pool)
        assert status.state == "DEGRADED" and status.action, status
        expect(Conflict, zfs.offline_device, pool, a)  # the last copy stays
        zfs.online_device(pool, b)
        _resilvered(zfs, pool)
        assert {p.name: p.health for p in zfs.list_pools()}[pool] == "ONLINE"

        expect(NotFound, zfs.replace_device, pool, b, missing_disk)
        expect(NotFound, zfs.replace_device, pool, "zdsnosuchdev", c)
        expect(NotFound, zfs.offline_device, pool, "zdsnosuchdev")
        expect(InvalidInput, zfs.replace_device, pool, b, "relative/path")
        zfs.replace_device(pool, b, c)
        scan = _resilvered(zfs, pool)
        assert "resilver" in scan, scan
        states = _device_states(zfs, pool)
        assert name_b not in states and len(states) == 2, states
        assert all(v == "ONLINE" for v in states.values()), states

        zfs.attach_device(pool, a, d)
        _resilvered(zfs, pool)
        assert len(_device_states(zfs, pool)) == 3
        expect(Conflict, zfs.attach_device, pool, a, c)  # c is a member already
        zfs.detach_device(pool, d)
        zfs.detach_device(pool, c)
        states = _device_states(zfs, pool)
        assert list(states) == [name_a], states
        expect(Conflict, zfs.detach_device, pool, a)  # not a mirror any more
    finally:
        if pool in [p.name for p in zfs.list_pools()]:
            zfs.destroy_pool(pool)


def check_filesystems(zfs: ZfsHost, pool: str) -> None:
    """create_filesystem (with parents), properties, list/get, set, destroy."""
    root = _scratch(zfs, pool)
    try:
        leaf = f"{root}/a/b"
        zfs.create_filesystem(leaf, {"compression": "lz4", "recordsize": "65536",
                                     "sync": "standard", "zds:kind": "nfs"})
        info = zfs.get_dataset(leaf)
        assert info is not None and info.type == "filesystem" and info.name == leaf
        assert info.prop("compression") == "lz4"
        assert info.prop("recordsize") == "65536"
        assert info.prop("zds:kind") == "nfs"
        assert info.prop("mountpoint").endswith(f"/{SCRATCH}/a/b"), info.prop("mountpoint")
        assert info.prop("mounted") == "yes", "zfs create mounts what it creates"
        assert info.prop("origin") == "", "origin is reported on clones only"
        _numeric(info, "used", "available", "referenced", "creation", "guid", "quota",
                 "refquota", "refreservation")
        assert info.int_prop("available") > 0
        parent = zfs.get_dataset(f"{root}/a")
        assert parent is not None and parent.type == "filesystem"
        assert "zds:kind" not in parent.properties
        # user properties are reported where they are set, not where they are inherited
        zfs.set_properties(f"{root}/a", {"zds:owner": "contract"})
        child = zfs.get_dataset(leaf)
        assert child is not None and "zds:owner" not in child.properties
        assert _names(zfs.list_datasets(root)) == [root, f"{root}/a", leaf]
        assert zfs.list_datasets(f"{root}/nope") == []
        assert zfs.get_dataset(f"{root}/nope") is None
        assert zfs.get_dataset("zdsnosuchpool/x") is None

        expect(Conflict, zfs.create_filesystem, leaf, {})
        expect(NotFound, zfs.create_filesystem, "zdsnosuchpool/x", {})
        expect(InvalidInput, zfs.create_filesystem, f"{root}/bad", {"nosuchprop": "1"})
        expect(InvalidInput, zfs.create_filesystem, f"{root}/bad", {"sync": "sometimes"})
        assert zfs.get_dataset(f"{root}/bad") is None

        zfs.set_properties(leaf, {"sync": "always", "refquota": str(64 * MiB),
                                  "zds:kind": "nfs41"})
        info = zfs.get_dataset(leaf)
        assert info is not None
        assert info.prop("sync") == "always"
        assert info.int_prop("refquota") == 64 * MiB
        assert info.prop("zds:kind") == "nfs41"
        assert info.int_prop("available") <= 64 * MiB
        expect(InvalidInput, zfs.set_properties, leaf, {"compression": "bogus"})
        expect(InvalidInput, zfs.set_properties, leaf, {"nosuchprop": "1"})
        expect(NotFound, zfs.set_properties, f"{root}/nope", {"sync": "always"})

        big = f"{root}/reserved"
        avail = zfs.get_dataset(root)
        assert avail is not None
        expect(InsufficientSpace, zfs.create_filesystem, big,
               {"refreservation": str(avail.int_prop("available") + 512 * MiB)})
        assert zfs.get_dataset(big) is None

        _check_mounts(zfs, root, leaf)

        expect(Conflict, zfs.destroy, f"{root}/a")  # has children
        assert zfs.get_dataset(leaf) is not None
        zfs.destroy(leaf)
        assert zfs.get_dataset(leaf) is None
        expect(NotFound, zfs.destroy, leaf)
        zfs.create_filesystem(f"{root}/a/c/d", {})
        zfs.destroy(f"{root}/a", recursive=True)
        assert _names(zfs.list_datasets(root)) == [root]
    finally:
        zfs.destroy(root, recursive=True)
    assert zfs.get_dataset(root) is None


def _mounted(zfs: ZfsHost, name: str) -> str:
    info = zfs.get_dataset(name, ("mounted", "canmount"))
    assert info is not None
    return info.prop("mounted")


def _check_mounts(zfs: ZfsHost, root: str, leaf: str) -> None:
    """The state a ``zfs create`` cut between creating and mounting leaves (reached with
    ``unmount``): ``mounted=no`` with canmount on; ``mount`` finishes it, idempotently.
    What the reconciler relies on to repair it, and what FakeZfs models."""
    zfs.unmount(leaf)
    info = zfs.get_dataset(leaf, ("mounted", "canmount", "mountpoint"))
    assert info is not None and info.prop("mounted") == "no", info
    assert info.prop("canmount") == "on" and info.prop("mountpoint").startswith("/"), info
    zfs.unmount(leaf)  # not mounted: nothing to do
    zfs.mount(leaf)
    assert _mounted(zfs, leaf) == "yes"
    zfs.mount(leaf)  # mounted already: nothing to do
    assert _mounted(zfs, leaf) == "yes"
    expect(NotFound, zfs.mount, f"{root}/nope")
    off = f"{root}/off"
    zfs.create_filesystem(off, {"canmount": "off"})
    assert _mounted(zfs, off) == "no"
    expect(Conflict, zfs.mount, off)
    zfs.destroy(off)
    vol = f"{root}/vol"
    zfs.create_volume(vol, 32 * MiB, sparse=True, properties={})
    expect(InvalidInput, zfs.mount, vol)
    zfs.destroy(vol)
    # a file system left unmounted is destroyed like any other
    gone = f"{root}/gone"
    zfs.create_filesystem(gone, {})
    zfs.unmount(gone)
    zfs.destroy(gone)
    assert zfs.get_dataset(gone) is None


def check_volumes(zfs: ZfsHost, pool: str,
                  device_exists: Callable[[str], bool] | None = None,
                  drop_link: Callable[[str], None] | None = None) -> None:
    """Thick and sparse zvols, space errors, resize, device path; with ``drop_link`` (the
    real stack: removes a /dev/zvol link as a lost udev event leaves it) the wait for the
    device brings the link back."""
    root = _scratch(zfs, pool)
    try:
        rinfo = zfs.get_dataset(root)
        assert rinfo is not None
        free = rinfo.int_prop("available")
        big = (free // MiB + 1024) * MiB  # more than is free, a multiple of volblocksize
        thick = f"{root}/thick"
        zfs.create_volume(thick, 32 * MiB, sparse=False,
                          properties={"volblocksize": "16384", "compression": "lz4",
                                      "zds:serial": "6a1e5c3d-0000-4000-8000-000000000001"})
        info = zfs.get_dataset(thick)
        assert info is not None and info.type == "volume"
        assert info.int_prop("volsize") == 32 * MiB
        assert info.int_prop("volblocksize") == 16384
        assert info.int_prop("refreservation") >= 32 * MiB
        assert info.prop("zds:serial") == "6a1e5c3d-0000-4000-8000-000000000001"
        assert info.prop("mountpoint") == "" and info.prop("recordsize") == ""
        _numeric(info, "used", "available", "referenced", "creation", "guid")
        assert zfs.zvol_device(thick) == f"/dev/zvol/{thick}"
        assert zfs.wait_for_device(thick, timeout=30) == f"/dev/zvol/{thick}"
        if device_exists is not None:
            assert device_exists(f"/dev/zvol/{thick}")
        if drop_link is not None and device_exists is not None:
            drop_link(f"/dev/zvol/{thick}")
            assert not device_exists(f"/dev/zvol/{thick}")
            assert zfs.wait_for_device(thick, timeout=30) == f"/dev/zvol/{thick}"
            assert device_exists(f"/dev/zvol/{thick}")

        sparse = f"{root}/sparse"
        zfs.create_volume(sparse, big, sparse=True, properties={})
        sinfo = zfs.get_dataset(sparse)
        assert sinfo is not None and sinfo.int_prop("refreservation") == 0
        assert sinfo.int_prop("volsize") == big

        expect(InsufficientSpace, zfs.create_volume, f"{root}/huge", big, False, {})
        assert zfs.get_dataset(f"{root}/huge") is None
        # a new volume is rounded up to volblocksize; resizing to an odd size is refused
        zfs.create_volume(f"{root}/odd", 32 * MiB + 512, sparse=True, properties={})
        odd = zfs.get_dataset(f"{root}/odd")
        assert odd is not None and odd.int_prop("volsize") == 32 * MiB + 16384
        expect(InvalidInput, zfs.set_properties, f"{root}/odd", {"volsize": str(48 * MiB + 512)})
        zfs.destroy(f"{root}/odd")
        expect(Conflict, zfs.create_volume, thick, 32 * MiB, False, {})
        expect(NotFound, zfs.create_volume, "zdsnosuchpool/v", 32 * MiB, True, {})
        expect(InvalidInput, zfs.create_volume, f"{root}/fsprop", 32 * MiB, True,
               {"recordsize": "65536"})

        # grow a thick volume: its reservation follows
        zfs.set_properties(thick, {"volsize": str(48 * MiB)})
        info = zfs.get_dataset(thick)
        assert info is not None and info.int_prop("volsize") == 48 * MiB
        assert info.int_prop("refreservation") >= 48 * MiB
        expect(InsufficientSpace, zfs.set_properties, thick, {"volsize": str(big + 1024 * MiB)})
        info = zfs.get_dataset(thick)
        assert info is not None and info.int_prop("volsize") == 48 * MiB
        expect(InvalidInput, zfs.set_properties, thick, {"volblocksize": "8192"})

        assert _names(zfs.list_datasets(root)) == [root, sparse, thick]
        zfs.destroy(thick)
        assert zfs.get_dataset(thick) is None
    finally:
        zfs.destroy(root, recursive=True)


def check_snapshots(zfs: ZfsHost, pool: str) -> None:
    """Snapshots (order, user props), rollback rules, clones and destroy rules."""
    root = _scratch(zfs, pool)
    try:
        ds = f"{root}/ds"
        zfs.create_filesystem(ds, {"zds:kind": "nfs"})
        for n in ("s1", "s2", "s3"):
            zfs.snapshot(ds, n, {"zds:note": f"note {n}"})
        snaps = zfs.list_snapshots(ds)
        assert _names(snaps) == [f"{ds}@s1", f"{ds}@s2", f"{ds}@s3"]
        assert all(s.type == "snapshot" for s in snaps)
        assert snaps[0].prop("zds:note") == "note s1"
        _numeric(snaps[0], "used", "referenced", "creation", "guid", "createtxg")
        assert snaps[0].int_prop("createtxg") < snaps[2].int_prop("createtxg")
        got = zfs.get_dataset(f"{ds}@s2")
        assert got is not None and got.type == "snapshot" and got.name == f"{ds}@s2"
        assert zfs.get_dataset(f"{ds}@nope") is None
        assert _names(zfs.list_datasets(root)) == [root, ds], "no snapshots in list_datasets"
        zfs.create_filesystem(f"{ds}/child", {})
        zfs.snapshot(f"{ds}/child", "c1")
        assert len(zfs.list_snapshots(ds)) == 3, "snapshots of children are not listed"

        expect(Conflict, zfs.snapshot, ds, "s1")
        expect(NotFound, zfs.snapshot, f"{root}/nope", "s1")
        expect(NotFound, zfs.list_snapshots, f"{root}/nope")

        expect(Conflict, zfs.rollback, f"{ds}@s1")
        assert len(zfs.list_snapshots(ds)) == 3
        zfs.rollback(f"{ds}@s3")
        expect(NotFound, zfs.rollback, f"{ds}@nope")

        clone = f"{root}/clone"
        zfs.clone(f"{ds}@s2", clone, {"zds:kind": "clone"})
        cinfo = zfs.get_dataset(clone)
        assert cinfo is not None and cinfo.type == "filesystem"
        assert cinfo.prop("origin") == f"{ds}@s2"
        assert cinfo.prop("zds:kind") == "clone"
        expect(Conflict, zfs.clone, f"{ds}@s2", clone, {})
        expect(NotFound, zfs.clone, f"{ds}@nope", f"{root}/clone2", {})
        expect(NotFound, zfs.clone, f"{ds}@s1", f"{root}/nope/clone3", {})

        expect(Conflict, zfs.destroy, f"{ds}@s2")  # has a clone
        expect(Conflict, zfs.destroy, ds)  # has snapshots and children
        expect(Conflict, zfs.destroy, ds, recursive=True)  # a clone outside depends on it
        expect(Conflict, zfs.rollback, f"{ds}@s1", destroy_newer=True)  # s2 has a clone
        assert len(zfs.list_snapshots(ds)) == 3
        zfs.destroy(clone)
        zfs.rollback(f"{ds}@s1", destroy_newer=True)
        assert _names(zfs.list_snapshots(ds)) == [f"{ds}@s1"]
        zfs.destroy(f"{ds}@s1")
        assert zfs.list_snapshots(ds) == []
        expect(NotFound, zfs.destroy, f"{ds}@s1")

        vol = f"{root}/vol"
        zfs.create_volume(vol, 16 * MiB, sparse=True, properties={})
        zfs.snapshot(vol, "v1")
        zfs.clone(f"{vol}@v1", f"{root}/volclone", {})
        vc = zfs.get_dataset(f"{root}/volclone")
        assert vc is not None and vc.type == "volume"
        assert vc.int_prop("volsize") == 16 * MiB and vc.prop("origin") == f"{vol}@v1"
        zfs.destroy(f"{root}/volclone")
        zfs.destroy(vol, recursive=True)
        assert zfs.get_dataset(vol) is None
    finally:
        zfs.destroy(root, recursive=True)


def check_snapshot_batch_and_holds(zfs: ZfsHost, pool: str) -> None:
    """Many snapshots in one command (all or none), the snapshots below a root with
    chosen properties, batched destroy, and user holds that stop a destroy."""
    root = _scratch(zfs, pool)
    try:
        names = [f"{root}/d{i}" for i in range(3)]
        for n in names:
            zfs.create_filesystem(n, {})
        zfs.snapshot_many([f"{n}@b1" for n in names], {"zds:policy": "ct"})
        under = zfs.list_snapshots_under(root, ["zds:policy", "userrefs", "clones",
                                                "createtxg"])
        assert _names(under) == [f"{n}@b1" for n in names], _names(under)
        assert all(s.type == "snapshot" and s.prop("zds:policy") == "ct" for s in under)
        assert len({s.prop("createtxg") for s in under}) == 1, "one transaction group"
        assert under[0].prop("userrefs") == "0"
        assert "used" not in under[0].properties, "only the properties asked for"
        assert zfs.list_snapshots_under(f"{root}/nope", ["userrefs"]) == []
        # all or none: one existing name (or one missing dataset) fails the batch
        expect(Conflict, zfs.snapshot_many, [f"{names[0]}@b2", f"{names[1]}@b1"])
        expect(NotFound, zfs.snapshot_many, [f"{names[0]}@b2", f"{root}/nope@b2"])
        assert zfs.get_dataset(f"{names[0]}@b2") is None, "nothing of a failed batch"
        # one snapshot per dataset in a batch (zfs 2.3 refuses two of the same fs)
        expect(InvalidInput, zfs.snapshot_many, [f"{names[0]}@b2", f"{names[0]}@b3"])
        assert zfs.get_dataset(f"{names[0]}@b2") is None
        zfs.snapshot_many([f"{names[0]}@b2"])
        zfs.snapshot_many([f"{names[0]}@b3"])
        assert _names(zfs.list_snapshots(names[0])) == [
            f"{names[0]}@b1", f"{names[0]}@b2", f"{names[0]}@b3"]

        snap = f"{names[0]}@b1"
        zfs.hold("zds-ct", [snap, f"{names[1]}@b1"])
        assert zfs.holds([snap, f"{names[2]}@b1"]) == {snap: ["zds-ct"],
                                                       f"{names[2]}@b1": []}
        got = zfs.get_dataset(snap)
        assert got is not None and got.prop("userrefs") == "1", got
        expect(Conflict, zfs.hold, "zds-ct", [snap])
        expect(NotFound, zfs.hold, "zds-ct", [f"{names[0]}@nope"])
        expect(NotFound, zfs.holds, [f"{names[0]}@nope"])
        expect(Conflict, zfs.destroy, snap)  # held: busy
        # a batch with a held snapshot destroys nothing
        expect(Conflict, zfs.destroy_snapshots, names[0], ["b1", "b2"])
        assert len(zfs.list_snapshots(names[0])) == 3
        zfs.destroy_snapshots(names[0], ["b2", "b3", "nope"])  # missing names are skipped
        assert _names(zfs.list_snapshots(names[0])) == [snap]
        expect(NotFound, zfs.destroy_snapshots, names[0], ["nope"])
        zfs.clone(f"{names[2]}@b1", f"{root}/c", {})
        expect(Conflict, zfs.destroy_snapshots, names[2], ["b1"])
        zfs.destroy(f"{root}/c")
        zfs.release("zds-ct", [snap])
        expect(NotFound, zfs.release, "zds-ct", [snap])
        assert zfs.holds([snap]) == {snap: []}
        zfs.destroy_snapshots(names[0], ["b1"])
        assert zfs.list_snapshots(names[0]) == []
        zfs.release("zds-ct", [f"{names[1]}@b1"])
        # one name across the tree: all or none
        zfs.snapshot_many([f"{n}@r1" for n in names[1:]])
        zfs.hold("zds-ct", [f"{names[1]}@r1"])
        expect(Conflict, zfs.destroy_snapshot_recursive, root, "r1")
        assert len(zfs.list_snapshots_under(root, ["type"])) == 4  # b1 x2, r1 x2
        zfs.release("zds-ct", [f"{names[1]}@r1"])
        zfs.destroy_snapshot_recursive(root, "r1")
        assert _names(zfs.list_snapshots_under(root, ["type"])) == [
            f"{names[1]}@b1", f"{names[2]}@b1"]
        expect(NotFound, zfs.destroy_snapshot_recursive, root, "r1")
    finally:
        for held in zfs.list_snapshots_under(root, ["userrefs"]):
            if held.int_prop("userrefs"):
                for tag in zfs.holds([held.name])[held.name]:
                    zfs.release(tag, [held.name])
        zfs.destroy(root, recursive=True)


def check_listing_and_snapshot_counts(zfs: ZfsHost, pool: str) -> None:
    """Native properties listed alone (``zfs list -o`` on the real host) read the same as
    with user properties (``zfs get``); ``snapshot_count`` is "none" until a
    ``snapshot_limit`` is set above, then counts each dataset's snapshots and its
    children's, as :meth:`snapshot_counts` does."""
    root = _scratch(zfs, pool)
    try:
        fs, vol = f"{root}/fs", f"{root}/vol"
        zfs.create_filesystem(fs, {"compression": "lz4", "zds:kind": "nfs"})
        zfs.create_volume(vol, 16 * MiB, sparse=True, properties={"zds:kind": "iscsi"})
        zfs.snapshot(fs, "a")
        zfs.snapshot(fs, "b")
        zfs.snapshot(vol, "a")
        native = ("type", "used", "referenced", "compression", "volsize", "mountpoint",
                  "mounted", "snapshot_count", "snapshot_limit")
        alone = {d.name: d for d in zfs.list_datasets(root, native)}
        mixed = {d.name: d for d in zfs.list_datasets(root, (*native, "zds:kind"))}
        assert sorted(alone) == [root, fs, vol], sorted(alone)
        for name, d in alone.items():
            assert d.type == mixed[name].type
            for p in native:
                assert d.prop(p) == mixed[name].prop(p), (name, p, d.properties,
                                                          mixed[name].properties)
        assert "zds:kind" not in alone[fs].properties
        assert mixed[fs].prop("zds:kind") == "nfs"
        assert alone[vol].int_prop("volsize") == 16 * MiB and alone[vol].prop("mountpoint") == ""
        assert all(d.prop("snapshot_count") == "none" for d in alone.values()), alone

        zfs.set_properties(root, {"snapshot_limit": "1000000000"})
        counted = {d.name: d for d in zfs.list_datasets(root, native)}
        assert counted[root].prop("snapshot_limit") == "1000000000"
        assert counted[fs].prop("snapshot_limit") == "none", "a limit is not inherited"
        assert {n: d.int_prop("snapshot_count") for n, d in counted.items()} == \
            {root: 3, fs: 2, vol: 1}
        assert zfs.snapshot_counts(root) == {fs: 2, vol: 1}
        zfs.destroy(f"{fs}@a")
        again = zfs.get_dataset(fs, ("snapshot_count",))
        assert again is not None and again.prop("snapshot_count") == "1"
        expect(InvalidInput, zfs.set_properties, root, {"snapshot_limit": "lots"})
    finally:
        zfs.destroy(root, recursive=True)


def run_all(zfs: ZfsHost, pool: str, disks: Sequence[str], missing_disk: str,
            device_exists: Callable[[str], bool] | None = None) -> list[str]:
    """Runs every check; ``pool`` must exist already, ``disks`` must be unused."""
    check_available(zfs)
    check_pools(zfs, disks, missing_disk)
    if len(disks) >= 4:
        check_devices(zfs, disks, missing_disk)
    check_filesystems(zfs, pool)
    check_volumes(zfs, pool, device_exists)
    check_snapshots(zfs, pool)
    check_snapshot_batch_and_holds(zfs, pool)
    check_listing_and_snapshot_counts(zfs, pool)
    return ["available", "pools", *(["devices"] if len(disks) >= 4 else []), "filesystems",
            "volumes", "snapshots", "snapshot_batch_and_holds", "listing_and_snapshot_counts"]
