"""``zds cluster status|failover`` against a real HTTP server (uvicorn in a thread) on an
engine whose fake pacemaker is a pair, and on a single appliance."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from api.cli import main
from appliance.engine import Engine
from appliance.fake_hosts import fake_hosts
from appliance.host.fakes.cluster import FakeCluster
from appliance.settings import Settings
from tests.unit.http_server import serve


@pytest.fixture
def paired(tmp_path: Path) -> Iterator[tuple[str, str, FakeCluster]]:
    hosts = fake_hosts("tank", hostname="ha-a")
    hosts.cluster = FakeCluster.pair("ha-a", "ha-b", {"tank": "ha-a"}, address="10.96.0.50")
    engine = Engine.create(Settings().with_state_dir(tmp_path), hosts.adapters())
    engine.start()
    token = engine.tokens.create("cli", "admin")
    for url in serve(engine):
        yield url, token, hosts.cluster
    engine.close()


def test_status_and_failover(capsys: pytest.CaptureFixture[str],
                             paired: tuple[str, str, FakeCluster]) -> None:
    url, token, cluster = paired
    base = ["--server", url, "--token", token]
    assert main([*base, "cluster", "status"]) == 0
    out = capsys.readouterr().out
    assert "node ha-a: pacemaker answers, quorum yes, fencing on" in out
    assert "tank" in out and "10.96.0.50" in out
    assert main([*base, "--json", "cluster", "status"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["pools"][0]["node"] == "ha-a"
    assert main([*base, "cluster", "failover", "--wait", "10"]) == 0
    assert "cluster.failover succeeded" in capsys.readouterr().out
    assert cluster.moves == [("zds-tank", "ha-b"), ("zds-tank", "")]
    with pytest.raises(SystemExit, match="409"):
        main([*base, "cluster", "failover", "--node", "ha-b"])  # it is there already


def test_status_on_a_single_appliance(capsys: pytest.CaptureFixture[str],
                                      tmp_path: Path) -> None:
    engine = Engine.create(Settings().with_state_dir(tmp_path), fake_hosts().adapters())
    engine.start()
    token = engine.tokens.create("cli", "admin")
    for url in serve(engine):
        assert main(["--server", url, "--token", token, "cluster", "status"]) == 0
        assert "not in an HA pair" in capsys.readouterr().out
    engine.close()


def test_the_agent_over_real_http(paired: tuple[str, str, FakeCluster], tmp_path: Path) -> None:
    """The agent's own HTTP client (HttpApi) against the API served by uvicorn: what
    pacemaker runs, minus TLS."""
    from api import agent

    url, token, _ = paired
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    env = {"OCF_RESKEY_pool": "tank", "OCF_RESKEY_url": url,
           "OCF_RESKEY_token_file": str(token_file), "OCF_RESKEY_CRM_meta_timeout": "30000"}
    lines: list[str] = []
    assert agent.run(["monitor"], env, out=lines.append) == agent.OCF_SUCCESS
    assert agent.run(["stop"], env, out=lines.append) == agent.OCF_SUCCESS
    assert agent.run(["monitor"], env, out=lines.append) == agent.OCF_NOT_RUNNING
    assert agent.run(["start"], env, out=lines.append) == agent.OCF_SUCCESS, lines
    assert any(line.startswith("took tank:") for line in lines), lines
    bad = {**env, "OCF_RESKEY_token_file": str(tmp_path / "nope")}
    assert agent.run(["monitor"], bad, out=lines.append) == agent.OCF_ERR_INSTALLED
    token_file.write_text("zds_0000_wrong\n")
    assert agent.run(["monitor"], env, out=lines.append) == agent.OCF_ERR_GENERIC
    assert lines[-1].startswith("ocf-exit-reason:401"), lines[-1]
