"""Reads cost the same number of host calls at 2 or 200 datastores.

The engine runs on the real adapters: Zfs and Ganesha on a RecordingRunner that answers
like zfs 2.3 and nfs-ganesha 5 would for N datastores (a third each NFS, iSCSI and
NVMe/TCP), Lio's configfs reader on a directory laid out like /sys/kernel/config/target
and Nvmet's on one laid out like /sys/kernel/config/nvmet. Every command and DBus call is
counted, and so are the configfs walks; listing the datastores, one datastore, health,
drift and a background reconcile with nothing to do must make exactly as many at N = 200
as at N = 3 (one of each protocol).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from appliance.engine import Engine
from appliance.host.factory import HostAdapters
from appliance.host.ganesha import Ganesha
from appliance.host.lio import VAAI_ATTRIBUTES, ConfigfsReader, Lio
from appliance.host.local import FakeLocalHost
from appliance.host.nvmet import Nvmet, NvmetReader
from appliance.host.run import CommandResult, RecordingRunner
from appliance.host.zfs import Zfs
from appliance.model import (
    DatastoreRecord,
    DatastoreSpec,
    IscsiAccess,
    NfsClient,
    NvmeAccess,
)
from appliance.properties import user_properties
from appliance.settings import Settings
from appliance.transports.iscsi import backstore_name
from appliance.transports.nfs import export_spec
from appliance.transports.nvme import namespace_identity

POOL = "tank"
ESX = "iqn.1998-01.com.vmware:esxi01-4f2a"
KVM_NQN = "nqn.2014-08.org.nvmexpress:uuid:5b1e0c2a-7d4f-4e8b-9a61-0c3f2d8e7b14"
PROTOCOL_NAMES = ("NFSv3", "MNT", "NLMv4", "RQUOTA", "NFSv40", "NFSv41", "NFSv42", "9P")


def is_lun(rec: DatastoreRecord) -> bool:
    """A third of the simulated datastores are iSCSI LUNs."""
    return rec.iqn is not None


def is_zvol(rec: DatastoreRecord) -> bool:
    """iSCSI LUNs and NVMe/TCP namespaces are zvols (NFS exports file systems)."""
    return rec.iqn is not None or rec.nqn is not None


class SimulatedHost:
    """zfs/zpool output, ganesha's DBus replies and a configfs tree for N datastores."""

    def __init__(self, root: Path, n: int, counting: bool = True) -> None:
        self.root = root
        self.counting = counting  # the parent has a snapshot_limit: ZFS counts snapshots
        self.records: list[DatastoreRecord] = []
        for i in range(n):
            nfs, lun = i % 3 == 0, i % 3 == 1
            name = f"ds{i:04d}"
            spec = DatastoreSpec(
                name=name, pool=POOL, protocol="nfs3" if nfs else "iscsi" if lun else
                "nvme-tcp", size=64 << 20,
                nfs_clients=(NfsClient("192.0.2.0/24"),) if nfs else (),
                iscsi=IscsiAccess((ESX,) if lun else ()),
                nvme=NvmeAccess(() if nfs or lun else (KVM_NQN,)))
            self.records.append(DatastoreRecord(
                spec=spec, state="ready", export_id=100 + i if nfs else None,
                iqn=f"iqn.2026-11.io.zds:zds-test.{name}" if lun else None,
                nqn=None if nfs or lun else f"nqn.2026-11.io.zds:zds-test.{name}",
                serial=None if nfs else f"6a1e5c3d-0000-4000-8000-{i:012d}", created=1.0))
        # each dataset's zds:* as ZDS set them (filled in once the engine exists)
        self.described: dict[str, dict[str, str]] = {}
        self.configfs = root / "configfs"
        self.nvmet = root / "nvmet"
        self.proc_net = root / "proc-net"
        self.exports_dir = root / "ganesha"
        self.dev = root / "dev"
        self._make_configfs()
        self._make_nvmet()
        self._write_export_files()
        self.runner = RecordingRunner()
        self.runner.responders.append(self.answer)

    # -- ZFS -------------------------------------------------------------------------
    def _dataset_rows(self, rec: DatastoreRecord, props: list[str]) -> list[str]:
        ds = rec.spec.dataset
        values = self._values(rec)
        rows = []
        for p in props:
            if p in values:
                source = "local" if ":" in p or p in ("compression",) else "-"
                rows.append(f"{ds}\t{p}\t{values[p]}\t{source}")
            elif ":" in p:
                rows.append(f"{ds}\t{p}\t-\t-")
        return rows

    def _values(self, rec: DatastoreRecord) -> dict[str, str]:
        ds = rec.spec.dataset
        values = {"type": "volume" if is_zvol(rec) else "filesystem", "used": "98304",
                  "available": "67010560", "referenced": "98304", "compressratio": "1.00",
                  "mounted": "yes", "mountpoint": f"/{ds}", "creation": "1795316290",
                  "compression": "lz4", "sync": "standard", "zds:managed": "true",
                  "zds:name": rec.name, "zds:protocol": rec.spec.protocol,
                  "snapshot_limit": "none", "snapshot_count": self.snapshots(rec),
                  **self.described.get(rec.name, {})}
        if is_zvol(rec):
            del values["mounted"], values["mountpoint"]
            values["volsize"] = str(rec.spec.size)
        return values

    def snapshots(self, rec: DatastoreRecord) -> str:
        """Datastore i has i % 3 snapshots (counted by ZFS only below a limit)."""
        return str(int(rec.name[2:]) % 3) if self.counting else "none"

    def zfs_list_columns(self, argv: tuple[str, ...]) -> str:
        """`zfs list -H -p -r -o name,PROPS tank/datastores`: the parent, then one line per
        datastore; "-" where a property does not apply."""
        props = argv[argv.index("-o") + 1].split(",")[1:]
        parent = {"type": "filesystem", "mountpoint": f"/{POOL}/datastores",
                  "snapshot_limit": "1000000000" if self.counting else "none",
                  "snapshot_count": str(sum(int(self.snapshots(r)) for r in self.records))
                  if self.counting else "none"}
        rows = [[f"{POOL}/datastores", *(parent.get(p, "-") for p in props)]]
        for rec in self.records:
            values = self._values(rec)
            rows.append([rec.spec.dataset, *(values.get(p, "-") for p in props)])
        return "".join("\t".join(r) + "\n" for r in rows)

    def zfs_list_snapshots(self) -> str:
        return "".join(f"{r.spec.dataset}@s{k}\n" for r in self.records
                       for k in range(int(r.name[2:]) % 3))

    def zfs_get(self, argv: tuple[str, ...]) -> str:
        props, target = argv[-2].split(","), argv[-1]
        if props == ["all"]:
            props = ["type", "used", "available", "referenced", "mountpoint", "mounted"]
        parent = f"{POOL}/datastores"
        if target in (POOL, parent):
            head = [f"{target}\ttype\tfilesystem\t-"]
            rows = [r for rec in self.records for r in self._dataset_rows(rec, props)] \
                if "-r" in argv and target == parent else []
            return "\n".join(head + rows) + "\n"
        for rec in self.records:
            if rec.spec.dataset == target:
                return "\n".join(self._dataset_rows(rec, props)) + "\n"
        return ""

    # -- ganesha ---------------------------------------------------------------------
    def show_exports(self) -> str:
        rows = [(0, "/")] + [(r.export_id, f"/{r.spec.dataset}") for r in self.records
                             if r.export_id is not None]
        out = ["method return time=1795314870.28 sender=:1.0 -> destination=:1.77 "
               "serial=306 reply_serial=2", "   struct {", "      uint64 1795314642",
               "      uint64 426208982", "   }", "   array ["]
        for eid, path in rows:
            out += ["      struct {", f"         uint16 {eid}", f'         string "{path}"',
                    "         struct {"]
            for proto in PROTOCOL_NAMES:
                out += ["            struct {", f'               string "{proto}"',
                        "               boolean false", "            }"]
            out += ["         }", "         struct {", "            uint64 0",
                    "            uint64 0", "         }", "      }"]
        return "\n".join([*out, "   ]"]) + "\n"

    @staticmethod
    def show_clients() -> str:
        return ("method return time=1795314870.28 sender=:1.0 -> destination=:1.78 serial=307 "
                "reply_serial=2\n   struct {\n      uint64 1795314870\n      uint64 0\n   }\n"
                "   array [\n   ]\n")

    def _write_export_files(self) -> None:
        from appliance.host.ganesha_config import export_file_name, render_export_block

        self.exports_dir.mkdir(parents=True)
        for rec in self.records:
            if rec.export_id is not None:
                spec = export_spec(rec, f"/{rec.spec.dataset}")
                (self.exports_dir / export_file_name(rec.export_id)).write_text(
                    render_export_block(spec))

    # -- LIO -------------------------------------------------------------------------
    def _make_configfs(self) -> None:
        core = self.configfs / "core"
        core.mkdir(parents=True)
        (self.configfs / "iscsi").mkdir()
        for i, rec in enumerate(r for r in self.records if is_lun(r)):
            assert rec.iqn and rec.serial
            so = core / f"iblock_{i}" / backstore_name(rec.name)
            (so / "wwn").mkdir(parents=True)
            (so / "attrib").mkdir()
            (so / "udev_path").write_text(f"/dev/zvol/{rec.spec.dataset}\n")
            (so / "wwn" / "vpd_unit_serial").write_text(
                f"T10 VPD Unit Serial Number: {rec.serial}\n")
            for key, value in VAAI_ATTRIBUTES.items():
                (so / "attrib" / key).write_text(f"{value}\n")
            tpg = self.configfs / "iscsi" / rec.iqn / "tpgt_1"
            (tpg / "np" / "0.0.0.0:3260").mkdir(parents=True)
            lun = tpg / "lun" / "lun_0"
            lun.mkdir(parents=True)
            os.symlink(f"../../../../../../target/core/iblock_{i}/{so.name}", lun / "ab12cd")
            acl = tpg / "acls" / ESX
            (acl / "auth").mkdir(parents=True)
            (acl / "lun_0").mkdir()
            for f in ("userid", "password", "userid_mutual", "password_mutual"):
                (acl / "auth" / f).write_text("\n")
            (acl / "info").write_text(f"No active iSCSI Session for Initiator Endpoint: {ESX}\n")
            for key, value in (("authentication", 0), ("generate_node_acls", 0),
                               ("demo_mode_write_protect", 1), ("cache_dynamic_acls", 0)):
                (tpg / "attrib").mkdir(exist_ok=True)
                (tpg / "attrib" / key).write_text(f"{value}\n")
            (tpg / "enable").write_text("1\n")

    # -- nvmet -----------------------------------------------------------------------
    def _make_nvmet(self) -> None:
        """configfs nvmet/ with port 1 on 0.0.0.0:4420 and one subsystem per NVMe/TCP
        datastore (namespace 1 enabled, one allowed host), and no TCP connection."""
        port = self.nvmet / "ports" / "1"
        (port / "subsystems").mkdir(parents=True)
        (port / "ana_groups" / "1").mkdir(parents=True)
        for key, value in (("addr_trtype", "tcp"), ("addr_adrfam", "ipv4"),
                           ("addr_traddr", "0.0.0.0"), ("addr_trsvcid", "4420")):
            (port / key).write_text(value + "\n")
        (port / "ana_groups" / "1" / "ana_state").write_text("optimized\n")
        (self.nvmet / "hosts" / KVM_NQN).mkdir(parents=True)
        for rec in self.records:
            if rec.nqn is None or rec.serial is None:
                continue
            ns_uuid, _nguid, serial = namespace_identity(rec.serial)
            sub = self.nvmet / "subsystems" / rec.nqn
            (sub / "allowed_hosts").mkdir(parents=True)
            os.symlink(f"../../../hosts/{KVM_NQN}", sub / "allowed_hosts" / KVM_NQN)
            (sub / "attr_serial").write_text(f"{serial}\n")
            (sub / "attr_model").write_text("ZDS\n")
            (sub / "attr_allow_any_host").write_text("0\n")
            ns = sub / "namespaces" / "1"
            ns.mkdir(parents=True)
            for key, value in (("device_path", f"/dev/zvol/{rec.spec.dataset}"),
                               ("device_uuid", ns_uuid), ("device_nguid", ns_uuid),
                               ("ana_grpid", "1"), ("enable", "1")):
                (ns / key).write_text(value + "\n")
            os.symlink(f"../../../subsystems/{rec.nqn}", port / "subsystems" / rec.nqn)
        self.proc_net.mkdir()
        for table in ("tcp", "tcp6"):
            (self.proc_net / table).write_text(
                "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when\n")

    def set_commands(self, count: int) -> None:
        """Every ACL's LUN 0 counter of SCSI commands (LIO's scsi_auth_intr/num_cmds)."""
        for rec in self.records:
            if rec.iqn:
                stat = (self.configfs / "iscsi" / rec.iqn / "tpgt_1" / "acls" / ESX / "lun_0"
                        / "statistics" / "scsi_auth_intr")
                stat.mkdir(parents=True, exist_ok=True)
                (stat / "num_cmds").write_text(f"{count}\n")

    def answer(self, argv: tuple[str, ...], _input: str | None) -> CommandResult | None:
        out = ""
        if argv[:2] == ("zpool", "list"):
            out = f"{POOL}\n" if "-p" not in argv else \
                f"{POOL}\tONLINE\t107374182400\t1048576\t107373133824\t1\t0\n"
        elif argv[:2] == ("zpool", "get"):
            out = f"{POOL}\thealth\tONLINE\t-\n"
        elif argv[:2] == ("zfs", "get"):
            out = self.zfs_get(argv)
        elif argv[:2] == ("zfs", "list") and "snapshot" in argv:
            out = self.zfs_list_snapshots()
        elif argv[:2] == ("zfs", "list"):
            out = self.zfs_list_columns(argv)
        elif argv[0] == "dbus-send" and argv[-1].endswith("ShowExports"):
            out = self.show_exports()
        elif argv[0] == "dbus-send" and argv[-1].endswith("ShowClients"):
            out = self.show_clients()
        return CommandResult(argv, 0, out, "")


class CountingReader(ConfigfsReader):
    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.walks: Counter[str] = Counter()

    def targets(self):  # type: ignore[no-untyped-def]
        self.walks["targets"] += 1
        return super().targets()

    def backstores(self):  # type: ignore[no-untyped-def]
        self.walks["backstores"] += 1
        return super().backstores()

    def backstore_names(self):  # type: ignore[no-untyped-def]
        self.walks["backstore_names"] += 1
        return super().backstore_names()

    def summaries(self):  # type: ignore[no-untyped-def]
        self.walks["summaries"] += 1
        return super().summaries()


class CountingNvmetReader(NvmetReader):
    """Counts walks of nvmet/ into the LIO reader's counter (one tally for configfs)."""

    def __init__(self, root: str, walks: Counter[str]) -> None:
        super().__init__(root)
        self.walks = walks

    def subsystems(self):  # type: ignore[no-untyped-def]
        self.walks["nvmet.subsystems"] += 1
        return super().subsystems()

    def summaries(self):  # type: ignore[no-untyped-def]
        self.walks["nvmet.summaries"] += 1
        return super().summaries()


Made = tuple[Engine, SimulatedHost, CountingReader]


@pytest.fixture
def engine_for(tmp_path: Path) -> Iterator[Callable[..., Made]]:
    made: list[Engine] = []

    def make(n: int, counting: bool = True) -> Made:
        sim = SimulatedHost(tmp_path / f"n{n}-{counting}", n, counting)
        dev_zfs = tmp_path / f"n{n}-{counting}" / "zfs-node"
        dev_zfs.write_text("")
        lio = Lio(device_check=lambda p: True, configfs_root=str(sim.configfs))
        reader = CountingReader(str(sim.configfs))
        lio.reader = reader
        nvmet = Nvmet(sim.runner, root=str(sim.nvmet), device_check=lambda p: True,
                      proc_net=str(sim.proc_net))
        nvmet.reader = CountingNvmetReader(str(sim.nvmet), reader.walks)
        hosts = HostAdapters(
            zfs=Zfs(sim.runner, dev_zfs=str(dev_zfs)), lio=lio,
            ganesha=Ganesha(sim.runner, sim.exports_dir),
            local=FakeLocalHost(name="zds-test"), nvmet=nvmet)
        settings = Settings(health_interval=0, reconcile_interval=0).with_state_dir(
            tmp_path / f"n{n}-{counting}" / "state")
        engine = Engine.create(settings, hosts)
        for rec in sim.records:
            engine.store.put_datastore(rec)
            sim.described[rec.name] = user_properties(
                engine.ctx.transports.of(rec.spec.protocol), rec)
        made.append(engine)
        return engine, sim, reader

    yield make
    for e in made:
        e.close()


def _calls(sim: SimulatedHost, reader: CountingReader) -> tuple[int, Counter[str]]:
    return len(sim.runner.calls), reader.walks.copy()


def _measure(made: Made, action: str) -> tuple[int, dict[str, int]]:
    engine, sim, reader = made
    calls0, walks0 = _calls(sim, reader)
    if action == "list":
        views = engine.datastores.list()
        assert len(views) == len(sim.records) and all(v.serving for v in views)
        assert [v.snapshots for v in views] == [int(sim.snapshots(r)) if sim.counting
                                                else int(r.name[2:]) % 3
                                                for r in sim.records]
        assert all(v.used == 98304 and v.properties["compression"] == "lz4"
                   for v in views)
    elif action == "get":  # the last datastore of each protocol
        assert all(engine.datastores.get(r.name).serving for r in sim.records[-3:])
    elif action == "health":
        engine.system.health()
    elif action == "drift":
        drift = engine.system.drift()
        assert drift.in_sync, drift.items
    elif action == "watcher":
        engine.watcher.repair()
    elif action == "check":
        engine.reconciler.check()
    calls1, walks1 = _calls(sim, reader)
    return calls1 - calls0, dict(walks1 - walks0)


@pytest.mark.parametrize("action", ["list", "get", "health", "drift", "watcher", "check"])
def test_host_calls_do_not_grow_with_datastores(engine_for: Callable[..., Made],
                                                action: str) -> None:
    small = engine_for(3)  # one NFS, one iSCSI, one NVMe/TCP
    large = engine_for(200)
    for engine, _sim, _reader in (small, large):
        engine.reconciler.check()
    one, many = _measure(small, action), _measure(large, action)
    assert one == many, f"{action}: N=2 made {one}, N=200 made {many}"
    if action == "health":
        assert one == (0, {}), "health answers from the last check: no host call at all"
    if action in ("list", "drift", "watcher"):
        assert one[1] and all(v <= 1 for v in one[1].values()), one  # one configfs walk


def test_a_background_reconcile_with_nothing_to_do_changes_nothing(
        engine_for: Callable[..., Made]) -> None:
    engine, sim, _ = engine_for(200)
    engine.watcher.repair()
    methods = [a[-1].rsplit(".", 1)[-1] for a in sim.runner.calls if a[0] == "dbus-send"]
    assert "AddExport" not in methods and "UpdateExport" not in methods, methods
    assert not any(a[:2] in (("zfs", "set"), ("zfs", "create")) for a in sim.runner.calls)


def test_the_list_reads_a_few_configfs_entries_per_target(
        engine_for: Callable[..., Made], monkeypatch: pytest.MonkeyPatch) -> None:
    """Each configfs read costs ~0.5 ms under emulation: the list reads each target's LUN
    and ACL listings and each ACL's info (4 operations), not its backstores, serials,
    attributes or CHAP (about 25, which made the list 14.9x slower at 1,000 than at 10);
    drift still reads everything it compares."""
    import appliance.host.lio as lio_module

    ops: Counter[str] = Counter()
    real_read, real_listdir = lio_module._read, lio_module._listdir

    def read(path: str) -> str | None:
        ops["read"] += 1
        return real_read(path)

    def listdir(path: str) -> list[str]:
        ops["listdir"] += 1
        return real_listdir(path)

    monkeypatch.setattr(lio_module, "_read", read)
    monkeypatch.setattr(lio_module, "_listdir", listdir)
    engine, sim, _reader = engine_for(200)
    targets = sum(1 for r in sim.records if is_lun(r))
    ops.clear()
    assert all(v.serving for v in engine.datastores.list())
    listed = sum(ops.values())
    assert listed <= 4 * targets + 2, f"the list made {dict(ops)} configfs reads " \
                                      f"for {targets} targets"
    ops.clear()
    assert engine.system.drift().in_sync
    assert sum(ops.values()) >= 10 * targets, "drift no longer reads what it compares"


@pytest.mark.parametrize("counting", [True, False])
def test_the_list_counts_snapshots_with_the_properties_when_zfs_keeps_counts(
        engine_for: Callable[..., Made], counting: bool) -> None:
    """Below POOL/datastores' snapshot_limit ZFS keeps each dataset's snapshot_count, so
    the list reads counts in its one `zfs list` and lists no snapshot; a pool without the
    limit (made before, refused it) is counted by listing its snapshots, once."""
    engine, sim, _ = engine_for(20, counting)
    before = len(sim.runner.calls)
    views = engine.datastores.list()
    assert [v.snapshots for v in views] == [int(r.name[2:]) % 3 for r in sim.records]
    listed = [a for a in sim.runner.calls[before:] if a[:2] == ("zfs", "list")]
    snapshot_lists = [a for a in listed if "snapshot" in a]
    assert len(snapshot_lists) == (0 if counting else 1), listed
