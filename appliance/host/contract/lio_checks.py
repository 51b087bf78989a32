"""Contract checks for :class:`appliance.host.lio.LioHost` (real ``Lio`` and ``FakeLio``).

``devices`` are two block devices LIO may export (zvols of a scratch pool); the checks
create targets named ``iqn.2026-11.org.zds-contract:*`` and remove them when they pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from appliance.errors import Conflict, InvalidInput, NotFound
from appliance.host.contract import expect
from appliance.host.lio import (
    VAAI_ATTRIBUTES,
    AclSpec,
    Chap,
    LioHost,
    LiveTarget,
    LunSpec,
    TargetSpec,
    TargetSummary,
)

PREFIX = "iqn.2026-11.org.zds-contract:"
INIT_A = "iqn.1998-01.com.vmware:esx-a-1234abcd"
INIT_B = "iqn.2026-11.org.example.kvm:host-b"
SERIAL_1 = "6a1e5c3d-0000-4000-8000-00000000c001"
SERIAL_2 = "6a1e5c3d-0000-4000-8000-00000000c002"


def _live(lio: LioHost, iqn: str) -> LiveTarget | None:
    for t in lio.list_targets():
        if t.spec.iqn == iqn:
            return t
    return None


def _normal(spec: TargetSpec) -> TargetSpec:
    """The form ``list_targets`` reads back: LUNs by number, ACLs by IQN, portals
    sorted, only the VAAI attribute keys."""
    luns = tuple(replace(lun, attributes={k: int(lun.attributes[k]) for k in VAAI_ATTRIBUTES})
                 for lun in sorted(spec.luns, key=lambda x: x.lun))
    return TargetSpec(iqn=spec.iqn, luns=luns,
                      acls=tuple(sorted(spec.acls, key=lambda a: a.initiator)),
                      portals=tuple(sorted(spec.portals)))


def _assert_matches(lio: LioHost, spec: TargetSpec) -> LiveTarget:
    live = _live(lio, spec.iqn)
    assert live is not None, f"target {spec.iqn} not found after apply"
    assert live.spec == _normal(spec), f"read back {live.spec}\n  expected {_normal(spec)}"
    summary = lio.summarize_targets().get(spec.iqn)
    assert summary == TargetSummary(spec.iqn, len(spec.luns), live.sessions), \
        f"summary {summary} disagrees with the full read {live}"
    return live


def cleanup(lio: LioHost) -> None:
    for t in lio.list_targets():
        if t.spec.iqn.startswith(PREFIX):
            lio.remove_target(t.spec.iqn)
    for name in lio.list_backstores():
        if name.startswith("zdsct-"):
            lio.remove_backstore(name)


def check_available(lio: LioHost) -> None:
    assert lio.available() is True


def check_apply_read_back(lio: LioHost, devices: Sequence[str]) -> None:
    """apply_target creates exactly the spec, reads back equal, is idempotent, converges
    on changes (LUN added, ACL removed, CHAP changed) and remove_target cleans up."""
    assert len(devices) >= 2
    cleanup(lio)
    iqn = PREFIX + "ds1"
    lun0 = LunSpec(backstore="zdsct-ds1", device=devices[0], serial=SERIAL_1, lun=0)
    spec = TargetSpec(
        iqn=iqn,
        luns=(lun0,),
        acls=(AclSpec(INIT_B, Chap("kvmuser", "kvmsecret12345")),
              AclSpec(INIT_A, Chap("esxuser", "esxsecret12345", "tgtuser", "tgtsecret1234"))),
    )
    try:
        lio.apply_target(spec)
        live = _assert_matches(lio, spec)
        assert live.sessions == ()
        # what the reconciler checks to complete a target a crash left half-built
        assert live.enabled and live.authentication, live
        assert live.spec.luns[0].serial == SERIAL_1
        assert all(v == 1 for v in live.spec.luns[0].attributes.values()), live.spec.luns
        assert "zdsct-ds1" in lio.list_backstores()
        attrs = lio.tpg_attributes(iqn)
        assert attrs["enable"] == 1 and attrs["authentication"] == 1, attrs
        assert attrs["generate_node_acls"] == 0 and attrs["demo_mode_write_protect"] == 1

        lio.apply_target(spec)  # idempotent
        _assert_matches(lio, spec)

        lun1 = LunSpec(backstore="zdsct-ds1b", device=devices[1], serial=SERIAL_2, lun=1,
                       attributes={**VAAI_ATTRIBUTES, "emulate_tpws": 0})
        changed = replace(spec, luns=(lun0, lun1),
                          acls=(AclSpec(INIT_A, Chap("esx2", "pw2-123456789")),),
                          portals=(("0.0.0.0", 3260), ("127.0.0.1", 3261)))
        lio.apply_target(changed)
        live = _assert_matches(lio, changed)
        assert live.spec.luns[0].serial == SERIAL_1, "serial must survive changes"
        assert live.spec.luns[1].attributes["emulate_tpws"] == 0

        no_chap = replace(changed, luns=(lun1,), acls=(AclSpec(INIT_B),),
                          portals=(("0.0.0.0", 3260),))
        lio.apply_target(no_chap)
        live = _assert_matches(lio, no_chap)
        assert lio.tpg_attributes(iqn)["authentication"] == 0
        assert live.enabled and not live.authentication, live
        assert "zdsct-ds1" not in lio.list_backstores(), "a dropped LUN's backstore goes"

        expect(Conflict, lio.remove_backstore, "zdsct-ds1b")  # still exported
        lio.remove_target(iqn)
        assert _live(lio, iqn) is None
        assert iqn not in lio.summarize_targets()
        assert "zdsct-ds1b" not in lio.list_backstores()
        lio.remove_target(iqn)  # missing: no error
        expect(NotFound, lio.tpg_attributes, iqn)
        lio.remove_backstore("zdsct-nosuch")  # missing: no error
    finally:
        cleanup(lio)


def check_errors(lio: LioHost, devices: Sequence[str], missing_device: str) -> None:
    """Bad IQNs/CHAP -> InvalidInput, missing device -> NotFound; nothing is created."""
    cleanup(lio)
    good_lun = LunSpec(backstore="zdsct-err", device=devices[0], serial=SERIAL_1)
    before = lio.list_targets()
    try:
        for bad in ("iqn.2026-11.test:host1", "iqn.2026-11.org.example:Host_1",
                    "iqn.2026-11.org.example:a b", "iqn.2026-13.org.example:x",
                    "iqn.2026-11.org.example:x;rm -rf /", "naa.12", "", "x" * 300):
            expect(InvalidInput, lio.apply_target, TargetSpec(bad, (good_lun,), ()))
            expect(InvalidInput, lio.apply_target,
                   TargetSpec(PREFIX + "err", (good_lun,), (AclSpec(bad),)))
        for chap in (Chap("", "secret123456"), Chap("u", "with space 12"),
                     Chap("u", "p" * 256), Chap("u", "secret123456", "m", None)):
            expect(InvalidInput, lio.apply_target,
                   TargetSpec(PREFIX + "err", (good_lun,), (AclSpec(INIT_A, chap),)))
        expect(InvalidInput, lio.apply_target, TargetSpec(
            PREFIX + "err", (good_lun, replace(good_lun, backstore="zdsct-err2")), ()))
        expect(InvalidInput, lio.apply_target, TargetSpec(
            PREFIX + "err", (replace(good_lun, backstore="bad/name"),), ()))
        expect(NotFound, lio.apply_target, TargetSpec(
            PREFIX + "err", (replace(good_lun, device=missing_device),), (AclSpec(INIT_A),)))
        assert lio.list_targets() == before, "a refused apply must change nothing"
        assert "zdsct-err" not in lio.list_backstores()
    finally:
        cleanup(lio)


def run_all(lio: LioHost, devices: Sequence[str], missing_device: str) -> list[str]:
    check_available(lio)
    check_apply_read_back(lio, devices)
    check_errors(lio, devices, missing_device)
    return ["available", "apply_read_back", "errors"]
