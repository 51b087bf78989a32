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
import os
import re
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from appliance.errors import (
    Conflict,
    HostCommandFailed,
    InvalidInput,
    NotFound,
    Unavailable,
    ZdsError,
)
from appliance.host.ganesha_config import (
    ExportSpec,
    check_export_id,
    check_spec,
    export_file_name,
    render_export_block,
)
from appliance.host.ganesha_replies import (
    ExportActivity,
    ExportDisplay,
    parse_display_export,
    parse_export_message,
    parse_show_clients,
    parse_show_exports,
)
from appliance.host.nfs_server import (
    Activity,
    LiveExport,
    active_clients,
    pending_mark,
    read_text_or_none,
    restore_file,
    write_atomic,
)
from appliance.host.nfs_units import MAIN_UNIT
from appliance.host.run import CommandError, Runner

_T = TypeVar("_T")


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


