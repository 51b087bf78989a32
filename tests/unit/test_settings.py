"""zds.toml: defaults, overrides, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.errors import InvalidInput
from appliance.settings import Settings, load_settings, write_nfs_server


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


def test_the_nfs_server_is_ganesha_unless_the_file_says_knfsd(tmp_path: Path) -> None:
    f = tmp_path / "zds.toml"
    f.write_text("[nfs]\nserver = \"knfsd\"\n")
    assert load_settings(f).nfs_server == "knfsd"
    assert load_settings(tmp_path / "none.toml").nfs_server == "ganesha"
    f.write_text("[nfs]\nserver = \"nfsd\"\n")
    with pytest.raises(InvalidInput, match="ganesha, knfsd"):
        load_settings(f)


def test_writing_the_nfs_server_keeps_the_rest_of_the_file(tmp_path: Path) -> None:
    f = tmp_path / "zds.toml"
    f.write_text('# managed\n[api]\nport = 9443\n\n[nfs]\nserver = "ganesha"\n\n'
                 '[iscsi]\niqn_prefix = "iqn.2026-11.org.example"\n')
    assert write_nfs_server(f, "knfsd")
    s = load_settings(f)
    assert (s.nfs_server, s.port, s.iqn_prefix) == ("knfsd", 9443, "iqn.2026-11.org.example")
    assert f.read_text().startswith("# managed\n[api]\nport = 9443\n")
    assert not write_nfs_server(f, "knfsd")  # already so: the file is not touched
    g = tmp_path / "plain.toml"
    g.write_text("[api]\nport = 9444\n")  # no [nfs] yet: added at the end
    assert write_nfs_server(g, "knfsd") and load_settings(g).nfs_server == "knfsd"
    h = tmp_path / "new" / "zds.toml"  # no file at all
    assert write_nfs_server(h, "ganesha") and load_settings(h).nfs_server == "ganesha"
    with pytest.raises(InvalidInput):
        write_nfs_server(g, "nfsd")
    assert load_settings(g).nfs_server == "knfsd"


def test_the_api_limits_come_from_the_api_table(tmp_path: Path) -> None:
    f = tmp_path / "zds.toml"
    f.write_text("[api]\nmax_body = 2048\nmax_result_body = 4096\nmax_in_flight = 8\n"
                 "max_per_token = 2\nlimit_concurrency = 32\ncreate_queue_limit = 5\n")
    s = load_settings(f)
    assert (s.max_body, s.max_result_body, s.max_in_flight, s.max_per_token,
            s.limit_concurrency, s.create_queue_limit) == (2048, 4096, 8, 2, 32, 5)
    d = Settings()
    assert (d.max_body, d.max_result_body, d.max_in_flight, d.max_per_token,
            d.limit_concurrency, d.create_queue_limit) == (1 << 20, 64 << 20, 256, 128,
                                                           512, 256)
    for bad in ("0", '"1M"', "-5", "true", "1.5"):
        f.write_text(f"[api]\nmax_body = {bad}\n")
        with pytest.raises(InvalidInput, match=r"\[api\] max_body"):
            load_settings(f)
