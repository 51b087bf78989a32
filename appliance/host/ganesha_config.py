"""nfs-ganesha EXPORT blocks: what ZDS asks ganesha to serve, validated and rendered.

Pure (no I/O): the adapter (:mod:`appliance.host.ganesha`), its fake and the reconciler
share these rules, so anything ganesha's config lexer could misread is refused before a
file is written.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Literal

from appliance.errors import InvalidInput


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


def check_export_id(export_id: int) -> None:
    if isinstance(export_id, bool) or not isinstance(export_id, int):
        raise InvalidInput("export id must be an integer")
    if not 1 <= export_id <= MAX_EXPORT_ID:
        raise InvalidInput(f"export id {export_id} is outside 1..{MAX_EXPORT_ID}")
