"""Contract checks for :class:`appliance.host.nfs_server.GaneshaHost` (real ``Ganesha``, real
``Knfsd`` and ``FakeGanesha``): tests/unit/test_ganesha_fake.py runs them on the fake,
tests/integration/test_ganesha_adapter.py on the real adapter against a live nfs-ganesha,
``python -m appliance.host.contract --knfsd`` on ``Knfsd`` inside the appliance
(tests/e2e/test_datastores_e2e.py) and tests/unit/test_knfsd.py on it with a stand-in
exportfs.

``make_dir(name)`` returns an absolute path that exists for the host under test;
``missing_dir(name)`` returns one that does not. Export ids 900.. are used and removed.
"""

from __future__ import annotations

from collections.abc import Callable

from appliance.errors import Conflict, InvalidInput, NotFound
from appliance.host.contract import expect
from appliance.host.ganesha_config import ClientRule, ExportSpec
from appliance.host.nfs_server import GaneshaHost

RW_LOCAL = (ClientRule(("127.0.0.1",), "RW"),)
RO_LOCAL = (ClientRule(("127.0.0.1",), "RO"),)


def _spec(export_id: int, path: str, clients: tuple[ClientRule, ...] = RW_LOCAL,
          pseudo: str | None = None) -> ExportSpec:
    return ExportSpec(export_id, path, pseudo or path, (3,), clients)


def _ours(host: GaneshaHost) -> dict[int, tuple[str, str]]:
    out = {}
    for e in host.list_exports():
        if e.export_id >= 900:
            shown = host.get_export(e.export_id)
            assert shown is not None and shown.path == e.path, (e, shown)
            out[e.export_id] = (e.path, shown.pseudo)
    return out


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
    assert host.rendered(900) == host.render(a)

    # add is idempotent, and with other clients it updates in place
    host.add_export(a)
    a2 = _spec(900, a_path, (ClientRule(("127.0.0.1", "192.0.2.0/24"), "RW"),))
    host.add_export(a2)
    assert _ours(host) == {900: (a_path, a_path)}
    assert host.rendered(900) == host.render(a2)

    # a second export, then update its access
    b = _spec(901, b_path)
    host.add_export(b)
    assert _ours(host) == {900: (a_path, a_path), 901: (b_path, b_path)}
    b_ro = _spec(901, b_path, RO_LOCAL)
    host.update_export(b_ro)
    assert host.rendered(901) == host.render(b_ro)
    assert host.render(b_ro) != host.render(b)  # the access is in what the server is given

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
    assert host.rendered(900) == host.render(a2)
    assert host.rendered(901) == host.render(b_ro)

    # nothing uses a fresh export
    host.add_export(_spec(902, c_path))
    assert host.connected_clients(902) == []
    assert host.connected_clients(999) == []  # unknown id: nobody

    assert host.get_export(999) is None
    act = host.activity()
    assert {900, 901, 902} <= set(act.exports), act
    assert act.exports[902].path == c_path

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

    check_batch(host, make_dir, missing_dir)


def check_batch(
    host: GaneshaHost, make_dir: Callable[[str], str], missing_dir: Callable[[str], str]
) -> None:
    """add_exports adds every good export in one go and reports each bad one with the
    error add_export gives for it; an export already live is updated, not doubled."""
    paths = [make_dir(f"contract-batch{i}") for i in range(5)]
    host.add_export(_spec(913, paths[3], RO_LOCAL))
    good = [_spec(910 + i, p) for i, p in enumerate(paths[:3])]
    # ganesha itself refuses a block whose pseudo path is taken and stops the batch there:
    # the blocks after it must still be added
    specs = [good[0], _spec(916, paths[4], pseudo=paths[3]), *good[1:],
             _spec(914, missing_dir("contract-batch-missing")),  # not mounted
             _spec(915, paths[0], pseudo=paths[0] + "x"),  # same path as 910
             _spec(913, paths[3])]  # live already: updated to RW
    failed = host.add_exports(specs)
    try:
        assert set(failed) == {914, 915, 916}, failed
        assert all(isinstance(failed[i], Conflict) for i in (914, 915, 916)), failed
        assert _ours(host) == {910: (paths[0], paths[0]), 911: (paths[1], paths[1]),
                               912: (paths[2], paths[2]), 913: (paths[3], paths[3])}
        for spec in [*good, specs[-1]]:
            assert host.rendered(spec.export_id) == host.render(spec)
        assert all(host.rendered(i) is None for i in (914, 915, 916))
        assert host.add_exports([]) == {}
    finally:
        for eid in range(910, 917):
            host.remove_export(eid)
    assert _ours(host) == {}
