"""Replication between two appliances on fakes: full and incremental runs, the cursor
(hold + bookmark), resume after a cut, every refusal (unreachable, refused key, changed
host key, the gate, a full or diverged target, a deleted datastore) with nothing lost on
the source, the scheduler and the policy hook, promote on the target, health."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from appliance.engine import Engine
from appliance.errors import Conflict, InvalidInput, NotFound, ZdsError
from appliance.fake_hosts import FakeHosts, fake_hosts
from appliance.host.fakes.replication import (
    FakeNetwork,
    FakeSsh,
    FakeZfsSend,
    _Partial,
    fake_key,
    fake_resume_token,
)
from appliance.host.fakes.zfs import FakeZfs, GiB, MiB
from appliance.host.zfs_send import ReceiveSpec, SendSpec
from appliance.jobs import Job
from appliance.model import ChapSettings
from appliance.replication.views import PromoteRequest, ReplicationRequest, TargetRequest
from appliance.services.datastores import DatastoreRequest
from appliance.settings import Settings

TARGET_HOST = "192.0.2.20"
PREFIX = "backup/replicas/zds-a"
SAME_PREFIX = "tank/replicas/zds-a"  # a target whose pool is named as the source's


@dataclass
class Box:
    engine: Engine
    hosts: FakeHosts

    @property
    def zfs(self) -> FakeZfs:
        return self.hosts.zfs

    @property
    def ssh(self) -> FakeSsh:
        assert self.hosts.ssh is not None
        return self.hosts.ssh

    @property
    def zsend(self) -> FakeZfsSend:
        assert self.hosts.zfs_send is not None
        return self.hosts.zfs_send


def make_box(tmp: Path, name: str, pool: str, size: int = 100 * GiB) -> Box:
    hosts = fake_hosts(pool, size, hostname=name)
    engine = Engine.create(Settings().with_state_dir(tmp / name), hosts.adapters())
    engine.start()
    return Box(engine, hosts)


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Box, Box]]:
    net = FakeNetwork()
    src = make_box(tmp_path, "zds-a", "tank")
    dst = make_box(tmp_path, "zds-b", "backup")
    net.attach("198.51.100.10", src.ssh)
    net.attach(TARGET_HOST, dst.ssh)
    dst.engine.replication.authorize("zds-a", src.engine.replication.identity().public_key,
                                     PREFIX)
    yield src, dst
    src.engine.close()
    dst.engine.close()


@pytest.fixture
def same_pool(tmp_path: Path) -> Iterator[tuple[Box, Box]]:
    """Source and target both with a pool "tank": the source's NFS paths are datastore
    paths on the target too."""
    net = FakeNetwork()
    src = make_box(tmp_path, "zds-a", "tank")
    dst = make_box(tmp_path, "zds-b", "tank")
    net.attach("198.51.100.10", src.ssh)
    net.attach(TARGET_HOST, dst.ssh)
    dst.engine.replication.authorize("zds-a", src.engine.replication.identity().public_key,
                                     SAME_PREFIX)
    yield src, dst
    src.engine.close()
    dst.engine.close()


def nfs(box: Box, name: str = "nfs01", size: str = "10G") -> str:
    view, _ = box.engine.datastores.put(name, DatastoreRequest(
        protocol="nfs3", size=size, nfs_clients=[{"match": "192.0.2.0/24"}]))
    return view.dataset


def lun(box: Box, name: str = "lun01") -> str:
    view, _ = box.engine.datastores.put(name, DatastoreRequest(
        protocol="iscsi", size="4G", initiators=["iqn.2026-11.org.example:esx1"]))
    return view.dataset


def put(box: Box, name: str = "r1", datastore: str = "nfs01", dataset: str | None = None,
        **kw: Any) -> None:
    box.engine.replication.put(name, ReplicationRequest(
        datastore=datastore, target=TargetRequest(
            host=kw.pop("host", TARGET_HOST), dataset=dataset or f"{PREFIX}/{datastore}",
            port=kw.pop("port", 22), host_key=kw.pop("host_key", None)), **kw))


def run(box: Box, name: str = "r1") -> Job:
    job = box.engine.replication.run_now(name)
    return box.engine.jobs.wait(job.id, 10)


def ok(job: Job) -> dict[str, Any]:
    assert job.state == "succeeded", job.error
    assert job.result is not None
    return job.result


def failed(job: Job, code: str) -> str:
    assert job.state == "failed", job
    assert job.error is not None and job.error["code"] == code, job.error
    return str(job.error["message"])


def snaps(zfs: FakeZfs, dataset: str) -> list[tuple[str, str]]:
    return [(s.name.split("@")[1], s.prop("guid")) for s in zfs.list_snapshots(dataset)]


def content(zfs: FakeZfs, dataset: str) -> str:
    return zfs._ds(dataset).content


# --- runs -------------------------------------------------------------------------------

def test_full_then_incremental_run_keeps_the_replica_equal(pair: tuple[Box, Box]) -> None:
    src, dst = pair
    ds = nfs(src)
    src.zfs.write(ds, 200 * MiB, content="v1")
    put(src)
    first = ok(run(src))
    replica = f"{PREFIX}/nfs01"
    assert first["bytes"] >= 200 * MiB and first["steps"][0].startswith("full")
    assert snaps(dst.zfs, replica) == snaps(src.zfs, ds)
    assert content(dst.zfs, replica) == "v1"
    info = dst.zfs.get_dataset(replica)
    assert info is not None and info.prop("readonly") == "on"
    assert info.prop("mounted") == "no" and info.prop("zds:replication") == "r1"
    assert info.prop("zds:replica_of") == "zds-a/nfs01"
    assert info.prop("zds:source_path") == "/tank/datastores/nfs01"

    # a 1% change: an incremental of about that size
    src.zfs.write(ds, 200 * MiB, changed=2 * MiB, content="v2")
    second = ok(run(src))
    assert 2 * MiB <= second["bytes"] < 3 * MiB, second
    assert second["steps"][0].startswith("incremental")
    assert snaps(dst.zfs, replica)[-1] == snaps(src.zfs, ds)[-1]
    assert content(dst.zfs, replica) == "v2"

    st = src.engine.replication.get("r1").outgoing
    assert st is not None
    assert st.record.status.state == "ok" and st.record.status.runs == 2
    assert st.record.status.total_bytes == first["bytes"] + second["bytes"]
    assert st.lag is not None and st.lag < 60
    assert st.host_key == dst.ssh.host_keys()[0]  # pinned on first contact
    # each run's shared SSH connection is closed after it (a revoked key stops the next)
    rec = src.engine.replication.records.get("r1")
    assert rec is not None and src.ssh.closed == [rec.spec.target.endpoint] * 2


def test_the_transport_asked_for_carries_every_stream(pair: tuple[Box, Box]) -> None:
    src, dst = pair
    ds = nfs(src)
    src.zfs.write(ds, 20 * MiB, content="v1")
    put(src, transport="ssh+tcp")
    ok(run(src))
    src.zfs.write(ds, 20 * MiB, changed=1 * MiB, content="v2")
    ok(run(src))
    assert src.zsend.transports == ["ssh+tcp", "ssh+tcp"]
    assert content(dst.zfs, f"{PREFIX}/nfs01") == "v2"
    view = src.engine.replication.get("r1").outgoing
    assert view is not None and view.record.spec.transport == "ssh+tcp"
    put(src)  # the default again
    src.zfs.write(ds, 20 * MiB, changed=1 * MiB, content="v3")
    ok(run(src))
    assert src.zsend.transports[-1] == "ssh"


def test_a_run_asks_the_target_before_each_step_and_not_after_the_last(
        pair: tuple[Box, Box], monkeypatch: pytest.MonkeyPatch) -> None:
    src, dst = pair
    ds = nfs(src)
    src.zfs.write(ds, 20 * MiB, content="v1")
    src.engine.snapshots.create("nfs01", "older")  # the full goes first, then -I
    put(src)
    zsend = src.engine.replication.zsend
    asked: list[str] = []
    real = zsend.target_state

    def counted(endpoint: Any, dataset: str) -> Any:
        asked.append(dataset)
        return real(endpoint, dataset)

    monkeypatch.setattr(zsend, "target_state", counted)
    first = ok(run(src))
    assert [s.split(":")[0] for s in first["steps"]] == ["full", "incremental"], first
    assert len(asked) == 2, asked  # before each step; the last step ends the run
    replica = f"{PREFIX}/nfs01"
    assert snaps(dst.zfs, replica) == snaps(src.zfs, ds)
    asked.clear()
    src.zfs.write(ds, 20 * MiB, changed=1 * MiB, content="v2")
    second = ok(run(src))
    assert second["steps"][0].startswith("incremental") and len(asked) == 1, asked
    assert content(dst.zfs, replica) == "v2"
    assert snaps(dst.zfs, replica)[-1] == snaps(src.zfs, ds)[-1]


def test_cursor_holds_one_snapshot_and_prunes_its_own(pair: tuple[Box, Box]) -> None:
    src, _ = pair
    ds = nfs(src)
    src.engine.snapshots.create("nfs01", "manual")
    put(src)
    ok(run(src))
    src.zfs.write(ds, 10 * MiB)
    ok(run(src))
    names = [n for n, _ in snaps(src.zfs, ds)]
    own = [n for n in names if n.startswith("zds-repl-r1-")]
    assert "manual" in names and len(own) == 1, names  # the older run's snapshot is pruned
    held = src.zfs.holds([f"{ds}@{n}" for n in names])
    assert {s: tags for s, tags in held.items() if tags} == {f"{ds}@{own[0]}": ["zds-repl:r1"]}
    marks = [b.short for b in src.zsend.bookmarks(ds)]
    assert len(marks) == 1 and marks[0].startswith("zds-repl-r1-")
    # the held cursor cannot be destroyed by accident
    with pytest.raises(Conflict):
        src.engine.snapshots.delete("nfs01", own[0])


def test_bookmark_is_the_base_once_the_cursor_snapshot_is_gone(pair: tuple[Box, Box]) -> None:
    src, dst = pair
    ds = nfs(src)
    put(src, take_snapshot=False)
    src.engine.snapshots.create("nfs01", "a")
    ok(run(src))
    src.zfs.release("zds-repl:r1", [f"{ds}@a"])  # the admin lets it go on purpose
    src.engine.snapshots.delete("nfs01", "a")
    src.zfs.write(ds, 5 * MiB)
    src.engine.snapshots.create("nfs01", "b")
    result = ok(run(src))
    assert "bookmark" in result["steps"][0] or "#" in result["steps"][0], result
    assert [n for n, _ in snaps(dst.zfs, f"{PREFIX}/nfs01")] == ["a", "b"]


def test_interrupted_stream_resumes_instead_of_starting_over(pair: tuple[Box, Box]) -> None:
    src, dst = pair
    ds = nfs(src)
    src.zfs.write(ds, 300 * MiB, content="big")
    put(src)
    src.zsend.interrupt_after = 100 * MiB
    msg = failed(run(src), "transfer_interrupted")
    assert "resumes" in msg
    view = src.engine.replication.get("r1")
    assert view.outgoing is not None
    assert view.outgoing.record.status.resumable_bytes == 100 * MiB
    health = src.engine.system.health()
    assert health.status == "degraded" and "replication" in health.message
    # a first (full) stream cut short: the new dataset holds the partial state only
    inc = dst.engine.replication.get("r1").incoming
    assert inc is not None and inc.resume_pending and inc.snapshots == 0

    result = ok(run(src))
    assert result["resumed"] and result["steps"][0].startswith("resume")
    assert result["steps"][0].endswith(f"({200 * MiB} bytes)")  # the rest only
    assert result["bytes"] < 201 * MiB
    assert content(dst.zfs, f"{PREFIX}/nfs01") == "big"
    assert src.engine.system.health().status == "ok"


def test_a_stale_partial_receive_is_dropped_and_sent_again(pair: tuple[Box, Box]) -> None:
    src, dst = pair
    ds = nfs(src)
    put(src, take_snapshot=False)
    src.engine.snapshots.create("nfs01", "s1")
    ok(run(src))
    src.zfs.write(ds, 50 * MiB)
    src.engine.snapshots.create("nfs01", "s2")
    src.zsend.interrupt_after = 10 * MiB
    failed(run(src), "transfer_interrupted")
    src.engine.snapshots.delete("nfs01", "s2")  # what the partial receive was of
    src.zfs.write(ds, 60 * MiB)
    src.engine.snapshots.create("nfs01", "s3")
    result = ok(run(src))
    assert any("cannot resume" in s for s in result["steps"]), result
    assert [n for n, _ in snaps(dst.zfs, f"{PREFIX}/nfs01")] == ["s1", "s3"]


@pytest.mark.parametrize("other", ["secret", "nfs01-bad-guid"])
def test_a_resume_token_naming_another_dataset_is_not_sent(pair: tuple[Box, Box],
                                                           other: str) -> None:
    """A hostile target presents a resume token of its making: ``zfs send -t`` would send
    whatever it names. The source reads it first, refuses, drops the partial receive and
    sends the replicated datastore only."""
    src, dst = pair
    ds = nfs(src)
    secret = nfs(src, "secret")
    src.zfs.write(secret, 30 * MiB, content="not for that target")
    src.engine.snapshots.create("secret", "s1")
    put(src, take_snapshot=False)
    src.engine.snapshots.create("nfs01", "a1")
    ok(run(src))
    secret_guid = int(src.zfs.get_dataset(f"{secret}@s1").prop("guid"))  # type: ignore
    toname = f"{secret}@s1" if other == "secret" else f"{ds}@a1"  # our name, their guid
    replica = dst.zfs._ds(f"{PREFIX}/nfs01")

    def tamper() -> None:
        token = fake_resume_token(toname, secret_guid, 0, 99)
        replica.partial = _Partial(token, secret, secret_guid, 0, 0, 30 * MiB,
                                   SendSpec(snapshot=f"{secret}@s1"),
                                   ReceiveSpec(f"{PREFIX}/nfs01"), full=False)

    tamper()
    src.zsend.streamed.clear()
    src.zfs.write(ds, 10 * MiB, content="v2")
    src.engine.snapshots.create("nfs01", "a2")
    result = ok(run(src))
    assert not [n for n in src.zsend.streamed if not n.startswith(f"{ds}@")], \
        src.zsend.streamed
    assert result["steps"][0].startswith("dropped a partial receive"), result["steps"]
    assert toname in result["steps"][0] and not result["resumed"]
    assert [n for n, _ in snaps(dst.zfs, f"{PREFIX}/nfs01")] == ["a1", "a2"]
    assert content(dst.zfs, f"{PREFIX}/nfs01") == "v2" and replica.partial is None
    tamper()  # a check says so too, and sends nothing
    check = src.engine.replication.check("r1")
    assert check.resume_pending and check.next_step.startswith("stale_resume"), check


def test_up_to_date_run_sends_nothing(pair: tuple[Box, Box]) -> None:
    src, _ = pair
    nfs(src)
    put(src, take_snapshot=False)
    src.engine.snapshots.create("nfs01", "only")
    ok(run(src))
    again = ok(run(src))
    assert again["bytes"] == 0 and again["steps"] == []


# --- refusals: clear errors, nothing lost ------------------------------------------------

def source_intact(box: Box, ds: str, before: list[tuple[str, str]]) -> None:
    assert snaps(box.zfs, ds)[:len(before)] == before
    assert box.engine.store.get_datastore(ds.rsplit("/", 1)[1]) is not None


def test_unreachable_target(pair: tuple[Box, Box]) -> None:
    src, dst = pair
    ds = nfs(src)
    put(src, take_snapshot=False)
    src.engine.snapshots.create("nfs01", "s1")
    before = snaps(src.zfs, ds)
    dst.ssh.up = False
    msg = failed(run(src), "target_unreachable")
    assert "Connection refused" in msg
    with pytest.raises(ZdsError) as err:
        src.engine.replication.check("r1")
    assert err.value.code == "target_unreachable" and err.value.status == 503
    source_intact(src, ds, before)
    st = src.engine.replication.get("r1").outgoing
    assert st is not None and st.record.status.failures == 1
    dst.ssh.up = True
    ok(run(src))


def test_refused_key(pair: tuple[Box, Box]) -> None:
    src, dst = pair
    ds = nfs(src)
    put(src)
    dst.engine.replication.revoke("zds-a")
    msg = failed(run(src), "key_refused")
    assert "authorize" in msg
    assert snaps(src.zfs, ds) == []  # the target is asked first: no snapshot for nothing
    with pytest.raises(NotFound):
        dst.engine.replication.revoke("zds-a")


def test_changed_host_key_is_refused(pair: tuple[Box, Box]) -> None:
    src, _ = pair
    nfs(src)
    put(src, host_key=fake_key("someone-else", "ssh-ed25519"))
    msg = failed(run(src), "host_key_mismatch")
    assert "pin" in msg
    with pytest.raises(ZdsError) as err:
        src.engine.replication.check("r1")
    assert err.value.status == 409


def test_target_outside_the_authorized_prefix(pair: tuple[Box, Box]) -> None:
    src, _ = pair
    nfs(src)
    put(src, dataset="backup/elsewhere/nfs01")
    failed(run(src), "refused_by_target")


def test_target_pool_full_sends_nothing(tmp_path: Path) -> None:
    net = FakeNetwork()
    src = make_box(tmp_path, "zds-a", "tank")
    dst = make_box(tmp_path, "zds-b", "backup", size=1 * GiB)
    net.attach("198.51.100.10", src.ssh)
    net.attach(TARGET_HOST, dst.ssh)
    dst.engine.replication.authorize("zds-a", src.ssh.public_key(), PREFIX)
    try:
        ds = nfs(src, size="20G")
        src.zfs.write(ds, 3 * GiB)
        put(src)
        msg = failed(run(src), "insufficient_space")
        assert "free" in msg and "Nothing was sent" in msg
        assert src.zsend.transfers == []
        assert dst.zfs.get_dataset(f"{PREFIX}/nfs01") is None
        assert len(snaps(src.zfs, ds)) == 1
    finally:
        src.engine.close()
        dst.engine.close()


def test_diverged_target_is_not_overwritten(pair: tuple[Box, Box]) -> None:
    src, dst = pair
    ds = nfs(src)
    put(src)
    ok(run(src))
    replica = f"{PREFIX}/nfs01"
    dst.zfs.snapshot(replica, "rogue")
    src.zfs.write(ds, 1 * MiB)
    msg = failed(run(src), "diverged")
    assert "rogue" in msg and "nothing was sent" in msg
    assert [n for n, _ in snaps(dst.zfs, replica)][-1] == "rogue"
    check = src.engine.replication.check("r1")
    assert not check.in_sync and check.next_step.startswith("diverged")
    dst.zfs.destroy(f"{replica}@rogue")
    dst.zfs.write(replica, 5 * MiB)  # modified behind our back
    assert "modified" in failed(run(src), "diverged")
    dst.zfs.rollback(snaps(dst.zfs, replica)[-1][0].join([f"{replica}@", ""]))
    ok(run(src))


def test_target_dataset_that_is_not_a_replica(pair: tuple[Box, Box]) -> None:
    src, dst = pair
    nfs(src)
    dst.zfs.create_filesystem(f"{PREFIX}/nfs01", {})
    put(src)
    assert "holds no snapshot" in failed(run(src), "diverged")


def test_replicated_datastore_is_not_deleted(pair: tuple[Box, Box]) -> None:
    src, dst = pair
    ds = nfs(src)
    put(src)
    ok(run(src))
    with pytest.raises(Conflict) as err:
        src.engine.datastores.delete("nfs01")
    assert "replicated by r1" in err.value.message
    assert src.engine.store.get_datastore("nfs01") is not None
    assert src.zfs.get_dataset(ds) is not None
    src.engine.replication.delete("r1")
    assert src.zsend.bookmarks(ds) == []
    # its hold, bookmark and own snapshots went with it
    assert [n for n, _ in snaps(src.zfs, ds)] == []
    job = src.engine.datastores.delete("nfs01")
    assert src.engine.jobs.wait(job.id, 5).state == "succeeded"
    assert dst.zfs.get_dataset(f"{PREFIX}/nfs01") is not None  # the replica stays


def test_run_after_the_datastore_vanished_says_the_replica_is_kept(
        pair: tuple[Box, Box]) -> None:
    src, _ = pair
    nfs(src)
    put(src)
    src.engine.store.delete_datastore("nfs01")  # e.g. its pool was exported
    msg = failed(run(src), "not_found")
    assert "is kept" in msg


# --- validation ---------------------------------------------------------------------------

@pytest.mark.parametrize("change, words", [
    ({"host": "bad host"}, "invalid host"),
    ({"host": "-oProxyCommand=x"}, "invalid host"),
    ({"port": 0}, "port"),
    ({"dataset": "backup"}, "below a pool"),
    ({"dataset": "backup/datastores/x"}, "may not live"),
    ({"dataset": "backup/a b"}, "invalid target dataset"),
    ({"interval": "5s"}, "minimum"),
    ({"interval": "soon"}, "invalid interval"),
    ({"bandwidth_limit": "1K"}, "at least 64K"),
    ({"host_key": "ssh-ed25519 notbase64!"}, "base64"),
    ({"transport": "netcat"}, "invalid transport"),
])
def test_bad_requests_change_nothing(pair: tuple[Box, Box], change: dict[str, Any],
                                     words: str) -> None:
    src, _ = pair
    nfs(src)
    with pytest.raises(InvalidInput) as err:
        put(src, **change)
    assert words in err.value.message
    assert src.engine.replication.list() == []


def test_put_is_idempotent_and_guards_what_cannot_change(pair: tuple[Box, Box]) -> None:
    src, _ = pair
    nfs(src)
    nfs(src, "nfs02")
    put(src, interval="15m")
    view, created = src.engine.replication.put("r1", ReplicationRequest(
        datastore="nfs01", target=TargetRequest(host=TARGET_HOST,
                                                dataset=f"{PREFIX}/nfs01"), interval=900))
    assert not created and view.outgoing is not None
    assert view.outgoing.record.spec.interval == 900
    with pytest.raises(Conflict):
        put(src, datastore="nfs02", dataset=f"{PREFIX}/nfs01")
    with pytest.raises(Conflict):  # another replication to the same place
        put(src, name="r2", datastore="nfs02", dataset=f"{PREFIX}/nfs01")
    with pytest.raises(NotFound):
        put(src, name="r3", datastore="nope")


def test_authorize_refuses_prefixes_that_would_reach_datastores(pair: tuple[Box, Box]) -> None:
    _, dst = pair
    key = fake_key("other")
    for prefix, error in (("backup", InvalidInput), ("backup/datastores/x", InvalidInput),
                          ("nopool/replicas", NotFound), ("backup/a b", InvalidInput)):
        with pytest.raises(error):
            dst.engine.replication.authorize("other", key, prefix)
    with pytest.raises(InvalidInput):
        dst.engine.replication.authorize("other", "ssh-ed25519 AAAA", "backup/r")
    with pytest.raises(Conflict):  # the same key twice
        dst.engine.replication.authorize("again", dst.engine.replication.authorized_keys()[0]
                                         .public_key, "backup/r2")
    assert [k.name for k in dst.ssh.authorized()] == ["zds-a"]


@pytest.mark.parametrize("prefix", [
    "backup/datastores", "backup/datastores/nfs01", "backup/zds-probes",
    "backup/zds-probes/nfs01-1", "backup/zds-contract", "backup/zds-anything/x"])
def test_authorize_refuses_prefixes_in_zds_own_datasets(pair: tuple[Box, Box],
                                                        prefix: str) -> None:
    _, dst = pair
    before = dst.zfs.list_datasets("backup")
    with pytest.raises(InvalidInput) as refused:
        dst.engine.replication.authorize("other", fake_key("other"), prefix)
    own = "/".join(prefix.split("/")[:2])
    assert own in refused.value.message and refused.value.detail["zds_dataset"] == own
    assert [k.name for k in dst.ssh.authorized()] == ["zds-a"]
    assert [d.name for d in dst.zfs.list_datasets("backup")] == [d.name for d in before]


def test_zds_own_datasets_are_all_known() -> None:
    """What the refusal above relies on: every dataset ZDS makes in a pool is
    POOL/datastores or POOL/zds-*."""
    from appliance.host.contract import zfs_checks, zfs_send_checks
    from appliance.model import OWN_PREFIX, zds_dataset
    from appliance.probes import safety
    for child in (safety.SCRATCH_PARENT, zfs_checks.SCRATCH, zfs_send_checks.SCRATCH):
        assert child.startswith(OWN_PREFIX), child
    assert zds_dataset("tank") == "tank"
    assert zds_dataset("tank/datastores/a/b") == "tank/datastores"
    assert zds_dataset("tank/zds-probes") == "tank/zds-probes"
    assert zds_dataset("tank/replicas/zds-probes") is None
    assert zds_dataset("tank/datastores2") is None


@pytest.mark.parametrize("prefix", [PREFIX, f"{PREFIX}/b", "backup/replicas", "backup"])
def test_authorize_refuses_prefixes_that_nest_with_another_key(pair: tuple[Box, Box],
                                                               prefix: str) -> None:
    _, dst = pair
    before = [d.name for d in dst.zfs.list_datasets("backup")]
    error = InvalidInput if prefix == "backup" else Conflict  # a pool: refused anyway
    with pytest.raises(error) as refused:
        dst.engine.replication.authorize("zds-c", fake_key("zds-c"), prefix)
    if error is Conflict:
        msg = refused.value.message
        assert PREFIX in msg and "zds-a" in msg and prefix in msg, msg
        assert refused.value.detail == {"key": "zds-a", "dataset_prefix": PREFIX}
    assert [k.name for k in dst.ssh.authorized()] == ["zds-a"]
    assert [d.name for d in dst.zfs.list_datasets("backup")] == before
    # siblings are fine, and a key may keep (or move within) its own prefix
    entry, created = dst.engine.replication.authorize("zds-c", fake_key("zds-c"),
                                                      "backup/replicas/zds-c")
    assert created and entry.prefix == "backup/replicas/zds-c"
    dst.engine.replication.authorize("zds-a", dst.engine.replication.authorized_keys()[0]
                                     .public_key, f"{PREFIX}/moved")
    assert {k.name: k.prefix for k in dst.ssh.authorized()} == {
        "zds-a": f"{PREFIX}/moved", "zds-c": "backup/replicas/zds-c"}


# --- scheduling -----------------------------------------------------------------------------

def replication_runs(jobs: list[Job]) -> list[Job]:
    """The replication runs among a scheduler tick's jobs (the metrics collector shares
    the one scheduler and may be due on the same tick)."""
    return [j for j in jobs if j.kind == "replication.run"]


def test_interval_runs_on_the_one_clock_and_policy_hook(pair: tuple[Box, Box]) -> None:
    src, dst = pair
    ds = nfs(src)
    nfs(src, "nfs02")
    put(src, interval="1h")
    put(src, name="r2", datastore="nfs02", after_snapshot_policy=True)
    sched = src.engine.ctx.scheduler
    assert {"replication:r1", "replication:r2"} <= set(sched.tasks())
    jobs = replication_runs(sched.tick())
    assert [j.target for j in jobs] == ["r1"]  # r2 has no interval
    ok(src.engine.jobs.wait(jobs[0].id, 10))
    assert replication_runs(sched.tick()) == []  # the slot ran
    # a snapshot policy run snapshotted nfs02: r2 sends that snapshot, taking none
    src.engine.snapshots.create("nfs02", "policy-1")
    (job,) = src.engine.replication.after_snapshots("nfs02")
    ok(src.engine.jobs.wait(job.id, 10))
    assert [n for n, _ in snaps(dst.zfs, f"{PREFIX}/nfs02")] == ["policy-1"]
    assert src.engine.replication.after_snapshots("nfs01") == []  # r1 does not follow
    assert ds


def test_a_snapshot_policy_run_sends_its_snapshot_to_the_following_replication(
        pair: tuple[Box, Box]) -> None:
    """The engine wires policies to replication: a policy run that snapshots nfs01 starts
    the replication that follows policies, which sends that very snapshot (none of its own)."""
    from appliance.policies.service import PolicyRequest

    src, dst = pair
    nfs(src)
    nfs(src, "nfs02")
    put(src, after_snapshot_policy=True)
    src.engine.policies.put("hourly", PolicyRequest(every="1h", retention={"hourly": 3},
                                                   datastores=["nfs01"]))
    run_job = src.engine.jobs.wait(src.engine.policies.run_now("hourly").id, 10)
    result = ok(run_job)
    assert result["snapshotted"] == ["nfs01"]
    deadline = time.monotonic() + 10
    while not src.engine.jobs.list(kind="replication.run"):
        assert time.monotonic() < deadline, "no replication followed the policy run"
        time.sleep(0.05)
    (rep,) = src.engine.jobs.list(kind="replication.run")
    ok(src.engine.jobs.wait(rep.id, 10))
    sent = [n for n, _ in snaps(dst.zfs, f"{PREFIX}/nfs01")]
    assert sent == [result["snapshot"]], sent


def test_disabled_replication_is_not_scheduled(pair: tuple[Box, Box]) -> None:
    src, _ = pair
    nfs(src)
    put(src, interval="1h", enabled=False)
    assert replication_runs(src.engine.ctx.scheduler.tick()) == []


# --- promote ---------------------------------------------------------------------------------

def test_promote_nfs_replica_serves_it_with_the_source_path(
        same_pool: tuple[Box, Box]) -> None:
    src, dst = same_pool
    ds = nfs(src)
    src.zfs.write(ds, 64 * MiB, content="vm-disks")
    put(src, dataset=f"{SAME_PREFIX}/nfs01")
    ok(run(src))
    result = dst.engine.replication.promote("r1", PromoteRequest(keep_access=True))
    rec = result.view.record
    assert rec.name == "nfs01" and rec.spec.pool == "tank" and rec.state == "ready"
    # the source's path is a datastore path of this pool too: ESXi remounts it as is
    assert result.view.serving and result.view.path == "/tank/datastores/nfs01"
    assert any("keeps the source's path /tank/datastores/nfs01" in n for n in result.notes)
    assert content(dst.zfs, "tank/datastores/nfs01") == "vm-disks"
    info = dst.zfs.get_dataset("tank/datastores/nfs01")
    assert info is not None and info.prop("readonly") == "off"
    assert info.prop("zds:name") == "nfs01" and info.prop("zds:export_id") == str(
        rec.export_id)
    assert [c.match for c in rec.spec.nfs_clients] == ["192.0.2.0/24"]  # keep_access
    assert any("same datastore name" in n for n in result.notes)
    assert dst.engine.replication.list() == []  # no longer a replica
    with pytest.raises(NotFound):
        dst.engine.replication.promote("r1", PromoteRequest())
    # the source's next run finds no replica: a full stream into a new one
    ok(run(src))


def test_promote_into_another_pool_uses_the_local_path(pair: tuple[Box, Box]) -> None:
    src, dst = pair
    nfs(src)
    put(src)
    ok(run(src))
    # /tank/datastores/nfs01 is no datastore path of pool backup: asked for, refused
    with pytest.raises(Conflict) as refused:
        dst.engine.replication.promote("r1", PromoteRequest(nfs_path="source"))
    assert "/backup/datastores" in refused.value.message
    assert dst.engine.store.list_datastores() == [] and dst.engine.replication.list()
    result = dst.engine.replication.promote("r1", PromoteRequest())
    assert result.view.path == "/backup/datastores/nfs01"
    assert any("not a datastore path of this pool" in n and "/backup/datastores/nfs01" in n
               for n in result.notes), result.notes


HOSTILE_PATHS = ["/root/.ssh", "/usr/local/sbin", "/tank/datastores/../../etc",
                 "/tank/datastores/../datastores/nfs01", "/tank/datastores/./x",
                 "/backup/datastores/nfs01", "/tank/datastores", "/tank/datastores/a/b",
                 "/tank/datastores-x/nfs01", "/tank/datastores/nfs01\n", "/tank/datastores/A",
                 "/tank/datastores/x;y", "tank/datastores/nfs01", "/", "/etc/zds"]


@pytest.mark.parametrize("hostile", HOSTILE_PATHS)
def test_promote_never_mounts_or_exports_where_the_stream_says(
        same_pool: tuple[Box, Box], hostile: str) -> None:
    src, dst = same_pool
    nfs(src)
    put(src, dataset=f"{SAME_PREFIX}/nfs01")
    ok(run(src))
    replica = f"{SAME_PREFIX}/nfs01"
    # what a hostile source can put in its stream (zfs send -p carries user properties)
    dst.zfs.set_properties(replica, {"zds:source_path": hostile})
    result = dst.engine.replication.promote("r1", PromoteRequest(name="dr1"))
    local = "/tank/datastores/dr1"
    assert result.view.path == local and result.view.serving
    info = dst.zfs.get_dataset("tank/datastores/dr1", ("mountpoint",))
    assert info is not None and info.prop("mountpoint") == local
    assert any("this appliance's own path /tank/datastores/dr1" in n for n in result.notes)
    rendered = dst.hosts.ganesha.rendered(result.view.record.export_id or 0) or ""
    assert f'Path = "{local}";' in rendered and f'Path = "{hostile}";' not in rendered


def test_promote_replaces_a_mountpoint_the_stream_carried(same_pool: tuple[Box, Box]) -> None:
    src, dst = same_pool
    nfs(src)
    put(src, dataset=f"{SAME_PREFIX}/nfs01")
    ok(run(src))
    replica = f"{SAME_PREFIX}/nfs01"
    # a source that did not exclude its mountpoint (received, not inherited)
    dst.zfs.set_properties(replica, {"mountpoint": "/root/.ssh", "zds:source_path": ""})
    result = dst.engine.replication.promote("r1", PromoteRequest(nfs_path="local"))
    assert result.view.path == "/tank/datastores/nfs01"
    info = dst.zfs.get_dataset("tank/datastores/nfs01", ("mountpoint",))
    assert info is not None and info.prop("mountpoint") == "/tank/datastores/nfs01"
    assert dst.zfs._ds("tank/datastores/nfs01").local["sharenfs"] == "off"


def test_promote_keeps_a_normalised_path_inside_the_tree(same_pool: tuple[Box, Box]) -> None:
    src, dst = same_pool
    nfs(src)
    put(src, dataset=f"{SAME_PREFIX}/nfs01")
    ok(run(src))
    dst.zfs.set_properties(f"{SAME_PREFIX}/nfs01",
                           {"zds:source_path": "//tank//datastores/nfs01/"})
    result = dst.engine.replication.promote("r1", PromoteRequest(name="dr1"))
    assert result.view.path == "/tank/datastores/nfs01"


def test_promote_takes_no_access_from_the_replica_unless_asked(
        same_pool: tuple[Box, Box]) -> None:
    src, dst = same_pool
    nfs(src)
    src.engine.datastores.put("nfs02", DatastoreRequest(
        protocol="nfs3", size="10G", nfs_clients=[{"match": "*", "access": "rw"}]))
    lun(src)
    for n, ds in (("r1", "nfs01"), ("r2", "nfs02"), ("r3", "lun01")):
        put(src, name=n, datastore=ds, dataset=f"{SAME_PREFIX}/{ds}")
        ok(run(src, n))
    # default: the stream's client list and initiators are not used
    plain = dst.engine.replication.promote("r1", PromoteRequest())
    assert plain.view.record.spec.nfs_clients == ()
    assert any("1 NFS client rule(s)" in n and "keep_access=true" in n for n in plain.notes)
    assert "CLIENT" not in (dst.hosts.ganesha.rendered(plain.view.record.export_id or 0)
                            or "CLIENT")
    given = dst.engine.replication.promote("r2", PromoteRequest(
        nfs_clients=[{"match": "198.51.100.7", "access": "ro"}]))
    assert [(c.match, c.access) for c in given.view.record.spec.nfs_clients] == [
        ("198.51.100.7", "ro")]
    assert not any("keep_access" in n for n in given.notes)
    lun_view = dst.engine.replication.promote("r3", PromoteRequest())
    assert lun_view.view.record.spec.iscsi.initiators == ()
    target = dst.hosts.lio.get_target(lun_view.view.record.iqn or "")
    assert target is not None and target.spec.acls == ()
    assert any("1 initiator(s)" in n for n in lun_view.notes)


def test_promote_with_keep_access_takes_the_sources(same_pool: tuple[Box, Box]) -> None:
    src, dst = same_pool
    lun(src)
    put(src, datastore="lun01", dataset=f"{SAME_PREFIX}/lun01")
    ok(run(src))
    result = dst.engine.replication.promote("r1", PromoteRequest(keep_access=True))
    assert result.view.record.spec.iscsi.initiators == ("iqn.2026-11.org.example:esx1",)
    target = dst.hosts.lio.get_target(result.view.record.iqn or "")
    assert target is not None and [a.initiator for a in target.spec.acls] == [
        "iqn.2026-11.org.example:esx1"]


def test_promote_of_a_chap_lun_needs_chap_only_to_keep_access(
        same_pool: tuple[Box, Box]) -> None:
    src, dst = same_pool
    src.engine.datastores.put("lun01", DatastoreRequest(
        protocol="iscsi", size="4G", initiators=["iqn.2026-11.org.example:esx1"],
        chap=ChapSettings("esx", "secret-secret-1")))
    put(src, datastore="lun01", dataset=f"{SAME_PREFIX}/lun01")
    ok(run(src))
    with pytest.raises(Conflict) as refused:
        dst.engine.replication.promote("r1", PromoteRequest(keep_access=True))
    assert "CHAP" in refused.value.message and dst.engine.store.list_datastores() == []
    result = dst.engine.replication.promote("r1", PromoteRequest())
    assert result.view.record.spec.iscsi.initiators == ()
    assert any("CHAP" in n for n in result.notes)


def test_promote_lun_keep_or_new_identity(tmp_path: Path, pair: tuple[Box, Box]) -> None:
    src, dst = pair
    lun(src)
    put(src, datastore="lun01")
    ok(run(src))
    serial = src.engine.store.get_datastore("lun01").serial  # type: ignore[union-attr]
    result = dst.engine.replication.promote("r1", PromoteRequest(identity="keep"))
    rec = result.view.record
    assert rec.serial == serial and rec.iqn and rec.iqn.endswith("zds-a.lun01")
    assert result.view.serving and any("NAA id" in n for n in result.notes)
    assert dst.hosts.lio.get_target(rec.iqn) is not None


def test_promote_keep_identity_refused_where_it_is_in_use(pair: tuple[Box, Box]) -> None:
    src, _ = pair
    lun(src)
    src.engine.replication.authorize("self", src.ssh.public_key(), "tank/replicas")
    src.ssh.network.attach("127.0.0.1", src.ssh)  # type: ignore[union-attr]
    put(src, datastore="lun01", host="127.0.0.1", dataset="tank/replicas/lun01")
    ok(run(src))
    with pytest.raises(Conflict) as err:
        src.engine.replication.promote("r1", PromoteRequest(name="lun01-dr", identity="keep"))
    assert "identity=new" in err.value.message
    result = src.engine.replication.promote("r1", PromoteRequest(name="lun01-dr"))
    assert result.view.serving and result.view.record.serial != src.engine.store.get_datastore(
        "lun01").serial  # type: ignore[union-attr]
    assert any("resignature" in n for n in result.notes)


def test_promote_refusals(pair: tuple[Box, Box]) -> None:
    src, dst = pair
    nfs(src)
    put(src)
    with pytest.raises(NotFound):
        dst.engine.replication.promote("r1", PromoteRequest())
    src.zsend.interrupt_after = 1
    src.zfs.write(src.engine.datastores.record("nfs01").spec.dataset, 10 * MiB)
    failed(run(src), "transfer_interrupted")
    with pytest.raises(Conflict) as err:  # a partial first stream is nothing to serve
        dst.engine.replication.promote("r1", PromoteRequest())
    assert "no complete snapshot" in err.value.message
    ok(run(src))
    src.zfs.write(src.engine.datastores.record("nfs01").spec.dataset, 20 * MiB)
    src.zsend.interrupt_after = 1
    failed(run(src), "transfer_interrupted")
    inc = dst.engine.replication.get("r1").incoming
    assert inc is not None and inc.resume_pending and inc.snapshots >= 1
    nfs(dst, "nfs01")
    with pytest.raises(Conflict):
        dst.engine.replication.promote("r1", PromoteRequest())
    with pytest.raises(InvalidInput):
        dst.engine.replication.promote("r1", PromoteRequest(name="Bad_Name"))
    result = dst.engine.replication.promote("r1", PromoteRequest(name="nfs01-dr",
                                                                 nfs_path="local"))
    assert result.view.path == "/backup/datastores/nfs01-dr"


def test_a_run_interrupted_by_a_restart_is_recorded_as_failed(tmp_path: Path) -> None:
    net = FakeNetwork()
    src = make_box(tmp_path, "zds-a", "tank")
    net.attach("198.51.100.10", src.ssh)
    nfs(src)
    put(src, interval="1h")
    rec = src.engine.replication.records.get("r1")
    assert rec is not None
    src.engine.replication.records.set_status("r1", replace(rec.status, state="running",
                                                            job_id="gone"))
    src.engine.replication.start()
    view = src.engine.replication.get("r1").outgoing
    assert view is not None and view.record.status.state == "failed"
    assert view.record.status.last_error == {
        "code": "interrupted",
        "message": "the API stopped during this run; the next run resumes what the target "
                   "kept"}
    src.engine.close()
