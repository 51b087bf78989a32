"""nfs-ganesha adapter: one generated EXPORT block per datastore, applied live over DBus.

Exports are never put into ganesha.conf: ZDS writes each export's block to its own file
in ``exports_dir`` and adds/updates/removes it with the ExportMgr DBus methods, so
ganesha never starts with a path that is not mounted yet, and the reconciler re-adds
everything after ``zpool import``. ``appliance.host.fakes.ganesha.FakeGanesha`` is the
twin; ``appliance.host.contract.ganesha_checks`` holds both to one contract.
Errors: DBus/ganesha down -> ``Unavailable``; unknown export id -> ``NotFound``;
a path/pseudo clash or a missing export directory -> ``Conflict``; anything that cannot
be rendered safely, or a client ganesha cannot resolve -> ``InvalidInput``.

DBus API used (identical in ganesha 4.3 and 5.9; object /org/ganesha/nfsd/ExportMgr,
interface org.ganesha.nfsd.exportmgr unless said otherwise):
  AddExport(s file, s "EXPORT(Export_Id=N)") -> s message   (error if the id is live)
  AddExport(s file, s "EXPORT(Export_Id=*)") adds every block of the file in one call
      (export_mgr.c gsh_export_addexport; '*' matches any value in config_parsing.c
      match_block); a block whose id is live is skipped, a hard error (missing path,
      duplicate pseudo) stops the rest without undoing the ones before it
  UpdateExport(s file, s expr) -> s message
  RemoveExport(q id)                                        (error if unknown)
  ShowExports() -> (tt) stats epoch, a(q id, s path, ((sb)x8) protocols used, (tt) last)
  DisplayExport(q id) -> q id, s path, s pseudo, s tag, a(siyyiuuuuu) CLIENT matches
  /org/ganesha/nfsd/ClientMgr org.ganesha.nfsd.clientmgr.ShowClients()
      -> (tt) now, a(s address, ((sb)x8) protocols used, (tt) last request)
Config problems ganesha can skip (an unresolvable client) do NOT fail Add/UpdateExport:
they come back as "Errors found:" in the message and the export is live without them;
the adapter treats that as a failure and rolls back.

Costs: reading everything ganesha serves is one ShowExports (plus one ShowClients for
who is connected), whatever the number of exports; adding one export is one AddExport;
adding many at once (boot) is one AddExport and one ShowExports.

Host packages: dbus-bin (dbus-send), dbus + dbus-daemon (the system bus), nfs-ganesha,
nfs-ganesha-vfs, rpcbind (NFSv3); ZFS datasets exported need acltype=posixacl.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from appliance.errors import (
    Conflict,
    HostCommandFailed,
    InvalidInput,
    NotFound,
    Unavailable,
    ZdsError,
)
from appliance.host.dbus_send import (
    DBusValue,
    as_int,
    as_list,
    as_str,
    as_timestamp,
    as_tuple,
    parse_dbus_reply,
)
from appliance.host.ganesha_config import (
    ExportSpec,
    check_export_id,
    check_spec,
    export_file_name,
    render_export_block,
)
from appliance.host.nfs_units import MAIN_UNIT
from appliance.host.run import CommandError, Runner

_T = TypeVar("_T")


@dataclass(frozen=True)
class LiveExport:
    """An export ganesha serves now, as ShowExports lists it."""

    export_id: int
    path: str


_FLAT_PROTOCOLS = ("NFSv3", "MNT", "NLMv4", "RQUOTA", "NFSv40", "NFSv41", "NFSv42", "9P")


def _used_protocols(middle: tuple[DBusValue, ...]) -> frozenset[str]:
    """The protocol flags of a ShowExports/ShowClients row: ganesha 4.x+ sends one struct
    of (name, used) pairs; older releases sent bare booleans in a fixed order."""
    used: set[str] = set()
    if len(middle) == 1 and isinstance(middle[0], tuple):
        for item in middle[0]:
            name, flag = as_tuple(item)
            if flag is True:
                used.add(as_str(name))
        return frozenset(used)
    for name, flag in zip(_FLAT_PROTOCOLS, middle, strict=False):
        if flag is True:
            used.add(name)
    return frozenset(used)


@dataclass(frozen=True)
class ExportActivity:
    """One row of ExportMgr.ShowExports."""

    export_id: int
    path: str
    protocols_used: frozenset[str]  # e.g. {"NFSv3", "MNT"}: what clients used on it
    last_activity: float  # epoch seconds of the last request (0 if never)


@dataclass(frozen=True)
class ClientActivity:
    """One row of ClientMgr.ShowClients."""

    address: str  # as ganesha shows it (IPv4 clients as ::ffff:a.b.c.d)
    protocols_used: frozenset[str]
    last_activity: float


# Sample (ganesha 4.3, two exports, a libnfs client wrote to 101 and listed 102):
# method return time=1795314705.83 sender=:1.0 -> destination=:1.22 serial=88 reply_serial=2
#    struct {
#       uint64 1795314642
#       uint64 426208982
#    }
#    array [
#       struct {
#          uint16 0
#          string "/"
#          struct {
#             struct {
#                string "NFSv3"
#                boolean false
#             }
#             ... (MNT, NMLv4, RQUOTA, NFSv40, NFSv41, NFSv42, 9P alike)
#          }
#          struct {
#             uint64 0
#             uint64 0
#          }
#       }
#       struct {
#          uint16 101
#          string "/tmp/gtry/data/ds1"
#          struct {
#             struct {
#                string "NFSv3"
#                boolean true
#             }
#             ...
#          }
#          struct {
#             uint64 1795314699
#             uint64 381381591
#          }
#       }
#    ]
_FAST_ROW = re.compile(
    r'      struct \{\n         uint16 (\d+)\n         string "([^"\n]*)"\n'
    r'         struct \{\n((?:            struct \{\n               string "[^"\n]*"\n'
    r'               boolean (?:true|false)\n            \}\n)*)         \}\n'
    r'         struct \{\n            uint64 (\d+)\n            uint64 (\d+)\n'
    r'         \}\n      \}\n')
_FAST_FLAG = re.compile(r'string "([^"\n]*)"\n               boolean true')
_FAST_HEAD = re.compile(r'^(?:method return[^\n]*\n)?   struct \{\n      uint64 (\d+)\n'
                        r'      uint64 (\d+)\n   \}\n   array \[\n')


def _fast_show_exports(text: str) -> tuple[float, list[ExportActivity]] | None:
    """The common layout of a ShowExports reply (ganesha 4.x/5.x via dbus-send), read
    with regular expressions: ~10x faster than the generic parser, which matters at
    thousands of exports. None when the text is laid out any other way."""
    head = _FAST_HEAD.match(text)
    if head is None:
        return None
    pos, rows = head.end(), []
    while (m := _FAST_ROW.match(text, pos)) is not None:
        used = frozenset(_FAST_FLAG.findall(m.group(3)))
        rows.append(ExportActivity(int(m.group(1)), m.group(2), used,
                                   int(m.group(4)) + int(m.group(5)) / 1e9))
        pos = m.end()
    if text[pos:].strip() != "]":
        return None
    return int(head.group(1)) + int(head.group(2)) / 1e9, rows


def parse_show_exports(text: str) -> tuple[float, list[ExportActivity]]:
    """ShowExports -> (stats epoch, rows). The last (tt) of a row is its last request."""
    fast = _fast_show_exports(text)
    if fast is not None:
        return fast
    values = parse_dbus_reply(text)
    stamp, rows = values[0], values[1]
    out: list[ExportActivity] = []
    for row in as_list(rows):
        eid, path, *protos, last = as_tuple(row)
        out.append(ExportActivity(as_int(eid), as_str(path), _used_protocols(tuple(protos)),
                                  as_timestamp(last)))
    return as_timestamp(stamp), out


# Sample (ganesha 4.3, after one libnfs client in the namespace used NFSv3):
# method return time=1795314699.38 sender=:1.0 -> destination=:1.21 serial=80 reply_serial=2
#    struct {
#       uint64 1795314699
#       uint64 384763027
#    }
#    array [
#       struct {
#          string "::ffff:127.0.0.1"
#          struct {
#             struct {
#                string "NFSv3"
#                boolean true
#             }
#             struct {
#                string "MNT"
#                boolean true
#             }
#             ... (NMLv4, RQUOTA, NFSv40, NFSv41, NFSv42, 9P: false)
#          }
#          struct {
#             uint64 1795314699
#             uint64 381381591
#          }
#       }
#    ]
def parse_show_clients(text: str) -> tuple[float, list[ClientActivity]]:
    """ShowClients -> (now on the server, rows). Rows stay until ganesha restarts."""
    values = parse_dbus_reply(text)
    stamp, rows = values[0], values[1]
    out: list[ClientActivity] = []
    for row in as_list(rows):
        addr, *protos, last = as_tuple(row)
        out.append(ClientActivity(as_str(addr), _used_protocols(tuple(protos)), as_timestamp(last)))
    return as_timestamp(stamp), out


@dataclass(frozen=True)
class ExportDisplay:
    export_id: int
    path: str
    pseudo: str
    tag: str
    clients: tuple[str, ...]  # CLIENT matches as ganesha resolved them ("10.0.0.0/16", "*")


# Sample (ganesha 4.3; hostnames are resolved at load time, "localhost" shows as
# 127.0.0.1/32; an unresolvable one as "<unknown>"):
# method return time=1795314681.817980 sender=:1.0 -> destination=:1.9 serial=51 reply_serial=2
#    uint16 101
#    string "/tmp/gtry/data/ds1"
#    string "/tmp/gtry/data/ds1"
#    string ""
#    array [
#       struct {
#          string "127.0.0.1/32"
#          int32 0
#          byte 0
#          byte 255
#          int32 1
#          uint32 4294967294
#          uint32 4294967294
#          uint32 0
#          uint32 53490146
#          uint32 480
#       }
#    ]
def parse_display_export(text: str) -> ExportDisplay:
    values = parse_dbus_reply(text)
    eid, path, pseudo, tag, clients = values[:5]
    matches = tuple(as_str(as_tuple(c)[0]) for c in as_list(clients))
    return ExportDisplay(as_int(eid), as_str(path), as_str(pseudo), as_str(tag), matches)


# Samples (ganesha 4.3): the reply of AddExport/UpdateExport is one string; config
# problems that ganesha skipped (the export is live WITHOUT them) follow "Errors found:".
#    string "1 exports added"
#    string "1 exports updated. Errors found:
# Config File (/tmp/gtry/exports/export-101.conf:11): Client (host-a.example.com) not found \
# because Temporary failure in name resolution
# "
# (the Config File line is one line in the reply; split here at the backslash)
def parse_export_message(text: str) -> tuple[str, list[str]]:
    """AddExport/UpdateExport reply -> (summary, list of config errors ganesha skipped)."""
    message = as_str(parse_dbus_reply(text)[0])
    summary, _, rest = message.partition("Errors found:")
    errors = [ln.strip() for ln in rest.splitlines() if ln.strip()]
    return summary.strip().rstrip("."), errors


@dataclass(frozen=True)
class Activity:
    """Who used what, as ganesha knows it: one ShowExports and one ShowClients."""

    now: float  # ganesha's clock when ShowClients answered
    exports: Mapping[int, ExportActivity]
    clients: tuple[ClientActivity, ...] = ()


class GaneshaHost(Protocol):
    """The NFS server ZDS drives: nfs-ganesha (:class:`Ganesha`, the default) or the
    kernel's (:class:`appliance.host.knfsd.Knfsd`, opt-in)."""

    def render(self, spec: ExportSpec) -> str:
        """The file this server is given for ``spec`` (what :meth:`rendered` returns once
        it is applied); the reconciler compares the two to find drift."""

    def available(self) -> bool:
        """True when the server answers (ganesha: on DBus)."""

    def restart_stuck(self) -> bool:
        """Restarts the server's unit when systemd says it runs: called after it has not
        answered for a while (a ganesha that hangs, or lost its DBus name, answers nothing
        while its process lives, and systemd's Restart=on-failure never fires). False
        when there is nothing to restart: the unit is not active (stopped on purpose, or
        systemd restarts it by itself), or the server is the kernel's."""

    def list_exports(self) -> list[LiveExport]:
        """Exports ganesha serves now (without the pseudo root, id 0): one DBus call."""

    def get_export(self, export_id: int) -> ExportDisplay | None:
        """One live export with its pseudo path and client matches; None if not live."""

    def rendered(self, export_id: int) -> str | None:
        """The export block ZDS last wrote for ``export_id`` and the server took (None if
        no file, or if its apply never finished: a crash between writing the file and
        the server taking it leaves a pending mark, so the reconcile applies it again
        instead of taking the file for what is live)."""

    def add_export(self, spec: ExportSpec) -> None: ...

    def add_exports(self, specs: Sequence[ExportSpec]) -> dict[int, ZdsError]:
        """Adds many exports in one go (start-up); returns the ones that failed, by id.
        Each failure is what :meth:`add_export` would have raised for that spec."""

    def update_export(self, spec: ExportSpec) -> None:
        """Change clients/access live; connected clients keep their mounts."""

    def remove_export(self, export_id: int) -> None:
        """Remove live and delete the file. Unknown id: no error."""

    def activity(self) -> Activity:
        """Per-export and per-client activity, for every export at once."""

    def connected_clients(self, export_id: int) -> list[str]:
        """Client addresses with state/IO on this export now (refuse delete if any)."""


DBUS_DEST = "org.ganesha.nfsd"
EXPORT_MGR = "/org/ganesha/nfsd/ExportMgr"
CLIENT_MGR = "/org/ganesha/nfsd/ClientMgr"
IF_EXPORT_MGR = "org.ganesha.nfsd.exportmgr"
IF_CLIENT_MGR = "org.ganesha.nfsd.clientmgr"

# DBus error names that mean "nobody is answering" rather than "ganesha said no".
_DOWN_ERRORS = (
    "org.freedesktop.DBus.Error.ServiceUnknown",
    "org.freedesktop.DBus.Error.NameHasNoOwner",
    "org.freedesktop.DBus.Error.NoReply",
    "org.freedesktop.DBus.Error.NoServer",
    "org.freedesktop.DBus.Error.Disconnected",
    "org.freedesktop.DBus.Error.Timeout",
    "org.freedesktop.DBus.Error.TimedOut",
    "org.freedesktop.DBus.Error.FileNotFound",
)
_ERROR_LINE = re.compile(r"Error ([A-Za-z0-9_.]+): (.*)", re.S)

# Protocol names ganesha's ShowExports/ShowClients use, per NFS version we serve.
_PROTOCOL_NAMES = {3: frozenset({"NFSv3", "MNT"}), 4: frozenset({"NFSv40", "NFSv41", "NFSv42"})}


class GaneshaRefused(HostCommandFailed):
    """ganesha answered a DBus call with an error (``dbus_name`` says which)."""

    def __init__(self, method: str, dbus_name: str, text: str) -> None:
        super().__init__(
            f"nfs-ganesha refused {method}: {text.strip()}",
            detail={"dbus_error": dbus_name, "method": method},
        )
        self.dbus_name = dbus_name
        self.text = text


class GaneshaNoReply(Unavailable):
    """A DBus call got no reply within its timeout: ganesha may be down, or still busy
    with a long call (it answers one at a time)."""


def _client_address(addr: str) -> str:
    """'::ffff:192.0.2.7' -> '192.0.2.7'; other addresses in canonical form."""
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return addr
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def client_admitted(address: str, matches: tuple[str, ...]) -> bool:
    """Does a client address fall under one of an export's CLIENT matches?

    Matches ganesha could not turn into an address ("<unknown>") admit nobody; other
    non-address matches (wildcard host names, netgroups) are treated as admitting
    everyone: for "who may be using this export" erring on the side of yes is safe.
    """
    try:
        ip = ipaddress.ip_address(_client_address(address))
    except ValueError:
        return any(m == "*" for m in matches)
    for m in matches:
        if m == "*":
            return True
        if m == "<unknown>":
            continue
        try:
            net = ipaddress.ip_network(m, strict=False)
        except ValueError:
            return True
        if ip.version == net.version and ip in net:
            return True
    return False


def active_clients(activity: Activity, export_id: int, matches: Iterable[str],
                   window: float | None = 600.0) -> list[str]:
    """Clients that may be using ``export_id`` now, as far as ganesha can tell.

    ganesha does not track which client uses which export (NFSv3 is stateless and it
    does not keep a mount list). What it does keep: per export, the protocols used on
    it and the time of its last request (ShowExports); per client address, the
    protocols it used and its last request (ShowClients, never pruned until restart).
    So this returns the clients that (1) the export's CLIENT ``matches`` admit, (2) used
    the export's protocol family, (3) made a request within ``window`` seconds, and
    only if the export itself saw a request within that window. It can over-report a
    client that uses another export with the same rules (safe for "refuse delete");
    it misses a client that has been silent longer than the window.
    """
    row = activity.exports.get(export_id)
    if row is None or not row.protocols_used:
        return []
    if window is not None and activity.now - row.last_activity > window:
        return []
    families = frozenset().union(
        *(names for names in _PROTOCOL_NAMES.values() if names & row.protocols_used)
    )
    admitted = tuple(matches)
    found: set[str] = set()
    for c in activity.clients:
        if not c.protocols_used & families:
            continue
        if window is not None and activity.now - c.last_activity > window:
            continue
        if client_admitted(c.address, admitted):
            found.add(_client_address(c.address))
    return sorted(found)


class Ganesha:
    """nfs-ganesha through ``dbus-send`` (package dbus-bin) and export files.

    ``dbus_address`` selects a private bus (``unix:path=...``, tests); None means the
    system bus. Each export lives in ``exports_dir/export-<id>.conf`` (written atomically)
    and is loaded with ``AddExport``/``UpdateExport(file, "EXPORT(Export_Id=<id>)")``.
    ``active_window`` (seconds) bounds how old a client's last request may be for
    :meth:`connected_clients` to still report it (None: any client ganesha still tracks).
    """

    # ganesha lets one export admin operation run at a time and refuses the others with
    # "another export admin operation is in progress, try again later"
    BUSY_RETRIES = 20
    BUSY_SLEEP = 0.25
    # exports per AddExport call at start-up: 100 took 9 s under emulation, and one call
    # of 500 outlived its reply timeout (every export was then reported not live)
    ADD_BATCH = 50

    def __init__(
        self,
        runner: Runner,
        exports_dir: str | os.PathLike[str],
        dbus_address: str | None = None,
        *,
        active_window: float | None = 600.0,
        reply_timeout: float = 30.0,
        unit: str | None = MAIN_UNIT["ganesha"],
    ) -> None:
        self.runner = runner
        self.unit = unit  # its systemd unit (None: not run by systemd, a test's own)
        self.exports_dir = Path(exports_dir).absolute()
        self.dbus_address = dbus_address
        self.active_window = active_window
        self.reply_timeout = reply_timeout

    # -- DBus plumbing -------------------------------------------------------------------

    def _call(self, obj: str, method: str, *args: str, timeout: float | None = None) -> str:
        for attempt in range(self.BUSY_RETRIES):
            try:
                return self._call_once(obj, method, *args, timeout=timeout)
            except GaneshaRefused as exc:
                if "try again later" not in exc.text or attempt == self.BUSY_RETRIES - 1:
                    raise
                time.sleep(self.BUSY_SLEEP)
        raise AssertionError("unreachable")

    def _call_once(self, obj: str, method: str, *args: str,
                   timeout: float | None = None) -> str:
        bus = f"--bus={self.dbus_address}" if self.dbus_address else "--system"
        wait = timeout or self.reply_timeout
        argv = [
            "dbus-send", bus, "--print-reply", f"--reply-timeout={int(wait * 1000)}",
            f"--dest={DBUS_DEST}", obj, method, *args,
        ]  # fmt: skip
        try:
            return self.runner.run(argv, timeout=wait + 15).stdout
        except CommandError as exc:
            err = (exc.result.stderr or exc.result.stdout).strip()
            short = method.rsplit(".", 1)[-1]
            m = _ERROR_LINE.fullmatch(err)
            if m is None:
                # "Failed to open connection to "system" message bus: ..." and the like
                raise Unavailable(
                    f"nfs-ganesha is not reachable on DBus ({err or 'dbus-send failed'}); "
                    "is dbus running?"
                ) from exc
            name, text = m.group(1), m.group(2)
            if name == "org.freedesktop.DBus.Error.AccessDenied":
                raise Unavailable(
                    "the DBus policy does not let this user call nfs-ganesha (ZDS must run "
                    "as root; nfs-ganesha's /etc/dbus-1/system.d/nfs-ganesha-dbus.conf "
                    f"allows root only): {text.strip()}"
                ) from exc
            if name == "org.freedesktop.DBus.Error.NoReply":
                raise GaneshaNoReply(
                    f"nfs-ganesha is not running or not answering on DBus ({text.strip()})"
                ) from exc
            if name in _DOWN_ERRORS:
                raise Unavailable(
                    f"nfs-ganesha is not running or not answering on DBus ({text.strip()})"
                ) from exc
            raise GaneshaRefused(short, name, text) from exc

    def _parse(self, method: str, parser: Callable[[str], _T], text: str) -> _T:
        try:
            return parser(text)
        except (ValueError, IndexError) as exc:
            raise HostCommandFailed(
                f"cannot read nfs-ganesha's {method} reply: {exc}", detail={"reply": text[:2000]}
            ) from exc

    def _show_exports(self) -> list[ExportActivity]:
        text = self._call(EXPORT_MGR, f"{IF_EXPORT_MGR}.ShowExports")
        return self._parse("ShowExports", parse_show_exports, text)[1]

    # -- GaneshaHost -----------------------------------------------------------------------

    def render(self, spec: ExportSpec) -> str:
        return render_export_block(spec)

    def available(self) -> bool:
        """org.freedesktop.DBus.Peer.Ping, which libdbus answers for ganesha: a constant
        cost, where ShowExports grows with the number of exports."""
        try:
            self._call(EXPORT_MGR, "org.freedesktop.DBus.Peer.Ping")
        except (Unavailable, GaneshaRefused):
            return False
        return True

    def restart_stuck(self) -> bool:
        # `systemctl is-active` prints one word: active, activating, inactive, failed...
        if self.unit is None:
            return False
        try:
            state = self.runner.run(["systemctl", "is-active", self.unit], check=False)
        except ZdsError:
            return False
        if state.stdout.strip() != "active":
            return False
        self.runner.run(["systemctl", "restart", self.unit], timeout=180)
        return True

    def list_exports(self) -> list[LiveExport]:
        return sorted((LiveExport(r.export_id, r.path) for r in self._show_exports()
                       if r.export_id != 0), key=lambda e: e.export_id)

    def get_export(self, export_id: int) -> ExportDisplay | None:
        check_export_id(export_id)
        try:
            text = self._call(EXPORT_MGR, f"{IF_EXPORT_MGR}.DisplayExport", f"uint16:{export_id}")
        except GaneshaRefused as exc:
            if "not found" in exc.text:
                return None
            raise
        return self._parse("DisplayExport", parse_display_export, text)

    def rendered(self, export_id: int) -> str | None:
        if pending_mark(self._file(export_id)).exists():
            return None
        return read_text_or_none(self._file(export_id))

    def add_export(self, spec: ExportSpec) -> None:
        """Add live; an export already live under this id (same path) is updated instead.

        Two DBus calls (ShowExports, AddExport) whatever the number of exports; the
        per-export look-ups that explain a refusal run only after one."""
        s = check_spec(spec)
        text = render_export_block(s)
        self._check_path(s)
        rows = {r.export_id: r for r in self._show_exports() if r.export_id != 0}
        self._check_unique(s, rows)
        if s.export_id in rows:
            self._apply_explained(s, text, "UpdateExport")
            return
        try:
            self._apply_explained(s, text, "AddExport")
        except GaneshaRefused as exc:
            if "already active" not in exc.text:
                raise
            self._apply_explained(s, text, "UpdateExport")  # added meanwhile by someone else

    def add_exports(self, specs: Sequence[ExportSpec]) -> dict[int, ZdsError]:
        """One ShowExports, one AddExport per :attr:`ADD_BATCH` blocks, one ShowExports to
        see what took: a constant number of calls per 50 exports, not one per export.

        Whatever the batch did not make live cleanly (a block ganesha skipped, refused
        or reported errors for, or the rest of the batch after a hard error) is added
        again one by one, so each failure is :meth:`add_export`'s precise one."""
        failed: dict[int, ZdsError] = {}
        rows = {r.export_id: r for r in self._show_exports() if r.export_id != 0}
        ready: list[tuple[ExportSpec, str]] = []
        updates: list[ExportSpec] = []
        for spec in specs:
            try:
                s = check_spec(spec)
                self._check_path(s)
                self._check_unique(s, rows)
                text = render_export_block(s)
            except ZdsError as exc:
                failed[spec.export_id] = exc
                continue
            if s.export_id in rows:
                updates.append(s)
            else:
                ready.append((s, text))
                # later blocks of the batch must not take this one's path either
                rows[s.export_id] = ExportActivity(s.export_id, s.path, frozenset(), 0.0)
        for s in updates:
            try:
                self._apply_explained(s, render_export_block(s), "UpdateExport")
            except ZdsError as exc:
                failed[s.export_id] = exc
        if not ready:
            return failed
        olds = {s.export_id: read_text_or_none(self._file(s.export_id)) for s, _ in ready}
        for s, text in ready:
            write_atomic(self._file(s.export_id), text)
        bad: set[int] = set()
        for k in range(0, len(ready), self.ADD_BATCH):
            bad |= self._add_batch(ready[k:k + self.ADD_BATCH])
        live = {r.export_id for r in self._show_exports()}
        retry = {s.export_id for s, _ in ready if s.export_id not in live or s.export_id in bad}
        for s, _text in ready:
            if s.export_id not in retry:
                continue
            restore_file(self._file(s.export_id), olds[s.export_id])
            try:
                if s.export_id in live:
                    self._remove_live(s.export_id)
                self.add_export(s)
            except ZdsError as exc:
                failed[s.export_id] = exc
        return failed

    def _add_batch(self, chunk: Sequence[tuple[ExportSpec, str]]) -> set[int]:
        """One AddExport of ``chunk``'s blocks from one file; returns the export ids
        ganesha reported errors for (all of them when it erred where we cannot place).

        Its reply may take a while: under emulation ganesha adds ~11 exports a second,
        so a chunk gets a second per block on top of the usual reply timeout. A reply
        that still does not come in time is not taken as "down": ganesha may be adding
        them yet, so it is waited for and ShowExports says what took."""
        batch, starts = _batch_text(chunk)
        fd, tmp = tempfile.mkstemp(prefix=".batch-", suffix=".conf", dir=self._dir())
        try:
            with os.fdopen(fd, "w") as f:
                f.write(batch)
            os.chmod(tmp, 0o644)
            try:
                reply = self._call(EXPORT_MGR, f"{IF_EXPORT_MGR}.AddExport", f"string:{tmp}",
                                   "string:EXPORT(Export_Id=*)",
                                   timeout=self.reply_timeout + 1.0 * len(chunk))
                _summary, errors = self._parse("AddExport", parse_export_message, reply)
            except GaneshaRefused:
                errors = []  # a hard error part-way: what is live is checked after
            except GaneshaNoReply:
                if not self._answers_again(self.reply_timeout + 1.0 * len(chunk)):
                    raise
                errors = []
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        bad = {eid for eid in (_errors_at(e, tmp, starts) for e in errors) if eid}
        if errors and not bad:
            bad = {s.export_id for s, _ in chunk}  # errors we cannot place: redo them all
        return bad

    def _answers_again(self, within: float) -> bool:
        """Whether ganesha answers a Ping again within ``within`` seconds (it serves one
        DBus request at a time, so a long AddExport delays the next call's answer)."""
        deadline = time.monotonic() + within
        while True:
            if self.available():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(1.0)

    def update_export(self, spec: ExportSpec) -> None:
        s = check_spec(spec)
        text = render_export_block(s)
        live = self.get_export(s.export_id)
        if live is None:
            raise NotFound(f"NFS export {s.export_id} is not live in nfs-ganesha")
        self._check_same_path(s, live.path)
        self._apply_explained(s, text, "UpdateExport")

    def remove_export(self, export_id: int) -> None:
        check_export_id(export_id)
        self._remove_live(export_id)
        self._file(export_id).unlink(missing_ok=True)

    def activity(self) -> Activity:
        rows = self._show_exports()
        text = self._call(CLIENT_MGR, f"{IF_CLIENT_MGR}.ShowClients")
        now, clients = self._parse("ShowClients", parse_show_clients, text)
        return Activity(now, {r.export_id: r for r in rows}, tuple(clients))

    def connected_clients(self, export_id: int) -> list[str]:
        """:func:`active_clients` with the CLIENT matches ganesha resolved for the export
        (host names as addresses), within ``active_window``."""
        check_export_id(export_id)
        act = self.activity()
        row = act.exports.get(export_id)
        if row is None or not row.protocols_used:
            return []
        shown = self.get_export(export_id)
        if shown is None:
            return []
        return active_clients(act, export_id, shown.clients, self.active_window)

    # -- helpers -----------------------------------------------------------------------------

    def _dir(self) -> Path:
        self.exports_dir.mkdir(parents=True, exist_ok=True)
        return self.exports_dir

    def _file(self, export_id: int) -> Path:
        return self.exports_dir / export_file_name(export_id)

    def _check_path(self, s: ExportSpec) -> None:
        if not os.path.isdir(s.path):
            raise Conflict(
                f"cannot export {s.path}: no such directory on this host (is the dataset "
                "mounted?)"
            )

    @staticmethod
    def _check_unique(s: ExportSpec, rows: Mapping[int, ExportActivity]) -> None:
        """An export keeps its path; a path is served by one export only."""
        live = rows.get(s.export_id)
        if live is not None:
            Ganesha._check_same_path(s, live.path)
        for r in rows.values():
            if r.export_id != s.export_id and r.path == s.path:
                raise Conflict(f"{s.path} is already exported by live NFS export {r.export_id}")

    @staticmethod
    def _check_same_path(s: ExportSpec, live_path: str) -> None:
        if live_path != s.path:
            raise Conflict(
                f"NFS export {s.export_id} already serves {live_path}; an export's path "
                f"cannot change to {s.path} (remove it and add a new one)"
            )

    def _apply_explained(self, s: ExportSpec, text: str, method: str) -> None:
        """:meth:`_apply`; when ganesha refuses the block, say why if another export holds
        the same pseudo path (ganesha only answers "invalid param value")."""
        try:
            self._apply(s, text, method)
        except GaneshaRefused as exc:
            if "already active" in exc.text:
                raise
            others = [r for r in self._show_exports() if r.export_id not in (0, s.export_id)]
            for r in others:
                shown = self.get_export(r.export_id)
                if shown is not None and shown.pseudo == s.pseudo:
                    raise Conflict(
                        f"pseudo path {s.pseudo} is already used by live NFS export "
                        f"{r.export_id} ({r.path})"
                    ) from exc
            raise

    def _apply(self, s: ExportSpec, text: str, method: str) -> None:
        """Write the file, load it with ``method``; on any failure put the old file back
        (and the old live state, when ganesha took the new block only in part)."""
        path = self._file(s.export_id)
        old = read_text_or_none(path)
        mark = pending_mark(path)
        write_atomic(mark, "")  # until ganesha took the block (a crash leaves it)
        write_atomic(path, text)
        try:
            reply = self._call(
                EXPORT_MGR, f"{IF_EXPORT_MGR}.{method}", f"string:{path}",
                f"string:EXPORT(Export_Id={s.export_id})",
            )  # fmt: skip
            _summary, errors = self._parse(method, parse_export_message, reply)
        except BaseException:
            restore_file(path, old)
            mark.unlink(missing_ok=True)
            raise
        mark.unlink(missing_ok=True)
        if errors:
            restore_file(path, old)
            if method == "AddExport":
                self._remove_live(s.export_id)
            elif old is not None:
                self._call(
                    EXPORT_MGR, f"{IF_EXPORT_MGR}.UpdateExport", f"string:{path}",
                    f"string:EXPORT(Export_Id={s.export_id})",
                )  # fmt: skip
            raise InvalidInput(
                f"nfs-ganesha could not apply export {s.export_id} as asked: "
                + "; ".join(e.split("): ", 1)[-1] for e in errors),
                detail={"ganesha_errors": errors},
            )

    def _remove_live(self, export_id: int) -> None:
        try:
            self._call(EXPORT_MGR, f"{IF_EXPORT_MGR}.RemoveExport", f"uint16:{export_id}")
        except GaneshaRefused as exc:
            if "not found" not in exc.text:
                raise


def _batch_text(ready: Sequence[tuple[ExportSpec, str]]) -> tuple[str, list[tuple[int, int]]]:
    """The blocks one after another, and (first line, export id) of each, to place the
    "Config File (FILE:LINE)" of an error in its block."""
    parts: list[str] = []
    starts: list[tuple[int, int]] = []
    line = 1
    for s, text in ready:
        starts.append((line, s.export_id))
        parts.append(text)
        line += text.count("\n")
    return "".join(parts), starts


_CONFIG_AT = re.compile(r"Config File \(([^:()]+):(\d+)\)")


def _errors_at(error: str, file: str, starts: Sequence[tuple[int, int]]) -> int | None:
    """The export id whose block holds the line an AddExport error names, if it does."""
    m = _CONFIG_AT.search(error)
    if m is None or m.group(1) != file:
        return None
    line = int(m.group(2))
    found = None
    for first, eid in starts:
        if first <= line:
            found = eid
    return found


def read_text_or_none(path: Path) -> str | None:
    """The file's text; None when there is no file."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def pending_mark(path: Path) -> Path:
    """The mark that says ``path`` was written for a server that has not taken it yet."""
    return path.with_name(f".{path.name}.pending")


def restore_file(path: Path, old: str | None) -> None:
    """Put back the file as it was (``old`` None: there was none)."""
    if old is None:
        path.unlink(missing_ok=True)
    else:
        write_atomic(path, old)


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old or the new file, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
