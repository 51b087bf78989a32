"""bench/failover.py's report: a row per round from its figures, the medians against the
issue's targets."""

from __future__ import annotations

from bench import failover as F
from tests.e2e.habed import Timeline
from tests.e2e.harounds import Rejoin, Takeover, Writes


def kill(first_nfs: float | None, first_lun: float | None, lost: tuple[int, ...] = (),
         errors: tuple[str, ...] = ()) -> Takeover:
    return Takeover(
        kind="unplanned", source="ha-a", target="ha-b", group_on_target=123.1,
        writes={"nfs": Writes(6, 21, first_nfs, 127.3, lost, errors),
                "lun": Writes(6, 16, first_lun, 126.3, ())},
        identities={}, drift_in_sync=True,
        last_takeover={"seconds": {"import": 78.9, "adopt": 0.5, "serve": 4.9}},
        timeline=Timeline(membership=10.2, fence_requested=12.3, fenced=16.7),
        import_delay_ns=40_100_000_000)


def test_a_row_names_each_step_and_counts_what_was_written_and_lost() -> None:
    r = F.row(1, kill(126.0, 127.5, lost=(7,), errors=("dd: error writing",)),
              Rejoin("ha-a", 200.0, 205.2, 230.0, False))
    assert len(r) == len(F.HEADER)
    cells = dict(zip(F.HEADER, r, strict=True))
    assert cells["move"] == "ha-a->ha-b"
    assert (cells["detected"], cells["fenced"], cells["import"], cells["MMP wait"],
            cells["serve"]) == ("10.2", "16.7", "78.9", "40.1", "4.9")
    assert (cells["1st NFS write"], cells["1st iSCSI write"]) == ("126.0", "127.5")
    assert (cells["acked"], cells["lost"], cells["write errors"]) == ("49", "1", "1")
    assert cells["longest wait"] == "127.3" and cells["rejoined"] == "205.2"
    assert F.table([r]).count("\n") == 2  # header, rule, one row


def test_the_verdict_takes_the_median_of_the_later_protocol_and_counts_losses() -> None:
    rounds = [kill(80.0, 85.0), kill(120.0, 100.0), kill(60.0, 70.0)]
    lines = F.verdict(rounds, [])
    assert "median 85.0 s over 3 rounds" in lines[0] and ": met)" in lines[0], lines
    assert lines[-1].startswith("acknowledged records lost: 0 in 3 rounds"), lines
    # a round where one protocol never wrote again misses the target, whatever the median
    # a planned move is judged by the longest wait (here 127.3 s), not its first write
    lines = F.verdict([kill(80.0, None), *rounds], [kill(10.0, 10.0, lost=(3,))])
    assert "MISSED" in lines[0], lines
    assert "median 127.3 s over 1 rounds" in lines[1] and "MISSED" in lines[1], lines
    assert "lost: 1 in 5 rounds (target 0: MISSED)" in lines[-1], lines
    assert "MISSED" in F.verdict([kill(100.0, 91.0)], [])[0]


def test_median_of_what_was_measured() -> None:
    assert F.median([3.0, None, 1.0, 2.0]) == 2.0
    assert F.median([None]) is None
