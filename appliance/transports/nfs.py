"""NFS datastores (``nfs3``, ``nfs41``): a ZFS file system exported by the NFS server.

The server is nfs-ganesha (over DBus) or the kernel's knfsd (/etc/exports.d and
``exportfs``); both adapters keep one export contract (:class:`GaneshaHost`, held to it by
appliance.host.contract), so this transport does not tell them apart except in what it
says about them. One export per datastore: Export_Id = the recorded export id (allocated
once from 100 up), path and pseudo path = the mount point, NFSv3 or NFSv4.1 as the
protocol says (ESXi must never mount one path with both), client rules from the record.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from appliance.actions import Action, ReconcileReport
from appliance.attach import AttachInstructions, shell_quote, virsh_commands
from appliance.errors import Conflict, Unavailable, ZdsError
from appliance.host.cluster import ClusterHost
from appliance.host.factory import HostAdapters, ProbeHosts
from appliance.host.ganesha_config import MIN_EXPORT_ID, ClientRule, ExportSpec
from appliance.host.ganesha_config import check_spec as check_export
from appliance.host.iostats import IoStatsHost, NfsIo
from appliance.host.nfs_server import Activity, GaneshaHost, LiveExport, active_clients
from appliance.host.nfs_units import MAIN_UNIT
from appliance.host.nfsclient import NfsMounter
from appliance.host.zfs import DatasetInfo
from appliance.metrics.counters import BlockReading, Source, nfs_values
from appliance.model import PROBE_SCRATCH_PARENT, DatastoreRecord, DatastoreSpec
from appliance.settings import Settings
from appliance.store import FIRST_EXPORT_ID, LAST_EXPORT_ID, Store
from appliance.transports.base import (
    LOOKUP_LIMIT,
    Identity,
    Live,
    ProbeAttacher,
    ProbeAttachment,
    Transport,
)
from appliance.transports.storage import FILESYSTEM

# Export ids of the performance probes' temporary scratch exports (appliance/probes):
# not datastores, so the reconciler leaves them alone.
PROBE_EXPORT_IDS = range(65500, 65510)
# The Export_Ids a node hands out: one block per corosync nodeid (1..4, the ha role
# numbers a pair 1 and 2), so the two nodes of an HA pair never give one id to datastores
# of two pools. A pool taken over then keeps its ids, and with them its NFSv3 clients'
# file handles, instead of being renumbered at adoption. A single appliance uses them all.
EXPORT_BLOCKS = 4
EXPORT_BLOCK = (LAST_EXPORT_ID - FIRST_EXPORT_ID + 1) // EXPORT_BLOCKS


def export_block(node_id: int | None) -> tuple[int, int]:
    """The first and last Export_Id a node may hand out: its corosync ``node_id``'s block
    in a pair, everything for a single appliance (None)."""
    if node_id is None:
        return FIRST_EXPORT_ID, FIRST_EXPORT_ID + EXPORT_BLOCKS * EXPORT_BLOCK - 1
    first = FIRST_EXPORT_ID + (node_id - 1) % EXPORT_BLOCKS * EXPORT_BLOCK
    return first, first + EXPORT_BLOCK - 1
# The NFS version each protocol is exported with (one per path: never both to ESXi).
NFS_VERSIONS: Mapping[str, int] = {"nfs3": 3, "nfs41": 4}
NFS_PORT = 2049
# libvirt's storage-pool namespace for extra mount options of fs/netfs pools (libvirt 5.1+)
LIBVIRT_FS_NS = "http://libvirt.org/schemas/storagepool/fs/1.0"


@dataclass(frozen=True)
class NfsLive(Live):
    """The server's exports (by id) and, when read, who used them (ShowClients)."""

    exports: Mapping[int, LiveExport] = field(default_factory=dict)
    activity: Activity | None = None


def export_spec(rec: DatastoreRecord, path: str) -> ExportSpec:
    """The export of an NFS datastore whose dataset is mounted at ``path``."""
    assert rec.export_id is not None
    spec = rec.spec
    rules: list[ClientRule] = []
    for access in ("rw", "ro"):
        clients = tuple(c.match for c in spec.nfs_clients if c.access == access)
        if clients:
            rules.append(ClientRule(clients=clients, access="RW" if access == "rw" else "RO"))
    return ExportSpec(
        export_id=rec.export_id,
        path=path,
        pseudo=path,
        protocols=(NFS_VERSIONS[spec.protocol],),
        clients=tuple(rules),
    )


def plan_exports(exports: Sequence[ExportSpec], live_exports: Iterable[LiveExport],
                 rendered: Callable[[int], str | None],
                 render: Callable[[ExportSpec], str]) -> list[Action[ExportSpec]]:
    """What must change so the server exports ``exports``: a missing export is added, one
    whose path or rendered block differs is updated, and one of ours (id >= 100, not a
    probe's) that nobody wants is removed."""
    actions: list[Action[ExportSpec]] = []
    live_by_id = {e.export_id: e for e in live_exports}
    wanted_ids: set[int] = set()
    for spec in exports:
        wanted_ids.add(spec.export_id)
        live = live_by_id.get(spec.export_id)
        if live is None:
            actions.append(Action("add_export", str(spec.export_id),
                                  f"export of {spec.path} is not live", spec))
        elif live.path != spec.path or rendered(spec.export_id) != render(spec):
            actions.append(Action("update_export", str(spec.export_id),
                                  f"export of {spec.path} differs from desired", spec))
    for live in live_by_id.values():
        if (live.export_id >= MIN_EXPORT_ID and live.export_id not in wanted_ids
                and live.export_id not in PROBE_EXPORT_IDS):
            actions.append(Action("remove_export", str(live.export_id),
                                  f"export of {live.path} is not desired"))
    return actions


@dataclass(frozen=True)
class NfsReading:
    """One collection's GetNFSIO rows by export, and the probes' exports' paths."""

    rows: Mapping[int, list[NfsIo]]
    probe_paths: Mapping[int, str]
    counters: bool  # the server keeps per-export counters (ganesha; knfsd does not)


class NfsTransport(Transport[ExportSpec, NfsLive]):
    """NFS through nfs-ganesha or knfsd: one export per datastore."""

    name = "nfs"
    protocols = ("nfs3", "nfs41")
    storage = FILESYSTEM
    # the key stays "ganesha" for clients of earlier releases; it is whichever NFS server
    # the appliance runs ([nfs] server)
    component = "ganesha"
    daemon = "nfs-ganesha"
    access_fields = ("nfs_clients",)
    access_said = "nfs clients"
    clients_said = "NFS clients"
    probe_target = "nfs"
    probe_writes = "sync"  # ESXi's NFS client writes FILE_SYNC
    promote_notes = ("NFS: mount the export on the hypervisors under the same datastore "
                     "name (esxcli storage nfs add, or the libvirt pool XML below); ESXi "
                     "then re-registers the VMs from the datastore browser.",)

    def __init__(self, server: GaneshaHost, store: Store, server_name: str = "ganesha",
                 cluster: ClusterHost | None = None) -> None:
        self.server = server
        self.store = store
        self.server_name = server_name  # [nfs] server: ganesha | knfsd
        self.cluster = cluster  # in an HA pair: which block of export ids is ours

    @classmethod
    def build(cls, settings: Settings, hosts: HostAdapters, store: Store) -> NfsTransport:
        return cls(hosts.ganesha, store, settings.nfs_server, hosts.cluster)

    def export_ids(self) -> tuple[int, int]:
        """This node's block of Export_Ids (see :func:`export_block`). Unavailable in a
        pair whose local node pacemaker cannot name yet: an id from the wrong block
        could be the peer's."""
        if self.cluster is None or not self.cluster.configured():
            return export_block(None)
        node_id = self.cluster.node_id()
        if node_id is None:
            raise Unavailable("this node's corosync nodeid is not known (crm_node --name "
                              "did not answer, or corosync.conf does not list this node): "
                              "its block of NFS export ids cannot be chosen; nothing was "
                              "changed, retry when pacemaker runs")
        return export_block(node_id)

    # --- health -----------------------------------------------------------------------

    def available(self) -> bool:
        return self.server.available()

    def health_detail(self, ok: bool) -> str:
        if self.server_name == "knfsd":
            return ("knfsd (the kernel NFS server) running" if ok
                    else f"knfsd not running (systemctl start {MAIN_UNIT['knfsd']})")
        return "answering on DBus" if ok else "nfs-ganesha not answering on DBus"

    def restart_daemon(self) -> bool:
        return self.server.restart_stuck()

    def require(self) -> None:
        if not self.available():
            raise Unavailable(f"the NFS server ({self.server_name}) is not running: start it "
                              f"(systemctl start {MAIN_UNIT[self.server_name]}) and retry; "
                              "nothing was changed")

    # --- desired state ----------------------------------------------------------------

    def access_record(self, spec: DatastoreSpec) -> dict[str, Any]:
        return {"nfs_clients": [{"match": c.match, "access": c.access}
                                for c in spec.nfs_clients]}

    def new_identity(self, spec: DatastoreSpec) -> Identity:
        return Identity(export_id=self.store.next_export_id(*self.export_ids()))

    def adopted(self, rec: DatastoreRecord) -> None:
        if rec.export_id is not None:
            with contextlib.suppress(Unavailable):  # no block known: nothing to count in
                self.store.reserve_export_id(rec.export_id, *self.export_ids())

    def check(self, spec: DatastoreSpec) -> None:
        probe = DatastoreRecord(spec, "creating", export_id=MIN_EXPORT_ID)
        check_export(export_spec(probe, "/" + spec.dataset))

    def desired(self, datastores: Sequence[tuple[DatastoreRecord, DatasetInfo]]
                ) -> list[ExportSpec]:
        out = []
        for rec, info in datastores:
            path = FILESYSTEM.mounted_path(info)
            if path is not None:
                out.append(export_spec(rec, path))
        return out

    # --- live state -------------------------------------------------------------------

    def read_live(self, view: bool) -> NfsLive:
        """ShowExports, or for a view ShowExports + ShowClients (who uses what)."""
        try:
            if view:
                act = self.server.activity()
                return NfsLive(True, {i: LiveExport(i, r.path)
                                      for i, r in act.exports.items() if i != 0}, act)
            return NfsLive(True, {e.export_id: e for e in self.server.list_exports()})
        except ZdsError:
            return NfsLive(False)

    def read_for(self, records: Sequence[DatastoreRecord]) -> NfsLive:
        ids = {r.export_id for r in records if r.export_id is not None}
        if len(records) > LOOKUP_LIMIT:
            full = self.read_live(view=False)
            return NfsLive(full.up, {i: e for i, e in full.exports.items() if i in ids})
        exports: dict[int, LiveExport] = {}
        try:
            for eid in sorted(ids):
                shown = self.server.get_export(eid)
                if shown is not None:
                    exports[eid] = LiveExport(eid, shown.path)
        except ZdsError:
            return NfsLive(False)
        return NfsLive(True, exports)

    def read_one(self, rec: DatastoreRecord, clients: bool) -> NfsLive:
        """One DisplayExport, or with ``clients`` ShowExports + ShowClients."""
        try:
            if not clients and rec.export_id is not None:
                shown = self.server.get_export(rec.export_id)
                return NfsLive(True, {shown.export_id: LiveExport(shown.export_id, shown.path)}
                               if shown else {})
            act = self.server.activity()
            return NfsLive(True, {i: LiveExport(i, r.path) for i, r in act.exports.items()},
                           act)
        except ZdsError:
            return NfsLive(False)

    def serving(self, live: NfsLive, rec: DatastoreRecord) -> bool:
        return rec.export_id is not None and rec.export_id in live.exports

    def clients(self, live: NfsLive, rec: DatastoreRecord, window: float | None) -> list[str]:
        """Clients active on the export lately (see active_clients)."""
        if rec.export_id is None or live.activity is None:
            return []
        return active_clients(live.activity, rec.export_id,
                              [c.match for c in rec.spec.nfs_clients], window)

    # --- change -----------------------------------------------------------------------

    def plan(self, desired: Sequence[ExportSpec], live: NfsLive) -> list[Action[Any]]:
        return list(plan_exports(desired, live.exports.values(), self.server.rendered,
                                 self.server.render))

    def apply(self, actions: Sequence[Action[Any]]) -> ReconcileReport:
        """Removals first (they free paths the others may need), then updates, then every
        addition in one AddExport."""
        report = ReconcileReport(planned=list(actions))
        for a in actions:
            if a.kind == "remove_export":
                report.run(a, partial(self.server.remove_export, int(a.subject)))
        for a in actions:
            if a.kind == "update_export" and a.payload is not None:
                report.run(a, partial(self.server.update_export, a.payload))
        adds = [a for a in actions if a.kind == "add_export" and a.payload is not None]
        report.settle(adds, lambda: {str(k): v for k, v in self.server.add_exports(
            [a.payload for a in adds if a.payload is not None]).items()})
        return report

    def unserved(self, desired: Sequence[ExportSpec]) -> list[tuple[str, str]]:
        return [(str(e.export_id), f"add_export {e.export_id}: nfs-ganesha is not running")
                for e in desired]

    def subjects(self, rec: DatastoreRecord) -> tuple[str, ...]:
        return (str(rec.export_id),) if rec.export_id is not None else ()

    # --- attach instructions ----------------------------------------------------------

    def attach(self, rec: DatastoreRecord, server: str, port: int | None,
               path: str | None) -> AttachInstructions:
        return nfs_instructions(rec, server, path or f"/{rec.spec.dataset}", port or NFS_PORT)

    def vmware_target(self, rec: DatastoreRecord) -> dict[str, str]:
        return {"nfs_path": f"/{rec.spec.dataset}"}

    # --- metrics ----------------------------------------------------------------------

    def metrics_read(self, stats: IoStatsHost, records: Sequence[DatastoreRecord],
                     errors: list[str]) -> NfsReading:
        """One GetNFSIO (and one ShowExports when a probe's export shows in it)."""
        rows: list[NfsIo] = []
        try:
            rows = stats.nfs_io()
        except ZdsError as exc:
            errors.append(exc.message)
        return self._reading(rows, stats.nfs_counters)

    def metrics_sources(self, reading: object, rec: DatastoreRecord,
                        blocks: BlockReading) -> list[Source] | None:
        assert isinstance(reading, NfsReading)
        if not reading.counters:
            return None  # knfsd: no per-export counters, so no series (not zeros)
        if rec.export_id is None:
            return []
        return [(f"nfs:{row.export_id}:{row.protocol}", nfs_values(row))
                for row in reading.rows.get(rec.export_id, [])]

    def probe_read(self, stats: IoStatsHost) -> NfsReading:
        try:
            rows = stats.nfs_io()
        except ZdsError:
            rows = []
        return self._reading(rows, stats.nfs_counters)

    def probe_sources(self, reading: object, rec: DatastoreRecord,
                      probe_id: str) -> list[Source]:
        """The rows of the probe's temporary export (its path ends in its scratch)."""
        assert isinstance(reading, NfsReading)
        out: list[Source] = []
        for eid, path in reading.probe_paths.items():
            if path.rstrip("/").endswith(f"/{PROBE_SCRATCH_PARENT}/{rec.name}-{probe_id}"):
                out += [(f"nfs:{eid}:{row.protocol}:{probe_id}", nfs_values(row))
                        for row in reading.rows.get(eid, [])]
        return out

    def _reading(self, rows: Sequence[NfsIo], counters: bool) -> NfsReading:
        by_export: dict[int, list[NfsIo]] = {}
        for row in rows:
            by_export.setdefault(row.export_id, []).append(row)
        return NfsReading(by_export, self._probe_export_paths(by_export), counters)

    def _probe_export_paths(self, by_export: Mapping[int, list[NfsIo]]) -> dict[int, str]:
        """Paths of the probes' temporary exports: one ShowExports, only when one of the
        reserved ids shows in GetNFSIO."""
        if not any(eid in PROBE_EXPORT_IDS for eid in by_export):
            return {}
        try:
            return {e.export_id: e.path for e in self.server.list_exports()
                    if e.export_id in PROBE_EXPORT_IDS}
        except ZdsError:
            return {}

    # --- probes -----------------------------------------------------------------------

    def probe_attacher(self, hosts: ProbeHosts) -> NfsProbeAttach:
        return NfsProbeAttach(self.server, hosts.mounter)

    def probe_settings(self, rec: DatastoreRecord) -> dict[str, Any]:
        return {"ganesha": {"export_id": rec.export_id}} if rec.export_id is not None else {}

    # --- replication ------------------------------------------------------------------

    def promote_identity(self, source: DatastoreRecord, keep: bool,
                         records: Sequence[DatastoreRecord], name: str
                         ) -> tuple[Identity, list[str]]:
        """A new export id: ids are this appliance's (the path is what clients mount)."""
        return Identity(export_id=self.store.next_export_id(*self.export_ids())), []


def nfs_instructions(rec: DatastoreRecord, server: str, path: str,
                     nfs_port: int = NFS_PORT) -> AttachInstructions:
    """esxcli and a libvirt ``netfs`` pool. The pool names the NFS version the datastore
    is exported with (``<protocol ver>``; NFSv4.1 adds the ``minorversion=1`` mount
    option through libvirt's fs namespace), so libvirt's mount never negotiates another."""
    name = rec.name
    q = shell_quote
    fs_ns = ""
    mount_opts = ""
    if NFS_VERSIONS[rec.spec.protocol] == 3:
        esxi = [
            f"esxcli storage nfs add --host={q(server)} --share={q(path)} "
            f"--volume-name={q(name)}",
            "esxcli storage nfs list",
        ]
        ver, opts = "3", "nfsvers=3,tcp"
    else:
        esxi = [
            f"esxcli storage nfs41 add --hosts={q(server)} --share={q(path)} "
            f"--volume-name={q(name)} --sec=AUTH_SYS",
            "esxcli storage nfs41 list",
        ]
        ver, opts = "4", "nfsvers=4.1,tcp"
        fs_ns = f" xmlns:fs={quoteattr(LIBVIRT_FS_NS)}"
        mount_opts = ("  <fs:mount_opts>\n"
                      "    <fs:option name='minorversion=1'/>\n"
                      "  </fs:mount_opts>\n")
    xml = (
        f"<pool type='netfs'{fs_ns}>\n"
        f"  <name>{escape(name)}</name>\n"
        "  <source>\n"
        f"    <host name={quoteattr(server)}/>\n"
        f"    <dir path={quoteattr(path)}/>\n"
        "    <format type='nfs'/>\n"
        f"    <protocol ver='{ver}'/>\n"
        "  </source>\n"
        "  <target>\n"
        f"    <path>/var/lib/libvirt/images/{escape(name)}</path>\n"
        "  </target>\n"
        f"{mount_opts}"
        "</pool>\n"
    )
    notes = [f"libvirt mounts it with the kernel NFS client (mount.nfs, package nfs-common) "
             f"as {opts}; NFS port {nfs_port}"]
    if not rec.spec.nfs_clients:
        notes.append("no NFS clients are allowed yet: add them with PUT (nfs.clients)")
    if rec.origin:
        notes += restore_notes(rec, path)
    return AttachInstructions(esxi, xml, virsh_commands(name), notes)


def restore_notes(rec: DatastoreRecord, path: str) -> list[str]:
    """What to do with an NFS clone of a snapshot: it is a datastore of its own."""
    return [
        f"this datastore is a clone of snapshot {rec.origin}: its files are as they were "
        "then, and writes to it do not touch the source",
        f"ESXi: mount it under its own name (above), then register the VMs to restore from "
        f"it (vim-cmd solo/registervm /vmfs/volumes/{rec.name}/VM/VM.vmx) or copy single "
        "disks back; unregister and unmount it before deleting the clone",
        f"libvirt: start the pool (above) and point a domain's <disk> at an image under "
        f"{path}, or copy an image back with qemu-img convert",
    ]


class NfsProbeAttach(ProbeAttacher):
    """The scratch dataset gets a temporary export (ids 65500-65509, reserved for probes:
    the reconciler leaves them alone), open to 127.0.0.1 only, with the datastore's NFS
    version; the kernel client mounts it over loopback and fio runs in the mount."""

    def __init__(self, server: GaneshaHost, client: NfsMounter,
                 mount_root: str = "/run/zds/probes", host: str = "127.0.0.1",
                 port: int = NFS_PORT, mountport: int = 20048) -> None:
        self.server = server
        self.client = client
        self.mount_root = mount_root.rstrip("/")
        self.host = host
        self.port = port
        self.mountport = mountport

    def _free_id(self) -> int:
        used = {e.export_id for e in self.server.list_exports()}
        for i in PROBE_EXPORT_IDS:
            if i not in used:
                return i
        raise Conflict("all probe export ids are in use: too many probes at once")

    def attach(self, protocol: str, datastore: str, scratch_path: str, scratch_name: str,
               probe_id: str) -> ProbeAttachment:
        version = NFS_VERSIONS[protocol]
        export_id = self._free_id()
        spec = ExportSpec(export_id=export_id, path=scratch_path, pseudo=scratch_path,
                          protocols=(version,),
                          clients=(ClientRule(clients=("127.0.0.1",), access="RW"),))
        mountpoint = f"{self.mount_root}/{probe_id}"
        attached = ProbeAttachment(mountpoint, False, self.host, "nfs", {
            "export_id": export_id, "export_path": scratch_path, "nfs_version": version,
            "scratch": scratch_name})
        self.server.add_export(spec)
        try:
            self.client.mount(self.host, scratch_path, mountpoint, version, self.port,
                              self.mountport)
        except ZdsError:
            with contextlib.suppress(ZdsError):
                self.server.remove_export(export_id)
            raise
        return attached

    def clean_leftovers(self, running: set[str]) -> list[str]:
        gone = []
        live = {e.export_id: e for e in self.server.list_exports()}
        for export_id in PROBE_EXPORT_IDS:
            e = live.get(export_id)
            if e is None or any(e.path.endswith(f"-{pid}") for pid in running):
                continue
            with contextlib.suppress(ZdsError):
                self.server.remove_export(export_id)
                gone.append(f"export {export_id} ({e.path})")
        return gone

    def detach(self, attached: ProbeAttachment) -> None:
        errors = []
        try:
            self.client.umount(attached.path)
        except ZdsError as exc:
            errors.append(exc)
        try:
            self.server.remove_export(int(attached.details["export_id"]))
        except ZdsError as exc:
            errors.append(exc)
        if errors:
            raise errors[0]
