"""The HA rounds' pure parts (tests/e2e/harounds.py): what a writer's acknowledgements,
read-back and output say about a takeover, and where each round writes."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from tests.e2e import habed as H
from tests.e2e import harounds as R

T0 = 1764139200.0


def records(numbers: list[int]) -> bytes:
    """An NFS records file holding ``numbers`` at their places (zeros elsewhere)."""
    data = bytearray(H.RECORD * (max(numbers, default=0) + 1))
    for i in numbers:
        data[i * H.RECORD:(i + 1) * H.RECORD] = H.record(i)
    return bytes(data)


def test_writes_through_splits_at_the_event_and_finds_the_pause_and_the_lost() -> None:
    acked = [(1, T0 + 1), (2, T0 + 2), (3, T0 + 3.5), (4, T0 + 130.0), (5, T0 + 131)]
    w = R.writes_through(acked, T0 + 4, records([1, 2, 3, 4, 5]), H.RECORD)
    assert (w.before, w.after) == (3, 2)
    assert w.first_after == 126.0  # the first write that returned after the kill
    assert w.longest_wait == 126.5  # record 3 -> record 4
    assert w.lost == () and w.errors == ()
    # record 4 was acknowledged but the file does not hold it
    w = R.writes_through(acked, T0 + 4, records([1, 2, 3, 5]), H.RECORD)
    assert w.lost == (4,)


def test_writes_through_with_nothing_after_the_event() -> None:
    w = R.writes_through([(1, T0 + 1)], T0 + 4, records([1]), H.RECORD)
    assert (w.before, w.after, w.first_after) == (1, 0, None)
    assert R.writes_through([], T0, b"", H.RECORD).longest_wait == 0.0


def test_a_writer_whose_writes_fail_says_so_and_one_that_works_says_nothing(
        tmp_path: Path) -> None:
    """The writers run by bash here: the NFS one on a file in a missing directory (every
    write fails), the LUN one on a file. Their output is what writes_through() counts as
    errors: dd's messages for the failing one, nothing at all for the other."""
    lun = tmp_path / "lun"
    lun.write_bytes(b"\0" * H.LUN_BLOCK)
    missing = tmp_path / "gone" / "records"
    subprocess.run(["bash", "-c", H.writers_script(str(missing), str(lun), str(tmp_path))],
                   check=True, timeout=30)
    time.sleep(2.5)
    subprocess.run(["bash", "-c", H.stop_writers_script(30, str(tmp_path))], check=True,
                   timeout=60)
    acked = {k: H.parse_acked((tmp_path / f"acked-{k}").read_text())
             if (tmp_path / f"acked-{k}").exists() else [] for k in ("nfs", "lun")}
    logs = {k: (tmp_path / f"writer-{k}.log").read_text() for k in ("nfs", "lun")}
    nfs = R.writes_through(acked["nfs"], T0, b"", H.RECORD, log=logs["nfs"])
    lun_w = R.writes_through(acked["lun"], T0,
                             lun.read_bytes()[H.RECORDS_AT_BLOCK * H.LUN_BLOCK:],
                             H.LUN_BLOCK, log=logs["lun"])
    assert nfs.after == 0 and len(nfs.errors) >= 2, nfs
    assert all("dd:" in e for e in nfs.errors), nfs.errors
    assert lun_w.after >= 2 and lun_w.errors == () and lun_w.lost == (), lun_w


def test_each_round_writes_a_new_records_file() -> None:
    s = R.Served(nfs=("hanfs",), lun=("halun",), dev="/dev/sdx")
    s.rounds = 1
    first = s.records_file()
    s.rounds = 2
    assert first == f"{R.MOUNT}/records" and s.records_file() == f"{R.MOUNT}/records-2"


def takeover(nfs_first: float | None, lun_first: float | None,
             lost: tuple[int, ...] = ()) -> R.Takeover:
    return R.Takeover(
        kind="unplanned", source="ha-a", target="ha-b", group_on_target=120.0,
        writes={"nfs": R.Writes(3, 2, nfs_first, 1.0, lost),
                "lun": R.Writes(3, 2, lun_first, 1.0, ())},
        identities={}, drift_in_sync=True, last_takeover=None)


def test_first_io_is_when_both_protocols_wrote_again() -> None:
    assert takeover(120.5, 126.0).first_io() == 126.0
    assert takeover(120.5, None).first_io() is None
    assert takeover(1.0, 2.0, lost=(4, 9)).lost() == 2
