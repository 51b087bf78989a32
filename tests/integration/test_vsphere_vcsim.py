"""The VMware step against a real vSphere API: govmomi's vCenter simulator (vcsim).

The fixture builds vcsim once with the Go toolchain into ~/.cache/zds/go (``go install
github.com/vmware/govmomi/vcsim@v0.46.3``: about a minute; @latest panics at start),
starts it on a free 127.0.0.1 port with a user and password of its own, lays out an
inventory through pyVmomi (an NFS datastore mounted from /tank/datastores/nfs01, one
powered-on and one powered-off VM on it, and VMs on vcsim's own local datastore that
must be left alone), and stops it by PID.

vcsim cannot make VMFS datastores (no CreateVmfsDatastore) nor fail a quiesce: the
VMFS-by-NAA lookup, quiesce failures and timeouts are covered against FakeVsphere in
tests/unit/test_policies_vmware.py, which the same contract checks hold to vcsim here.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from appliance.engine import Engine
from appliance.fake_hosts import fake_hosts
from appliance.host.contract.vsphere_checks import check_vsphere
from appliance.host.vsphere import PyVmomiConnector
from appliance.settings import Settings

pytestmark = pytest.mark.integration

GO_CACHE = Path(os.environ.get("ZDS_GO_CACHE", str(Path.home() / ".cache/zds/go")))
VCSIM = GO_CACHE / "bin" / "vcsim"
VCSIM_MODULE = "github.com/vmware/govmomi/vcsim@v0.46.3"
USER, PASSWORD = "zds-test", "s3cret-vcsim"
NFS_PATH = "/tank/datastores/nfs01"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def build_vcsim() -> Path:
    if VCSIM.exists():
        return VCSIM
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not Path(go).exists():
        pytest.fail("vcsim needs the Go toolchain (go) to build; none found")
    env = {**os.environ, "GOPATH": str(GO_CACHE), "GOFLAGS": "-modcacherw"}
    subprocess.run([go, "install", VCSIM_MODULE], env=env, check=True, timeout=900,
                   capture_output=True)
    return VCSIM


@dataclass
class Vcsim:
    port: int
    workdir: Path
    proc: subprocess.Popen[bytes]


def _wait_task(task: Any) -> Any:
    while str(task.info.state) not in ("success", "error"):
        time.sleep(0.05)
    assert str(task.info.state) == "success", task.info.error
    return task.info.result


def lay_out_inventory(port: int, workdir: Path) -> None:
    """An NFS datastore from the appliance with two VMs, through the vSphere API."""
    from pyVim import connect
    from pyVmomi import vim as vim_module

    vim: Any = vim_module  # types made at run time: untyped for mypy
    smart: Any = connect.SmartConnect
    si = smart(host="127.0.0.1", port=port, user=USER, pwd=PASSWORD,
               disableSslCertValidation=True)
    content = si.RetrieveContent()
    dc = content.rootFolder.childEntity[0]
    host = content.viewManager.CreateContainerView(content.rootFolder, [vim.HostSystem],
                                                   True).view[0]
    local = workdir / "zds-nfs01"  # vcsim keeps the datastore's files here
    local.mkdir()
    host.configManager.datastoreSystem.CreateNasDatastore(vim.host.NasVolume.Specification(
        remoteHost="127.0.0.1", remotePath=NFS_PATH, localPath=str(local),
        accessMode="readWrite", type="NFS"))
    for name, on in (("web01", True), ("db01", False)):
        cfg = vim.vm.ConfigSpec(name=name, files=vim.vm.FileInfo(vmPathName="[zds-nfs01]"),
                                numCPUs=1, memoryMB=64, guestId="otherGuest")
        vm = _wait_task(dc.vmFolder.CreateVM_Task(config=cfg, pool=host.parent.resourcePool,
                                                  host=host))
        if on:
            _wait_task(vm.PowerOnVM_Task())
    disconnect: Any = connect.Disconnect
    disconnect(si)


@pytest.fixture(scope="module")
def vcsim() -> Iterator[Vcsim]:
    binary = build_vcsim()
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="zds-vcsim-"))
    log = open(workdir / "vcsim.log", "wb")  # noqa: SIM115 (open for the process's life)
    proc = subprocess.Popen([str(binary), "-l", f"127.0.0.1:{port}", "-username", USER,
                             "-password", PASSWORD], stdout=log, stderr=subprocess.STDOUT,
                            cwd=workdir)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("vcsim did not start: "
                                + (workdir / "vcsim.log").read_text()[-2000:])
                time.sleep(0.2)
        lay_out_inventory(port, workdir)
        yield Vcsim(port, workdir, proc)
    finally:
        proc.terminate()  # by its PID only
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()
        shutil.rmtree(workdir, ignore_errors=True)


def test_pyvmomi_adapter_holds_the_contract_against_vcsim(vcsim: Vcsim) -> None:
    check_vsphere(PyVmomiConnector(), "127.0.0.1", vcsim.port, USER, PASSWORD, NFS_PATH,
                  "web01", "db01", free_port())


@pytest.fixture
def api(vcsim: Vcsim, tmp_path: Path) -> Iterator[tuple[TestClient, Engine]]:
    """The API on fake ZFS/LIO/ganesha, with the real pyVmomi client."""
    hosts = fake_hosts("tank")
    adapters = hosts.adapters()
    from dataclasses import replace

    engine = Engine.create(Settings().with_state_dir(tmp_path),
                           replace(adapters, vsphere=PyVmomiConnector()))
    engine.start()
    token = engine.tokens.create("t", "admin")
    with TestClient(create_app(engine, start=False)) as client:
        client.headers["Authorization"] = f"Bearer {token}"
        yield client, engine
    engine.close()


def vc_body(vcsim: Vcsim, **kw: Any) -> dict[str, Any]:
    return {"host": "127.0.0.1", "port": vcsim.port, "user": USER, "password": PASSWORD,
            "insecure": True, **kw}


def test_a_policy_quiesces_the_running_vm_on_its_nfs_datastore(
        vcsim: Vcsim, api: tuple[TestClient, Engine]) -> None:
    client, _ = api
    r = client.put("/api/v1/datastores/nfs01", json={"protocol": "nfs3", "size": "1G"})
    assert r.status_code == 201, r.text
    r = client.put("/api/v1/vcenters/vc1", json=vc_body(vcsim))
    assert r.status_code == 201, r.text
    assert "password" not in r.json() and r.json()["password_set"] is True
    assert "s3cret" not in client.get("/api/v1/vcenters").text
    r = client.put("/api/v1/snapshot-policies/vmw", json={
        "schedule": {"every": "1h"}, "retention": {"daily": 7},
        "datastores": {"names": ["nfs01"]},
        "vmware": {"vcenter": "vc1", "quiesce": True, "timeout": 60}})
    assert r.status_code == 201, r.text
    job = client.post("/api/v1/snapshot-policies/vmw/run", params={"wait": 60}).json()
    assert job["state"] == "succeeded", job
    res = job["result"]
    vm = res["vmware"]
    assert [v["vm"] for v in vm["quiesced"]] == ["web01"], vm
    assert [v["vm"] for v in vm["powered_off"]] == ["db01"], vm
    assert vm["not_quiesced"] == [] and vm["removed"] == 1 and vm["left_behind"] == []
    assert res["consistency"] == "vm" and res["warnings"] == []
    snaps = client.get("/api/v1/datastores/nfs01/snapshots").json()
    assert [s["consistency"] for s in snaps] == ["vm"]
    # the VM snapshot is gone again
    session = PyVmomiConnector().connect("127.0.0.1", vcsim.port, USER, PASSWORD, True)
    try:
        web = next(v for v in session.vms_on([NFS_PATH], [])[NFS_PATH] if v.name == "web01")
        assert session.snapshots(web.moid) == []
    finally:
        session.close()


def test_bad_credentials_and_an_unreachable_vcenter_are_refused_and_stored_nowhere(
        vcsim: Vcsim, api: tuple[TestClient, Engine]) -> None:
    client, _ = api
    r = client.put("/api/v1/vcenters/vc1", json=vc_body(vcsim, password="wrong-one"))
    assert r.status_code == 409 and "refused the user name or password" in r.text, r.text
    r = client.put("/api/v1/vcenters/vc1", json=vc_body(vcsim, port=free_port()))
    assert r.status_code == 503 and "unreachable" in r.text, r.text
    r = client.put("/api/v1/vcenters/vc1", json=vc_body(vcsim, insecure=False))
    assert r.status_code == 409 and "does not verify" in r.text, r.text
    assert client.get("/api/v1/vcenters").json() == []


def test_a_vcenter_gone_at_run_time_fails_the_step_and_prunes_nothing(
        vcsim: Vcsim, api: tuple[TestClient, Engine]) -> None:
    client, _ = api
    client.put("/api/v1/datastores/nfs01", json={"protocol": "nfs3", "size": "1G"})
    # registered while reachable... then its address stops answering
    r = client.put("/api/v1/vcenters/vc1", json=vc_body(vcsim, port=free_port(),
                                                        verify=False))
    assert r.status_code == 201, r.text
    client.put("/api/v1/snapshot-policies/vmw", json={
        "schedule": {"every": "1h"}, "retention": {"frequent": 1},
        "datastores": {"names": ["nfs01"]}, "vmware": {"vcenter": "vc1"}})
    client.post("/api/v1/datastores/nfs01/snapshots", json={"name": "by-hand"})
    first = client.post("/api/v1/snapshot-policies/vmw/run", params={"wait": 60}).json()
    second = client.post("/api/v1/snapshot-policies/vmw/run", params={"wait": 60}).json()
    for job in (first, second):
        assert job["state"] == "succeeded", job
        assert job["result"]["vmware"]["error"] and "unreachable" in \
            job["result"]["vmware"]["error"]
        assert job["result"]["consistency"] == "crash" and job["result"]["pruned"] == {}
    names = [s["name"] for s in client.get("/api/v1/datastores/nfs01/snapshots").json()]
    assert len(names) == 3 and "by-hand" in names, "frequent=1, but nothing was pruned"
    health = client.get("/api/v1/system/health").json()
    assert health["components"]["snapshot_policies"]["ok"] is False
    assert "VMware step failed" in health["components"]["snapshot_policies"]["detail"]
