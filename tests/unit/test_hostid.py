"""The ZFS hostid follows the machine UUID, so a new system disk owns the pool."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.host.local import FakeLocalHost, RealLocalHost
from appliance.host.run import RecordingRunner
from appliance.hostid import ensure_machine_hostid, hostid_for

VM_UUID = "6f1c2a90-3b1e-4d2f-9a63-0c1f5e7d8a42"


def test_hostid_is_a_stable_function_of_the_uuid() -> None:
    h = hostid_for(VM_UUID)
    assert len(h) == 8 and int(h, 16) not in (0, 0xFFFFFFFF)
    assert hostid_for(VM_UUID.upper()) == h
    assert hostid_for("6f1c2a90-3b1e-4d2f-9a63-0c1f5e7d8a43") != h


def test_the_image_hostid_is_replaced_once_then_kept() -> None:
    local = FakeLocalHost(uuid=VM_UUID, hostid="7f621f33")  # the build's random one
    first = ensure_machine_hostid(local)
    assert first.changed and first.hostid == hostid_for(VM_UUID) == local.hostid
    again = ensure_machine_hostid(local)
    assert not again.changed and again.source == "machine-uuid"


def test_without_a_machine_uuid_the_hostid_is_left_alone() -> None:
    local = FakeLocalHost(uuid=None, hostid="7f621f33")
    result = ensure_machine_hostid(local)
    assert result.source == "kept" and not result.changed and local.hostid == "7f621f33"


@pytest.mark.parametrize(("text", "expected"), [
    (VM_UUID.upper() + "\n", VM_UUID),
    ("00000000-0000-0000-0000-000000000000\n", None),  # QEMU without -uuid
    ("FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF\n", None),
    ("", None),
])
def test_real_machine_uuid_rejects_placeholders(tmp_path: Path, text: str,
                                                expected: str | None) -> None:
    local = RealLocalHost(RecordingRunner())
    local.DMI_UUID = str(tmp_path / "product_uuid")  # type: ignore[misc]
    Path(local.DMI_UUID).write_text(text)
    assert local.machine_uuid() == expected


def test_real_hostid_file_is_read_little_endian_and_written_with_zgenhostid(
        tmp_path: Path) -> None:
    runner = RecordingRunner()
    local = RealLocalHost(runner)
    local.HOSTID_FILE = str(tmp_path / "hostid")  # type: ignore[misc]
    assert local.read_hostid() is None
    Path(local.HOSTID_FILE).write_bytes(bytes([0x33, 0x1F, 0x62, 0x7F]))
    assert local.read_hostid() == "7f621f33"
    local.write_hostid("0a1b2c3d")
    assert runner.calls == [("zgenhostid", "-f", "-o", local.HOSTID_FILE, "0a1b2c3d")]


def test_the_boot_unit_runs_the_light_entry_point_that_loads_no_cli() -> None:
    """Issue 26: zds-hostid.service sits before every pool import; `zds hostid` loaded
    the whole CLI and every adapter (15 s of each boot under emulation)."""
    import subprocess
    import sys

    unit = (Path(__file__).parents[2] / "ansible/roles/zds_api/templates/"
            "zds-hostid.service.j2").read_text()
    assert "ExecStart={{ zds_api__venv }}/bin/python -m appliance.hostid\n" in unit
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys; "
         "import appliance.hostid as h; h.ensure_machine_hostid = lambda local: "
         "h.HostidResult('5e71d9b9', 'machine-uuid', False); h.main(); "
         "print(sorted(m for m in sys.modules if m.split('.')[0] in ('api', 'fastapi', "
         "'pydantic') or m == 'appliance.host.factory'))"],
        capture_output=True, text=True, check=True).stdout.splitlines()
    assert loaded == ["zds: hostid 5e71d9b9 from the machine UUID", "[]"]


def test_real_local_host_secret_files_round_trip(tmp_path: Path) -> None:
    """What pool_secrets relies on, against the real adapter (the fake keeps a dict):
    a root-only file written whole, read back stripped, removed once."""
    local = RealLocalHost(RecordingRunner())
    path = tmp_path / "datastores" / ".zds-secrets" / "secure.json"
    local.write_secret(path, '{"user": "esx"}')
    assert path.stat().st_mode & 0o777 == 0o600
    assert local.read_text(path) == '{"user": "esx"}'
    assert local.remove_file(path) and not path.exists()
    assert not local.remove_file(path) and local.read_text(path) is None
