"""iSCSI datastores (``iscsi``): a zvol served as LUN 0 of its own LIO target.

One target per datastore with a stable IQN (``{iqn_prefix}:{host}.{name}``) and unit
serial (so LIO's NAA WWN never changes), a block backstore ``zds-{name}`` on the zvol with
VAAI on, one ACL per allowed initiator (its own and its initiator groups'), CHAP on each
ACL. Only targets under ``{iqn_prefix}:`` and backstores named ``zds-*`` are reconciled.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from appliance import validate
from appliance.actions import Action, ReconcileReport
from appliance.attach import AttachInstructions, shell_quote, virsh_commands
from appliance.errors import Conflict, Unavailable, ZdsError
from appliance.host.factory import HostAdapters, ProbeHosts
from appliance.host.iostats import IoStatsHost
from appliance.host.iscsi_initiator import Initiator
from appliance.host.lio import (
    AclSpec,
    Chap,
    LioHost,
    LiveTarget,
    LunSpec,
    TargetSpec,
    TargetSummary,
)
from appliance.host.lio import check_spec as check_target
from appliance.host.local import LocalHost
from appliance.host.zfs import DatasetInfo, ZfsHost
from appliance.metrics.counters import BlockReading, Source, commands_values
from appliance.model import (
    DATASTORE_PARENT,
    DatastoreRecord,
    DatastoreSpec,
    InitiatorGroup,
    naa_wwn,
)
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

BACKSTORE_PREFIX = "zds-"
PLACEHOLDER_IQN = "YOUR-HOST-INITIATOR-IQN"


@dataclass(frozen=True)
class IscsiLive(Live):
    """LIO's targets by IQN and its backstores (to plan), or only summaries (a view:
    LUN count and sessions, 4 configfs reads a target instead of ~25)."""

    targets: Mapping[str, LiveTarget] = field(default_factory=dict)
    backstores: frozenset[str] = frozenset()
    summaries: Mapping[str, TargetSummary] = field(default_factory=dict)


def backstore_name(datastore: str) -> str:
    return f"{BACKSTORE_PREFIX}{datastore}"


def target_spec(rec: DatastoreRecord, device: str, groups: Mapping[str, InitiatorGroup],
                portal: tuple[str, int]) -> TargetSpec:
    """The LIO target of an iSCSI datastore whose zvol is ``device``."""
    assert rec.iqn is not None and rec.serial is not None
    access = rec.spec.iscsi
    initiators: list[str] = list(access.initiators)
    for name in access.initiator_groups:
        group = groups.get(name)
        if group is not None:
            initiators.extend(group.iqns)  # its hosts' NVMe NQNs are the NVMe target's
    chap = None
    if access.chap is not None:
        chap = Chap(access.chap.user, access.chap.secret, access.chap.mutual_user,
                    access.chap.mutual_secret)
    acls = tuple(AclSpec(i, chap) for i in sorted(set(initiators)))
    # its persistent reservations (APTPL) live on the pool, so they move with it
    lun = LunSpec(backstore=backstore_name(rec.name), device=device, serial=rec.serial,
                  pr_dataset=f"{rec.spec.pool}/{DATASTORE_PARENT}")
    return TargetSpec(iqn=rec.iqn, luns=(lun,), acls=acls, portals=(portal,))


def target_matches(desired: TargetSpec, live: TargetSpec) -> bool:
    """Equal in everything ZDS manages (attributes: only the keys ZDS sets)."""
    if desired.iqn != live.iqn or set(desired.portals) != set(live.portals):
        return False
    if sorted(desired.acls, key=lambda a: a.initiator) != sorted(
            live.acls, key=lambda a: a.initiator):
        return False
    if len(desired.luns) != len(live.luns):
        return False
    live_luns = {lun.lun: lun for lun in live.luns}
    for want in desired.luns:
        have = live_luns.get(want.lun)
        if have is None or (have.backstore, have.device, have.serial) != (
                want.backstore, want.device, want.serial):
            return False
        if any(have.attributes.get(k) != v for k, v in want.attributes.items()):
            return False
    return True


def plan_targets(targets: Sequence[TargetSpec], live_targets: Iterable[LiveTarget],
                 live_backstores: Iterable[str], iqn_prefix: str) -> list[Action[TargetSpec]]:
    """What must change so LIO serves ``targets``: a missing or different target is
    (re)applied; a target of ours (under ``iqn_prefix:``) nobody wants is removed with its
    backstores, and a ``zds-*`` backstore no target uses is removed."""
    actions: list[Action[TargetSpec]] = []
    live_by_iqn = {t.spec.iqn: t for t in live_targets}
    wanted_iqns: set[str] = set()
    wanted_backstores: set[str] = set()
    for target in targets:
        wanted_iqns.add(target.iqn)
        wanted_backstores.update(lun.backstore for lun in target.luns)
        live = live_by_iqn.get(target.iqn)
        if live is None:
            actions.append(Action("apply_target", target.iqn, "target is not live", target))
        elif not target_matches(target, live.spec):
            actions.append(Action("apply_target", target.iqn, "target differs from desired",
                                  target))
        elif not live.enabled or live.authentication != any(a.chap for a in target.acls):
            # half-built (a crash inside apply_target): not enabled, or CHAP not enforced
            actions.append(Action("apply_target", target.iqn, "target is not finished "
                                  f"(enabled {live.enabled}, CHAP enforced "
                                  f"{live.authentication})", target))
    removed_backstores: set[str] = set()
    for live in live_by_iqn.values():
        iqn = live.spec.iqn
        if iqn.startswith(iqn_prefix + ":") and iqn not in wanted_iqns:
            actions.append(Action("remove_target", iqn, "target is not desired"))
            removed_backstores.update(lun.backstore for lun in live.spec.luns)
    for name in sorted(live_backstores):
        if (name.startswith(BACKSTORE_PREFIX) and name not in wanted_backstores
                and name not in removed_backstores):
            actions.append(Action("remove_backstore", name, "backstore is not used"))
    return actions


@dataclass(frozen=True)
class IscsiReading:
    """One collection's SCSI commands per target (LIO counts them per initiator)."""

    commands: Mapping[str, int]


class IscsiTransport(Transport[TargetSpec, IscsiLive]):
    """iSCSI through the kernel's LIO target (configfs, rtslib-fb)."""

    name = "iscsi"
    protocols = ("iscsi",)
    storage = VOLUME
    component = "lio"
    daemon = "LIO"
    access_fields = ("initiators", "initiator_groups", "chap")
    access_said = "initiators, initiator_groups and chap"
    access_hint = "use initiators for iscsi"
    clients_said = "initiators logged in"
    probe_target = "iscsi"
    probe_writes = "async"  # a LUN with its write cache on (WCE=1)

    def __init__(self, lio: LioHost, zfs: ZfsHost, local: LocalHost, store: Store,
                 iqn_prefix: str, portal: tuple[str, int]) -> None:
        self.lio = lio
        self.zfs = zfs
        self.local = local
        self.store = store
        self.iqn_prefix = iqn_prefix
        self.portal = portal

    @classmethod
    def build(cls, settings: Settings, hosts: HostAdapters, store: Store) -> IscsiTransport:
        return cls(hosts.lio, hosts.zfs, hosts.local, store, settings.iqn_prefix,
                   settings.iscsi_portal)

    def target_iqn(self, name: str) -> str:
        """``{iqn_prefix}:{host}.{name}``: stable for the life of the datastore."""
        host = re.sub(r"[^a-z0-9-]", "-", self.local.hostname().lower()).strip("-")
        return validate.iqn(f"{self.iqn_prefix}:{host or 'zds'}.{name}")

    def _groups(self) -> dict[str, InitiatorGroup]:
        return {g.name: g for g in self.store.list_groups()}

    # --- health -----------------------------------------------------------------------

    def available(self) -> bool:
        return self.lio.available()

    def health_detail(self, ok: bool) -> str:
        return "configfs target ready" if ok else "LIO target (configfs) not available"

    def require(self) -> None:
        if not self.available():
            raise Unavailable("the LIO iSCSI target is not available (configfs/target "
                              "modules); nothing was changed")

    # --- desired state ----------------------------------------------------------------

    def access_record(self, spec: DatastoreSpec) -> dict[str, Any]:
        return {"initiators": list(spec.iscsi.initiators),
                "initiator_groups": list(spec.iscsi.initiator_groups),
                "chap": spec.iscsi.chap is not None}

    def new_identity(self, spec: DatastoreSpec) -> Identity:
        return Identity(iqn=self.target_iqn(spec.name), serial=str(uuid.uuid4()))

    def check(self, spec: DatastoreSpec) -> None:
        probe = DatastoreRecord(spec, "creating", iqn=self.target_iqn(spec.name),
                                serial=str(uuid.uuid4()))
        check_target(target_spec(probe, "/dev/zvol/" + spec.dataset, self._groups(),
                                 self.portal))

    def desired(self, datastores: Sequence[tuple[DatastoreRecord, DatasetInfo]]
                ) -> list[TargetSpec]:
        if not datastores:
            return []
        groups = self._groups()
        return [target_spec(rec, self.zfs.zvol_device(rec.spec.dataset), groups, self.portal)
                for rec, _info in datastores]

    # --- live state -------------------------------------------------------------------

    def read_live(self, view: bool) -> IscsiLive:
        """One walk of configfs: every target and backstore, or for a view summaries."""
        try:
            if not self.lio.available():
                return IscsiLive(False)
            if view:
                return IscsiLive(True, summaries=self.lio.summarize_targets())
            targets = {t.spec.iqn: t for t in self.lio.list_targets()}
            return IscsiLive(True, targets, frozenset(self.lio.list_backstores()))
        except ZdsError:
            return IscsiLive(False)

    def read_for(self, records: Sequence[DatastoreRecord]) -> IscsiLive:
        iqns = {r.iqn for r in records if r.iqn}
        if len(records) > LOOKUP_LIMIT:
            full = self.read_live(view=False)
            return IscsiLive(full.up, {q: t for q, t in full.targets.items() if q in iqns},
                             full.backstores & {backstore_name(r.name) for r in records})
        targets: dict[str, LiveTarget] = {}
        if iqns:
            try:
                if not self.lio.available():
                    return IscsiLive(False)
                for iqn in sorted(iqns):
                    t = self.lio.get_target(iqn)
                    if t is not None:
                        targets[iqn] = t
            except ZdsError:
                return IscsiLive(False)
        # a backstore left without its target (a crash in between) is the watcher's to
        # clean; one still in use by the live target is known from it
        return IscsiLive(True, targets)

    def read_withdraw(self, records: Sequence[DatastoreRecord]) -> IscsiLive:
        """Removing a target removes its backstores; a backstore whose target is gone (a
        crash inside remove_target or apply_target) still holds the zvol open (``zfs
        destroy``: busy), so when a target is missing the backstores are listed too."""
        live = self.read_for(records)
        if not live.up or all(r.iqn in live.targets for r in records if r.iqn):
            return live
        try:
            names = set(self.lio.list_backstores())
        except ZdsError:
            return live
        return replace(live, backstores=frozenset(
            names & {backstore_name(r.name) for r in records}))

    def read_one(self, rec: DatastoreRecord, clients: bool) -> IscsiLive:
        """A few configfs reads: the target with its sessions."""
        try:
            target = self.lio.get_target(rec.iqn) if rec.iqn else None
        except ZdsError:
            return IscsiLive(False)
        return IscsiLive(True, {rec.iqn: target} if target and rec.iqn else {})

    def serving(self, live: IscsiLive, rec: DatastoreRecord) -> bool:
        """Its target exists with a LUN."""
        if (target := live.targets.get(rec.iqn or "")) is not None:
            return bool(target.spec.luns)
        summary = live.summaries.get(rec.iqn or "")
        return summary is not None and summary.luns > 0

    def clients(self, live: IscsiLive, rec: DatastoreRecord, window: float | None) -> list[str]:
        """Initiators logged in."""
        target = live.targets.get(rec.iqn or "") or live.summaries.get(rec.iqn or "")
        return sorted(target.sessions) if target is not None else []

    # --- change -----------------------------------------------------------------------

    def plan(self, desired: Sequence[TargetSpec], live: IscsiLive) -> list[Action[Any]]:
        return list(plan_targets(desired, live.targets.values(), live.backstores,
                                 self.iqn_prefix))

    def apply(self, actions: Sequence[Action[Any]]) -> ReconcileReport:
        """Removals first (they free devices and names), then every target in one
        configfs pass."""
        report = ReconcileReport(planned=list(actions))
        for a in actions:
            if a.kind == "remove_target":
                report.run(a, partial(self.lio.remove_target, a.subject))
        for a in actions:
            if a.kind == "remove_backstore":
                report.run(a, partial(self.lio.remove_backstore, a.subject))
        applies = [a for a in actions if a.kind == "apply_target" and a.payload is not None]
        report.settle(applies, lambda: self.lio.apply_targets(
            [a.payload for a in applies if a.payload is not None]))
        return report

    def unserved(self, desired: Sequence[TargetSpec]) -> list[tuple[str, str]]:
        return [(t.iqn, f"apply_target {t.iqn}: LIO is not available") for t in desired]

    def subjects(self, rec: DatastoreRecord) -> tuple[str, ...]:
        return (*((rec.iqn,) if rec.iqn else ()), backstore_name(rec.name))

    # --- attach instructions ----------------------------------------------------------

    def attach(self, rec: DatastoreRecord, server: str, port: int | None,
               path: str | None) -> AttachInstructions:
        wwn = naa_wwn(rec.serial) if rec.serial else ""
        return iscsi_instructions(rec, server, wwn, port or self.portal[1])

    def vmware_target(self, rec: DatastoreRecord) -> dict[str, str]:
        return {"naa": naa_wwn(rec.serial or "")}

    # --- metrics ----------------------------------------------------------------------

    def metrics_read(self, stats: IoStatsHost, records: Sequence[DatastoreRecord],
                     errors: list[str]) -> IscsiReading:
        """LIO's per-initiator counters of the ACLs ZDS maps, read directly (listing
        configfs was most of a collection at 500 LUNs)."""
        groups = self._groups()
        acls: list[tuple[str, str, int]] = []
        for r in records:
            if not r.iqn:
                continue
            names = set(r.spec.iscsi.initiators)
            for g in r.spec.iscsi.initiator_groups:
                group = groups.get(g)
                names.update(group.iqns if group else ())
            acls.extend((r.iqn, name, 0) for name in sorted(names))
        commands: dict[str, int] = {}
        for i in stats.initiator_io(acls):
            commands[i.target] = commands.get(i.target, 0) + i.commands
        return IscsiReading(commands)

    def metrics_sources(self, reading: object, rec: DatastoreRecord,
                        blocks: BlockReading) -> list[Source] | None:
        """Its zvol's block counters and the commands LIO counted on its target."""
        assert isinstance(reading, IscsiReading)
        out = [s for s in (blocks.zvol(rec.spec.dataset),) if s is not None]
        if rec.iqn and rec.iqn in reading.commands:
            out.append((f"lio:{rec.iqn}", commands_values(reading.commands[rec.iqn])))
        return out

    # --- probes -----------------------------------------------------------------------

    def probe_attacher(self, hosts: ProbeHosts) -> IscsiProbeAttach:
        return IscsiProbeAttach(self.lio, hosts.initiator, self.iqn_prefix, self.portal)

    def probe_settings(self, rec: DatastoreRecord) -> dict[str, Any]:
        if rec.iqn is None:
            return {}
        try:
            return {"lio": {"iqn": rec.iqn, **self.lio.tpg_attributes(rec.iqn)}}
        except ZdsError:
            return {}

    # --- replication ------------------------------------------------------------------

    def promote_identity(self, source: DatastoreRecord, keep: bool,
                         records: Sequence[DatastoreRecord], name: str
                         ) -> tuple[Identity, list[str]]:
        """The source's IQN and serial (ESXi mounts the same VMFS) or new ones (ESXi sees
        a snapshot volume and resignatures it)."""
        if keep:
            iqn, serial = source.iqn, source.serial
            clash = [r.name for r in records if (iqn and r.iqn == iqn)
                     or (serial and r.serial == serial)]
            if clash or not iqn or not serial:
                raise Conflict(
                    f"the source's IQN/unit serial is in use here by {', '.join(clash)}: "
                    "two LUNs with one NAA id confuse every initiator. Promote with "
                    "identity=new (ESXi then resignatures the VMFS copy)"
                    if clash else "the replica carries no IQN/serial to keep",
                    detail={"datastores": clash})
            return Identity(iqn=iqn, serial=serial), [
                f"The LUN keeps the source's NAA id {naa_wwn(serial)} and IQN {iqn}: use "
                "this only when the source is gone for good; ESXi mounts the VMFS volume "
                "as before (no resignature)."]
        identity = Identity(iqn=self.target_iqn(name), serial=str(uuid.uuid4()))
        assert identity.serial is not None
        return identity, [
            f"The LUN has a new NAA id ({naa_wwn(identity.serial)}): ESXi sees the VMFS "
            "volume on it as a snapshot. Mount it with `esxcli storage vmfs snapshot "
            "resignature -l LABEL` (a new datastore UUID; re-register the VMs), or `esxcli "
            "storage vmfs snapshot mount -l LABEL` to keep the signature when the source "
            "is gone for good. libvirt/KVM: the guest file systems are as they were."]


def iscsi_instructions(rec: DatastoreRecord, server: str, wwn: str,
                       port: int = 3260) -> AttachInstructions:
    assert rec.iqn is not None
    q = shell_quote
    name, iqn = rec.name, rec.iqn
    chap = rec.spec.iscsi.chap
    adapter = "vmhba64"
    esxi = [
        "esxcli iscsi software set --enabled=true",
        "esxcli iscsi adapter list   # note the software adapter name; vmhba64 below",
        f"esxcli iscsi adapter discovery statictarget add --adapter={adapter} "
        f"--address={q(f'{server}:{port}')} --name={q(iqn)}",
    ]
    if chap is not None:
        esxi.append(
            f"esxcli iscsi adapter target portal auth chap set --adapter={adapter} "
            f"--address={q(f'{server}:{port}')} --name={q(iqn)} --direction=uni "
            f"--level=required --authname={q(chap.user)} --secret=<CHAP secret>"
        )
        if chap.mutual_user:
            esxi.append(
                f"esxcli iscsi adapter target portal auth chap set --adapter={adapter} "
                f"--address={q(f'{server}:{port}')} --name={q(iqn)} --direction=mutual "
                f"--level=required --authname={q(chap.mutual_user)} "
                "--secret=<mutual CHAP secret>"
            )
    esxi += [
        f"esxcli storage core adapter rescan --adapter={adapter}",
        f"esxcli storage core device list -d {wwn}",
        f"esxcli storage core device vaai status get -d {wwn}   # ATS, Clone, Delete: supported",
    ]
    if not rec.origin:  # a clone already holds a VMFS: formatting it would lose it
        esxi.append("# then create the VMFS datastore on that device in the vSphere client "
                    f"(name it {name})")
    auth = ""
    if chap is not None:
        auth = (f"    <auth type='chap' username={quoteattr(chap.user)}>\n"
                f"      <secret usage={quoteattr(name + '-chap')}/>\n"
                "    </auth>\n")
    # iscsi-direct logs in with libiscsi as the initiator the XML names: the datastore's
    # own (first) initiator when it lists one, else a placeholder the admin replaces
    initiators = rec.spec.iscsi.initiators
    host_iqn = initiators[0] if initiators else PLACEHOLDER_IQN
    xml = (
        "<pool type='iscsi-direct'>\n"
        f"  <name>{escape(name)}</name>\n"
        "  <source>\n"
        f"    <host name={quoteattr(server)} port='{port}'/>\n"
        f"    <device path={quoteattr(iqn)}/>\n"
        "    <initiator>\n"
        f"      <iqn name={quoteattr(host_iqn)}/>\n"
        "    </initiator>\n"
        f"{auth}"
        "  </source>\n"
        "</pool>\n"
    )
    notes = [f"LUN 0 of {iqn}, device id {wwn} (stable for the life of the datastore)"]
    if host_iqn == PLACEHOLDER_IQN:
        notes.append(f"libvirt: put your host's initiator IQN (/etc/iscsi/initiatorname.iscsi) "
                     f"in place of {PLACEHOLDER_IQN} in the pool XML")
    elif len(initiators) > 1:
        notes.append(f"libvirt: the pool XML logs in as {host_iqn}; on another of the allowed "
                     "hosts put its own IQN there")
    if initiators or rec.spec.iscsi.initiator_groups:
        notes.append("allowed initiators: "
                     + ", ".join([*initiators, *(f"group:{g}" for g in
                                                 rec.spec.iscsi.initiator_groups)]))
    else:
        notes.append("no initiator is allowed yet: add IQNs with PUT (iscsi.initiators)")
    if chap is not None:
        notes.append(f"libvirt: virsh secret-define a secret with usage '{name}-chap' "
                     "holding the CHAP secret first")
    if rec.origin:
        source = clone_source(rec)
        esxi += [
            "# a clone carries a copy of the source's VMFS: ESXi sees a snapshot volume",
            "esxcli storage vmfs snapshot list",
            f"esxcli storage vmfs snapshot resignature --volume-label={q(source)}",
            "# the resignatured datastore mounts as snap-XXXXXXXX-"
            f"{source}: rename it {name}",
        ]
        notes += [
            f"this LUN is a clone of snapshot {rec.origin} (new NAA id {wwn}): its VMFS is "
            "a copy of the source's. Resignature it (above) before mounting; never mount it "
            "with its old signature while the source is mounted",
            "libvirt: the LUN holds the source's disk as it was then; attach it to a domain "
            "as a new disk (iscsi-direct pool above) and copy what you need",
        ]
    return AttachInstructions(esxi, xml, virsh_commands(name), notes)


def clone_source(rec: DatastoreRecord) -> str:
    """The name of the datastore a clone was made from (its VMFS label, as ZDS
    suggests naming the VMFS after the datastore)."""
    dataset = (rec.origin or "").split("@", 1)[0]
    return dataset.rsplit("/", 1)[-1]


class IscsiProbeAttach(ProbeAttacher):
    """The scratch zvol gets a temporary target ``{iqn_prefix}.probe:{id}`` (outside the
    reconciler's ``{iqn_prefix}:`` namespace; backstore ``probe-{id}``, not ``zds-*``)
    whose only ACL is the appliance's own initiator; open-iscsi logs in on 127.0.0.1 and
    fio runs on the block device."""

    def __init__(self, lio: LioHost, initiator: Initiator, iqn_prefix: str,
                 portal: tuple[str, int] = ("0.0.0.0", 3260), host: str = "127.0.0.1") -> None:
        self.lio = lio
        self.initiator = initiator
        self.iqn_base = f"{iqn_prefix}.probe"
        self.portal = portal
        self.host = host

    def iqn(self, probe_id: str) -> str:
        return f"{self.iqn_base}:{probe_id}"

    def attach(self, protocol: str, datastore: str, scratch_path: str, scratch_name: str,
               probe_id: str) -> ProbeAttachment:
        iqn = self.iqn(probe_id)
        spec = TargetSpec(
            iqn=iqn,
            luns=(LunSpec(backstore=f"probe-{probe_id}", device=scratch_path,
                          serial=f"zdsprobe{probe_id}"),),
            acls=(AclSpec(self.initiator.initiator_name()),),
            portals=(self.portal,),
        )
        self.lio.apply_target(spec)
        try:
            device = self.initiator.login(iqn, self.host, self.portal[1])
        except ZdsError:
            with contextlib.suppress(ZdsError):
                self.lio.remove_target(iqn)
            raise
        return ProbeAttachment(device, True, self.host, "block", {
            "iqn": iqn, "portal": f"{self.host}:{self.portal[1]}", "scratch": scratch_name})

    def clean_leftovers(self, running: set[str]) -> list[str]:
        gone = []
        for t in self.lio.list_targets():
            iqn = t.spec.iqn
            if not iqn.startswith(self.iqn_base + ":") or iqn.split(":", 1)[1] in running:
                continue
            with contextlib.suppress(ZdsError):
                self.initiator.logout(iqn, self.host, self.portal[1])
            with contextlib.suppress(ZdsError):
                self.lio.remove_target(iqn)
                gone.append(f"target {iqn}")
        return gone

    def detach(self, attached: ProbeAttachment) -> None:
        iqn = str(attached.details["iqn"])
        errors = []
        try:
            self.initiator.logout(iqn, self.host, self.portal[1])
        except ZdsError as exc:
            errors.append(exc)
        try:
            self.lio.remove_target(iqn)
        except ZdsError as exc:
            errors.append(exc)
        if errors:
            raise errors[0]
