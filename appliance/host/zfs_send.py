"""ZFS replication on the host: holds and bookmarks (the cursor), send size estimates, the
target's state, and the ``zfs send | ssh target zfs receive`` pipeline.

The engine talks to :class:`ZfsSendHost`; :class:`ZfsSend` is the real one (``zfs`` and,
for a remote target, :class:`appliance.host.ssh.OpenSsh`), and
``appliance.host.fakes.replication.FakeZfsSend`` its in-memory twin, both held to the
same behaviour by ``appliance.host.contract.zfs_send_checks``. Error contract:

- a receive the target cannot take because its dataset is not a replica of this stream
  (it exists already for a full stream, it was modified or has snapshots the source lacks
  for an incremental one, or shares no snapshot) -> :class:`Diverged` (409 ``diverged``);
- the target pool cannot hold the stream -> ``InsufficientSpace``;
- the stream was cut (the link, a killed process) -> :class:`TransferInterrupted`; with
  ``receive -s`` the target keeps what arrived and ``TargetState.resume_token`` says where
  to resume; a resume whose source snapshot is gone -> :class:`StaleResume`, and so is a
  token ``resume_info`` cannot read (the token comes from the target: the planner checks
  what it names before anything is sent);
- ``cancel`` set during a transfer -> :class:`TransferCancelled` (also resumable);
- SSH failures -> the errors of :mod:`appliance.host.ssh`; with the ``ssh+tcp`` transport,
  a data port the source cannot reach -> ``TargetUnreachable`` (a firewall, or NAT
  between the two).

Transports: ``ssh`` (the default) sends the stream through the SSH channel, encrypted.
``ssh+tcp`` (a ZDS target only: its receive gate's ``via-tcp``) keeps SSH for the
commands and the handshake but sends the stream over a plain TCP connection that the
target accepts once, from the SSH client's address, after a one-time token that went
through SSH: for a trusted replication link where SSH's encryption is the bottleneck
(the stream is not encrypted or authenticated on the wire; ``raw`` sends of encrypted
datasets stay encrypted).

OpenZFS features used, and why: ``send -L -c -e`` (compressed, large-block, embedded:
lz4 data crosses the wire as it is stored) or ``-w`` (raw: encrypted datasets stay
encrypted), ``-p`` (the ``zds:*`` properties travel, so the target can serve the replica
as the same datastore), ``-I`` (every intermediate snapshot), ``-i #bookmark`` (when the
last sent snapshot was pruned), ``receive -s`` + ``send -t`` (resume instead of starting
over), holds (the last sent snapshot cannot be destroyed by accident) and bookmarks (an
incremental base that costs no space).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import selectors
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Literal, Protocol

from appliance.errors import (
    Conflict,
    HostCommandFailed,
    InsufficientSpace,
    InvalidInput,
    NotFound,
    Unavailable,
    ZdsError,
)
from appliance.host.run import CommandError, CommandResult, Runner
from appliance.host.ssh import Endpoint, OpenSsh, TargetUnreachable, classify_ssh_error
from appliance.host.sshgate import DATA_PORTS, VIA_TCP
from appliance.host.zfs import classify_error

MiB = 1 << 20

Transport = Literal["ssh", "ssh+tcp"]
TRANSPORTS: tuple[Transport, ...] = ("ssh", "ssh+tcp")


class Diverged(Conflict):
    """The target dataset is not (any more) a replica the stream can be applied to."""

    code = "diverged"


class TransferInterrupted(Unavailable):
    """The stream stopped half-way; the target kept what arrived (resumable)."""

    code = "transfer_interrupted"


class TransferCancelled(ZdsError):
    """The transfer was cancelled (the partial receive is kept, resumable)."""

    status = 409
    code = "cancelled"


class StaleResume(Conflict):
    """The target's partial receive cannot be resumed: its source snapshot is gone."""

    code = "stale_resume"


class PartialReceive(Conflict):
    """The target holds a partial receive: resume it (or abort it) before a new stream."""

    code = "partial_receive"


@dataclass(frozen=True)
class SnapRef:
    """A snapshot or bookmark: ``pool/ds@name`` or ``pool/ds#name``."""

    name: str
    guid: int
    createtxg: int
    creation: int  # unix time

    @property
    def short(self) -> str:
        return re.split(r"[@#]", self.name, maxsplit=1)[1]


@dataclass(frozen=True)
class TargetState:
    """What the target has of a replica (one ``zfs list`` there, two when it is new)."""

    dataset: str
    exists: bool
    type: str | None = None  # filesystem | volume
    resume_token: str | None = None
    written: int = 0  # bytes changed since its newest snapshot (0 for an untouched replica)
    snapshots: tuple[SnapRef, ...] = ()  # oldest first
    parent_exists: bool = True
    available: int = 0  # free bytes for it (its parent's when it does not exist)


@dataclass(frozen=True)
class ResumeToken:
    """What a ``receive_resume_token`` makes ``zfs send -t`` send: the snapshot ``toname``
    (guid ``toguid``), incremental from the snapshot or bookmark with guid ``fromguid``
    (0: a full stream). zfs finds both by guid near ``toname``, so a token from a hostile
    target could name any dataset of the source: check them before sending."""

    toname: str
    toguid: int
    fromguid: int = 0

    @property
    def dataset(self) -> str:
        return self.toname.split("@", 1)[0]


@dataclass(frozen=True)
class SendSpec:
    """One ``zfs send``. ``base`` (a snapshot for ``-I``/``-i``, a bookmark for ``-i``)
    makes it incremental; ``resume_token`` resumes (``send -t``, nothing else applies)."""

    snapshot: str | None = None
    base: str | None = None
    intermediates: bool = True  # -I (with a snapshot base) instead of -i
    raw: bool = False
    properties: bool = True
    resume_token: str | None = None

    def args(self) -> list[str]:
        if self.resume_token:
            if not re.fullmatch(r"[0-9a-zA-Z:-]+", self.resume_token):
                raise InvalidInput("invalid receive_resume_token")
            return ["send", "-t", self.resume_token]
        if not self.snapshot:
            raise InvalidInput("a send needs a snapshot or a resume token")
        args = ["send", *(["-w"] if self.raw else ["-L", "-c", "-e"])]
        if self.properties:
            args.append("-p")
        if self.base:
            args += ["-I" if self.intermediates and "@" in self.base else "-i", _name(self.base)]
        return [*args, _name(self.snapshot)]

    def describe(self) -> str:
        if self.resume_token:
            return "resume"
        if not self.base:
            return f"full {self.snapshot}"
        return f"incremental {self.base} -> {self.snapshot}"


@dataclass(frozen=True)
class ReceiveSpec:
    """``zfs receive -s -u``: resumable, never mounted; ``properties`` override the
    stream's (``-o``), ``exclude`` drops them (``-x``)."""

    dataset: str
    properties: Mapping[str, str] = field(default_factory=dict)
    exclude: tuple[str, ...] = ()

    def args(self) -> list[str]:
        args = ["receive", "-s", "-u"]
        for key, value in self.properties.items():
            if not re.fullmatch(r"[a-z][a-z0-9_.:-]*", key) or any(c in value for c in
                                                                   "\t\n\r\0"):
                raise InvalidInput(f"invalid receive property {key}")
            args += ["-o", f"{key}={value}"]
        for key in self.exclude:
            args += ["-x", key]
        return [*args, _name(self.dataset)]


@dataclass(frozen=True)
class TransferStats:
    bytes: int
    seconds: float


Progress = Callable[[int], None]


class ZfsSendHost(Protocol):
    """What replication needs of ZFS beyond :class:`appliance.host.zfs.ZfsHost` (whose
    hold/release/holds keep the source's cursor snapshot)."""

    # -- the source's cursor --------------------------------------------------------
    def bookmarks(self, dataset: str) -> list[SnapRef]:
        """Bookmarks of ``dataset``, oldest first; ``NotFound`` if it is missing."""

    def bookmark(self, snapshot: str, bookmark: str) -> None:
        """``zfs bookmark ds@s ds#b``; an existing bookmark name -> ``Conflict``."""

    def destroy_bookmark(self, bookmark: str) -> None:
        """A missing bookmark is fine."""

    # -- streams ----------------------------------------------------------------------
    def estimate(self, send: SendSpec) -> int:
        """The stream's size in bytes (``zfs send -nP``)."""

    def resume_info(self, token: str) -> ResumeToken:
        """What ``zfs send -t token`` would send, read without sending (``zfs send -nvt``;
        the snapshot need not exist any more). A token that cannot be read (malformed,
        corrupt, from another zfs) -> :class:`StaleResume`."""

    def target_state(self, endpoint: Endpoint, dataset: str) -> TargetState: ...

    def ensure_parent(self, endpoint: Endpoint, dataset: str) -> None:
        """Creates ``dataset``'s parent on the target (``zfs create -p``) if missing."""

    def abort_partial(self, endpoint: Endpoint, dataset: str) -> None:
        """Drops a partial receive (``zfs receive -A``); nothing there is fine."""

    def transfer(self, send: SendSpec, endpoint: Endpoint, receive: ReceiveSpec, *,
                 rate_limit: int | None = None, progress: Progress | None = None,
                 cancel: threading.Event | None = None,
                 transport: Transport = "ssh") -> TransferStats:
        """Streams ``send`` into ``receive`` on ``endpoint``; ``rate_limit`` in bytes/s;
        ``progress(bytes so far)`` about once a second; ``transport`` as in the module's
        docstring (a local endpoint always uses a pipe)."""

    # -- the target's promote ------------------------------------------------------------
    def rename(self, old: str, new: str) -> None:
        """``zfs rename -p`` (parents made as needed)."""

    def mount(self, dataset: str) -> None:
        """Mounts a filesystem (already mounted is fine)."""


def _name(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.:/@#-]*", name):
        raise InvalidInput(f"invalid ZFS name {name!r}")
    return name


# ---- parsers ------------------------------------------------------------------------------
def parse_refs(out: str) -> list[SnapRef]:
    """``zfs list -H -p -o name,guid,createtxg,creation`` of snapshots or bookmarks."""
    refs = []
    for line in out.splitlines():
        f = line.split("\t")
        if len(f) >= 4 and f[1].isdigit():
            refs.append(SnapRef(f[0], int(f[1]), int(f[2]), int(f[3])))
    return sorted(refs, key=lambda r: (r.createtxg, r.name))


def parse_send_size(out: str) -> int:
    """The total of ``zfs send -nP``: its ``size`` line."""
    for line in reversed(out.splitlines()):
        f = line.split("\t")
        if f[0] == "size" and len(f) >= 2 and f[1].strip().isdigit():
            return int(f[1])
    raise HostCommandFailed(f"zfs send -nP printed no size: {out.strip()[:200]!r}")


# `zfs send -n -v -t 1-10e2b9c8b4-e8-789c636064...` (OpenZFS 2.x; the layout is read
# from its source, libzfs_sendrecv.c zfs_send_resume_impl_cb_impl and libnvpair.c
# nvlist_print; the values here are made up): the token's nvlist first, on stdout with
# -n (stderr without), one "\t<name> = <value>" line per field (uint64 as 0x..., strings
# as they are, booleans as 1), printed even when the send then fails ("cannot resume
# send: 'tank/ds@s7' used in the initial send no longer exists"). The estimate line
# that follows is not read here:
#   resume token contents:
#   nvlist version: 0
#   	fromguid = 0x595d9f81aa9dddab
#   	object = 0x102
#   	offset = 0x4a0000
#   	bytes = 0x51c8b0
#   	toguid = 0x854f02a2dd32cf0d
#   	toname = tank/datastores/nfs01@zds-repl-r1-20261123T030000Z
#   	embedok = 1
#   	compressok = 1
#   send from tank/datastores/nfs01@zds-repl-r1-... to tank/datastores/nfs01@... ...
_RESUME_FIELD = re.compile(r"\t([a-z_]+) = (.*)")
_SNAPSHOT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]*@[A-Za-z0-9][A-Za-z0-9_.:-]*")


def parse_resume_token(out: str) -> ResumeToken | None:
    """The token ``zfs send -nvt`` decoded, or None when it printed none (a corrupt or
    unknown token), or printed something no honest token holds (a field twice, a toname
    that is no snapshot name)."""
    lines = out.splitlines()
    try:
        start = lines.index("resume token contents:")
    except ValueError:
        return None
    if start + 1 >= len(lines) or not lines[start + 1].startswith("nvlist version: "):
        return None
    fields: dict[str, str] = {}
    for line in lines[start + 2:]:
        if not line.startswith("\t"):
            break  # the end of the nvlist
        m = _RESUME_FIELD.fullmatch(line)  # not "\t\t...": an embedded nvlist's lines
        if m is None:
            continue
        if m.group(1) in fields:  # a name that smuggles a second "toname = ..." line
            return None
        fields[m.group(1)] = m.group(2)
    toname = fields.get("toname", "")
    try:
        toguid = int(fields["toguid"], 16)
        fromguid = int(fields.get("fromguid", "0x0"), 16)
    except (KeyError, ValueError):
        return None
    if not _SNAPSHOT_NAME.fullmatch(toname) or not toguid:
        return None
    return ResumeToken(toname, toguid, fromguid)


def parse_target(dataset: str, out: str) -> TargetState:
    """``zfs list -H -p -t filesystem,volume,snapshot -o name,type,guid,createtxg,creation,
    receive_resume_token,written,available -r -d 1 DATASET``."""
    kind = token = None
    written = available = 0
    snaps = []
    for line in out.splitlines():
        f = line.split("\t")
        if len(f) < 8:
            continue
        if f[0] == dataset:
            kind = f[1]
            token = f[5] if f[5] not in ("-", "") else None
            written = int(f[6]) if f[6].isdigit() else 0
            available = int(f[7]) if f[7].isdigit() else 0
        elif f[0].startswith(dataset + "@") and f[2].isdigit():
            snaps.append(SnapRef(f[0], int(f[2]), int(f[3]), int(f[4])))
    snaps.sort(key=lambda r: (r.createtxg, r.name))
    return TargetState(dataset, kind is not None, kind, token, written, tuple(snaps), True,
                       available)


# ---- receive/send errors --------------------------------------------------------------------
_DIVERGED = ("has been modified", "destination has snapshots", "does not match incremental",
             "must specify -f", "destination already exists", "exists\nmust specify",
             "local origin for clone", "incremental source", "no snapshots of destination")
_STALE = ("no longer exists", "no longer the same snapshot", "used in the initial send",
          "kernel modules must be upgraded to receive this stream")
_CUT = ("failed to read from stream", "invalid backup stream", "checksum mismatch",
        "broken pipe", "connection closed", "connection reset", "unexpected end",
        "closed by remote host",
        "signal", "killed")


def interrupted(bytes_sent: int, msg: str, detail: dict[str, object] | None = None
                ) -> TransferInterrupted:
    return TransferInterrupted(f"the stream stopped after {bytes_sent} bytes: {msg}; the "
                               "target keeps them and the next run resumes from there",
                               detail={"bytes": bytes_sent, **(detail or {})})


def classify_stream_error(text: str, bytes_sent: int, argv: Sequence[str]) -> ZdsError:
    """The engine error for a failed send or receive, from its stderr."""
    low = text.lower()
    msg = " ".join(line.strip() for line in text.strip().splitlines()[:3]) or (
        "the receiving side ended without a message (link cut or process killed)")
    detail: dict[str, object] = {"argv": list(argv), "bytes": bytes_sent}
    if "partially-complete state" in low:
        return PartialReceive(msg, detail=detail)
    if "cannot resume" in low or any(n in low for n in _STALE):
        return StaleResume(msg, detail=detail)
    if any(n in low for n in _DIVERGED):
        return Diverged(msg, detail=detail)
    if any(n in low for n in ("out of space", "no space left", "quota exceeded")):
        return InsufficientSpace(msg, detail=detail)
    if any(n in low for n in _CUT) or not text.strip():
        return interrupted(bytes_sent, msg, detail)
    return classify_error(CommandError(CommandResult(tuple(argv), 1, "", text)))


class ZfsSend:
    """:class:`ZfsSendHost` on the real ``zfs`` (local) and, for remote targets, ssh."""

    CHUNK = MiB
    REPORT_EVERY = 1.0  # seconds between progress calls

    def __init__(self, runner: Runner, ssh: OpenSsh, *, zfs: str = "zfs") -> None:
        self.runner = runner
        self.ssh = ssh
        self.zfs = zfs

    def _run(self, argv: Sequence[str], timeout: float = 120.0) -> str:
        try:
            return self.runner.run([self.zfs, *argv], timeout=timeout).stdout
        except CommandError as exc:
            raise classify_error(exc) from exc

    def _remote(self, endpoint: Endpoint, argv: Sequence[str], timeout: float = 120.0) -> str:
        cmd = [self.zfs if endpoint.local else "zfs", *argv]
        try:
            return self.ssh.runner(endpoint).run(cmd, timeout=timeout).stdout
        except CommandError as exc:
            raise classify_error(exc) from exc

    # -- cursor ------------------------------------------------------------------------
    def bookmarks(self, dataset: str) -> list[SnapRef]:
        return parse_refs(self._run(["list", "-H", "-p", "-t", "bookmark", "-o",
                                     "name,guid,createtxg,creation", "-d", "1",
                                     _name(dataset)]))

    def bookmark(self, snapshot: str, bookmark: str) -> None:
        self._run(["bookmark", _name(snapshot), _name(bookmark)])

    def destroy_bookmark(self, bookmark: str) -> None:
        if "#" not in bookmark:
            raise InvalidInput(f"{bookmark!r} is not a bookmark")
        with contextlib.suppress(NotFound):
            self._run(["destroy", _name(bookmark)])

    # -- streams -----------------------------------------------------------------------
    def estimate(self, send: SendSpec) -> int:
        args = send.args()
        result = self.runner.run([self.zfs, args[0], "-n", "-P", *args[1:]], check=False,
                                 timeout=300)
        if not result.ok:
            raise classify_stream_error(result.stderr or result.stdout, 0, result.argv)
        # zfs 2.3 prints the -nP summary on stdout (older releases on stderr)
        return parse_send_size(result.stdout + "\n" + result.stderr)

    def resume_info(self, token: str) -> ResumeToken:
        try:
            args = SendSpec(resume_token=token).args()  # plain characters only
        except InvalidInput:
            raise StaleResume(f"the receive_resume_token {token[:80]!r} is malformed: not "
                              "resumed") from None
        result = self.runner.run([self.zfs, "send", "-n", "-v", *args[1:]], check=False,
                                 timeout=60)
        info = parse_resume_token(result.stdout + "\n" + result.stderr)
        if info is None:
            why = " ".join((result.stderr or result.stdout).strip().splitlines()[:2])
            raise StaleResume(f"the receive_resume_token cannot be read here ({why[:200]}): "
                              "not resumed", detail={"argv": list(result.argv)})
        return info

    def target_state(self, endpoint: Endpoint, dataset: str) -> TargetState:
        try:
            out = self._remote(endpoint, [
                "list", "-H", "-p", "-t", "filesystem,volume,snapshot", "-o",
                "name,type,guid,createtxg,creation,receive_resume_token,written,available",
                "-r", "-d", "1", _name(dataset)])
            return parse_target(dataset, out)
        except NotFound:
            pass
        parent = dataset.rsplit("/", 1)[0] if "/" in dataset else dataset
        try:
            out = self._remote(endpoint, ["list", "-H", "-p", "-o", "name,available",
                                          _name(parent)])
        except NotFound:
            return TargetState(dataset, False, parent_exists=False)
        f = (out.splitlines() or [""])[0].split("\t")
        avail = int(f[1]) if len(f) > 1 and f[1].isdigit() else 0
        return TargetState(dataset, False, parent_exists=True, available=avail)

    def ensure_parent(self, endpoint: Endpoint, dataset: str) -> None:
        if "/" not in dataset:
            return
        with contextlib.suppress(Conflict):  # made meanwhile
            self._remote(endpoint, ["create", "-p", _name(dataset.rsplit("/", 1)[0])])

    def abort_partial(self, endpoint: Endpoint, dataset: str) -> None:
        try:
            self._remote(endpoint, ["receive", "-A", _name(dataset)])
        except ZdsError as exc:
            if "does not have any resumable receive state" not in str(exc) and \
                    not isinstance(exc, NotFound):
                raise

    def transfer(self, send: SendSpec, endpoint: Endpoint, receive: ReceiveSpec, *,
                 rate_limit: int | None = None, progress: Progress | None = None,
                 cancel: threading.Event | None = None,
                 transport: Transport = "ssh") -> TransferStats:
        if transport not in TRANSPORTS:
            raise InvalidInput(f"unknown transport {transport!r}")
        via_tcp = transport == "ssh+tcp" and not endpoint.local
        send_argv = [self.zfs, *send.args()]
        recv_cmd = [self.zfs if endpoint.local else "zfs", *receive.args()]
        recv_argv = self.ssh.argv(endpoint, [VIA_TCP, *recv_cmd] if via_tcp else recv_cmd)
        cancel = cancel or threading.Event()
        pipe = _Pipeline(send_argv, recv_argv, self.CHUNK, rate_limit, progress,
                         self.REPORT_EVERY, data_host=endpoint.host if via_tcp else None)
        started = time.monotonic()
        pipe.run(cancel)
        seconds = time.monotonic() - started
        if cancel.is_set():
            raise TransferCancelled(f"cancelled after {pipe.bytes} bytes; the target keeps "
                                    "them and the next run resumes", detail={
                                        "bytes": pipe.bytes})
        sender, receiver = pipe.results()
        if receiver.ok and sender.ok:
            return TransferStats(pipe.bytes, seconds)
        if not endpoint.local and not receiver.ok:
            err = classify_ssh_error(receiver, endpoint)
            if err is not None and err.code != "target_unreachable":
                raise err
            if err is not None and pipe.bytes == 0 and "connect to host" in receiver.stderr:
                raise err
        # the side that failed first explains it: a receive that refused the stream
        # makes the sender die of a broken pipe; a sender that failed truncates the stream
        if not sender.ok and (receiver.ok or _is_cut(receiver.stderr) or
                              "cannot resume" in sender.stderr.lower()):
            raise classify_stream_error(sender.stderr, pipe.bytes, sender.argv)
        raise classify_stream_error(receiver.stderr or sender.stderr, pipe.bytes,
                                    receiver.argv if not receiver.ok else sender.argv)

    # -- promote -----------------------------------------------------------------------
    def rename(self, old: str, new: str) -> None:
        self._run(["rename", "-p", _name(old), _name(new)])

    def mount(self, dataset: str) -> None:
        try:
            self._run(["mount", _name(dataset)])
        except ZdsError as exc:
            if "already mounted" not in str(exc):
                raise


def _is_cut(stderr: str) -> bool:
    low = stderr.lower()
    return not low.strip() or any(n in low for n in _CUT)


class _Pipeline:
    """``send | receive`` with the bytes pumped (spliced, no copy into Python) by a
    thread that counts them, limits the rate and reports progress. With ``data_host``
    (ssh+tcp) the pump writes into a TCP connection to the port the receive side names
    on its first line of output, instead of into the receive side's stdin."""

    CANCEL_GRACE = 60.0  # seconds a cancelled receive may take to save its partial state
    HANDSHAKE_TIMEOUT = 120.0  # ssh connect + the gate's start (seconds under emulation)
    CONNECT_TIMEOUT = 20.0
    USER_TIMEOUT_MS = 120_000  # unacknowledged data for this long: the link is dead

    def __init__(self, send_argv: list[str], recv_argv: list[str], chunk: int,
                 rate_limit: int | None, progress: Progress | None, every: float,
                 data_host: str | None = None) -> None:
        self.send_argv = send_argv
        self.recv_argv = recv_argv
        self.chunk = chunk if not rate_limit else max(16 << 10, min(chunk, rate_limit // 4))
        self.rate_limit = rate_limit
        self.progress = progress
        self.every = every
        self.bytes = 0
        self._errs: dict[str, bytearray] = {"send": bytearray(), "recv": bytearray(),
                                            "out": bytearray()}
        self._procs: list[subprocess.Popen[bytes]] = []
        self._codes: list[int] = [0, 0]
        self.data_host = data_host
        self._sock: socket.socket | None = None

    def _start(self, argv: list[str], stdin: int | None) -> subprocess.Popen[bytes]:
        try:
            return subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True)
        except FileNotFoundError as exc:
            raise Unavailable(f"{argv[0]} is not installed on this host") from exc

    def run(self, cancel: threading.Event) -> None:
        sender = self._start(self.send_argv, subprocess.DEVNULL)
        try:
            receiver = self._start(self.recv_argv, subprocess.DEVNULL if self.data_host
                                   else subprocess.PIPE)
        except ZdsError:
            self._kill(sender)
            sender.wait()
            raise
        self._procs = [sender, receiver]
        for pipe in (sender.stdout, receiver.stdin):
            self._widen(pipe)
        if self.data_host:
            try:
                self._sock = self._connect(receiver, cancel)
            except ZdsError:
                for p in self._procs:
                    self._kill(p)
                    p.wait()
                raise
            if self._sock is None:  # the receive side ended first: its stderr says why
                self._kill(sender)
        readers = [threading.Thread(target=self._drain, args=(p.stderr, self._errs[k]),
                                    daemon=True)
                   for p, k in ((sender, "send"), (receiver, "recv"))]
        readers.append(threading.Thread(target=self._drain, args=(receiver.stdout,
                                                                    self._errs["out"]),
                                        daemon=True))
        for t in readers:
            t.start()
        pump = threading.Thread(target=self._pump, args=(sender, receiver, cancel),
                                daemon=True)
        pump.start()
        # A cancel stops the sender only: the receiver then reads the end of a cut stream
        # and keeps what arrived as a resumable partial receive (as after a broken link);
        # it is killed only if it does not finish within CANCEL_GRACE.
        while pump.is_alive():
            pump.join(0.2)
            if cancel.is_set():
                self._kill(sender)
            if self._sock is not None and receiver.poll() is not None:
                # the SSH side is gone (link cut, session killed): stop feeding the
                # data connection, so the receive there ends and keeps what arrived
                with contextlib.suppress(OSError):
                    self._sock.shutdown(socket.SHUT_RDWR)
        grace: float | None = None
        for i, p in enumerate(self._procs):
            while True:
                try:
                    self._codes[i] = p.wait(timeout=0.5)
                    break
                except subprocess.TimeoutExpired:
                    if not cancel.is_set():
                        continue
                    grace = grace or time.monotonic() + self.CANCEL_GRACE
                    if p is sender or time.monotonic() > grace:
                        self._kill(p)
        for t in readers:
            t.join(5)

    PIPE_SIZE = 1 << 20  # Linux's default pipe-max-size

    def _widen(self, pipe: IO[bytes] | None) -> None:
        """A 1 MiB pipe instead of 64 KiB: each splice then moves up to 1 MiB, so the pump
        and ``zfs send`` wake 16 times less often (it shows under emulation)."""
        if pipe is not None and hasattr(fcntl, "F_SETPIPE_SZ"):
            with contextlib.suppress(OSError):  # above pipe-max-size for this user
                fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, self.PIPE_SIZE)

    def _connect(self, receiver: subprocess.Popen[bytes],
                 cancel: threading.Event) -> socket.socket | None:
        """Reads the gate's ``zds-tcp PORT TOKEN`` line from the receive side's stdout,
        connects to ``data_host:PORT`` and sends the token. None if the receive side
        ended before it said where (refused, unreachable: its stderr says why) or the
        transfer was cancelled meanwhile."""
        assert receiver.stdout is not None and self.data_host is not None
        fd = receiver.stdout.fileno()
        line = b""
        deadline = time.monotonic() + self.HANDSHAKE_TIMEOUT
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in line:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TargetUnreachable(
                        f"the receive gate on {self.data_host} did not name a data port "
                        f"within {self.HANDSHAKE_TIMEOUT:.0f} s")
                if cancel.is_set():
                    return None
                if not sel.select(min(left, 1.0)):
                    continue
                chunk = os.read(fd, 4096)
                if not chunk:
                    return None
                line += chunk
        first, _, rest = line.partition(b"\n")
        self._errs["out"].extend(rest)
        m = re.fullmatch(rb"zds-tcp (\d{1,5}) ([0-9a-f]{32})", first.strip())
        if not m:
            raise TargetUnreachable(
                f"{self.data_host} does not speak ssh+tcp (its receive gate said "
                f"{first[:80]!r}): it needs a ZDS target, or use the ssh transport")
        port, token = int(m.group(1)), bytes.fromhex(m.group(2).decode())
        try:
            sock = socket.create_connection((self.data_host, port),
                                            timeout=self.CONNECT_TIMEOUT)
        except OSError as exc:
            raise TargetUnreachable(
                f"cannot open the ssh+tcp data connection to {self.data_host}:{port} "
                f"({exc.strerror or exc}): open TCP ports {DATA_PORTS} there to this "
                "appliance, with no NAT between them, or use the ssh transport") from exc
        sock.settimeout(None)
        if hasattr(socket, "TCP_USER_TIMEOUT"):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, self.USER_TIMEOUT_MS)
        sock.sendall(token)
        return sock

    @staticmethod
    def _drain(stream: object, into: bytearray) -> None:
        if stream is None:
            return
        read = stream.read  # type: ignore[attr-defined]
        while True:
            data = read(65536)
            if not data:
                return
            into.extend(data)
            del into[:-65536]  # keep the tail

    @staticmethod
    def _kill(proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)

    def _pump(self, sender: subprocess.Popen[bytes], receiver: subprocess.Popen[bytes],
              cancel: threading.Event) -> None:
        assert sender.stdout is not None
        if self._sock is not None:
            dst = self._sock.fileno()
        elif self.data_host:
            return  # the receive side ended before the handshake: nothing to feed
        else:
            assert receiver.stdin is not None
            dst = receiver.stdin.fileno()
        src = sender.stdout.fileno()
        started = last = time.monotonic()
        use_splice = hasattr(os, "splice")
        eof = False
        try:
            while not cancel.is_set():
                try:
                    if use_splice:
                        n = os.splice(src, dst, self.chunk)
                    else:  # pragma: no cover - non-Linux
                        data = os.read(src, self.chunk)
                        n = len(data)
                        view = memoryview(data)
                        while view:
                            view = view[os.write(dst, view):]
                except OSError as exc:
                    if exc.errno == errno.EINVAL and use_splice:
                        use_splice = False
                        continue
                    break  # EPIPE: the receiver is gone; its stderr says why
                if n == 0:
                    eof = True
                    break
                self.bytes += n
                now = time.monotonic()
                if self.rate_limit:
                    ahead = self.bytes / self.rate_limit - (now - started)
                    if ahead > 0:
                        cancel.wait(ahead)
                if self.progress is not None and now - last >= self.every:
                    last = now
                    self.progress(self.bytes)
        finally:
            if self._sock is not None:
                with contextlib.suppress(OSError):  # shut already if the SSH side ended
                    self._sock.shutdown(socket.SHUT_WR)  # the end of the stream
                self._sock.close()
            elif receiver.stdin is not None:
                with contextlib.suppress(OSError):
                    receiver.stdin.close()
            if not eof:
                self._kill(sender)  # nobody reads its pipe any more
            if self.progress is not None:
                self.progress(self.bytes)

    def results(self) -> tuple[CommandResult, CommandResult]:
        return (CommandResult(tuple(self.send_argv), self._codes[0], "",
                              self._errs["send"].decode(errors="replace")),
                CommandResult(tuple(self.recv_argv), self._codes[1], "",
                              self._errs["recv"].decode(errors="replace")))
