"""The knfsd adapter: what it writes, what it reads back, and the GaneshaHost contract
with a stand-in for ``exportfs -r`` (the real one runs in the appliance:
``python -m appliance.host.contract --knfsd`` from tests/e2e/test_datastores_e2e.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from appliance.errors import Conflict, HostCommandFailed, InvalidInput, NotFound
from appliance.host.contract.ganesha_checks import check_contract
from appliance.host.ganesha_config import ClientRule, ExportSpec
from appliance.host.knfsd import Knfsd, parse_etab, parse_rmtab, render_exports_line
from appliance.host.nfs_server import GaneshaHost
from appliance.host.run import CommandResult, RecordingRunner

RW = (ClientRule(("127.0.0.1",), "RW"),)


class Exportfs:
    """``exportfs -r`` as nfs-utils does it for the lines ZDS writes: etab gets one line
    per path and client, with the options exportfs adds; paths in ``skip`` are left out
    (as exportfs does with a line it cannot use)."""

    def __init__(self, root: Path) -> None:
        self.exports_dir = root / "exports.d"
        self.state = root / "nfs"
        self.state.mkdir()
        self.skip: set[str] = set()
        self.fail = False
        self.runs = 0

    def __call__(self, argv: tuple[str, ...], _input: str | None) -> CommandResult | None:
        if argv != ("exportfs", "-r"):
            return None
        self.runs += 1
        if self.fail:
            return CommandResult(argv, 1, "", "exportfs: could not open /var/lib/nfs/.etab.lock")
        lines = []
        for f in sorted(self.exports_dir.glob("*.exports")):
            for line in f.read_text().splitlines():
                if not line or line.startswith("#"):
                    continue
                path, *clients = line.split()
                if path in self.skip:
                    continue
                for c in clients:
                    m = re.fullmatch(r"(\S+?)\((.*)\)", c)
                    assert m is not None, c
                    lines.append(f"{path}\t{m.group(1)}({m.group(2)},wdelay,hide,"
                                 "nocrossmnt,secure_locks,acl,anonuid=65534,anongid=65534)")
        (self.state / "etab").write_text("".join(ln + "\n" for ln in lines))
        return CommandResult(argv, 0, "", "")


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Knfsd, Exportfs, Path]:
    exportfs = Exportfs(tmp_path)
    runner = RecordingRunner([exportfs])
    proc = tmp_path / "proc"
    (proc / "clients").mkdir(parents=True)
    (proc / "threads").write_text("8\n")
    data = tmp_path / "data"
    data.mkdir()
    host = Knfsd(runner, exportfs.exports_dir, state_dir=exportfs.state, proc_root=proc,
                 is_mounted=lambda p: True)
    return host, exportfs, data


def test_knfsd_holds_the_export_contract(setup: tuple[Knfsd, Exportfs, Path]) -> None:
    host, _exportfs, data = setup

    def make_dir(name: str) -> str:
        (data / name).mkdir(exist_ok=True)
        return str(data / name)

    typed: GaneshaHost = host
    check_contract(typed, make_dir, lambda name: str(data / "gone" / name))


def test_the_line_says_what_esxi_needs() -> None:
    spec = ExportSpec(101, "/tank/datastores/ds1", "/tank/datastores/ds1", (3,),
                      (ClientRule(("192.0.2.0/24", "esx1.example.com"), "RW"),
                       ClientRule(("198.51.100.7",), "RO")))
    assert render_exports_line(spec) == (
        "# Managed by ZDS: export 101. Do not edit; the API rewrites this file.\n"
        "/tank/datastores/ds1 "
        "192.0.2.0/24(rw,sync,no_subtree_check,no_root_squash,insecure,mp,fsid=101,sec=sys) "
        "esx1.example.com(rw,sync,no_subtree_check,no_root_squash,insecure,mp,fsid=101,"
        "sec=sys) "
        "198.51.100.7(ro,sync,no_subtree_check,no_root_squash,insecure,mp,fsid=101,sec=sys)\n")


def test_what_knfsd_cannot_serve_is_refused() -> None:
    with pytest.raises(InvalidInput, match="sec=none"):
        render_exports_line(ExportSpec(101, "/tank/a", "/tank/a", (3,), RW, sec="none"))
    with pytest.raises(InvalidInput, match="pseudo path"):
        render_exports_line(ExportSpec(101, "/tank/a", "/export/a", (4,), RW))
    with pytest.raises(InvalidInput):  # the shared validation: nothing unsafe in the file
        render_exports_line(ExportSpec(101, "/tank/a b", "/tank/a b", (3,), RW))


def test_an_unmounted_dataset_is_not_exported(tmp_path: Path) -> None:
    exportfs = Exportfs(tmp_path)
    (tmp_path / "ds").mkdir()
    host = Knfsd(RecordingRunner([exportfs]), exportfs.exports_dir, state_dir=exportfs.state,
                 proc_root=tmp_path, is_mounted=lambda p: False)
    with pytest.raises(Conflict, match="not a mount point"):
        host.add_export(ExportSpec(101, str(tmp_path / "ds"), str(tmp_path / "ds"), (3,), RW))
    assert host.rendered(101) is None
    assert exportfs.runs == 0


def test_a_failed_exportfs_leaves_the_files_as_they_were(
        setup: tuple[Knfsd, Exportfs, Path]) -> None:
    host, exportfs, data = setup
    (data / "a").mkdir()
    a = ExportSpec(101, str(data / "a"), str(data / "a"), (3,), RW)
    host.add_export(a)
    before = host.rendered(101)
    exportfs.fail = True
    ro = ExportSpec(101, str(data / "a"), str(data / "a"), (3,), (ClientRule(("127.0.0.1",),
                                                                            "RO"),))
    with pytest.raises(HostCommandFailed, match="exportfs -r failed"):
        host.update_export(ro)
    assert host.rendered(101) == before
    (data / "b").mkdir()
    with pytest.raises(HostCommandFailed):
        host.add_export(ExportSpec(102, str(data / "b"), str(data / "b"), (3,), RW))
    assert host.rendered(102) is None


def test_an_export_exportfs_left_out_is_reported_and_its_file_removed(
        setup: tuple[Knfsd, Exportfs, Path]) -> None:
    host, exportfs, data = setup
    for name in ("a", "b"):
        (data / name).mkdir()
    exportfs.skip.add(str(data / "b"))
    failed = host.add_exports([ExportSpec(101, str(data / "a"), str(data / "a"), (3,), RW),
                               ExportSpec(102, str(data / "b"), str(data / "b"), (3,), RW)])
    assert set(failed) == {102}
    assert "did not export" in failed[102].message
    assert [e.export_id for e in host.list_exports()] == [101]
    assert host.rendered(102) is None and host.rendered(101) is not None
    assert exportfs.runs == 2  # once for both, once more after taking 102's file away


def test_who_uses_an_export(setup: tuple[Knfsd, Exportfs, Path]) -> None:
    host, exportfs, data = setup
    for name in ("a", "b"):
        (data / name).mkdir()
    host.add_export(ExportSpec(101, str(data / "a"), str(data / "a"), (3,), RW))
    host.add_export(ExportSpec(102, str(data / "b"), str(data / "b"), (4,),
                               (ClientRule(("192.0.2.0/24",), "RW"),)))
    (exportfs.state / "rmtab").write_text(f"127.0.0.1:{data / 'a'}:0x00000001\n"
                                          f"127.0.0.2:{data / 'a'}:0x00000000\n")
    assert host.connected_clients(101) == ["127.0.0.1"]  # the unmounted one is not counted
    assert host.connected_clients(102) == []
    info = host.proc_root / "clients" / "3" / "info"
    info.parent.mkdir()
    info.write_text('clientid: 0x6f3a\naddress: "192.0.2.9:876"\nstatus: confirmed\n')
    assert host.connected_clients(102) == ["192.0.2.9"]
    assert host.connected_clients(101) == ["127.0.0.1"]  # 192.0.2.9 is not admitted there
    act = host.activity()
    assert act.exports[101].protocols_used >= {"NFSv3"}
    assert {c.address for c in act.clients} == {"127.0.0.1", "192.0.2.9"}
    assert host.connected_clients(999) == []


def test_an_admins_own_exports_are_not_zds_s(setup: tuple[Knfsd, Exportfs, Path]) -> None:
    host, exportfs, data = setup
    for name in ("a", "mine"):
        (data / name).mkdir()
    host.add_export(ExportSpec(101, str(data / "a"), str(data / "a"), (3,), RW))
    # the admin's line in /etc/exports, with an fsid in ZDS's range: exportfs lists it
    etab = exportfs.state / "etab"
    etab.write_text(etab.read_text() + f"{data / 'mine'}\t*(rw,sync,fsid=500,sec=sys)\n")
    assert [e.export_id for e in host.list_exports()] == [101]  # not reconciled as ZDS's
    assert set(host.activity().exports) == {101}
    with pytest.raises(Conflict, match="already exported"):  # but its path is taken
        host.add_export(ExportSpec(102, str(data / "mine"), str(data / "mine"), (3,), RW))


def test_available_is_knfsd_having_threads(setup: tuple[Knfsd, Exportfs, Path]) -> None:
    host, _exportfs, _data = setup
    assert host.available()
    (host.proc_root / "threads").write_text("0\n")  # rpc.nfsd 0: the server was stopped
    assert not host.available()
    (host.proc_root / "threads").unlink()  # nfsd not loaded
    assert not host.available()


def test_update_of_an_export_that_is_not_live(setup: tuple[Knfsd, Exportfs, Path]) -> None:
    host, _exportfs, data = setup
    with pytest.raises(NotFound):
        host.update_export(ExportSpec(101, str(data), str(data), (3,), RW))


def test_etab_and_rmtab_as_nfs_utils_writes_them() -> None:
    etab = ("/tank/datastores/ds1\t127.0.0.1(rw,sync,wdelay,hide,nocrossmnt,insecure,"
            "no_root_squash,no_all_squash,no_subtree_check,secure_locks,acl,no_pnfs,"
            "mountpoint,fsid=101,anonuid=65534,anongid=65534,sec=sys,rw,insecure,"
            "no_root_squash,no_all_squash)\n"
            "/tank/datastores/ds1\t192.0.2.0/24(ro,sync,fsid=101,sec=sys)\n"
            "/srv/admin\t*(rw,sync,no_subtree_check)\n")  # the admin's own: no fsid
    assert parse_etab(etab) == {101: ("/tank/datastores/ds1", ("127.0.0.1", "192.0.2.0/24"))}
    assert parse_rmtab("127.0.0.1:/tank/datastores/ds1:0x00000002\n"
                       "192.0.2.5:/tank/datastores/ds2:0x00000000\n"
                       "garbage\n") == [("127.0.0.1", "/tank/datastores/ds1")]
