"""In-memory twins of :mod:`appliance.host.ssh` and :mod:`appliance.host.zfs_send`.

A :class:`FakeNetwork` joins appliances by (host, port): each has a :class:`FakeSsh`
(its key, pinned host keys, the keys it authorizes) and a FakeZfs. A
:class:`FakeZfsSend` moves snapshots between FakeZfs pools the way ``zfs send | ssh |
zfs receive -s -u`` does: full, ``-I``/``-i`` incrementals, resumable partial receives
with a token, the refusals of a diverged target, a full pool, SSH failures and the
receive gate's prefix. Held to the real adapters by
``appliance.host.contract.zfs_send_checks`` and ``ssh_checks``.

Test helpers: ``FakeSsh.up = False`` (unreachable), ``FakeZfsSend.interrupt_after =
N`` (the next stream is cut after N bytes), ``FakeZfsSend.transfers`` (what was sent),
``FakeZfsSend.streamed`` (every source snapshot a stream carried), ``fake_resume_token``
(a token as a target may present it). Like ``zfs send -t``, a resume sends what its token
names, whatever the target's partial receive is.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from appliance.errors import Conflict, InsufficientSpace, InvalidInput, NotFound
from appliance.host.fakes.zfs import FakeZfs, _Ds, _Snap
from appliance.host.ssh import (
    AuthorizedKey,
    Endpoint,
    gate_refused,
    host_key_changed,
    key_refused,
    public_key,
    unreachable,
)
from appliance.host.zfs_send import (
    TRANSPORTS,
    Diverged,
    PartialReceive,
    Progress,
    ReceiveSpec,
    ResumeToken,
    SendSpec,
    SnapRef,
    StaleResume,
    TargetState,
    TransferCancelled,
    TransferStats,
    Transport,
    interrupted,
)

CHUNK = 1 << 20
# Properties `zfs send -p` carries that a fake dataset may hold locally
_SENT_NATIVE = ("compression", "recordsize", "volblocksize", "volsize", "sync", "logbias",
                "atime", "xattr", "acltype", "refquota", "refreservation", "dnodesize",
                "checksum", "readonly", "canmount", "primarycache", "volmode")


def fake_resume_token(toname: str, toguid: int, fromguid: int = 0, serial: int = 0) -> str:
    """A fake ``receive_resume_token``: like zfs's, it carries what it resumes (zfs packs
    an nvlist; this one the fields in hex) and reads back without any lookup."""
    return f"1-{toguid:x}-{fromguid:x}-{serial:x}-{toname.encode().hex()}"


def fake_key(seed: str, kind: str = "ssh-ed25519") -> str:
    """A well-formed OpenSSH public key ("type base64") derived from ``seed``."""
    name = kind.encode()
    blob = len(name).to_bytes(4, "big") + name + (32).to_bytes(4, "big") + \
        hashlib.sha256(seed.encode()).digest()
    return f"{kind} {base64.b64encode(blob).decode()}"


class FakeNetwork:
    """Appliances reachable by (host, port)."""

    def __init__(self) -> None:
        self.hosts: dict[tuple[str, int], FakeSsh] = {}

    def attach(self, host: str, ssh: FakeSsh, port: int = 22) -> None:
        self.hosts[(host, port)] = ssh
        ssh.network = self


@dataclass
class FakeSsh:
    """One appliance's SSH side; ``zfs`` is what its sshd's commands act on."""

    zfs: FakeZfs
    name: str = "zds-test"
    network: FakeNetwork | None = None
    up: bool = True  # False: connections to it fail like a refused TCP connect
    known: dict[str, list[str]] = field(default_factory=dict)
    entries: list[AuthorizedKey] = field(default_factory=list)
    plain_keys: set[str] = field(default_factory=set)  # unrestricted (not through the gate)
    closed: list[Endpoint] = field(default_factory=list)  # close() calls, for tests
    _key: str | None = None

    def public_key(self) -> str:
        if self._key is None:
            self._key = fake_key(f"user:{self.name}")
        return f"{self._key} zds-replication@{self.name}"

    def host_keys(self) -> list[str]:
        return [fake_key(f"host:{self.name}")]

    def pinned(self, endpoint: Endpoint) -> list[str]:
        return [] if endpoint.host is None else list(self.known.get(
            endpoint.known_hosts_name(), []))

    def pin(self, endpoint: Endpoint, key: str | None) -> None:
        if endpoint.host is None:
            return
        name = endpoint.known_hosts_name()
        if key is None:
            self.known.pop(name, None)
        else:
            self.known[name] = [public_key(key, "host key")]

    def authorized(self) -> list[AuthorizedKey]:
        return list(self.entries)

    def close(self, endpoint: Endpoint) -> None:
        self.closed.append(endpoint)

    def set_authorized(self, entries: Sequence[AuthorizedKey]) -> None:
        for e in entries:
            public_key(e.public_key)
        self.entries = list(entries)

    # -- what ssh does on connect -----------------------------------------------------
    def connect(self, endpoint: Endpoint) -> tuple[FakeSsh, str | None]:
        """The target and the prefix its gate allows (None: unrestricted)."""
        if endpoint.host is None:
            return self, None
        where = endpoint.describe()
        target = self.network.hosts.get((endpoint.host, endpoint.port)) \
            if self.network else None
        if target is None or not target.up:
            raise unreachable(where, f"connect to host {endpoint.host} port "
                                     f"{endpoint.port}: Connection refused")
        presented = target.host_keys()[0]
        pinned = self.pinned(endpoint)
        if pinned and presented not in pinned:
            raise host_key_changed(where, "Host key verification failed.")
        if not pinned:
            self.pin(endpoint, presented)  # accept-new: pinned on first contact
        mine = public_key(self.public_key())
        if endpoint.user == "root":
            for e in target.entries:
                if public_key(e.public_key) == mine:
                    return target, e.prefix
        if mine in target.plain_keys:
            return target, None
        raise key_refused(where, f"{endpoint.user}@{endpoint.host}: Permission denied "
                                 "(publickey).")


@dataclass
class _Partial:
    """A resumable partial receive, as ``receive -s`` keeps it."""

    token: str
    source: str  # the sending dataset
    to_guid: int
    from_guid: int  # 0: a full stream
    done: int
    total: int
    spec: SendSpec
    receive: ReceiveSpec
    full: bool


@dataclass(frozen=True)
class _Stream:
    dataset: _Ds  # the source dataset
    snaps: tuple[_Snap, ...]  # to apply, oldest first
    base_guid: int  # 0: full
    size: int


class FakeZfsSend:
    """:class:`appliance.host.zfs_send.ZfsSendHost` over FakeZfs pools."""

    def __init__(self, zfs: FakeZfs, ssh: FakeSsh) -> None:
        self.zfs = zfs
        self.ssh = ssh
        self.interrupt_after: int | None = None  # one-shot: cut the next stream there
        self.transfers: list[tuple[str, int]] = []  # (SendSpec.describe(), bytes)
        self.transports: list[str] = []  # the transport of each transfer asked for
        self.streamed: list[str] = []  # every source snapshot a transfer put on the wire
        self._tokens = 0
        # called between chunks of a stream: a test may kill the sender there, and the
        # receive then keeps what arrived (zfs receive -s sees the stream end)
        self.on_step: Callable[[str], None] | None = None

    # -- cursor ------------------------------------------------------------------------
    def _snap(self, name: str) -> tuple[_Ds, _Snap]:
        return self.zfs._snap(name)

    def bookmarks(self, dataset: str) -> list[SnapRef]:
        self.zfs._up()
        ds = self.zfs._ds(dataset)
        return [SnapRef(f"{dataset}#{b.name}", b.guid, b.txg, b.created)
                for b in sorted(ds.bookmarks, key=lambda b: b.txg)]

    def bookmark(self, snapshot: str, bookmark: str) -> None:
        self.zfs._up()
        ds, snap = self._snap(snapshot)
        dsname, _, mark = bookmark.partition("#")
        if dsname != ds.name or not mark:
            raise InvalidInput(f"cannot create bookmark '{bookmark}': invalid name")
        if any(b.name == mark for b in ds.bookmarks):
            raise Conflict(f"cannot create bookmark '{bookmark}': bookmark exists")
        ds.bookmarks.append(replace(snap, name=mark, holds={}))

    def destroy_bookmark(self, bookmark: str) -> None:
        if "#" not in bookmark:
            raise InvalidInput(f"{bookmark!r} is not a bookmark")
        with contextlib.suppress(NotFound):
            self.zfs.destroy(bookmark)

    # -- streams -----------------------------------------------------------------------
    def _stream(self, send: SendSpec) -> _Stream:
        assert send.snapshot is not None
        ds, to = self._snap(send.snapshot)
        if not send.base:
            return _Stream(ds, (to,), 0, to.referenced)
        if "#" in send.base:
            dsname, _, mark = send.base.partition("#")
            base = next((b for b in ds.bookmarks if b.name == mark), None) \
                if dsname == ds.name else None
            if base is None:
                raise NotFound(f"cannot open '{send.base}': bookmark does not exist")
        else:
            bds, base = self._snap(send.base)
            if bds is not ds:
                raise InvalidInput(f"incremental source {send.base} is not of {ds.name}")
        if base.txg >= to.txg:
            raise InvalidInput(f"incremental source {send.base} is not earlier than "
                               f"{send.snapshot}")
        between = [s for s in ds.snaps if base.txg < s.txg <= to.txg]
        chosen = between if send.intermediates and "@" in send.base else [to]
        return _Stream(ds, tuple(chosen), base.guid, sum(s.written for s in between) or 1)

    def resume_info(self, token: str) -> ResumeToken:
        parts = token.split("-") if isinstance(token, str) else []
        try:
            SendSpec(resume_token=token).args()
            if len(parts) != 5 or parts[0] != "1":
                raise ValueError(token)
            toname = bytes.fromhex(parts[4]).decode()
            return ResumeToken(toname, int(parts[1], 16), int(parts[2], 16))
        except (ValueError, InvalidInput):
            raise StaleResume("cannot resume send: resume token is corrupt") from None

    def estimate(self, send: SendSpec) -> int:
        self.zfs._up()
        if send.resume_token:
            part = self._find_partial(send.resume_token)
            return part.total - part.done if part else 0
        return self._stream(send).size

    def _target(self, endpoint: Endpoint, dataset: str) -> FakeZfs:
        target, prefix = self.ssh.connect(endpoint)
        base = dataset.split("@", 1)[0]
        if prefix is not None and not (base == prefix or base.startswith(prefix + "/")):
            raise gate_refused(endpoint.describe(), f"{base} is outside {prefix}")
        target.zfs._up()
        return target.zfs

    def target_state(self, endpoint: Endpoint, dataset: str) -> TargetState:
        tz = self._target(endpoint, dataset)
        ds = tz._find(dataset)
        if ds is None:
            parent = tz._find(dataset.rsplit("/", 1)[0]) if "/" in dataset else None
            if parent is None:
                return TargetState(dataset, False, parent_exists=False)
            info = tz.get_dataset(parent.name, ("available",))
            return TargetState(dataset, False, parent_exists=True,
                               available=info.int_prop("available") if info else 0)
        info = tz.get_dataset(dataset, ("available", "written"))
        assert info is not None
        token = ds.partial.token if isinstance(ds.partial, _Partial) else None
        snaps = tuple(SnapRef(f"{dataset}@{s.name}", s.guid, s.txg, s.created)
                      for s in ds.snaps)
        return TargetState(dataset, True, ds.type, token, info.int_prop("written"), snaps,
                           True, info.int_prop("available"))

    def ensure_parent(self, endpoint: Endpoint, dataset: str) -> None:
        if "/" not in dataset:
            return
        parent = dataset.rsplit("/", 1)[0]
        tz = self._target(endpoint, parent)
        if tz._find(parent) is None:
            tz.create_filesystem(parent, {})

    def abort_partial(self, endpoint: Endpoint, dataset: str) -> None:
        tz = self._target(endpoint, dataset)
        ds = tz._find(dataset)
        if ds is None or ds.partial is None:
            return
        part = ds.partial
        ds.partial = None
        if isinstance(part, _Partial) and part.full:
            tz.destroy(dataset, recursive=True)

    def _find_partial(self, token: str) -> _Partial | None:
        net = self.ssh.network
        appliances = [self.ssh, *(net.hosts.values() if net else ())]
        for app in appliances:
            for pool in app.zfs._pools.values():
                for ds in pool.datasets.values():
                    if isinstance(ds.partial, _Partial) and ds.partial.token == token:
                        return ds.partial
        return None

    def _guid_to_snapshot(self, dataset: str, guid: int) -> tuple[_Ds, _Snap] | None:
        """The snapshot with ``guid`` as ``zfs send -t`` finds it (libzfs guid_to_name):
        in ``dataset`` and its descendants first, then in each ancestor and all of its
        descendants (siblings included), up to the pool."""
        pool = self.zfs._pools.get(dataset.split("/")[0])
        if pool is None:
            return None
        level = dataset
        while level:
            for name in sorted(pool.datasets):
                if name == level or name.startswith(level + "/"):
                    ds = pool.datasets[name]
                    snap = next((x for x in ds.snaps if x.guid == guid), None)
                    if snap is not None:
                        return ds, snap
            level = level.rsplit("/", 1)[0] if "/" in level else ""
        return None

    def _check_receive(self, tz: FakeZfs, stream: _Stream, receive: ReceiveSpec) -> None:
        """What ``zfs receive`` checks from the stream's header, before any data."""
        name = receive.dataset
        ds = tz._find(name)
        if stream.base_guid == 0:
            if ds is not None:  # even when it only holds a partial full receive
                raise Diverged(f"cannot receive new filesystem stream: destination '{name}' "
                               "exists\nmust specify -F to overwrite it")
            parent = name.rsplit("/", 1)[0]
            if tz._find(parent) is None:
                raise NotFound(f"cannot receive new filesystem stream: parent of {name} "
                               "does not exist")
            return
        if ds is None:
            raise NotFound(f"cannot receive incremental stream: destination '{name}' does "
                           "not exist")
        if ds.partial is not None:
            raise PartialReceive(f"cannot receive incremental stream: destination {name} "
                                 "contains partially-complete state from \"zfs receive -s\".")
        # zfs looks back for the base snapshot (not only the newest): later snapshots
        # are fine as long as no data changed since the base
        at = next((i for i, s in enumerate(ds.snaps) if s.guid == stream.base_guid), None)
        if at is None:
            raise Diverged("cannot receive incremental stream: most recent snapshot of "
                           f"{name} does not match incremental source")
        if ds.written > 0 or any(s.written > 0 for s in ds.snaps[at + 1:]):
            raise Diverged(f"cannot receive incremental stream: destination {name} has been "
                           "modified\nsince most recent snapshot")

    def transfer(self, send: SendSpec, endpoint: Endpoint, receive: ReceiveSpec, *,
                 rate_limit: int | None = None, progress: Progress | None = None,
                 cancel: threading.Event | None = None,
                 transport: Transport = "ssh") -> TransferStats:
        if transport not in TRANSPORTS:
            raise InvalidInput(f"unknown transport {transport!r}")
        self.transports.append(transport)  # the stream is the same either way
        self.zfs._up()
        tz = self._target(endpoint, receive.dataset)
        if send.resume_token:
            # zfs send -t sends what the token names (found by guid near its toname);
            # the receive side then takes it only into the partial the token is from
            info = self.resume_info(send.resume_token)
            found = self._guid_to_snapshot(info.dataset, info.toguid)
            if found is None:
                raise StaleResume(f"cannot resume send: '{info.toname}' used in the initial "
                                  "send no longer exists")
            src, to = found
            base = None
            if info.fromguid:
                frm = next((s for s in src.snaps if s.guid == info.fromguid), None)
                mark = next((b for b in src.bookmarks if b.guid == info.fromguid), None)
                base = f"{src.name}@{frm.name}" if frm else \
                    f"{src.name}#{mark.name}" if mark else None
                if base is None:
                    raise StaleResume("cannot resume send: incremental source "
                                      f"{info.fromguid:x} no longer exists")
            part = self._find_partial(send.resume_token)
            tds = tz._find(receive.dataset)
            if part is None or tds is None or tds.partial is not part:
                raise StaleResume("cannot resume send: the token matches no partial receive "
                                  f"of {receive.dataset}")
            stream = self._stream(replace(part.spec, resume_token=None, base=base,
                                          snapshot=f"{src.name}@{to.name}"))
            start, total, full, rspec = part.done, part.total, part.full, part.receive
        else:
            stream = self._stream(send)
            tds = tz._find(receive.dataset)
            if (stream.base_guid and send.intermediates and tds is not None
                    and tds.partial is None and tds.written == 0
                    and {s.guid for s in stream.snaps} <= {s.guid for s in tds.snaps}):
                # a -I package whose snapshots the target holds: zfs receive skips them
                self.transfers.append((send.describe(), stream.size))
                return TransferStats(stream.size, 0.001)
            self._check_receive(tz, stream, receive)
            start, total, full, rspec = 0, stream.size, stream.base_guid == 0, receive
        self.streamed.extend(f"{stream.dataset.name}@{s.name}" for s in stream.snaps)
        pool = tz._pool_of(receive.dataset)
        done = start
        cut = self.interrupt_after
        room = tz._pool_avail(pool)
        while done < total:
            n = min(CHUNK, total - done)
            if (cancel is not None and cancel.is_set()) or (cut is not None and done - start
                                                            >= cut) or done - start + n > room:
                self.interrupt_after = None
                self._keep_partial(tz, stream, send, rspec, receive.dataset, done, total, full)
                self.transfers.append((send.describe(), done - start))
                if cancel is not None and cancel.is_set():
                    raise TransferCancelled(f"cancelled after {done - start} bytes")
                if done - start + n > room:
                    raise InsufficientSpace("cannot receive new filesystem stream: out of space"
                                            if full else
                                            "cannot receive incremental stream: out of space")
                raise interrupted(done - start, "cannot receive incremental stream: "
                                  "checksum mismatch or incomplete stream")
            done += n
            if self.on_step is not None and done < total:
                try:
                    self.on_step(f"zfs send | receive {receive.dataset}: {done} of {total}")
                except BaseException:
                    self._keep_partial(tz, stream, send, rspec, receive.dataset, done, total,
                                       full)
                    raise
            if progress is not None:
                progress(done - start)
        self._apply(tz, stream, rspec, full)
        self.transfers.append((send.describe(), done - start))
        return TransferStats(done - start, 0.001)

    def _keep_partial(self, tz: FakeZfs, stream: _Stream, send: SendSpec,
                      receive: ReceiveSpec, name: str, done: int, total: int,
                      full: bool) -> None:
        ds = tz._find(name)
        if ds is None:  # an interrupted full receive leaves the dataset, without snapshots,
            # with the receive's -o properties (zfs 2.3.2) but not the stream's
            src = stream.dataset
            pool = tz._pool_of(name)
            ds = tz._make(pool, name, src.type, _local_props(src, receive),
                          {k: v for k, v in receive.properties.items() if ":" in k})
        if isinstance(ds.partial, _Partial):
            ds.partial.done = done
            return
        self._tokens += 1
        to = stream.snaps[-1]
        token = fake_resume_token(f"{stream.dataset.name}@{to.name}", to.guid,
                                  stream.base_guid, self._tokens)
        spec = send if not send.resume_token else replace(send, resume_token=None)
        ds.partial = _Partial(token, stream.dataset.name, to.guid, stream.base_guid, done,
                              total, spec, receive, full)

    def _apply(self, tz: FakeZfs, stream: _Stream, receive: ReceiveSpec, full: bool) -> None:
        name = receive.dataset
        src = stream.dataset
        ds = tz._find(name)
        pool = tz._pool_of(name)
        if ds is None:
            ds = tz._make(pool, name, src.type, _local_props(src, receive), {})
        if full:
            ds.local = _local_props(src, receive)
        ds.user.update({k: v for k, v in src.user.items() if k not in receive.exclude})
        ds.user.update({k: v for k, v in receive.properties.items() if ":" in k})
        for k, v in receive.properties.items():
            if ":" not in k:
                ds.local[k] = v
        ds.partial = None
        for s in stream.snaps:
            ds.snaps.append(_Snap(s.name, s.guid, s.created, tz._next_txg(), s.referenced,
                                  dict(s.user), s.volsize, s.written, s.content))
        last = stream.snaps[-1]
        ds.data, ds.content, ds.written = last.referenced, last.content, 0

    # -- promote -----------------------------------------------------------------------
    def rename(self, old: str, new: str) -> None:
        zfs = self.zfs
        zfs._up()
        ds = zfs._ds(old)
        if old.split("/")[0] != new.split("/")[0]:
            raise InvalidInput(f"cannot rename to '{new}': datasets must be within same pool")
        if zfs._find(new) is not None:
            raise Conflict(f"cannot rename to '{new}': dataset already exists")
        if ds.partial is not None:
            raise Conflict(f"cannot rename '{old}': dataset is busy")
        pool = zfs._pool_of(old)
        parent = new.rsplit("/", 1)[0]
        if zfs._find(parent) is None:
            zfs.create_filesystem(parent, {})
        moved = [d for n, d in list(pool.datasets.items()) if n == old or
                 n.startswith(old + "/")]
        for d in moved:
            del pool.datasets[d.name]
            zfs.existing_devices.discard(zfs.zvol_device(d.name))
            d.name = new + d.name[len(old):]
            pool.datasets[d.name] = d
            if d.type == "volume":
                zfs.existing_devices.add(zfs.zvol_device(d.name))
        for d in pool.datasets.values():
            if d.origin and d.origin.split("@")[0] == old:
                d.origin = new + d.origin[len(old):]

    def mount(self, dataset: str) -> None:
        ds = self.zfs._ds(dataset)
        if ds.type != "filesystem":
            raise InvalidInput(f"cannot mount '{dataset}': not a filesystem")
        ds.mounted = True


def _local_props(src: _Ds, receive: ReceiveSpec) -> dict[str, str]:
    """The natives a full ``send -p`` stream sets on a new dataset, with -x/-o applied."""
    local = {k: v for k, v in src.local.items() if k in _SENT_NATIVE
             and k not in receive.exclude}
    local.update({k: v for k, v in receive.properties.items() if ":" not in k})
    return local
