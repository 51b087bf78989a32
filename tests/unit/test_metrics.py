"""Metrics: the parsers on captured output, the collector's differences and attribution,
bounded history, job pruning, advice with evidence, and the API (readonly may scrape)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from appliance.errors import InvalidInput, Unavailable
from appliance.host.iostats import (
    IoStats,
    parse_diskstats,
    parse_get_nfsio,
    parse_pool_iostat,
    read_acl_counters,
    read_acl_stats,
)
from appliance.host.run import RecordingRunner
from appliance.metrics import advice as adv
from appliance.metrics.collector import DatastoreSample
from appliance.metrics.history import BUCKET, FULL_KEEP, History
from appliance.metrics.service import KEEP_JOBS, parse_duration, parse_since
from appliance.store import Store
from tests.unit.conftest import Rig

FIX = Path(__file__).parent / "fixtures" / "ganesha"

# zpool iostat -H -p -l captured in the appliance (OpenZFS 2.3.2)
POOL_IOSTAT = ("tank\t552960\t8052510720\t0\t11\t26584\t108863\t11033178\t8243411\t10293007\t"
               "5275154\t951235\t20315\t-\t3286997\t-\t19456\t-\n")
DISKSTATS = """\
 254       0 vda 8410 2311 734268 3313 2205 1904 102882 4710 0 5544 8840 0 0 0 0 620 816
 230       0 zd0 120 0 8400 35 2000 0 16000 1204 0 1260 1240 3 0 2048 1 0 0
 230       1 zd0p1 12 0 96 1 0 0 0 0 0 1 1 0 0 0 0 0 0
 230      16 zd16 7 0 56 2 0 0 0 0 0 2 2 0 0 0 0 0 0
"""


# --- parsers ----------------------------------------------------------------------------

@pytest.mark.parametrize("fixture", ["GetNFSIO.txt", "5.9/GetNFSIO.txt"])
def test_get_nfsio_of_ganesha_4_and_5(fixture: str) -> None:
    rows = {(r.export_id, r.protocol): r for r in parse_get_nfsio((FIX / fixture).read_text())}
    assert set(rows) == {(101, "NFSv3"), (102, "NFSv3")}
    a, b = rows[(101, "NFSv3")], rows[(102, "NFSv3")]
    assert (a.read.ops, a.read.transferred, a.write.ops, a.write.transferred) == \
        (1, 300000, 1, 300000)
    assert a.read.latency_ns > 0 and a.write.latency_ns > 0
    assert (b.read.ops, b.write.ops, b.write.transferred) == (0, 1, 5000)


def test_get_nfsio_idle_and_refused() -> None:
    assert parse_get_nfsio((FIX / "GetNFSIO-idle.txt").read_text()) == []
    refused = ('method return time=1 sender=:1.0 -> destination=:1.9 serial=12 reply_serial=2\n'
               '   boolean false\n   string "NFS stats disabled"\n')
    with pytest.raises(ValueError, match="stats disabled"):
        parse_get_nfsio(refused)


def test_diskstats_keeps_whole_zvols_only() -> None:
    stats = parse_diskstats(DISKSTATS)
    assert set(stats) == {"zd0", "zd16"}
    z = stats["zd0"]
    assert (z.reads, z.read_sectors, z.read_ms, z.writes, z.write_sectors, z.write_ms) == \
        (120, 8400, 35, 2000, 16000, 1204)
    assert (z.discards, z.discard_sectors) == (3, 2048)


def test_pool_iostat_latency_split() -> None:
    (tank,) = parse_pool_iostat(POOL_IOSTAT)
    assert tank.pool == "tank"
    assert tank.get("alloc") == 552960 and tank.get("write_ops") == 11
    assert tank.get("total_wait_write") == 8243411 and tank.get("syncq_wait_read") == 951235
    assert tank.get("asyncq_wait_read") is None and tank.get("trim_wait") == 19456


def test_acl_stats_from_configfs(tmp_path: Path) -> None:
    iqn, ini = "iqn.2026-11.io.zds:zds.lun1", "iqn.2026-11.org.example:host1"
    d = tmp_path / "iscsi" / iqn / "tpgt_1" / "acls" / ini / "lun_0" / "statistics" / \
        "scsi_auth_intr"
    d.mkdir(parents=True)
    for f, v in (("num_cmds", 2101), ("read_mbytes", 6), ("write_mbytes", 7)):
        (d / f).write_text(f"{v}\n")
    (tmp_path / "iscsi" / "lio_version").write_text("x\n")
    (row,) = read_acl_stats(str(tmp_path))
    assert (row.target, row.initiator, row.lun, row.commands) == (iqn, ini, 0, 2101)
    # the collector names the ACLs ZDS mapped: one read each, a missing one skipped
    wanted = [(iqn, ini, 0), (iqn, "iqn.2026-11.org.example:gone", 0), (iqn, ini, 3)]
    assert read_acl_counters(str(tmp_path), wanted) == [row]


def test_real_reader_on_files_and_commands(tmp_path: Path) -> None:
    runner = RecordingRunner()
    runner.on(["dbus-send"], (FIX / "GetNFSIO.txt").read_text())
    runner.on(["zpool", "iostat"], POOL_IOSTAT)
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "diskstats").write_text(DISKSTATS)
    z = tmp_path / "dev" / "zvol" / "tank" / "datastores"
    z.mkdir(parents=True)
    os.symlink("../../../zd0", z / "lun1")
    os.symlink("../../../zd0p1", z / "lun1-part1")
    st = IoStats(runner, proc_root=str(tmp_path / "proc"), dev_root=str(tmp_path / "dev"),
                 configfs_root=str(tmp_path / "none"))
    assert {r.export_id for r in st.nfs_io()} == {101, 102}
    assert runner.calls[-1][-1] == "org.ganesha.nfsd.exportstats.GetNFSIO"
    assert st.zvol_devices() == {"tank/datastores/lun1": "zd0"}
    assert st.block_io()["zd0"].writes == 2000
    assert st.pool_iostat()[0].pool == "tank"
    assert st.initiator_io() == [] and st.arcstats() is None

    down = RecordingRunner()
    down.on(["dbus-send"], returncode=1,
            stderr="Error org.freedesktop.DBus.Error.ServiceUnknown: no ganesha")
    with pytest.raises(Unavailable):
        IoStats(down).nfs_io()


# --- collector ---------------------------------------------------------------------------

def _put(rig: Rig, name: str, protocol: str) -> None:
    from appliance.services.datastores import DatastoreRequest

    rig.engine.datastores.put(name, DatastoreRequest(
        protocol=protocol, size="1G",
        nfs_clients=[{"match": "127.0.0.1", "access": "rw"}] if protocol != "iscsi" else [],
        initiators=["iqn.2026-11.org.example:h1"] if protocol == "iscsi" else []))


def _export_id(rig: Rig, name: str) -> int:
    eid = rig.engine.datastores.record(name).export_id
    assert eid is not None
    return eid


def test_collector_differences_per_datastore(rig: Rig) -> None:
    st = rig.hosts.iostats
    assert st is not None
    _put(rig, "nfs1", "nfs3")
    _put(rig, "lun1", "iscsi")
    eid = _export_id(rig, "nfs1")
    iqn = str(rig.engine.datastores.record("lun1").iqn)
    st.zvol("tank/datastores/lun1", "zd0")
    now = [1000.0]
    rig.engine.metrics.collector.clock = lambda: now[0]  # type: ignore[union-attr]
    first = rig.engine.metrics.collect()
    assert first.datastores == [], "the first read is a baseline only"

    st.nfs(eid, read_ops=100, read_bytes=100 * 4096, read_latency_ns=100 * 2_000_000,
           write_ops=50, write_bytes=50 * 65536, write_latency_ns=50 * 8_000_000)
    st.block("zd0", reads=30, read_bytes=30 * 4096, read_ms=30, writes=10,
             write_bytes=10 * 16384, write_ms=50, discards=2, discard_bytes=1 << 20)
    st.initiator(iqn, "iqn.2026-11.org.example:h1", commands=40)
    now[0] = 1010.0
    rig.engine.metrics.collect()  # first seen after the first collection: from zero
    st.nfs(eid, write_ops=10, write_bytes=10 * 4096, write_latency_ns=10 * 1_000_000)
    now[0] = 1020.0
    col = rig.engine.metrics.collect()
    by = {s.name: s for s in col.datastores}
    assert by["nfs1"].counts["write_ops"] == 10 and by["nfs1"].rate("write_ops") == 1.0
    assert by["nfs1"].latency_ms("write") == pytest.approx(1.0)
    assert by["lun1"].counts["initiator_commands"] == 0

    prev = rig.engine.metrics.history.datastore_series("nfs1", 995, 1030, 10)
    iops = [p.values["read_iops"] for p in prev]
    assert iops == [10.0, 0.0], "100 reads over 10 s, then none"
    assert prev[0].values["read_latency_ms"] == pytest.approx(2.0)
    lun = rig.engine.metrics.history.datastore_series("lun1", 995, 1030, 10)
    assert lun[0].values["read_iops"] == 3.0 and lun[0].values["write_latency_ms"] == 5.0
    assert lun[0].values["discards"] == 2.0 and lun[0].values["initiator_commands_per_s"] == 4.0
    assert [p.values["seconds"] for p in prev] == [10.0, 10.0]


def test_a_late_collection_keeps_counts_exact_through_seconds(rig: Rig) -> None:
    """Under load a collection can come 19 s after the last one instead of 10: the point's
    rate is over the 19 s it covers, and rate x seconds gives back the ops counted (the
    e2e test once read rate x 10 and saw half the writes)."""
    st = rig.hosts.iostats
    assert st is not None
    _put(rig, "nfs1", "nfs3")
    eid = _export_id(rig, "nfs1")
    now = [1000.0]
    rig.engine.metrics.collector.clock = lambda: now[0]  # type: ignore[union-attr]
    rig.engine.metrics.collect()
    st.nfs(eid, write_ops=4000)
    now[0] = 1019.0
    rig.engine.metrics.collect()
    pts = rig.engine.metrics.history.datastore_series("nfs1", 995, 1030, 10)
    assert len(pts) == 1 and pts[0].values["seconds"] == 19.0
    rate, secs = pts[0].values["write_iops"], pts[0].values["seconds"]
    assert rate is not None and secs is not None
    assert rate * secs == pytest.approx(4000, abs=1)


def test_a_counter_that_goes_back_is_a_new_baseline(rig: Rig) -> None:
    st = rig.hosts.iostats
    assert st is not None
    _put(rig, "nfs1", "nfs3")
    eid = _export_id(rig, "nfs1")
    st.nfs(eid, read_ops=500)
    rig.engine.metrics.collect()
    rig.engine.metrics.collect()
    st._nfs.clear()  # ganesha restarted: counters from zero
    st.nfs(eid, read_ops=5)
    col = rig.engine.metrics.collect()
    assert col.datastores == []
    st.nfs(eid, read_ops=5)
    col = rig.engine.metrics.collect()
    assert [s.counts["read_ops"] for s in col.datastores] == [5]


def test_probe_scratch_counts_for_its_datastore(rig: Rig) -> None:
    st = rig.hosts.iostats
    assert st is not None
    _put(rig, "lun1", "iscsi")
    st.zvol("tank/datastores/lun1", "zd0")
    st.zvol("tank/zds-probes/lun1-p1", "zd16")
    rig.engine.metrics.collector.probes = lambda: {"lun1": "p1"}  # type: ignore[union-attr]
    rig.engine.metrics.collect()
    st.block("zd16", reads=800, read_bytes=800 * 4096, read_ms=400)
    col = rig.engine.metrics.collect()
    (s,) = col.datastores
    assert s.probe and s.counts["read_ops"] == 800


def test_ganesha_down_is_an_error_not_a_crash(rig: Rig) -> None:
    _put(rig, "nfs1", "nfs3")
    rig.ganesha.down = True
    col = rig.engine.metrics.collect()
    assert col.errors and "ganesha" in col.errors[0]
    assert col.pools, "pools are still read"


# --- history -----------------------------------------------------------------------------

def _sample(ts: float, reads: int, name: str = "ds") -> DatastoreSample:
    return DatastoreSample(ts, 10.0, name, "tank", "nfs3",
                           {"read_ops": reads, "read_bytes": reads * 4096,
                            "read_latency_ns": reads * 1_000_000})


def test_history_is_bounded_and_sums_survive_downsampling(tmp_path: Path) -> None:
    h = History(Store(tmp_path / "m.db"))
    now = 40 * 86400.0
    old = now - FULL_KEEP - 3600  # an hour beyond full resolution
    h.add([_sample(old + 10 * i, 10) for i in range(60)], [])  # 10 minutes of samples
    h.add([_sample(now - 31 * 86400, 99)], [])  # beyond 30 days
    h.add([_sample(now - 60, 7)], [])
    h.retain(now)
    rows = h.count()["metrics_datastore"]
    assert rows == 2 + 1, rows  # 10 minutes -> two five-minute rows, + the recent one
    pts = h.datastore_series("ds", old - 1, old + 600, 600)
    assert len(pts) == 1 and pts[0].values["read_iops"] == pytest.approx(1.0)
    assert pts[0].values["read_latency_ms"] == pytest.approx(1.0)
    with h.store.connect() as db:
        res = {r[0] for r in db.execute("SELECT DISTINCT res FROM metrics_datastore")}
    assert res == {0, BUCKET}


def test_durations_and_since() -> None:
    assert parse_duration("5m", "step") == 300
    assert parse_since("1h", 10_000_000_000.0) == 10_000_000_000.0 - 3600
    assert parse_since("2026-11-23T00:00:00Z", 0) == 1795392000.0
    for bad in ("yesterday", "-5", "0s"):
        with pytest.raises(InvalidInput):
            parse_duration(bad, "step") if bad != "yesterday" else parse_since(bad, 1e9)


def test_collector_jobs_stay_bounded(rig: Rig) -> None:
    sched = rig.engine.ctx.scheduler
    now = [1_800_000_000.0]
    sched.clock = lambda: now[0]
    for _ in range(KEEP_JOBS + 25):
        now[0] += rig.engine.settings.metrics_interval
        for job in sched.tick():
            rig.engine.jobs.wait(job.id, 10)
    kept = rig.engine.jobs.list(kind="metrics.collect", limit=1000)
    assert KEEP_JOBS <= len(kept) <= KEEP_JOBS + 1
    assert all(j.state == "succeeded" for j in kept)


# --- advice ------------------------------------------------------------------------------

def _facts(**kw: object) -> adv.DatastoreFacts:
    base: dict[str, object] = dict(name="ds", pool="tank", protocol="nfs3", thin=True,
                                   properties={"recordsize": "65536", "sync": "standard"},
                                   samples=[], pool_rows=[], probes=[], window_hours=24.0)
    base.update(kw)
    return adv.DatastoreFacts(**base)  # type: ignore[arg-type]


def _writes(lat_ms: float, n: int = 20, size: int = 4096) -> list[DatastoreSample]:
    return [DatastoreSample(1000.0 + 10 * i, 10.0, "ds", "tank", "nfs3",
                            {"write_ops": 100, "write_bytes": 100 * size,
                             "write_latency_ns": int(100 * lat_ms * 1e6)}) for i in range(n)]


def test_no_evidence_no_finding() -> None:
    assert adv.advise(_facts()) == []


def test_slow_sync_writes_without_slog() -> None:
    rows = [{"ts": 1000.0, "slog": 0, "syncq_wait_write": 4_000_000}]
    (f,) = [x for x in adv.advise(_facts(samples=_writes(12.0), pool_rows=rows))
            if x.code == "sync-writes-no-slog"]
    assert f.evidence["write_latency_p99_ms"] == pytest.approx(12.0)
    assert f.evidence["pool_sync_queue_wait_mean_ms"] == 4.0 and "zpool add tank log" in f.action
    with_slog = [{"ts": 1000.0, "slog": 1}]
    assert not [x for x in adv.advise(_facts(samples=_writes(12.0), pool_rows=with_slog))
                if x.code == "sync-writes-no-slog"]
    assert not [x for x in adv.advise(_facts(samples=_writes(1.0), pool_rows=rows))
                if x.code == "sync-writes-no-slog"]


def test_pool_filling_with_rate() -> None:
    gib = 1 << 30
    rows = [{"ts": 3600.0 * i, "capacity": 85, "size": 100 * gib,
             "allocated": 85 * gib + i * gib // 24} for i in range(25)]
    f = adv.pool_filling(_facts(pool_rows=rows))
    assert f is not None and f.evidence["fill_gib_per_day"] == pytest.approx(1.0, rel=0.01)
    assert f.evidence["days_until_full"] == pytest.approx(14.0, abs=1.0)
    assert adv.pool_filling(_facts(pool_rows=[{**rows[0], "capacity": 50}])) is None


def test_small_io_on_large_recordsize() -> None:
    f = adv.io_size_vs_block(_facts(samples=_writes(1.0)))
    assert f is not None and f.evidence["mean_io_bytes"] == 4096
    assert adv.io_size_vs_block(_facts(samples=_writes(1.0, size=65536))) is None


def test_thin_lun_without_unmap() -> None:
    s = [DatastoreSample(3600.0 * i, 10.0, "lun", "tank", "iscsi",
                         {"write_ops": 1000, "write_bytes": 1 << 29}) for i in range(4)]
    f = adv.thin_without_unmap(_facts(protocol="iscsi", samples=s))
    assert f is not None and f.evidence["unmap_commands"] == 0
    s.append(DatastoreSample(4 * 3600.0, 10.0, "lun", "tank", "iscsi", {"discards": 1}))
    assert adv.thin_without_unmap(_facts(protocol="iscsi", samples=s)) is None


def test_arc_and_probe_findings() -> None:
    rows = [{"ts": 1.0, "arc_hits": 5000, "arc_misses": 15000}]
    f = adv.arc_hit_rate(_facts(pool_rows=rows))
    assert f is not None and f.evidence["arc_hit_ratio"] == 0.25
    probes = [{"id": "a", "profile": "randread-4k-qd32", "target": "nfs",
               "started_at": "2026-11-01T00:00:00Z", "iops": 3000.0},
              {"id": "b", "profile": "randread-4k-qd32", "target": "nfs",
               "started_at": "2026-11-20T00:00:00Z", "iops": 1000.0}]
    p = adv.probe_slower(_facts(probes=probes))
    assert p is not None and p.evidence["slower_by"] == 3.0 and p.evidence["last_id"] == "b"
    assert adv.probe_slower(_facts(probes=probes[:1])) is None


# --- API ---------------------------------------------------------------------------------

def test_metrics_api_and_readonly_scrape(rig: Rig, client: TestClient) -> None:
    st = rig.hosts.iostats
    assert st is not None
    ok = client.put("/api/v1/datastores/nfs1", json={
        "protocol": "nfs3", "size": "1G", "nfs": {"clients": [{"match": "127.0.0.1"}]}})
    assert ok.status_code == 201
    eid = ok.json()["nfs"]["export_id"]
    rig.engine.metrics.collect()
    st.nfs(eid, read_ops=120, read_bytes=120 * 8192, read_latency_ns=120 * 500_000)
    rig.engine.metrics.collect()

    series = client.get("/api/v1/datastores/nfs1/metrics", params={"since": "10m"})
    assert series.status_code == 200
    assert sum(p["values"]["read_iops"] for p in series.json()["points"]) > 0
    latest = client.get("/api/v1/metrics/datastores").json()
    assert [m["name"] for m in latest] == ["nfs1"] and latest[0]["read_latency_ms"] == 0.5
    assert client.get("/api/v1/pools/tank/metrics").status_code == 200
    assert client.get("/api/v1/datastores/nope/metrics").status_code == 404
    # a step too fine for the window is widened to 1000 points, not refused
    fine = client.get("/api/v1/datastores/nfs1/metrics", params={"step": "1s", "since": "2h"})
    assert fine.status_code == 200 and fine.json()["step"] == 7200 / 1000
    assert client.get("/api/v1/datastores/nfs1/advice").json() == []

    ro = rig.engine.tokens.create("grafana", "readonly")
    page = client.get("/metrics", headers={"Authorization": f"Bearer {ro}"})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/plain")
    assert ('zds_datastore_read_ops_total{datastore="nfs1",pool="tank",protocol="nfs3"} 120.0'
            in page.text)
    assert client.get("/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401
    who = client.get("/api/v1/system/whoami", headers={"Authorization": f"Bearer {ro}"})
    assert who.json() == {"name": "grafana", "role": "readonly"}


def test_an_idle_datastore_has_its_series_at_zero_from_the_first_collection(
        rig: Rig, client: TestClient) -> None:
    # ganesha lists an export in GetNFSIO only once it had I/O: without its own totals an
    # idle NFS datastore was missing from /metrics until its first read or write
    for name, body in (("idle-nfs", {"protocol": "nfs3", "size": "1G",
                                     "nfs": {"clients": [{"match": "127.0.0.1"}]}}),
                       ("idle-lun", {"protocol": "iscsi", "size": "1G"})):
        assert client.put(f"/api/v1/datastores/{name}", json=body).status_code == 201
    rig.engine.metrics.collect()
    page = client.get("/metrics").text
    for name, proto in (("idle-nfs", "nfs3"), ("idle-lun", "iscsi")):
        for series in ("read_ops", "write_ops", "write_bytes"):
            line = f'zds_datastore_{series}_total{{datastore="{name}",pool="tank",' \
                   f'protocol="{proto}"}} 0.0'
            assert line in page, (line, page)
    assert client.delete("/api/v1/datastores/idle-nfs", params={"wait": 10}).status_code == 202
    rig.engine.metrics.collect()
    assert 'datastore="idle-nfs"' not in client.get("/metrics").text


def test_without_per_export_counters_nfs_datastores_have_no_series(
        rig: Rig, client: TestClient) -> None:
    # knfsd keeps no per-export counters: its NFS datastores must not show series that
    # stay at zero whatever the I/O (a lie a dashboard cannot tell from an idle datastore)
    st = rig.hosts.iostats
    assert st is not None
    st.nfs_counters = False
    for name, body in (("kn-nfs", {"protocol": "nfs3", "size": "1G",
                                   "nfs": {"clients": [{"match": "127.0.0.1"}]}}),
                       ("kn-lun", {"protocol": "iscsi", "size": "1G"})):
        assert client.put(f"/api/v1/datastores/{name}", json=body).status_code == 201
    rig.engine.metrics.collect()
    page = client.get("/metrics").text
    assert 'datastore="kn-lun"' in page
    assert 'datastore="kn-nfs"' not in page


def test_console_is_static_and_offline(client: TestClient) -> None:
    page = client.get("/ui", headers={"Authorization": ""})
    assert page.status_code == 200 and "default-src 'self'" in page.headers[
        "content-security-policy"]
    for asset in ("console.js", "chart.js", "console.css"):
        r = client.get(f"/ui/static/{asset}")
        urls = set(re.findall(r"https?://[^\s\"')]+", r.text))
        assert r.status_code == 200 and urls <= {"http://www.w3.org/2000/svg"}, urls
    assert "fetch(API" in client.get("/ui/static/console.js").text


def test_grafana_dashboard_uses_only_series_we_export(rig: Rig) -> None:
    import json

    from appliance.metrics.prometheus import exposition

    st = rig.hosts.iostats
    assert st is not None
    _put(rig, "nfs1", "nfs3")
    st.pool_waits["tank"] = {"total_wait_write": 2_000_000, "disk_wait_write": 1_000_000}
    rig.engine.metrics.collect()
    st.nfs(_export_id(rig, "nfs1"), read_ops=1)
    rig.engine.metrics.collect()
    page = exposition(rig.engine.metrics.collector).decode()
    exported = {ln.split("{")[0].split(" ")[0] for ln in page.splitlines()
                if ln.startswith("zds_")}
    dash = json.loads((Path(__file__).parents[2] / "docs" / "grafana" /
                       "zds-dashboard.json").read_text())
    used = {m for p in dash["panels"] for t in p["targets"]
            for m in re.findall(r"zds_[a-z0-9_]+", t["expr"])}
    used |= {m for v in dash["templating"]["list"] for m in
             re.findall(r"zds_[a-z0-9_]+", str(v.get("query", "")))}
    assert used and used <= exported, used - exported


def test_a_probes_last_io_is_kept_when_its_export_goes(rig: Rig) -> None:
    """The probe's export (and its counters) vanish at cleanup: the reading taken just
    before lands in the next sample."""
    st = rig.hosts.iostats
    assert st is not None
    _put(rig, "nfs1", "nfs3")
    c = rig.engine.metrics.collector
    assert c is not None
    from appliance.host.ganesha_config import ClientRule, ExportSpec

    path = "/tank/zds-probes/nfs1-p7"
    rig.ganesha.missing_paths.discard(path)
    rig.ganesha.add_export(ExportSpec(65500, path, path, (3,), (ClientRule(("127.0.0.1",),
                                                                             "RW"),)))
    c.probes = lambda: {"nfs1": "p7"}
    rig.engine.metrics.collect()
    st.nfs(65500, read_ops=300)
    rig.engine.metrics.collect()
    st.nfs(65500, read_ops=200)  # after the last collection...
    c.checkpoint_probe("nfs1", "p7")  # ...the probe's cleanup reads it
    rig.ganesha.remove_export(65500)
    st._nfs.pop((65500, "NFSv3"))
    c.probes = dict
    col = rig.engine.metrics.collect()
    (s,) = col.datastores
    assert s.counts["read_ops"] == 200 and s.probe
    assert c.totals.datastores["nfs1"]["read_ops"] == 500


def test_real_appliance_zvol_counters(tmp_path: Path) -> None:
    """What the appliance showed after 4000 direct 4K writes to a fresh zvol (e2e)."""
    text = (Path(__file__).parent / "fixtures" / "appliance" / "zvol-counters.txt").read_text()
    zd0 = parse_diskstats(text)["zd0"]
    assert (zd0.writes, zd0.write_sectors * 512) == (4000, 4000 * 4096)
    root = tmp_path / "configfs"
    for line in text.splitlines():
        if line.startswith("/sys/kernel/config/target/"):
            path, _, value = line.partition(" ")
            f = root / path.removeprefix("/sys/kernel/config/target/")
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(value + "\n")
    (row,) = read_acl_stats(str(root))
    assert row.initiator == "iqn.2026-11.org.example:e2e-metrics" and row.commands == 0
