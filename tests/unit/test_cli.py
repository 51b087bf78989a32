"""The zds command line against a real HTTP server (uvicorn in a thread, fake engine)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from api.cli import main
from appliance.demo import demo_engine
from appliance.engine import Engine
from appliance.errors import Unauthorized
from appliance.services.tokens import TokenService
from appliance.settings import Settings
from appliance.store import Store
from tests.unit.http_server import serve


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, str, Engine]]:
    engine = demo_engine(tmp_path)
    token = engine.tokens.create("cli", "admin")
    for url in serve(engine):
        yield url, token, engine
    engine.close()


def zds(capsys: pytest.CaptureFixture[str], server: tuple[str, str, Engine],
        *argv: str) -> tuple[int, str]:
    url, token, _ = server
    rc = main(["--server", url, "--token", token, *argv])
    return rc, capsys.readouterr().out


def test_datastore_lifecycle_from_the_cli(capsys: pytest.CaptureFixture[str],
                                          server: tuple[str, str, Engine]) -> None:
    rc, out = zds(capsys, server, "--json", "datastore", "put", "ds1", "--protocol", "nfs3",
                  "--size", "10G", "--client", "192.0.2.0/24:ro")
    d = json.loads(out)
    assert rc == 0 and d["nfs"]["clients"] == [{"match": "192.0.2.0/24", "access": "ro"}]
    rc, out = zds(capsys, server, "datastore", "put", "lun1", "--protocol", "iscsi",
                  "--size", "5G", "--initiator", "iqn.2026-11.org.example:host1")
    assert rc == 0 and "target iqn.2026-11.io.zds:zds-demo.lun1" in out
    rc, out = zds(capsys, server, "datastore", "list")
    assert out.splitlines()[0].split()[:3] == ["NAME", "PROTOCOL", "POOL"]
    assert {line.split()[0] for line in out.splitlines()[1:-1]} == {"ds1", "lun1"}
    assert out.splitlines()[-1].startswith("(usage and snapshots read ")
    rc, out = zds(capsys, server, "--json", "datastore", "list", "--protocol", "iscsi")
    assert [d["name"] for d in json.loads(out)] == ["lun1"]
    rc, out = zds(capsys, server, "datastore", "attach", "ds1")
    assert "esxcli storage nfs add" in out and "<pool type='netfs'>" in out
    rc, out = zds(capsys, server, "datastore", "attach", "lun1", "--address", "127.0.0.1",
                  "--port", "13260")
    assert """<host name="127.0.0.1" port='13260'/>""" in out
    assert '<iqn name="iqn.2026-11.org.example:host1"/>' in out
    rc, out = zds(capsys, server, "snapshot", "create", "ds1", "s1")
    assert "tank/datastores/ds1@s1" in out
    rc, out = zds(capsys, server, "--json", "snapshot", "list", "ds1")
    assert [s["name"] for s in json.loads(out)] == ["s1"]
    rc, out = zds(capsys, server, "--json", "datastore", "delete", "lun1", "--wait", "10")
    assert rc == 0 and json.loads(out)["state"] == "succeeded"
    rc, out = zds(capsys, server, "--json", "system", "drift")
    assert json.loads(out) == {"in_sync": True, "items": []}


def test_an_nvme_datastore_from_the_cli(capsys: pytest.CaptureFixture[str],
                                       server: tuple[str, str, Engine]) -> None:
    host = "nqn.2014-08.org.nvmexpress:uuid:5b1e0c2a-7d4f-4e8b-9a61-0c3f2d8e7b14"
    rc, out = zds(capsys, server, "datastore", "put", "ns1", "--protocol", "nvme-tcp",
                  "--size", "5G", "--host-nqn", host)
    assert rc == 0 and "subsystem nqn.2026-11.io.zds:zds-demo.ns1 namespace 1 eui." in out
    rc, out = zds(capsys, server, "datastore", "attach", "ns1", "--address", "127.0.0.1")
    assert "nvme connect -t tcp -a 127.0.0.1 -s 4420 -n nqn.2026-11.io.zds:zds-demo.ns1" \
        in out and "ESXi is not supported" in out
    rc, out = zds(capsys, server, "--json", "datastore", "get", "ns1")
    assert json.loads(out)["nvme"]["hosts"] == [host]


def test_cli_errors_are_clear(capsys: pytest.CaptureFixture[str],
                              server: tuple[str, str, Engine]) -> None:
    with pytest.raises(SystemExit) as exc:
        zds(capsys, server, "datastore", "put", "bad;name", "--protocol", "nfs3",
            "--size", "1G")
    assert "422 invalid_input" in str(exc.value)
    url, _, _ = server
    with pytest.raises(SystemExit) as exc:
        main(["--server", url, "--token", "zds_000000000000_" + "x" * 43, "pool", "list"])
    assert "401" in str(exc.value)


def test_pool_and_igroup_commands(capsys: pytest.CaptureFixture[str],
                                  server: tuple[str, str, Engine]) -> None:
    rc, out = zds(capsys, server, "pool", "create", "fast", "/dev/disk/by-id/virtio-demo0",
                  "/dev/disk/by-id/virtio-demo1", "--layout", "mirror")
    assert rc == 0 and "succeeded" in out
    rc, out = zds(capsys, server, "--json", "pool", "list")
    assert {p["name"] for p in json.loads(out)} == {"tank", "fast"}
    rc, out = zds(capsys, server, "igroup", "put", "esx", "iqn.1998-01.com.vmware:esxi01-4f2a")
    assert rc == 0 and "esx:" in out
    rc, out = zds(capsys, server, "--json", "job", "list")
    assert json.loads(out)[0]["kind"] == "pool.create"
    # a failed job is a failed command (scripts test $?); force is passed through
    rc, out = zds(capsys, server, "pool", "export", "fast", "--wait", "10")
    assert rc == 0 and "succeeded" in out
    server[2].ctx.zfs.foreign.add("fast")  # type: ignore[attr-defined]
    rc, out = zds(capsys, server, "pool", "import", "fast", "--wait", "10")
    assert rc == 1 and "failed error: pool fast was last used by another system" in out
    rc, out = zds(capsys, server, "pool", "import", "fast", "--force", "--wait", "10")
    assert rc == 0 and "succeeded" in out


def test_local_token_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--state-dir", str(tmp_path), "--config", str(tmp_path / "none.toml")]
    assert main([*base, "--json", "token", "create", "--role", "readonly", "--name", "ro"]) == 0
    token = json.loads(capsys.readouterr().out)["token"]
    assert token.startswith("zds_")
    main([*base, "--json", "token", "list"])
    rows = json.loads(capsys.readouterr().out)
    assert [(r["name"], r["role"]) for r in rows] == [("ro", "readonly")]
    assert "hash" not in rows[0]
    assert main([*base, "token", "revoke", rows[0]["id"]]) == 0
    assert main([*base, "token", "revoke", rows[0]["id"]]) == 2  # not found: clear error


def test_a_token_imported_on_two_nodes_opens_both(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An HA pair's shared token (docs/ha.md): made on one node, imported from stdin on
    the other, where it verifies; importing it again changes nothing; a token with the
    same id and another secret is refused (exit 2, the error said) and does not verify."""
    nodes = [["--state-dir", str(tmp_path / n), "--config", str(tmp_path / "none.toml")]
             for n in ("ha-a", "ha-b")]
    assert main([*nodes[0], "--json", "token", "create", "--role", "admin",
                 "--name", "pair"]) == 0
    token = json.loads(capsys.readouterr().out)["token"]
    for _ in range(2):
        monkeypatch.setattr("sys.stdin", io.StringIO(token + "\n"))
        assert main([*nodes[1], "--json", "token", "create", "--role", "admin",
                     "--name", "pair", "--stdin"]) == 0
        assert json.loads(capsys.readouterr().out)["token"] == token
    main([*nodes[1], "--json", "token", "list"])
    assert [(r["name"], r["role"]) for r in json.loads(capsys.readouterr().out)] == \
        [("pair", "admin")]
    settings = Settings().with_state_dir(tmp_path / "ha-b")
    store = Store(settings.db_path)
    assert TokenService(store).verify(token).role == "admin"
    other = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    monkeypatch.setattr("sys.stdin", io.StringIO(other + "\n"))
    assert main([*nodes[1], "token", "create", "--role", "admin", "--stdin"]) == 2
    assert "another secret" in capsys.readouterr().err
    with pytest.raises(Unauthorized):
        TokenService(store).verify(other)
    store.close()


def test_serve_bounds_the_connections_uvicorn_takes(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """uvicorn answers its own 503 beyond [api] limit_concurrency connections at once,
    and keeps an idle connection open for [api] keep_alive seconds (75 unless set)."""
    from api.cli.common import Wiring

    (tmp_path / "zds.toml").write_text("[api]\nlimit_concurrency = 77\n")
    seen: dict[str, Any] = {}
    monkeypatch.setattr("api.serve.run", lambda app, **kw: seen.update(kw))
    engines: list[Engine] = []

    def engine(settings: Any) -> Engine:
        engines.append(demo_engine(tmp_path / "state"))
        return engines[-1]

    rc = main(["--config", str(tmp_path / "zds.toml"), "--state-dir", str(tmp_path),
               "serve", "--no-tls"], wiring=Wiring(engine=engine))
    assert rc == 0 and seen["limit_concurrency"] == 77 and seen["timeout_keep_alive"] == 75
    (tmp_path / "zds.toml").write_text("[api]\nkeep_alive = 20\n")
    assert main(["--config", str(tmp_path / "zds.toml"), "--state-dir", str(tmp_path),
                 "serve", "--no-tls"], wiring=Wiring(engine=engine)) == 0
    assert seen["timeout_keep_alive"] == 20
    for e in engines:
        e.close()


def test_openapi_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["openapi"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["info"]["title"].startswith("ZDS")


def test_tls_certificate_is_made_once(tmp_path: Path) -> None:
    from appliance.host.local import RealLocalHost
    from appliance.host.run import SubprocessRunner

    local = RealLocalHost(SubprocessRunner())
    cert, key = tmp_path / "tls" / "cert.pem", tmp_path / "tls" / "key.pem"
    assert local.ensure_tls_certificate(cert, key, "zds-test") is True
    assert "BEGIN CERTIFICATE" in cert.read_text() and key.stat().st_mode & 0o077 == 0
    first = cert.read_bytes()
    assert local.ensure_tls_certificate(cert, key, "zds-test") is False
    assert cert.read_bytes() == first


class Units:
    """NfsUnits that only remember: which server runs, and whether zds-api restarted."""

    def __init__(self) -> None:
        self.running: str | None = "ganesha"
        self.restarts = 0

    def active(self) -> str | None:
        return self.running

    def use(self, server: str) -> list[str]:
        if self.running == server:
            return []
        self.running = server
        return [f"started {server}"]

    def restart_api(self) -> None:
        self.restarts += 1


def test_nfs_server_command_switches_records_and_restarts_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from api.cli.common import Wiring

    units = Units()
    conf = tmp_path / "zds.toml"
    conf.write_text("[api]\nport = 9443\n")
    base = ["--config", str(conf)]
    w = Wiring(nfs_units=lambda: units)
    assert main([*base, "--json", "nfs-server"], wiring=w) == 0
    assert json.loads(capsys.readouterr().out) == {"configured": "ganesha", "running": "ganesha"}
    assert main([*base, "nfs-server", "knfsd"], wiring=w) == 0
    out = capsys.readouterr().out
    assert "started knfsd" in out and "restarted zds-api" in out
    assert units.restarts == 1 and 'server = "knfsd"' in conf.read_text()
    assert main([*base, "nfs-server", "knfsd"], wiring=w) == 0  # nothing left to do
    assert "nothing to do" in capsys.readouterr().out and units.restarts == 1
    with pytest.raises(SystemExit):  # argparse: not a choice
        main([*base, "nfs-server", "nfsd"], wiring=w)
    assert units.running == "knfsd"
