"""Every contract check, run against the in-memory fakes (the real adapters run the same
checks inside the appliance image: ``python -m appliance.host.contract``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.errors import Unavailable
from appliance.host.contract import lio_checks, nvmet_checks, zfs_checks, zfs_send_checks
from appliance.host.fakes.lio import FakeLio
from appliance.host.fakes.nvmet import FakeNvmet
from appliance.host.fakes.replication import FakeSsh, FakeZfsSend
from appliance.host.fakes.zfs import FakeZfs
from appliance.host.zfs import PoolLayout, VdevSpec

MiB = 1 << 20
DISKS = [f"/var/tmp/zds-contract/disk{i}.img" for i in range(5)]


@pytest.fixture
def zfs() -> FakeZfs:
    fake = FakeZfs(disks={d: 512 * MiB for d in DISKS})
    fake.create_pool("ctpool", PoolLayout(data=(VdevSpec("disk", (DISKS[4],)),)), {}, {})
    return fake


def test_zfs_available(zfs: FakeZfs) -> None:
    zfs_checks.check_available(zfs)


def test_zfs_pools(zfs: FakeZfs) -> None:
    zfs_checks.check_pools(zfs, DISKS[:3], "/var/tmp/zds-contract/missing.img")


def test_zfs_devices(zfs: FakeZfs) -> None:
    zfs_checks.check_devices(zfs, DISKS[:4], "/var/tmp/zds-contract/missing.img")


def test_zfs_filesystems(zfs: FakeZfs) -> None:
    zfs_checks.check_filesystems(zfs, "ctpool")


def test_zfs_volumes(zfs: FakeZfs) -> None:
    zfs_checks.check_volumes(zfs, "ctpool", zfs.device_exists)


def test_zfs_snapshots(zfs: FakeZfs) -> None:
    zfs_checks.check_snapshots(zfs, "ctpool")


def test_zfs_snapshot_batch_and_holds(zfs: FakeZfs) -> None:
    zfs_checks.check_snapshot_batch_and_holds(zfs, "ctpool")


def test_zfs_listing_and_snapshot_counts(zfs: FakeZfs) -> None:
    zfs_checks.check_listing_and_snapshot_counts(zfs, "ctpool")


def test_zfs_run_all(zfs: FakeZfs) -> None:
    done = zfs_checks.run_all(zfs, "ctpool", DISKS[:4], "/nonexistent", zfs.device_exists)
    assert done == ["available", "pools", "devices", "filesystems", "volumes", "snapshots",
                    "snapshot_batch_and_holds", "listing_and_snapshot_counts"]
    assert list(zfs.iter_names()) == ["ctpool"], "checks clean up after themselves"


def test_zfs_down_is_unavailable(zfs: FakeZfs) -> None:
    zfs.down = True
    assert zfs.available() is False
    with pytest.raises(Unavailable):
        zfs.list_pools()
    with pytest.raises(Unavailable):
        zfs.create_filesystem("ctpool/x", {})


@pytest.fixture
def lio_env() -> tuple[FakeLio, list[str]]:
    zfs = FakeZfs(disks={DISKS[0]: 1024 * MiB})
    zfs.create_pool("ctpool", PoolLayout(data=(VdevSpec("disk", (DISKS[0],)),)), {}, {})
    for n in ("l0", "l1"):
        zfs.create_volume(f"ctpool/{n}", 16 * MiB, sparse=True, properties={})
    return FakeLio.linked_to(zfs), ["/dev/zvol/ctpool/l0", "/dev/zvol/ctpool/l1"]


def test_lio_available(lio_env: tuple[FakeLio, list[str]]) -> None:
    lio_checks.check_available(lio_env[0])


def test_lio_apply_read_back(lio_env: tuple[FakeLio, list[str]]) -> None:
    lio_checks.check_apply_read_back(*lio_env)


def test_lio_errors(lio_env: tuple[FakeLio, list[str]]) -> None:
    lio_checks.check_errors(*lio_env, "/dev/zvol/ctpool/missing")


def test_lio_run_all(lio_env: tuple[FakeLio, list[str]]) -> None:
    lio, devices = lio_env
    assert lio_checks.run_all(lio, devices, "/dev/zvol/ctpool/nope") == [
        "available", "apply_read_back", "errors"]
    assert lio.list_targets() == [] and lio.list_backstores() == []


def test_lio_down_is_unavailable(lio_env: tuple[FakeLio, list[str]]) -> None:
    lio = lio_env[0]
    lio.down = True
    assert lio.available() is False
    with pytest.raises(Unavailable):
        lio.list_targets()


def test_runner_without_zfs_fails_cleanly(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m appliance.host.contract` on a host without ZFS: one failed check,
    exit status 1, and its sparse files are gone again."""
    from appliance.host.contract.__main__ import main

    monkeypatch.setenv("PATH", str(tmp_path))  # no zpool/zfs to be found
    workdir = tmp_path / "ct"
    assert main(["--workdir", str(workdir), "--file-size", str(64 * MiB), "--json"]) == 1
    out = capsys.readouterr().out
    assert "FAIL zfs.available" in out and '"failed": 1' in out
    assert list(workdir.iterdir()) == []


def test_fakes_and_real_adapters_satisfy_the_protocols() -> None:
    """mypy checks these assignments structurally; at run time they must construct."""
    from appliance.host.lio import Lio, LioHost
    from appliance.host.run import RecordingRunner
    from appliance.host.zfs import Zfs, ZfsHost

    hosts: list[ZfsHost] = [FakeZfs(), Zfs(RecordingRunner())]
    lios: list[LioHost] = [FakeLio(), Lio()]
    assert len(hosts) == len(lios) == 2


# --- replication: zfs send/receive, holds, bookmarks (fakes.replication) ---------------

@pytest.fixture
def send_env() -> tuple[FakeZfs, FakeZfsSend]:
    fake = FakeZfs(disks={DISKS[3]: 512 * MiB, DISKS[2]: 64 * MiB})
    fake.create_pool("ctpool", PoolLayout(data=(VdevSpec("disk", (DISKS[3],)),)), {}, {})
    fake.create_pool("cttiny", PoolLayout(data=(VdevSpec("disk", (DISKS[2],)),)), {}, {})
    return fake, FakeZfsSend(fake, FakeSsh(fake))


def fake_writer(fake: FakeZfs) -> zfs_send_checks.Write:
    def write(dataset: str, nbytes: int) -> None:
        info = fake.get_dataset(dataset, ("referenced",))
        assert info is not None
        fake.write(dataset, info.int_prop("referenced") + nbytes, changed=nbytes)
    return write


def test_send_cursor(send_env: tuple[FakeZfs, FakeZfsSend]) -> None:
    zfs_send_checks.check_cursor(send_env[0], send_env[1], "ctpool")


def test_send_streams(send_env: tuple[FakeZfs, FakeZfsSend]) -> None:
    fake, zsend = send_env
    zfs_send_checks.check_streams(fake, zsend, "ctpool", fake_writer(fake))


def test_send_full_target(send_env: tuple[FakeZfs, FakeZfsSend]) -> None:
    fake, zsend = send_env
    zfs_send_checks.check_full_target(fake, zsend, "ctpool", "cttiny", fake_writer(fake))


def test_send_run_all_cleans_up(send_env: tuple[FakeZfs, FakeZfsSend]) -> None:
    fake, zsend = send_env
    assert zfs_send_checks.run_all(fake, zsend, "ctpool", "cttiny", fake_writer(fake)) == [
        "cursor", "streams", "full_target"]
    assert sorted(fake.iter_names()) == ["ctpool", "cttiny"]


@pytest.fixture
def nvmet_env() -> tuple[FakeNvmet, list[str]]:
    zfs = FakeZfs(disks={DISKS[0]: 1024 * MiB})
    zfs.create_pool("ctpool", PoolLayout(data=(VdevSpec("disk", (DISKS[0],)),)), {}, {})
    for n in ("n0", "n1"):
        zfs.create_volume(f"ctpool/{n}", 16 * MiB, sparse=True, properties={})
    return FakeNvmet.linked_to(zfs), ["/dev/zvol/ctpool/n0", "/dev/zvol/ctpool/n1"]


def test_nvmet_run_all(nvmet_env: tuple[FakeNvmet, list[str]]) -> None:
    nvmet, devices = nvmet_env
    assert nvmet_checks.run_all(nvmet, devices, "/dev/zvol/ctpool/nope") == [
        "available", "port", "apply_read_back", "errors"]
    assert nvmet.list_subsystems() == [], "checks clean up after themselves"


def test_nvmet_down_is_unavailable(nvmet_env: tuple[FakeNvmet, list[str]]) -> None:
    nvmet = nvmet_env[0]
    nvmet.down = True
    assert nvmet.available() is False
    with pytest.raises(Unavailable):
        nvmet.list_subsystems()
