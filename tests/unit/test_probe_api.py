"""/api/v1/probes on the fake engine rig: jobs, scratch, nfs/iscsi self-attach, results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from appliance.host.factory import ProbeHosts
from appliance.host.fakes.probes import FakeDevFs, FakeInitiator, FakeMounter
from appliance.host.fakes.zfs import GiB
from appliance.host.fio import FakeFio
from appliance.probes.service import ProbeService, build
from appliance.transports.nfs import PROBE_EXPORT_IDS
from tests.unit.conftest import Rig, count_version_asks, make_rig

FIX = Path(__file__).parent / "fixtures"
ESX = "iqn.1998-01.com.vmware:esxi01-4f2a"


class Probe:
    def __init__(self, rig: Rig, tmp_path: Path, with_devfs: bool = False) -> None:
        logs = {p.name: p.read_text() for p in (FIX / "fio" / "vm-mixed-4k-logs").iterdir()}
        self.fio = FakeFio(json_text=(FIX / "fio" / "vm-mixed-4k.json").read_text(),
                           logs=logs)
        self.mounter = FakeMounter()
        self.events: list[str] = []
        self.initiator = FakeInitiator(self.events)
        seen: list[Any] = []
        self.seen_during_run = seen
        self.devfs = FakeDevFs(self.events) if with_devfs else None
        self.service: ProbeService = build(rig.engine.ctx, ProbeHosts(
            fio=self.fio, mounter=self.mounter, initiator=self.initiator, devfs=self.devfs),
            rig.engine.system.version)
        rig.engine.probes = self.service


@pytest.fixture
def probe(rig: Rig, tmp_path: Path) -> Probe:
    return Probe(rig, tmp_path)


def _nfs(client: TestClient, name: str = "ds1") -> None:
    r = client.put(f"/api/v1/datastores/{name}", json={
        "protocol": "nfs3", "size": "10G",
        "nfs": {"clients": [{"match": "192.0.2.0/24", "access": "rw"}]}})
    assert r.status_code == 201, r.text


def _iscsi(client: TestClient, name: str = "lun1") -> None:
    r = client.put(f"/api/v1/datastores/{name}", json={
        "protocol": "iscsi", "size": "10G", "iscsi": {"initiators": [ESX]}})
    assert r.status_code == 201, r.text


def _run(client: TestClient, **body: Any) -> dict[str, Any]:
    r = client.post("/api/v1/probes", params={"wait": 30}, json=body)
    assert r.status_code == 202, r.text
    return dict(r.json())


def test_profiles_endpoint_lists_the_catalogue(client: TestClient, probe: Probe) -> None:
    r = client.get("/api/v1/probes/profiles")
    assert r.status_code == 200
    by = {p["name"]: p for p in r.json()}
    assert len(by) == 19 and "vm-mixed-4k" in by and "net-throughput" in by
    assert by["randread-4k-qd32"]["published"][0]["value"] == 52000


def test_local_probe_runs_in_a_scratch_dataset_and_cleans_up(
        client: TestClient, rig: Rig, probe: Probe) -> None:
    _nfs(client)
    job = _run(client, profile="vm-mixed-4k", datastore="ds1",
               overrides={"workers": "1,2", "runtime": 3})
    assert job["state"] == "succeeded", job
    rid = job["result_id"]
    assert job["result"]["result_id"] == rid and job["kind"] == "probe"
    jobfile, _workdir = probe.fio.jobs[0]
    assert f"directory=/tank/zds-probes/ds1-{rid}\n" in jobfile
    assert rig.zfs.get_dataset(f"tank/zds-probes/ds1-{rid}") is None  # cleaned up
    r = client.get(f"/api/v1/probes/results/{rid}")
    assert r.status_code == 200
    res = r.json()
    assert res["status"] == "ok" and res["target"]["kind"] == "local"
    assert res["settings"]["zfs"]["recordsize"] == "65536"
    assert res["settings"]["scratch"]["recordsize"] == "65536"  # copied from the datastore
    assert res["settings"]["zds_version"]
    assert len(res["steps"][1]["series"]) == 3
    assert res["summary"]["iops"] > 0 and res["published"] == []
    listed = client.get("/api/v1/probes/results", params={"datastore": "ds1"}).json()
    assert [x["id"] for x in listed] == [rid] and listed[0]["steps"][0]["series"] == []


def test_probes_record_the_versions_without_asking_the_tools_each_run(
        client: TestClient, rig: Rig, probe: Probe) -> None:
    """Issue 26: each probe asked zfs, ganesha and targetcli for their versions (about
    5 s a probe under emulation); they come from the system service's memo now."""
    asked = count_version_asks(rig)
    _nfs(client)
    for _ in range(3):
        job = _run(client, profile="randread-4k-qd32", datastore="ds1",
                   overrides={"runtime": 1})
        res = client.get(f"/api/v1/probes/results/{job['result_id']}").json()
        stack = client.get("/api/v1/system/version").json()
        assert res["settings"]["versions"] == {k: v for k, v in stack.items() if k != "zds"}
    assert len(asked) == 1


def test_nfs_target_exports_the_scratch_to_loopback_and_mounts_it(
        client: TestClient, rig: Rig, probe: Probe) -> None:
    _nfs(client)
    job = _run(client, profile="bst", datastore="ds1", target="nfs")
    assert job["state"] in ("succeeded", "failed"), job  # the fixture has no 'bst' group
    rid = job["result_id"]
    ((server, path, mnt, version),) = probe.mounter.mounts
    assert (server, version) == ("127.0.0.1", 3)
    assert path == f"/tank/zds-probes/ds1-{rid}" and mnt.endswith(rid)
    assert f"directory={mnt}\n" in probe.fio.jobs[0][0]
    assert probe.mounter.unmounts == [mnt]
    adds = [c for c in rig.ganesha.calls if c[0] == "AddExport"]
    assert adds[-1][1] in PROBE_EXPORT_IDS
    assert all(e.export_id not in PROBE_EXPORT_IDS for e in rig.ganesha.list_exports())
    res = client.get(f"/api/v1/probes/results/{rid}").json()
    assert res["target"]["kind"] == "nfs" and res["target"]["export_path"] == path


def test_iscsi_target_logs_in_to_a_probe_lun(client: TestClient, rig: Rig,
                                             probe: Probe) -> None:
    _iscsi(client)
    job = _run(client, profile="randread-4k-qd32", datastore="lun1", target="iscsi")
    rid = job["result_id"]
    assert probe.initiator.logins == [f"iqn.2026-11.io.zds.probe:{rid}"]
    assert probe.initiator.logouts == probe.initiator.logins
    assert "filename=/dev/sdz\n" in probe.fio.jobs[0][0]
    assert all(not t.spec.iqn.startswith("iqn.2026-11.io.zds.probe")
               for t in rig.lio.list_targets())
    assert rig.zfs.get_dataset(f"tank/zds-probes/lun1-{rid}") is None


@pytest.mark.parametrize(("body", "status", "code"), [
    ({"profile": "nope", "datastore": "ds1"}, 422, "invalid_input"),  # the schema's enum
    ({"profile": "bst", "datastore": "missing"}, 404, "not_found"),
    ({"profile": "bst", "datastore": "ds1", "overrides": {"size": "lots"}}, 422,
     "invalid_input"),
    # the target the datastore's protocol allows is its state: 409
    ({"profile": "bst", "datastore": "ds1", "target": "iscsi"}, 409, "conflict"),
    ({"profile": "bst", "datastore": "ds1", "overrides": {"size": "200g"}}, 409,
     "insufficient_space"),
])
def test_bad_requests_are_refused_before_anything_runs(
        client: TestClient, rig: Rig, probe: Probe, body: dict[str, Any], status: int,
        code: str) -> None:
    _nfs(client)
    r = client.post("/api/v1/probes", json=body)
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code
    assert probe.fio.jobs == [] and client.get("/api/v1/probes/results").json() == []


def test_file_set_profiles_need_a_way_to_make_a_file_system_on_a_zvol(
        client: TestClient, probe: Probe) -> None:
    _iscsi(client)
    r = client.post("/api/v1/probes", json={"profile": "varmail", "datastore": "lun1"})
    assert r.status_code == 409 and "needs a file system" in r.json()["error"]["message"]


@pytest.mark.parametrize("target", ["local", "iscsi"])
def test_file_set_profile_on_a_zvol_runs_in_an_ext4_made_on_the_scratch_device(
        client: TestClient, rig: Rig, tmp_path: Path, target: str) -> None:
    probe = Probe(rig, tmp_path, with_devfs=True)
    _iscsi(client)
    job = _run(client, profile="varmail", datastore="lun1", target=target,
               overrides={"files": 50, "threads": 2, "runtime": 2})
    rid = job["result_id"]
    device = "/dev/sdz" if target == "iscsi" else rig.zfs.zvol_device(
        f"tank/zds-probes/lun1-{rid}")
    mnt = f"/run/zds/probes/fs-{rid}"
    assert probe.devfs is not None and probe.devfs.made == [(device, mnt)]
    assert f"directory={mnt}\n" in probe.fio.jobs[0][0]
    assert probe.devfs.unmounted == [mnt]
    if target == "iscsi":  # unmounted before the logout, made after the login
        assert probe.events == ["login", f"mount {device}", f"unmount {mnt}", "logout"]
        assert probe.initiator.logouts == probe.initiator.logins
    res = client.get(f"/api/v1/probes/results/{rid}").json()
    assert res["target"]["fs"] == "ext4" and res["target"]["device"] == device
    assert res["target"]["kind"] == target and res["target"]["is_device"] is False
    assert rig.zfs.get_dataset(f"tank/zds-probes/lun1-{rid}") is None


def test_compare_plot_report_and_client_results(client: TestClient, probe: Probe) -> None:
    _nfs(client)
    a = _run(client, profile="vm-mixed-4k", datastore="ds1", overrides={"workers": "1,2"})
    b = _run(client, profile="vm-mixed-4k", datastore="ds1", overrides={"workers": "1,2"})
    c = client.get("/api/v1/probes/compare", params={"a": a["result_id"],
                                                     "b": b["result_id"]}).json()
    assert {d["metric"]: d["ratio"] for d in c["summary"]}["iops"] == 1.0
    svg = client.get(f"/api/v1/probes/results/{a['result_id']}/plot",
                     params={"kind": "sweep", "with": b["result_id"]})
    assert svg.status_code == 200 and svg.headers["content-type"] == "image/svg+xml"
    assert b"<svg" in svg.content
    png = client.get(f"/api/v1/probes/results/{a['result_id']}/plot",
                     params={"format": "png"})
    assert png.content.startswith(b"\x89PNG")
    page = client.get("/api/v1/probes/report",
                      params={"ids": f"{a['result_id']},{b['result_id']}"})
    assert page.status_code == 200 and page.text.count("<svg") >= 3
    # a client posts what it measured
    local = client.get(f"/api/v1/probes/results/{a['result_id']}").json()
    posted = {k: v for k, v in local.items() if k != "published"}
    posted.update(id="client1", target={"kind": "client", "datastore": "ds1",
                                        "host": "esx01", "path": "/mnt/ds1"})
    r = client.post("/api/v1/probes/results", json=posted)
    assert r.status_code == 201, r.text
    assert client.get("/api/v1/probes/results", params={"target": "client"}).json()[0][
        "id"] == "client1"
    assert client.post("/api/v1/probes/results", json=posted).status_code == 409
    posted.update(id="client2", target={"kind": "local", "datastore": "ds1"})
    assert client.post("/api/v1/probes/results", json=posted).status_code == 422


def test_a_plot_or_report_takes_at_most_20_results(client: TestClient, rig: Rig,
                                                   probe: Probe) -> None:
    """A readonly token may ask for plots and reports, each result read and drawn in the
    request: more than 20 ids is a 422 before any is read."""
    _nfs(client)
    rid = _run(client, profile="vm-mixed-4k", datastore="ds1")["result_id"]
    ro = {"Authorization": f"Bearer {rig.engine.tokens.create('viewer', 'readonly')}"}
    plot = f"/api/v1/probes/results/{rid}/plot"
    asked: list[str] = []

    class Read(Exception):
        pass

    def reading(result_id: str) -> Any:
        asked.append(result_id)
        raise Read()  # drawing 20 results costs seconds: that they get this far is enough

    probe.service.store.get = reading  # type: ignore[method-assign]
    for call in (lambda: probe.service.plot([rid] * 20, None, "svg"),
                 lambda: probe.service.report([rid] * 20)):
        with pytest.raises(Read):
            call()
    asked.clear()
    for r in (client.get(plot, params={"with": ",".join([rid] * 20)}, headers=ro),
              client.get("/api/v1/probes/report", params={"ids": ",".join([rid] * 21)},
                         headers=ro)):
        assert r.status_code == 422, r.text  # the parameter's pattern says it
        assert "comma separated: " in r.json()["error"]["message"]
    assert asked == []
    r = client.get("/api/v1/probes/report", params={"ids": ","}, headers=ro)
    assert r.status_code == 422 and "1 to 20" in r.json()["error"]["message"]
    doc = client.get("/openapi.json").json()["paths"]
    params = {p["name"]: p.get("description", "") for p in
              doc["/api/v1/probes/report"]["get"]["parameters"]}
    assert "1 to 20" in params["ids"]


def test_results_survive_an_api_restart(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, pool_size=100 * GiB)
    rig.engine.start()
    token = rig.engine.tokens.create("t", "admin")
    Probe(rig, tmp_path)
    with TestClient(create_app(rig.engine, start=False)) as c:
        c.headers["Authorization"] = f"Bearer {token}"
        _nfs(c)
        rid = _run(c, profile="vm-mixed-4k", datastore="ds1")["result_id"]
    rig.engine.close()
    rig2 = make_rig(tmp_path, pool_size=100 * GiB)  # same state dir, new engine + app
    rig2.engine.start()
    with TestClient(create_app(rig2.engine, start=False)) as c:
        c.headers["Authorization"] = f"Bearer {token}"
        r = c.get(f"/api/v1/probes/results/{rid}")
        assert r.status_code == 200 and r.json()["profile"] == "vm-mixed-4k"
    rig2.engine.close()


def test_cancel_kills_fio_saves_a_cancelled_result_and_cleans_up(
        client: TestClient, rig: Rig, probe: Probe) -> None:
    import time

    _nfs(client)
    probe.fio.block = True
    r = client.post("/api/v1/probes", json={"profile": "vm-mixed-4k", "datastore": "ds1"})
    assert r.status_code == 202
    rid, job_id = r.json()["result_id"], r.json()["id"]
    for _ in range(300):
        if probe.fio.runs:
            break
        time.sleep(0.01)
    assert client.get("/api/v1/probes/running").json() == {"ds1": rid}
    # a second probe on the same datastore is refused while this one runs
    again = client.post("/api/v1/probes", json={"profile": "bst", "datastore": "ds1"})
    assert again.status_code == 409
    assert client.post(f"/api/v1/probes/{rid}/cancel").status_code == 200
    job = client.get(f"/api/v1/jobs/{job_id}", params={"wait": 10}).json()
    assert job["state"] == "cancelled"
    assert probe.fio.runs[0].cancels == 1
    assert client.get(f"/api/v1/probes/results/{rid}").json()["status"] == "cancelled"
    assert rig.zfs.get_dataset(f"tank/zds-probes/ds1-{rid}") is None
    assert client.get("/api/v1/probes/running").json() == {}
    assert client.post(f"/api/v1/probes/{rid}/cancel").status_code == 404


def test_engine_shutdown_interrupts_a_running_probe(client: TestClient, rig: Rig,
                                                    probe: Probe) -> None:
    """Stopping the API kills the probe's fio; its result says interrupted (failed), as
    its job does, not cancelled: nobody cancelled it."""
    import time

    _nfs(client)
    probe.fio.block = True
    rid = client.post("/api/v1/probes", json={"profile": "bst", "datastore": "ds1"}
                      ).json()["result_id"]
    for _ in range(300):
        if probe.fio.runs:
            break
        time.sleep(0.01)
    rig.engine.jobs.shutdown()  # what the API does when it stops
    for _ in range(300):
        if probe.fio.runs[0].cancels:
            break
        time.sleep(0.01)
    assert probe.fio.runs[0].cancels == 1
    for _ in range(300):
        if not probe.service.registry.running():
            break
        time.sleep(0.01)
    result = probe.service.get(rid)
    assert result.status == "failed" and (result.error or "").startswith("interrupted"), result


def test_an_engine_without_probe_tools_refuses_probes_and_starts_no_fio(
        client: TestClient, rig: Rig) -> None:
    """HostAdapters.probes None (a rig made by hand): a probe fails as unavailable, where
    a real fio used to be started behind the fakes' back."""
    rig.engine.probes = build(rig.engine.ctx, None, rig.engine.system.version)
    _nfs(client)
    job = _run(client, profile="randread-4k-qd32", datastore="ds1")
    assert job["state"] == "failed", job
    assert "probes are not set up here" in job["error"]["message"], job
    res = client.get(f"/api/v1/probes/results/{job['result_id']}").json()
    assert res["status"] == "failed" and "not set up" in res["error"]
    assert rig.zfs.get_dataset(f"tank/zds-probes/ds1-{job['result_id']}") is None
