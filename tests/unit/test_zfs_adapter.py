"""The real ZFS adapter against a RecordingRunner: command lines and error mapping."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.errors import (
    Conflict,
    HostCommandFailed,
    InsufficientSpace,
    InvalidInput,
    NotFound,
    Unavailable,
    ZdsError,
)
from appliance.host.run import CommandError, CommandResult, RecordingRunner
from appliance.host.zfs import (
    ZPOOL_STATUS_SAMPLE,
    PoolLayout,
    VdevSpec,
    Zfs,
    classify_error,
)


def make() -> tuple[Zfs, RecordingRunner]:
    runner = RecordingRunner()
    return Zfs(runner, import_dirs=("/var/tmp/zds",)), runner


def classify(stderr: str) -> ZdsError:
    return classify_error(CommandError(CommandResult(("zfs", "x"), 1, "", stderr)))


@pytest.mark.parametrize(("stderr", "expected"), [
    ("cannot open 'tank/nope': dataset does not exist", NotFound),
    ("cannot create 'tank/a/b': parent does not exist", NotFound),
    ("cannot open 'nopool': no such pool", NotFound),
    ("cannot create 'nopool/x': no such pool 'nopool'", NotFound),
    ("cannot import 'nopool': no such pool available", NotFound),
    ("cannot open '/dev/disk/by-id/virtio-nope': No such device or address", NotFound),
    ("cannot resolve path '/var/tmp/nope.img'", NotFound),
    ("cannot create 'tank/fs': dataset already exists", Conflict),
    ("cannot create 'tank': pool already exists", Conflict),
    ("cannot import 'tank': a pool with that name already exists", Conflict),
    ("invalid vdev specification\nuse '-f' to override the following errors:\n"
     "/dev/sdb is part of active pool 'tank'", Conflict),
    ("invalid vdev specification\nuse '-f' to override the following errors:\n"
     "/dev/sdc1 is in use and contains a unknown filesystem.", Conflict),
    ("invalid vdev specification\nuse '-f' to override the following errors:\n"
     "mirror contains devices of different sizes", InvalidInput),
    ("cannot destroy 'tank/v': dataset is busy", Conflict),
    ("cannot destroy 'tank/fs': filesystem has children\n"
     "use '-r' to destroy the following datasets:\ntank/fs/a", Conflict),
    ("cannot destroy 'tank/fs@s': snapshot has dependent clones\n"
     "use '-R' to destroy the following datasets:\ntank/clone", Conflict),
    ("cannot rollback to 'tank/fs@s1': more recent snapshots or bookmarks exist\n"
     "use '-r' to force deletion of the following snapshots and bookmarks:\ntank/fs@s2",
     Conflict),
    ("cannot rollback to 'tank/fs@s1': clones of previous snapshots exist\n"
     "use '-R' to force deletion of the following clones and dependents:\ntank/c",
     Conflict),
    ("cannot set property for 'tank/fs': size is less than current used or reserved space",
     Conflict),
    ("cannot create 'tank/v': out of space", InsufficientSpace),
    ("cannot set property for 'tank/v': size is greater than available space",
     InsufficientSpace),
    ("cannot set property for 'tank/v': 'volblocksize' is readonly", InvalidInput),
    ("cannot create 'tank/fs': invalid property 'nosuch'", InvalidInput),
    ("cannot create 'tank/fs': 'sync' must be one of 'standard | always | disabled'",
     InvalidInput),
    ("cannot create 'tank/v': volume size must be a multiple of volume block size",
     InvalidInput),
    ("cannot create 'tank/v': 'recordsize' does not apply to datasets of this type",
     InvalidInput),
    ("cannot create 'tank/x': pool or dataset exists", Conflict),
    ("cannot destroy 'tank': pool is busy", Conflict),
    ("cannot open 'tank/x': no such pool or dataset", NotFound),
    ("cannot create 'tank': one or more devices is currently unavailable", NotFound),
    ("cannot set property for 'tank/v': read-only property", InvalidInput),
    ("cannot create 'tank/v': property doesn't apply to datasets of this type",
     InvalidInput),
    ("cannot open 'tank': pool I/O is currently suspended", Unavailable),
    # captured from zfsutils-linux 2.3.2 in the appliance image:
    ("property 'zds:role' is not a valid pool or vdev property", InvalidInput),
    ("cannot use '/dev/null': must be a block device or regular file", InvalidInput),
    ("cannot set property for 'p/odd': 'volsize' must be a multiple of volume block size "
     "(16K)", InvalidInput),
    ("cannot scrub p: currently scrubbing; use 'zpool scrub -s' to cancel scrub", Conflict),
    ("cannot import 'p': a pool with that name already exists\n"
     "use the form 'zpool import <pool | id> <newpool>' to give it a new name", Conflict),
    # zfsutils-linux 2.3.2 run on this host (no zfs.ko), verbatim:
    ("The ZFS modules cannot be auto-loaded.\n"
     "Try running 'modprobe zfs' as root to manually load them.", Unavailable),
    ("The ZFS modules are not loaded.\nTry running 'modprobe zfs' as root to load them.",
     Unavailable),
])
def test_classify(stderr: str, expected: type[ZdsError]) -> None:
    err = classify(stderr)
    assert type(err) is expected
    assert err.message and "\n" not in err.message


def test_unclassified_stays_host_command_failed() -> None:
    err = classify("internal error: something odd")
    assert isinstance(err, HostCommandFailed)


def test_create_pool_command_line() -> None:
    zfs, runner = make()
    layout = PoolLayout(data=(VdevSpec("mirror", ("/dev/sdb", "/dev/sdc")),
                              VdevSpec("mirror", ("/dev/sdd", "/dev/sde"))),
                        log=(VdevSpec("disk", ("/dev/nvme0n1",)),),
                        cache=("/dev/nvme1n1",), spares=("/dev/sdf",))
    zfs.create_pool("tank", layout, {"ashift": "12", "zds:role": "data"},
                    {"compression": "lz4"}, force=True)
    assert runner.calls == [(
        "zpool", "create", "-f", "-o", "ashift=12", "-O", "compression=lz4", "tank",
        "mirror", "/dev/sdb", "/dev/sdc", "mirror", "/dev/sdd", "/dev/sde",
        "log", "/dev/nvme0n1", "cache", "/dev/nvme1n1", "spare", "/dev/sdf"),
        # zpool 2.3 takes user properties only from `zpool set`; then they are read back
        ("zpool", "set", "zds:role=data", "tank"),
        ("zpool", "get", "-H", "-p", "-o", "name,property,value,source", "zds:role", "tank"),
        ("zpool", "set", "zds:role=data", "tank")]  # the recorder answered nothing: set again


@pytest.mark.parametrize("hostile", ["-f", "tank; rm -rf /", "tank\nx", "$(id)", "a\tb", ""])
def test_hostile_names_never_reach_a_command(hostile: str) -> None:
    zfs, runner = make()
    with pytest.raises(InvalidInput):
        zfs.create_filesystem(hostile, {})
    with pytest.raises(InvalidInput):
        zfs.destroy(hostile)
    assert runner.calls == []


def test_hostile_property_rejected() -> None:
    zfs, runner = make()
    with pytest.raises(InvalidInput):
        zfs.set_properties("tank/a", {"-o x": "1"})
    with pytest.raises(InvalidInput):
        zfs.set_properties("tank/a", {"zds:x": "a\nb"})
    with pytest.raises(InvalidInput):
        zfs.create_pool("tank", PoolLayout(data=(VdevSpec("disk", ("-f",)),)), {}, {})
    assert runner.calls == []


def test_create_volume_thick_and_sparse() -> None:
    zfs, runner = make()
    zfs.create_volume("tank/zds/v1", 1 << 30, sparse=False, properties={"volblocksize": "16384"})
    zfs.create_volume("tank/zds/v2", 1 << 30, sparse=True, properties={})
    assert runner.calls == [
        ("zfs", "create", "-V", "1073741824", "-o", "volblocksize=16384", "tank/zds/v1"),
        ("zfs", "create", "-s", "-V", "1073741824", "tank/zds/v2"),
    ]


def test_create_makes_missing_parents_then_retries() -> None:
    zfs, runner = make()
    state = {"n": 0}

    def responder(argv: tuple[str, ...], _input: str | None) -> CommandResult | None:
        if argv[-1] == "tank/a/b" and state["n"] == 0:
            state["n"] += 1
            return CommandResult(argv, 1, "", "cannot create 'tank/a/b': parent does not exist")
        return None

    runner.responders.append(responder)
    zfs.create_filesystem("tank/a/b", {"compression": "lz4"})
    assert runner.calls == [
        ("zfs", "create", "-o", "compression=lz4", "tank/a/b"),
        ("zfs", "create", "-p", "tank/a"),
        ("zfs", "create", "-o", "compression=lz4", "tank/a/b"),
    ]


def test_existing_dataset_is_conflict() -> None:
    zfs, runner = make()
    runner.on(["zfs", "create"], returncode=1,
              stderr="cannot create 'tank/a': dataset already exists")
    with pytest.raises(Conflict):
        zfs.create_filesystem("tank/a", {})


def test_get_dataset_missing_is_none_and_list_is_empty() -> None:
    zfs, runner = make()
    runner.on(["zfs", "get"], returncode=1,
              stderr="cannot open 'tank/nope': dataset does not exist")
    assert zfs.get_dataset("tank/nope") is None
    assert zfs.list_datasets("tank/nope") == []
    with pytest.raises(NotFound):
        zfs.list_snapshots("tank/nope")


def test_list_snapshots_sorted_by_createtxg_and_only_own() -> None:
    zfs, runner = make()
    runner.on(["zfs", "get"], stdout=(
        "tank/a@late\ttype\tsnapshot\t-\ntank/a@late\tcreatetxg\t200\t-\n"
        "tank/a@early\ttype\tsnapshot\t-\ntank/a@early\tcreatetxg\t100\t-\n"
        "tank/a@early\tzds:note\tfirst\tlocal\n"))
    snaps = zfs.list_snapshots("tank/a")
    assert [s.name for s in snaps] == ["tank/a@early", "tank/a@late"]
    assert snaps[0].prop("zds:note") == "first"
    assert runner.calls[-1] == ("zfs", "get", "-H", "-p", "-o", "name,property,value,source",
                                "-r", "-d", "1", "-t", "snapshot", "all", "tank/a")


def test_list_pools_merges_properties() -> None:
    zfs, runner = make()
    runner.on(["zpool", "list"], stdout="tank\tONLINE\t1000\t100\t900\t1\t10\n")
    runner.on(["zpool", "get"], stdout="tank\tzds:demo\ttrue\tlocal\ntank\tashift\t12\tlocal\n")
    (pool,) = zfs.list_pools()
    assert pool.name == "tank" and pool.capacity == 10
    assert pool.properties == {"zds:demo": "true", "ashift": "12"}
    assert runner.calls[-1] == ("zpool", "get", "-H", "-p", "-o", "name,property,value,source",
                                "all", "tank")


def test_pool_status_and_missing_pool() -> None:
    zfs, runner = make()
    runner.on(["zpool", "status"], stdout=ZPOOL_STATUS_SAMPLE)
    assert zfs.pool_status("p").config.children[0].name == "mirror-0"
    assert runner.calls[-1] == ("zpool", "status", "-p", "p")
    runner.on(["zpool", "status"], returncode=1, stderr="cannot open 'nope': no such pool")
    with pytest.raises(NotFound):
        zfs.pool_status("nope")


def test_import_scans_disks_and_sparse_file_dirs(tmp_path: Path) -> None:
    (tmp_path / "pools" / "demo").mkdir(parents=True)
    (tmp_path / "pools" / "stray-file").touch()
    runner = RecordingRunner()
    zfs = Zfs(runner, import_dirs=(str(tmp_path / "pools" / "*"), "/nonexistent/*"))
    demo = str(tmp_path / "pools" / "demo")
    runner.on(["zpool", "import"], returncode=0, stderr="no pools available to import")
    runner.on(["zpool", "import", "-d", demo], stdout="   pool: demo\n     id: 1\n")
    assert zfs.importable_pools() == ["demo"]
    assert runner.calls == [("zpool", "import"), ("zpool", "import", "-d", demo)]
    runner.calls.clear()
    runner.on(["zpool", "import", "-N", "demo"], returncode=1,
              stderr="cannot import 'demo': no such pool available")
    zfs.import_pool("demo")
    assert runner.calls[:2] == [("zpool", "import", "-N", "demo"),
                                ("zpool", "import", "-N", "-d", demo, "demo")]
    runner.calls.clear()
    runner.on(["zpool", "import", "-N", "-d", demo, "nope"], returncode=1,
              stderr="cannot import 'nope': no such pool available")
    runner.on(["zpool", "import", "-N", "nope"], returncode=1,
              stderr="cannot import 'nope': no such pool available")
    with pytest.raises(NotFound):
        zfs.import_pool("nope")


def test_scrub_already_running_is_fine() -> None:
    zfs, runner = make()
    runner.on(["zpool", "scrub"], returncode=1, stderr=(
        "cannot scrub tank: currently scrubbing; use 'zpool scrub -s' to cancel current "
        "scrub"))
    zfs.scrub("tank")


def test_destroy_and_rollback_flags() -> None:
    zfs, runner = make()
    zfs.destroy("tank/a", recursive=True)
    zfs.destroy("tank/a@s1", recursive=True)
    zfs.rollback("tank/a@s1", destroy_newer=True)
    zfs.clone("tank/a@s1", "tank/b", {"zds:kind": "clone"})
    zfs.snapshot("tank/a", "s2", {"zds:note": "x y"})
    zfs.set_pool_properties("tank", {"autotrim": "on", "zds:demo": "true"})
    assert runner.calls == [
        ("zfs", "destroy", "-r", "tank/a"),
        ("zfs", "destroy", "tank/a@s1"),
        ("zfs", "rollback", "-r", "tank/a@s1"),
        ("zfs", "clone", "-o", "zds:kind=clone", "tank/a@s1", "tank/b"),
        ("zfs", "snapshot", "-o", "zds:note=x y", "tank/a@s2"),
        ("zpool", "set", "autotrim=on", "tank"),
        ("zpool", "set", "zds:demo=true", "tank"),
    ]


def test_available_false_when_tools_fail(tmp_path: Path) -> None:
    runner = RecordingRunner()
    zfs = Zfs(runner, dev_zfs=str(tmp_path / "zfs"))
    assert zfs.available() is False and runner.calls == []  # no /dev/zfs: no command
    (tmp_path / "zfs").touch()
    runner.on(["zpool", "list"], returncode=1, stderr="The ZFS modules are not loaded.")
    assert zfs.available() is False
    runner.on(["zpool", "list"], stdout="tank\n")
    assert zfs.available() is True
    assert zfs.available() is True
    assert len(runner.calls) == 2, "a positive answer is reused for a few seconds"


def test_wait_for_device_not_a_volume_and_timeout() -> None:
    zfs, runner = make()
    runner.on(["zfs", "get"], stdout="tank/fs\ttype\tfilesystem\t-\n")
    with pytest.raises(InvalidInput):
        zfs.wait_for_device("tank/fs")
    runner.on(["zfs", "get"], stdout="tank/zds-never\ttype\tvolume\t-\n")
    with pytest.raises(Unavailable):
        zfs.wait_for_device("tank/zds-never", timeout=0.3)
    udev = [c for c in runner.calls if c[0] == "udevadm"]
    # settle, then (the link still missing) replay the zvols' events once and settle again
    assert udev == [("udevadm", "settle", "--timeout=10"),
                    ("udevadm", "trigger", "--action=change", "--subsystem-match=block",
                     "--sysname-match=zd*"),
                    ("udevadm", "settle", "--timeout=10")]


def test_create_pool_user_properties_read_back_once() -> None:
    zfs, runner = make()
    runner.on(["zpool", "get"], stdout="tank\tzds:demo\ttrue\tlocal\n")
    zfs.create_pool("tank", PoolLayout(data=(VdevSpec("disk", ("/dev/sdb",)),)),
                    {"zds:demo": "true"}, {})
    assert [c[:2] for c in runner.calls] == [("zpool", "create"), ("zpool", "set"),
                                             ("zpool", "get")]


def test_destroy_retries_a_briefly_busy_zvol_after_udev_settles() -> None:
    zfs, runner = make()
    zfs.poll_interval = 0.0
    answers = iter([CommandResult(("zfs",), 1, "", "cannot destroy 'tank/v': dataset is busy"),
                    CommandResult(("zfs",), 0, "", "")])

    def responder(argv: tuple[str, ...], _input: str | None) -> CommandResult | None:
        return next(answers) if argv[:2] == ("zfs", "destroy") else None

    runner.responders.insert(0, responder)
    zfs.destroy("tank/v")
    assert runner.calls == [("zfs", "destroy", "tank/v"),
                            ("udevadm", "settle", "--timeout=10"),
                            ("zfs", "destroy", "tank/v")]


def test_destroy_of_a_zvol_that_stays_busy_is_a_conflict() -> None:
    zfs, runner = make()
    zfs.poll_interval = 0.0
    zfs.BUSY_GRACE = 0.05
    runner.on(["zfs", "destroy"], returncode=1,
              stderr="cannot destroy 'tank/v': dataset is busy")
    with pytest.raises(Conflict, match="busy"):
        zfs.destroy("tank/v")
    assert runner.calls.count(("udevadm", "settle", "--timeout=10")) == 1


def test_destroy_other_conflicts_are_not_retried() -> None:
    zfs, runner = make()
    runner.on(["zfs", "destroy"], returncode=1,
              stderr="cannot destroy 'tank/fs': filesystem has children")
    with pytest.raises(Conflict):
        zfs.destroy("tank/fs")
    assert runner.calls == [("zfs", "destroy", "tank/fs")]


def test_import_of_a_pool_another_system_used_is_conflict_unless_forced() -> None:
    zfs, runner = make()
    runner.on(["zpool", "import", "-N", "tank"], returncode=1, stderr=(
        "cannot import 'tank': pool was previously in use from another system.\n"
        "Last accessed by zds (hostid=9a1b2c3d) at Sun Nov 22 04:10:28 2026\n"
        "The pool can be imported, use 'zpool import -f' to import the pool."))
    with pytest.raises(Conflict, match="another system"):
        zfs.import_pool("tank")
    runner.calls.clear()
    zfs.import_pool("tank", force=True)
    assert runner.calls[0] == ("zpool", "import", "-N", "-f", "tank")


def test_import_resets_what_a_stream_set_to_mount_before_anything_mounts() -> None:
    """A replica received with mountpoint=/usr/local/sbin must never be mounted there
    (issue 22): the pool is imported with -N, the received mount settings are reset,
    and only then does ``zfs mount -a`` run."""
    zfs, runner = make()
    runner.on(["zfs", "get"], stdout=(
        "tank/replicas/evil\tmountpoint\t/usr/local/sbin\treceived\n"
        "tank/replicas/evil\tsharenfs\trw\treceived\n"))
    zfs.import_pool("tank")
    calls = runner.calls
    assert calls[0] == ("zpool", "import", "-N", "tank")
    assert calls[1][:4] == ("zfs", "get", "-H", "-p") and "-s" in calls[1] \
        and calls[1][calls[1].index("-s") + 1] == "received" and calls[1][-1] == "tank"
    # canmount first: zfs inherit mountpoint would mount a canmount=on file system
    assert calls[2:] == [("zfs", "set", "canmount=noauto", "tank/replicas/evil"),
                         ("zfs", "inherit", "mountpoint", "tank/replicas/evil"),
                         ("zfs", "inherit", "sharenfs", "tank/replicas/evil"),
                         ("zfs", "mount", "-a")]


def test_root_user_properties_are_set_and_inherited_on_the_pools_root_only() -> None:
    """The pair's job notes: `zfs set` on the root dataset, one `zfs inherit` per note
    (it takes one property); a native property is refused before any command."""
    zfs, runner = make()
    zfs.set_root_user_properties("tank", {"zds:job:ab12": '{"kind":"pool.scrub"}'})
    zfs.clear_root_user_properties("tank", ["zds:job:ab12", "zds:job:cd34"])
    assert runner.calls == [("zfs", "set", 'zds:job:ab12={"kind":"pool.scrub"}', "tank"),
                            ("zfs", "inherit", "zds:job:ab12", "tank"),
                            ("zfs", "inherit", "zds:job:cd34", "tank")]
    runner.calls.clear()
    with pytest.raises(InvalidInput, match="not a user property"):
        zfs.set_root_user_properties("tank", {"mountpoint": "/usr/local/sbin"})
    with pytest.raises(InvalidInput, match="not a user property"):
        zfs.clear_root_user_properties("tank", ["zds:job:ok", "Zds:Bad Name"])
    assert runner.calls == []
