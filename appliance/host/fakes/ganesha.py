"""In-memory twin of :class:`appliance.host.ganesha.Ganesha` for unit and API tests.

Same validation (``check_spec``/``render_export_block``), same errors, same idempotency:
- ``down = True`` makes every DBus-backed call raise ``Unavailable`` (``available()`` is
  False; ``rendered()`` still answers, as the real one reads a file);
- ``missing_paths`` holds export paths that "do not exist on this host" (``Conflict``);
- ``set_connected(export_id, [addr, ...])`` simulates clients using an export now (what
  ShowExports/ShowClients would then say; who counts as connected is decided by the same
  :func:`~appliance.host.nfs_server.active_clients` as for the real one);
- ``calls`` records the DBus methods the real adapter would have called;
- ``on_step`` (when set) is called between an export's file and its DBus call (written
  before AddExport, removed after RemoveExport, as the real adapter does), so a test can
  kill the engine there.

appliance.host.contract.ganesha_checks holds both to the same behaviour.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from appliance.errors import Conflict, NotFound, Unavailable, ZdsError
from appliance.host.ganesha_config import (
    ExportSpec,
    check_export_id,
    check_spec,
    render_export_block,
)
from appliance.host.ganesha_replies import ClientActivity, ExportActivity, ExportDisplay
from appliance.host.nfs_server import Activity, LiveExport, active_clients

_FAMILY = {3: frozenset({"NFSv3", "MNT"}), 4: frozenset({"NFSv41"})}


@dataclass
class FakeGanesha:
    down: bool = False
    stopped: bool = False  # its unit is not active (restart_stuck leaves it be)
    restarts: int = 0  # restart_stuck's restarts
    missing_paths: set[str] = field(default_factory=set)
    calls: list[tuple[str, int]] = field(default_factory=list)
    _live: dict[int, ExportSpec] = field(default_factory=dict)
    _files: dict[int, str] = field(default_factory=dict)
    _connected: dict[int, list[str]] = field(default_factory=dict)
    on_step: Callable[[str], None] | None = None
    _pending: set[int] = field(default_factory=set)  # files written, not taken yet

    # -- test controls ---------------------------------------------------------------------

    def set_connected(self, export_id: int, clients: Iterable[str]) -> None:
        self._connected[export_id] = sorted(set(clients))

    def restart(self) -> None:
        """ganesha restarted: nothing is live any more (files stay), clients forgotten."""
        self._live.clear()
        self._connected.clear()

    # -- GaneshaHost -----------------------------------------------------------------------

    def render(self, spec: ExportSpec) -> str:
        return render_export_block(spec)

    def available(self) -> bool:
        return not self.down

    def restart_stuck(self) -> bool:
        if self.stopped:
            return False
        self.down = False
        self.restarts += 1
        self.restart()
        return True

    def list_exports(self) -> list[LiveExport]:
        self._up("ShowExports", 0)
        return [LiveExport(s.export_id, s.path) for _, s in sorted(self._live.items())]

    def get_export(self, export_id: int) -> ExportDisplay | None:
        check_export_id(export_id)
        self._up("DisplayExport", export_id)
        s = self._live.get(export_id)
        if s is None:
            return None
        return ExportDisplay(s.export_id, s.path, s.pseudo, "",
                             tuple(c for rule in s.clients for c in rule.clients))

    def rendered(self, export_id: int) -> str | None:
        return None if export_id in self._pending else self._files.get(export_id)

    def add_export(self, spec: ExportSpec) -> None:
        self._add(spec, lambda: self._up("ShowExports", 0))

    def _add(self, spec: ExportSpec, show: Callable[[], None]) -> None:
        s = check_spec(spec)
        text = render_export_block(s)
        if s.path in self.missing_paths:
            raise Conflict(
                f"cannot export {s.path}: no such directory on this host (is the dataset "
                "mounted?)"
            )
        show()
        live = self._live.get(s.export_id)
        if live is not None:
            self._same_path(s, live)
            self._store(s, text, "UpdateExport")
            return
        self._unique(s, self._live.values())
        self._store(s, text, "AddExport")

    def add_exports(self, specs: Sequence[ExportSpec]) -> dict[int, ZdsError]:
        self._up("ShowExports", 0)  # then the one batch AddExport (recorded per id)
        failed: dict[int, ZdsError] = {}
        for spec in specs:
            try:
                self._add(spec, lambda: None)
            except ZdsError as exc:
                failed[spec.export_id] = exc
        return failed

    def update_export(self, spec: ExportSpec) -> None:
        s = check_spec(spec)
        text = render_export_block(s)
        self._up("DisplayExport", s.export_id)
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
        self._connected.pop(export_id, None)
        self._step(f"export {export_id}: removed, its file not yet")
        self._files.pop(export_id, None)

    def activity(self) -> Activity:
        self._up("ShowExports", 0)
        self._up("ShowClients", 0)
        now = time.time()
        exports: dict[int, ExportActivity] = {}
        clients: dict[str, set[str]] = {}
        for eid, spec in self._live.items():
            addrs = self._connected.get(eid, [])
            used = frozenset().union(*(_FAMILY[p] for p in spec.protocols)) if addrs \
                else frozenset()
            exports[eid] = ExportActivity(eid, spec.path, used, now if addrs else 0.0)
            for a in addrs:
                clients.setdefault(a, set()).update(used)
        rows = tuple(ClientActivity(a, frozenset(p), now) for a, p in sorted(clients.items()))
        return Activity(now, exports, rows)

    def connected_clients(self, export_id: int) -> list[str]:
        check_export_id(export_id)
        shown = self.get_export(export_id)
        if shown is None:
            return []
        return active_clients(self.activity(), export_id, shown.clients)

    # -- helpers -----------------------------------------------------------------------------

    def _up(self, method: str, export_id: int) -> None:
        if self.down:
            raise Unavailable("nfs-ganesha is not running or not answering on DBus (fake: down)")
        self.calls.append((method, export_id))

    def _store(self, s: ExportSpec, text: str, method: str) -> None:
        self._pending.add(s.export_id)
        self._files[s.export_id] = text
        self._step(f"export {s.export_id}: file written, {method} not called yet")
        self.calls.append((method, s.export_id))
        self._live[s.export_id] = s
        self._pending.discard(s.export_id)

    def _step(self, what: str) -> None:
        if self.on_step is not None:
            self.on_step(what)

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
