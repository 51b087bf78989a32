"""The Vagrant libvirt box the image build makes: `vagrant box add` takes it offline, and
its disk boots the way the box's own Vagrantfile tells vagrant-libvirt to (UEFI firmware
as a ROM on q35, two data disks with the serials first boot looks for, Vagrant's key by
fw_cfg), after which Vagrant's SSH login (root, Vagrant's insecure key) works and the
appliance has made its pool.

`vagrant up` itself cannot run here: vagrant-libvirt needs a libvirt NAT network (a bridge
and dnsmasq on the host) for its management network, which this machine must not get. So
the Vagrantfile's provider settings are read with a stand-in for Vagrant's configuration
object and handed to QEMU directly, with user networking (restrict=on, 127.0.0.1 forwards).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from images import vagrant
from tests.e2e.conftest import built_image

pytestmark = [
    pytest.mark.e2e,
    # A second appliance boot from the box (about 10 minutes under TCG) on top of CI's
    # budget; its boot has not passed yet (issue 13 stays open). Opt-in: ZDS_E2E_VAGRANT=1.
    pytest.mark.skipif(os.environ.get("ZDS_E2E_VAGRANT") != "1",
                       reason="opt-in (a second boot under TCG): ZDS_E2E_VAGRANT=1"),
]

BOOT_TIMEOUT = float(os.environ.get("ZDS_E2E_BOOT_TIMEOUT", "900"))
VAGRANT_GEM = "Gem::Specification.find_by_name('vagrant').gem_dir"
# Vagrant's configuration object, recorded: every setting the Vagrantfile makes, as JSON
RECORDER = """
require "json"
require "pathname"
class Recorder
  def initialize(name, log) = (@name = name; @log = log)
  def method_missing(meth, *args, **kw, &blk)
    @log << [@name.to_s, meth.to_s, args.map(&:to_s), kw.to_h { |k, v| [k.to_s, v.to_s] }]
    child = Recorder.new(meth == :provider ? args.first : @name, @log)
    blk&.call(child, Recorder.new(:override, @log))
    child
  end
  def respond_to_missing?(*) = true
end
module Vagrant
  LOG = []
  def self.configure(_version) = yield(Recorder.new(:config, LOG))
  def self.source_root = Pathname.new(VAGRANT_GEM)
end
load ARGV.fetch(0)
puts JSON.generate(Vagrant::LOG)
""".replace("VAGRANT_GEM", VAGRANT_GEM)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def added_box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    assert shutil.which("vagrant"), "vagrant is not installed (scripts/setup-host.sh)"
    box = built_image() / vagrant.BOX_FILE
    assert box.is_file(), f"the image build made no {box.name}"
    home = tmp_path_factory.mktemp("vagrant-home")
    env = {**os.environ, "VAGRANT_HOME": str(home), "VAGRANT_CHECKPOINT_DISABLE": "1"}
    t0 = time.monotonic()
    p = subprocess.run(["vagrant", "box", "add", "--name", "zds/appliance", str(box)],
                       env=env, capture_output=True, text=True, timeout=600, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    print(f"\n[e2e] vagrant box add ({box.stat().st_size >> 20} MiB): "
          f"{time.monotonic() - t0:.1f} s")
    yield home, env
    shutil.rmtree(home, ignore_errors=True)


def test_vagrant_box_add_works_offline(added_box: tuple[Path, dict[str, str]]) -> None:
    home, env = added_box
    listing = subprocess.run(["vagrant", "box", "list"], env=env, capture_output=True,
                             text=True, check=True).stdout
    assert "zds/appliance (libvirt, 0)" in listing, listing
    d = home / "boxes" / "zds-VAGRANTSLASH-appliance" / "0" / "libvirt"
    assert json.loads((d / "metadata.json").read_text())["format"] == "qcow2"
    info = json.loads(subprocess.run(["qemu-img", "info", "--output=json", str(d / "box.img")],
                                     capture_output=True, text=True, check=True).stdout)
    assert info["format"] == "qcow2" and info["virtual-size"] > 6 * 1024**3


def settings(vagrantfile: Path) -> list[list[Any]]:
    p = subprocess.run(["ruby", "-e", RECORDER, str(vagrantfile)], capture_output=True,
                       text=True, check=False, timeout=60)
    assert p.returncode == 0, p.stderr
    return list(json.loads(p.stdout))


def test_the_box_boots_as_its_vagrantfile_says_and_vagrant_can_log_in(
        added_box: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    home, _ = added_box
    d = home / "boxes" / "zds-VAGRANTSLASH-appliance" / "0" / "libvirt"
    log = settings(d / "Vagrantfile")

    def one(scope: str, name: str) -> str:
        (value,) = [e[2][0] for e in log if e[0] == scope and e[1] == name]
        return str(value)

    assert one("config", "username=") == "root"
    loader, machine = one("libvirt", "loader="), one("libvirt", "machine_type=")
    disks = [e[3] for e in log if e[0] == "libvirt" and e[1] == "storage"]
    qemuargs = [e[3]["value"] for e in log if e[0] == "libvirt" and e[1] == "qemuargs"]
    assert [k["serial"] for k in disks] == ["zdsdata0", "zdsdata1"]
    assert qemuargs[0] == "-fw_cfg" and "ssh-authorized-keys,string=ssh-" in qemuargs[1]

    # what vagrant-libvirt's domain comes down to (loader without nvram = a ROM: -bios)
    overlay = tmp_path / "system.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b",
                    str(d / "box.img"), str(overlay)], check=True)
    ssh_port, api_port = free_port(), free_port()
    serial = tmp_path / "serial.log"
    argv = ["qemu-system-x86_64", "-name", "zds-vagrant-box", "-machine", machine,
            "-accel", "tcg,thread=multi", "-cpu", "max",
            "-smp", one("libvirt", "cpus="), "-m", one("libvirt", "memory="),
            "-bios", loader, "-display", "none", "-serial", f"file:{serial}",
            "-drive", f"if=none,id=sys,file={overlay},format=qcow2,cache=unsafe",
            "-device", "virtio-blk-pci,drive=sys,bootindex=0",
            "-netdev", f"user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:{ssh_port}-:22,"
                       f"hostfwd=tcp:127.0.0.1:{api_port}-:8443",
            "-device", "virtio-net-pci,netdev=n0"]
    for i, disk in enumerate(disks):
        f = tmp_path / f"data{i}.raw"
        with f.open("wb") as fh:
            fh.truncate(int(disk["size"].rstrip("G")) << 30)
        argv += ["-drive", f"if=none,id=d{i},file={f},format=raw,cache=unsafe",
                 "-device", f"virtio-blk-pci,drive=d{i},serial={disk['serial']}"]
    argv += qemuargs
    key = tmp_path / "vagrant-insecure"
    gem = subprocess.run(["ruby", "-e", f"puts {VAGRANT_GEM}"], capture_output=True,
                         text=True, check=True).stdout.strip()
    shutil.copy(Path(gem) / "keys" / "vagrant", key)
    key.chmod(0o600)
    ssh = ["ssh", "-i", str(key), "-p", str(ssh_port), "-o", "BatchMode=yes",
           "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
           "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=20", "root@127.0.0.1"]
    t0 = time.monotonic()
    qemu = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        login = None
        while time.monotonic() - t0 < BOOT_TIMEOUT:
            assert qemu.poll() is None, \
                f"QEMU exited: {qemu.stdout.read().decode() if qemu.stdout else ''}"
            login = subprocess.run([*ssh, "id -un"], capture_output=True, text=True,
                                   timeout=60, check=False)
            if login.returncode == 0:
                break
            time.sleep(5)
        t_ssh = time.monotonic() - t0
        assert login is not None and login.stdout.strip() == "root", \
            f"no SSH login as root with Vagrant's key: {login and login.stderr}\n" \
            + "\n".join(serial.read_text(errors="replace").splitlines()[-30:])
        health = ""
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        while time.monotonic() - t0 < BOOT_TIMEOUT:
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{api_port}/api/v1/system/health",
                                            timeout=10, context=ctx) as r:
                    health = r.read().decode()
                    break
            except OSError:
                time.sleep(3)
        pool = subprocess.run([*ssh, "zpool status -P tank"], capture_output=True,
                              text=True, timeout=60, check=False).stdout
        print(f"\n[e2e] Vagrant box: SSH as root after {t_ssh:.0f} s, healthy API after "
              f"{time.monotonic() - t0:.0f} s")
        assert '"status":"ok"' in health.replace(" ", ""), health
        assert "mirror-0" in pool and "/dev/disk/by-id/virtio-zdsdata0" in pool \
            and "/dev/disk/by-id/virtio-zdsdata1" in pool, pool
    finally:
        qemu.terminate()
        try:
            qemu.wait(30)
        except subprocess.TimeoutExpired:
            qemu.kill()
            qemu.wait()
