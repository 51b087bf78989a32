"""FakeLio behaviours the engine tests lean on, beyond the shared contract checks."""

from __future__ import annotations

import pytest

from appliance.errors import Conflict, InvalidInput, NotFound
from appliance.host.fakes.lio import FakeLio
from appliance.host.lio import VAAI_ATTRIBUTES, AclSpec, Chap, LunSpec, TargetSpec, check_wwn

IQN = "iqn.2026-11.org.zds:vm01"
ESX = "iqn.1998-01.com.vmware:esx1"
KVM = "iqn.2026-11.org.example.kvm:h1"


def spec(*acls: AclSpec) -> TargetSpec:
    return TargetSpec(IQN, (LunSpec("zds-vm01", "/dev/zvol/tank/zds/vm01",
                                    "6a1e5c3d-0000-4000-8000-000000000001"),), acls)


def test_apply_is_idempotent_and_counts_changes() -> None:
    lio = FakeLio()
    lio.apply_target(spec(AclSpec(ESX)))
    before = lio.changes
    lio.apply_target(spec(AclSpec(ESX)))
    assert lio.changes == before
    (live,) = lio.list_targets()
    assert live.spec.luns[0].attributes == dict(VAAI_ATTRIBUTES)
    assert live.spec.portals == (("0.0.0.0", 3260),)


def test_sessions_login_logout_and_acl_removal() -> None:
    lio = FakeLio()
    lio.apply_target(spec(AclSpec(ESX), AclSpec(KVM)))
    with pytest.raises(NotFound):
        lio.login(IQN, "iqn.2026-11.org.example:stranger")
    lio.login(IQN, ESX)
    lio.login(IQN, KVM)
    assert lio.list_targets()[0].sessions == (ESX, KVM)  # sorted
    lio.logout(IQN, KVM)
    assert lio.list_targets()[0].sessions == (ESX,)
    # changing CHAP keeps the session; removing the ACL ends it
    lio.apply_target(spec(AclSpec(ESX, Chap("u", "secret123456"))))
    assert lio.list_targets()[0].sessions == (ESX,)
    assert lio.tpg_attributes(IQN)["authentication"] == 1
    lio.apply_target(spec(AclSpec(KVM)))
    assert lio.list_targets()[0].sessions == ()


def test_remove_target_keeps_backstore_shared_with_another_target() -> None:
    lio = FakeLio()
    lio.apply_target(spec(AclSpec(ESX)))
    other = TargetSpec("iqn.2026-11.org.zds:vm01-alt", spec().luns, ())
    lio.apply_target(other)
    lio.remove_target(IQN)
    assert lio.list_backstores() == ["zds-vm01"]
    with pytest.raises(Conflict):
        lio.remove_backstore("zds-vm01")
    lio.remove_target(other.iqn)
    assert lio.list_backstores() == []


def test_missing_device_with_device_check() -> None:
    lio = FakeLio(device_exists=lambda path: path.endswith("/vm02"))
    with pytest.raises(NotFound):
        lio.apply_target(spec(AclSpec(ESX)))
    assert lio.list_targets() == []


@pytest.mark.parametrize("name", [
    "iqn.2026-11.org.example:host1", "iqn.1998-01.com.vmware:esx-01-5f2a",
    "iqn.1994-05.com.redhat:8a9b7c6d5e4f", "eui.0123456789abcdef",
    "naa.6001405abcdef0123456789abcdef012", "iqn.2026-11.org.example.kvm"])
def test_check_wwn_accepts(name: str) -> None:
    assert check_wwn(name) == name


@pytest.mark.parametrize("name", [
    "iqn.2026-11.test:host1", "iqn.2026-11.org.example:Host1", "iqn.2026-00.org.a.b",
    "iqn.26-11.org.example:x", "iqn.2026-11.org.example:a b", "iqn.2026-11.org.example:a_b",
    "iqn.2026-11.org.example:x'$(id)", "eui.0123", "naa.xyz", "", "iqn." + "a." * 120 + "b"])
def test_check_wwn_rejects(name: str) -> None:
    with pytest.raises(InvalidInput):
        check_wwn(name)
