"""``dbus-send --print-reply`` output, parsed into Python values.

ZDS calls DBus services (nfs-ganesha) with the ``dbus-send`` tool through the Runner, so
every call is an argv with a timeout like any other host command and unit tests replay
captured replies (see docs/architecture.md for why not a DBus library). A reply looks
like this (ganesha's ShowClients, abridged)::

    method return time=1795314699.38 sender=:1.0 -> destination=:1.21 serial=80 reply_serial=2
       struct {
          uint64 1795314699
          uint64 384763027
       }
       array [
          struct {
             string "::ffff:127.0.0.1"
             boolean true
          }
       ]

struct and dict entry -> tuple, array -> list, integers -> int, boolean -> bool,
string/object path/signature -> str, variant -> its value.
"""

from __future__ import annotations

import re

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


def as_tuple(v: DBusValue) -> tuple[DBusValue, ...]:
    if not isinstance(v, tuple):
        raise ValueError(f"expected a struct, got {v!r}")
    return v


def as_list(v: DBusValue) -> list[DBusValue]:
    if not isinstance(v, list):
        raise ValueError(f"expected an array, got {v!r}")
    return v


def as_int(v: DBusValue) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"expected an integer, got {v!r}")
    return v


def as_str(v: DBusValue) -> str:
    if not isinstance(v, str):
        raise ValueError(f"expected a string, got {v!r}")
    return v


def as_timestamp(v: DBusValue) -> float:
    sec, nsec = as_tuple(v)
    return as_int(sec) + as_int(nsec) / 1e9
