"""FakeGanesha holds the same contract as the real adapter (which runs the same checks in
tests/integration/test_ganesha_adapter.py), plus its test controls."""

from __future__ import annotations

import pytest

from appliance.errors import Unavailable
from appliance.host.contract.ganesha_checks import check_contract
from appliance.host.fakes.ganesha import FakeGanesha
from appliance.host.ganesha_config import ClientRule, ExportSpec
from appliance.host.nfs_server import GaneshaHost, active_clients

RW = (ClientRule(("127.0.0.1",), "RW"),)


def test_contract_fake() -> None:
    fake = FakeGanesha()

    def missing_dir(name: str) -> str:
        fake.missing_paths.add(f"/tank/gone/{name}")
        return f"/tank/gone/{name}"

    check_contract(fake, make_dir=lambda name: f"/tank/{name}", missing_dir=missing_dir)


def test_fake_is_a_ganesha_host() -> None:
    host: GaneshaHost = FakeGanesha()
    assert host.available()


def test_down_fake_is_unavailable_everywhere() -> None:
    fake = FakeGanesha()
    fake.add_export(ExportSpec(101, "/tank/a", "/tank/a", (3,), RW))
    fake.down = True
    assert not fake.available()
    for call in (
        fake.list_exports,
        lambda: fake.add_export(ExportSpec(102, "/tank/b", "/tank/b", (3,), RW)),
        lambda: fake.update_export(ExportSpec(101, "/tank/a", "/tank/a", (3,), ())),
        lambda: fake.remove_export(101),
        lambda: fake.connected_clients(101),
    ):
        with pytest.raises(Unavailable):
            call()
    assert fake.rendered(101) is not None  # a file read, no DBus needed
    fake.down = False
    assert [e.export_id for e in fake.list_exports()] == [101]


def test_simulated_clients_and_restart() -> None:
    fake = FakeGanesha()
    lan = (ClientRule(("10.0.0.0/24",), "RW"),)
    fake.add_export(ExportSpec(101, "/tank/a", "/tank/a", (3,), lan))
    fake.set_connected(101, ["10.0.0.2", "10.0.0.1", "10.0.0.2", "192.0.2.9"])
    # as for the real one: only clients the export's rules admit count
    assert fake.connected_clients(101) == ["10.0.0.1", "10.0.0.2"]
    act = fake.activity()
    assert act.exports[101].protocols_used == {"NFSv3", "MNT"}
    assert active_clients(act, 101, ["10.0.0.1"]) == ["10.0.0.1"]
    fake.restart()
    assert fake.list_exports() == []
    assert fake.rendered(101) is not None
    assert fake.connected_clients(101) == []
    fake.add_export(ExportSpec(101, "/tank/a", "/tank/a", (3,), RW))
    fake.remove_export(101)
    assert fake.connected_clients(101) == []
    assert ("RemoveExport", 101) in fake.calls
