"""SSH keys from the hypervisor: fw_cfg opt/zds/ssh-authorized-keys is added to root's
authorized_keys on the first boot (the Vagrant box logs in this way, then replaces the
key), only plain key lines, and never again: a key removed stays removed."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from appliance import validate
from appliance.engine import Engine
from appliance.errors import InvalidInput
from appliance.fake_hosts import fake_hosts
from appliance.firstboot import run_firstboot
from appliance.host.local import RealLocalHost
from appliance.host.run import SubprocessRunner
from appliance.settings import Settings

ED = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIN1ZkVtdHF0fYdWQ7bMjx4gW3p4wE0r5Y1i9yN8rT0aB vagrant"
RSA = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC0g+ZTxC7weoIJLUafOgrm+h insecure"
GiB = 1 << 30


@pytest.mark.parametrize("line", [ED, RSA, ED.rsplit(" ", 1)[0],
                                  "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAI x"])
def test_plain_key_lines_are_accepted(line: str) -> None:
    assert validate.ssh_public_key("  " + line + " ") == line
    # the caller splits the file into lines: a newline left in one is refused, as every
    # control character by every validator (tests/unit/test_validate_control.py)
    with pytest.raises(InvalidInput):
        validate.ssh_public_key(line + "\n")


@pytest.mark.parametrize("line", [
    'command="/bin/sh" ' + ED,        # options would change what the key may do
    "from=\"10.0.0.0/8\" " + ED,
    "ssh-ed25519",                     # no key
    "ssh-dss AAAAB3NzaC1kc3MAAACBAP",  # DSA: gone from OpenSSH
    "ssh-ed25519 AAAA$(reboot)AAAAAAAAAAAAAA",
    ED + "\nssh-rsa x",
    "",
])
def test_anything_else_is_refused(line: str) -> None:
    with pytest.raises(InvalidInput):
        validate.ssh_public_key(line)


def _engine(tmp_path: Path) -> tuple[Engine, Settings, dict[str, str], dict[str, str]]:
    settings = Settings().with_state_dir(tmp_path)
    hosts = fake_hosts(None, disks={str(tmp_path / "pools" / "tank" / f"disk{i}.img"): 8 * GiB
                                    for i in range(2)})
    return (Engine.create(settings, hosts.adapters()), settings, hosts.local.fw_cfg,
            hosts.local.files)


def test_firstboot_adds_the_fw_cfg_keys_once(tmp_path: Path) -> None:
    engine, settings, fw_cfg, files = _engine(tmp_path)
    fw_cfg["ssh-authorized-keys"] = "\n".join(
        ["# vagrant's key", ED, 'command="id" ' + RSA, "", ED, RSA])
    try:
        first = run_firstboot(engine)
        assert first.ssh_keys_added == 2
        assert files[str(settings.root_authorized_keys)].splitlines() == [ED, RSA]
        assert any("ignored" in m and "command=" in m for m in first.messages)
        again = run_firstboot(engine)  # every boot: nothing new, nothing doubled
        assert again.ssh_keys_added == 0
        assert files[str(settings.root_authorized_keys)].splitlines() == [ED, RSA]
        # Vagrant swapped its insecure key for a key of its own (issue 22 item 6): the
        # next boot must not put the insecure one back
        files[str(settings.root_authorized_keys)] = RSA + "\n"
        assert run_firstboot(engine).ssh_keys_added == 0
        assert files[str(settings.root_authorized_keys)].splitlines() == [RSA]
    finally:
        engine.close()


def test_no_fw_cfg_file_touches_nothing(tmp_path: Path) -> None:
    engine, settings, _, files = _engine(tmp_path)
    try:
        assert run_firstboot(engine).ssh_keys_added == 0
        assert str(settings.root_authorized_keys) not in files
    finally:
        engine.close()


def test_real_adapter_appends_keeps_what_is_there_and_sets_modes(tmp_path: Path) -> None:
    local = RealLocalHost(SubprocessRunner())
    path = tmp_path / "root" / ".ssh" / "authorized_keys"
    assert local.add_authorized_keys(path, [ED]) == 1
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.write_text(path.read_text() + "ssh-ed25519 AAAAmine admin")  # no final newline
    assert local.add_authorized_keys(path, [ED, RSA, RSA]) == 1
    assert path.read_text().splitlines() == [ED, "ssh-ed25519 AAAAmine admin", RSA]
    assert local.add_authorized_keys(path, [RSA]) == 0
