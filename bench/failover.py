"""Failover rounds on the HA bed: how long clients wait when a node dies, and whether any
acknowledged write is lost (issue 21; docs/ha.md).

    flock /tmp/zds-vm.lock python -m bench.failover [--rounds 5] [--no-planned] [--json F]

Boots the HA bed of the e2e suite (tests/e2e/habed.py: two ZDS nodes in a pacemaker pair
with fence_scsi, a third guest serving their shared disks and acting as the client), or
restores it configured as an e2e run saved it. Through the active node's API it makes an
NFSv3 datastore and an iSCSI LUN; the client mounts the export (hard) and logs in to the
LUN through the service address. Then, ``--rounds`` times, alternating nodes
(tests/e2e/harounds.py does each round the way the e2e module does its one):

  kill     the client writes numbered records to a file on the mount (dd conv=fsync) and
           to the LUN (O_DIRECT|O_DSYNC); the active node's QEMU is killed (-9); the
           survivor detects it, fences it (fence_scsi), imports the pool (MMP activity
           check), serves the datastores, brings the address up
  read     every record the client was told is stable is read back from the survivor
  rejoin   the killed node boots again and rejoins as standby (its key back on the LUNs)

and then one planned switchover (``POST /cluster/failover``) with the writers running.
Each row gives, in seconds after the kill (the survivor's journal, on the host's clock):
the new membership (detection), fencing done, the pool's import (the agent's own timing,
with ZFS's MMP ``import_delay``), the group running, and the first NFS and the first
iSCSI write the client had acknowledged after the kill; then acknowledged records and
how many were lost. The targets (issue 21, under TCG): first NFS and iSCSI I/O after an
unplanned failover <= 90 s median, planned <= 45 s, 0 lost in every round.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from tests.e2e.harounds import Rejoin, Takeover

UNPLANNED_TARGET_S = 90.0
PLANNED_TARGET_S = 45.0


def median(values: list[float | None]) -> float | None:
    """The median of the values measured (None: none was)."""
    got = [v for v in values if v is not None]
    return round(statistics.median(got), 1) if got else None


def _fmt(v: float | int | None) -> str:
    return "-" if v is None else f"{v:.1f}" if isinstance(v, float) else str(v)


def row(n: int | str, t: Takeover, rejoined: Rejoin | None) -> list[str]:
    """One table row from a harounds.Takeover (and the Rejoin that followed it)."""
    tl = t.timeline
    took = (t.last_takeover or {}).get("seconds") or {}
    nfs, lun = t.writes.get("nfs"), t.writes.get("lun")
    acked = sum(w.before + w.after for w in t.writes.values())
    errors = sum(len(w.errors) for w in t.writes.values())
    return [str(n), t.kind, f"{t.source}->{t.target}",
            _fmt(tl.membership if tl else None), _fmt(tl.fenced if tl else None),
            _fmt(took.get("import")),
            _fmt(round(t.import_delay_ns / 1e9, 1) if t.import_delay_ns else None),
            _fmt(took.get("serve")), _fmt(t.group_on_target),
            _fmt(nfs.first_after if nfs else None), _fmt(lun.first_after if lun else None),
            _fmt(max((w.longest_wait for w in t.writes.values()), default=None)),
            str(acked), str(t.lost()), str(errors),
            _fmt(rejoined.online if rejoined else None)]


HEADER = ["round", "kind", "move", "detected", "fenced", "import", "MMP wait", "serve",
          "group up", "1st NFS write", "1st iSCSI write", "longest wait", "acked",
          "lost", "write errors", "rejoined"]


def table(rows: list[list[str]]) -> str:
    """A Markdown table (what docs/performance.md keeps)."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def verdict(unplanned: list[Takeover], planned: list[Takeover]) -> list[str]:
    """The medians against the issue's targets, and the invariants of every round."""
    out = []
    for name, rounds, target, what in (
            ("unplanned", unplanned, UNPLANNED_TARGET_S,
             "first NFS and iSCSI write after the kill"),
            ("planned", planned, PLANNED_TARGET_S, "the client's longest wait for a write")):
        if not rounds:
            continue
        # a planned move: the writes go on until the release, so the pause is the cost
        got = [t.first_io() if name == "unplanned" else t.pause() for t in rounds]
        m = median(got)
        met = m is not None and m <= target and None not in got
        out.append(f"{name}: {what}, median {_fmt(m)} s over {len(rounds)} rounds "
                   f"(target <= {target:.0f} s: {'met' if met else 'MISSED'}); per round "
                   f"{[_fmt(f) for f in got]}")
    lost = sum(t.lost() for t in unplanned + planned)
    out.append(f"acknowledged records lost: {lost} in {len(unplanned) + len(planned)} rounds "
               f"(target 0: {'met' if lost == 0 else 'MISSED'})")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5, help="unplanned rounds (kill -9)")
    ap.add_argument("--no-planned", action="store_true", help="skip the planned switchover")
    ap.add_argument("--json", help="also write every round's figures to this file")
    args = ap.parse_args(argv)

    from images import build
    from tests.e2e.habed import CLUSTER, NODES, ha_bed
    from tests.e2e.habed import fence_scsi_key as key
    from tests.e2e.harounds import kill_round, planned_round, rejoin, serve

    keys = {key(CLUSTER, n.name) for n in NODES}
    started = datetime.now(UTC)
    rows: list[list[str]] = []
    unplanned: list[Takeover] = []
    planned: list[Takeover] = []
    rejoins: list[Rejoin] = []
    failure = ""
    t0 = time.monotonic()
    with ha_bed(build.build()) as bed:
        print(f"[bench] HA bed up in {time.monotonic() - t0:.0f} s: {bed.timings}",
              flush=True)
        try:
            served = serve(bed, bed.active())
            for n in range(1, args.rounds + 1):
                t = kill_round(bed, served)
                unplanned.append(t)
                # fenced: only the survivor's key is left on every LUN (sg_persist)
                left = bed.keys(t.target)
                if any(k != [key(CLUSTER, t.target)] for k in left.values()):
                    failure = f"round {n}: keys left after fencing {t.source}: {left}"
                    break
                r = rejoin(bed, keys)
                rejoins.append(r)
                rows.append(row(n, t, r))
                print(f"[bench] {rows[-1]}", flush=True)
                if r.imported_on_its_own:
                    failure = f"{r.node} imported the pool on its own after it rejoined"
                    break
            if not args.no_planned and not failure:
                t = planned_round(bed, served)
                planned.append(t)
                rows.append(row("p", t, None))
                print(f"[bench] {rows[-1]}", flush=True)
        except (AssertionError, OSError) as e:  # the bed's checks and guest commands
            failure = f"round {len(unplanned) + len(planned) + 1} failed: {e}"
    took = time.monotonic() - t0
    print(f"\nFailover on the HA bed, {started:%Y-%m-%d %H:%M} UTC, {took / 60:.0f} min "
          "(seconds after the kill, or after the failover was asked):\n")
    print(table(rows))
    print()
    for line in verdict(unplanned, planned):
        print(line)
    if failure:
        print(f"\nFAILED: {failure}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "started": started.isoformat(), "seconds": round(took),
            "unplanned": [dataclasses.asdict(t) for t in unplanned],
            "planned": [dataclasses.asdict(t) for t in planned],
            "rejoins": [dataclasses.asdict(r) for r in rejoins],
            "failure": failure}, indent=1, default=str) + "\n")
    lost = sum(t.lost() for t in unplanned + planned)
    return 1 if failure or lost else 0


if __name__ == "__main__":
    sys.exit(main())
