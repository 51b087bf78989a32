"""The Vagrant libvirt box the image build writes: its members, and that Vagrant itself
adds it offline and accepts its Vagrantfile with vagrant-libvirt's settings (the e2e suite
adds the real box and boots its disk the way the Vagrantfile says)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from images import vagrant

needs_vagrant = pytest.mark.skipif(
    shutil.which("vagrant") is None, reason="vagrant (scripts/setup-host.sh) is not installed")


def make_box(tmp_path: Path) -> Path:
    disk = tmp_path / "zds.qcow2"
    disk.write_bytes(b"QFI\xfb" + b"\0" * 4092)  # only copied, never read
    box = tmp_path / vagrant.BOX_FILE
    vagrant.write_box(box, disk, capacity_bytes=6 * 1024**3 + 130 * 1024**2)
    return box


def test_box_is_a_tar_of_metadata_vagrantfile_and_disk(tmp_path: Path) -> None:
    box = make_box(tmp_path)
    with tarfile.open(box) as tar:
        assert tar.getnames() == ["metadata.json", "Vagrantfile", "box.img"]
    m = vagrant.box_members(box)
    assert json.loads(m["metadata.json"]) == {"provider": "libvirt", "format": "qcow2",
                                              "virtual_size": 7}
    assert m["box.img"] == b"4096"
    text = m["Vagrantfile"].decode()
    for line in ('config.ssh.username = "root"', 'lv.machine_type = "q35"',
                 f'lv.loader = "{vagrant.OVMF_ROM}"', 'serial: "zdsdata0"', 'serial: "zdsdata1"',
                 "name=opt/zds/ssh-authorized-keys,string=#{insecure_key}"):
        assert line in text, line
    assert text.count('host_ip: "127.0.0.1"') == text.count("forwarded_port") == 5
    # Vagrant replaces its well-known key at the first login (issue 22 item 6)
    assert "config.ssh.insert_key = true" in text and "insert_key = false" not in text


@needs_vagrant
def test_vagrant_adds_the_box_offline_and_validates_its_vagrantfile(tmp_path: Path) -> None:
    box = make_box(tmp_path)
    env = {**os.environ, "VAGRANT_HOME": str(tmp_path / "vagrant-home"),
           "VAGRANT_CHECKPOINT_DISABLE": "1", "VAGRANT_DEFAULT_PROVIDER": "libvirt"}

    def vagrant_cmd(*args: str, cwd: Path = tmp_path) -> str:
        p = subprocess.run(["vagrant", *args], cwd=cwd, env=env, capture_output=True,
                           text=True, timeout=120, check=False)
        assert p.returncode == 0, f"vagrant {' '.join(args)}: {p.stdout}{p.stderr}"
        return p.stdout

    vagrant_cmd("box", "add", "--name", "zds/appliance", str(box))
    assert "zds/appliance (libvirt, 0)" in vagrant_cmd("box", "list")
    project = tmp_path / "project"
    project.mkdir()
    (project / "Vagrantfile").write_text(
        'Vagrant.configure("2") do |c|\n  c.vm.box = "zds/appliance"\nend\n')
    # with vagrant-libvirt installed, validate also checks the box's provider settings
    assert "validated successfully" in vagrant_cmd("validate", cwd=project)
