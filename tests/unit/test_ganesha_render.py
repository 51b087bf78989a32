"""Export block rendering and validation: golden output and hostile input."""

from __future__ import annotations

import pytest

from appliance.errors import InvalidInput
from appliance.host.ganesha_config import (
    ClientRule,
    ExportSpec,
    check_client,
    check_spec,
    render_export_block,
)

GOLDEN_V3 = """\
# Managed by ZDS: export 101. Do not edit; the API rewrites this file.
EXPORT {
    Export_Id = 101;
    Path = "/tank/ds1";
    Pseudo = "/tank/ds1";
    Protocols = 3;
    Transports = TCP;
    Access_Type = None;
    Squash = No_Root_Squash;
    SecType = sys;
    FSAL {
        Name = VFS;
    }
    CLIENT {
        Clients = 192.0.2.0/24, esx1.example.com;
        Access_Type = RW;
    }
    CLIENT {
        Clients = 2001:db8::/32, 198.51.100.7;
        Access_Type = RO;
    }
}
"""

GOLDEN_V4 = """\
# Managed by ZDS: export 65535. Do not edit; the API rewrites this file.
EXPORT {
    Export_Id = 65535;
    Path = "/tank/vm_store-2.a:b+c";
    Pseudo = "/tank/vm_store-2.a:b+c";
    Protocols = 4;
    Transports = TCP;
    Access_Type = None;
    Squash = Root_Squash;
    SecType = krb5p;
    Delegations = None;
    FSAL {
        Name = VFS;
    }
}
"""


def spec(**kw: object) -> ExportSpec:
    base: dict[str, object] = {
        "export_id": 101,
        "path": "/tank/ds1",
        "pseudo": "/tank/ds1",
        "protocols": (3,),
        "clients": (ClientRule(("192.0.2.0/24", "esx1.example.com"), "RW"),),
    }
    base.update(kw)
    return ExportSpec(**base)  # type: ignore[arg-type]


def test_golden_nfs3_block() -> None:
    s = spec(clients=(
        ClientRule(("192.0.2.0/24", "ESX1.example.com"), "RW"),
        ClientRule(("2001:db8:0:0::/32", "198.51.100.7"), "RO"),
    ))
    assert render_export_block(s) == GOLDEN_V3


def test_golden_nfs4_block_without_clients() -> None:
    s = spec(export_id=65535, path="/tank/vm_store-2.a:b+c", pseudo="/tank/vm_store-2.a:b+c",
             protocols=(4,), clients=(), squash="Root_Squash", sec="krb5p")
    assert render_export_block(s) == GOLDEN_V4


def test_clients_are_canonicalised() -> None:
    s = check_spec(spec(clients=(ClientRule(("10.1.2.3/16", "FD00:0::1", "Host-A"), "RO"),)))
    assert s.clients == (ClientRule(("10.1.0.0/16", "fd00::1", "host-a"), "RO"),)


@pytest.mark.parametrize("client", ["*", "10.0.0.1", "10.0.0.0/8", "::1", "fd00::/8",
                                    "a.b-c.example", "x" * 63])
def test_good_clients(client: str) -> None:
    assert check_client(client)


HOSTILE_TEXT = [
    "", " ", "a b", 'a"b', "a'b", "a;b", "a{b", "a}b", "a#b", "a$b", "a\nb", "a\rb", "a\tb",
    "a\\b", "a,b", "a=b", "a(b)", "a\x00b", "h\u00e9", "\u0430.example", "*.example.com",
    "@netgroup", "10.0.0.1 ", " 10.0.0.1", "10.0.0.256", "10.0.0.0/33", "-host", "host-",
    "a..b", "x" * 64, "1.2.3", "$(reboot)", "`id`", "*; Access_Type = RW",
    "127.0.0.1;}EXPORT{Path=/", "${HOME}", "host\n", "10.0.0.1\n", "10.0.0.0/8\n", "*\n",
    "fe80::1%eth0", "fe80::1%a;b}", "fe80::1%a b",
]


@pytest.mark.parametrize("client", HOSTILE_TEXT)
def test_hostile_clients_refused(client: str) -> None:
    with pytest.raises(InvalidInput):
        render_export_block(spec(clients=(ClientRule((client,), "RW"),)))


HOSTILE_PATHS = [
    "", "relative/path", "/", "/tank//ds", "/tank/ds/", "/tank/../etc", "/tank/./ds",
    '/tank/"ds', "/tank/ds;", "/tank/{ds}", "/tank/ds#x", "/tank/$ds", "/tank/d s",
    "/tank/ds\n", "/tank/ds\nEXPORT{", "/tank/d\u00e9", "/tank/d\\s", "/tank/ds,x",
    "/tank/ds=x", "/tank/ds'", "/tank/*", "/tank/ds\x00", "/" + "a" * 1100, "/tank/~x",
    '/tank/ds";}EXPORT{Path="/',
]


@pytest.mark.parametrize("path", HOSTILE_PATHS)
def test_hostile_paths_refused(path: str) -> None:
    with pytest.raises(InvalidInput):
        render_export_block(spec(path=path))
    with pytest.raises(InvalidInput):
        render_export_block(spec(pseudo=path))


@pytest.mark.parametrize("kw", [
    {"export_id": 0}, {"export_id": 99}, {"export_id": 65536}, {"export_id": -1},
    {"export_id": True}, {"export_id": "101"},
    {"protocols": (3, 4)}, {"protocols": ()}, {"protocols": (2,)}, {"protocols": (4, 3)},
    {"squash": "no_root_squash; Access_Type = RW"}, {"squash": "None"},
    {"sec": "sys;"}, {"sec": "SYS"},
    {"clients": (ClientRule(("10.0.0.1",), "RW"), ClientRule(("10.0.0.1",), "RO"))},
    {"clients": (ClientRule((), "RW"),)},
    {"clients": (ClientRule(("10.0.0.1",), "None"),)},  # type: ignore[arg-type]
])
def test_bad_fields_refused(kw: dict[str, object]) -> None:
    with pytest.raises(InvalidInput):
        render_export_block(spec(**kw))


def test_every_rendered_line_is_plain_ascii_without_breakouts() -> None:
    text = render_export_block(spec())
    assert text.isascii()
    body = [ln for ln in text.splitlines() if not ln.startswith("#")]
    assert text.count("{") == text.count("}") == 3
    assert all("#" not in ln and "$" not in ln for ln in body)
