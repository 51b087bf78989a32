"""What ZDS asks of an NFS server, whichever it is: nfs-ganesha (appliance/host/ganesha.py,
the default) or the kernel's (appliance/host/knfsd.py, opt-in), and what both share: who
may be using an export (from ganesha-style activity), and the export files each writes
atomically with a pending mark while the server has not taken them yet."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from appliance.errors import ZdsError
from appliance.host.ganesha_config import ExportSpec
from appliance.host.ganesha_replies import ClientActivity, ExportActivity, ExportDisplay


@dataclass(frozen=True)
class LiveExport:
    """An export ganesha serves now, as ShowExports lists it."""

    export_id: int
    path: str



@dataclass(frozen=True)
class Activity:
    """Who used what, as ganesha knows it: one ShowExports and one ShowClients."""

    now: float  # ganesha's clock when ShowClients answered
    exports: Mapping[int, ExportActivity]
    clients: tuple[ClientActivity, ...] = ()


class GaneshaHost(Protocol):
    """The NFS server ZDS drives: nfs-ganesha (:class:`appliance.host.ganesha.Ganesha`,
    the default) or the kernel's (:class:`appliance.host.knfsd.Knfsd`, opt-in)."""

    def render(self, spec: ExportSpec) -> str:
        """The file this server is given for ``spec`` (what :meth:`rendered` returns once
        it is applied); the reconciler compares the two to find drift."""

    def available(self) -> bool:
        """True when the server answers (ganesha: on DBus)."""

    def restart_stuck(self) -> bool:
        """Restarts the server's unit when systemd says it runs: called after it has not
        answered for a while (a ganesha that hangs, or lost its DBus name, answers nothing
        while its process lives, and systemd's Restart=on-failure never fires). False
        when there is nothing to restart: the unit is not active (stopped on purpose, or
        systemd restarts it by itself), or the server is the kernel's."""

    def list_exports(self) -> list[LiveExport]:
        """Exports ganesha serves now (without the pseudo root, id 0): one DBus call."""

    def get_export(self, export_id: int) -> ExportDisplay | None:
        """One live export with its pseudo path and client matches; None if not live."""

    def rendered(self, export_id: int) -> str | None:
        """The export block ZDS last wrote for ``export_id`` and the server took (None if
        no file, or if its apply never finished: a crash between writing the file and
        the server taking it leaves a pending mark, so the reconcile applies it again
        instead of taking the file for what is live)."""

    def add_export(self, spec: ExportSpec) -> None: ...

    def add_exports(self, specs: Sequence[ExportSpec]) -> dict[int, ZdsError]:
        """Adds many exports in one go (start-up); returns the ones that failed, by id.
        Each failure is what :meth:`add_export` would have raised for that spec."""

    def update_export(self, spec: ExportSpec) -> None:
        """Change clients/access live; connected clients keep their mounts."""

    def remove_export(self, export_id: int) -> None:
        """Remove live and delete the file. Unknown id: no error."""

    def activity(self) -> Activity:
        """Per-export and per-client activity, for every export at once."""

    def connected_clients(self, export_id: int) -> list[str]:
        """Client addresses with state/IO on this export now (refuse delete if any)."""



_PROTOCOL_NAMES = {3: frozenset({"NFSv3", "MNT"}), 4: frozenset({"NFSv40", "NFSv41", "NFSv42"})}


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


def active_clients(activity: Activity, export_id: int, matches: Iterable[str],
                   window: float | None = 600.0) -> list[str]:
    """Clients that may be using ``export_id`` now, as far as ganesha can tell.

    ganesha does not track which client uses which export (NFSv3 is stateless and it
    does not keep a mount list). What it does keep: per export, the protocols used on
    it and the time of its last request (ShowExports); per client address, the
    protocols it used and its last request (ShowClients, never pruned until restart).
    So this returns the clients that (1) the export's CLIENT ``matches`` admit, (2) used
    the export's protocol family, (3) made a request within ``window`` seconds, and
    only if the export itself saw a request within that window. It can over-report a
    client that uses another export with the same rules (safe for "refuse delete");
    it misses a client that has been silent longer than the window.
    """
    row = activity.exports.get(export_id)
    if row is None or not row.protocols_used:
        return []
    if window is not None and activity.now - row.last_activity > window:
        return []
    families = frozenset().union(
        *(names for names in _PROTOCOL_NAMES.values() if names & row.protocols_used)
    )
    admitted = tuple(matches)
    found: set[str] = set()
    for c in activity.clients:
        if not c.protocols_used & families:
            continue
        if window is not None and activity.now - c.last_activity > window:
            continue
        if client_admitted(c.address, admitted):
            found.add(_client_address(c.address))
    return sorted(found)



def read_text_or_none(path: Path) -> str | None:
    """The file's text; None when there is no file."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def pending_mark(path: Path) -> Path:
    """The mark that says ``path`` was written for a server that has not taken it yet."""
    return path.with_name(f".{path.name}.pending")


def restore_file(path: Path, old: str | None) -> None:
    """Put back the file as it was (``old`` None: there was none)."""
    if old is None:
        path.unlink(missing_ok=True)
    else:
        write_atomic(path, old)


def write_atomic(path: Path, text: str) -> None:
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
