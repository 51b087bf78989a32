"""NVMe/TCP datastores (``nvme-tcp``): a zvol served as namespace 1 of its own subsystem
through the kernel's NVMe target (nvmet, nvmet-tcp).

Why ``nvme-tcp``: it is the name of the transport binding (NVMe over Fabrics on TCP; the
Linux initiator module is ``nvme-tcp`` and nvme-cli says ``-t tcp``), so a later
``nvme-rdma`` would be a name beside it, as ``nfs3`` and ``nfs41`` are.

Identity, allocated once and recorded (SQLite and the zvol's ``zds:nqn``/``zds:serial``):

- the subsystem NQN ``{nqn_prefix}:{host}.{name}`` (the ``nqn.yyyy-mm.<reversed
  domain>:`` form of the NVMe base specification, with the domain and date of ZDS's IQNs;
  the ``nqn.2014-08.org.nvmexpress:uuid:`` form is for hosts without a domain and would
  tell an admin nothing);
- a UUID (the record's ``serial``): the namespace's ``device_uuid``; its 32 hex digits
  are the ``device_nguid`` (ESXi names a namespace ``eui.<nguid>``; Linux prefers the UUID:
  ``wwid`` = ``uuid.<uuid>``, ``/dev/disk/by-id/nvme-uuid.<uuid>``)
  and its first 20 the subsystem's ``attr_serial``. All three are written before the
  namespace is enabled, so the kernel's random ones are never seen by a host.

Access: the host NQNs of the datastore and of its initiator groups (a group holds a
host's IQN and NQN side by side), ``attr_allow_any_host`` only when asked. There is no
DH-HMAC-CHAP: the appliance's kernel is built without ``CONFIG_NVME_TARGET_AUTH``.
One port (``[nvme] address``, 4420 by default) serves every subsystem and the discovery
subsystem, ANA group 1 optimized. Only subsystems under ``{nqn_prefix}:`` are reconciled.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from appliance import validate
from appliance.actions import Action, ReconcileReport
from appliance.attach import AttachInstructions, shell_quote, virsh_commands
from appliance.errors import Conflict, Unavailable, ZdsError
from appliance.host.factory import HostAdapters, ProbeHosts
from appliance.host.iostats import IoStatsHost
from appliance.host.local import LocalHost
from appliance.host.nvme_initiator import NvmeInitiator
from appliance.host.nvmet import (
    Connections,
    LivePort,
    LiveSubsystem,
    NamespaceSpec,
    NvmetHost,
    PortSpec,
    SubsystemSpec,
    SubsystemSummary,
)
from appliance.host.nvmet import check_spec as check_subsystem
from appliance.host.zfs import DatasetInfo, ZfsHost
from appliance.metrics.counters import BlockReading, Source
from appliance.model import DatastoreRecord, DatastoreSpec, InitiatorGroup
from appliance.settings import Settings
from appliance.store import Store
from appliance.transports.base import (
    LOOKUP_LIMIT,
    Identity,
    Live,
    ProbeAttacher,
    ProbeAttachment,
    Transport,
)
from appliance.transports.storage import VOLUME

MODEL = "ZDS"
NSID = 1
# Said wherever ESXi could be told to use an NVMe/TCP datastore (docs/esxi.md).
ESXI_STATEMENT = (
    "ESXi is not supported on NVMe/TCP datastores: ESXi takes VMFS locks (ATS) with the "
    "fused NVMe COMPARE+WRITE command, and the Linux kernel NVMe target in this appliance "
    "refuses every fused command ('no support for fused commands yet', "
    "drivers/nvme/target/core.c) and reports no fused support (FUSES=0). Use an iscsi "
    "datastore (ATS through LIO's COMPARE AND WRITE) or nfs3 for ESXi; NVMe/TCP is for "
    "Linux/KVM hosts.")
NO_DHCHAP = (
    "DH-HMAC-CHAP is not available: the appliance's kernel (Debian 12, 6.1) is built "
    "without CONFIG_NVME_TARGET_AUTH, so the NVMe target cannot authenticate hosts. "
    "Access is restricted by the host NQN list (nvme.hosts, initiator groups), the "
    "address the NVMe/TCP port listens on ([nvme] address in zds.toml) and the firewall "
    "(the storage networks allowed to reach port 4420)")


def namespace_identity(serial: str) -> tuple[str, str, str]:
    """(device_uuid, device_nguid, attr_serial) of the namespace UUID ``serial``: a fixed
    rule, so the recorded UUID is all a pool needs to carry (tests pin it)."""
    u = uuid.UUID(serial)
    return str(u), u.hex, u.hex[:20]


def host_nqns(access_hosts: Sequence[str], group_names: Sequence[str],
              groups: Mapping[str, InitiatorGroup]) -> tuple[str, ...]:
    names = set(access_hosts)
    for g in group_names:
        group = groups.get(g)
        if group is not None:
            names.update(group.nqns)
    return tuple(sorted(names))


def subsystem_spec(rec: DatastoreRecord, device: str,
                   groups: Mapping[str, InitiatorGroup]) -> SubsystemSpec:
    """The subsystem of an NVMe/TCP datastore whose zvol is ``device``."""
    assert rec.nqn is not None and rec.serial is not None
    access = rec.spec.nvme
    ns_uuid, nguid, serial = namespace_identity(rec.serial)
    return SubsystemSpec(
        nqn=rec.nqn, serial=serial, model=MODEL,
        namespaces=(NamespaceSpec(device=device, uuid=ns_uuid, nguid=nguid, nsid=NSID),),
        hosts=() if access.allow_any_host else host_nqns(access.hosts,
                                                        access.initiator_groups, groups),
        allow_any_host=access.allow_any_host)


def differences(want: SubsystemSpec, have: LiveSubsystem, port: int) -> list[str]:
    """What differs, in words (drift shows them)."""
    out = []
    live = have.spec
    if (live.serial, live.model) != (want.serial, want.model):
        out.append(f"serial/model {live.serial}/{live.model} instead of "
                   f"{want.serial}/{want.model}")
    have_ns = {n.nsid: n for n in live.namespaces}
    for ns in want.namespaces:
        got = have_ns.get(ns.nsid)
        if got is None:
            out.append(f"namespace {ns.nsid} is missing")
        elif got != ns:
            out.append(f"namespace {ns.nsid} differs (device, UUID, NGUID, ANA group or "
                       "enabled)")
    extra = set(have_ns) - {n.nsid for n in want.namespaces}
    if extra:
        out.append(f"namespaces {sorted(extra)} are not desired")
    missing = sorted(set(want.hosts) - set(live.hosts))
    if missing:
        out.append(f"allowed host(s) missing: {', '.join(missing)}")
    unwanted = sorted(set(live.hosts) - set(want.hosts))
    if unwanted:
        out.append(f"host(s) allowed that should not be: {', '.join(unwanted)}")
    if live.allow_any_host != want.allow_any_host:
        out.append(f"allow_any_host is {int(live.allow_any_host)}")
    if port not in have.ports:
        out.append(f"not linked to port {port}")
    return out


@dataclass(frozen=True)
class NvmeLive(Live):
    """The target's subsystems by NQN and its port (to plan), or summaries (a view); who
    is connected when asked."""

    subsystems: Mapping[str, LiveSubsystem] = field(default_factory=dict)
    summaries: Mapping[str, SubsystemSummary] = field(default_factory=dict)
    port: LivePort | None = None
    connections: Connections | None = None


class NvmeTransport(Transport[SubsystemSpec, NvmeLive]):
    """NVMe/TCP through the kernel's nvmet (configfs)."""

    name = "nvme"
    protocols = ("nvme-tcp",)
    storage = VOLUME
    component = "nvmet"
    daemon = "the NVMe target"
    access_fields = ("nvme_hosts", "nvme_initiator_groups", "nvme_allow_any_host",
                     "nvme_dhchap")
    access_said = "nvme hosts, initiator groups, allow_any_host and dhchap"
    access_hint = "use nvme.hosts (host NQNs) for nvme-tcp"
    clients_said = "hosts connected"
    probe_target = "nvme"
    probe_writes = "async"  # a namespace with a volatile write cache, like the LUN
    promote_notes = ()

    def __init__(self, nvmet: NvmetHost | None, zfs: ZfsHost, local: LocalHost,
                 store: Store, nqn_prefix: str, address: tuple[str, int],
                 port_id: int = 1) -> None:
        self.nvmet = nvmet
        self.zfs = zfs
        self.local = local
        self.store = store
        self.nqn_prefix = nqn_prefix
        self.address = address
        self.port_id = port_id

    @classmethod
    def build(cls, settings: Settings, hosts: HostAdapters, store: Store) -> NvmeTransport:
        return cls(hosts.nvmet, hosts.zfs, hosts.local, store, settings.nqn_prefix,
                   settings.nvme_address, settings.nvme_port_id)

    @property
    def port(self) -> PortSpec:
        return PortSpec(self.port_id, self.address[0], self.address[1])

    def subsystem_nqn(self, name: str) -> str:
        """``{nqn_prefix}:{host}.{name}``: stable for the life of the datastore."""
        host = re.sub(r"[^a-z0-9-]", "-", self.local.hostname().lower()).strip("-")
        return validate.nqn(f"{self.nqn_prefix}:{host or 'zds'}.{name}", "subsystem NQN")

    def _groups(self) -> dict[str, InitiatorGroup]:
        return {g.name: g for g in self.store.list_groups()}

    def _host(self) -> NvmetHost:
        if self.nvmet is None:
            raise Unavailable("the NVMe target is not available on this appliance")
        return self.nvmet

    # --- health -----------------------------------------------------------------------

    def available(self) -> bool:
        return self.nvmet is not None and self.nvmet.available()

    def health_detail(self, ok: bool) -> str:
        return (f"NVMe/TCP target ready ({self.address[0]}:{self.address[1]})" if ok
                else "NVMe target (nvmet, nvmet-tcp configfs) not available")

    def require(self) -> None:
        if not self.available():
            raise Unavailable("the NVMe/TCP target is not available (configfs nvmet/: "
                              "modprobe nvmet nvmet-tcp); nothing was changed")

    # --- desired state ----------------------------------------------------------------

    def access_record(self, spec: DatastoreSpec) -> dict[str, Any]:
        return {"nvme_hosts": list(spec.nvme.hosts),
                "nvme_initiator_groups": list(spec.nvme.initiator_groups),
                "nvme_allow_any_host": spec.nvme.allow_any_host}

    def new_identity(self, spec: DatastoreSpec) -> Identity:
        return Identity(nqn=self.subsystem_nqn(spec.name), serial=str(uuid.uuid4()))

    def check(self, spec: DatastoreSpec) -> None:
        probe = DatastoreRecord(spec, "creating", nqn=self.subsystem_nqn(spec.name),
                                serial=str(uuid.uuid4()))
        check_subsystem(subsystem_spec(probe, "/dev/zvol/" + spec.dataset, self._groups()))

    def desired(self, datastores: Sequence[tuple[DatastoreRecord, DatasetInfo]]
                ) -> list[SubsystemSpec]:
        if not datastores:
            return []
        groups = self._groups()
        return [subsystem_spec(rec, self.zfs.zvol_device(rec.spec.dataset), groups)
                for rec, _info in datastores if rec.nqn and rec.serial]

    # --- live state -------------------------------------------------------------------

    def read_live(self, view: bool) -> NvmeLive:
        """One walk of configfs (or summaries for a view, with who is connected)."""
        try:
            if not self.available():
                return NvmeLive(False)
            host = self._host()
            if view:
                return NvmeLive(True, summaries=host.summaries(),
                                connections=host.connections(self.address[1]))
            subs = {s.spec.nqn: s for s in host.list_subsystems()}
            return NvmeLive(True, subs, port=host.get_port(self.port_id))
        except ZdsError:
            return NvmeLive(False)

    def read_for(self, records: Sequence[DatastoreRecord]) -> NvmeLive:
        nqns = {r.nqn for r in records if r.nqn}
        if len(records) > LOOKUP_LIMIT:
            full = self.read_live(view=False)
            return NvmeLive(full.up, {q: s for q, s in full.subsystems.items() if q in nqns},
                            port=full.port)
        try:
            if not self.available():
                return NvmeLive(False)
            host = self._host()
            subs = {}
            for nqn in sorted(nqns):
                live = host.get_subsystem(nqn)
                if live is not None:
                    subs[nqn] = live
            return NvmeLive(True, subs, port=host.get_port(self.port_id))
        except ZdsError:
            return NvmeLive(False)

    def read_one(self, rec: DatastoreRecord, clients: bool) -> NvmeLive:
        try:
            host = self._host()
            live = host.get_subsystem(rec.nqn) if rec.nqn else None
            conns = host.connections(self.address[1]) if clients else None
        except ZdsError:
            return NvmeLive(False)
        return NvmeLive(True, {rec.nqn: live} if live and rec.nqn else {},
                        connections=conns)

    def serving(self, live: NvmeLive, rec: DatastoreRecord) -> bool:
        """Its subsystem is on the port with its namespace enabled."""
        if (sub := live.subsystems.get(rec.nqn or "")) is not None:
            return bool(sub.ports) and any(ns.enabled for ns in sub.spec.namespaces)
        summary = live.summaries.get(rec.nqn or "")
        return summary is not None and summary.namespaces > 0 and bool(summary.ports)

    def clients(self, live: NvmeLive, rec: DatastoreRecord, window: float | None) -> list[str]:
        """Host NQNs connected (as the 6.1 kernel lets us know: appliance.host.nvmet)."""
        if live.connections is None or not rec.nqn:
            return []
        return list(live.connections.of(rec.nqn))

    # --- change -----------------------------------------------------------------------

    def plan(self, desired: Sequence[SubsystemSpec], live: NvmeLive) -> list[Action[Any]]:
        """The port first (only when something is to be served on it), then each
        subsystem that is missing or differs; a subsystem of ours nobody wants goes."""
        actions: list[Action[Any]] = []
        if desired:
            port = live.port
            if port is None:
                actions.append(Action("apply_port", f"nvme port {self.port_id}",
                                      "the NVMe/TCP port is missing", self.port))
            elif (port.spec, port.trtype, port.ana_state) != (self.port, "tcp",
                                                               "optimized"):
                actions.append(Action(
                    "apply_port", f"nvme port {self.port_id}",
                    f"the NVMe/TCP port is {port.trtype} {port.spec.address}:"
                    f"{port.spec.service} (ANA {port.ana_state})", self.port))
        wanted: set[str] = set()
        for spec in desired:
            wanted.add(spec.nqn)
            have = live.subsystems.get(spec.nqn)
            if have is None:
                actions.append(Action("apply_subsystem", spec.nqn, "subsystem is not live",
                                      spec))
            elif diff := differences(spec, have, self.port_id):
                actions.append(Action("apply_subsystem", spec.nqn, "; ".join(diff), spec))
        for nqn in sorted(live.subsystems):
            if nqn.startswith(self.nqn_prefix + ":") and nqn not in wanted:
                actions.append(Action("remove_subsystem", nqn, "subsystem is not desired"))
        return actions

    def apply(self, actions: Sequence[Action[Any]]) -> ReconcileReport:
        """Removals first, then the port, then every subsystem in one pass."""
        report = ReconcileReport(planned=list(actions))
        if not actions:
            return report
        host = self.nvmet
        if host is None:
            for a in actions:
                report.fail(a.subject, f"{a.kind} {a.subject}: the NVMe target is not "
                                       "available")
            return report
        for a in actions:
            if a.kind == "remove_subsystem":
                report.run(a, partial(host.remove_subsystem, a.subject))
        for a in actions:
            if a.kind == "apply_port" and isinstance(a.payload, PortSpec):
                report.run(a, partial(host.apply_port, a.payload))
        applies = [a for a in actions if a.kind == "apply_subsystem" and a.payload is not None]
        report.settle(applies, lambda: host.apply_subsystems(
            [a.payload for a in applies if a.payload is not None], [self.port_id]))
        return report

    def unserved(self, desired: Sequence[SubsystemSpec]) -> list[tuple[str, str]]:
        return [(s.nqn, f"apply_subsystem {s.nqn}: the NVMe target is not available")
                for s in desired]

    def subjects(self, rec: DatastoreRecord) -> tuple[str, ...]:
        return (rec.nqn,) if rec.nqn else ()

    def resized(self, rec: DatastoreRecord) -> None:
        """Its zvol grew: the target tells connected hosts (an AEN) so they see it."""
        if rec.nqn and self.nvmet is not None:
            self.nvmet.revalidate(rec.nqn, NSID)

    # --- attach instructions ----------------------------------------------------------

    def attach(self, rec: DatastoreRecord, server: str, port: int | None,
               path: str | None) -> AttachInstructions:
        return nvme_instructions(rec, server, port or self.address[1])

    def vmware_target(self, rec: DatastoreRecord) -> dict[str, str]:
        return {"naa": f"eui.{namespace_identity(rec.serial or '0' * 32)[1]}"}

    # --- metrics ----------------------------------------------------------------------

    def metrics_read(self, stats: IoStatsHost, records: Sequence[DatastoreRecord],
                     errors: list[str]) -> object:
        return None  # the target keeps no per-subsystem counters: the zvol's are used

    def metrics_sources(self, reading: object, rec: DatastoreRecord,
                        blocks: BlockReading) -> list[Source] | None:
        """Its zvol's block counters (every I/O a host makes reaches them)."""
        return [s for s in (blocks.zvol(rec.spec.dataset),) if s is not None]

    # --- probes -----------------------------------------------------------------------

    def probe_attacher(self, hosts: ProbeHosts) -> NvmeProbeAttach:
        return NvmeProbeAttach(self.nvmet, hosts.nvme, self.nqn_prefix, self.port)

    def probe_settings(self, rec: DatastoreRecord) -> dict[str, Any]:
        if rec.nqn is None or rec.serial is None:
            return {}
        return {"nvmet": {"nqn": rec.nqn, "port": f"{self.address[0]}:{self.address[1]}",
                          "nguid": namespace_identity(rec.serial)[1]}}

    # --- replication ------------------------------------------------------------------

    def promote_identity(self, source: DatastoreRecord, keep: bool,
                         records: Sequence[DatastoreRecord], name: str
                         ) -> tuple[Identity, list[str]]:
        """The source's NQN and namespace UUID (hosts see the same device) or new ones."""
        if keep:
            nqn, serial = source.nqn, source.serial
            clash = [r.name for r in records if (nqn and r.nqn == nqn)
                     or (serial and r.serial == serial)]
            if clash or not nqn or not serial:
                raise Conflict(
                    f"the source's NQN/namespace UUID is in use here by {', '.join(clash)}: "
                    "two namespaces with one NGUID confuse every host. Promote with "
                    "identity=new" if clash else "the replica carries no NQN/UUID to keep",
                    detail={"datastores": clash})
            nguid = namespace_identity(serial)[1]
            return Identity(nqn=nqn, serial=serial), [
                f"The namespace keeps the source's NGUID {nguid} in subsystem {nqn}: use "
                "this only when the source is gone for good; hosts reconnect to the same "
                "device."]
        identity = Identity(nqn=self.subsystem_nqn(name), serial=str(uuid.uuid4()))
        assert identity.serial is not None
        return identity, [
            f"The namespace has a new NGUID ({namespace_identity(identity.serial)[1]}) in "
            f"subsystem {identity.nqn}: hosts connect to it as a new device; the data "
            "(guest file systems, LVM) is as it was."]


def nvme_instructions(rec: DatastoreRecord, server: str, port: int) -> AttachInstructions:
    assert rec.nqn is not None and rec.serial is not None
    q = shell_quote
    name, nqn = rec.name, rec.nqn
    ns_uuid, nguid, _serial = namespace_identity(rec.serial)
    # Linux's wwid (and udev's by-id name) is the namespace UUID when there is one
    by_id = f"/dev/disk/by-id/nvme-uuid.{ns_uuid}"
    linux = [
        "modprobe nvme-tcp",
        "cat /etc/nvme/hostnqn   # this host's NQN: allow it with PUT (nvme.hosts)",
        f"nvme discover -t tcp -a {q(server)} -s {port}",
        f"nvme connect -t tcp -a {q(server)} -s {port} -n {q(nqn)}",
        f"ls -l {by_id}",
        "# at every boot: the discovery controller connects every subsystem allowed",
        f"echo '-t tcp -a {server} -s {port}' >> /etc/nvme/discovery.conf",
        "systemctl enable nvmf-autoconnect.service",
        f"# to detach: nvme disconnect -n {q(nqn)}",
    ]
    esxi = [f"# {ESXI_STATEMENT}"]
    xml = (
        "<pool type='disk'>\n"
        f"  <name>{escape(name)}</name>\n"
        "  <source>\n"
        f"    <device path={quoteattr(by_id)}/>\n"
        "    <format type='gpt'/>\n"
        "  </source>\n"
        "  <target>\n"
        "    <path>/dev</path>\n"
        "  </target>\n"
        "</pool>\n"
    )
    access = rec.spec.nvme
    notes = [f"namespace {NSID} of {nqn}, UUID {ns_uuid}, NGUID {nguid} (stable for the "
             "life of the datastore); the KVM host connects first (linux above), then "
             f"libvirt uses {by_id} as the pool's disk",
             ESXI_STATEMENT]
    if access.allow_any_host:
        notes.append("any host that reaches the port may connect (allow_any_host)")
    elif access.hosts or access.initiator_groups:
        notes.append("allowed hosts: " + ", ".join(
            [*access.hosts, *(f"group:{g}" for g in access.initiator_groups)]))
    else:
        notes.append("no host is allowed yet: add host NQNs with PUT (nvme.hosts)")
    notes.append("no DH-HMAC-CHAP on this kernel: access is the host NQN list, the port's "
                 "address and the firewall")
    if rec.origin:
        notes.append(f"this namespace is a clone of snapshot {rec.origin} (new NGUID): it "
                     "holds the source's data as it was; never let one host mount both "
                     "file systems by UUID at once")
    else:
        notes.append(f"libvirt: `virsh pool-build {name}` writes a GPT label on the new "
                     "namespace before pool-start (never on a clone: it holds data)")
    return AttachInstructions(esxi, xml, virsh_commands(name), notes, linux)


class NvmeProbeAttach(ProbeAttacher):
    """The scratch zvol gets a temporary subsystem ``{nqn_prefix}.probe:{id}`` (outside
    the reconciler's ``{nqn_prefix}:``) whose only host is the appliance's own; nvme-cli
    connects over loopback and fio runs on the namespace's block device."""

    def __init__(self, nvmet: NvmetHost | None, initiator: NvmeInitiator | None,
                 nqn_prefix: str, port: PortSpec) -> None:
        self._nvmet = nvmet
        self.initiator = initiator
        self.nqn_base = f"{nqn_prefix}.probe"
        self.port = port
        self.host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(port.address, port.address)

    def nqn(self, probe_id: str) -> str:
        return f"{self.nqn_base}:{probe_id}"

    @property
    def nvmet(self) -> NvmetHost:
        if self._nvmet is None:
            raise Unavailable("the NVMe target is not available for NVMe/TCP probes")
        return self._nvmet

    def _initiator(self) -> NvmeInitiator:
        if self.initiator is None:
            raise Unavailable("nvme-cli is not available for NVMe/TCP probes")
        return self.initiator

    def attach(self, protocol: str, datastore: str, scratch_path: str, scratch_name: str,
               probe_id: str) -> ProbeAttachment:
        initiator = self._initiator()
        nqn = self.nqn(probe_id)
        ns_uuid = uuid.uuid4()
        spec = SubsystemSpec(nqn=nqn, serial=ns_uuid.hex[:20], model=MODEL, namespaces=(
            NamespaceSpec(device=scratch_path, uuid=str(ns_uuid), nguid=ns_uuid.hex),),
            hosts=(initiator.host_nqn(),))
        if self.nvmet.get_port(self.port.port_id) is None:
            self.nvmet.apply_port(self.port)
        self.nvmet.apply_subsystem(spec, [self.port.port_id])
        try:
            device = initiator.connect(nqn, self.host, self.port.service)
        except ZdsError:
            with contextlib.suppress(ZdsError):
                self.nvmet.remove_subsystem(nqn)
            raise
        return ProbeAttachment(device, True, self.host, "block", {
            "nqn": nqn, "port": f"{self.host}:{self.port.service}", "scratch": scratch_name})

    def detach(self, attached: ProbeAttachment) -> None:
        nqn = str(attached.details["nqn"])
        errors = []
        try:
            self._initiator().disconnect(nqn)
        except ZdsError as exc:
            errors.append(exc)
        try:
            self.nvmet.remove_subsystem(nqn)
        except ZdsError as exc:
            errors.append(exc)
        if errors:
            raise errors[0]

    def clean_leftovers(self, running: set[str]) -> list[str]:
        gone = []
        for s in self.nvmet.list_subsystems():
            nqn = s.spec.nqn
            if not nqn.startswith(self.nqn_base + ":") or nqn.split(":", 1)[1] in running:
                continue
            with contextlib.suppress(ZdsError):
                self._initiator().disconnect(nqn)
            with contextlib.suppress(ZdsError):
                self.nvmet.remove_subsystem(nqn)
                gone.append(f"subsystem {nqn}")
        return gone
