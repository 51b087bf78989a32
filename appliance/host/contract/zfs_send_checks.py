"""Contract checks for :class:`appliance.host.zfs_send.ZfsSendHost` (real ``ZfsSend`` and
``FakeZfsSend``): holds and bookmarks, full/incremental/bookmark streams, the refusals of
a diverged target, an interrupted receive resumed with its token (and the token read
without sending: what it names), a stale token, the errors of a full target pool, and
the promote primitives (rename, mount).

The target is "this machine" (``Endpoint(None)``): the same commands a remote target
runs, without SSH (whose own errors are checked by ``ssh_checks`` and the e2e tests).
``write(dataset, nbytes)`` puts ``nbytes`` of incompressible data into a filesystem
(the real runner writes a file of random bytes into its mountpoint).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from appliance.errors import Conflict, InsufficientSpace, InvalidInput, NotFound
from appliance.host.contract import expect
from appliance.host.ssh import Endpoint
from appliance.host.zfs import ZfsHost
from appliance.host.zfs_send import (
    Diverged,
    PartialReceive,
    ReceiveSpec,
    ResumeToken,
    SendSpec,
    StaleResume,
    TransferCancelled,
    ZfsSendHost,
)

MiB = 1 << 20
SCRATCH = "zds-ct-send"
TAG = "zds-ct:hold"
HERE = Endpoint(None)
Write = Callable[[str, int], None]


def _scratch(zfs: ZfsHost, pool: str) -> str:
    root = f"{pool}/{SCRATCH}"
    if zfs.get_dataset(root) is not None:
        zfs.destroy(root, recursive=True)
    zfs.create_filesystem(root, {})
    return root


def _guids(zfs: ZfsHost, dataset: str) -> list[tuple[str, str]]:
    return [(s.name.split("@")[1], s.prop("guid")) for s in zfs.list_snapshots(dataset)]


def _guid(zfs: ZfsHost, snapshot: str) -> int:
    info = zfs.get_dataset(snapshot, ("guid",))
    assert info is not None, snapshot
    return int(info.prop("guid"))


def _cut(zsend: ZfsSendHost, send: SendSpec, receive: ReceiveSpec, after: int) -> int:
    """Cancels ``send`` once more than ``after`` bytes went; returns how many went."""
    cancel = threading.Event()
    seen = [0]

    def progress(n: int) -> None:
        seen[0] = n
        if n > after:
            cancel.set()

    expect(TransferCancelled, zsend.transfer, send, HERE, receive, rate_limit=2 * MiB,
           progress=progress, cancel=cancel)
    return seen[0]


def check_cursor(zfs: ZfsHost, zsend: ZfsSendHost, pool: str) -> None:
    """The cursor: a hold (ZfsHost's, as replication takes it) blocks destroy, and
    bookmarks carry their snapshot's guid."""
    root = _scratch(zfs, pool)
    try:
        ds = f"{root}/src"
        zfs.create_filesystem(ds, {})
        zfs.snapshot(ds, "s1")
        zfs.snapshot(ds, "s2")
        s1, s2 = f"{ds}@s1", f"{ds}@s2"
        zfs.hold(TAG, [s1])
        assert zfs.holds([s1, s2]) == {s1: [TAG], s2: []}, zfs.holds([s1, s2])
        expect(Conflict, zfs.destroy, s1)
        expect(Conflict, zfs.destroy, ds, recursive=True)
        assert len(zfs.list_snapshots(ds)) == 2
        zfs.release(TAG, [s1])
        assert zfs.holds([s1, s2]) == {s1: [], s2: []}

        zsend.bookmark(s2, f"{ds}#b2")
        marks = zsend.bookmarks(ds)
        snap2 = zfs.get_dataset(s2)
        assert snap2 is not None
        assert [(m.name, m.guid) for m in marks] == [(f"{ds}#b2", int(snap2.prop("guid")))]
        assert marks[0].short == "b2" and marks[0].createtxg == snap2.int_prop("createtxg")
        expect(Conflict, zsend.bookmark, s2, f"{ds}#b2")
        expect(NotFound, zsend.bookmark, f"{ds}@nope", f"{ds}#b3")
        zfs.destroy(s2)  # a bookmark outlives its snapshot
        assert [m.name for m in zsend.bookmarks(ds)] == [f"{ds}#b2"]
        zsend.destroy_bookmark(f"{ds}#b2")
        zsend.destroy_bookmark(f"{ds}#b2")  # gone already: fine
        assert zsend.bookmarks(ds) == []
        expect(NotFound, zsend.bookmarks, f"{root}/nope")
    finally:
        zfs.destroy(root, recursive=True)


def check_streams(zfs: ZfsHost, zsend: ZfsSendHost, pool: str, write: Write) -> None:
    """Full, -I, -i #bookmark, up to date; the diverged refusals; resume and stale
    tokens; rename and mount of a received filesystem."""
    root = _scratch(zfs, pool)
    try:
        src, dst = f"{root}/src", f"{root}/rx/dst"
        zfs.create_filesystem(src, {"compression": "lz4", "zds:name": "ct"})
        recv = ReceiveSpec(dst, {"readonly": "on", "canmount": "noauto",
                                 "zds:replication": "ct"}, ("refreservation", "mountpoint"))
        state = zsend.target_state(HERE, dst)
        assert not state.exists and not state.parent_exists, state
        zsend.ensure_parent(HERE, dst)
        zsend.ensure_parent(HERE, dst)  # idempotent
        state = zsend.target_state(HERE, dst)
        assert not state.exists and state.parent_exists and state.available > 0, state

        write(src, 2 * MiB)
        zfs.snapshot(src, "s1")
        write(src, 1 * MiB)
        zfs.snapshot(src, "s2")
        zfs.snapshot(src, "s3")
        full = SendSpec(snapshot=f"{src}@s1")
        assert zsend.estimate(full) >= 2 * MiB, zsend.estimate(full)
        try:
            zsend.transfer(full, HERE, recv, transport="udp")  # type: ignore[arg-type]
            raise AssertionError("an unknown transport was accepted")
        except InvalidInput:
            pass
        # ssh+tcp to this machine is the plain pipe (no SSH, no gate to hand a port)
        stats = zsend.transfer(full, HERE, recv, transport="ssh+tcp")
        assert stats.bytes >= 2 * MiB, stats
        state = zsend.target_state(HERE, dst)
        assert state.exists and state.type == "filesystem" and state.resume_token is None
        assert state.written == 0, state
        assert [(s.short, s.guid) for s in state.snapshots] == [
            (n, int(g)) for n, g in _guids(zfs, src)[:1]], state
        info = zfs.get_dataset(dst)
        assert info is not None
        assert info.prop("readonly") == "on" and info.prop("canmount") == "noauto"
        assert info.prop("mounted") == "no", info.prop("mounted")
        assert info.prop("zds:replication") == "ct" and info.prop("zds:name") == "ct"
        expect(Diverged, zsend.transfer, full, HERE, recv)  # exists: never overwritten

        incr = SendSpec(snapshot=f"{src}@s3", base=f"{src}@s1")
        assert 1 * MiB <= zsend.estimate(incr) < 2 * MiB, zsend.estimate(incr)
        zsend.transfer(incr, HERE, recv)
        assert _guids(zfs, dst) == _guids(zfs, src), (_guids(zfs, dst), _guids(zfs, src))
        # the same -I package again: zfs receive skips the snapshots the target holds
        zsend.transfer(incr, HERE, recv)
        assert _guids(zfs, dst) == _guids(zfs, src)

        # from a bookmark, once the snapshot it marks is gone on the source
        zsend.bookmark(f"{src}@s3", f"{src}#b3")
        zfs.destroy(f"{src}@s3")
        write(src, 1 * MiB)
        zfs.snapshot(src, "s4")
        zsend.transfer(SendSpec(snapshot=f"{src}@s4", base=f"{src}#b3"), HERE, recv)
        assert [n for n, _ in _guids(zfs, dst)] == ["s1", "s2", "s3", "s4"]

        # data written on the target since the base: refused, nothing changes
        zfs.set_properties(dst, {"readonly": "off"})
        zsend.mount(dst)
        write(dst, 1 * MiB)
        write(src, 1 * MiB)
        zfs.snapshot(src, "s5")
        s5 = SendSpec(snapshot=f"{src}@s5", base=f"{src}@s4")
        expect(Diverged, zsend.transfer, s5, HERE, recv)
        assert zsend.target_state(HERE, dst).written > 0
        assert [n for n, _ in _guids(zfs, dst)] == ["s1", "s2", "s3", "s4"]
        zfs.rollback(f"{dst}@s4")
        zfs.set_properties(dst, {"readonly": "on"})
        # a snapshot the source never sent, with no data changed: zfs still takes the
        # incremental (it looks back for the base); ZDS's planner is stricter and refuses
        zfs.snapshot(dst, "extra")
        zsend.transfer(s5, HERE, recv)
        assert [n for n, _ in _guids(zfs, dst)] == ["s1", "s2", "s3", "s4", "extra", "s5"]
        zfs.destroy(f"{dst}@extra")

        # cut half-way: the target keeps a resumable partial receive
        write(src, 12 * MiB)
        zfs.snapshot(src, "s6")
        s6 = SendSpec(snapshot=f"{src}@s6", base=f"{src}@s5")
        total = zsend.estimate(s6)
        went = _cut(zsend, s6, recv, 1 * MiB)
        assert 0 < went < total, (went, total)
        state = zsend.target_state(HERE, dst)
        assert state.resume_token, state
        assert [s.short for s in state.snapshots][-1] == "s5", state
        # what the token names, read without sending (the source checks it: the token
        # comes from the target)
        named = zsend.resume_info(state.resume_token)
        assert named == ResumeToken(f"{src}@s6", _guid(zfs, f"{src}@s6"),
                                    _guid(zfs, f"{src}@s5")), named
        assert named.dataset == src
        expect(StaleResume, zsend.resume_info, "1-e604ea4bf-e0-789c63")  # corrupt
        expect(StaleResume, zsend.resume_info, "1-abc; zfs destroy -r x")  # not a token
        resume = SendSpec(resume_token=state.resume_token)
        left = zsend.estimate(resume)
        assert 0 < left < total, (left, total)
        expect(PartialReceive, zsend.transfer, s6, HERE, recv)
        stats = zsend.transfer(resume, HERE, recv)
        assert stats.bytes < total, (stats, total)
        state = zsend.target_state(HERE, dst)
        assert state.resume_token is None and state.snapshots[-1].short == "s6", state

        # a token whose source snapshot is gone cannot resume; abort drops the partial
        write(src, 12 * MiB)
        zfs.snapshot(src, "s7")
        _cut(zsend, SendSpec(snapshot=f"{src}@s7", base=f"{src}@s6"), recv, 1 * MiB)
        token = zsend.target_state(HERE, dst).resume_token
        assert token
        s7 = ResumeToken(f"{src}@s7", _guid(zfs, f"{src}@s7"), _guid(zfs, f"{src}@s6"))
        zfs.destroy(f"{src}@s7")
        assert zsend.resume_info(token) == s7  # read even when its snapshot is gone
        expect(StaleResume, zsend.transfer, SendSpec(resume_token=token), HERE, recv)
        zsend.abort_partial(HERE, dst)
        zsend.abort_partial(HERE, dst)  # nothing to abort: fine
        state = zsend.target_state(HERE, dst)
        assert state.resume_token is None and state.snapshots[-1].short == "s6", state

        # an interrupted full receive: the new dataset holds the partial state
        dst2 = f"{root}/rx/dst2"
        recv2 = ReceiveSpec(dst2, {"readonly": "on"}, ())
        _cut(zsend, SendSpec(snapshot=f"{src}@s6"), recv2, 1 * MiB)
        state = zsend.target_state(HERE, dst2)
        assert state.exists and state.resume_token and not state.snapshots, state
        assert zsend.resume_info(state.resume_token) == ResumeToken(
            f"{src}@s6", _guid(zfs, f"{src}@s6"), 0)  # a full stream: no fromguid
        expect(Diverged, zsend.transfer, SendSpec(snapshot=f"{src}@s6"), HERE, recv2)
        zsend.abort_partial(HERE, dst2)
        assert not zsend.target_state(HERE, dst2).exists

        # promote primitives
        moved = f"{root}/served/dst"
        zsend.rename(dst, moved)
        assert zfs.get_dataset(dst) is None and zfs.get_dataset(moved) is not None
        expect(NotFound, zsend.rename, dst, f"{root}/served/again")
        zfs.set_properties(moved, {"readonly": "off", "canmount": "on"})
        zsend.mount(moved)
        zsend.mount(moved)  # mounted already: fine
        info = zfs.get_dataset(moved)
        assert info is not None
        assert info.prop("mounted") == "yes", info.prop("mounted")
    finally:
        zfs.destroy(root, recursive=True)


def check_full_target(zfs: ZfsHost, zsend: ZfsSendHost, pool: str, tiny_pool: str,
                      write: Write) -> None:
    """A stream larger than the target pool: InsufficientSpace, the source intact."""
    root = _scratch(zfs, pool)
    try:
        src = f"{root}/big"
        zfs.create_filesystem(src, {})
        write(src, 48 * MiB)
        zfs.snapshot(src, "b1")
        dst = f"{tiny_pool}/{SCRATCH}-big"
        expect(InsufficientSpace, zsend.transfer, SendSpec(snapshot=f"{src}@b1"), HERE,
               ReceiveSpec(dst, {}, ()))
        assert [s.name for s in zfs.list_snapshots(src)] == [f"{src}@b1"]
        zsend.abort_partial(HERE, dst)
        if zfs.get_dataset(dst) is not None:
            zfs.destroy(dst, recursive=True)
    finally:
        zfs.destroy(root, recursive=True)


def run_all(zfs: ZfsHost, zsend: ZfsSendHost, pool: str, tiny_pool: str,
            write: Write) -> list[str]:
    check_cursor(zfs, zsend, pool)
    check_streams(zfs, zsend, pool, write)
    check_full_target(zfs, zsend, pool, tiny_pool, write)
    return ["cursor", "streams", "full_target"]
