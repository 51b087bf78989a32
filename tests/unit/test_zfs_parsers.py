"""Parsers of the real ZFS adapter, fed with captured ``zpool``/``zfs`` output."""

from __future__ import annotations

from appliance.host.zfs import (
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


# Composed in the format above (not captured): a degraded raidz with errors, a resilver
# style multi-line scan, and a second pool in the same output.
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


# ---- captured in the appliance image (zfsutils-linux 2.3.2-2~bpo12+2, pool "p" on files:
# mirror d0 d1, log d2, cache d3, spare d4; p/fs/child with refquota and zds:kind; sparse
# volume p/vol; snapshot p/fs/child@s1 with a clone p/clone) --------------------------------

REAL_ZPOOL_LIST = (
    'p\tONLINE\t503316480\t651264\t502665216\t3\t0\n'
)

REAL_ZPOOL_GET = (
    'p\tsize\t503316480\t-\n'
    'p\tcapacity\t0\t-\n'
    'p\taltroot\t-\tdefault\n'
    'p\thealth\tONLINE\t-\n'
    'p\tguid\t10965544793563260978\t-\n'
    'p\tversion\t-\tdefault\n'
    'p\tbootfs\t-\tdefault\n'
    'p\tdelegation\ton\tdefault\n'
    'p\tautoreplace\toff\tdefault\n'
    'p\tcachefile\t-\tdefault\n'
    'p\tfailmode\twait\tdefault\n'
    'p\tlistsnapshots\toff\tdefault\n'
    'p\tautoexpand\toff\tdefault\n'
    'p\tdedupratio\t1.00\t-\n'
    'p\tfree\t502665216\t-\n'
    'p\tallocated\t651264\t-\n'
    'p\treadonly\toff\t-\n'
    'p\tashift\t12\tlocal\n'
    'p\tcomment\t-\tdefault\n'
    'p\texpandsize\t-\t-\n'
    'p\tfreeing\t0\t-\n'
    'p\tfragmentation\t3\t-\n'
    'p\tleaked\t0\t-\n'
    'p\tmultihost\toff\tdefault\n'
    'p\tcheckpoint\t-\t-\n'
    'p\tload_guid\t940502299919014809\t-\n'
    'p\tautotrim\toff\tdefault\n'
    'p\tcompatibility\toff\tdefault\n'
    'p\tbcloneused\t0\t-\n'
    'p\tbclonesaved\t0\t-\n'
    'p\tbcloneratio\t1.00\t-\n'
    'p\tdedup_table_size\t0\t-\n'
    'p\tdedup_table_quota\tauto\tdefault\n'
    'p\tlast_scrubbed_txg\t0\t-\n'
    'p\torg.zds:role\tcontract\tlocal\n'
    'p\tzds:role\tcontract\tlocal\n'
    'p\tfeature@async_destroy\tenabled\tlocal\n'
    'p\tfeature@empty_bpobj\tenabled\tlocal\n'
    'p\tfeature@lz4_compress\tactive\tlocal\n'
    'p\tfeature@multi_vdev_crash_dump\tenabled\tlocal\n'
    'p\tfeature@spacemap_histogram\tactive\tlocal\n'
    'p\tfeature@enabled_txg\tactive\tlocal\n'
    'p\tfeature@hole_birth\tactive\tlocal\n'
    'p\tfeature@extensible_dataset\tactive\tlocal\n'
    'p\tfeature@embedded_data\tactive\tlocal\n'
    'p\tfeature@bookmarks\tenabled\tlocal\n'
    'p\tfeature@filesystem_limits\tenabled\tlocal\n'
    'p\tfeature@large_blocks\tenabled\tlocal\n'
    'p\tfeature@large_dnode\tenabled\tlocal\n'
    'p\tfeature@sha512\tenabled\tlocal\n'
    'p\tfeature@skein\tenabled\tlocal\n'
    'p\tfeature@edonr\tenabled\tlocal\n'
    'p\tfeature@userobj_accounting\tactive\tlocal\n'
    'p\tfeature@encryption\tenabled\tlocal\n'
    'p\tfeature@project_quota\tactive\tlocal\n'
    'p\tfeature@device_removal\tenabled\tlocal\n'
    'p\tfeature@obsolete_counts\tenabled\tlocal\n'
    'p\tfeature@zpool_checkpoint\tenabled\tlocal\n'
    'p\tfeature@spacemap_v2\tactive\tlocal\n'
    'p\tfeature@allocation_classes\tenabled\tlocal\n'
    'p\tfeature@resilver_defer\tenabled\tlocal\n'
    'p\tfeature@bookmark_v2\tenabled\tlocal\n'
    'p\tfeature@redaction_bookmarks\tenabled\tlocal\n'
    'p\tfeature@redacted_datasets\tenabled\tlocal\n'
    'p\tfeature@bookmark_written\tenabled\tlocal\n'
    'p\tfeature@log_spacemap\tactive\tlocal\n'
    'p\tfeature@livelist\tenabled\tlocal\n'
    'p\tfeature@device_rebuild\tenabled\tlocal\n'
    'p\tfeature@zstd_compress\tenabled\tlocal\n'
    'p\tfeature@draid\tenabled\tlocal\n'
    'p\tfeature@zilsaxattr\tenabled\tlocal\n'
    'p\tfeature@head_errlog\tactive\tlocal\n'
    'p\tfeature@blake3\tenabled\tlocal\n'
    'p\tfeature@block_cloning\tenabled\tlocal\n'
    'p\tfeature@vdev_zaps_v2\tactive\tlocal\n'
    'p\tfeature@redaction_list_spill\tenabled\tlocal\n'
    'p\tfeature@raidz_expansion\tenabled\tlocal\n'
    'p\tfeature@fast_dedup\tenabled\tlocal\n'
    'p\tfeature@longname\tenabled\tlocal\n'
    'p\tfeature@large_microzap\tenabled\tlocal\n'
)

REAL_ZPOOL_STATUS = (
    '  pool: p\n'
    ' state: ONLINE\n'
    'config:\n'
    '\n'
    '\tNAME                    STATE     READ WRITE CKSUM\n'
    '\tp                       ONLINE       0     0     0\n'
    '\t  mirror-0              ONLINE       0     0     0\n'
    '\t    /var/tmp/ex/d0.img  ONLINE       0     0     0\n'
    '\t    /var/tmp/ex/d1.img  ONLINE       0     0     0\n'
    '\tlogs\t\n'
    '\t  /var/tmp/ex/d2.img    ONLINE       0     0     0\n'
    '\tcache\n'
    '\t  /var/tmp/ex/d3.img    ONLINE       0     0     0\n'
    '\tspares\n'
    '\t  /var/tmp/ex/d4.img    AVAIL   \n'
    '\n'
    'errors: No known data errors\n'
)

REAL_ZPOOL_STATUS_SCRUB = (
    '  pool: p\n'
    ' state: ONLINE\n'
    '  scan: scrub in progress since Sun Nov 22 02:58:22 2026\n'
    '\t856K / 1.12M scanned, 368K / 964K issued at 368K/s\n'
    '\t0B repaired, 38.17% done, no estimated completion time\n'
    'config:\n'
    '\n'
    '\tNAME                    STATE     READ WRITE CKSUM\n'
    '\tp                       ONLINE       0     0     0\n'
    '\t  mirror-0              ONLINE       0     0     0\n'
    '\t    /var/tmp/ex/d0.img  ONLINE       0     0     0\n'
    '\t    /var/tmp/ex/d1.img  ONLINE       0     0     0\n'
    '\tlogs\t\n'
    '\t  /var/tmp/ex/d2.img    ONLINE       0     0     0\n'
    '\tcache\n'
    '\t  /var/tmp/ex/d3.img    ONLINE       0     0     0\n'
    '\tspares\n'
    '\t  /var/tmp/ex/d4.img    AVAIL   \n'
    '\n'
    'errors: No known data errors\n'
)

REAL_ZPOOL_IMPORT = (
    '  pool: p\n'
    '    id: 10965544793563260978\n'
    ' state: ONLINE\n'
    'action: The pool can be imported using its name or numeric identifier.\n'
    'config:\n'
    '\n'
    '\tp                       ONLINE\n'
    '\t  mirror-0              ONLINE\n'
    '\t    /var/tmp/ex/d0.img  ONLINE\n'
    '\t    /var/tmp/ex/d1.img  ONLINE\n'
    '\tcache\n'
    '\t  /var/tmp/ex/d3.img\n'
    '\tspares\n'
    '\t  /var/tmp/ex/d4.img\n'
    '\tlogs\t\n'
    '\t  /var/tmp/ex/d2.img    ONLINE\n'
)

REAL_ZFS_GET_FS = (
    'p/fs/child\ttype\tfilesystem\t-\n'
    'p/fs/child\tcreation\t1795316290\t-\n'
    'p/fs/child\tused\t98304\t-\n'
    'p/fs/child\tavailable\t67010560\t-\n'
    'p/fs/child\treferenced\t98304\t-\n'
    'p/fs/child\tcompressratio\t1.00\t-\n'
    'p/fs/child\tmounted\tyes\t-\n'
    'p/fs/child\tquota\t0\tdefault\n'
    'p/fs/child\treservation\t0\tdefault\n'
    'p/fs/child\trecordsize\t131072\tdefault\n'
    'p/fs/child\tmountpoint\t/p/fs/child\tdefault\n'
    'p/fs/child\tsharenfs\toff\tdefault\n'
    'p/fs/child\tchecksum\ton\tdefault\n'
    'p/fs/child\tcompression\tlz4\tinherited from p\n'
    'p/fs/child\tatime\ton\tdefault\n'
    'p/fs/child\tdevices\ton\tdefault\n'
    'p/fs/child\texec\ton\tdefault\n'
    'p/fs/child\tsetuid\ton\tdefault\n'
    'p/fs/child\treadonly\toff\tdefault\n'
    'p/fs/child\tzoned\toff\tdefault\n'
    'p/fs/child\tsnapdir\thidden\tdefault\n'
    'p/fs/child\taclmode\tdiscard\tdefault\n'
    'p/fs/child\taclinherit\trestricted\tdefault\n'
    'p/fs/child\tcreatetxg\t12\t-\n'
    'p/fs/child\tcanmount\ton\tdefault\n'
    'p/fs/child\txattr\ton\tdefault\n'
    'p/fs/child\tcopies\t1\tdefault\n'
    'p/fs/child\tversion\t5\t-\n'
    'p/fs/child\tutf8only\toff\t-\n'
    'p/fs/child\tnormalization\tnone\t-\n'
    'p/fs/child\tcasesensitivity\tsensitive\t-\n'
    'p/fs/child\tvscan\toff\tdefault\n'
    'p/fs/child\tnbmand\toff\tdefault\n'
    'p/fs/child\tsharesmb\toff\tdefault\n'
    'p/fs/child\trefquota\t67108864\tlocal\n'
    'p/fs/child\trefreservation\t0\tdefault\n'
    'p/fs/child\tguid\t8769078409687900901\t-\n'
    'p/fs/child\tprimarycache\tall\tdefault\n'
    'p/fs/child\tsecondarycache\tall\tdefault\n'
    'p/fs/child\tusedbysnapshots\t0\t-\n'
    'p/fs/child\tusedbydataset\t98304\t-\n'
    'p/fs/child\tusedbychildren\t0\t-\n'
    'p/fs/child\tusedbyrefreservation\t0\t-\n'
    'p/fs/child\tlogbias\tlatency\tdefault\n'
    'p/fs/child\tobjsetid\t98\t-\n'
    'p/fs/child\tdedup\toff\tdefault\n'
    'p/fs/child\tmlslabel\tnone\tdefault\n'
    'p/fs/child\tsync\tstandard\tdefault\n'
    'p/fs/child\tdnodesize\tlegacy\tdefault\n'
    'p/fs/child\trefcompressratio\t1.00\t-\n'
    'p/fs/child\twritten\t98304\t-\n'
    'p/fs/child\tlogicalused\t43008\t-\n'
    'p/fs/child\tlogicalreferenced\t43008\t-\n'
    'p/fs/child\tvolmode\tdefault\tdefault\n'
    'p/fs/child\tfilesystem_limit\tnone\tdefault\n'
    'p/fs/child\tsnapshot_limit\tnone\tdefault\n'
    'p/fs/child\tfilesystem_count\tnone\tdefault\n'
    'p/fs/child\tsnapshot_count\tnone\tdefault\n'
    'p/fs/child\tsnapdev\thidden\tdefault\n'
    'p/fs/child\tacltype\toff\tdefault\n'
    'p/fs/child\tcontext\tnone\tdefault\n'
    'p/fs/child\tfscontext\tnone\tdefault\n'
    'p/fs/child\tdefcontext\tnone\tdefault\n'
    'p/fs/child\trootcontext\tnone\tdefault\n'
    'p/fs/child\trelatime\ton\tdefault\n'
    'p/fs/child\tredundant_metadata\tall\tdefault\n'
    'p/fs/child\toverlay\ton\tdefault\n'
    'p/fs/child\tencryption\toff\tdefault\n'
    'p/fs/child\tkeylocation\tnone\tdefault\n'
    'p/fs/child\tkeyformat\tnone\tdefault\n'
    'p/fs/child\tpbkdf2iters\t0\tdefault\n'
    'p/fs/child\tspecial_small_blocks\t0\tdefault\n'
    'p/fs/child\tprefetch\tall\tdefault\n'
    'p/fs/child\tdirect\tstandard\tdefault\n'
    'p/fs/child\tlongname\toff\tdefault\n'
    'p/fs/child\tzds:kind\tnfs\tlocal\n'
)

REAL_ZFS_GET_VOL = (
    'p/vol\ttype\tvolume\t-\n'
    'p/vol\tcreation\t1795316296\t-\n'
    'p/vol\tused\t57344\t-\n'
    'p/vol\tavailable\t331898880\t-\n'
    'p/vol\treferenced\t57344\t-\n'
    'p/vol\tcompressratio\t1.00\t-\n'
    'p/vol\treservation\t0\tdefault\n'
    'p/vol\tvolsize\t16777216\tlocal\n'
    'p/vol\tvolblocksize\t16384\tdefault\n'
    'p/vol\tchecksum\ton\tdefault\n'
    'p/vol\tcompression\tlz4\tinherited from p\n'
    'p/vol\treadonly\toff\tdefault\n'
    'p/vol\tcreatetxg\t17\t-\n'
    'p/vol\tcopies\t1\tdefault\n'
    'p/vol\trefreservation\t0\tdefault\n'
    'p/vol\tguid\t10701865080742440252\t-\n'
    'p/vol\tprimarycache\tall\tdefault\n'
    'p/vol\tsecondarycache\tall\tdefault\n'
    'p/vol\tusedbysnapshots\t0\t-\n'
    'p/vol\tusedbydataset\t57344\t-\n'
    'p/vol\tusedbychildren\t0\t-\n'
    'p/vol\tusedbyrefreservation\t0\t-\n'
    'p/vol\tlogbias\tlatency\tdefault\n'
    'p/vol\tobjsetid\t115\t-\n'
    'p/vol\tdedup\toff\tdefault\n'
    'p/vol\tmlslabel\tnone\tdefault\n'
    'p/vol\tsync\tstandard\tdefault\n'
    'p/vol\trefcompressratio\t1.00\t-\n'
    'p/vol\twritten\t57344\t-\n'
    'p/vol\tlogicalused\t28672\t-\n'
    'p/vol\tlogicalreferenced\t28672\t-\n'
    'p/vol\tvolmode\tdefault\tdefault\n'
    'p/vol\tsnapshot_limit\tnone\tdefault\n'
    'p/vol\tsnapshot_count\tnone\tdefault\n'
    'p/vol\tsnapdev\thidden\tdefault\n'
    'p/vol\tcontext\tnone\tdefault\n'
    'p/vol\tfscontext\tnone\tdefault\n'
    'p/vol\tdefcontext\tnone\tdefault\n'
    'p/vol\trootcontext\tnone\tdefault\n'
    'p/vol\tredundant_metadata\tall\tdefault\n'
    'p/vol\tencryption\toff\tdefault\n'
    'p/vol\tkeylocation\tnone\tdefault\n'
    'p/vol\tkeyformat\tnone\tdefault\n'
    'p/vol\tpbkdf2iters\t0\tdefault\n'
    'p/vol\tprefetch\tall\tdefault\n'
    'p/vol\tvolthreading\ton\tdefault\n'
)

REAL_ZFS_GET_SNAP = (
    'p/fs/child@s1\ttype\tsnapshot\t-\n'
    'p/fs/child@s1\tcreation\t1795316298\t-\n'
    'p/fs/child@s1\tused\t0\t-\n'
    'p/fs/child@s1\treferenced\t98304\t-\n'
    'p/fs/child@s1\tcompressratio\t1.00\t-\n'
    'p/fs/child@s1\tdevices\ton\tdefault\n'
    'p/fs/child@s1\texec\ton\tdefault\n'
    'p/fs/child@s1\tsetuid\ton\tdefault\n'
    'p/fs/child@s1\tcreatetxg\t18\t-\n'
    'p/fs/child@s1\txattr\ton\tdefault\n'
    'p/fs/child@s1\tversion\t5\t-\n'
    'p/fs/child@s1\tutf8only\toff\t-\n'
    'p/fs/child@s1\tnormalization\tnone\t-\n'
    'p/fs/child@s1\tcasesensitivity\tsensitive\t-\n'
    'p/fs/child@s1\tnbmand\toff\tdefault\n'
    'p/fs/child@s1\tguid\t13578915997165657957\t-\n'
    'p/fs/child@s1\tprimarycache\tall\tdefault\n'
    'p/fs/child@s1\tsecondarycache\tall\tdefault\n'
    'p/fs/child@s1\tdefer_destroy\toff\t-\n'
    'p/fs/child@s1\tuserrefs\t0\t-\n'
    'p/fs/child@s1\tobjsetid\t119\t-\n'
    'p/fs/child@s1\tmlslabel\tnone\tdefault\n'
    'p/fs/child@s1\trefcompressratio\t1.00\t-\n'
    'p/fs/child@s1\twritten\t98304\t-\n'
    'p/fs/child@s1\tclones\tp/clone\t-\n'
    'p/fs/child@s1\tlogicalreferenced\t43008\t-\n'
    'p/fs/child@s1\tacltype\toff\tdefault\n'
    'p/fs/child@s1\tcontext\tnone\tdefault\n'
    'p/fs/child@s1\tfscontext\tnone\tdefault\n'
    'p/fs/child@s1\tdefcontext\tnone\tdefault\n'
    'p/fs/child@s1\trootcontext\tnone\tdefault\n'
    'p/fs/child@s1\tencryption\toff\tdefault\n'
    'p/fs/child@s1\tprefetch\tall\tdefault\n'
    'p/fs/child@s1\tzds:note\thello\tlocal\n'
    'p/fs/child@s1\tzds:kind\tnfs\tinherited from p/fs/child\n'
)

REAL_ZFS_GET_ORIGIN = (
    'p/clone\torigin\tp/fs/child@s1\t-\n'
    'p/clone\tclones\t-\t-\n'
    'p/fs/child\torigin\t-\t-\n'
    'p/fs/child\tclones\t-\t-\n'
    'p/fs/child@s1\torigin\t-\t-\n'
    'p/fs/child@s1\tclones\tp/clone\t-\n'
)


def test_real_zpool_list_and_get() -> None:
    (pool,) = parse_zpool_list(REAL_ZPOOL_LIST)
    assert (pool.name, pool.health, pool.size, pool.allocated, pool.free) == (
        "p", "ONLINE", 503316480, 651264, 502665216)
    assert pool.fragmentation == 3 and pool.capacity == 0
    props = parse_get(REAL_ZPOOL_GET)["p"]
    assert props["ashift"] == ("12", "local")
    assert props["zds:role"] == ("contract", "local")
    assert props["org.zds:role"] == ("contract", "local")
    assert props["autotrim"] == ("off", "default")
    assert not any(k.startswith("feature@") for k in props)


def test_real_zpool_status_fresh_pool() -> None:
    (st,) = parse_zpool_status(REAL_ZPOOL_STATUS)
    assert st.name == "p" and st.state == "ONLINE"
    assert st.scan == ""  # 2.3 prints no scan line before the first scrub
    assert st.errors == "No known data errors"
    root = st.config
    assert root.name == "p" and root.state == "ONLINE"
    assert [c.name for c in root.children] == ["mirror-0", "logs", "cache", "spares"]
    assert [d.name for d in root.children[0].children] == ["/var/tmp/ex/d0.img",
                                                           "/var/tmp/ex/d1.img"]
    assert root.children[1].children[0].name == "/var/tmp/ex/d2.img"
    assert root.children[3].children[0].state == "AVAIL"


def test_real_zpool_status_scrub_in_progress() -> None:
    (st,) = parse_zpool_status(REAL_ZPOOL_STATUS_SCRUB)
    assert st.scan.startswith("scrub in progress since Sun Nov 22 02:58:22 2026")
    assert "38.17% done" in st.scan
    assert [c.name for c in st.config.children] == ["mirror-0", "logs", "cache", "spares"]


def test_real_zpool_import_listing() -> None:
    assert parse_zpool_import(REAL_ZPOOL_IMPORT) == ["p"]


def test_real_zfs_get_filesystem() -> None:
    (fs,) = parse_datasets(REAL_ZFS_GET_FS)
    assert fs.name == "p/fs/child" and fs.type == "filesystem"
    assert fs.int_prop("refquota") == 67108864 and fs.int_prop("quota") == 0
    assert fs.int_prop("refreservation") == 0
    assert fs.int_prop("available") == 67010560 and fs.int_prop("used") == 98304
    assert fs.prop("mountpoint") == "/p/fs/child" and fs.prop("mounted") == "yes"
    assert fs.prop("compression") == "lz4" and fs.prop("xattr") == "on"
    assert fs.prop("zds:kind") == "nfs"
    assert "origin" not in fs.properties and fs.prop("origin") == ""  # only on clones
    assert "volsize" not in fs.properties


def test_real_zfs_get_volume() -> None:
    (vol,) = parse_datasets(REAL_ZFS_GET_VOL)
    assert vol.type == "volume"
    assert vol.int_prop("volsize") == 16777216 and vol.int_prop("volblocksize") == 16384
    assert vol.int_prop("refreservation") == 0  # sparse
    assert "mountpoint" not in vol.properties and vol.prop("recordsize") == ""


def test_real_zfs_get_snapshot_drops_inherited_user_props() -> None:
    (snap,) = parse_datasets(REAL_ZFS_GET_SNAP)
    assert snap.type == "snapshot" and snap.name == "p/fs/child@s1"
    assert snap.prop("zds:note") == "hello"
    assert "zds:kind" not in snap.properties  # inherited from p/fs/child
    assert snap.prop("clones") == "p/clone" and snap.int_prop("createtxg") == 18
    assert "available" not in snap.properties


def test_real_origin_and_clones() -> None:
    got = {(i.name, k): i.prop(k) for i in parse_datasets(
        "p/clone\ttype\tfilesystem\t-\np/fs/child\ttype\tfilesystem\t-\n"
        "p/fs/child@s1\ttype\tsnapshot\t-\n" + REAL_ZFS_GET_ORIGIN) for k in ("origin", "clones")}
    assert got[("p/clone", "origin")] == "p/fs/child@s1"
    assert got[("p/fs/child", "origin")] == ""
    assert got[("p/fs/child@s1", "clones")] == "p/clone"
