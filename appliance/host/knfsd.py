"""The Linux kernel NFS server (knfsd) as ZDS's opt-in NFS server, behind the same
:class:`appliance.host.nfs_server.GaneshaHost` protocol as nfs-ganesha.

Why it exists: bench/nfs_servers.py measured knfsd ahead of ganesha on the same dataset
and client (docs/performance.md, "The data path"), so an appliance may choose it
(``[nfs] server = "knfsd"`` in zds.toml; ``zds-nfs-server knfsd`` switches a running
appliance). ganesha stays the default: it alone has per-export I/O counters (the
metrics), per-client activity, and NFSv3/NFSv4 kept apart per export.

How: one file per export, ``exports_dir/zds-<id>.exports`` (exportfs reads
/etc/exports.d/*.exports), applied with ``exportfs -r``, which makes the kernel's table
match the files; what is live is read back from exportfs's table, ``etab``. The export
id is the export's ``fsid`` (ZFS datasets need one; it also keeps file handles stable
across reboots and servers). ``mp`` exports a path only while it is a mount point, so a
dataset that is not mounted yet (boot) is never served as the empty directory below it.

Differences from ganesha, said in docs/architecture.md: knfsd serves every enabled NFS
version on every export (ZDS still gives each datastore one version in its attach
instructions); ``Root_Id_Squash`` maps to ``root_squash``; ``sec=none`` does not exist;
who uses an export comes from mountd's rmtab (NFSv3 mounts) and the NFSv4 client list
in /proc/fs/nfsd/clients, not from request times.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from appliance.errors import Conflict, HostCommandFailed, InvalidInput, NotFound, ZdsError
from appliance.host.ganesha_config import ExportSpec, check_export_id, check_spec
from appliance.host.ganesha_replies import ClientActivity, ExportActivity, ExportDisplay
from appliance.host.nfs_server import (
    Activity,
    LiveExport,
    client_admitted,
    pending_mark,
    read_text_or_none,
    restore_file,
    write_atomic,
)
from appliance.host.run import CommandError, Runner

_SQUASH = {"No_Root_Squash": "no_root_squash", "Root_Squash": "root_squash",
           "Root_Id_Squash": "root_squash", "All_Squash": "all_squash"}
_V3_USED = frozenset({"NFSv3", "MNT"})
_V4_USED = frozenset({"NFSv41"})


def render_exports_line(spec: ExportSpec) -> str:
    """The exports(5) file ZDS writes for ``spec`` (validated first).

    Example::

        # Managed by ZDS: export 101. Do not edit; the API rewrites this file.
        /tank/datastores/ds1 192.0.2.0/24(rw,sync,no_subtree_check,no_root_squash,\
insecure,mp,fsid=101,sec=sys)

    (one line in the file). ``sync``: a write is stable before knfsd answers, as ESXi's
    FILE_SYNC writes expect; ``insecure``: clients behind NAT or libnfs use ports above
    1023 (ganesha does not check ports either).
    """
    s = check_spec(spec)
    if s.sec == "none":
        raise InvalidInput("the kernel NFS server has no sec=none: use sys or krb5*")
    if s.pseudo != s.path:
        raise InvalidInput(f"the kernel NFS server serves {s.path} at its own path, not at "
                           f"pseudo path {s.pseudo}")
    opts = f"sync,no_subtree_check,{_SQUASH[s.squash]},insecure,mp,fsid={s.export_id},sec={s.sec}"
    clients = " ".join(f"{c}({'rw' if rule.access == 'RW' else 'ro'},{opts})"
                       for rule in s.clients for c in rule.clients)
    return (f"# Managed by ZDS: export {s.export_id}. Do not edit; the API rewrites this file.\n"
            f"{s.path} {clients}\n")


# Sample /var/lib/nfs/etab (nfs-utils 2.6.2; exportfs writes one line per path and client):
# /tank/datastores/ds1	127.0.0.1(rw,sync,wdelay,hide,nocrossmnt,insecure,no_root_squash,\
# no_all_squash,no_subtree_check,secure_locks,acl,no_pnfs,mountpoint,fsid=101,anonuid=65534,\
# anongid=65534,sec=sys,rw,insecure,no_root_squash,no_all_squash)
_ETAB_LINE = re.compile(r"(\S+)\s+(\S+?)\((.*)\)\s*")
_FSID = re.compile(r"(?:^|,)fsid=(\d+)(?:,|$)")


def parse_etab(text: str) -> dict[int, tuple[str, tuple[str, ...]]]:
    """etab -> {fsid: (path, clients)} for exports with a numeric fsid (ZDS's; others,
    such as the admin's own /etc/exports lines without one, are not listed)."""
    out: dict[int, tuple[str, tuple[str, ...]]] = {}
    for line in text.splitlines():
        m = _ETAB_LINE.fullmatch(line)
        if m is None:
            continue
        path, client, opts = m.groups()
        fsid = _FSID.search(opts)
        if fsid is None:
            continue
        eid = int(fsid.group(1))
        _path, clients = out.get(eid, (path, ()))
        out[eid] = (path, (*clients, client))
    return out


# Sample /var/lib/nfs/rmtab (mountd: client:path:count, one line per NFSv3 mount; the
# count drops to 0 on unmount):
# 127.0.0.1:/tank/datastores/ds1:0x00000001
def parse_rmtab(text: str) -> list[tuple[str, str]]:
    """rmtab -> (client, path) of the mounts still counted."""
    out: list[tuple[str, str]] = []
    for line in text.splitlines():
        client, sep, rest = line.strip().partition(":/")
        path, sep2, count = ("/" + rest).rpartition(":")
        if not sep or not sep2:
            continue
        try:
            if int(count, 16) <= 0:
                continue
        except ValueError:
            continue
        out.append((client, path))
    return out


class Knfsd:
    """knfsd through ``exportfs`` (nfs-kernel-server) and files in ``exports_dir``.

    ``proc_root`` is /proc/fs/nfsd (threads: whether knfsd runs; clients/*/info: NFSv4
    clients); ``state_dir`` holds etab and rmtab (/var/lib/nfs). ``is_mounted`` decides
    whether a path can be exported (tests pass their own).
    """

    def __init__(self, runner: Runner, exports_dir: Path = Path("/etc/exports.d"), *,
                 state_dir: Path = Path("/var/lib/nfs"),
                 proc_root: Path = Path("/proc/fs/nfsd"),
                 is_mounted: Callable[[str], bool] = os.path.ismount) -> None:
        self.runner = runner
        self.exports_dir = exports_dir
        self.state_dir = state_dir
        self.proc_root = proc_root
        self.is_mounted = is_mounted

    # -- GaneshaHost -------------------------------------------------------------------------

    def render(self, spec: ExportSpec) -> str:
        return render_exports_line(spec)

    def available(self) -> bool:
        """knfsd has threads (``rpc.nfsd`` ran and the server was not stopped)."""
        try:
            return int((self.proc_root / "threads").read_text().strip() or "0") > 0
        except (OSError, ValueError):
            return False

    def restart_stuck(self) -> bool:
        """knfsd is the kernel's: there is no process to restart (its threads are the
        answer to :meth:`available`)."""
        return False

    def list_exports(self) -> list[LiveExport]:
        """ZDS's exports live now: etab's entries that have a file of ours (an admin's own
        /etc/exports lines are not ZDS's to reconcile, whatever their fsid)."""
        return [LiveExport(eid, path) for eid, (path, _c) in sorted(self._ours().items())]

    def get_export(self, export_id: int) -> ExportDisplay | None:
        check_export_id(export_id)
        live = self._live().get(export_id)
        if live is None:
            return None
        return ExportDisplay(export_id, live[0], live[0], "", live[1])

    def rendered(self, export_id: int) -> str | None:
        if pending_mark(self._file(export_id)).exists():
            return None  # written, and exportfs -r may not have run since
        return read_text_or_none(self._file(export_id))

    def add_export(self, spec: ExportSpec) -> None:
        failed = self.add_exports([spec])
        if failed:
            raise failed[spec.export_id]

    def add_exports(self, specs: Sequence[ExportSpec]) -> dict[int, ZdsError]:
        """Every good spec written, then one ``exportfs -r``; each bad one reported."""
        failed: dict[int, ZdsError] = {}
        live = self._live()
        taken = {path: eid for eid, (path, _c) in live.items()}
        written: dict[int, tuple[str, str | None]] = {}  # id -> (path, the file before)
        for spec in specs:
            try:
                s = check_spec(spec)
                self._check(s, live, taken)
                text = render_exports_line(s)
            except ZdsError as exc:
                failed[spec.export_id] = exc
                continue
            taken[s.path] = s.export_id
            written[s.export_id] = (s.path, read_text_or_none(self._file(s.export_id)))
            # marked until exportfs -r ran: a crash before it leaves the mark
            write_atomic(pending_mark(self._file(s.export_id)), "")
            write_atomic(self._dir() / _file_name(s.export_id), text)
        if not written:
            return failed
        try:
            self._exportfs()
        except BaseException:
            for eid, (_path, old) in written.items():
                restore_file(self._file(eid), old)
                pending_mark(self._file(eid)).unlink(missing_ok=True)
            raise
        for eid in written:
            pending_mark(self._file(eid)).unlink(missing_ok=True)
        now = self._live()
        for eid, (path, old) in written.items():
            if now.get(eid, ("", ()))[0] != path:
                restore_file(self._file(eid), old)
                failed[eid] = HostCommandFailed(
                    f"exportfs did not export {path} as export {eid} (see journalctl -u "
                    "nfs-server)")
        if any(eid in failed for eid in written):
            self._exportfs()
        return failed

    def update_export(self, spec: ExportSpec) -> None:
        s = check_spec(spec)
        live = self._live().get(s.export_id)
        if live is None:
            raise NotFound(f"NFS export {s.export_id} is not live")
        self.add_export(s)

    def remove_export(self, export_id: int) -> None:
        check_export_id(export_id)
        path = self._file(export_id)
        if not path.exists() and export_id not in self._live():
            return
        path.unlink(missing_ok=True)
        self._exportfs()

    def activity(self) -> Activity:
        """From rmtab (NFSv3 mounts, per export) and the NFSv4 client list (whole server:
        every export is taken as used by them, which can only over-report)."""
        now = time.time()
        mounts = self._mounts()
        v4 = self._v4_clients()
        exports: dict[int, ExportActivity] = {}
        mounted = {p for _c, p in mounts}
        for eid, (path, _clients) in self._ours().items():
            used = (_V3_USED if path in mounted else frozenset()) | (
                _V4_USED if v4 else frozenset())
            exports[eid] = ExportActivity(eid, path, used, now if used else 0.0)
        clients = [ClientActivity(c, _V3_USED, now) for c in sorted({c for c, _p in mounts})]
        clients += [ClientActivity(c, _V4_USED, now) for c in v4]
        return Activity(now, exports, tuple(clients))

    def connected_clients(self, export_id: int) -> list[str]:
        """NFSv3 clients with the export mounted (rmtab), and NFSv4 clients the export
        admits (knfsd does not say which export a v4 client uses)."""
        check_export_id(export_id)
        live = self._live().get(export_id)
        if live is None:
            return []
        path, matches = live
        found = {c for c, p in self._mounts() if p == path}
        found |= {c for c in self._v4_clients() if client_admitted(c, matches)}
        return sorted(found)

    # -- helpers -----------------------------------------------------------------------------

    def _exportfs(self) -> None:
        try:
            self.runner.run(["exportfs", "-r"], timeout=300)
        except CommandError as exc:
            raise HostCommandFailed(f"exportfs -r failed: {exc.message}") from exc

    def _live(self) -> dict[int, tuple[str, tuple[str, ...]]]:
        try:
            return parse_etab((self.state_dir / "etab").read_text())
        except FileNotFoundError:
            return {}

    def _ours(self) -> dict[int, tuple[str, tuple[str, ...]]]:
        """etab's exports that have a file of ours: one listing, not a stat per export."""
        try:
            names = set(os.listdir(self.exports_dir))
        except FileNotFoundError:
            return {}
        return {eid: v for eid, v in self._live().items() if _file_name(eid) in names}

    def _mounts(self) -> list[tuple[str, str]]:
        try:
            return parse_rmtab((self.state_dir / "rmtab").read_text())
        except FileNotFoundError:
            return []

    def _v4_clients(self) -> list[str]:
        """Addresses in /proc/fs/nfsd/clients/*/info ('address: "127.0.0.1:876"')."""
        out: set[str] = set()
        for info in sorted((self.proc_root / "clients").glob("*/info")):
            try:
                text = info.read_text()
            except OSError:
                continue
            m = re.search(r'^address:\s*"\[?([^"\]]+?)\]?:\d+"', text, re.M)
            if m:
                out.add(m.group(1))
        return sorted(out)

    def _check(self, s: ExportSpec, live: dict[int, tuple[str, tuple[str, ...]]],
               taken: dict[str, int]) -> None:
        current = live.get(s.export_id)
        if current is not None and current[0] != s.path:
            raise Conflict(f"NFS export {s.export_id} already serves {current[0]}; an "
                           f"export's path cannot change to {s.path} (remove it and add a "
                           "new one)")
        other = taken.get(s.path)
        if other is not None and other != s.export_id:
            raise Conflict(f"{s.path} is already exported by live NFS export {other}")
        other = taken.get(s.pseudo)  # knfsd's NFSv4 paths are the real ones
        if other is not None and other != s.export_id:
            raise Conflict(f"pseudo path {s.pseudo} is already used by live NFS export "
                           f"{other}")
        if not os.path.isdir(s.path):
            raise Conflict(f"cannot export {s.path}: no such directory on this host (is the "
                           "dataset mounted?)")
        if not self.is_mounted(s.path):
            raise Conflict(f"cannot export {s.path}: it is not a mount point (is the "
                           "dataset mounted?)")

    def _dir(self) -> Path:
        self.exports_dir.mkdir(parents=True, exist_ok=True)
        return self.exports_dir

    def _file(self, export_id: int) -> Path:
        return self.exports_dir / _file_name(export_id)


def _file_name(export_id: int) -> str:
    return f"zds-{export_id}.exports"
