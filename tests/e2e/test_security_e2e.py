"""Issue 22 on the booted appliance, where the behaviour lives in ZFS, sshd and systemd:

- a replication stream whose dataset says ``mountpoint=/usr/local/sbin`` (and carries a
  ``zfs`` program there) goes through the real receive gate as sshd runs it: whether the
  source declares a file system or lies that it is a volume, what lands is harmless;
- the same stream received *around* the gate (as if the gate had died between the
  receive and its check) is reset by the API's pool import (``zpool import -N``, the
  guard, then the mounts) and, at boot, by zds-replica-guard.service before ``zfs mount
  -a``: it never mounts over /usr/local/sbin and its program never runs;
- a revoked admin token stays revoked after a reboot, and the boot prints no token;
- sshd takes keys only, the firewall admits private networks only, and zds-api runs
  under systemd's sandboxing (and every other e2e module passes under it).

The boot-time checks run after the session's one shared reboot (tests/e2e/conftest.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.conftest import E2EAppliance
from tests.e2e.rest import api_client, ok

pytestmark = pytest.mark.e2e

PY = "/opt/zds/venv/bin/python"
STREAM = "/var/tmp/zds-hostile.stream"
PREFIX = "tank/sec-replicas"
MARK = "/run/zds-hostile-program-ran"
# The peer's program: leaves a mark, then behaves like zfs so the appliance keeps working
# even if it were ever run (a failed check must not break the other modules)
PROGRAM = f"#!/bin/sh\ntouch {MARK}\nexec /usr/sbin/zfs \"$@\"\n"


@pytest.fixture(scope="module")
def api(appliance: E2EAppliance) -> Iterator[httpx.Client]:
    with api_client(appliance.api_url, appliance.admin_token, timeout=900) as c:
        yield c


def props(app: E2EAppliance, dataset: str) -> dict[str, tuple[str, str]]:
    out = app.check(f"zfs get -H -p -o property,value,source "
                    f"type,mountpoint,canmount,mounted,setuid,exec,sharenfs {dataset}")
    return {p: (v, s) for p, v, s in (line.split("\t") for line in out.splitlines())}


def assert_harmless(app: E2EAppliance, dataset: str) -> None:
    got = props(app, dataset)
    assert got["mountpoint"][0] != "/usr/local/sbin", got
    assert got["mountpoint"][1] != "received", got
    assert got["canmount"][0] in ("noauto", "off"), got
    assert got["mounted"][0] == "no", got
    assert app.exec("findmnt -n /usr/local/sbin")[0] != 0, "something is mounted there"
    assert app.exec(f"test -e /usr/local/sbin/zfs || test -e {MARK}")[0] != 0


def gate(app: E2EAppliance, command: str) -> tuple[int, str]:
    """The receive gate exactly as sshd runs it for a replication key."""
    return app.exec(f"SSH_ORIGINAL_COMMAND='{command}' {PY} -m appliance.host.sshgate "
                    f"--name sec --prefix {PREFIX} < {STREAM} 2>&1")


def test_1_a_hostile_stream_is_made(appliance: E2EAppliance) -> None:
    """The peer's side, on a throwaway pool with an altroot (so making it mounts nothing
    over this appliance's own /usr/local/sbin): a file system at /usr/local/sbin holding a
    ``zfs`` program, sent with its properties."""
    appliance.check(f"""set -e
truncate -s 256M /var/tmp/zds-hostile.img
zpool create -R /var/tmp/zds-hostile-root hostile /var/tmp/zds-hostile.img
zfs create -o mountpoint=/usr/local/sbin -o exec=on -o setuid=on hostile/payload
printf '%s' '{PROGRAM}' > /var/tmp/zds-hostile-root/usr/local/sbin/zfs
chmod 4755 /var/tmp/zds-hostile-root/usr/local/sbin/zfs
zfs snapshot hostile/payload@s1
zfs send -p hostile/payload@s1 > {STREAM}
zpool destroy hostile
rm -f /var/tmp/zds-hostile.img
zfs create -p -o canmount=off {PREFIX}""")


def test_2_the_gate_protects_a_declared_file_system(appliance: E2EAppliance) -> None:
    rc, out = gate(appliance, f"zfs receive -s -u -o readonly=on -o canmount=noauto "
                              f"-x mountpoint {PREFIX}/declared")
    assert rc == 0, out
    assert_harmless(appliance, f"{PREFIX}/declared")
    got = props(appliance, f"{PREFIX}/declared")
    assert got["setuid"] == ("off", "local") and got["exec"] == ("off", "local"), got


def test_3_a_stream_that_lies_it_is_a_volume_is_reset_and_refused(
        appliance: E2EAppliance) -> None:
    # no -x mountpoint: the gate cannot pass file-system options (a volume refuses them),
    # so the check after the receive must catch it
    rc, out = gate(appliance, f"zfs receive -s -u {PREFIX}/liar")
    assert rc == 1 and "tried to mount, share or execute" in out, out
    assert_harmless(appliance, f"{PREFIX}/liar")


def test_4_a_pool_import_resets_a_stream_received_around_the_gate(
        appliance: E2EAppliance, api: httpx.Client) -> None:
    job = ok(api.post("/pools", params={"wait": 300}, json={
        "name": "secpool", "sparse_files": {"count": 1, "size": "512M", "type": "disk"}}), 202)
    assert job["state"] == "succeeded", job
    # as if the gate had died between the receive and its check
    appliance.check(f"zfs receive -u secpool/window < {STREAM}")
    assert props(appliance, "secpool/window")["mountpoint"] == ("/usr/local/sbin", "received")
    for step in ("export", "import"):
        job = ok(api.post(f"/pools/secpool/{step}", params={"wait": 300}), 202)
        assert job["state"] == "succeeded", job
    assert_harmless(appliance, "secpool/window")
    ok(api.get("/datastores"))  # the API runs zfs after the import: not the peer's one
    assert appliance.exec(f"test -e {MARK}")[0] != 0
    job = ok(api.post("/pools/secpool/export", params={"wait": 300}), 202)
    assert job["state"] == "succeeded", job


def test_5_before_the_reboot_a_stream_around_the_gate_and_a_revoked_token(
        appliance: E2EAppliance) -> None:
    # a stream received around the gate on the pool that boots with the appliance
    appliance.check(f"zfs receive -u {PREFIX}/window < {STREAM}")
    # the token first boot imported from fw_cfg is revoked; another admin token goes on
    old = appliance.admin_token
    new = appliance.check("zds token create --role admin --name sec-e2e").strip()
    old_id = old.split("_")[1]
    appliance.check(f"zds token revoke {old_id}")
    appliance.vm.token_file.write_text(new + "\n")  # the rest of the session uses it
    tokens.update(old=old, new=new)


tokens: dict[str, str] = {}


@pytest.mark.after_reboot
def test_5a_after_a_reboot_nothing_hostile_mounted_and_a_revoked_token_stays_revoked(
        appliance: E2EAppliance, shared_reboot: float) -> None:
    old, new = tokens["old"], tokens["new"]
    assert_harmless(appliance, f"{PREFIX}/window")
    journal = appliance.check("journalctl -b -o cat -u zds-replica-guard.service")
    assert f"inherit mountpoint {PREFIX}/window" in journal, journal
    with api_client(appliance.api_url, old, timeout=120) as c:
        r = c.get("/pools")
        assert r.status_code == 401, r.text
    with api_client(appliance.api_url, new, timeout=120) as c:
        ok(c.get("/pools"))
    boot_log = appliance.check("journalctl -b -o cat -u zds-firstboot.service")
    assert old not in boot_log and new not in boot_log
    assert not re.search(r"zds_[0-9a-f]{12}_", boot_log), boot_log
    assert appliance.exec(f"test -e {MARK}")[0] != 0


def test_6_sshd_firewall_and_sandbox(appliance: E2EAppliance) -> None:
    sshd = appliance.check("sshd -T")
    for line in ("passwordauthentication no", "kbdinteractiveauthentication no",
                 "permitrootlogin without-password", "allowtcpforwarding no",
                 "x11forwarding no", "allowusers root"):
        assert line in sshd, line
    # the harness logs in over SSH from QEMU's NAT (10.0.2.2): a private network
    r = appliance.ssh("true")
    assert r.returncode == 0, r.stderr
    ruleset = appliance.check("nft list table inet zds")
    assert "10.0.0.0/8" in ruleset and "fc00::/7" in ruleset
    assert "0.0.0.0/0" not in ruleset and "::/0" not in ruleset
    unit = appliance.check("systemctl show zds-api.service -p NoNewPrivileges "
                           "-p RestrictSUIDSGID -p RestrictNamespaces -p LockPersonality")
    assert "NoNewPrivileges=yes" in unit and "RestrictSUIDSGID=yes" in unit, unit
    pid = appliance.check("systemctl show -p MainPID --value zds-api.service").strip()
    status = appliance.check(f"grep NoNewPrivs /proc/{pid}/status")
    assert status.split()[-1] == "1", status


def test_6b_the_api_checks_the_token_before_the_body(appliance: E2EAppliance) -> None:
    """Items 3 and 7 on the real uvicorn behind TLS: a broken body without a token is a
    401 (not a parse error), an oversized one a 413 with a token, and health without a
    token holds no message or hook output."""
    with httpx.Client(base_url=appliance.api_url + "/api/v1", verify=False,
                      timeout=120) as anon:
        r = anon.put("/datastores/x", content=b"{not json",
                     headers={"Content-Type": "application/json"})
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized", r.text
        health = anon.get("/system/health").json()
        assert "message" not in health and "status" in health, health
    with api_client(appliance.api_url, appliance.admin_token, timeout=120) as api:
        r = api.put("/datastores/x", content=b"x" * (2 << 20),
                    headers={"Content-Type": "application/json"})
        assert r.status_code == 413 and r.json()["error"]["code"] == "too_large", r.text
        assert "message" in ok(api.get("/system/health"))


def test_7_cleanup(appliance: E2EAppliance) -> None:
    appliance.check(f"zfs destroy -r {PREFIX}; rm -f {STREAM}; "
                    "rm -rf /var/tmp/zds-hostile-root")
