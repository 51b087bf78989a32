"""Probe parameters: parsing and formatting of sizes, lists and overrides.

Overrides arrive from the API or the CLI as JSON values or strings ("64m", "1,2,4",
"true"). Everything is validated here before it reaches a fio job file: a value that is
not what the parameter expects raises ``InvalidInput`` and nothing runs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal

from appliance.errors import InvalidInput

ParamValue = int | float | str | bool | list[int]
Params = dict[str, ParamValue]
ParamKind = Literal[
    "int", "seconds", "size", "bool", "int_list", "size_list", "choice", "percent"
]

_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE_RE = re.compile(r" *([0-9]+) *([kmgt]?)(?:i?b)? *", re.IGNORECASE)
# the bounds of each whole-number kind, and of a list's items and length
INT_RANGES: dict[str, tuple[int, int]] = {"int": (1, 1_000_000), "seconds": (0, 86_400),
                                          "percent": (0, 100)}
LIST_ITEM_RANGE = (1, 100_000)
MAX_LIST = 64
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


def parse_size(value: object, what: str) -> int:
    """Bytes from an int or a string like ``64m``, ``1GiB``, ``100k`` (binary units, as fio)."""
    if isinstance(value, bool):
        raise InvalidInput(f"{what}: expected a size such as 64m or 1g, got {value!r}")
    if isinstance(value, int):
        size = value
    elif isinstance(value, str):
        m = _SIZE_RE.fullmatch(value)
        if not m:
            raise InvalidInput(f"{what}: expected a size such as 64m or 1g, got {value!r}")
        size = int(m.group(1)) * _SIZE_UNITS[m.group(2).lower()]
    else:
        raise InvalidInput(f"{what}: expected a size such as 64m or 1g, got {value!r}")
    if size <= 0:
        raise InvalidInput(f"{what}: must be greater than zero")
    return size


def fio_size(nbytes: int) -> str:
    """The shortest exact fio spelling of a byte count: 65536 -> '64k', 3 -> '3'."""
    for unit in ("t", "g", "m", "k"):
        mult = _SIZE_UNITS[unit]
        if nbytes % mult == 0:
            return f"{nbytes // mult}{unit}"
    return str(nbytes)


def human_size(nbytes: int) -> str:
    """'100KiB', '1MiB' (labels and plots)."""
    for unit, mult in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= mult and nbytes % mult == 0:
            return f"{nbytes // mult}{unit}"
    return f"{nbytes}B"


def _parse_int(value: object, what: str, minimum: int, maximum: int) -> int:
    if isinstance(value, bool):
        raise InvalidInput(f"{what}: expected a whole number, got {value!r}")
    if isinstance(value, int):
        n = value
    elif isinstance(value, str) and value.strip().isdigit():
        n = int(value.strip())
    else:
        raise InvalidInput(f"{what}: expected a whole number, got {value!r}")
    if not minimum <= n <= maximum:
        raise InvalidInput(f"{what}: must be between {minimum} and {maximum}, got {n}")
    return n


def _parse_list(value: object, what: str) -> list[object]:
    if isinstance(value, str):
        items: list[object] = [v for v in value.replace(" ", "").split(",") if v]
    elif isinstance(value, list | tuple):
        items = list(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        items = [value]
    else:
        raise InvalidInput(f"{what}: expected a list such as 1,2,4, got {value!r}")
    if not items:
        raise InvalidInput(f"{what}: the list is empty")
    if len(items) > MAX_LIST:
        raise InvalidInput(f"{what}: at most {MAX_LIST} entries")
    return items


def parse_bool(value: object, what: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in (*TRUE_WORDS, *FALSE_WORDS):
        return value.lower() in TRUE_WORDS
    raise InvalidInput(f"{what}: expected true or false, got {value!r}")


def coerce(kind: ParamKind, value: object, what: str,
           choices: tuple[str, ...] = ()) -> ParamValue:
    """One override value, validated and normalised to its canonical type."""
    if kind in INT_RANGES:
        return _parse_int(value, what, *INT_RANGES[kind])
    if kind == "size":
        return parse_size(value, what)
    if kind == "bool":
        return parse_bool(value, what)
    if kind == "int_list":
        return [_parse_int(v, what, *LIST_ITEM_RANGE) for v in _parse_list(value, what)]
    if kind == "size_list":
        return [parse_size(v, what) for v in _parse_list(value, what)]
    if kind == "choice":
        if not isinstance(value, str) or value not in choices:
            raise InvalidInput(f"{what}: expected one of {', '.join(choices)}, got {value!r}")
        return value
    raise AssertionError(kind)  # pragma: no cover


def merge(defaults: Mapping[str, ParamValue], overrides: Mapping[str, ParamValue]) -> Params:
    out: Params = dict(defaults)
    out.update(overrides)
    return out
