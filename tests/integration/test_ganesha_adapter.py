"""The real Ganesha adapter against a real nfs-ganesha 4.3, with a real NFSv3 client.

Everything happens live over DBus; the ganesha PID is checked to be unchanged.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from ganesha_harness import GaneshaHarness, start_private_bus

from appliance.errors import InvalidInput, Unavailable
from appliance.host.contract.ganesha_checks import check_contract
from appliance.host.ganesha import Ganesha
from appliance.host.ganesha_config import ClientRule, ExportSpec
from appliance.host.run import SubprocessRunner

pytestmark = pytest.mark.integration

RW = (ClientRule(("127.0.0.1",), "RW"),)
RO = (ClientRule(("127.0.0.1",), "RO"),)


def nfs3(export_id: int, path: str, clients: tuple[ClientRule, ...] = RW) -> ExportSpec:
    return ExportSpec(export_id, path, path, (3,), clients)


def test_exports_live_write_read_update_remove(ganesha_env: GaneshaHarness) -> None:
    h = ganesha_env
    g = h.adapter()
    pid = h.ganesha_pid
    a, b = h.make_export_dir("ds-a"), h.make_export_dir("ds-b")

    g.add_export(nfs3(101, a))
    g.add_export(nfs3(102, b))
    assert [(e.export_id, e.path) for e in g.list_exports()] == [(101, a), (102, b)]
    shown = [g.get_export(i) for i in (101, 102)]
    assert [(d.path, d.pseudo) for d in shown if d] == [(a, a), (b, b)]

    # data written over NFSv3 comes back byte-identical, and lands in the directory
    payload_a = os.urandom(3 * 1024 * 1024 + 17)
    payload_b = os.urandom(70_001)
    h.nfs_write(a, "disk-a.vmdk", payload_a)
    h.nfs_write(b, "disk-b.img", payload_b)
    assert h.nfs_read(a, "disk-a.vmdk") == payload_a
    assert h.nfs_read(b, "disk-b.img") == payload_b
    assert Path(a, "disk-a.vmdk").read_bytes() == payload_a
    assert h.nfs_ls(a) == ["disk-a.vmdk"]

    assert Path(a, "disk-a.vmdk").stat().st_uid == 0  # No_Root_Squash: root stays root

    # ganesha can tell the client that used the export (see Ganesha.connected_clients);
    # an export nobody has touched yet reports nobody, although the same client is
    # active on another export; after the activity window nobody either.
    assert g.connected_clients(101) == ["127.0.0.1"]
    idle = h.make_export_dir("ds-idle")
    g.add_export(nfs3(103, idle))
    assert g.connected_clients(103) == []
    time.sleep(1.2)
    assert h.adapter(active_window=1.0).connected_clients(101) == []
    assert h.adapter(active_window=None).connected_clients(101) == ["127.0.0.1"]
    g.remove_export(103)

    # RW -> RO live: reads still work, a write is refused with NFS3ERR_ROFS
    g.update_export(nfs3(101, a, RO))
    refused = h.try_nfs_write(a, "new.bin", b"x" * 4096)
    assert refused.returncode != 0
    assert b"ROFS" in refused.stdout + refused.stderr
    assert not Path(a, "new.bin").exists()
    assert h.nfs_read(a, "disk-a.vmdk") == payload_a
    # ...and back to RW
    g.update_export(nfs3(101, a, RW))
    h.nfs_write(a, "new.bin", b"y" * 4096)
    assert Path(a, "new.bin").read_bytes() == b"y" * 4096

    # a client outside the rules cannot mount
    g.update_export(nfs3(102, b, (ClientRule(("192.0.2.1",), "RW"),)))
    assert h.try_nfs_ls(b).returncode != 0
    g.update_export(nfs3(102, b, RW))
    assert h.nfs_ls(b) == ["disk-b.img"]

    # remove one: the client can no longer mount it, the other still works
    g.remove_export(102)
    assert [e.export_id for e in g.list_exports()] == [101]
    assert g.rendered(102) is None
    gone = h.try_nfs_ls(b)
    assert gone.returncode != 0, gone.stdout
    assert h.try_nfs_write(b, "after.bin", b"z").returncode != 0
    assert not Path(b, "after.bin").exists()
    assert h.nfs_read(a, "disk-a.vmdk") == payload_a
    assert g.connected_clients(102) == []

    # re-adding the same id/path works again, still without a restart
    g.add_export(nfs3(102, b))
    assert h.nfs_read(b, "disk-b.img") == payload_b

    assert h.ganesha_pid == pid
    assert h.procs["ganesha"].poll() is None


def test_contract_real(ganesha_env: GaneshaHarness) -> None:
    h = ganesha_env
    pid = h.ganesha_pid
    check_contract(
        h.adapter(),
        make_dir=h.make_export_dir,
        missing_dir=lambda name: str(h.export_base / "not-there" / name),
    )
    assert h.ganesha_pid == pid


def test_unresolvable_hostname_is_refused_and_rolled_back(ganesha_env: GaneshaHarness) -> None:
    """ganesha loads a block with an unresolvable client *without* that client and only
    warns; the adapter must not leave such a half-applied export live."""
    h = ganesha_env
    g = h.adapter()
    path = h.make_export_dir("ds-host")
    spec = ExportSpec(110, path, path, (3,), (ClientRule(("no-such-host.invalid",), "RW"),))
    with pytest.raises(InvalidInput, match=r"no-such-host\.invalid"):
        g.add_export(spec)
    assert g.list_exports() == []
    assert g.rendered(110) is None
    # on update, the previous block is put back live and on disk
    g.add_export(nfs3(110, path))
    before = g.rendered(110)
    with pytest.raises(InvalidInput):
        g.update_export(spec)
    assert g.rendered(110) == before
    h.nfs_write(path, "still-rw.bin", b"ok")


def test_nfs4_export_block_is_accepted(ganesha_env: GaneshaHarness) -> None:
    h = ganesha_env
    g = h.adapter()
    path = h.make_export_dir("ds-v4")
    g.add_export(ExportSpec(120, path, path, (4,), RW))
    assert [e.export_id for e in g.list_exports()] == [120]
    ls = h.nfs_client(["nfs-ls", f"nfs://127.0.0.1{path}?version=4&nfsport=2049"])
    assert ls.returncode == 0, ls.stderr
    assert g.connected_clients(120) == ["127.0.0.1"]


def test_unavailable_when_no_ganesha_or_no_bus(ganesha_env: GaneshaHarness,
                                               tmp_path: Path) -> None:
    h = ganesha_env
    bus, empty_bus = start_private_bus(tmp_path, "empty")  # up, but no ganesha on it
    try:
        for address in (empty_bus, f"unix:path={tmp_path / 'nobody.sock'}"):
            g = Ganesha(SubprocessRunner(), tmp_path / "exports", address)
            assert not g.available()
            with pytest.raises(Unavailable, match="ganesha"):
                g.list_exports()
            with pytest.raises(Unavailable):
                g.add_export(nfs3(130, h.make_export_dir("ds-down")))
            with pytest.raises(Unavailable):
                g.update_export(nfs3(130, h.make_export_dir("ds-down")))
            with pytest.raises(Unavailable):
                g.remove_export(130)
            with pytest.raises(Unavailable):
                g.connected_clients(130)
            assert g.rendered(130) is None  # a failed add leaves no file behind
    finally:
        bus.terminate()
        bus.wait(timeout=10)
