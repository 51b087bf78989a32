"""In-memory twin of :class:`appliance.host.ganesha.Ganesha` for unit and API tests.

Same validation (``check_spec``/``render_export_block``), same errors, same idempotency:
- ``down = True`` makes every DBus-backed call raise ``Unavailable`` (``available()`` is
  False; ``rendered()`` still answers, as the real one reads a file);
- ``missing_paths`` holds export paths that "do not exist on this host" (``Conflict``);
- ``set_connected(export_id, [addr, ...])`` simulates clients using an export;
- ``calls`` records the DBus methods the real adapter would have called.

tests/ganesha_contract.py holds both to the same behaviour.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from appliance.errors import Conflict, NotFound, Unavailable
from appliance.host.ganesha import (
    ExportSpec,
    LiveExport,
    check_export_id,
    check_spec,
    render_export_block,
)


@dataclass
class FakeGanesha:
    down: bool = False
    missing_paths: set[str] = field(default_factory=set)
    calls: list[tuple[str, int]] = field(default_factory=list)
    _live: dict[int, ExportSpec] = field(default_factory=dict)
    _files: dict[int, str] = field(default_factory=dict)
    _connected: dict[int, list[str]] = field(default_factory=dict)

    # -- test controls ---------------------------------------------------------------------

    def set_connected(self, export_id: int, clients: Iterable[str]) -> None:
        self._connected[export_id] = sorted(set(clients))

    def restart(self) -> None:
        """ganesha restarted: nothing is live any more (files stay), clients forgotten."""
        self._live.clear()
        self._connected.clear()

    # -- GaneshaHost -----------------------------------------------------------------------

    def available(self) -> bool:
        return not self.down

    def list_exports(self) -> list[LiveExport]:
        self._up("ShowExports", 0)
        return [LiveExport(s.export_id, s.path, s.pseudo) for _, s in sorted(self._live.items())]

    def rendered(self, export_id: int) -> str | None:
        return self._files.get(export_id)

    def add_export(self, spec: ExportSpec) -> None:
        s = check_spec(spec)
        text = render_export_block(s)
        if s.path in self.missing_paths:
            raise Conflict(
                f"cannot export {s.path}: no such directory on this host (is the dataset "
                "mounted?)"
            )
        self._up("ShowExports", 0)
        live = self._live.get(s.export_id)
        if live is not None:
            self._same_path(s, live)
            self._store(s, text, "UpdateExport")
            return
        self._unique(s, self._live.values())
        self._store(s, text, "AddExport")

    def update_export(self, spec: ExportSpec) -> None:
        s = check_spec(spec)
        text = render_export_block(s)
        self._up("ShowExports", 0)
        live = self._live.get(s.export_id)
        if live is None:
            raise NotFound(f"NFS export {s.export_id} is not live in nfs-ganesha")
        self._same_path(s, live)
        self._unique(s, (e for i, e in self._live.items() if i != s.export_id))
        self._store(s, text, "UpdateExport")

    def remove_export(self, export_id: int) -> None:
        check_export_id(export_id)
        self._up("RemoveExport", export_id)
        self._live.pop(export_id, None)
        self._files.pop(export_id, None)
        self._connected.pop(export_id, None)

    def connected_clients(self, export_id: int) -> list[str]:
        check_export_id(export_id)
        self._up("ShowClients", export_id)
        if export_id not in self._live:
            return []
        return list(self._connected.get(export_id, []))

    # -- helpers -----------------------------------------------------------------------------

    def _up(self, method: str, export_id: int) -> None:
        if self.down:
            raise Unavailable("nfs-ganesha is not running or not answering on DBus (fake: down)")
        self.calls.append((method, export_id))

    def _store(self, s: ExportSpec, text: str, method: str) -> None:
        self.calls.append((method, s.export_id))
        self._live[s.export_id] = s
        self._files[s.export_id] = text

    @staticmethod
    def _same_path(s: ExportSpec, live: ExportSpec) -> None:
        if live.path != s.path:
            raise Conflict(
                f"NFS export {s.export_id} already serves {live.path}; an export's path "
                f"cannot change to {s.path} (remove it and add a new one)"
            )

    @staticmethod
    def _unique(s: ExportSpec, others: Iterable[ExportSpec]) -> None:
        for e in others:
            if e.path == s.path:
                raise Conflict(f"{s.path} is already exported by live NFS export {e.export_id}")
            if e.pseudo == s.pseudo:
                raise Conflict(
                    f"pseudo path {s.pseudo} is already used by live NFS export "
                    f"{e.export_id} ({e.path})"
                )
