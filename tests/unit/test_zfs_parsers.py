"""Parsers of the real ZFS adapter, fed with captured ``zpool``/``zfs`` output."""

from __future__ import annotations

from appliance.host.zfs import (
    ZPOOL_STATUS_SAMPLE,
    parse_datasets,
    parse_get,
    parse_zpool_import,
    parse_zpool_list,
    parse_zpool_status,
)

ZPOOL_LIST = (
    "tank\tONLINE\t10200547328\t1204224\t10199343104\t0\t0\n"
    "zdsct\tONLINE\t520093696\t116736\t519976960\t-\t0\n"
    "broken\tUNAVAIL\t-\t-\t-\t-\t-\n"
)

ZPOOL_GET = (
    "tank\tsize\t10200547328\t-\n"
    "tank\tcapacity\t0\t-\n"
    "tank\thealth\tONLINE\t-\n"
    "tank\tashift\t12\tlocal\n"
    "tank\tautotrim\toff\tdefault\n"
    "tank\tcomment\t-\tdefault\n"
    "tank\tfeature@lz4_compress\tactive\tlocal\n"
    "tank\tzds:demo\ttrue\tlocal\n"
)

ZFS_GET = (
    "tank/zds\ttype\tfilesystem\t-\n"
    "tank/zds\tmountpoint\t/tank/zds\tdefault\n"
    "tank/zds\tquota\t0\tdefault\n"
    "tank/zds\tzds:role\tdatastores\tlocal\n"
    "tank/zds/vm01\ttype\tvolume\t-\n"
    "tank/zds/vm01\tcreation\t1795742040\t-\n"
    "tank/zds/vm01\tused\t34340864\t-\n"
    "tank/zds/vm01\tavailable\t9793286144\t-\n"
    "tank/zds/vm01\treferenced\t57344\t-\n"
    "tank/zds/vm01\tcompressratio\t1.00x\t-\n"
    "tank/zds/vm01\treservation\t0\tdefault\n"
    "tank/zds/vm01\tvolsize\t33554432\tlocal\n"
    "tank/zds/vm01\tvolblocksize\t16384\tdefault\n"
    "tank/zds/vm01\tcompression\tlz4\tinherited from tank\n"
    "tank/zds/vm01\torigin\t-\t-\n"
    "tank/zds/vm01\trefreservation\t34283520\tlocal\n"
    "tank/zds/vm01\tguid\t10736245376190163203\t-\n"
    "tank/zds/vm01\tmountpoint\t-\t-\n"
    "tank/zds/vm01\tcreatetxg\t94\t-\n"
    "tank/zds/vm01\tzds:serial\t6a1e5c3d-0000-4000-8000-000000000001\tlocal\n"
    "tank/zds/vm01\tzds:role\tdatastores\tinherited from tank/zds\n"
    "tank/zds/vm01\tzds:note\tsaved by ops team\treceived\n"
    "tank/zds/vm01@s1\ttype\tsnapshot\t-\n"
    "tank/zds/vm01@s1\tcreatetxg\t95\t-\n"
    "tank/zds/vm01@s1\tclones\t\t-\n"
)


def test_zpool_list() -> None:
    pools = parse_zpool_list(ZPOOL_LIST)
    assert [p.name for p in pools] == ["tank", "zdsct", "broken"]
    tank = pools[0]
    assert (tank.health, tank.size, tank.allocated, tank.free) == (
        "ONLINE", 10200547328, 1204224, 10199343104)
    assert tank.fragmentation == 0 and tank.capacity == 0
    assert pools[1].fragmentation is None
    assert pools[2].health == "UNAVAIL" and pools[2].size == 0


def test_zpool_list_empty() -> None:
    assert parse_zpool_list("") == []
    assert parse_zpool_list("no pools available\n") == []


def test_zpool_get_drops_features_keeps_user_props() -> None:
    props = parse_get(ZPOOL_GET)["tank"]
    assert props["ashift"] == ("12", "local")
    assert props["zds:demo"] == ("true", "local")
    assert props["comment"] == ("-", "default")
    assert not any(k.startswith("feature@") for k in props)


def test_zfs_get_datasets() -> None:
    infos = {i.name: i for i in parse_datasets(ZFS_GET)}
    assert set(infos) == {"tank/zds", "tank/zds/vm01", "tank/zds/vm01@s1"}
    vol = infos["tank/zds/vm01"]
    assert vol.type == "volume"
    assert vol.int_prop("volsize") == 33554432
    assert vol.int_prop("refreservation") == 34283520
    assert vol.prop("compression") == "lz4"
    assert vol.prop("origin") == "" and vol.prop("origin", "none") == "none"
    assert vol.prop("zds:serial") == "6a1e5c3d-0000-4000-8000-000000000001"
    assert vol.prop("zds:note") == "saved by ops team"  # received counts as set
    assert "zds:role" not in vol.properties  # inherited user property is not reported
    assert infos["tank/zds"].prop("zds:role") == "datastores"
    assert infos["tank/zds"].int_prop("quota") == 0
    snap = infos["tank/zds/vm01@s1"]
    assert snap.type == "snapshot" and snap.int_prop("createtxg") == 95
    assert snap.prop("clones") == ""


def test_zpool_status_tree() -> None:
    (st,) = parse_zpool_status(ZPOOL_STATUS_SAMPLE)
    assert st.name == "tank" and st.state == "ONLINE"
    assert st.scan.startswith("scrub repaired 0B in 00:00:01 with 0 errors")
    assert st.errors == "No known data errors"
    assert st.status == "" and st.action == ""
    root = st.config
    assert root.name == "tank" and root.state == "ONLINE"
    assert [c.name for c in root.children] == ["mirror-0", "logs", "cache", "spares"]
    mirror = root.children[0]
    assert [d.name for d in mirror.children] == ["virtio-zdsdata0", "virtio-zdsdata1"]
    assert root.children[1].state == ""
    assert root.children[1].children[0].name == "virtio-zdsdata2"
    assert root.children[3].children[0].state == "AVAIL"


DEGRADED = (
    "  pool: tank\n"
    " state: DEGRADED\n"
    "status: One or more devices could not be used because the label is missing or\n"
    "\tinvalid.  Sufficient replicas exist for the pool to continue\n"
    "\tfunctioning in a degraded state.\n"
    "action: Replace the device using 'zpool replace'.\n"
    "   see: https://openzfs.github.io/openzfs-docs/msg/ZFS-8000-4J\n"
    "  scan: scrub in progress since Sun Nov 22 02:10:11 2026\n"
    "\t1.02G / 2.00G scanned at 512M/s, 0B / 2.00G issued\n"
    "\t0B repaired, 0.00% done, no estimated completion time\n"
    "config:\n"
    "\n"
    "\tNAME                                STATE     READ WRITE CKSUM\n"
    "\ttank                                DEGRADED     0     0     0\n"
    "\t  raidz1-0                          DEGRADED     0     0     0\n"
    "\t    /var/tmp/zds/disk0.img          ONLINE       0     0     0\n"
    "\t    /var/tmp/zds/disk1.img          ONLINE       3     1    12\n"
    "\t    7741264931633370124             UNAVAIL      0     0     0  was /var/tmp/zds/disk2.img\n"
    "\t  mirror-1                          ONLINE       0     0     0\n"
    "\t    /var/tmp/zds/disk3.img          ONLINE       0     0     0\n"
    "\t    /var/tmp/zds/disk4.img          ONLINE       0     0     0\n"
    "\n"
    "errors: No known data errors\n"
    "\n"
    "  pool: other\n"
    " state: ONLINE\n"
    "config:\n"
    "\n"
    "\tNAME        STATE     READ WRITE CKSUM\n"
    "\tother       ONLINE       0     0     0\n"
    "\t  sdb       ONLINE       0     0     0\n"
    "\n"
    "errors: No known data errors\n"
)


def test_zpool_status_degraded_and_multi_pool() -> None:
    tank, other = parse_zpool_status(DEGRADED)
    assert tank.state == "DEGRADED"
    assert tank.status.startswith("One or more devices could not be used")
    assert tank.status.endswith("functioning in a degraded state.")
    assert "zpool replace" in tank.action
    assert tank.scan.startswith("scrub in progress since")
    assert "0.00% done" in tank.scan
    raidz, mirror = tank.config.children
    assert raidz.name == "raidz1-0" and raidz.state == "DEGRADED"
    bad = raidz.children[1]
    assert (bad.read_errors, bad.write_errors, bad.checksum_errors) == (3, 1, 12)
    assert raidz.children[2].state == "UNAVAIL"
    assert [d.name for d in mirror.children] == ["/var/tmp/zds/disk3.img",
                                                 "/var/tmp/zds/disk4.img"]
    assert other.name == "other" and other.scan == ""
    assert other.config.children[0].name == "sdb"


ZPOOL_IMPORT = (
    "   pool: zdsct\n"
    "     id: 15096359658297400000\n"
    "  state: ONLINE\n"
    " action: The pool can be imported using its name or numeric identifier.\n"
    " config:\n"
    "\n"
    "\tzdsct                              ONLINE\n"
    "\t  /var/tmp/zds-contract/disk0.img  ONLINE\n"
    "\n"
    "   pool: backup\n"
    "     id: 2361021301133092711\n"
    "  state: ONLINE\n"
)


def test_zpool_import_listing() -> None:
    assert parse_zpool_import(ZPOOL_IMPORT) == ["zdsct", "backup"]
    assert parse_zpool_import("") == []
