"""Contract checks for :class:`appliance.host.ganesha.GaneshaHost` (real ``Ganesha`` and
``FakeGanesha``): tests/unit/test_ganesha_fake.py runs them on the fake,
tests/integration/test_ganesha_adapter.py on the real adapter against a live nfs-ganesha.

``make_dir(name)`` returns an absolute path that exists for the host under test;
``missing_dir(name)`` returns one that does not. Export ids 900.. are used and removed.
"""

from __future__ import annotations

from collections.abc import Callable

from appliance.errors import Conflict, InvalidInput, NotFound
from appliance.host.contract import expect
from appliance.host.ganesha import ClientRule, ExportSpec, GaneshaHost, render_export_block

RW_LOCAL = (ClientRule(("127.0.0.1",), "RW"),)
RO_LOCAL = (ClientRule(("127.0.0.1",), "RO"),)


def _spec(export_id: int, path: str, clients: tuple[ClientRule, ...] = RW_LOCAL,
          pseudo: str | None = None) -> ExportSpec:
    return ExportSpec(export_id, path, pseudo or path, (3,), clients)


def _ours(host: GaneshaHost) -> dict[int, tuple[str, str]]:
    return {e.export_id: (e.path, e.pseudo) for e in host.list_exports() if e.export_id >= 900}


def check_contract(
    host: GaneshaHost, make_dir: Callable[[str], str], missing_dir: Callable[[str], str]
) -> None:
    assert host.available()
    assert _ours(host) == {}
    a_path, b_path, c_path = make_dir("contract-a"), make_dir("contract-b"), make_dir("contract-c")

    # add, list, rendered
    a = _spec(900, a_path)
    host.add_export(a)
    assert _ours(host) == {900: (a_path, a_path)}
    assert host.rendered(900) == render_export_block(a)

    # add is idempotent, and with other clients it updates in place
    host.add_export(a)
    a2 = _spec(900, a_path, (ClientRule(("127.0.0.1", "192.0.2.0/24"), "RW"),))
    host.add_export(a2)
    assert _ours(host) == {900: (a_path, a_path)}
    assert host.rendered(900) == render_export_block(a2)

    # a second export, then update its access
    b = _spec(901, b_path)
    host.add_export(b)
    assert _ours(host) == {900: (a_path, a_path), 901: (b_path, b_path)}
    b_ro = _spec(901, b_path, RO_LOCAL)
    host.update_export(b_ro)
    assert host.rendered(901) == render_export_block(b_ro)
    assert "Access_Type = RO;" in (host.rendered(901) or "")

    # errors, each leaving state unchanged
    expect(NotFound, host.update_export, _spec(902, c_path))
    # same path as 900 under another id
    expect(Conflict, host.add_export, _spec(902, a_path, pseudo=c_path))
    # same pseudo as 900
    expect(Conflict, host.add_export, _spec(902, c_path, pseudo=a_path))
    # an export's path never changes
    expect(Conflict, host.add_export, _spec(900, c_path))
    expect(Conflict, host.update_export, _spec(900, c_path))
    # path not there (dataset not mounted)
    expect(Conflict, host.add_export, _spec(902, missing_dir("contract-missing")))
    expect(InvalidInput, host.add_export, _spec(902, c_path + '";}EXPORT{Path="/'))
    hostile = (ClientRule(("*; Access_Type = RW",), "RO"),)
    expect(InvalidInput, host.add_export, _spec(902, c_path, hostile))
    assert host.rendered(902) is None
    assert _ours(host) == {900: (a_path, a_path), 901: (b_path, b_path)}
    assert host.rendered(900) == render_export_block(a2)
    assert host.rendered(901) == render_export_block(b_ro)

    # nothing uses a fresh export
    host.add_export(_spec(902, c_path))
    assert host.connected_clients(902) == []
    assert host.connected_clients(999) == []  # unknown id: nobody

    # remove: gone live and on disk; again and unknown ids are no error
    host.remove_export(900)
    assert _ours(host) == {901: (b_path, b_path), 902: (c_path, c_path)}
    assert host.rendered(900) is None
    host.remove_export(900)
    host.remove_export(999)
    host.remove_export(901)
    host.remove_export(902)
    assert _ours(host) == {}
    assert host.rendered(901) is None
