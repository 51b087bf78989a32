"""``zds probe ...`` against the API on the fake rig, and client mode with a fake fio."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.cli import Wiring, main
from api.cli.common import Client
from appliance.errors import InsufficientSpace, InvalidInput
from appliance.host.fio import FakeFio
from appliance.probes.client import ClientTools, run_on_client
from appliance.probes.execute import ProbeExecutor
from tests.unit.conftest import Rig
from tests.unit.test_probe_api import Probe

FIX = Path(__file__).parent / "fixtures"


class Cli(Probe):
    wiring: Wiring


@pytest.fixture
def cli(rig: Rig, admin_token: str, tmp_path: Path) -> Cli:
    probe = Cli(rig, tmp_path)
    app = create_app(rig.engine, start=False)
    test_http = TestClient(app, base_url="http://testserver/api/v1")
    test_http.headers["Authorization"] = f"Bearer {admin_token}"

    class TestClientCli(Client):
        def __init__(self, args: argparse.Namespace) -> None:
            self.http = test_http

    probe.wiring = Wiring(client=TestClientCli)
    test_http.put("/datastores/ds1", json={"protocol": "nfs3", "size": "10G",
                                           "nfs": {"clients": [{"match": "*"}]}})
    return probe


def test_run_show_list_compare_plot_report(cli: Cli, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "run", "vm-mixed-4k", "--datastore", "ds1",
                 "--set", "workers=1,2", "--set", "runtime=3", "--wait", "30"], cli.wiring) == 0
    out = capsys.readouterr().out
    assert "vm-mixed-4k on local:ds1  ok" in out and "workers=2" in out and "IOPS" in out
    assert main(["--json", "probe", "list", "--datastore", "ds1"], cli.wiring) == 0
    rows = json.loads(capsys.readouterr().out)
    rid = rows[0]["id"]
    assert main(["probe", "show", rid], cli.wiring) == 0
    assert rid in capsys.readouterr().out
    assert main(["probe", "run", "vm-mixed-4k", "--datastore", "ds1", "--wait", "30"],
                cli.wiring) == 0
    capsys.readouterr()
    assert main(["--json", "probe", "list"], cli.wiring) == 0
    a, b = (r["id"] for r in json.loads(capsys.readouterr().out)[:2])
    assert main(["probe", "compare", a, b], cli.wiring) == 0
    assert "B/A" in capsys.readouterr().out
    png = tmp_path / "p.png"
    assert main(["probe", "plot", a, "--with", b, "--kind", "sweep", "-o", str(png)],
                cli.wiring) == 0
    assert png.read_bytes().startswith(b"\x89PNG")
    html = tmp_path / "r.html"
    assert main(["probe", "report", a, b, "-o", str(html)], cli.wiring) == 0
    assert html.read_text().startswith("<!DOCTYPE html>")
    assert main(["probe", "profiles"], cli.wiring) == 0
    assert "size-sweep" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="404"):
        main(["probe", "show", "nope"], cli.wiring)


def test_client_mode_posts_its_result(cli: Cli, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    mount = tmp_path / "mnt"
    mount.mkdir()
    tools = ClientTools(ProbeExecutor(cli.fio, str(tmp_path / "w")),
                        usage=lambda p: (100 << 30, 1 << 30),
                        make_dir=lambda p: Path(p).mkdir(),
                        remove_tree=lambda p: Path(p).rmdir(),
                        is_block=lambda p: False, hostname="esx01")
    wiring = replace(cli.wiring, client_tools=lambda workdir: tools)
    assert main(["--json", "probe", "run", "--server", "https://zds:8443", "--token", "T",
                 "--datastore", "ds1", "vm-mixed-4k", "--path", str(mount)], wiring) == 0
    posted = json.loads(capsys.readouterr().out)
    assert posted["target"]["kind"] == "client" and posted["target"]["datastore"] == "ds1"
    job, _ = cli.fio.jobs[-1]
    assert f"directory={mount}/zds-probe-" in job
    assert list(mount.iterdir()) == []  # scratch directory removed
    assert posted["target"]["client"] == "esx01"
    stored = cli.service.store.get(posted["id"])  # the API recorded it
    assert stored.target["kind"] == "client"


def test_client_mode_safety(tmp_path: Path) -> None:
    ex = ProbeExecutor(FakeFio(), str(tmp_path / "w"))
    common: dict[str, Any] = {"make_dir": lambda p: None, "remove_tree": lambda p: None}
    with pytest.raises(InsufficientSpace, match="80%"):
        run_on_client(ex, "bst", {}, "ds1", path=str(tmp_path),
                      usage=lambda p: (1 << 30, 700 << 20), **common)
    with pytest.raises(InvalidInput, match="--force"):
        run_on_client(ex, "bst", {}, "ds1", device="/dev/sdx",
                      usage=lambda p: (0, 0), **common)
    with pytest.raises(InvalidInput, match="not a block device"):
        run_on_client(ex, "bst", {}, "ds1", device="/dev/sdx", force=True,
                      usage=lambda p: (0, 0), **common)
    with pytest.raises(InvalidInput, match="exactly one"):
        run_on_client(ex, "bst", {}, "ds1", usage=lambda p: (0, 0), **common)
    with pytest.raises(InvalidInput, match="not a directory"):
        run_on_client(ex, "bst", {}, "ds1", path=str(tmp_path / "nope"),
                      usage=lambda p: (0, 0), **common)
