"""The next step of a replication run, from what the source and the target have: pure,
so every case (new target, resume, incremental from a snapshot or a bookmark, up to date,
diverged) is unit-tested without ZFS.

The source's snapshots are matched with the target's by guid (a received snapshot keeps
its guid; names may repeat with other data). The newest snapshot both have is the base.

A resume token comes from the target: it is resumed only when what it names (read by
``ZfsSendHost.resume_info``) is a snapshot of the replicated dataset, from one of its
snapshots or bookmarks; otherwise :class:`StaleResume`, and the run drops the partial
receive and sends again, so a target cannot make the source send another dataset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from appliance.errors import NotFound
from appliance.host.zfs_send import (
    Diverged,
    ResumeToken,
    SendSpec,
    SnapRef,
    StaleResume,
    TargetState,
)

StepKind = Literal["resume", "full", "incremental", "up_to_date"]


@dataclass(frozen=True)
class Step:
    kind: StepKind
    send: SendSpec | None
    reason: str


def plan(dataset: str, source: Sequence[SnapRef], bookmarks: Sequence[SnapRef],
         target: TargetState, raw: bool = False, resume: ResumeToken | None = None) -> Step:
    """What to send next to bring ``target`` up to ``source``'s newest snapshot.
    ``resume``: what the target's resume token names (required to resume one).

    Raises :class:`Diverged` when the target cannot take a stream from this source
    without losing something of its own, :class:`StaleResume` for a resume token that
    is not this dataset's, and NotFound when there is nothing to send."""
    if target.resume_token:
        check_resume(dataset, source, bookmarks, target, resume)
        return Step("resume", SendSpec(resume_token=target.resume_token, raw=raw),
                    f"{target.dataset} holds an interrupted receive: resume it")
    if not source:
        raise NotFound(f"{dataset} has no snapshot to replicate yet")
    newest = source[-1]
    if not target.exists:
        oldest = source[0]
        return Step("full", SendSpec(snapshot=oldest.name, raw=raw),
                    f"{target.dataset} does not exist: full stream of {oldest.short}"
                    + (f", then {newest.short}" if oldest is not newest else ""))
    if not target.snapshots:
        raise Diverged(f"{target.dataset} exists on the target but holds no snapshot: it is "
                       "not a replica of this datastore (choose another target dataset, or "
                       "destroy it there)", detail={"target": target.dataset})
    by_guid = {s.guid: s for s in source}
    marks = {b.guid: b for b in bookmarks}
    common_at = next((i for i in range(len(target.snapshots) - 1, -1, -1)
                      if target.snapshots[i].guid in by_guid
                      or target.snapshots[i].guid in marks), None)
    if common_at is None:
        raise Diverged(f"{target.dataset} shares no snapshot with {dataset}: it is not a "
                       "replica of it, or every snapshot it holds was destroyed here "
                       "(destroy the target dataset to start over with a full stream)",
                       detail={"target": target.dataset,
                               "target_snapshots": [s.short for s in target.snapshots]})
    rogue = [s.short for s in target.snapshots[common_at + 1:]]
    if rogue:
        raise Diverged(f"{target.dataset} has snapshots this source never sent "
                       f"({', '.join(rogue)}): the target changed behind our back. Destroy "
                       "them on the target (or the target dataset) to go on; nothing was "
                       "sent", detail={"target": target.dataset, "snapshots": rogue})
    if target.written > 0:
        raise Diverged(f"{target.dataset} was modified on the target since its newest "
                       f"snapshot ({target.written} bytes written): roll it back there "
                       "(zfs rollback) to go on; nothing was sent",
                       detail={"target": target.dataset, "written": target.written})
    common = target.snapshots[common_at]
    if common.guid == newest.guid:
        return Step("up_to_date", None, f"{target.dataset} holds {newest.short}")
    base = by_guid.get(common.guid)
    if base is not None:
        if base.createtxg > newest.createtxg:  # cannot happen with guids from one dataset
            raise Diverged(f"{target.dataset} is ahead of {dataset}")
        return Step("incremental", SendSpec(snapshot=newest.name, base=base.name, raw=raw),
                    f"incremental {base.short} -> {newest.short}")
    mark = marks[common.guid]
    if mark.createtxg >= newest.createtxg:
        return Step("up_to_date", None, f"{target.dataset} holds {common.short}, newer than "
                                        f"every snapshot of {dataset}")
    return Step("incremental", SendSpec(snapshot=newest.name, base=mark.name, raw=raw),
                f"incremental from bookmark {mark.short} -> {newest.short} (the snapshot "
                "it marks was pruned here)")


def check_resume(dataset: str, source: Sequence[SnapRef], bookmarks: Sequence[SnapRef],
                 target: TargetState, resume: ResumeToken | None) -> None:
    """Refuses (:class:`StaleResume`) a resume token whose snapshot is not one of
    ``dataset``'s ``source`` snapshots (by name and guid: zfs looks the guid up near the
    name, siblings included), or whose base is not one of its snapshots or bookmarks."""
    if resume is None:
        raise StaleResume(f"{target.dataset} holds an interrupted receive whose token was "
                          "not read here: not resumed", detail={"target": target.dataset})
    ours = {s.guid: s for s in source}
    to = ours.get(resume.toguid)
    if resume.dataset != dataset or (to is not None and to.name != resume.toname):
        raise StaleResume(
            f"the resume token of {target.dataset} names {resume.toname[:200]!r} (guid "
            f"{resume.toguid:x}), which is no snapshot of {dataset}: not resumed. A "
            "partial receive of another stream (or a target that was tampered with)",
            detail={"target": target.dataset, "toname": resume.toname[:200]})
    if to is None:  # this dataset's, but that snapshot was destroyed since (or never was)
        raise StaleResume(
            f"the resume token of {target.dataset} resumes {resume.toname}, which "
            f"{dataset} no longer has (guid {resume.toguid:x}): not resumed",
            detail={"target": target.dataset, "toname": resume.toname})
    if resume.fromguid and resume.fromguid not in ours and all(
            b.guid != resume.fromguid for b in bookmarks):
        raise StaleResume(
            f"the resume token of {target.dataset} sends {resume.toname} from guid "
            f"{resume.fromguid:x}, which is no snapshot or bookmark of {dataset} (any "
            "more): not resumed", detail={"target": target.dataset,
                                          "toname": resume.toname})
