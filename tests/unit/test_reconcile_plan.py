"""Reconcile planning on plain data: desired vs live -> actions (each transport plans its
own objects: exports for NFS, targets and backstores for iSCSI)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from appliance import actions as rc
from appliance.host.ganesha_config import ClientRule, ExportSpec
from appliance.host.lio import AclSpec, LiveTarget, LunSpec, TargetSpec
from appliance.host.nfs_server import LiveExport
from appliance.model import (
    DatastoreRecord,
    DatastoreSpec,
    InitiatorGroup,
    IscsiAccess,
    NfsClient,
    naa_wwn,
)
from appliance.transports.iscsi import plan_targets, target_matches, target_spec
from appliance.transports.nfs import export_spec, plan_exports

PREFIX = "iqn.2026-11.io.zds"


def export(i: int, path: str = "/tank/datastores/a") -> ExportSpec:
    return ExportSpec(i, path, path, (3,), (ClientRule(("192.0.2.0/24",), "RW"),))


def target(name: str, acls: tuple[str, ...] = ("iqn.2026-11.org.example:h1",)) -> TargetSpec:
    return TargetSpec(
        iqn=f"{PREFIX}:box.{name}",
        luns=(LunSpec(f"zds-{name}", f"/dev/zvol/tank/datastores/{name}", f"serial-{name}"),),
        acls=tuple(AclSpec(a) for a in acls),
    )


def render(spec: ExportSpec) -> str:
    return repr(spec)


def plan(exports: Sequence[ExportSpec] = (), live_exports: Sequence[LiveExport] = (),
         rendered: dict[int, str] | None = None, targets: Sequence[TargetSpec] = (),
         live_targets: Sequence[LiveTarget] = (), backstores: Sequence[str] = ()
         ) -> list[rc.Action[Any]]:
    files = rendered or {}
    return [*plan_exports(list(exports), list(live_exports), files.get, render),
            *plan_targets(list(targets), list(live_targets), backstores, PREFIX)]


def test_in_sync_plans_nothing() -> None:
    e, t = export(100), target("a")
    actions = plan([e], [LiveExport(100, e.path)], {100: render(e)}, [t],
                   [LiveTarget(t)], ["zds-a"])
    assert actions == []


def test_missing_export_and_target_are_added() -> None:
    actions = plan([export(100)], targets=[target("a")])
    assert [(a.kind, a.subject) for a in actions] == [
        ("add_export", "100"), ("apply_target", f"{PREFIX}:box.a")]


def test_changed_export_is_updated_not_readded() -> None:
    old, new = export(100), ExportSpec(100, "/tank/datastores/a", "/tank/datastores/a", (3,),
                                       (ClientRule(("192.0.2.9",), "RO"),))
    actions = plan([new], [LiveExport(100, old.path)], {100: render(old)})
    assert [(a.kind, a.payload) for a in actions] == [("update_export", new)]


def test_only_our_objects_are_removed() -> None:
    foreign = TargetSpec("iqn.2003-01.org.linux-iscsi.other:x", (), ())
    ours = target("gone")
    actions = plan(live_exports=[LiveExport(1, "/admin"),
                                 LiveExport(101, "/tank/datastores/old")],
                   live_targets=[LiveTarget(foreign), LiveTarget(ours)],
                   backstores=["zds-gone", "zds-orphan", "userbackstore"])
    kinds = [(a.kind, a.subject) for a in actions]
    assert ("remove_export", "101") in kinds
    assert ("remove_target", ours.iqn) in kinds
    assert ("remove_backstore", "zds-orphan") in kinds
    # the removed target takes its own backstore; nothing foreign is touched
    assert all(s not in ("1", foreign.iqn, "userbackstore", "zds-gone") for _, s in kinds)


def test_target_acl_or_attribute_drift_is_reapplied() -> None:
    want = target("a", ("iqn.2026-11.org.example:h1", "iqn.2026-11.org.example:h2"))
    have = target("a", ("iqn.2026-11.org.example:h1",))
    assert [a.kind for a in plan(targets=[want], live_targets=[LiveTarget(have)],
                                 backstores=["zds-a"])] == ["apply_target"]
    lun = want.luns[0]
    off = LunSpec(lun.backstore, lun.device, lun.serial,
                  attributes={**lun.attributes, "emulate_tpu": 0})
    have2 = TargetSpec(want.iqn, (off,), want.acls)
    assert target_matches(want, TargetSpec(want.iqn, want.luns, tuple(reversed(want.acls))))
    assert not target_matches(want, have2)


def test_specs_from_records_include_groups_and_protocols() -> None:
    spec = DatastoreSpec("a", "tank", "iscsi", 1 << 30,
                         iscsi=IscsiAccess(("iqn.2026-11.org.example:h1",), ("esx",)))
    rec = DatastoreRecord(spec, "ready", iqn=f"{PREFIX}:box.a", serial="1234")
    groups = {"esx": InitiatorGroup("esx", ("iqn.2026-11.org.example:h2",
                                            "iqn.2026-11.org.example:h1"))}
    t = target_spec(rec, "/dev/zvol/tank/datastores/a", groups, ("0.0.0.0", 3260))
    assert [a.initiator for a in t.acls] == ["iqn.2026-11.org.example:h1",
                                             "iqn.2026-11.org.example:h2"]
    assert t.luns[0].attributes["emulate_tpu"] == 1 and t.luns[0].serial == "1234"
    nfs = DatastoreRecord(DatastoreSpec("b", "tank", "nfs41", 1 << 30, nfs_clients=(
        NfsClient("192.0.2.0/24", "rw"), NfsClient("198.51.100.7", "ro"))), "ready",
        export_id=104)
    e = export_spec(nfs, "/tank/datastores/b")
    assert e.protocols == (4,) and e.pseudo == e.path
    assert [(r.clients, r.access) for r in e.clients] == [(("192.0.2.0/24",), "RW"),
                                                          (("198.51.100.7",), "RO")]


def test_naa_wwn_follows_lio_rule() -> None:
    serial = "85e7c1f6-b77d-4a1c-b0ab-ef8af0000000"
    assert naa_wwn(serial) == "naa.6001405" + "85e7c1f6b77d4a1cb0abef8af"
    assert len(naa_wwn(serial)) == 4 + 32
