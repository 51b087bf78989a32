"""The HA test bed, proven with real Pacemaker and real fencing (tests/e2e/habed.py,
docs/ha.md "Test bed"): two ZDS nodes in a corosync two_node pair, fence_scsi on LUNs a
third guest serves with LIO, a ZFS pool with multihost=on on them, and a group (the ZDS
agent ocf:zds:pool, the floating address, a small web server on it) a client on the
service segment uses: an NFSv3 datastore and an iSCSI LUN made through ZDS's API, read
and written through the VIP.

Then the unplanned failure: the active node's QEMU is killed (-9); the survivor must
notice, fence it (its key leaves every LUN), import the pool (waiting out the MMP
activity check) and serve its datastores with the same export path, IQN and serial,
bring the address and the service up, and the client reads the same data again through
its NFS mount and its iSCSI session. Through it all the client writes numbered records
to the mount and the LUN; every one whose write returned must be read back from the
survivor (acknowledged writes lost: 0). Each step's time is printed (from the survivor's
journal, on the host's clock). Then the killed node boots again and rejoins as standby,
having forgotten the pool's datastores, a planned failover moves the pool back,
both nodes lose power together and boot together (one imports the pool), and the
corosync link between them is cut (a split brain: the node serving fences the other,
which reboots itself and, booted again alone, can neither write to the disks nor import
the pool), and, last, the pair is turned to a quorum device (corosync-qnetd on the jbod)
and cut again (the vote decides: no fence race).

The default run has the bed (restored configured, conftest/habed: about 25 s instead of
9-12 min) and its first unplanned round, tests 1 to 2 (issue 21); the rejoin, the
planned failover, the power loss of both, the split brain and the quorum device (about
30 min more under TCG) run with ZDS_E2E_HA=1. ZDS_E2E_HA=0 skips
the module."""

from __future__ import annotations

import concurrent.futures
import os
import ssl
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from appliance.transports.nfs import export_block
from tests.e2e.habed import (
    CLIENT_INITIATOR,
    CLUSTER,
    DATA,
    JBOD_STORAGE_IP,
    NODES,
    PAIR_TOKEN_FILE,
    POOL,
    VIP,
    HaBed,
    QuorumDevice,
    fence_scsi_key,
    use_quorum_device,
)
from tests.e2e.harounds import (
    CLIENT_GROUP,
    GROUP_RSCS,
    LUN_DS,
    LUN_TEXT,
    MOUNT,
    NFS_DS,
    NFS_TEXT,
    Served,
    SplitBrain,
    Takeover,
    client_scsi,
    identity,
    kill_round,
    lun_body,
    lun_read,
    make_datastore,
    nfs_body,
    planned_round,
    rejoin,
    serve,
    split_brain_round,
)
from tests.e2e.rest import api_client, ok

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.environ.get("ZDS_E2E_HA") == "0", reason="ZDS_E2E_HA=0"),
]
# the rounds after the first: opt-in, each costs minutes of three emulated guests
after_the_first_round = pytest.mark.skipif(
    os.environ.get("ZDS_E2E_HA") != "1",
    reason="the rejoin and the planned failover are opt-in (ZDS_E2E_HA=1)")
KEYS = {n.name: fence_scsi_key(CLUSTER, n.name) for n in NODES}
# what test_1b served, for the takeovers' checks
SERVED: list[Served] = []


# a LUN with CHAP (test_1b makes it; the takeovers check it is served with them)
CHAP_DS = "hachap"
CHAP = {"user": "esx-ha", "secret": "habed-chap-1234"}


def chap_body() -> dict[str, Any]:
    return {"protocol": "iscsi", "size": "1G", "pool": POOL,
            "iscsi": {"initiators": [CLIENT_INITIATOR], "chap": CHAP}}


# the client's own persistent-reservation key on the LUN, registered with APTPL (as VMFS
# and Windows clusters register theirs); LIO writes keys in decimal
CLIENT_PR_KEY = 0x5A5A
SGP = "sg_persist --no-inquiry"


def client_pr_keys(bed: HaBed, dev: str) -> str:
    """The keys registered on the LUN, as the client reads them."""
    return client_scsi(bed, f"{SGP} --in --read-keys {dev}")


def check_pr_key_kept(bed: HaBed, node: str, served: Served) -> None:
    """The client's APTPL registration is still there, and ``node`` keeps its file on
    the pool (the link under LIO's dbroot points into hapool/datastores)."""
    keys = client_pr_keys(bed, served.dev)
    assert hex(CLIENT_PR_KEY) in keys, keys
    serial = served.lun[4]
    where = bed.nodes[node].check(f"readlink -f /etc/rtslib-fb-target/pr/aptpl_{serial}")
    assert where.strip().startswith(f"/{POOL}/datastores/"), where


def check_chap_served(bed: HaBed, node: str) -> None:
    """The CHAP LUN is served by ``node`` with the credentials it found on the pool
    (before, an adopted CHAP datastore waited as ``error`` for a PUT)."""
    with bed.api(node) as api:
        chap = ok(api.get(f"/datastores/{CHAP_DS}"))
    assert chap["state"] == "ready" and chap["serving"], chap
    assert chap["iscsi"]["chap_user"] == CHAP["user"], chap


def check_group_kept(bed: HaBed, node: str) -> None:
    """The initiator group the LUN names is on ``node`` with the client in it: the node
    that took the pool made it from the pool's copy (before, it served the LUN to no
    host)."""
    with bed.api(node) as api:
        group = ok(api.get(f"/initiator-groups/{CLIENT_GROUP}"))
    assert group["initiators"] == [CLIENT_INITIATOR], group
    assert LUN_DS in group["used_by"], group


def check_served_through(t: Takeover, served: Served) -> None:
    """What every takeover must keep: the same identities on the new node, the client's
    record and block read back through the mount and session it had, no drift, every
    record acknowledged before, during and after the move read back at its place
    (acknowledged writes lost: 0), with records acknowledged on both sides of it, and
    no write that failed instead of waiting."""
    assert t.identities == {"nfs": served.nfs, "lun": served.lun}, t.identities
    assert t.extra["nfs_text"] == NFS_TEXT, t.extra
    assert t.extra["lun_text"] == LUN_TEXT, t.extra
    # the same LUN to the client's SCSI layer: NAA id, target port, relative port,
    # target port group, and that group active/optimized (ALUA) on the new node
    assert t.extra["scsi"] == served.scsi, (t.extra["scsi"], served.scsi)
    assert t.drift_in_sync, t
    for kind, w in t.writes.items():
        print(f"[e2e] {kind} writer: {w.before + w.after} records acknowledged ({w.after} "
              f"after the {t.kind} takeover was set off, the first {w.first_after} s after "
              f"it), longest wait for one {w.longest_wait:.1f} s, {len(w.lost)} lost, "
              f"failed writes: {len(w.errors)} {w.errors[:3]}")
    assert set(t.writes) == {"nfs", "lun"}, t.writes
    for kind, w in t.writes.items():
        assert w.before > 0 and w.after > 0, (kind, w)
        assert w.lost == (), f"{kind}: acknowledged records lost: {w.lost}"
        # a pause, never an error: the mount is hard, the session waits 900 s
        assert w.errors == (), f"{kind}: writes failed through the takeover: {w.errors}"


def test_1_pair_formed_and_every_node_registered_on_every_lun(ha_bed: HaBed) -> None:
    print(f"\n[e2e] HA bed up: {ha_bed.timings}")
    a, b = (n.name for n in NODES)
    s = ha_bed.status(a)
    assert set(s.online) == {a, b} and s.quorum and not s.failed, s
    active = ha_bed.active(a)
    assert active in (a, b), s
    # two_node with wait_for_all, as configured
    q = ha_bed.nodes[a].check("corosync-quorumtool -s")
    assert "2Node" in q and "WaitForAll" in q and "Quorate" in q, q
    # self-fencing armed on both: the watchdog daemon runs fence_scsi's check, which
    # knows the devices and key unfencing registered; what the check costs, measured
    # as the CPU time of the daemon's finished children over its life
    for on in (a, b):
        node = ha_bed.nodes[on]
        assert node.check("systemctl is-active watchdog").strip() == "active"
        assert node.check("readlink /etc/watchdog.d/fence_scsi_check_hardreboot").strip() \
            == "/usr/share/cluster/fence_scsi_check_hardreboot"
        assert node.check("cat /var/run/cluster.key").strip().lstrip("0") == KEYS[on]
        cpu = node.check(
            "p=$(systemctl show -p MainPID --value watchdog); "
            "awk -v t=$(getconf CLK_TCK) -v up=$(cut -d' ' -f1 /proc/uptime) "
            "'{print ($16+$17)/t, up-$22/t}' /proc/$p/stat").split()
        print(f"[e2e] {on}: the self-check used {float(cpu[0]):.1f} s of CPU in "
              f"{float(cpu[1]):.0f} s ({100 * float(cpu[0]) / float(cpu[1]):.1f}% of a vCPU)")
    # unfencing registered both nodes' keys on every LUN, and one holds the reservation
    # that lets only registered nodes write
    for on in (a, b):
        for dev, keys in ha_bed.keys(on).items():
            assert sorted(keys) == sorted(KEYS.values()), (on, dev, keys)
    for dev, res in ha_bed.reservations(a).items():
        assert res is not None and res[0] in KEYS.values(), (dev, res)
        assert res[1] == "Write Exclusive, registrants only", (dev, res)
    assert ha_bed.nodes[active].check(f"zpool get -H -o value multihost {POOL}").strip() == "on"
    rc, body = ha_bed.client_get()
    assert rc == 0 and body.strip() == DATA, body


def test_1a_the_same_certificate_and_token_on_both_nodes(ha_bed: HaBed) -> None:
    """One API on both nodes (what the ha role's ha__tls_cert_file/key and ha__api_tokens
    set): each node's API presents the pair's certificate, naming the service address,
    and takes the pair's token. A client of the service address finds the same server
    and keeps its token whichever node holds the pool."""
    token = ha_bed.nodes[NODES[0].name].check(f"cat {PAIR_TOKEN_FILE}").strip()
    seen: dict[str, bytes] = {}
    for name, app in ha_bed.nodes.items():
        url = urlsplit(app.api_url)
        pem = ssl.get_server_certificate((url.hostname or "127.0.0.1", url.port or 443))
        seen[name] = ssl.PEM_cert_to_DER_cert(pem)
        with api_client(app.api_url, token) as api:
            assert ok(api.get("/cluster"))["node"] == name
    assert len(set(seen.values())) == 1, "the nodes present different certificates"
    text = ha_bed.nodes[NODES[0].name].check(
        "openssl x509 -noout -ext subjectAltName -in /etc/zds/tls/cert.pem")
    assert f"IP Address:{VIP}" in text, text


def test_1b_zds_serves_nfs_and_iscsi_through_the_vip(ha_bed: HaBed) -> None:
    active = ha_bed.active()
    standby = ha_bed.peer(active)
    with ha_bed.api(standby) as api:
        # a change on the node without the pool: 503 naming the node that has it
        r = api.put(f"/datastores/{NFS_DS}", json=nfs_body())
        assert r.status_code == 503, r.text
        err = r.json()["error"]
        assert err["code"] == "not_active" and err["detail"]["active"] == active, err
        h = ok(api.get("/system/health"))
        assert h["cluster"]["role"] == "standby" and h["cluster"]["peer"] == active, h
        r = api.put(f"/datastores/{LUN_DS}", json=lun_body())
        assert r.status_code == 503, r.text
    served = serve(ha_bed, active)
    # LIO's implicit ALUA: one target port group, active/optimized, so ESXi claims the
    # LUN with VMW_SATP_ALUA; the NAA id is the one the API gave
    scsi = served.scsi.lower()
    assert "active/optimized" in scsi and "target port group" in scsi, served.scsi
    assert served.lun[5].split(".", 1)[1] in scsi, (served.lun, served.scsi)
    # the client registers a key with APTPL: LIO writes it to the file on the pool
    ha_bed.client.check(f"{SGP} --out --register --param-sark={hex(CLIENT_PR_KEY)} "
                        f"--param-aptpl {served.dev}", timeout=120)
    aptpl = ha_bed.nodes[active].check(
        f"cat /{POOL}/datastores/.zds-lio-pr/aptpl_{served.lun[4]}")
    assert f"sa_res_key={CLIENT_PR_KEY}" in aptpl, aptpl
    check_pr_key_kept(ha_bed, active, served)
    with ha_bed.api(active) as api:
        c = ok(api.get("/cluster"))
        assert c["node"] == active and c["pools"][0]["node"] == active, c
        # a LUN with CHAP: its credentials are kept on the pool (root only), never in a
        # ZFS property, so the node that takes the pool serves it at once
        made = make_datastore(api, CHAP_DS, chap_body())
        assert made["serving"] and made["iscsi"]["chap_user"] == CHAP["user"], made
    node = ha_bed.nodes[active]
    mode = node.check(f"stat -c %a /{POOL}/datastores/.zds-secrets/{CHAP_DS}.json").strip()
    assert mode == "600", mode
    props = node.check(f"zfs get -H -o value all {POOL}/datastores/{CHAP_DS}")
    assert CHAP["secret"] not in props
    # the pacemaker adapter's contract, on the real cluster (the active node)
    out = ha_bed.nodes[active].check(
        f"/opt/zds/venv/bin/python -m appliance.host.contract.cluster_checks {POOL}",
        timeout=300)
    assert "ok   cluster" in out, out
    SERVED.append(served)
    print(f"\n[e2e] served by {active}: {served}")


def start_held_probe(bed: HaBed, node: str) -> str:
    """A probe of the NFS datastore on ``node`` that runs far longer than the round (fio
    on a scratch of the pool): a job about the pool that is running when the node dies.
    Returns its id once it runs, after checking that the pool carries its note."""
    with bed.api(node) as api:
        job = ok(api.post("/probes", json={
            "profile": "randread-4k-qd32", "datastore": NFS_DS, "target": "local",
            "overrides": {"runtime": 1800, "size": "64m"}}), 202)
        deadline = time.monotonic() + 180
        while ok(api.get(f"/jobs/{job['id']}"))["state"] != "running":
            assert time.monotonic() < deadline, f"probe {job['id']} did not start"
            time.sleep(2)
    note = bed.nodes[node].check(f"zfs get -H -o value zds:job:{job['id']} {POOL}")
    assert f'"node":"{node}"' in note and '"kind":"probe"' in note, note
    return str(job["id"])


def test_2_kill_active_node_survivor_fences_imports_and_serves(ha_bed: HaBed) -> None:
    served = SERVED[0] if SERVED else None
    # a job running on the node that dies: the survivor must say it was interrupted
    held = start_held_probe(ha_bed, ha_bed.active()) if served else ""
    t = kill_round(ha_bed, served)
    victim, survivor = t.source, t.target
    rc, body = ha_bed.client_get()
    assert rc == 0 and body.strip() == DATA, body

    # fenced: the victim's key left every LUN, the survivor's stayed and holds the
    # reservation (preempt-and-abort hands it over when the victim held it)
    for dev, keys in ha_bed.keys(survivor).items():
        assert keys == [KEYS[survivor]], (dev, keys)
    for dev, res in ha_bed.reservations(survivor).items():
        assert res == (KEYS[survivor], "Write Exclusive, registrants only"), (dev, res)
    # pacemaker asked for a reboot; fence_scsi cannot, so its fencer did "off"
    history = ha_bed.fence_history(survivor, victim)
    assert any(e.action in ("reboot", "off") and e.status == "success"
               and e.delegate == survivor for e in history), history
    s = ha_bed.status(survivor)
    assert s.unclean == () and victim not in s.online, s

    tl = t.timeline
    assert tl is not None
    fails, total = t.client_reads
    print(f"\n[e2e] failover {victim} -> {survivor} (seconds after the kill on the "
          f"survivor's clock, +-{t.extra['clock_offset_err']}): {tl.summary()}\n[e2e] "
          f"crm_mon showed the group on {survivor} {t.group_on_target:.1f} s after the kill "
          f"(polling); the client could not read for {t.client_outage:.1f} s ({fails} "
          f"failed reads of {total}); MMP: interval {t.mmp[0]} ms x {t.mmp[1]} import "
          f"intervals, import_delay {t.import_delay_ns} ns")
    assert tl.complete(), tl
    # fencing came before the import, and the import waited out the MMP activity check
    assert tl.fenced is not None and tl.fenced <= tl.start_of(GROUP_RSCS[0]), tl
    assert tl.started(GROUP_RSCS[0]) - tl.start_of(GROUP_RSCS[0]) >= \
        t.mmp[0] * t.mmp[1] / 1000 * 0.9, tl

    # what pacemaker printed, kept beside the serial logs: the unit tests' fixtures
    # (tests/unit/fixtures/pacemaker) are in this format
    keep = Path(os.environ.get("ZDS_E2E_KEEP_LOG", "/tmp/zds-e2e-serial.log"))
    for name, cmd in (("crm_mon", "crm_mon --one-shot --inactive --output-as=xml"),
                      ("cib_resources", "cibadmin --query --scope resources"),
                      ("stonith_history",
                       "stonith_admin --history '*' --verbose --output-as=xml")):
        rc, out = ha_bed.nodes[survivor].exec(cmd, timeout=120)
        keep.with_name(f"{keep.stem}-habed-{name}.xml").write_text(out)

    # the survivor serves the same datastores (export id and path, IQN, serial), and
    # every record acknowledged through the kill is there
    if served:
        print(f"[e2e] after the takeover the client read NFS back in "
              f"{t.extra['nfs_read_s']} s and the LUN in {t.extra['lun_read_s']} s (after "
              f"crm_mon showed the group); the survivor's take: {t.last_takeover}")
        check_served_through(t, served)
        assert t.last_takeover and t.last_takeover["fenced"] == victim, t.last_takeover
        # the client's reservation key came along with the pool (APTPL on the pool)
        check_pr_key_kept(ha_bed, survivor, served)
        # the probe that ran on the victim reads interrupted on the survivor, under its
        # id, through the address the client used; the pool carries no note after
        with ha_bed.api(survivor) as api:
            job = ok(api.get(f"/jobs/{held}"))
        print(f"[e2e] the victim's probe job on the survivor: {job['state']}, {job['error']}")
        assert job["state"] == "failed" and job["kind"] == "probe", job
        assert job["error"]["code"] == "interrupted", job
        assert job["error"]["detail"]["node"] == victim, job
        notes = ha_bed.nodes[survivor].check(f"zfs get -H -o property all {POOL}")
        assert "zds:job:" not in notes, notes
        check_chap_served(ha_bed, survivor)
        check_group_kept(ha_bed, survivor)

    # a datastore the survivor makes takes its export id from the survivor's own block
    # (its corosync nodeid, read with crm_node from corosync.conf), never an id the
    # victim could have given on a pool of its own (docs/ha.md, "Export ids in a pair")
    first, last = export_block(next(n.nodeid for n in NODES if n.name == survivor))
    with ha_bed.api(survivor) as api:
        made = make_datastore(api, "haids", nfs_body())
        try:
            assert first <= made["nfs"]["export_id"] <= last, (survivor, made["nfs"])
        finally:
            ok(api.delete("/datastores/haids", params={"wait": 300, "force": True}), 202)


@after_the_first_round
def test_3_killed_node_boots_again_and_rejoins_as_standby(ha_bed: HaBed) -> None:
    r = rejoin(ha_bed, set(KEYS.values()))
    up = ha_bed.peer(r.node)
    # unfenced again (its key back on every LUN), and the group stays where it is
    keys = ha_bed.keys(up)
    assert all(sorted(k) == sorted(KEYS.values()) for k in keys.values()), keys
    s = ha_bed.status(up)
    assert all(s.node_of(rsc) == up for rsc in GROUP_RSCS), s
    assert not r.imported_on_its_own, f"{r.node} imported the pool on its own"
    if SERVED:
        # it forgot the pool's datastores (the pool carries them) and says standby
        with ha_bed.api(r.node) as api:
            names = [d["name"] for d in ok(api.get("/datastores"))]
            assert NFS_DS not in names and LUN_DS not in names, names
            deadline = time.monotonic() + 120
            h = ok(api.get("/system/health"))
            while (h.get("cluster") or {}).get("role") != "standby" \
                    and time.monotonic() < deadline:
                time.sleep(5)
                h = ok(api.get("/system/health"))
            assert h["cluster"]["role"] == "standby" and h["cluster"]["peer"] == up, h
    print(f"\n[e2e] {r.node} booted again in {r.booted:.1f} s, online in the cluster after "
          f"{r.online:.1f} s, its key back after {r.unfenced:.1f} s; VIP {VIP} still on {up}")


@after_the_first_round
def test_4_planned_failover_moves_the_pool_with_the_same_identities(ha_bed: HaBed) -> None:
    """POST /cluster/failover on the node holding the pool while the client writes
    numbered records: pacemaker stops the group there (the agent's release: exports and
    LUNs withdrawn, pool exported) and starts it on the other node (take: no MMP wait for
    a cleanly exported pool); the move's pin is cleared; the client's mount and session
    carry on, and no record acknowledged is lost."""
    if not SERVED:
        pytest.skip("test_1b did not serve the datastores")
    t = planned_round(ha_bed, SERVED[0])
    src, dst = t.source, t.target
    job: dict[str, Any] = t.job or {}
    assert job.get("state") == "succeeded", job
    assert job["result"]["from"] == src and job["result"]["to"] == dst, job
    assert t.group_on_target >= 0, ha_bed.status(dst)
    constraints = ha_bed.nodes[dst].check("cibadmin --query --scope constraints")
    assert "cli-prefer" not in constraints, constraints  # the move's pin was cleared
    rc, out = ha_bed.nodes[src].exec(f"zpool list -H {POOL}")
    assert rc != 0, f"{src} still has the pool: {out}"
    with ha_bed.api(src) as api:
        left = [d["name"] for d in ok(api.get("/datastores"))]
    print(f"\n[e2e] planned failover {src} -> {dst}: job {t.extra['job_s']} s "
          f"({job['result']}); take on {dst}: {t.last_takeover}")
    check_served_through(t, SERVED[0])
    check_pr_key_kept(ha_bed, dst, SERVED[0])
    check_chap_served(ha_bed, dst)
    check_group_kept(ha_bed, dst)
    assert NFS_DS not in left and LUN_DS not in left, left


@after_the_first_round
def test_5_both_nodes_lose_power_and_boot_at_once_one_imports(ha_bed: HaBed) -> None:
    """Both nodes' QEMUs are killed together and started together (a rack's power
    coming back): the pair forms again, exactly one node imports the pool and serves
    it, the other is standby, both keys are back on every LUN, and the client reads its
    record and block through the mount and session it had, with the same identities."""
    for app in ha_bed.nodes.values():
        app.kill()
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(ha_bed.nodes)) as pool:
        for done in [pool.submit(app.boot_again) for app in ha_bed.nodes.values()]:
            done.result()
    booted = time.monotonic() - t0
    first = NODES[0].name
    s = ha_bed.wait_status(
        first, lambda s: set(s.online) == set(ha_bed.nodes)
        and len({s.node_of(r) for r in GROUP_RSCS}) == 1 and all(
            s.node_of(r) for r in GROUP_RSCS), timeout=900, what="serving on one node")
    serving = time.monotonic() - t0
    holder = s.node_of(GROUP_RSCS[0])
    imported = sorted(n for n, app in ha_bed.nodes.items()
                      if app.exec(f"zpool list -H {POOL}")[0] == 0)
    assert imported == [holder], f"the pool is imported on {imported}, served by {holder}"
    deadline = time.monotonic() + 300
    keys = ha_bed.keys(holder)
    while not all(sorted(k) == sorted(KEYS.values()) for k in keys.values()):
        assert time.monotonic() < deadline, f"not both keys back after 300 s: {keys}"
        time.sleep(5)
        keys = ha_bed.keys(holder)
    deadline = time.monotonic() + 120
    while ha_bed.client_get()[0] != 0:
        assert time.monotonic() < deadline, "the client cannot read through the VIP"
        time.sleep(2)
    with ha_bed.api(ha_bed.peer(holder)) as api:
        h = ok(api.get("/system/health"))
    print(f"\n[e2e] both nodes killed and started together: booted in {booted:.1f} s, "
          f"the group on {holder} {serving:.1f} s after the start; the other says "
          f"{(h.get('cluster') or {}).get('role')}")
    if SERVED:
        served = SERVED[0]
        with ha_bed.api(holder) as api:
            got = {k: identity(ok(api.get(f"/datastores/{n}")))
                   for k, n in (("nfs", NFS_DS), ("lun", LUN_DS))}
        assert got == {"nfs": served.nfs, "lun": served.lun}, got
        assert ha_bed.client.check(f"timeout 600 cat {MOUNT}/record",
                                   timeout=660).strip() == NFS_TEXT
        assert lun_read(ha_bed, served.dev) == LUN_TEXT
        check_pr_key_kept(ha_bed, holder, served)


def check_split_brain(bed: HaBed, r: SplitBrain) -> None:
    """What every split brain must end with, whichever rule decided it: the node serving
    kept the group and its key on every disk, the other was fenced, and, booted again
    alone, had no quorum, could not write to the disks or import the pool; it rejoined
    holding nothing, and no acknowledged write was lost."""
    print(f"\n[e2e] split brain (the cluster link cut at {r.fenced}'s port): {r.serving} "
          f"saw {r.fenced} gone at {r.detected} s and fenced it at {r.fenced_at} s, kept the "
          f"group {r.group_after}; {r.fenced}'s new boot began {r.self_fenced} s after the "
          f"cut, it answered at {r.booted} s (quorate alone: {r.quorum_alone}); "
          f"its write: rc {r.write_refused[0]}, kernel: {r.write_refused[1]!r}; its import: "
          f"rc {r.import_refused[0]}: {r.import_refused[1].strip()!r}; rejoined at "
          f"{r.rejoined} s, unfenced at {r.unfenced} s")
    # exactly one node served: the one that did, without the group ever leaving it
    assert set(r.group_after.values()) == {r.serving}, r.group_after
    # the fenced node's key left every LUN; the serving node's stayed
    assert all(k == [KEYS[r.serving]] for k in r.keys_after.values()), r.keys_after
    assert not r.quorum_alone and not r.imported_alone, r
    assert r.write_refused[0] != 0 and "reservation conflict" in r.write_refused[1], r
    assert r.import_refused[0] != 0, r.import_refused
    assert "pool is imported on host" in r.import_refused[1], r.import_refused
    rc, _ = bed.nodes[r.fenced].exec(f"zpool list -H {POOL}")
    assert rc != 0, f"{r.fenced} holds the pool after rejoining"
    s = bed.status(r.serving)
    assert all(s.node_of(rsc) == r.serving for rsc in GROUP_RSCS), s
    # the serving node kept its key on every disk: no side of the mirror failed there
    # (a tie-breaker shorter than the fencing lets each node fence the other on one LUN)
    health = bed.nodes[r.serving].check(f"zpool status -x {POOL}")
    assert "is healthy" in health, health
    if SERVED:
        for kind, w in r.writes.items():
            print(f"[e2e] {kind} writer through the split brain: {w.before + w.after} "
                  f"acknowledged, longest wait {w.longest_wait:.1f} s, {len(w.lost)} lost, "
                  f"failed: {len(w.errors)}")
        assert set(r.writes) == {"nfs", "lun"}, r.writes
        for kind, w in r.writes.items():
            assert w.after > 0 and w.lost == () and w.errors == (), (kind, w)


@after_the_first_round
def test_6_split_brain_the_serving_node_wins_the_other_is_fenced_and_refused(
        ha_bed: HaBed) -> None:
    """The corosync link alone is cut (both nodes alive, the disks shared): the node
    serving the pool fences the other first (priority-fencing-delay holds back the
    other's attempt) and serves on without a pause the client would call an outage; the
    fenced node finds its key gone and reboots itself (the watchdog's
    fence_scsi_check_hardreboot). Back up with the link still cut it has no
    quorum and serves nothing, its writes to the LUNs fail with a reservation conflict
    and ZFS's MMP refuses its import; with the link back it rejoins and is unfenced."""
    served = SERVED[0] if SERVED else None
    r = split_brain_round(ha_bed, served, set(KEYS.values()))
    check_split_brain(ha_bed, r)
    # the serving node won the fence race, and the other rebooted itself only after it
    # (its watchdog check found its key gone), not before
    history = ha_bed.fence_history(r.serving, r.fenced)
    assert any(e.status == "success" and e.delegate == r.serving for e in history), history
    assert r.fenced_at is not None and r.self_fenced >= r.fenced_at - 5, r


@after_the_first_round
def test_7_quorum_device_gives_the_split_to_the_serving_node_without_a_fence_race(
        ha_bed: HaBed) -> None:
    """The pair turned to a quorum device (corosync-qnetd on the jbod, reached on the
    storage segment, TLS with certificates its CA signed, ffsplit) while it serves,
    then the same cut as test 6: qnetd gives its vote to the side that has the pool
    imported (the role's heuristic), so the node serving stays quorate and fences the
    other, which is not quorate and fences no one. The tie_breaker names the idle node,
    so only the heuristic can decide for the serving one. Last in the module: the bed
    stays on the quorum device."""
    serving = ha_bed.active()
    idle = ha_bed.peer(serving)
    t0 = time.monotonic()
    use_quorum_device(ha_bed, QuorumDevice(
        JBOD_STORAGE_IP, tie_breaker=str(ha_bed.spec(idle).nodeid)))
    switched = time.monotonic() - t0
    state = {n.name: ha_bed.nodes[n.name].check("corosync-qdevice-tool -s -v")
             for n in NODES}
    shown = [line.strip() for line in state[serving].splitlines()
             if "Heuristics result" in line or "TLS active" in line]
    print(f"\n[e2e] the pair took the quorum device in {switched:.1f} s; "
          f"{serving}: {' / '.join(shown)}")
    for node, out in state.items():
        assert "State:" in out and "Connected" in out, (node, out)
        assert "TLS active: Yes" in out, (node, out)
    served = SERVED[0] if SERVED else None
    t_cut = time.time()
    offset, _ = ha_bed.clock_offset(ha_bed.nodes[serving])
    r = split_brain_round(ha_bed, served, set(KEYS.values()))
    assert r.serving == serving, r
    check_split_brain(ha_bed, r)
    # the node serving never left the primary component: qnetd's vote stayed with it
    lost = [e.message for e in ha_bed.journal(serving, t_cut + offset)
            if "non-primary component" in e.message or "Quorum lost" in e.message]
    assert not lost, lost
    # and it fenced the idle node without waiting for a tie-breaker delay
    history = ha_bed.fence_history(serving, idle)
    assert any(e.status == "success" and e.delegate == serving for e in history), history
