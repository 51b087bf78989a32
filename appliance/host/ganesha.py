"""nfs-ganesha adapter: one generated EXPORT block per datastore, applied live over DBus.

Exports are never put into ganesha.conf: ZDS writes each export's block to its own file
in ``exports_dir`` and adds/updates/removes it with the ExportMgr DBus methods, so
ganesha never starts with a path that is not mounted yet, and the reconciler re-adds
everything after ``zpool import``. ``appliance.host.fakes.FakeGanesha`` is the twin.
Errors: DBus/ganesha down -> ``Unavailable``; unknown export id -> ``NotFound``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol


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
