"""Rounds on the HA bed (tests/e2e/habed.py), one place for what the e2e module
(tests/e2e/test_ha_bed_e2e.py) checks once and bench/failover.py repeats: serve an NFS
datastore and a LUN through the VIP, kill -9 the active node while the client writes
numbered records (an unplanned takeover), boot it again until it rejoins as standby, move
the pool back with ``POST /cluster/failover`` (a planned one), cut the corosync link
between the nodes (a split brain), and read every acknowledged record back.

Each round returns its figures (Takeover, Rejoin, SplitBrain); the callers assert or
tabulate them.
Every round writes to fresh places (a new records file, the LUN's record blocks zeroed
first), so a record an earlier round left cannot stand in for one this round lost.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.e2e.habed import (
    CLIENT_INITIATOR,
    IP_RSC,
    LUN_BLOCK,
    POOL,
    POOL_RSC,
    RECORD,
    RECORDS_AT_BLOCK,
    WWW_RSC,
    HaBed,
    Timeline,
    failover_timeline,
    lost_records,
    lun_path,
)
from tests.e2e.rest import ok

GROUP_RSCS = (POOL_RSC, IP_RSC, WWW_RSC)
NFS_DS, LUN_DS = "hanfs", "halun"
MOUNT = "/mnt/hanfs"
NFS_TEXT = "zds-ha-nfs-record-1"
LUN_TEXT = "zds-ha-lun-block-1"
# the LUN blocks zeroed before each round: records 0..ZEROED_RECORDS-1, at least (a round
# acknowledges one record every 1-3 s under TCG, a few hundred at most)
ZEROED_RECORDS = 1024
MiB = 1 << 20
assert RECORDS_AT_BLOCK * LUN_BLOCK % MiB == 0  # the zeroing below writes whole MiB


def identity(ds: dict[str, Any]) -> tuple[Any, ...]:
    """What a host keys a datastore on: the export id and path, the IQN and serial."""
    nfs, iscsi = ds.get("nfs") or {}, ds.get("iscsi") or {}
    return (ds["name"], nfs.get("export_id"), nfs.get("path"), iscsi.get("iqn"),
            iscsi.get("serial"), iscsi.get("wwn"))


@dataclass
class Served:
    """The datastores the client uses through the VIP: their identities as made, the
    LUN's device on the client, and how many rounds wrote records so far."""

    nfs: tuple[Any, ...]
    lun: tuple[Any, ...]
    dev: str
    rounds: int = 0
    lun_top: int = 0  # the highest LUN record any round acknowledged
    # the LUN as the client's SCSI layer names it (scsi_identity): what ESXi keys on
    scsi: str = ""

    def records_file(self) -> str:
        """This round's records file on the mount (round 1: MOUNT/records)."""
        return f"{MOUNT}/records" if self.rounds <= 1 else f"{MOUNT}/records-{self.rounds}"


@dataclass(frozen=True)
class Writes:
    """One writer's records through a takeover: how many were acknowledged before and
    after the event, the first acknowledgement after it (seconds after the event, None:
    none), the longest wait between two acknowledgements, the acknowledged records not
    read back at their place, and what its failed writes printed (dd's errors: a write
    that failed instead of waiting the takeover out)."""

    before: int
    after: int
    first_after: float | None
    longest_wait: float
    lost: tuple[int, ...]
    errors: tuple[str, ...] = ()


def writes_through(acked: list[tuple[int, float]], event_at: float, data: bytes,
                   stride: int, first: int = 0, log: str = "") -> Writes:
    """Writes from a writer's acknowledgements ((record, time on the client's clock),
    parse_acked), the event's time on that clock, what was read back (``data`` starting
    at record ``first``, one record each ``stride`` bytes) and the writer's own output
    (``log``: only dd's error messages, one per failed write)."""
    times = [t for _, t in acked]
    after = [t for t in times if t > event_at]
    return Writes(
        before=len(times) - len(after), after=len(after),
        first_after=round(min(after) - event_at, 1) if after else None,
        longest_wait=round(max((b - a for a, b in itertools.pairwise(times)), default=0.0), 1),
        lost=tuple(lost_records(data, stride, [i for i, _ in acked], first)),
        errors=tuple(line for line in log.splitlines() if line.strip()))


@dataclass(frozen=True)
class Takeover:
    """One takeover's figures (seconds after the kill, or after the failover was asked)."""

    kind: str  # "unplanned" (kill -9) or "planned" (POST /cluster/failover)
    source: str
    target: str
    group_on_target: float  # crm_mon showed the whole group on target (polling)
    writes: dict[str, Writes]  # "nfs", "lun"
    identities: dict[str, tuple[Any, ...]]  # after the takeover, from target's API
    drift_in_sync: bool
    last_takeover: dict[str, Any] | None  # GET /cluster on target
    timeline: Timeline | None = None  # unplanned: from target's journal
    job: dict[str, Any] | None = None  # planned: the failover job
    client_outage: float = 0.0  # the client's web reads through the VIP failing
    client_reads: tuple[int, int] = (0, 0)  # (failed, total)
    import_delay_ns: int | None = None  # ZFS's MMP activity check (dbgmsg)
    mmp: tuple[int, int] = (0, 0)  # zfs_multihost_interval ms, import_intervals
    extra: dict[str, Any] = field(default_factory=dict)

    def first_io(self) -> float | None:
        """Seconds until both writers had a record acknowledged after the event (None:
        one never did): the client's first successful NFS and iSCSI I/O."""
        firsts = [w.first_after for w in self.writes.values()]
        return None if None in firsts else max(f for f in firsts if f is not None)

    def pause(self) -> float:
        """The longest the client waited for a write to return, either protocol: what a
        planned move costs it (its writes go on until the release, so the first one
        after the request returns at once)."""
        return max((w.longest_wait for w in self.writes.values()), default=0.0)

    def lost(self) -> int:
        return sum(len(w.lost) for w in self.writes.values())


@dataclass(frozen=True)
class Rejoin:
    node: str
    booted: float  # seconds until its API answered
    online: float  # ... until crm_mon on the peer showed it online
    unfenced: float  # ... until its key was back on every LUN
    imported_on_its_own: bool


def lun_read(bed: HaBed, dev: str, timeout: float = 600) -> str:
    """The LUN's first block as the client reads it (O_DIRECT: from the target, not the
    client's cache), up to the first NUL."""
    rc, out = bed.client.exec(f"timeout {timeout:g} dd if={dev} bs=4096 count=1 "
                              "iflag=direct status=none | tr -d '\\000'", timeout=timeout + 60)
    return out.strip() if rc == 0 else f"<dd exit {rc}: {out.strip()}>"


def nfs_body() -> dict[str, Any]:
    return {"protocol": "nfs3", "size": "1G", "pool": POOL,
            "nfs": {"clients": [{"match": "10.96.0.0/24", "access": "rw"}]}}


# the client's host, named through an initiator group (as ESXi clusters are): the group
# lives in each node's database, so the node taking the pool must get it from the pool
CLIENT_GROUP = "haclients"


def lun_body() -> dict[str, Any]:
    return {"protocol": "iscsi", "size": "1G", "pool": POOL,
            "iscsi": {"initiator_groups": [CLIENT_GROUP]}}


def serve(bed: HaBed, active: str) -> Served:
    """Makes NFS_DS and LUN_DS through ``active``'s API; the client mounts the export and
    logs in to the LUN through the VIP and writes NFS_TEXT and LUN_TEXT to them."""
    with bed.api(active) as api:
        ok(api.put(f"/initiator-groups/{CLIENT_GROUP}",
                   json={"initiators": [CLIENT_INITIATOR]}), 201)
        nfs, lun = (make_datastore(api, name, body)
                    for name, body in ((NFS_DS, nfs_body()), (LUN_DS, lun_body())))
    assert nfs["serving"] and lun["serving"], (nfs, lun)
    bed.client_mount(nfs["nfs"]["path"], MOUNT)
    bed.client.check(f"echo {NFS_TEXT} > {MOUNT}/record && sync {MOUNT}/record "
                     f"&& cat {MOUNT}/record")
    dev = bed.client_login(lun["iscsi"]["iqn"], lun["iscsi"]["serial"])
    bed.client.check(f"printf '%s' {LUN_TEXT} | dd of={dev} bs=4096 conv=sync "
                     "oflag=direct,dsync status=none")
    assert lun_read(bed, dev, 60) == LUN_TEXT
    return Served(identity(nfs), identity(lun), dev, scsi=scsi_identity(bed, dev))


def make_datastore(api: httpx.Client, name: str, body: dict[str, Any],
                   timeout: float = 900) -> dict[str, Any]:
    """PUTs a new datastore and returns it as GET shows it once made: a create answered
    201, or 202 with its job when it outlasted the API's bounded wait (a loaded TCG
    host: the 16:47 run's hanfs, CI's hachap), then waited for to succeed."""
    resp = api.put(f"/datastores/{name}", json=body)
    if resp.status_code != 201:
        job = ok(resp, 202)
        deadline = time.monotonic() + timeout
        while job["state"] in ("queued", "running"):
            assert time.monotonic() < deadline, job
            # the API's own wait (as the failover round's), not a GET every few seconds
            # on a guest that is already slow
            job = ok(api.get(f"/jobs/{job['id']}", params={"wait": 60}))
        assert job["state"] == "succeeded", job
    return dict(ok(api.get(f"/datastores/{name}")))


def client_scsi(bed: HaBed, cmd: str, tries: int = 4) -> str:
    """The output of an SCSI command the client sends to a LUN: after a takeover the
    first one may meet a unit attention, so a few tries."""
    out = ""
    for _ in range(tries):
        rc, out = bed.client.exec(cmd, timeout=120)
        if rc == 0:
            return out
        time.sleep(2)
    raise AssertionError(f"{cmd}: {out}")


def scsi_identity(bed: HaBed, dev: str) -> str:
    """The LUN's identity as the client's SCSI layer reads it from the target: the
    device identification VPD page (its NAA id, the target port's name, relative target
    port and target port group) and REPORT TARGET PORT GROUPS (the group's ALUA state),
    what ESXi's VMW_SATP_ALUA and multipathing key on."""
    return client_scsi(bed, f"sg_vpd --page=di {dev} && sg_rtpg --decode {dev}").strip()


def _start_round(bed: HaBed, served: Served) -> str:
    """Zeroes the LUN's record blocks (the ones earlier rounds wrote) and starts the
    writers on a new records file; returns that file."""
    served.rounds += 1
    if served.rounds > 1:
        # in MiB (the records start at 4 MiB): a few large writes, not thousands of 4 KiB
        mib = -(-max(ZEROED_RECORDS, served.lun_top + 64) * LUN_BLOCK // MiB)
        bed.client.check(f"dd if=/dev/zero of={served.dev} bs=1M "
                         f"seek={RECORDS_AT_BLOCK * LUN_BLOCK // MiB} count={mib} "
                         "oflag=direct,dsync status=none", timeout=600)
    path = served.records_file()
    bed.start_writers(path, served.dev)
    return path


def _finish_round(bed: HaBed, served: Served, path: str,
                  event_at: float) -> dict[str, Writes]:
    """Stops the writers and reads every acknowledged record back (O_DIRECT, from the
    node that serves now); ``event_at`` on the client's clock."""
    acked = bed.stop_writers()
    top = max((i for i, _ in acked["lun"]), default=0)
    served.lun_top = max(served.lun_top, top)
    back = {"nfs": (bed.read_back(path), RECORD),
            "lun": (bed.read_back(served.dev, RECORDS_AT_BLOCK, top + 1), LUN_BLOCK)}
    # writers_script sends each writer's output (dd status=none: errors only) here
    logs = {kind: bed.client.exec(f"cat /root/writer-{kind}.log")[1] for kind in back}
    return {kind: writes_through(acked[kind], event_at, data, stride, log=logs[kind])
            for kind, (data, stride) in back.items()}


def _on_target(bed: HaBed, target: str) -> tuple[dict[str, tuple[Any, ...]], bool,
                                                  dict[str, Any] | None]:
    with bed.api(target) as api:
        got = {k: identity(ok(api.get(f"/datastores/{n}")))
               for k, n in (("nfs", NFS_DS), ("lun", LUN_DS))}
        drift = ok(api.get("/system/drift"))
        took = ok(api.get("/cluster"))["last_takeover"]
    return got, bool(drift["in_sync"]), took


def kill_round(bed: HaBed, served: Served | None) -> Takeover:
    """kill -9 of the active node's QEMU while the client reads the bed's web page through
    the VIP and (with ``served``) writes numbered records to the mount and the LUN; waits
    until the survivor runs the group and the client reads again, then gathers the
    figures. The checks of fencing are the caller's (the bed is left as the kill left it:
    one node down)."""
    victim = bed.active()
    assert victim, bed.status(next(iter(bed.nodes)))
    survivor = bed.peer(victim)
    bed.start_client_loop()
    path = _start_round(bed, served) if served else ""
    offset, offset_err = bed.clock_offset(bed.nodes[survivor])
    client_offset, _ = bed.clock_offset(bed.client)
    time.sleep(3)  # a few good reads (and records) first
    t_kill = bed.nodes[victim].kill()
    t0 = time.monotonic()
    bed.wait_status(survivor, lambda s: all(s.node_of(r) == survivor for r in GROUP_RSCS),
                    timeout=600, what=f"serving from {survivor}")
    t_served = time.monotonic() - t0
    deadline = time.monotonic() + 120
    while bed.client_get()[0] != 0 and time.monotonic() < deadline:
        time.sleep(1)
    client = bed.stop_client_loop()
    tl = failover_timeline(bed.journal(survivor, t_kill + offset - 30), t_kill + offset,
                           victim=victim, survivor=survivor)
    node = bed.nodes[survivor]
    mmp = node.check("cat /sys/module/zfs/parameters/zfs_multihost_interval "
                     "/sys/module/zfs/parameters/zfs_multihost_import_intervals").split()
    # ZFS's debug log says how long the import watched the pool for another writer
    _rc, delay = node.exec("grep -o 'import_delay=[0-9]*' /proc/spl/kstat/zfs/dbgmsg "
                           "| tail -1")
    writes: dict[str, Writes] = {}
    identities: dict[str, tuple[Any, ...]] = {}
    in_sync, took = False, None
    extra: dict[str, Any] = {"clock_offset_err": round(offset_err, 1)}
    if served:
        t0 = time.monotonic()
        extra["nfs_text"] = bed.client.check(f"timeout 600 cat {MOUNT}/record",
                                             timeout=660).strip()
        extra["nfs_read_s"] = round(time.monotonic() - t0, 1)
        extra["lun_text"] = lun_read(bed, served.dev)
        extra["lun_read_s"] = round(time.monotonic() - t0, 1)
        extra["scsi"] = scsi_identity(bed, served.dev)
        identities, in_sync, took = _on_target(bed, survivor)
        writes = _finish_round(bed, served, path, t_kill + client_offset)
    return Takeover(
        kind="unplanned", source=victim, target=survivor, group_on_target=round(t_served, 1),
        writes=writes, identities=identities, drift_in_sync=in_sync, last_takeover=took,
        timeline=tl, client_outage=round(client.outage(), 1),
        client_reads=(client.fails, client.total),
        import_delay_ns=int(delay.strip().split("=")[1]) if "=" in delay else None,
        mmp=(int(mmp[0]), int(mmp[1])), extra=extra)


def rejoin(bed: HaBed, keys: set[str], timeout: float = 600) -> Rejoin:
    """Boots the node that is down again; waits until the peer sees it online and its
    fence_scsi key is back on every LUN (``keys``: every node's; fails after 300 s)."""
    down = next(n for n, app in bed.nodes.items() if app.vm.pid() is None)
    up = bed.peer(down)
    t0 = time.monotonic()
    bed.nodes[down].boot_again()
    t_boot = time.monotonic() - t0
    bed.wait_status(up, lambda s: set(s.online) == {up, down}, timeout=timeout,
                    what=f"rejoined by {down}")
    t_join = time.monotonic() - t0
    wait_unfenced(bed, up, down, keys)
    t_unfenced = time.monotonic() - t0
    rc, _ = bed.nodes[down].exec(f"zpool list -H {POOL}")
    return Rejoin(down, round(t_boot, 1), round(t_join, 1), round(t_unfenced, 1),
                  imported_on_its_own=rc == 0)


def wait_unfenced(bed: HaBed, on: str, node: str, keys: set[str],
                  timeout: float = 300) -> None:
    """Waits until ``on`` reads exactly ``keys`` on every LUN: ``node``, back in the
    cluster, was unfenced (fails after ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    got = bed.keys(on)
    while not all(set(k) == keys for k in got.values()):
        assert time.monotonic() < deadline, f"{node} not unfenced after {timeout:g} s: {got}"
        time.sleep(3)
        got = bed.keys(on)


def planned_round(bed: HaBed, served: Served | None) -> Takeover:
    """``POST /cluster/failover`` on the node holding the pool while the client writes
    numbered records (with ``served``): the job moves the group to the other node."""
    src = bed.active()
    assert src, bed.status(next(iter(bed.nodes)))
    dst = bed.peer(src)
    path = _start_round(bed, served) if served else ""
    client_offset, _ = bed.clock_offset(bed.client)
    time.sleep(3)
    t_asked = time.time()
    t0 = time.monotonic()
    with bed.api(src) as api:
        job = ok(api.post("/cluster/failover", params={"wait": 540}, json={}), 202)
        while job["state"] not in ("succeeded", "failed", "cancelled"):
            job = ok(api.get(f"/jobs/{job['id']}", params={"wait": 60}))
    t_job = time.monotonic() - t0
    status = bed.status(dst)
    on_dst = round(time.monotonic() - t0, 1) if all(
        status.node_of(r) == dst for r in GROUP_RSCS) else -1.0
    writes: dict[str, Writes] = {}
    identities: dict[str, tuple[Any, ...]] = {}
    in_sync, took = False, None
    extra: dict[str, Any] = {"job_s": round(t_job, 1)}
    if served and job["state"] == "succeeded":
        extra["nfs_text"] = bed.client.check(f"timeout 600 cat {MOUNT}/record",
                                             timeout=660).strip()
        extra["lun_text"] = lun_read(bed, served.dev)
        extra["scsi"] = scsi_identity(bed, served.dev)
        identities, in_sync, took = _on_target(bed, dst)
        writes = _finish_round(bed, served, path, t_asked + client_offset)
    elif served:
        bed.stop_writers()
    return Takeover(kind="planned", source=src, target=dst, group_on_target=on_dst,
                    writes=writes, identities=identities, drift_in_sync=in_sync,
                    last_takeover=took, job=job, extra=extra)


@dataclass(frozen=True)
class SplitBrain:
    """A split brain's figures (seconds after the corosync link was cut) and what the
    fenced node said once booted again with the link still cut."""

    serving: str  # the node that ran the group when the link was cut
    fenced: str  # the other one
    detected: float | None  # the serving node's new membership, without the other
    fenced_at: float | None  # the serving node's fencing of the other completed
    keys_after: dict[str, list[str]]  # on every LUN once the fenced node rebooted
    group_after: dict[str, str]  # resource: node, on the serving node's crm_mon then
    self_fenced: float  # the fenced node's new boot began (its watchdog check rebooted it)
    booted: float  # it answered again (booted with the link still cut)
    quorum_alone: bool  # what corosync gave it alone (wait_for_all: none)
    imported_alone: bool  # the pool imported there before the link came back
    write_refused: tuple[int, str]  # its own write to a shared LUN: (rc, kernel log)
    import_refused: tuple[int, str]  # `zpool import -f` there: (rc, output)
    rejoined: float  # online on the serving node's crm_mon after the link came back
    unfenced: float  # its key back on every LUN
    writes: dict[str, Writes]  # the client's, through it all


# the fenced node's write: one block of the ZFS whole-disk layout's reserved partition 9
# (8 MiB at the end, never used by ZFS), so a write that wrongly succeeded harms nothing
FENCED_WRITE = "dd if=/dev/zero of={dev}-part9 bs=4096 count=1 oflag=direct,dsync"


def split_brain_round(bed: HaBed, served: Served | None, keys: set[str],
                      timeout: float = 600) -> SplitBrain:
    """Cuts the cluster segment at the standby's port while the client writes numbered
    records: both nodes lose each other with the disks still shared. The node serving
    the pool must win the fence race (priority-fencing-delay) and go on serving; the
    other, fenced, must reboot itself (the watchdog's fence_scsi check) and, booted
    again with the link still cut, must not serve, its writes to the LUNs must fail
    (reservation conflict) and ZFS's MMP must refuse its import. The link comes back and
    it rejoins, unfenced (``keys``: every node's fence_scsi key)."""
    serving = bed.active()
    assert serving, bed.status(next(iter(bed.nodes)))
    fenced = bed.peer(serving)
    port = bed.spec(fenced).port
    node = bed.nodes[fenced]
    old_boot = node.vm.boot_id()
    path = _start_round(bed, served) if served else ""
    client_offset, _ = bed.clock_offset(bed.client)
    offset, _ = bed.clock_offset(bed.nodes[serving])
    time.sleep(3)
    t_cut = time.time()
    t0 = time.monotonic()
    bed.switch.set_link("cluster", port, False)
    try:
        # the guest reboots in place: its agent answers again with a new boot id
        while node.vm.wait_control(timeout) == old_boot:
            assert time.monotonic() - t0 < timeout, \
                f"{fenced} did not reboot {timeout} s after the split: {bed.status(serving)}"
            time.sleep(2)
        node.vm.wait_healthy(max(60.0, timeout - (time.monotonic() - t0)))
        booted = time.monotonic() - t0
        # when its new boot began, on its clock (set from the host's at boot)
        btime = float(node.check("awk '/^btime/ {print $2}' /proc/stat"))
        keys_after = bed.keys(serving)
        status = bed.status(serving)
        group_after = {r: status.node_of(r) for r in GROUP_RSCS}
        _rc, quorate = node.exec("corosync-quorumtool -s | grep -i '^Quorate:'")
        dev = lun_path(0)
        write_rc, _ = node.exec(FENCED_WRITE.format(dev=dev), timeout=120)
        _rc, conflicts = node.exec("dmesg | grep -i 'reservation conflict' | tail -3")
        import_refused = node.exec(f"zpool import -f -N -o cachefile=none {POOL} 2>&1",
                                   timeout=300)
        imported_alone = node.exec(f"zpool list -H {POOL}")[0] == 0
    finally:
        bed.switch.set_link("cluster", port, True)
    tl = failover_timeline(bed.journal(serving, t_cut + offset - 30), t_cut + offset,
                           victim=fenced, survivor=serving)
    t1 = time.monotonic()
    bed.wait_status(serving, lambda s: set(s.online) == {serving, fenced}, timeout=timeout,
                    what=f"rejoined by {fenced}")
    rejoined = time.monotonic() - t0
    # 300 s for the rejoin and the unfencing together
    wait_unfenced(bed, serving, fenced, keys, timeout=300 - (time.monotonic() - t1))
    unfenced = time.monotonic() - t0
    writes = _finish_round(bed, served, path, t_cut + client_offset) if served else {}
    return SplitBrain(
        serving=serving, fenced=fenced, detected=tl.membership, fenced_at=tl.fenced,
        keys_after=keys_after, group_after=group_after,
        self_fenced=round(btime - t_cut, 1), booted=round(booted, 1),
        quorum_alone="yes" in quorate.lower(), imported_alone=imported_alone,
        write_refused=(write_rc, conflicts.strip()), import_refused=import_refused,
        rejoined=round(rejoined, 1), unfenced=round(unfenced, 1), writes=writes)

