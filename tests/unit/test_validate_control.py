"""No input validator accepts a control character (issue 22, item 9).

``re.match(r"^...$", s)`` also accepts ``s`` with a trailing newline (``$`` matches before
it), so ``PUT /initiator-groups/g1%0A`` made a group named "g1\\n". Validators now use
full matches and refuse control characters before any trimming; a property-based test
holds every validator of appliance/validate.py (and the name validators elsewhere) to it,
and tests/unit/test_architecture.py keeps ``re.match(...$)`` from coming back.
"""

from __future__ import annotations

import inspect
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance import validate
from appliance.errors import ZdsError
from appliance.host import hooks, ssh, sshgate
from appliance.host.fakes.replication import fake_key
from appliance.metrics import service as metrics
from appliance.policies import schedule
from appliance.probes import jobfile, params
from appliance.replication import model as replication_model
from appliance.services import snapshots
from appliance.services.tokens import TokenService
from appliance.store import Store
from tests.unit.conftest import Rig

API = "/api/v1"
CONTROL = [chr(c) for c in range(0x20)] + ["\x7f"]
ED_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIN1ZkVtdHF0fYdWQ7bMjx4gW3p4wE0r5Y1i9yN8rT0aB me"
_TOKENS = TokenService(Store(Path(tempfile.mkdtemp(prefix="zds-ctl-")) / "zds.db"))
NOW = time.time()


def _gate(name: str) -> object:
    return sshgate.check(["zfs", "list", "-H", name], ["tank/replicas"])


# validator -> a few values it accepts. Every public function of appliance/validate.py
# that checks a string must be here (test_every_validator_is_covered).
VALIDATORS: dict[str, tuple[Callable[[str], object], list[str]]] = {
    "resource_name": (validate.resource_name, ["g1", "vmfs-nfs01", "a.b"]),
    "pool_name": (validate.pool_name, ["tank", "Pool_1.x"]),
    "snapshot_name": (validate.snapshot_name, ["before-upgrade", "s1:2"]),
    "iqn": (validate.iqn, ["iqn.2026-11.org.example:esx1", " IQN.2026-11.org.example ",
                           "eui.0123456789abcdef", "naa.0123456789abcdef"]),
    "nqn": (validate.nqn, ["nqn.2014-08.com.vmware:nvme:esx01",
                           "nqn.2014-08.org.nvmexpress:uuid:5b1e0c2a-7d4f-4e8b-9a61-0c3f2d8e7b14",
                           " nqn.2026-11.org.example:KVM-01 "]),
    "initiator_name": (validate.initiator_name, ["iqn.2026-11.org.example:esx1",
                                                 "nqn.2026-11.org.example:kvm1"]),
    "nfs_client": (validate.nfs_client, ["192.0.2.1", "192.0.2.0/24", "esx1.example.com",
                                         "*", "2001:db8::1", " 192.0.2.7 "]),
    "chap_user": (validate.chap_user, ["esx-user", "a@b"]),
    "chap_secret": (validate.chap_secret, ["secret-of-16chr", "abcdefghijkl"]),
    "parse_size": (validate.parse_size, ["100G", "1.5T", "512MiB", " 64 M ", "65536"]),
    "power_of_two_size": (lambda v: validate.power_of_two_size(v, 4096, 1 << 20, "size"),
                          ["64K", "4096"]),
    "compression": (validate.compression, ["lz4", "zstd-3", "off"]),
    "sync": (validate.sync, ["standard", "always"]),
    "device_path": (validate.device_path, ["/dev/disk/by-id/virtio-d1", "/dev/vdb"]),
    "labels": (lambda v: (validate.labels({v: "gold"}), validate.labels({"tier": v})),
               ["tier", "gold-1"]),
    "ssh_public_key": (validate.ssh_public_key, [ED_KEY, " " + ED_KEY]),
    "unix_user": (validate.unix_user, ["root", "zds_repl"]),
    # the name validators elsewhere
    "ssh.host_name": (ssh.host_name, ["192.0.2.20", "zds2.example.com", " zds2 "]),
    "ssh.public_key": (ssh.public_key, [fake_key("a"), fake_key("b") + " comment"]),
    "ssh.require_dataset_name": (ssh.require_dataset_name, ["tank/replicas/zds1"]),
    "sshgate.check": (_gate, ["tank/replicas/a", "tank/replicas/a@s1"]),
    "tokens.create (name)": (lambda v: _TOKENS.create(v, "readonly"), ["ci", "a@b.c"]),
    "tokens.verify": (_TOKENS.verify, [_TOKENS.create("verify", "readonly")]),
    "schedule.parse_interval": (schedule.parse_interval, ["15m", "90", " 6h "]),
    "schedule.zone": (schedule.zone, ["Europe/Berlin", "UTC"]),
    "schedule.cron": (lambda v: schedule.Schedule.parse(cron=v), ["0 2 * * *"]),
    "replication.parse_interval": (replication_model.parse_interval, ["15m", "1d", "60"]),
    "metrics.parse_duration": (lambda v: metrics.parse_duration(v, "step"),
                               ["30s", "5m", "3600"]),
    "metrics.parse_since": (lambda v: metrics.parse_since(v, NOW), ["1h", "1795405600"]),
    "probes.parse_size": (lambda v: params.parse_size(v, "size"), ["64m", "1GiB"]),
    "probes.FioTarget": (jobfile.FioTarget, ["/tank/zds-probes/x-1"]),
    "hooks.check_args": (lambda v: hooks.check_args([v]), ["pre-snap", "--flag=1"]),
    "snapshots.hold_tag": (snapshots._check_tag, ["zds-repl:r1"]),
}
# the OpenAPI patterns of the rules, not checks
NOT_VALIDATORS = {"format_size", "has_control", "size_pattern", "power_of_two_sizes",
                  "power_of_two_pattern"}


def refuses(check: Callable[[str], object], value: str) -> bool:
    try:
        check(value)
    except (ZdsError, ValueError, sshgate.Refused):
        return True
    return False


def test_every_validator_is_covered() -> None:
    public = {n for n, f in inspect.getmembers(validate, inspect.isfunction)
              if not n.startswith("_") and f.__module__ == validate.__name__}
    assert public - NOT_VALIDATORS <= set(VALIDATORS), public - NOT_VALIDATORS - set(VALIDATORS)


@pytest.mark.parametrize("name", sorted(VALIDATORS))
def test_the_examples_are_accepted(name: str) -> None:
    check, examples = VALIDATORS[name]
    for value in examples:
        assert not refuses(check, value), (name, value)


@pytest.mark.parametrize("name", sorted(VALIDATORS))
def test_a_trailing_newline_is_refused(name: str) -> None:
    check, examples = VALIDATORS[name]
    for value in examples:
        for tail in ("\n", "\r\n", "\t", "\x00"):
            assert refuses(check, value + tail), (name, value + tail)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_no_validator_accepts_a_control_character(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(VALIDATORS)), label="validator")
    check, examples = VALIDATORS[name]
    valid = data.draw(st.sampled_from(examples), label="valid")
    at = data.draw(st.integers(0, len(valid)), label="at")
    c = data.draw(st.sampled_from(CONTROL), label="control")
    value = valid[:at] + c + valid[at:]
    assert refuses(check, value), (name, value)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(VALIDATORS)), st.text(max_size=24), st.sampled_from(CONTROL),
       st.text(max_size=24))
def test_no_validator_accepts_any_text_with_a_control_character(
        name: str, head: str, c: str, tail: str) -> None:
    assert refuses(VALIDATORS[name][0], head + c + tail), (name, head + c + tail)


# --- through the API ------------------------------------------------------------------

@pytest.mark.parametrize("path", ["g1%0A", "g1%0D%0A", "g1%09", "g1%00"])
def test_an_initiator_group_name_with_a_control_character_is_422(
        client: TestClient, rig: Rig, path: str) -> None:
    r = client.put(f"{API}/initiator-groups/{path}",
                   json={"initiators": ["iqn.2026-11.org.example:esx1"]})
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    # refused by the path parameter's pattern, which names the rule
    assert err["code"] == "invalid_input" and "path.name: " in err["message"], err
    assert "1-63 lowercase letters" in err["message"], err
    assert set(r.json()) == {"error"}
    assert client.get(f"{API}/initiator-groups").json() == []  # nothing was made
    assert rig.engine.store.list_groups() == []


def test_other_names_with_a_trailing_newline_are_422(client: TestClient) -> None:
    r = client.put(f"{API}/datastores/ds1%0A", json={"protocol": "nfs3", "size": "10G"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input", r.text
    r = client.put(f"{API}/initiator-groups/g1", json={
        "initiators": ["iqn.2026-11.org.example:esx1\n"]})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input", r.text
    r = client.put(f"{API}/datastores/ds1", json={"protocol": "nfs3", "size": "10G\n"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input", r.text
    assert client.get(f"{API}/datastores").json() == []
