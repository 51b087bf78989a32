"""The real ZFS adapter's batch snapshot, batched destroy and holds: command lines,
output parsing and error mapping (against a RecordingRunner)."""

from __future__ import annotations

import pytest

from appliance.errors import Conflict, InvalidInput, NotFound
from appliance.host.run import RecordingRunner
from appliance.host.zfs import Zfs, parse_holds


def make() -> tuple[Zfs, RecordingRunner]:
    runner = RecordingRunner()
    return Zfs(runner), runner


def test_snapshot_many_is_one_command_per_pool() -> None:
    zfs, runner = make()
    names = [f"tank/datastores/ds{i}@p-2026-11-23T030000Z" for i in range(100)]
    zfs.snapshot_many([*names, "fast/datastores/x@p-2026-11-23T030000Z"],
                      {"zds:policy": "p"})
    assert len(runner.calls) == 2
    fast, tank = runner.calls
    assert fast == ("zfs", "snapshot", "-o", "zds:policy=p",
                    "fast/datastores/x@p-2026-11-23T030000Z")
    assert tank[:4] == ("zfs", "snapshot", "-o", "zds:policy=p") and tank[4:] == tuple(names)


def test_snapshot_many_refuses_a_plain_dataset_name() -> None:
    zfs, runner = make()
    with pytest.raises(InvalidInput):
        zfs.snapshot_many(["tank/datastores/ds1"])
    assert runner.calls == []


def test_a_failed_batch_maps_to_the_engine_error() -> None:
    zfs, runner = make()
    runner.on(["zfs", "snapshot"], returncode=1,
              stderr="cannot create snapshot 'tank/datastores/a@s': dataset already exists\n"
                     "no snapshots were created\n")
    with pytest.raises(Conflict):
        zfs.snapshot_many(["tank/datastores/a@s", "tank/datastores/b@s"])
    runner.on(["zfs", "snapshot"], returncode=1,
              stderr="cannot create snapshots : out of space\nno snapshots were created\n")
    from appliance.errors import InsufficientSpace
    with pytest.raises(InsufficientSpace):
        zfs.snapshot_many(["tank/datastores/a@s"])


def test_destroy_snapshots_is_one_comma_list() -> None:
    zfs, runner = make()
    zfs.destroy_snapshots("tank/datastores/a", ["s1", "s2"])
    assert runner.calls == [("zfs", "destroy", "tank/datastores/a@s1,s2")]
    zfs.destroy_snapshots("tank/datastores/a", [])
    assert len(runner.calls) == 1
    for bad in ("x@y", "a/b", "-r"):
        with pytest.raises(InvalidInput):
            zfs.destroy_snapshots("tank/datastores/a", ["s1", bad])
    runner.on(["zfs", "destroy"], returncode=1,
              stderr="cannot destroy snapshot tank/datastores/a@s1: dataset is busy\n")
    with pytest.raises(Conflict):
        zfs.destroy_snapshots("tank/datastores/a", ["s1"])
    assert len(runner.calls) == 2, "a held snapshot is not retried"


def test_destroying_a_held_snapshot_is_not_retried() -> None:
    zfs, runner = make()
    runner.on(["zfs", "destroy"], returncode=1,
              stderr="cannot destroy snapshot tank/datastores/a@s1: dataset is busy\n")
    with pytest.raises(Conflict):
        zfs.destroy("tank/datastores/a@s1")
    assert runner.calls == [("zfs", "destroy", "tank/datastores/a@s1")]


def test_hold_release_holds_command_lines() -> None:
    zfs, runner = make()
    snaps = ["tank/datastores/a@s1", "tank/datastores/b@s1"]
    zfs.hold("zds-keep", snaps)
    zfs.release("zds-keep", snaps[:1])
    runner.on(["zfs", "holds"], stdout="tank/datastores/a@s1\tzds-repl\t1795316295\n"
                                       "tank/datastores/a@s1\tzds-keep\t1795316290\n")
    assert zfs.holds(snaps) == {snaps[0]: ["zds-keep", "zds-repl"], snaps[1]: []}
    assert runner.calls[:2] == [("zfs", "hold", "zds-keep", *snaps),
                                ("zfs", "release", "zds-keep", snaps[0])]
    assert runner.calls[2] == ("zfs", "holds", "-H", "-p", *snaps)
    for bad in ("-r", "a b", ""):
        with pytest.raises(InvalidInput):
            zfs.hold(bad, snaps)


@pytest.mark.parametrize(("stderr", "error"), [
    ("cannot hold snapshot 'tank/fs@s': tag already exists on this dataset", Conflict),
    ("cannot hold snapshot 'tank/fs@s': dataset does not exist", NotFound),
    ("cannot release hold from snapshot 'tank/fs@s': no such tag on this dataset", NotFound),
])
def test_hold_errors(stderr: str, error: type[Exception]) -> None:
    zfs, runner = make()
    runner.on(["zfs"], returncode=1, stderr=stderr + "\n")
    with pytest.raises(error):
        zfs.hold("t", ["tank/fs@s"])


def test_parse_holds_ignores_noise() -> None:
    assert parse_holds("") == {}
    assert parse_holds("garbage\ntank/a@s\tt1\t1\n") == {"tank/a@s": ["t1"]}


def test_list_snapshots_under_reads_only_what_is_asked() -> None:
    zfs, runner = make()
    runner.on(["zfs", "get"], stdout=(
        "tank/datastores/a@p-1\ttype\tsnapshot\t-\n"
        "tank/datastores/a@p-1\tuserrefs\t1\t-\n"
        "tank/datastores/a@p-1\tzds:policy\tp\tlocal\n"
        "tank/datastores/a@manual\ttype\tsnapshot\t-\n"
        "tank/datastores/a@manual\tuserrefs\t0\t-\n"
        "tank/datastores/a@manual\tzds:policy\t-\t-\n"))
    snaps = zfs.list_snapshots_under("tank/datastores", ["userrefs", "zds:policy"])
    assert runner.calls == [("zfs", "get", "-H", "-p", "-o", "name,property,value,source",
                             "-r", "-t", "snapshot", "type,userrefs,zds:policy",
                             "tank/datastores")]
    assert [s.name for s in snaps] == ["tank/datastores/a@manual", "tank/datastores/a@p-1"]
    assert snaps[0].prop("zds:policy") == "" and snaps[1].prop("zds:policy") == "p"
    assert snaps[1].int_prop("userrefs") == 1
