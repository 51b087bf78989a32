"""Validation: what users send must never reach a command line or config unchecked."""

from __future__ import annotations

import pytest

from appliance import validate
from appliance.errors import InvalidInput

HOSTILE = [
    "", " ", "a b", "x;rm -rf /", "$(reboot)", "`id`", "a\nb", "a\"b", "a'b", "a}b{",
    "../etc", "a/b", "a@b", "-rf", "a\x00b", "ä", "A" * 200, "name#comment", "a|b", "*",
]


@pytest.mark.parametrize("bad", HOSTILE)
def test_resource_name_rejects_hostile(bad: str) -> None:
    with pytest.raises(InvalidInput):
        validate.resource_name(bad)


@pytest.mark.parametrize("good", ["vmfs01", "a", "ds-1.prod2", "0abc"])
def test_resource_name_accepts(good: str) -> None:
    assert validate.resource_name(good) == good


@pytest.mark.parametrize("bad", ["Upper", "-a", "a-", "a..b", "x" * 64, "a_b"])
def test_resource_name_rejects_edges(bad: str) -> None:
    with pytest.raises(InvalidInput):
        validate.resource_name(bad)


@pytest.mark.parametrize("bad", [*HOSTILE, "mirror", "raidz1", "c0t0", "1pool", "log",
                                  "spare", "a:b"])
def test_pool_name_rejects(bad: str) -> None:
    with pytest.raises(InvalidInput):
        validate.pool_name(bad)


def test_pool_name_accepts() -> None:
    assert validate.pool_name("tank") == "tank"
    assert validate.pool_name("Tank_2.a-b") == "Tank_2.a-b"


@pytest.mark.parametrize("good,norm", [
    ("iqn.2026-11.org.example:host1", "iqn.2026-11.org.example:host1"),
    ("IQN.1998-01.COM.VMware:esxi01-4f2a", "iqn.1998-01.com.vmware:esxi01-4f2a"),
    ("iqn.1993-08.org.debian:01:abcdef", "iqn.1993-08.org.debian:01:abcdef"),
    ("eui.02004567a425678d", "eui.02004567a425678d"),
    ("naa.52004567ba64678d", "naa.52004567ba64678d"),
])
def test_iqn_accepts_and_normalises(good: str, norm: str) -> None:
    assert validate.iqn(good) == norm


@pytest.mark.parametrize("bad", [
    *HOSTILE, "iqn.2026-11.test:host1",  # one label: rtslib rejects it
    "iqn.2026-13.org.example:x", "iqn.26-11.org.example:x", "iqn.2026-11.org.example:a b",
    "iqn.2026-11.org.example:a;b", "iqn.2026-11..org:x", "eui.123", "naa.xyz",
    "iqn.2026-11.org.example:" + "a" * 220,
])
def test_iqn_rejects(bad: str) -> None:
    with pytest.raises(InvalidInput):
        validate.iqn(bad)


@pytest.mark.parametrize("good,norm", [
    ("192.0.2.10", "192.0.2.10"), ("192.0.2.7/24", "192.0.2.0/24"),
    ("2001:db8::/64", "2001:db8::/64"), ("esxi01.example.org", "esxi01.example.org"),
    ("*", "*"), ("ESXi01", "esxi01"),
])
def test_nfs_client_accepts(good: str, norm: str) -> None:
    assert validate.nfs_client(good) == norm


@pytest.mark.parametrize("bad", ["", "a b", "1.2.3.4/33", "host;x", "a\"b", "$(x)", "300.1.1.1",
                                 "a}b", "-host", "a,b", "10.0.0.0/8 rw"])
def test_nfs_client_rejects(bad: str) -> None:
    with pytest.raises(InvalidInput):
        validate.nfs_client(bad)


@pytest.mark.parametrize("text,size", [("100G", 100 << 30), ("1.5T", 3 << 39),
                                       ("512MiB", 512 << 20), (4096, 4096), ("64k", 65536)])
def test_parse_size(text: str | int, size: int) -> None:
    assert validate.parse_size(text) == size


@pytest.mark.parametrize("bad", ["", "-1G", "10X", "1G; reboot", 0, -5, "abc", True])
def test_parse_size_rejects(bad: str | int) -> None:
    with pytest.raises(InvalidInput):
        validate.parse_size(bad)


def test_chap_rules() -> None:
    assert validate.chap_secret("abcdefghijkl") == "abcdefghijkl"
    for bad in ["short", "has space in it!", "quote\"quote\"12", "x" * 256]:
        with pytest.raises(InvalidInput):
            validate.chap_secret(bad)
    with pytest.raises(InvalidInput):
        validate.chap_user("a b")


def test_power_of_two_and_properties() -> None:
    assert validate.power_of_two_size("128K", 4096, 1 << 20, "recordsize") == 131072
    with pytest.raises(InvalidInput):
        validate.power_of_two_size("100K", 4096, 1 << 20, "recordsize")
    with pytest.raises(InvalidInput):
        validate.power_of_two_size("2M", 4096, 1 << 20, "recordsize")
    assert validate.compression("zstd-3") == "zstd-3"
    for bad in ["zstd-99", "lz4;x", "gzip-0"]:
        with pytest.raises(InvalidInput):
            validate.compression(bad)
    with pytest.raises(InvalidInput):
        validate.sync("sometimes")


@pytest.mark.parametrize("bad", ["relative/disk", "/dev/sd a", "/dev/../etc/passwd",
                                 "/dev/$(x)", "/dev/sda;x"])
def test_device_path_rejects(bad: str) -> None:
    with pytest.raises(InvalidInput):
        validate.device_path(bad)
