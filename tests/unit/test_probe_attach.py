"""Self-attach for nfs/iscsi probes (each transport's probe attachment): the exact
commands, and undo on half-way failure."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.errors import Unavailable
from appliance.host.fakes.ganesha import FakeGanesha
from appliance.host.fakes.lio import FakeLio
from appliance.host.iscsi_initiator import IscsiInitiator, by_path, parse_initiator_name
from appliance.host.nfsclient import NfsClient
from appliance.host.run import RecordingRunner
from appliance.transports.iscsi import IscsiProbeAttach
from appliance.transports.nfs import PROBE_EXPORT_IDS, NfsProbeAttach

IQN = "iqn.2026-11.io.zds.probe:ab12"


def test_initiator_name_file() -> None:
    text = "## DO NOT EDIT OR REMOVE THIS FILE!\nInitiatorName=iqn.1993-08.org.debian:01:5b2e\n"
    assert parse_initiator_name(text) == "iqn.1993-08.org.debian:01:5b2e"
    assert parse_initiator_name("# nothing\n") is None


def test_iscsi_login_without_discovery_and_logout(tmp_path: Path) -> None:
    runner = RecordingRunner()
    names = tmp_path / "initiatorname.iscsi"
    names.write_text("InitiatorName=iqn.1993-08.org.debian:01:abc\n")
    dev = by_path(IQN, "127.0.0.1", 3260)
    ini = IscsiInitiator(runner, str(names), exists=lambda p: p == dev)
    assert ini.initiator_name() == "iqn.1993-08.org.debian:01:abc"
    ini.login(IQN, "127.0.0.1", 3260)
    ini.logout(IQN, "127.0.0.1", 3260)
    assert runner.calls == [
        ("iscsiadm", "-m", "node", "-T", IQN, "-p", "127.0.0.1:3260", "-o", "new"),
        ("iscsiadm", "-m", "node", "-T", IQN, "-p", "127.0.0.1:3260", "--login"),
        ("iscsiadm", "-m", "node", "-T", IQN, "-p", "127.0.0.1:3260", "--logout"),
        ("iscsiadm", "-m", "node", "-T", IQN, "-p", "127.0.0.1:3260", "-o", "delete"),
    ]
    assert not any("discovery" in c for call in runner.calls for c in call)
    with pytest.raises(Unavailable, match="no iSCSI initiator name"):
        (tmp_path / "empty").write_text("# nothing\n")
        IscsiInitiator(runner, str(tmp_path / "empty")).initiator_name()


def test_iscsi_login_gives_up_and_logs_out_when_no_device_appears() -> None:
    runner = RecordingRunner()
    ini = IscsiInitiator(runner, "/nonexistent", exists=lambda p: False)
    with pytest.raises(Unavailable, match="did not appear"):
        ini.login(IQN, "127.0.0.1", 3260, timeout=0.3)
    assert runner.calls[-2][-1] == "--logout"


def test_nfs_mount_commands(tmp_path: Path) -> None:
    runner = RecordingRunner()
    c = NfsClient(runner)
    mnt = str(tmp_path / "m")
    c.mount("127.0.0.1", "/tank/zds-probes/ds1-ab", mnt)
    c.mount("127.0.0.1", "/tank/zds-probes/ds1-ab", mnt, version=4)
    runner.on(["umount", mnt], returncode=32, stderr="target is busy")
    c.umount(mnt)
    assert runner.calls[0] == (
        "mount", "-t", "nfs", "-o",
        "vers=3,proto=tcp,port=2049,mountport=20048,mountproto=tcp,nolock,hard,timeo=600",
        "127.0.0.1:/tank/zds-probes/ds1-ab", mnt)
    assert "vers=4.1" in runner.calls[1][4]
    assert runner.calls[2:] == [("umount", mnt), ("umount", "-l", mnt)]


class FailingMounter:
    def mount(self, *a: object, **kw: object) -> None:
        raise Unavailable("mount.nfs: Connection refused")

    def umount(self, mountpoint: str) -> None:
        raise AssertionError("not mounted")


def test_nfs_attach_removes_its_export_when_the_mount_fails(tmp_path: Path) -> None:
    ganesha = FakeGanesha()
    att = NfsProbeAttach(ganesha, FailingMounter(), mount_root=str(tmp_path))
    with pytest.raises(Unavailable):
        att.attach("nfs3", "ds1", "/tank/zds-probes/ds1-ab", "tank/zds-probes/ds1-ab", "ab")
    assert ganesha.list_exports() == []
    assert [c[0] for c in ganesha.calls if c[0] in ("AddExport", "RemoveExport")] == [
        "AddExport", "RemoveExport"]
    assert all(c[1] in PROBE_EXPORT_IDS for c in ganesha.calls if c[0] == "AddExport")


def test_iscsi_attach_removes_its_target_when_login_fails() -> None:
    lio = FakeLio(device_exists=lambda p: True)

    class NoLogin:
        def initiator_name(self) -> str:
            return "iqn.1993-08.org.debian:01:abc"

        def login(self, iqn: str, host: str, port: int, timeout: float = 30.0) -> str:
            raise Unavailable("iscsiadm: login failed")

        def logout(self, iqn: str, host: str, port: int) -> None:
            raise AssertionError("never logged in")

    att = IscsiProbeAttach(lio, NoLogin(), "iqn.2026-11.io.zds")
    with pytest.raises(Unavailable):
        att.attach("iscsi", "lun1", "/dev/zvol/tank/zds-probes/lun1-ab",
                   "tank/zds-probes/lun1-ab", "ab")
    assert lio.list_targets() == [] and lio.list_backstores() == []


def test_initiator_name_is_generated_before_iscsids_first_start(tmp_path: Path) -> None:
    f = tmp_path / "initiatorname.iscsi"
    f.write_text("## DO NOT EDIT OR REMOVE THIS FILE!\nGenerateName=yes\n")
    runner = RecordingRunner()
    runner.on(["iscsi-iname"], stdout="iqn.1993-08.org.debian:01:9f3c2d1e0b7a\n")
    ini = IscsiInitiator(runner, str(f))
    assert ini.initiator_name() == "iqn.1993-08.org.debian:01:9f3c2d1e0b7a"
    assert "InitiatorName=iqn.1993-08.org.debian:01:9f3c2d1e0b7a" in f.read_text()
    assert ini.initiator_name() == "iqn.1993-08.org.debian:01:9f3c2d1e0b7a"
    assert runner.calls == [("iscsi-iname", "-p", "iqn.1993-08.org.debian:01")]


def test_leftover_probe_exports_and_targets_are_removed() -> None:
    from appliance.host.ganesha_config import ClientRule, ExportSpec
    from appliance.host.lio import AclSpec, LunSpec, TargetSpec

    ganesha = FakeGanesha()
    for eid, path in ((65500, "/tank/zds-probes/ds1-dead"), (65501, "/tank/zds-probes/ds2-live"),
                      (150, "/tank/datastores/ds1")):
        ganesha.add_export(ExportSpec(eid, path, path, (3,),
                                      (ClientRule(("127.0.0.1",), "RW"),)))
    nfs = NfsProbeAttach(ganesha, FailingMounter())
    assert nfs.clean_leftovers({"live"}) == ["export 65500 (/tank/zds-probes/ds1-dead)"]
    assert sorted(e.export_id for e in ganesha.list_exports()) == [150, 65501]

    lio = FakeLio(device_exists=lambda p: True)
    ini = "iqn.1993-08.org.debian:01:abc"
    for iqn, bs in (("iqn.2026-11.io.zds.probe:dead", "probe-dead"),
                    ("iqn.2026-11.io.zds:zds-test.lun1", "zds-lun1")):
        lio.apply_target(TargetSpec(iqn, (LunSpec(bs, f"/dev/zvol/tank/{bs}", "s" + bs[-4:]),),
                                    (AclSpec(ini),)))
    runner = RecordingRunner()
    att = IscsiProbeAttach(lio, IscsiInitiator(runner, "/nonexistent"), "iqn.2026-11.io.zds")
    assert att.clean_leftovers(set()) == ["target iqn.2026-11.io.zds.probe:dead"]
    assert [t.spec.iqn for t in lio.list_targets()] == ["iqn.2026-11.io.zds:zds-test.lun1"]
    assert runner.calls[0][-1] == "--logout"


def test_nvme_connect_without_discovery_finds_the_namespace_and_disconnects(
        tmp_path: Path) -> None:
    from appliance.host.nvme_initiator import NvmeCli

    nqn = "nqn.2026-11.io.zds.probe:ab12"
    runner = RecordingRunner()
    (tmp_path / "hostnqn").write_text("nqn.2014-08.org.nvmexpress:uuid:0000-self\n")
    # /sys/block as the kernel shows a connected namespace (native multipath: the
    # device link is the subsystem, which has subsysnqn)
    for name, owner in (("nvme0n1", "nqn.2014-08.org.example:other"), ("nvme1n1", nqn)):
        (tmp_path / "block" / name / "device").mkdir(parents=True)
        (tmp_path / "block" / name / "device" / "subsysnqn").write_text(owner + "\n")
    (tmp_path / "block" / "vda").mkdir()
    cli = NvmeCli(runner, str(tmp_path / "hostnqn"), str(tmp_path / "block"),
                  exists=lambda p: p == "/dev/nvme1n1")
    assert cli.connect(nqn, "127.0.0.1", 4420, timeout=2) == "/dev/nvme1n1"
    cli.disconnect(nqn)
    assert runner.calls == [
        ("nvme", "connect", "-t", "tcp", "-a", "127.0.0.1", "-s", "4420", "-n", nqn, "-q",
         "nqn.2014-08.org.nvmexpress:uuid:0000-self"),
        ("nvme", "disconnect", "-n", nqn)]


def test_nvme_attach_serves_the_scratch_to_the_appliance_alone_and_undoes() -> None:
    from appliance.errors import HostCommandFailed
    from appliance.host.fakes.nvmet import FakeNvmet
    from appliance.host.nvme_initiator import FakeNvmeInitiator
    from appliance.host.nvmet import PortSpec
    from appliance.transports.nvme import NvmeProbeAttach

    nvmet, ini = FakeNvmet(), FakeNvmeInitiator()
    att = NvmeProbeAttach(nvmet, ini, "nqn.2026-11.io.zds", PortSpec(1, "0.0.0.0", 4420))
    a = att.attach("nvme-tcp", "ds1", "/dev/zvol/tank/zds-probes/ds1-p1", "ds1-p1", "p1")
    sub = nvmet.subsystems["nqn.2026-11.io.zds.probe:p1"]
    assert a.path == "/dev/nvme9n1" and a.is_device and a.host == "127.0.0.1"
    assert sub.hosts == {ini.name} and not sub.allow_any_host and nvmet.port_links[1]
    assert att.clean_leftovers({"p1"}) == []
    att.detach(a)
    assert nvmet.subsystems == {} and ini.disconnects == ["nqn.2026-11.io.zds.probe:p1"]

    class NoConnect(FakeNvmeInitiator):
        def connect(self, nqn: str, host: str, port: int, timeout: float = 30.0) -> str:
            raise HostCommandFailed("connect refused")

    att = NvmeProbeAttach(nvmet, NoConnect(), "nqn.2026-11.io.zds", PortSpec(1, "0.0.0.0", 4420))
    with pytest.raises(HostCommandFailed):
        att.attach("nvme-tcp", "ds1", "/dev/zvol/tank/zds-probes/ds1-p2", "ds1-p2", "p2")
    assert nvmet.subsystems == {}, "a failed connect leaves no subsystem behind"
    att2 = NvmeProbeAttach(nvmet, FakeNvmeInitiator(), "nqn.2026-11.io.zds",
                           PortSpec(1, "0.0.0.0", 4420))
    att2.attach("nvme-tcp", "ds1", "/dev/zvol/tank/zds-probes/ds1-p3", "ds1-p3", "p3")
    assert att2.clean_leftovers(set()) == ["subsystem nqn.2026-11.io.zds.probe:p3"]
