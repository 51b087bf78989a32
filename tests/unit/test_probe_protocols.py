"""The protocol comparison: the table it computes, and /api/v1/probes/comparisons on the
fake engine rig (one scratch per run made like the protocol's datastores, each protocol's
own loopback attachment, interleaved rounds, everything cleaned up)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from appliance.host.factory import ProbeHosts
from appliance.host.fakes.probes import FakeInitiator, FakeMounter
from appliance.host.fio import FakeFio
from appliance.host.nvme_initiator import FakeNvmeInitiator
from appliance.host.sysstat import count_cpus
from appliance.probes import protocols
from appliance.probes.model import ProbeResult
from appliance.probes.service import build
from tests.unit.conftest import Rig

FIX = Path(__file__).parent / "fixtures"


# ------------------------------------------------------------------------ the table

def _result(leg: str, round_: int, iops: float, p99: float, cpu: float | None = 50.0,
            status: str = "ok", baseline: str = "") -> ProbeResult:
    return ProbeResult(
        id=f"{leg}{round_}", profile="randread-4k-qd32", params={},
        target={"kind": "x", "datastore": "compare-c1"},
        settings={"comparison": {"id": "c1", "pool": "tank", "leg": leg, "target": "x",
                                 "baseline": baseline, "round": round_, "rounds": 3,
                                 "legs": ["zvol", "iscsi", "nvme-tcp"]}},
        started_at=f"2026-11-26T10:00:{round_:02d}Z", ended_at="", status=status,  # type: ignore[arg-type]
        summary={"iops": iops, "mbps": iops * 4 / 1000, "lat_p50_ms": p99 / 4,
                 "lat_p99_ms": p99} if status == "ok" else {},
        cpu={"mean_pct": cpu, "cpus": 2} if cpu is not None else {})


def test_rows_are_medians_per_leg_against_the_baseline_of_its_kind() -> None:
    results = [
        _result("zvol", 0, 10_000, 2.0), _result("zvol", 1, 12_000, 1.0),
        _result("zvol", 2, 11_000, 3.0),
        _result("iscsi", 0, 4_000, 8.0, baseline="zvol"),
        _result("iscsi", 1, 6_000, 6.0, baseline="zvol"),
        _result("iscsi", 2, 0, 0, status="failed", baseline="zvol"),
        _result("nvme-tcp", 0, 5_500, 4.0, cpu=None, baseline="zvol"),
    ]
    rows = {r.leg: r for r in protocols.rows(results)}
    assert list(rows) == ["zvol", "iscsi", "nvme-tcp"]  # the comparison's own order
    assert (rows["zvol"].iops, rows["zvol"].lat_p99_ms, rows["zvol"].runs) == (11_000, 2.0, 3)
    assert rows["zvol"].iops_vs_baseline is None  # a baseline is not measured against one
    iscsi = rows["iscsi"]
    assert (iscsi.runs, iscsi.failed, iscsi.iops) == (2, 1, 5_000)  # the failure not in it
    assert iscsi.iops_vs_baseline == round(5_000 / 11_000, 3)
    assert iscsi.p99_vs_baseline == 3.5
    # 50 % of 2 CPUs for 5000 IOPS: 200 us of CPU per I/O (median of 250 and 166.7)
    assert iscsi.cpu_us_per_io == pytest.approx((250 + 1e6 / 6000) / 2, rel=1e-3)
    assert rows["nvme-tcp"].cpu_us_per_io is None  # no CPU reading, no figure
    assert rows["nvme-tcp"].iops_vs_baseline == 0.5


def test_rounds_alternate_their_order() -> None:
    legs = list(protocols.legs_for([("nfs3", "nfs", False), ("iscsi", "iscsi", True)])
                .values())
    assert [leg.name for leg in legs] == ["dataset", "nfs3", "zvol", "iscsi"]
    assert all(leg.baseline == ("" if leg.target == "local" else
                                ("zvol" if leg.is_volume else "dataset")) for leg in legs)
    order = [(r, leg.name) for r, leg in protocols.schedule(legs, 3)]
    assert [n for r, n in order if r == 0] == ["dataset", "nfs3", "zvol", "iscsi"]
    assert [n for r, n in order if r == 1] == ["iscsi", "zvol", "nfs3", "dataset"]
    assert [n for r, n in order if r == 2] == ["dataset", "nfs3", "zvol", "iscsi"]


def test_the_cpu_count_comes_from_the_per_cpu_lines_of_proc_stat() -> None:
    text = ("cpu  1210093 2046 540180 37520212 60129 0 19262 0 0 0\n"
            "cpu0 605046 1023 270090 18760106 30064 0 9631 0 0 0\n"
            "cpu1 605047 1023 270090 18760106 30065 0 9631 0 0 0\n"
            "intr 1 2 3\nctxt 99\n")
    assert count_cpus(text) == 2


# ------------------------------------------------------------------------ the API

class Hosts:
    def __init__(self, rig: Rig) -> None:
        logs = {p.name: p.read_text() for p in (FIX / "fio" / "vm-mixed-4k-logs").iterdir()}
        self.fio = FakeFio(json_text=(FIX / "fio" / "vm-mixed-4k.json").read_text(),
                           logs=logs)
        self.mounter = FakeMounter()
        self.initiator = FakeInitiator([])
        self.nvme = FakeNvmeInitiator()
        rig.engine.probes = build(rig.engine.ctx, ProbeHosts(
            fio=self.fio, mounter=self.mounter, initiator=self.initiator, devfs=None,
            nvme=self.nvme), rig.engine.system.version)


def _compare(client: TestClient, **body: Any) -> dict[str, Any]:
    r = client.post("/api/v1/probes/comparisons", params={"wait": 60}, json=body)
    assert r.status_code == 202, r.text
    return dict(r.json())


def test_a_comparison_runs_every_leg_through_its_own_protocol_and_cleans_up(
        client: TestClient, rig: Rig) -> None:
    hosts = Hosts(rig)
    job = _compare(client, pool="tank", profile="vm-mixed-4k", rounds=2,
                   overrides={"workers": "1,2", "runtime": 2, "size": "8m"})
    assert job["state"] == "succeeded", job
    cid = job["comparison_id"]
    legs = ["dataset", "nfs3", "nfs41", "zvol", "iscsi", "nvme-tcp"]
    v = client.get(f"/api/v1/probes/comparisons/{cid}").json()
    assert (v["pool"], v["profile"], v["legs"], v["rounds"], v["complete"]) == (
        "tank", "vm-mixed-4k", legs, 2, True)
    assert [r["leg"] for r in v["results"]] == legs + legs[::-1]
    assert [r["round"] for r in v["results"]] == [0] * 6 + [1] * 6
    assert all(r["status"] == "ok" for r in v["results"]), v["results"]
    assert [row["leg"] for row in v["rows"]] == legs
    by = {row["leg"]: row for row in v["rows"]}
    assert by["nfs41"]["baseline"] == "dataset" and by["nvme-tcp"]["baseline"] == "zvol"
    assert all(by[leg]["runs"] == 2 and by[leg]["iops"] for leg in legs)
    # the same fio answer on every leg (a fake): each protocol is 1.0 of its baseline
    assert {by[leg]["iops_vs_baseline"] for leg in legs if by[leg]["baseline"]} == {1.0}
    # each protocol through its own client: NFS v3 then v4.1, an iSCSI login, an NVMe
    # connect, two rounds each; everything undone
    assert [m[3] for m in hosts.mounter.mounts] == [3, 4, 4, 3]  # 4: vers=4.1
    assert len(hosts.mounter.unmounts) == 4
    assert len(hosts.initiator.logins) == 2 == len(hosts.initiator.logouts)
    assert len(hosts.nvme.connects) == 2 and hosts.nvme.disconnects == hosts.nvme.connects
    assert not [d.name for d in rig.zfs.list_datasets("tank/zds-probes")
                if d.name != "tank/zds-probes"]
    # each scratch made like that protocol's datastores
    one = {r["leg"]: r["id"] for r in v["results"]}
    for leg, key, value in (("nfs3", "recordsize", "65536"), ("iscsi", "volblocksize",
                                                               "16384")):
        res = client.get(f"/api/v1/probes/results/{one[leg]}").json()
        assert res["settings"]["scratch"][key] == value, res["settings"]
        assert res["settings"]["comparison"]["leg"] == leg
        assert res["target"]["datastore"] == f"compare-{cid}"
    png = client.get(f"/api/v1/probes/comparisons/{cid}/plot", params={"format": "png"})
    assert png.status_code == 200 and png.content.startswith(b"\x89PNG")
    page = client.get(f"/api/v1/probes/comparisons/{cid}/report")
    assert page.status_code == 200 and "nvme-tcp" in page.text
    assert page.text.count("<svg") >= 1 + 12  # the comparison's chart, then every run


def test_legs_can_be_chosen(client: TestClient, rig: Rig) -> None:
    hosts = Hosts(rig)
    job = _compare(client, pool="tank", profile="vm-mixed-4k",
                   legs=["iscsi", "nvme-tcp", "zvol"], overrides={"workers": "1,2"})
    v = client.get(f"/api/v1/probes/comparisons/{job['comparison_id']}").json()
    assert [r["leg"] for r in v["results"]] == ["iscsi", "nvme-tcp", "zvol"]
    assert hosts.mounter.mounts == []


@pytest.mark.parametrize(("body", "status", "code"), [
    ({"pool": "tank", "profile": "rtt"}, 422, "invalid_input"),  # not a fio profile
    ({"pool": "tank", "profile": "bst", "legs": ["smb"]}, 422, "invalid_input"),
    ({"pool": "tank", "profile": "bst", "rounds": 11}, 422, "invalid_input"),
    ({"pool": "nope", "profile": "bst"}, 404, "not_found"),
    ({"pool": "tank", "profile": "bst", "overrides": {"size": "200g"}}, 409,
     "insufficient_space"),
])
def test_bad_comparisons_are_refused_before_anything_runs(
        client: TestClient, rig: Rig, body: dict[str, Any], status: int, code: str) -> None:
    hosts = Hosts(rig)
    r = client.post("/api/v1/probes/comparisons", json=body)
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code
    assert hosts.fio.jobs == []


def test_an_unknown_comparison_is_404(client: TestClient, rig: Rig) -> None:
    Hosts(rig)
    for path in ("", "/plot", "/report"):
        r = client.get(f"/api/v1/probes/comparisons/0123456789ab{path}")
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


def test_the_cli_runs_a_comparison_and_prints_its_table(
        rig: Rig, admin_token: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from api.app import create_app
    from api.cli import Wiring, main
    from api.cli.common import Client

    Hosts(rig)
    http = TestClient(create_app(rig.engine, start=False),
                      base_url="http://testserver/api/v1")
    http.headers["Authorization"] = f"Bearer {admin_token}"

    class TestClientCli(Client):
        def __init__(self, args: argparse.Namespace) -> None:
            self.http = http

    wiring = Wiring(client=TestClientCli)
    png, page = tmp_path / "c.png", tmp_path / "c.html"
    assert main(["probe", "protocols", "vm-mixed-4k", "--pool", "tank", "--leg", "zvol",
                 "--leg", "iscsi", "--set", "workers=1,2", "--wait", "60",
                 "--plot", str(png), "--report", str(page)], wiring) == 0
    out = capsys.readouterr().out
    assert "on pool tank, 1 round(s)" in out and "CPU US/IO" in out
    assert [line.split()[0] for line in out.splitlines()[2:]] == ["zvol", "iscsi"]
    assert png.read_bytes().startswith(b"\x89PNG") and "<svg" in page.read_text()
    cid = out.split()[1].rstrip(":")
    assert main(["--json", "probe", "comparison", cid], wiring) == 0
    assert [r["leg"] for r in json.loads(capsys.readouterr().out)["rows"]] == ["zvol",
                                                                              "iscsi"]
