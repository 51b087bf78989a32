"""Input validation. Everything a user sends passes through here before it reaches a
command line, a config file or a ZFS property; each check raises ``InvalidInput`` with a
message that says what is allowed.

Patterns are applied with ``fullmatch``: ``re.match`` with ``...$`` also accepts a
trailing newline ("g1\\n"). No check accepts a control character, not even where
surrounding blanks are trimmed (``has_control``).
"""

from __future__ import annotations

import ipaddress
import math
import re
import string
from fractions import Fraction

from appliance.errors import InvalidInput
from appliance.patterns import (
    anchored,
    avoiding,
    char_class,
    decimal_at_least,
    no_case,
    word_sets,
)

# Datastore/initiator-group names become ZFS dataset components, IQN suffixes, ganesha
# paths and libvirt pool names: the intersection of what all of them accept.
# No '_': RFC 3720 iSCSI names (the IQN ends in the datastore name) do not allow it.
# single dots between the other characters, alphanumeric ends (no "..", none at the ends);
# the OpenAPI document publishes this very pattern (one '?' and one '*': cheap to generate)
RESOURCE_NAME_PATTERN = anchored(r"[a-z0-9](?:(?:\.?[a-z0-9-])*\.?[a-z0-9])?")
RESOURCE_NAME_MAX = 63
_RESOURCE_NAME = re.compile(RESOURCE_NAME_PATTERN)
# zpool(8): begins with a letter; letters, digits, '_', '-', '.', ':'. We drop ':' and ' '.
_POOL_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,62}")
_POOL_RESERVED = ("mirror", "raidz", "draid", "spare", "log", "cache", "special", "dedup")
SNAPSHOT_NAME = r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}"
_SNAPSHOT_NAME = re.compile(SNAPSHOT_NAME)
# RFC 3720 3.2.6.3.1 iqn names, lowercased; rtslib-fb additionally wants two labels
# in the naming authority (iqn.2026-11.org.example), so we require that here.
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"  # RFC 1123: at most 63 characters
_IQN = re.compile(rf"iqn\.([0-9]{{4}})-([0-9]{{2}})\.{_LABEL}(?:\.{_LABEL})+(?::[a-z0-9.:-]+)?")
_HOSTNAME = re.compile(rf"(?=.{{1,253}}\Z){_LABEL}(?:\.{_LABEL})*", re.IGNORECASE)
# CHAP: RFC 1994 secrets are octets; we keep to printable ASCII without space, quotes or
# backslash so a secret can never break out of an esxcli line or a libvirt secret.
CHAP_CHARACTERS = frozenset(string.ascii_letters + string.digits + "!#%&()*+,./:;<=>?@[]^_{|}~-")
_CHAP_TEXT = re.compile(char_class(CHAP_CHARACTERS) + "+")
CHAP_SECRET_LENGTH = (12, 255)  # ESXi and Windows initiators: 12-16
CHAP_USER_MAX = 255
# An OpenSSH public key line: type, base64 blob, optional comment. No options prefix
# (command=, from=...): a key handed in from the hypervisor grants plain root login.
_SSH_KEY = re.compile(
    r"(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(?:256|384|521)|sk-ssh-ed25519@openssh\.com|"
    r"sk-ecdsa-sha2-nistp256@openssh\.com) [A-Za-z0-9+/]{16,8192}={0,3}(?: [ -~]{0,200})?")

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}
_SIZE = re.compile(r" *([0-9]+(?:\.[0-9]+)?) *([KMGTP]?)(?:I?B)? *", re.IGNORECASE)

MAX_IQN_BYTES = 223  # RFC 3720
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def has_control(value: object) -> bool:
    """True for a string holding a control character (C0 or DEL): newlines and tabs
    included, which ``str.strip`` would otherwise quietly drop."""
    return isinstance(value, str) and CONTROL.search(value) is not None


def resource_name(value: str, what: str = "name") -> str:
    """A datastore or initiator-group name: 1-63 of a-z 0-9 _ . -, alphanumeric ends."""
    if (not isinstance(value, str) or len(value) > RESOURCE_NAME_MAX
            or not _RESOURCE_NAME.fullmatch(value)):
        raise InvalidInput(
            f"invalid {what} {value!r}: use 1-63 lowercase letters, digits, '.' or '-', "
            "starting and ending with a letter or digit"
        )
    return value


UNIX_USER = r"[a-z_][a-z0-9_-]{0,31}"


def unix_user(value: str, what: str = "user") -> str:
    """A Unix login name (useradd's default rule: lowercase, digits, '_', '-')."""
    if not isinstance(value, str) or not re.fullmatch(UNIX_USER, value):
        raise InvalidInput(f"invalid {what} {value!r}: a Unix user name")
    return value


def pool_name(value: str) -> str:
    """A ZFS pool name (zpool(8) rules, without ':' and spaces)."""
    if not isinstance(value, str) or not _POOL_NAME.fullmatch(value):
        raise InvalidInput(
            f"invalid pool name {value!r}: start with a letter; letters, digits, '_', '.', '-'"
        )
    if not _POOL_NAME_PUBLISHED.fullmatch(value):  # the pattern built from _POOL_RESERVED
        raise InvalidInput(f"invalid pool name {value!r}: reserved by ZFS")
    return value


def snapshot_name(value: str) -> str:
    if not isinstance(value, str) or not _SNAPSHOT_NAME.fullmatch(value):
        raise InvalidInput(
            f"invalid snapshot name {value!r}: 1-63 letters, digits, '_', '.', ':' or '-', "
            "starting with a letter or digit"
        )
    return value


def iqn(value: str) -> str:
    """An iSCSI name (iqn./eui./naa. forms of RFC 3720), returned lowercased."""
    if not isinstance(value, str) or has_control(value):
        raise InvalidInput(f"invalid iSCSI name {value!r}")
    name = value.strip().lower()
    if len(name.encode()) > MAX_IQN_BYTES:
        raise InvalidInput(f"invalid iSCSI name {value!r}: longer than 223 bytes")
    m = _IQN.fullmatch(name)
    if m and not 1 <= int(m.group(2)) <= 12:  # said apart: the rest of it is well formed
        raise InvalidInput(f"invalid iSCSI name {value!r}: month {m.group(2)} in the date")
    if _IQN_PUBLISHED.fullmatch(name):  # the rule the OpenAPI document publishes
        return name
    raise InvalidInput(
        f"invalid iSCSI name {value!r}: expected iqn.YYYY-MM.reversed.domain[:identifier] "
        "with at least two domain labels (e.g. iqn.2026-11.org.example:host1), "
        "or eui.<16 hex>, or naa.<16|32 hex>"
    )


def nqn(value: str, what: str = "host NQN") -> str:
    """An NVMe Qualified Name by the base specification's rules (see
    :func:`appliance.host.nvmet.check_nqn`), as given (NQNs are case-sensitive)."""
    from appliance.host.nvmet import check_nqn

    if not isinstance(value, str) or has_control(value):
        raise InvalidInput(f"invalid {what} {value!r}")
    return check_nqn(value.strip(), what)


def initiator_name(value: str) -> str:
    """A host's name in an initiator group: an iSCSI name (IQN, EUI, NAA) or an NVMe
    host NQN (an IQN never starts with ``nqn.``)."""
    if isinstance(value, str) and value.strip().startswith("nqn."):
        return nqn(value)
    return iqn(value)


def nfs_client(value: str) -> str:
    """An NFS client match: IPv4/IPv6 address, CIDR network, hostname or ``*``."""
    if not isinstance(value, str) or has_control(value):
        raise InvalidInput(f"invalid NFS client {value!r}")
    text = value.strip()
    if text == "*":
        return text
    try:
        if "/" in text:
            return str(ipaddress.ip_network(text, strict=False))
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    if _HOSTNAME.fullmatch(text) and not text.replace(".", "").isdigit():
        return text.lower()
    raise InvalidInput(
        f"invalid NFS client {value!r}: expected an IP address, a CIDR network "
        "(e.g. 192.0.2.0/24), a hostname or '*'"
    )


def chap_user(value: str) -> str:
    # LIO reads "NULL" as "no user set"
    if (not isinstance(value, str) or not 1 <= len(value) <= CHAP_USER_MAX
            or not _CHAP_TEXT.fullmatch(value) or value.upper() == "NULL"):
        raise InvalidInput(
            "invalid CHAP user name: 1-255 printable ASCII characters, no spaces or quotes"
        )
    return value


def chap_secret(value: str) -> str:
    # ESXi and Windows initiators require 12-16 characters; LIO accepts longer.
    lo, hi = CHAP_SECRET_LENGTH
    if (not isinstance(value, str) or not lo <= len(value) <= hi
            or not _CHAP_TEXT.fullmatch(value) or value.upper() == "NULL"):
        raise InvalidInput(
            "invalid CHAP secret: 12-255 printable ASCII characters, no spaces or quotes "
            "(ESXi and Windows initiators need 12-16)"
        )
    return value


def parse_size(value: int | str, what: str = "size") -> int:
    """Bytes from an int or a string such as ``100G``, ``1.5T``, ``512MiB`` (binary units)."""
    if isinstance(value, bool):
        raise InvalidInput(f"invalid {what} {value!r}")
    if isinstance(value, int):
        size = value
    elif isinstance(value, str):
        m = _SIZE.fullmatch(value)
        if not m:
            raise InvalidInput(f"invalid {what} {value!r}: use bytes or a number with K/M/G/T/P")
        number = float(m.group(1))
        if math.isinf(number):  # 309 digits and more: float() says inf, int() would raise
            raise InvalidInput(f"invalid {what} {value!r}: too large")
        size = int(number * _UNITS[m.group(2).upper()])
    else:
        raise InvalidInput(f"invalid {what} {value!r}")
    if size <= 0:
        raise InvalidInput(f"invalid {what} {value!r}: must be positive")
    return size


def power_of_two_size(value: int | str, lo: int, hi: int, what: str) -> int:
    size = parse_size(value, what)
    if size & (size - 1) or not lo <= size <= hi:
        raise InvalidInput(
            f"invalid {what} {value!r}: a power of two from {format_size(lo)} to {format_size(hi)}"
        )
    return size


COMPRESSION = re.compile(r"on|off|lz4|zle|lzjb|gzip(?:-[1-9])?|zstd(?:-(?:[1-9]|1[0-9]))?"
                         r"|zstd-fast(?:-[0-9]{1,4})?")
SYNC = ("standard", "always", "disabled")


def compression(value: str) -> str:
    if not isinstance(value, str) or not COMPRESSION.fullmatch(value):
        raise InvalidInput(
            f"invalid compression {value!r}: off, lz4, zle, gzip[-1..9], zstd[-1..19], zstd-fast-N"
        )
    return value


def sync(value: str) -> str:
    if value not in SYNC:
        raise InvalidInput(f"invalid sync {value!r}: one of {', '.join(SYNC)}")
    return value


_PATH_CHARACTERS = "A-Za-z0-9_.:+-"


def device_path(value: str) -> str:
    """A disk for a pool: an absolute path of plain characters (checked to exist later)."""
    if (not isinstance(value, str) or not value.startswith("/")
            or not re.fullmatch(rf"/[{_PATH_CHARACTERS}/]+", value)
            or "/../" in value + "/"):
        raise InvalidInput(
            f"invalid device {value!r}: give an absolute path such as /dev/disk/by-id/..."
        )
    return value


LABEL_KEY = r"[a-z0-9](?:[a-z0-9._-]{0,61}[a-z0-9])?"
LABEL_VALUE = r"(?:[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?"
_LABEL_KEY = re.compile(LABEL_KEY)
_LABEL_VALUE = re.compile(LABEL_VALUE)
MAX_LABELS = 32


def labels(value: object) -> tuple[tuple[str, str], ...]:
    """Datastore labels ``{"tier": "gold"}``: keys 1-63 of a-z 0-9 . _ -, values up to
    63 of A-Z a-z 0-9 . _ - (alphanumeric ends); returned as sorted pairs."""
    if not isinstance(value, dict):
        raise InvalidInput("labels must be an object of key: value strings")
    if len(value) > MAX_LABELS:
        raise InvalidInput(f"at most {MAX_LABELS} labels")
    out = []
    for k, v in value.items():
        if not isinstance(k, str) or not _LABEL_KEY.fullmatch(k):
            raise InvalidInput(f"invalid label key {k!r}: 1-63 lowercase letters, digits, "
                               "'.', '_' or '-', starting and ending with a letter or digit")
        if not isinstance(v, str) or not _LABEL_VALUE.fullmatch(v):
            raise InvalidInput(f"invalid value {v!r} of label {k}: up to 63 letters, "
                               "digits, '.', '_' or '-', starting and ending with a letter "
                               "or digit")
        out.append((k, v))
    return tuple(sorted(out))


def format_size(size: int) -> str:
    """1073741824 -> '1G' (exact binary units where possible)."""
    for unit in ("P", "T", "G", "M", "K"):
        n = _UNITS[unit]
        if size >= n and size % n == 0:
            return f"{size // n}{unit}"
    return str(size)


def ssh_public_key(value: str) -> str:
    """One OpenSSH public key line (``ssh-ed25519 AAAA... comment``), without options."""
    text = value.strip(" ") if isinstance(value, str) else ""
    if not _SSH_KEY.fullmatch(text):
        raise InvalidInput(f"not an OpenSSH public key line: {text[:60]!r}")
    return text


# --- the same rules as OpenAPI patterns ------------------------------------------------------
# What the validators above accept, as JSON Schema ``pattern``s for the OpenAPI document
# (the API's pydantic models enforce them before a request reaches the engine), built from
# the same constants in the dialect appliance/patterns.py describes. A pattern may be
# narrower than its validator where the validator is lenient with what people type
# (blanks around an IQN, an IPv6 zone id, "0.5M" for a record size), never wider:
# tests/unit/test_schema_patterns.py holds each pattern to its validator.

RESOURCE_NAME_RULE = ("1-63 lowercase letters, digits, '.' or '-', starting and ending with "
                      "a letter or digit, no '..'")

POOL_NAME_MAX = 63
POOL_NAME_PATTERN = anchored(avoiding(
    first=set(string.ascii_letters), rest=set(string.ascii_letters + string.digits + "_.-"),
    prefixes=[*(word_sets(w) for w in _POOL_RESERVED), [{"c", "C"}, set(string.digits)]],
    max_length=POOL_NAME_MAX))
_POOL_NAME_PUBLISHED = re.compile(POOL_NAME_PATTERN)
POOL_NAME_RULE = ("1-63 letters, digits, '_', '.' or '-', starting with a letter; not "
                  f"starting with {', '.join(_POOL_RESERVED)} or c and a digit (ZFS "
                  "reserves them), in any case")

SNAPSHOT_NAME_PATTERN = anchored(SNAPSHOT_NAME)
SNAPSHOT_NAME_RULE = ("1-63 letters, digits, '_', '.', ':' or '-', starting with a letter or "
                      "digit")

_LABEL_ANY_CASE = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HEX = "[0-9A-Fa-f]"
IQN_PATTERN = anchored("|".join([
    no_case("iqn") + r"\.[0-9]{4}-(?:0[1-9]|1[0-2])\." + _LABEL_ANY_CASE
    + rf"(?:\.{_LABEL_ANY_CASE})+(?::[A-Za-z0-9.:-]+)?",
    no_case("eui") + rf"\.{_HEX}{{16}}",
    no_case("naa") + rf"\.(?:{_HEX}{{16}}|{_HEX}{{32}})",
]))
_IQN_PUBLISHED = re.compile(IQN_PATTERN)
IQN_RULE = ("iqn.YYYY-MM.reversed.domain[:identifier] with at least two domain labels "
            "(iqn.2026-11.org.example:host1), eui.<16 hex> or naa.<16|32 hex>; at most 223 "
            "characters, any case (stored lowercased)")

_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
IPV4 = rf"{_OCTET}(?:\.{_OCTET}){{3}}"
_G = "[0-9A-Fa-f]{1,4}"
IPV6 = "|".join([  # RFC 4291 2.2 forms 1 and 2 ('::' for one or more groups of zeros)
    rf"(?:{_G}:){{7}}{_G}",
    rf"(?:{_G}:){{1,7}}:",
    *(rf"(?:{_G}:){{1,{n}}}(?::{_G}){{1,{7 - n}}}" for n in range(6, 0, -1)),
    rf":(?::{_G}){{1,7}}",
    "::",
])
IP_ADDRESS = rf"{IPV4}|{IPV6}"
IP_NETWORK = (rf"{IPV4}/(?:3[0-2]|[12]?[0-9])|(?:{IPV6})/(?:12[0-8]|1[01][0-9]|[1-9]?[0-9])")
_DNS_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
# the last label starts or ends with a letter, so no name is all digits and dots
_LAST_DNS_LABEL = r"[A-Za-z](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?|[0-9][A-Za-z0-9-]{0,61}[A-Za-z]"
HOSTNAME = rf"(?:{_DNS_LABEL}\.)*(?:{_LAST_DNS_LABEL})"
HOSTNAME_MAX = 253
NFS_CLIENT_PATTERN = anchored(rf"\*|{IP_ADDRESS}|{IP_NETWORK}|{HOSTNAME}")
NFS_CLIENT_RULE = ("an IPv4/IPv6 address, a CIDR network (192.0.2.0/24), a host name (its "
                   "last label starting or ending with a letter) or *")

CHAP_USER_PATTERN = anchored(avoiding(
    first=set(CHAP_CHARACTERS), rest=set(CHAP_CHARACTERS), words=[word_sets("null")],
    max_length=CHAP_USER_MAX))
CHAP_TEXT_PATTERN = anchored(char_class(CHAP_CHARACTERS) + "+")
CHAP_RULE = ("printable ASCII without spaces, quotes or backslash; never NULL (LIO's "
             "'no user'), in any case")

COMPRESSION_PATTERN = anchored(COMPRESSION.pattern)

DEVICE_PATH_MIN = 2
# components of the path characters, none of them '..'
_PATH_SEGMENT = (rf"[{_PATH_CHARACTERS}]*[{_PATH_CHARACTERS.replace('.', '')}]"
                 rf"[{_PATH_CHARACTERS}]*|\.\.\.+|\.?")
DEVICE_PATH_PATTERN = anchored(rf"(?:/(?:{_PATH_SEGMENT}))+")
DEVICE_PATH_RULE = "an absolute path of letters, digits and _ . : + - (no '..' component)"

LABEL_KEY_PATTERN = anchored(LABEL_KEY)
LABEL_VALUE_PATTERN = anchored(LABEL_VALUE)
UNIX_USER_PATTERN = anchored(UNIX_USER)

_BYTE_UNITS = (("", 1), ("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30), ("T", 1 << 40),
               ("P", 1 << 50))
_BYTE_SUFFIX = "(?:[Ii]?[Bb])?"
SIZE_TEXT_MAX = 64  # a size beyond 64 characters is no size (and float() would say inf)


def size_pattern(minimum: int) -> str:
    """Size strings (:func:`parse_size`) of at least ``minimum`` bytes."""
    forms = [decimal_at_least(Fraction(minimum, mult)) + " *"
             + (no_case(unit) if unit else "") + _BYTE_SUFFIX
             for unit, mult in _BYTE_UNITS]
    return anchored(" *(?:" + "|".join(forms) + ") *")


def power_of_two_sizes(lo: int, hi: int) -> list[int]:
    """The sizes :func:`power_of_two_size` takes between ``lo`` and ``hi``."""
    return [1 << n for n in range(lo.bit_length() - 1, hi.bit_length()) if lo <= 1 << n <= hi]


def power_of_two_pattern(lo: int, hi: int) -> str:
    """Size strings of the powers of two from ``lo`` to ``hi``, each a whole number of
    its unit (16K, 16384, 1M, 1024K)."""
    forms = []
    for unit, mult in _BYTE_UNITS:
        numbers = [str(p // mult) for p in power_of_two_sizes(lo, hi) if p % mult == 0]
        if numbers:
            forms.append(f"0*(?:{'|'.join(numbers)})(?:\\.0+)? *"
                         + (no_case(unit) if unit else "") + _BYTE_SUFFIX)
    return anchored(" *(?:" + "|".join(forms) + ") *")


RECORDSIZE_RANGE = (4096, 1 << 20)
VOLBLOCKSIZE_RANGE = (4096, 128 << 10)
MIN_DATASTORE_SIZE = 64 << 20
