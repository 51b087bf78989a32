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
  UpdateExport(s file, s expr) -> s message
  RemoveExport(q id)                                        (error if unknown)
  ShowExports() -> (tt) stats epoch, a(q id, s path, ((sb)x8) protocols used, (tt) last)
  DisplayExport(q id) -> q id, s path, s pseudo, s tag, a(siyyiuuuuu) CLIENT matches
  /org/ganesha/nfsd/ClientMgr org.ganesha.nfsd.clientmgr.ShowClients()
      -> (tt) now, a(s address, ((sb)x8) protocols used, (tt) last request)
Config problems ganesha can skip (an unresolvable client) do NOT fail Add/UpdateExport:
they come back as "Errors found:" in the message and the export is live without them;
the adapter treats that as a failure and rolls back.

Host packages: dbus-bin (dbus-send), dbus + dbus-daemon (the system bus), nfs-ganesha,
nfs-ganesha-vfs, rpcbind (NFSv3); ZFS datasets exported need acltype=posixacl.
"""
from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, TypeVar

from appliance.errors import Conflict, HostCommandFailed, InvalidInput, NotFound, Unavailable
from appliance.host.run import CommandError, Runner

_T = TypeVar("_T")


@dataclass(frozen=True)
class ClientRule:
    """Hosts/CIDRs given one access type (ganesha CLIENT block)."""

    clients: tuple[str, ...]
    access: Literal["RW", "RO"]


@dataclass(frozen=True)
class ExportSpec:
    export_id: int  # stable forever; >= 100 (lower ids are ganesha's and the admin's)
    path: str  # mounted dataset path
    pseudo: str  # NFSv4 pseudo path (ZDS uses the same as ``path``)
    protocols: tuple[int, ...]  # (3,) or (4,): never both on one path (ESXi)
    clients: tuple[ClientRule, ...]
    squash: str = "No_Root_Squash"  # ESXi needs root access
    sec: str = "sys"


@dataclass(frozen=True)
class LiveExport:
    export_id: int
    path: str
    pseudo: str


class GaneshaHost(Protocol):
    def available(self) -> bool:
        """True when ganesha answers on DBus."""

    def list_exports(self) -> list[LiveExport]:
        """Exports ganesha serves now (without the pseudo root, id 0)."""

    def rendered(self, export_id: int) -> str | None:
        """The export block ZDS last wrote for ``export_id`` (None if no file)."""

    def add_export(self, spec: ExportSpec) -> None: ...

    def update_export(self, spec: ExportSpec) -> None:
        """Change clients/access live; connected clients keep their mounts."""

    def remove_export(self, export_id: int) -> None:
        """Remove live and delete the file. Unknown id: no error."""

    def connected_clients(self, export_id: int) -> list[str]:
        """Client addresses with state/IO on this export now (refuse delete if any)."""


# ---------------------------------------------------------------------------------------
# Export block rendering (pure; the engine and the fake use it too)
# ---------------------------------------------------------------------------------------

MIN_EXPORT_ID = 100
MAX_EXPORT_ID = 65535  # ganesha export ids are DBus uint16
SQUASH_VALUES = ("No_Root_Squash", "Root_Squash", "All_Squash", "Root_Id_Squash")
SEC_VALUES = ("sys", "krb5", "krb5i", "krb5p", "none")

# Absolute path of plain components: letters, digits and . _ : + - only. Everything that
# means something to ganesha's config lexer (quotes, braces, ';', ',', '=', '#', '$',
# whitespace, backslash, non-ASCII) is outside this set.
_PATH = re.compile(r"^(?:/[A-Za-z0-9._:+-]+)+$")
_PATH_MAX = 1024
_HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"^(?=.{{1,253}}$){_HOST_LABEL}(?:\.{_HOST_LABEL})*$")
_CLIENT_CHARS = re.compile(r"[A-Za-z0-9.:/-]{1,253}")


def check_export_path(value: object, what: str = "path") -> str:
    """An absolute, normalised path safe to put between quotes in a ganesha block."""
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"export {what} must be a non-empty absolute path")
    if len(value) > _PATH_MAX:
        raise InvalidInput(f"export {what} is longer than {_PATH_MAX} characters")
    if not _PATH.fullmatch(value):
        raise InvalidInput(
            f"export {what} {value!r} is not allowed: use an absolute path of letters, "
            "digits and . _ : + - (no spaces, quotes, braces, ';', '#', '$' or '//')"
        )
    if any(part in (".", "..") for part in value.split("/")):
        raise InvalidInput(f"export {what} {value!r} must not contain '.' or '..' components")
    return value


def check_client(value: object) -> str:
    """One CLIENT match as ganesha takes it unquoted: IP, CIDR, hostname or ``*``.

    Returns the canonical text (IPv6 compressed, CIDR host bits cleared).
    """
    if not isinstance(value, str) or not value:
        raise InvalidInput("an NFS client must be a non-empty string")
    if value == "*":
        return value
    if not _CLIENT_CHARS.fullmatch(value):  # also keeps out IPv6 zone ids ("fe80::1%x;}")
        raise InvalidInput(
            f"invalid NFS client {value!r}: only letters, digits and . : / - are allowed"
        )
    try:
        if "/" in value:
            return str(ipaddress.ip_network(value, strict=False))
        return str(ipaddress.ip_address(value))
    except ValueError:
        pass
    if _HOSTNAME.fullmatch(value) and not value.replace(".", "").isdigit():
        return value.lower()
    raise InvalidInput(
        f"invalid NFS client {value!r}: expected an IP address, a CIDR network "
        "(e.g. 192.0.2.0/24), a hostname or '*'"
    )


def check_spec(spec: ExportSpec) -> ExportSpec:
    """Validate every field of ``spec``; return it with clients in canonical form.

    Raises ``InvalidInput`` (nothing is written) for anything that could not be rendered
    safely or that ZDS never serves (both NFSv3 and NFSv4 on one path, id < 100...).
    """
    if isinstance(spec.export_id, bool) or not isinstance(spec.export_id, int):
        raise InvalidInput("export id must be an integer")
    if not MIN_EXPORT_ID <= spec.export_id <= MAX_EXPORT_ID:
        raise InvalidInput(
            f"export id {spec.export_id} is outside {MIN_EXPORT_ID}..{MAX_EXPORT_ID} "
            "(lower ids belong to ganesha and the admin)"
        )
    path = check_export_path(spec.path, "path")
    pseudo = check_export_path(spec.pseudo, "pseudo path")
    protocols = tuple(spec.protocols)
    if protocols not in ((3,), (4,)):
        raise InvalidInput(
            f"export protocols {list(protocols)} not allowed: serve a path over NFSv3 or "
            "NFSv4 (4.1), never both (ESXi corrupts locks across versions)"
        )
    if spec.squash not in SQUASH_VALUES:
        raise InvalidInput(f"squash {spec.squash!r} is not one of {', '.join(SQUASH_VALUES)}")
    if spec.sec not in SEC_VALUES:
        raise InvalidInput(f"sec {spec.sec!r} is not one of {', '.join(SEC_VALUES)}")
    rules: list[ClientRule] = []
    seen: set[str] = set()
    for rule in spec.clients:
        if rule.access not in ("RW", "RO"):
            raise InvalidInput(f"client access {rule.access!r} must be RW or RO")
        if not rule.clients:
            raise InvalidInput("a client rule needs at least one client")
        canon: list[str] = []
        for client in rule.clients:
            c = check_client(client)
            if c in seen:
                raise InvalidInput(f"NFS client {c} appears in more than one rule")
            seen.add(c)
            canon.append(c)
        rules.append(ClientRule(tuple(canon), rule.access))
    return ExportSpec(
        export_id=spec.export_id,
        path=path,
        pseudo=pseudo,
        protocols=protocols,
        clients=tuple(rules),
        squash=spec.squash,
        sec=spec.sec,
    )


def render_export_block(spec: ExportSpec) -> str:
    """The ganesha ``EXPORT { ... }`` block for ``spec`` (validated first).

    Nobody gets access from the export level (``Access_Type = None``); each client rule
    becomes a ``CLIENT`` sub-block with RW or RO. NFSv3 exports are TCP-only (ESXi uses
    TCP; UDP only adds a second code path). The FSAL is VFS (ZFS datasets need
    ``acltype=posixacl``, set by the ZFS side, or every operation fails with NOTSUPP).
    NFSv4 exports get no delegations (ESXi/KVM hosts share files between clients).

    Example::

        EXPORT {
            Export_Id = 101;
            Path = "/tank/ds1";
            Pseudo = "/tank/ds1";
            Protocols = 3;
            Transports = TCP;
            Access_Type = None;
            Squash = No_Root_Squash;
            SecType = sys;
            FSAL {
                Name = VFS;
            }
            CLIENT {
                Clients = 192.0.2.0/24, esx1.example.com;
                Access_Type = RW;
            }
        }
    """
    s = check_spec(spec)
    lines = [
        f"# Managed by ZDS: export {s.export_id}. Do not edit; the API rewrites this file.",
        "EXPORT {",
        f"    Export_Id = {s.export_id};",
        f'    Path = "{s.path}";',
        f'    Pseudo = "{s.pseudo}";',
        f"    Protocols = {', '.join(str(p) for p in s.protocols)};",
        "    Transports = TCP;",
        "    Access_Type = None;",
        f"    Squash = {s.squash};",
        f"    SecType = {s.sec};",
    ]
    if 4 in s.protocols:
        lines.append("    Delegations = None;")
    lines += ["    FSAL {", "        Name = VFS;", "    }"]
    for rule in s.clients:
        lines += [
            "    CLIENT {",
            f"        Clients = {', '.join(rule.clients)};",
            f"        Access_Type = {rule.access};",
            "    }",
        ]
    lines.append("}")
    return "\n".join(lines) + "\n"


def export_file_name(export_id: int) -> str:
    return f"export-{export_id}.conf"


# ---------------------------------------------------------------------------------------
# dbus-send --print-reply output
# ---------------------------------------------------------------------------------------

DBusValue = int | float | bool | str | tuple["DBusValue", ...] | list["DBusValue"]

_LINE_START = re.compile(
    r'^(?:string "|object path "|signature "|variant |'
    r"(?:u?int(?:16|32|64)|byte|boolean|double|unix_fd) |"
    r"struct \{$|array \[$|dict entry\($|[}\])]$)"
)


def _logical_lines(text: str) -> list[str]:
    """Stripped value lines; a string spanning several lines (dbus-send does not escape
    newlines or quotes) is joined back: it ends at a line ending in '"' that is followed
    by the start of another value or a closing bracket."""
    raw = text.splitlines()
    if raw and raw[0].startswith("method return"):
        raw = raw[1:]
    out: list[str] = []
    i = 0
    while i < len(raw):
        line = raw[i].strip()
        i += 1
        if not line:
            continue
        body = line[len("variant") :].lstrip() if line.startswith("variant ") else line
        if body.startswith(('string "', 'object path "', 'signature "')):
            while not (
                len(body) > body.index('"') + 1
                and body.endswith('"')
                and (i >= len(raw) or _LINE_START.match(raw[i].strip()))
            ):
                if i >= len(raw):
                    raise ValueError(f"unterminated string in dbus-send output: {line[:60]!r}")
                line += "\n" + raw[i]
                body += "\n" + raw[i]
                i += 1
        out.append(line)
    return out


def _parse_at(lines: list[str], i: int) -> tuple[DBusValue, int]:
    line = lines[i]
    if line.startswith("variant "):
        lines[i] = line[len("variant") :].lstrip()
        return _parse_at(lines, i)
    closers = {"struct {": "}", "array [": "]", "dict entry(": ")"}
    if line in closers:
        items: list[DBusValue] = []
        i += 1
        while i < len(lines) and lines[i] != closers[line]:
            value, i = _parse_at(lines, i)
            items.append(value)
        if i >= len(lines):
            raise ValueError(f"unclosed {line!r} in dbus-send output")
        return (items if line == "array [" else tuple(items)), i + 1
    kind, _, rest = line.partition(" ")
    if kind in ("string", "signature") or line.startswith("object path "):
        return rest[rest.index('"') + 1 : -1], i + 1
    if kind in ("byte", "int16", "uint16", "int32", "uint32", "int64", "uint64", "unix_fd"):
        return int(rest), i + 1
    if kind == "boolean":
        return rest == "true", i + 1
    if kind == "double":
        return float(rest), i + 1
    raise ValueError(f"unexpected dbus-send output line: {line[:60]!r}")


def parse_dbus_reply(text: str) -> list[DBusValue]:
    """The values of a ``dbus-send --print-reply`` answer, in order.

    struct and dict entry -> tuple, array -> list, integers -> int, boolean -> bool,
    string/object path/signature -> str, variant -> its value.
    """
    lines = _logical_lines(text)
    values: list[DBusValue] = []
    i = 0
    while i < len(lines):
        value, i = _parse_at(lines, i)
        values.append(value)
    return values


def _tuple(v: DBusValue) -> tuple[DBusValue, ...]:
    if not isinstance(v, tuple):
        raise ValueError(f"expected a struct, got {v!r}")
    return v


def _list(v: DBusValue) -> list[DBusValue]:
    if not isinstance(v, list):
        raise ValueError(f"expected an array, got {v!r}")
    return v


def _int(v: DBusValue) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"expected an integer, got {v!r}")
    return v


def _str(v: DBusValue) -> str:
    if not isinstance(v, str):
        raise ValueError(f"expected a string, got {v!r}")
    return v


def _timestamp(v: DBusValue) -> float:
    sec, nsec = _tuple(v)
    return _int(sec) + _int(nsec) / 1e9


_FLAT_PROTOCOLS = ("NFSv3", "MNT", "NLMv4", "RQUOTA", "NFSv40", "NFSv41", "NFSv42", "9P")


def _used_protocols(middle: tuple[DBusValue, ...]) -> frozenset[str]:
    """The protocol flags of a ShowExports/ShowClients row: ganesha 4.x+ sends one struct
    of (name, used) pairs; older releases sent bare booleans in a fixed order."""
    used: set[str] = set()
    if len(middle) == 1 and isinstance(middle[0], tuple):
        for item in middle[0]:
            name, flag = _tuple(item)
            if flag is True:
                used.add(_str(name))
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
def parse_show_exports(text: str) -> tuple[float, list[ExportActivity]]:
    """ShowExports -> (stats epoch, rows). The last (tt) of a row is its last request."""
    values = parse_dbus_reply(text)
    stamp, rows = values[0], values[1]
    out: list[ExportActivity] = []
    for row in _list(rows):
        eid, path, *protos, last = _tuple(row)
        out.append(ExportActivity(_int(eid), _str(path), _used_protocols(tuple(protos)),
                                  _timestamp(last)))
    return _timestamp(stamp), out


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
    for row in _list(rows):
        addr, *protos, last = _tuple(row)
        out.append(ClientActivity(_str(addr), _used_protocols(tuple(protos)), _timestamp(last)))
    return _timestamp(stamp), out


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
    matches = tuple(_str(_tuple(c)[0]) for c in _list(clients))
    return ExportDisplay(_int(eid), _str(path), _str(pseudo), _str(tag), matches)


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
    message = _str(parse_dbus_reply(text)[0])
    summary, _, rest = message.partition("Errors found:")
    errors = [ln.strip() for ln in rest.splitlines() if ln.strip()]
    return summary.strip().rstrip("."), errors


# ---------------------------------------------------------------------------------------
# The real adapter
# ---------------------------------------------------------------------------------------

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
_ERROR_LINE = re.compile(r"^Error ([A-Za-z0-9_.]+): (.*)$", re.S)

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


class Ganesha:
    """nfs-ganesha through ``dbus-send`` (package dbus-bin) and export files.

    ``dbus_address`` selects a private bus (``unix:path=...``, tests); None means the
    system bus. Each export lives in ``exports_dir/export-<id>.conf`` (written atomically)
    and is loaded with ``AddExport``/``UpdateExport(file, "EXPORT(Export_Id=<id>)")``.
    ``active_window`` (seconds) bounds how old a client's last request may be for
    :meth:`connected_clients` to still report it (None: any client ganesha still tracks).
    """

    def __init__(
        self,
        runner: Runner,
        exports_dir: str | os.PathLike[str],
        dbus_address: str | None = None,
        *,
        active_window: float | None = 600.0,
        reply_timeout: float = 30.0,
    ) -> None:
        self.runner = runner
        self.exports_dir = Path(exports_dir).absolute()
        self.dbus_address = dbus_address
        self.active_window = active_window
        self.reply_timeout = reply_timeout

    # -- DBus plumbing -------------------------------------------------------------------

    def _call(self, obj: str, method: str, *args: str) -> str:
        bus = f"--bus={self.dbus_address}" if self.dbus_address else "--system"
        argv = [
            "dbus-send", bus, "--print-reply", f"--reply-timeout={int(self.reply_timeout * 1000)}",
            f"--dest={DBUS_DEST}", obj, method, *args,
        ]  # fmt: skip
        try:
            return self.runner.run(argv, timeout=self.reply_timeout + 15).stdout
        except CommandError as exc:
            err = (exc.result.stderr or exc.result.stdout).strip()
            short = method.rsplit(".", 1)[-1]
            m = _ERROR_LINE.match(err)
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

    def _display(self, export_id: int) -> ExportDisplay | None:
        try:
            text = self._call(EXPORT_MGR, f"{IF_EXPORT_MGR}.DisplayExport", f"uint16:{export_id}")
        except GaneshaRefused as exc:
            if "not found" in exc.text:
                return None
            raise
        return self._parse("DisplayExport", parse_display_export, text)

    # -- GaneshaHost -----------------------------------------------------------------------

    def available(self) -> bool:
        try:
            self._show_exports()
        except Unavailable:
            return False
        return True

    def list_exports(self) -> list[LiveExport]:
        """ShowExports, then DisplayExport for each export (the only call that gives the
        pseudo path), a few at a time: ~0.45 s per 100 exports here sequentially."""
        ids = sorted(r.export_id for r in self._show_exports() if r.export_id != 0)
        with ThreadPoolExecutor(max_workers=4) as pool:
            shown = list(pool.map(self._display, ids))
        # None: removed between the two calls
        return [LiveExport(d.export_id, d.path, d.pseudo) for d in shown if d is not None]

    def rendered(self, export_id: int) -> str | None:
        try:
            return self._file(export_id).read_text()
        except FileNotFoundError:
            return None

    def add_export(self, spec: ExportSpec) -> None:
        """Add live; an export already live under this id (same path) is updated instead.

        Two DBus calls on the way (ShowExports, AddExport), whatever the number of
        exports; the slower per-export look-up runs only to explain a refusal."""
        s = check_spec(spec)
        text = render_export_block(s)
        self._check_path(s)
        rows = {r.export_id: r for r in self._show_exports() if r.export_id != 0}
        if s.export_id in rows:
            self._check_same_path(s, rows[s.export_id].path)
            self._apply_explained(s, text, "UpdateExport")
            return
        for r in rows.values():
            if r.path == s.path:
                raise Conflict(
                    f"{s.path} is already exported by live NFS export {r.export_id}"
                )
        try:
            self._apply_explained(s, text, "AddExport")
        except GaneshaRefused as exc:
            if "already active" not in exc.text:
                raise
            self._apply_explained(s, text, "UpdateExport")  # added meanwhile by someone else

    def update_export(self, spec: ExportSpec) -> None:
        s = check_spec(spec)
        text = render_export_block(s)
        rows = {r.export_id: r for r in self._show_exports() if r.export_id != 0}
        if s.export_id not in rows:
            raise NotFound(f"NFS export {s.export_id} is not live in nfs-ganesha")
        self._check_same_path(s, rows[s.export_id].path)
        self._apply_explained(s, text, "UpdateExport")

    def remove_export(self, export_id: int) -> None:
        check_export_id(export_id)
        try:
            self._call(EXPORT_MGR, f"{IF_EXPORT_MGR}.RemoveExport", f"uint16:{export_id}")
        except GaneshaRefused as exc:
            if "not found" not in exc.text:
                raise
        self._file(export_id).unlink(missing_ok=True)

    def connected_clients(self, export_id: int) -> list[str]:
        """Clients that may be using ``export_id`` now, as far as ganesha can tell.

        ganesha does not track which client uses which export (NFSv3 is stateless and it
        does not keep a mount list). What it does keep: per export, the protocols used on
        it and the time of its last request (ShowExports); per client address, the
        protocols it used and its last request (ShowClients, never pruned until restart).
        So this returns the clients that (1) the export's CLIENT rules admit, (2) used
        the export's protocol family, (3) made a request within ``active_window``, and
        only if the export itself saw a request within that window. It can over-report a
        client that uses another export with the same rules (safe for "refuse delete");
        it misses a client that has been silent longer than the window.
        """
        check_export_id(export_id)
        rows = {r.export_id: r for r in self._show_exports()}
        row = rows.get(export_id)
        if row is None or not row.protocols_used:
            return []
        shown = self._display(export_id)
        if shown is None:
            return []
        text = self._call(CLIENT_MGR, f"{IF_CLIENT_MGR}.ShowClients")
        now, clients = self._parse("ShowClients", parse_show_clients, text)
        window = self.active_window
        if window is not None and now - row.last_activity > window:
            return []
        families = frozenset().union(
            *(names for names in _PROTOCOL_NAMES.values() if names & row.protocols_used)
        )
        found: set[str] = set()
        for c in clients:
            if not c.protocols_used & families:
                continue
            if window is not None and now - c.last_activity > window:
                continue
            if client_admitted(c.address, shown.clients):
                found.add(_client_address(c.address))
        return sorted(found)

    # -- helpers -----------------------------------------------------------------------------

    def _file(self, export_id: int) -> Path:
        return self.exports_dir / export_file_name(export_id)

    def _check_path(self, s: ExportSpec) -> None:
        if not os.path.isdir(s.path):
            raise Conflict(
                f"cannot export {s.path}: no such directory on this host (is the dataset "
                "mounted?)"
            )

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
            for e in self.list_exports():
                if e.export_id != s.export_id and e.pseudo == s.pseudo:
                    raise Conflict(
                        f"pseudo path {s.pseudo} is already used by live NFS export "
                        f"{e.export_id} ({e.path})"
                    ) from exc
            raise

    def _apply(self, s: ExportSpec, text: str, method: str) -> None:
        """Write the file, load it with ``method``; on any failure put the old file back
        (and the old live state, when ganesha took the new block only in part)."""
        path = self._file(s.export_id)
        old = self.rendered(s.export_id)
        _write_atomic(path, text)
        try:
            reply = self._call(
                EXPORT_MGR, f"{IF_EXPORT_MGR}.{method}", f"string:{path}",
                f"string:EXPORT(Export_Id={s.export_id})",
            )  # fmt: skip
            _summary, errors = self._parse(method, parse_export_message, reply)
        except BaseException:
            self._restore(path, old)
            raise
        if errors:
            self._restore(path, old)
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

    def _restore(self, path: Path, old: str | None) -> None:
        if old is None:
            path.unlink(missing_ok=True)
        else:
            _write_atomic(path, old)


def check_export_id(export_id: int) -> None:
    if isinstance(export_id, bool) or not isinstance(export_id, int):
        raise InvalidInput("export id must be an integer")
    if not 1 <= export_id <= MAX_EXPORT_ID:
        raise InvalidInput(f"export id {export_id} is outside 1..{MAX_EXPORT_ID}")


def _write_atomic(path: Path, text: str) -> None:
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
