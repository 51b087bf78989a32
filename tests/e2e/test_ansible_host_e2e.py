"""ZDS installed by Ansible on a plain Debian 12 machine, as docs/deploy.md tells a user:
ansible-playbook ansible/playbooks/host.yml over SSH from this host, then what the user
checks: the API is healthy, the default pool is a mirror of the two data disks, an NFS and
an iSCSI datastore serve data to this host, and a second run changes nothing.

The machine (images/hostvm.py) boots under QEMU/TCG with restrict=on networking; its apt
reaches only tests/e2e/aptmirror.py through a guestfwd. ZFS uses the prebuilt-module path
(zfs__prebuilt_modules_dir: the modules the image build cached for the same kernel):
compiling OpenZFS with DKMS inside an emulated machine would take hours here.

Opt-in: it takes tens of minutes under TCG (timings are printed). ZDS_E2E_HOST=1 runs it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from images import hostvm
from images.paths import REPO, cache_root, images_dir
from tests.e2e.clients import Iscsi, Nfs
from tests.e2e.conftest import built_image
from tests.e2e.rest import api_client, ok, wait_for_health

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.environ.get("ZDS_E2E_HOST") != "1",
                       reason="opt-in (tens of minutes under TCG): ZDS_E2E_HOST=1"),
]

INITIATOR = "iqn.2026-11.org.example:host1"
HOST_AS_SEEN = "10.0.2.2"
MiB = 1 << 20
timings: dict[str, float] = {}


class Deployment:
    def __init__(self, vm: hostvm.HostVm, workdir: Path, modules: Path) -> None:
        self.vm, self.workdir, self.modules = vm, workdir, modules
        self.inventory = workdir / "inventory.yml"
        key = vm.image.key
        self.inventory.write_text(json.dumps({"all": {"hosts": {"zdshost": {
            "ansible_host": "127.0.0.1", "ansible_port": vm.ports["ssh"],
            "ansible_user": "admin", "ansible_become": True,
            "ansible_ssh_private_key_file": str(key),
            "ansible_ssh_common_args": "-o StrictHostKeyChecking=no "
                                       "-o UserKnownHostsFile=/dev/null",
        }}}}, indent=2))

    def playbook(self, run: int) -> tuple[int, str, dict[str, dict[str, int]]]:
        venv = Path(sys.executable).parent
        env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible" / "ansible.cfg"),
               "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
               "ANSIBLE_HOST_KEY_CHECKING": "False",
               "PATH": f"{venv}:{os.environ.get('PATH', '')}",
               # the controller's wheelhouse goes to a cache of this test's own
               "ZDS_CACHE": str(cache_root() / "hostvm" / "controller")}
        argv = [str(venv / "ansible-playbook"), "-i", str(self.inventory),
                str(REPO / "ansible" / "playbooks" / "host.yml"),
                "-e", f"zfs__prebuilt_modules_dir={self.modules}",
                "-e", f"base__apt_mirror=http://{hostvm.MIRROR_ADDR}/debian",
                "-e", f"base__apt_security_mirror=http://{hostvm.MIRROR_ADDR}/debian-security",
                "-e", "zfs__arc_max_bytes=536870912"]
        t0 = time.monotonic()
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=4 * 3600,
                           check=False, cwd=REPO)
        timings[f"ansible_run{run}_s"] = round(time.monotonic() - t0, 1)
        out = p.stdout + p.stderr
        (self.workdir / f"ansible-run{run}.log").write_text(out)
        recap: dict[str, dict[str, int]] = {}
        for host, stats in re.findall(r"^(\S+)\s+:\s+(ok=.*)$",
                                      out.split("PLAY RECAP")[-1], re.M):
            recap[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", stats)}
        return p.returncode, out, recap

    def diagnostics(self) -> str:
        p = self.vm.ssh("sudo systemctl --failed --no-pager; sudo journalctl -b --no-pager "
                        "-p warning | tail -60", timeout=120)
        return p.stdout + p.stderr


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    if os.geteuid() != 0:
        pytest.fail("needs root (mmdebstrap)")
    workdir = tmp_path_factory.mktemp("ansible-host")
    t0 = time.monotonic()
    manifest = json.loads((built_image() / "manifest.json").read_text())
    abi, zfs = manifest["kernel_abi"], manifest["versions"]["zfs-dkms"]
    modules = images_dir() / "zfs-modules" / f"{abi}_zfs-{zfs}"
    assert list(modules.glob("zfs.ko*")), f"no cached ZFS modules in {modules}"
    image = hostvm.build(abi)
    timings["images_s"] = round(time.monotonic() - t0, 1)
    vm = hostvm.HostVm(image, workdir / "vm",
                       hostvm.mirror_command(cache_root() / "hostvm" / "mirror",
                                             workdir / "mirror.log"))
    vm.start()
    try:
        timings["boot_to_ssh_s"] = round(vm.wait_ssh(), 1)
        yield Deployment(vm, workdir, modules)
    finally:
        vm.stop()
        print(f"\n[e2e] ansible host timings: {timings} (logs in {workdir})")


state: dict[str, Any] = {}


def test_1_host_yml_installs_zds_on_a_plain_debian_machine(deployment: Deployment) -> None:
    rc, out, recap = deployment.playbook(1)
    assert rc == 0 and recap.get("zdshost", {}).get("failed") == 0, \
        f"host.yml failed ({rc}):\n{out[-6000:]}\n{deployment.diagnostics()}"
    assert recap["zdshost"]["changed"] > 20, recap  # it really installed everything
    state["installed"] = True


@pytest.fixture(scope="module")
def api(deployment: Deployment) -> Iterator[httpx.Client]:
    assert state.get("installed"), "host.yml did not install ZDS"
    token = deployment.vm.ssh("sudo cat /etc/zds/admin-token").stdout.strip()
    assert token.startswith("zds_"), token
    with api_client(f"https://127.0.0.1:{deployment.vm.ports['api']}", token) as c:
        yield c


def test_2_the_api_is_healthy_and_the_pool_is_a_mirror_of_the_data_disks(
        api: httpx.Client) -> None:
    # the playbook's last handler restarts zds-api: until it listens again, QEMU's port
    # forward resets the connection, so wait through errors, not only through 503s
    wait_for_health(api, lambda h: h["status"] == "ok")
    tank = ok(api.get("/pools/tank"))
    assert tank["health"] == "ONLINE" and tank["demo"] is False
    (mirror,) = [c for c in tank["vdevs"]["children"] if c["name"].startswith("mirror")]
    disks = sorted(c["name"] for c in mirror["children"])
    assert len(disks) == 2 and all("zdsdata" in d for d in disks), tank["vdevs"]


def test_3_an_nfs_and_an_iscsi_datastore_serve_this_host(
        api: httpx.Client, deployment: Deployment) -> None:
    ports = deployment.vm.ports
    work = deployment.workdir
    d = ok(api.put("/datastores/hostnfs", json={
        "protocol": "nfs3", "size": "2G",
        "nfs": {"clients": [{"match": HOST_AS_SEEN, "access": "rw"}]}}), 201)
    nfs = Nfs(ports["nfs"], ports["mountd"], work)
    data = os.urandom(3 * MiB + 17)
    nfs.put(d["nfs"]["path"], "hello.bin", data)
    assert nfs.get(d["nfs"]["path"], "hello.bin") == data
    lun = ok(api.put("/datastores/hostlun", json={
        "protocol": "iscsi", "size": "1G", "iscsi": {"initiators": [INITIATOR]}}), 201)
    iscsi = Iscsi(ports["iscsi"], work)
    inq = iscsi.inq(lun["iscsi"]["iqn"], INITIATOR).stdout
    assert "Vendor:LIO-ORG" in inq, inq
    blob = work / "blob.bin"
    blob.write_bytes(os.urandom(2 * MiB))
    iscsi.write(lun["iscsi"]["iqn"], INITIATOR, blob, 4 * MiB)
    assert iscsi.read(lun["iscsi"]["iqn"], INITIATOR, 4 * MiB, 2 * MiB) == blob.read_bytes()


def test_4_a_second_run_changes_nothing(deployment: Deployment) -> None:
    rc, out, recap = deployment.playbook(2)
    assert rc == 0, out[-6000:]
    changed = {h: s.get("changed") for h, s in recap.items()}
    assert changed and all(v == 0 for v in changed.values()), \
        f"second run changed {changed}:\n" + "\n".join(
            line for line in out.splitlines() if line.startswith(("changed:", "TASK [")))[-4000:]
