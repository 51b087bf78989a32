"""Desired state -> live LIO/ganesha state.

Planning is pure (plain data in, a list of :class:`Action` out) so it is unit-tested
without a host; :func:`apply` runs the actions through the adapters. The same plan, not
applied, is the "drift" the system endpoint reports.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from appliance.errors import ZdsError
from appliance.host.ganesha import GaneshaHost, LiveExport
from appliance.host.ganesha_config import ClientRule, ExportSpec
from appliance.host.lio import AclSpec, Chap, LioHost, LiveTarget, LunSpec, TargetSpec
from appliance.model import DatastoreRecord, InitiatorGroup

log = logging.getLogger(__name__)

BACKSTORE_PREFIX = "zds-"
MIN_EXPORT_ID = 100
# Export ids of the performance probes' temporary scratch exports (appliance/probes):
# not datastores, so the reconciler leaves them alone.
PROBE_EXPORT_IDS = range(65500, 65510)

ActionKind = Literal[
    "add_export", "update_export", "remove_export",
    "apply_target", "remove_target", "remove_backstore",
]


@dataclass(frozen=True)
class Action:
    kind: ActionKind
    subject: str  # export id, target IQN or backstore name
    reason: str
    export: ExportSpec | None = None
    target: TargetSpec | None = None

    def describe(self) -> str:
        return f"{self.kind} {self.subject}: {self.reason}"


@dataclass
class ReconcileReport:
    planned: list[Action] = field(default_factory=list)
    applied: list[Action] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # subject (export id, target IQN, backstore) -> what went wrong with it
    failed: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors

    def fail(self, subject: str, message: str) -> None:
        self.failed.setdefault(subject, []).append(message)
        self.errors.append(message)

    def failures_for(self, *subjects: str | int | None) -> list[str]:
        """Error messages about any of ``subjects`` (exact match, not substring)."""
        return [m for s in subjects if s is not None for m in self.failed.get(str(s), [])]


def backstore_name(datastore: str) -> str:
    return f"{BACKSTORE_PREFIX}{datastore}"


def export_spec(rec: DatastoreRecord, path: str) -> ExportSpec:
    """The ganesha export of an NFS datastore whose dataset is mounted at ``path``."""
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
        protocols=(3,) if spec.protocol == "nfs3" else (4,),
        clients=tuple(rules),
    )


def target_spec(rec: DatastoreRecord, device: str, groups: Mapping[str, InitiatorGroup],
                portal: tuple[str, int]) -> TargetSpec:
    """The LIO target of an iSCSI datastore whose zvol is ``device``."""
    assert rec.iqn is not None and rec.serial is not None
    access = rec.spec.iscsi
    initiators: list[str] = list(access.initiators)
    for name in access.initiator_groups:
        group = groups.get(name)
        if group is not None:
            initiators.extend(group.initiators)
    chap = None
    if access.chap is not None:
        chap = Chap(access.chap.user, access.chap.secret, access.chap.mutual_user,
                    access.chap.mutual_secret)
    acls = tuple(AclSpec(i, chap) for i in sorted(set(initiators)))
    lun = LunSpec(backstore=backstore_name(rec.name), device=device, serial=rec.serial)
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


def plan(
    exports: Sequence[ExportSpec],
    live_exports: Sequence[LiveExport],
    rendered: Callable[[int], str | None],
    render: Callable[[ExportSpec], str],
    targets: Sequence[TargetSpec],
    live_targets: Sequence[LiveTarget],
    live_backstores: Iterable[str],
    iqn_prefix: str,
) -> list[Action]:
    """What must change so ganesha and LIO match the desired exports and targets.

    Only ZDS's own objects are touched: exports with ids >= 100, targets whose IQN starts
    with ``iqn_prefix``, backstores named ``zds-*``.
    """
    actions: list[Action] = []
    live_by_id = {e.export_id: e for e in live_exports}
    wanted_ids: set[int] = set()
    for spec in exports:
        wanted_ids.add(spec.export_id)
        live = live_by_id.get(spec.export_id)
        if live is None:
            actions.append(Action("add_export", str(spec.export_id),
                                  f"export of {spec.path} is not live", export=spec))
        elif live.path != spec.path or rendered(spec.export_id) != render(spec):
            actions.append(Action("update_export", str(spec.export_id),
                                  f"export of {spec.path} differs from desired", export=spec))
    for live in live_exports:
        if (live.export_id >= MIN_EXPORT_ID and live.export_id not in wanted_ids
                and live.export_id not in PROBE_EXPORT_IDS):
            actions.append(Action("remove_export", str(live.export_id),
                                  f"export of {live.path} is not desired"))

    live_targets_by_iqn = {t.spec.iqn: t for t in live_targets}
    wanted_iqns: set[str] = set()
    wanted_backstores: set[str] = set()
    for target in targets:
        wanted_iqns.add(target.iqn)
        wanted_backstores.update(lun.backstore for lun in target.luns)
        live_t = live_targets_by_iqn.get(target.iqn)
        if live_t is None:
            actions.append(Action("apply_target", target.iqn, "target is not live",
                                  target=target))
        elif not target_matches(target, live_t.spec):
            actions.append(Action("apply_target", target.iqn, "target differs from desired",
                                  target=target))
    removed_backstores: set[str] = set()
    for live_t in live_targets:
        iqn = live_t.spec.iqn
        if iqn.startswith(iqn_prefix + ":") and iqn not in wanted_iqns:
            actions.append(Action("remove_target", iqn, "target is not desired"))
            removed_backstores.update(lun.backstore for lun in live_t.spec.luns)
    for name in sorted(live_backstores):
        if (name.startswith(BACKSTORE_PREFIX) and name not in wanted_backstores
                and name not in removed_backstores):
            actions.append(Action("remove_backstore", name, "backstore is not used"))
    return actions


def apply(actions: Sequence[Action], ganesha: GaneshaHost, lio: LioHost) -> ReconcileReport:
    """Runs the actions: removals first (they free paths, devices and names the others
    may need), then updates, then the additions in one batch per daemon (one AddExport,
    one configfs pass). One failure does not stop the others; each is reported."""
    report = ReconcileReport(planned=list(actions))
    order = ("remove_export", "remove_target", "remove_backstore", "update_export")
    for kind in order:
        for action in (a for a in actions if a.kind == kind):
            try:
                if kind == "remove_export":
                    ganesha.remove_export(int(action.subject))
                elif kind == "remove_target":
                    lio.remove_target(action.subject)
                elif kind == "remove_backstore":
                    lio.remove_backstore(action.subject)
                elif action.export is not None:
                    ganesha.update_export(action.export)
            except ZdsError as exc:
                _failed(report, action, exc)
            else:
                report.applied.append(action)
    adds = [a for a in actions if a.kind == "add_export" and a.export is not None]
    if adds:
        try:
            failed_exports = ganesha.add_exports([a.export for a in adds if a.export])
        except ZdsError as exc:  # ganesha went away: every add failed the same way
            failed_exports = {int(a.subject): exc for a in adds}
        _collect(report, adds, {str(k): v for k, v in failed_exports.items()})
    applies = [a for a in actions if a.kind == "apply_target" and a.target is not None]
    if applies:
        try:
            failed_targets = lio.apply_targets([a.target for a in applies if a.target])
        except ZdsError as exc:
            failed_targets = {a.subject: exc for a in applies}
        _collect(report, applies, failed_targets)
    return report


def _failed(report: ReconcileReport, action: Action, exc: ZdsError) -> None:
    log.warning("reconcile: %s failed: %s", action.describe(), exc.message)
    report.fail(action.subject, f"{action.describe()}: {exc.message}")


def _collect(report: ReconcileReport, actions: Sequence[Action],
             failed: Mapping[str, ZdsError]) -> None:
    for action in actions:
        exc = failed.get(action.subject)
        if exc is None:
            report.applied.append(action)
        else:
            _failed(report, action, exc)
