"""The Debian VM for the Ansible e2e test (images/hostvm.py): its network is QEMU user
mode with restrict=on, host forwards on 127.0.0.1 only, and one guestfwd (the mirror)."""

from __future__ import annotations

from pathlib import Path

import pytest

from images import hostvm


def test_network_is_restricted_to_loopback_forwards_and_the_mirror(tmp_path: Path) -> None:
    image = hostvm.HostImage(tmp_path / "img", "6.1.0-56-amd64")
    vm = hostvm.HostVm(image, tmp_path / "vm", "/usr/bin/python3 /x/aptmirror.py --cache /c")
    vm.ports = {"ssh": 10022, "api": 18443, "nfs": 12049, "mountd": 30048, "iscsi": 13260}
    argv = vm.argv()
    netdev = argv[argv.index("-netdev") + 1].split(",")
    assert netdev[:3] == ["user", "id=n0", "restrict=on"]
    fwds = [p for p in netdev if p.startswith("hostfwd=")]
    assert fwds == ["hostfwd=tcp:127.0.0.1:10022-:22", "hostfwd=tcp:127.0.0.1:18443-:8443",
                    "hostfwd=tcp:127.0.0.1:12049-:2049", "hostfwd=tcp:127.0.0.1:30048-:20048",
                    "hostfwd=tcp:127.0.0.1:13260-:3260"]
    (guestfwd,) = [p for p in netdev if p.startswith("guestfwd=")]
    assert guestfwd == ("guestfwd=tcp:10.0.2.100:80-cmd:/usr/bin/python3 /x/aptmirror.py "
                        "--cache /c")
    assert [a for a in argv if a.endswith(("serial=zdsdata0", "serial=zdsdata1"))]
    assert argv[argv.index("-kernel") + 1] == str(image.kernel)


def test_a_comma_in_the_mirror_command_is_refused(tmp_path: Path) -> None:
    vm = hostvm.HostVm(hostvm.HostImage(tmp_path, "k"), tmp_path, "python3 a.py --x=1,2")
    vm.ports = dict.fromkeys(hostvm.HostVm.GUEST_PORTS, 1)
    with pytest.raises(ValueError, match="comma"):
        vm.argv()
