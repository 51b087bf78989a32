"""``zds probe ...`` against the API on the fake rig, and client mode with a fake fio."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

import api.cli_probe as cli_probe
from api.app import create_app
from api.cli import Client, main
from appliance.errors import InsufficientSpace, InvalidInput
from appliance.host.fio import FakeFio
from appliance.probes.client import run_on_client
from appliance.probes.execute import ProbeExecutor
from tests.unit.conftest import Rig
from tests.unit.test_probe_api import Probe

FIX = Path(__file__).parent / "fixtures"


@pytest.fixture
def cli(rig: Rig, admin_token: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> Probe:
    probe = Probe(rig, tmp_path)
    app = create_app(rig.engine, start=False)
    test_http = TestClient(app, base_url="http://testserver/api/v1")
    test_http.headers["Authorization"] = f"Bearer {admin_token}"

    class TestClientCli(Client):
        def __init__(self, args: argparse.Namespace) -> None:
            self.http = test_http

    monkeypatch.setattr(cli_probe, "Client", TestClientCli)
    test_http.put("/datastores/ds1", json={"protocol": "nfs3", "size": "10G",
                                           "nfs": {"clients": [{"match": "*"}]}})
    return probe


def test_run_show_list_compare_plot_report(cli: Probe, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "run", "vm-mixed-4k", "--datastore", "ds1",
                 "--set", "workers=1,2", "--set", "runtime=3", "--wait", "30"]) == 0
    out = capsys.readouterr().out
    assert "vm-mixed-4k on local:ds1  ok" in out and "workers=2" in out and "IOPS" in out
    assert main(["--json", "probe", "list", "--datastore", "ds1"]) == 0
    rows = json.loads(capsys.readouterr().out)
    rid = rows[0]["id"]
    assert main(["probe", "show", rid]) == 0
    assert rid in capsys.readouterr().out
    assert main(["probe", "run", "vm-mixed-4k", "--datastore", "ds1", "--wait", "30"]) == 0
    capsys.readouterr()
    assert main(["--json", "probe", "list"]) == 0
    a, b = (r["id"] for r in json.loads(capsys.readouterr().out)[:2])
    assert main(["probe", "compare", a, b]) == 0
    assert "B/A" in capsys.readouterr().out
    png = tmp_path / "p.png"
    assert main(["probe", "plot", a, "--with", b, "--kind", "sweep", "-o", str(png)]) == 0
    assert png.read_bytes().startswith(b"\x89PNG")
    html = tmp_path / "r.html"
    assert main(["probe", "report", a, b, "-o", str(html)]) == 0
    assert html.read_text().startswith("<!DOCTYPE html>")
    assert main(["probe", "profiles"]) == 0
    assert "size-sweep" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="404"):
        main(["probe", "show", "nope"])


def test_client_mode_posts_its_result(cli: Probe, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    mount = tmp_path / "mnt"
    mount.mkdir()
    seen: dict[str, Any] = {}

    def fake_client_run(args: argparse.Namespace) -> dict[str, Any]:
        ex = ProbeExecutor(cli.fio, str(tmp_path / "w"))
        r = run_on_client(ex, args.profile, cli_probe._overrides(args), args.datastore,
                          path=args.path, usage=lambda p: (100 << 30, 1 << 30),
                          make_dir=lambda p: Path(p).mkdir(), remove_tree=lambda p:
                          Path(p).rmdir(), hostname="esx01")
        seen["body"] = r.to_dict()
        return dict(cli_probe.Client(args).call("POST", "/probes/results", r.to_dict()))

    monkeypatch.setattr(cli_probe, "_client_run", fake_client_run)
    assert main(["probe", "run", "--server", "https://zds:8443", "--token", "T",
                 "--datastore", "ds1", "vm-mixed-4k", "--path", str(mount)]) == 0
    assert "on client:ds1" in capsys.readouterr().out
    job, _ = cli.fio.jobs[-1]
    assert f"directory={mount}/zds-probe-" in job
    assert list(mount.iterdir()) == []  # scratch directory removed
    assert seen["body"]["target"]["client"] == "esx01"


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
