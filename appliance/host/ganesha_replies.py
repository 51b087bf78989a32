"""nfs-ganesha's DBus replies, read: ShowExports, ShowClients, DisplayExport and the
message of AddExport/UpdateExport (the generic reader of dbus-send's output is
appliance/host/dbus_send.py). A sample of each reply is above its parser."""

from __future__ import annotations

import re
from dataclasses import dataclass

from appliance.host.dbus_send import (
    DBusValue,
    as_int,
    as_list,
    as_str,
    as_timestamp,
    as_tuple,
    parse_dbus_reply,
)

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
