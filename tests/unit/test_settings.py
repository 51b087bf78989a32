"""zds.toml: defaults, overrides, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.errors import InvalidInput
from appliance.settings import Settings, load_settings


def test_missing_file_means_defaults(tmp_path: Path) -> None:
    assert load_settings(tmp_path / "none.toml") == Settings()


def test_file_overrides(tmp_path: Path) -> None:
    f = tmp_path / "zds.toml"
    f.write_text("""
[api]
port = 9443
tls = false
[state]
dir = "/srv/zds"
[ganesha]
exports_dir = "/srv/zds/exports"
[iscsi]
iqn_prefix = "iqn.2026-11.org.example.storage"
portal = "192.0.2.5:3261"
[firstboot]
pool = "vmpool"
disks = ["/dev/disk/by-id/nvme-*"]
[datastores]
max_overcommit = 2.5
""")
    s = load_settings(f)
    assert (s.port, s.tls) == (9443, False)
    assert s.db_path == Path("/srv/zds/zds.db")
    assert s.tls_cert == Path("/etc/zds/tls/cert.pem")  # not moved by state.dir
    # root's SSH keys stay root's, wherever the state lives (fw_cfg keys go there)
    assert s.root_authorized_keys == Path("/root/.ssh/authorized_keys")
    assert s.ganesha_exports_dir == Path("/srv/zds/exports")
    assert s.iscsi_portal == ("192.0.2.5", 3261)
    assert s.iqn_prefix == "iqn.2026-11.org.example.storage"
    assert s.firstboot_pool == "vmpool" and s.firstboot_disks == ("/dev/disk/by-id/nvme-*",)
    assert s.max_overcommit == 2.5


def test_broken_file_is_a_clear_error(tmp_path: Path) -> None:
    f = tmp_path / "zds.toml"
    f.write_text("[api\nport = ")
    with pytest.raises(InvalidInput, match="not valid TOML"):
        load_settings(f)
