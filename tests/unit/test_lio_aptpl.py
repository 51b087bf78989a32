"""A LUN's persistent reservations (APTPL) kept on its pool (appliance/host/lio.py): the
link under LIO's dbroot that the kernel writes through and rtslib reads back, so a
pool taken over brings its initiators' registrations along (docs/ha.md)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from appliance.host.lio import APTPL_DIR, AptplHomes, LunSpec, keep_aptpl_in, parse_zfs_mounts
from appliance.model import DatastoreRecord, DatastoreSpec
from appliance.transports.iscsi import target_spec

MOUNTS = """\
/dev/vda1 / ext4 rw,relatime,errors=remount-ro 0 0
hapool /hapool zfs rw,noatime,xattr,posixacl,casesensitive 0 0
hapool/datastores /hapool/datastores zfs rw,noatime,xattr,posixacl,casesensitive 0 0
tank/my\\040data /srv/my\\040data zfs rw,noatime 0 0
"""
REGISTRATION = "PR_REG_START: 0\ninitiator_node=iqn.1991-05.com.microsoft:w1\nsa_res_key=195\n"


def test_zfs_mounts_are_read_from_the_kernels_table() -> None:
    assert parse_zfs_mounts(MOUNTS) == {"hapool": "/hapool",
                                        "hapool/datastores": "/hapool/datastores",
                                        "tank/my data": "/srv/my data"}


def test_the_dbroot_file_becomes_a_link_into_the_pool_and_moves_there(tmp_path: Path) -> None:
    dbroot, home = tmp_path / "dbroot", tmp_path / "pool" / APTPL_DIR
    (dbroot / "pr").mkdir(parents=True)
    kept = dbroot / "pr" / "aptpl_serial1"
    kept.write_text(REGISTRATION)  # kept on this node's disk before

    assert keep_aptpl_in(str(dbroot), "serial1", str(home)) is True
    assert os.readlink(kept) == str(home / "aptpl_serial1")
    assert (home / "aptpl_serial1").read_text() == REGISTRATION  # moved, not lost
    assert kept.read_text() == REGISTRATION  # what rtslib reads, through the link
    assert keep_aptpl_in(str(dbroot), "serial1", str(home)) is False  # nothing to do

    kept.write_text("PR_REG_START: 0\nsa_res_key=7\n")  # the kernel writes through it
    assert "sa_res_key=7" in (home / "aptpl_serial1").read_text()


def test_after_a_takeover_the_pools_file_wins_over_a_stale_local_one(tmp_path: Path) -> None:
    dbroot, home = tmp_path / "dbroot", tmp_path / "pool" / APTPL_DIR
    (dbroot / "pr").mkdir(parents=True)
    home.mkdir(parents=True)
    (home / "aptpl_s2").write_text(REGISTRATION)
    (dbroot / "pr" / "aptpl_s2").write_text("PR_REG_START: 0\nsa_res_key=1\n")  # old
    keep_aptpl_in(str(dbroot), "s2", str(home))
    assert (dbroot / "pr" / "aptpl_s2").read_text() == REGISTRATION
    # a link to somewhere else (another mount of the pool) is pointed here again
    os.unlink(dbroot / "pr" / "aptpl_s2")
    os.symlink("/elsewhere/aptpl_s2", dbroot / "pr" / "aptpl_s2")
    assert keep_aptpl_in(str(dbroot), "s2", str(home)) is True
    assert (dbroot / "pr" / "aptpl_s2").read_text() == REGISTRATION


def test_a_lun_whose_file_system_is_not_mounted_keeps_lios_default(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    dbroot = tmp_path / "dbroot"
    (dbroot / "pr").mkdir(parents=True)
    pool = tmp_path / "mnt"
    mounts = tmp_path / "mounts"
    mounts.write_text(f"hapool/datastores {pool} zfs rw 0 0\n")
    homes = AptplHomes(str(dbroot), str(mounts))
    homes.place(LunSpec("zds-lun1", "/dev/zvol/hapool/datastores/lun1", "s1",
                        pr_dataset="hapool/datastores"))
    assert os.readlink(dbroot / "pr" / "aptpl_s1") == str(pool / APTPL_DIR / "aptpl_s1")
    homes.place(LunSpec("zds-lun2", "/dev/zvol/tank/datastores/lun2", "s2",
                        pr_dataset="tank/datastores"))
    assert not os.path.lexists(dbroot / "pr" / "aptpl_s2")
    assert "tank/datastores is not mounted" in caplog.text
    homes.place(LunSpec("probe-p1", "/dev/zvol/hapool/zds-probes/x", "s3"))  # no home
    assert not os.path.lexists(dbroot / "pr" / "aptpl_s3")
    AptplHomes(None, str(mounts)).place(LunSpec("zds-lun4", "/dev/x", "s4",
                                                pr_dataset="hapool/datastores"))
    assert not (pool / APTPL_DIR / "aptpl_s4").exists()


def test_an_iscsi_datastore_keeps_its_reservations_in_its_pools_datastores() -> None:
    rec = DatastoreRecord(spec=DatastoreSpec(name="lun1", pool="hapool", protocol="iscsi",
                                             size=1 << 30),
                          state="ready", iqn="iqn.2026-11.org.zds:lun1", serial="abc123")
    spec = target_spec(rec, "/dev/zvol/hapool/datastores/lun1", {}, ("0.0.0.0", 3260))
    assert [lun.pr_dataset for lun in spec.luns] == ["hapool/datastores"]
