"""The datastore list's kept ZFS read (issue 24): at most one full ZFS read per watcher
interval, each change the engine makes visible in the next list, the age shown; and the
paged, filtered list.

On the fakes: ``zfs list`` calls are counted on the FakeZfs under the engine (its
``list_datasets``); time is a clock the test moves.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from appliance.host.zfs import ZfsHost
from appliance.kept import (
    CHANGES,
    IDLE_AFTER,
    PARTIAL_MAX,
    UNSEEN,
    KeptRead,
    ObservedZfs,
    ZfsChanges,
)
from appliance.services.datastores import ListQuery
from appliance.settings import Settings
from tests.unit.conftest import Rig, make_rig

ESX = "iqn.1998-01.com.vmware:esxi01-4f2a"
INTERVAL = 60.0


class Clock:
    """Monotonic and wall time the test moves."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class Reads:
    """The FakeZfs's ``list_datasets`` calls, by root."""

    def __init__(self, rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
        self.roots: list[str] = []
        real = rig.zfs.list_datasets

        def counted(root: str, properties: Any = None) -> Any:
            self.roots.append(root)
            return real(root, properties)

        monkeypatch.setattr(rig.zfs, "list_datasets", counted)

    @property
    def full(self) -> int:
        """Full reads: of a pool's datastores' parent."""
        return sum(1 for r in self.roots if r.count("/") == 1)

    @property
    def partial(self) -> list[str]:
        return [r for r in self.roots if r.count("/") > 1]

    def clear(self) -> None:
        self.roots.clear()


@pytest.fixture
def kept_rig(tmp_path: Path) -> Iterator[tuple[Rig, Clock]]:
    rig = make_rig(tmp_path, settings=Settings(list_refresh_interval=INTERVAL)
                   .with_state_dir(tmp_path))
    rig.engine.start()
    clock = Clock()
    kept = rig.engine.reconciler.kept
    kept.clock = kept.wall = clock
    yield rig, clock
    rig.engine.close()


@pytest.fixture
def api(kept_rig: tuple[Rig, Clock]) -> Iterator[TestClient]:
    rig, _clock = kept_rig
    token = rig.engine.tokens.create("test-admin", "admin")
    with TestClient(create_app(rig.engine, start=False)) as c:
        c.headers["Authorization"] = f"Bearer {token}"
        yield c


def nfs(**kw: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"protocol": "nfs3", "size": "1G",
                            "nfs": {"clients": [{"match": "192.0.2.0/24"}]}}
    body.update(kw)
    return body


def iscsi(**kw: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"protocol": "iscsi", "size": "1G", "iscsi": {"initiators": [ESX]}}
    body.update(kw)
    return body


def put(c: TestClient, name: str, body: dict[str, Any]) -> dict[str, Any]:
    r = c.put(f"/api/v1/datastores/{name}", json=body)
    assert r.status_code in (200, 201), r.text
    out: dict[str, Any] = r.json()
    return out


def listed(c: TestClient, **params: Any) -> dict[str, dict[str, Any]]:
    r = c.get("/api/v1/datastores", params=params)
    assert r.status_code == 200, r.text
    return {d["name"]: d for d in r.json()}


# --- the kept read ---------------------------------------------------------------------

def test_lists_in_a_row_read_zfs_once_per_interval(
        kept_rig: tuple[Rig, Clock], api: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    rig, clock = kept_rig
    for i in range(4):
        put(api, f"ds{i}", nfs() if i % 2 else iscsi())
    reads = Reads(rig, monkeypatch)
    for _ in range(10):
        assert len(listed(api)) == 4
        clock.now += 1
    assert reads.full == 1 and reads.partial == [], reads.roots
    # the watcher's refresh is the next full read; the lists after it read nothing
    clock.now += INTERVAL
    assert rig.engine.reconciler.kept.refresh() is True
    for _ in range(10):
        listed(api)
    assert reads.full == 2 and reads.partial == [], reads.roots


def test_each_change_through_the_engine_is_in_the_next_list(
        kept_rig: tuple[Rig, Clock], api: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    rig, _clock = kept_rig
    put(api, "vm", nfs())
    put(api, "lun", iscsi())
    listed(api)  # kept from here
    reads = Reads(rig, monkeypatch)

    put(api, "new", nfs())  # create
    assert listed(api)["new"]["online"] is True
    put(api, "vm", nfs(overrides={"compression": "zstd"}))  # update
    assert listed(api)["vm"]["properties"]["compression"] == "zstd"
    assert api.post("/api/v1/datastores/lun/snapshots", json={"name": "s1"}).status_code == 201
    assert listed(api)["lun"]["snapshots"] == 1  # snapshot
    r = api.post("/api/v1/datastores/lun/snapshots/s1/clones", json={"name": "copy"})
    assert r.status_code == 201, r.text
    assert listed(api)["copy"]["online"] is True  # clone
    r = api.delete("/api/v1/datastores/new", params={"wait": 10})
    assert r.status_code in (200, 202), r.text
    assert "new" not in listed(api)  # delete
    # each was read again alone: no full read since the list before the changes
    assert reads.full == 0, reads.roots
    assert set(reads.partial) <= {"tank/datastores/new", "tank/datastores/vm",
                                  "tank/datastores/lun", "tank/datastores/copy"}


def test_snapshots_a_rollback_and_a_grown_size_show_at_once(
        kept_rig: tuple[Rig, Clock], api: TestClient) -> None:
    rig, _clock = kept_rig
    put(api, "vm", nfs())
    small = listed(api)["vm"]["usage"]  # kept from here
    assert api.post("/api/v1/datastores/vm/snapshots", json={"name": "s1"}).status_code == 201
    assert listed(api)["vm"]["snapshots"] == 1
    rig.zfs.write("tank/datastores/vm", 300 << 20)  # behind ZDS's back: not seen yet
    assert listed(api)["vm"]["usage"]["referenced"] == small["referenced"]
    assert api.post("/api/v1/datastores/vm/snapshots", json={"name": "s2"}).status_code == 201
    after = listed(api)["vm"]  # read again for the snapshot: the write is seen too
    assert after["snapshots"] == 2 and after["usage"]["referenced"] >= 300 << 20
    r = api.post("/api/v1/datastores/vm/snapshots/s1/rollback", json={"destroy_newer": True})
    assert r.status_code == 200, r.text
    after = listed(api)["vm"]
    assert after["snapshots"] == 1 and after["usage"]["referenced"] == small["referenced"]
    put(api, "vm", nfs(size="2G"))
    assert listed(api)["vm"]["usage"]["available"] > small["available"]  # the refquota


def test_what_zds_did_not_change_shows_after_the_refresh_and_the_age_says_how_old(
        kept_rig: tuple[Rig, Clock], api: TestClient) -> None:
    rig, clock = kept_rig
    put(api, "vm", nfs())
    r = api.get("/api/v1/datastores")
    before = r.json()[0]["usage"]["referenced"]
    assert float(r.headers["ZDS-ZFS-Age"]) == 0.0
    rig.zfs.write("tank/datastores/vm", 200 << 20)  # a host wrote data
    clock.now += 40
    r = api.get("/api/v1/datastores")
    assert r.json()[0]["usage"]["referenced"] == before  # the kept figure...
    assert float(r.headers["ZDS-ZFS-Age"]) == 40.0  # ...and how old it is
    # one datastore is always read now
    assert api.get("/api/v1/datastores/vm").json()["usage"]["referenced"] >= 200 << 20
    assert rig.engine.reconciler.kept.refresh()  # the watcher's next round
    clock.now += 5
    r = api.get("/api/v1/datastores")
    assert r.json()[0]["usage"]["referenced"] >= 200 << 20
    assert float(r.headers["ZDS-ZFS-Age"]) == 5.0  # reset by the refresh


def test_a_read_older_than_two_intervals_is_not_used(
        kept_rig: tuple[Rig, Clock], api: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    rig, clock = kept_rig
    put(api, "vm", nfs())
    listed(api)
    reads = Reads(rig, monkeypatch)
    clock.now += 2 * INTERVAL - 1
    listed(api)
    assert reads.full == 0
    clock.now += 2  # the watcher did not refresh it (stuck, or stopped)
    r = api.get("/api/v1/datastores")
    assert reads.full == 1 and float(r.headers["ZDS-ZFS-Age"]) == 0.0


def test_interval_zero_reads_zfs_at_every_list(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    rig = make_rig(tmp_path, settings=Settings(list_refresh_interval=0).with_state_dir(tmp_path))
    rig.engine.start()
    try:
        reads = Reads(rig, monkeypatch)
        for _ in range(3):
            rig.engine.datastores.list()
        assert reads.full == 3
        assert rig.engine.watcher.list_interval == 0
    finally:
        rig.engine.close()


def test_the_watcher_reads_nothing_while_nobody_lists(
        kept_rig: tuple[Rig, Clock], monkeypatch: pytest.MonkeyPatch) -> None:
    rig, clock = kept_rig
    kept = rig.engine.reconciler.kept
    reads = Reads(rig, monkeypatch)
    rig.engine.datastores.list()
    assert kept.refresh() is False  # a list has just read everything
    clock.now += INTERVAL / 2
    assert kept.refresh() is True
    clock.now += IDLE_AFTER + 1
    assert kept.refresh() is False  # nobody listed for that long
    assert reads.full == 2


def test_pool_export_and_import_read_everything_again(
        kept_rig: tuple[Rig, Clock], api: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    rig, _clock = kept_rig
    put(api, "vm", nfs())
    listed(api)
    reads = Reads(rig, monkeypatch)
    rig.engine.ctx.zfs.export_pool("tank")  # through the engine's adapter
    assert listed(api)["vm"]["online"] is False
    rig.engine.ctx.zfs.import_pool("tank")
    assert listed(api)["vm"]["online"] is True
    assert reads.full == 1  # the exported pool has nothing to read


def test_many_changes_make_one_full_read_instead_of_one_each(
        kept_rig: tuple[Rig, Clock], monkeypatch: pytest.MonkeyPatch) -> None:
    rig, _clock = kept_rig
    zfs = rig.engine.ctx.zfs
    rig.engine.datastores.list()
    reads = Reads(rig, monkeypatch)
    for i in range(PARTIAL_MAX + 1):
        zfs.create_filesystem(f"tank/datastores/x{i}", {})
    rig.engine.datastores.list()
    assert reads.full == 1 and reads.partial == []


def test_the_watcher_thread_refreshes_the_kept_read(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, settings=Settings(list_refresh_interval=0.05, health_interval=0,
                                               reconcile_interval=0).with_state_dir(tmp_path))
    rig.engine.start()
    done = threading.Event()
    kept = rig.engine.reconciler.kept
    real = kept.full

    def full() -> Any:
        done.set()
        return real()

    try:
        rig.engine.datastores.list()
        kept.full = full
        rig.engine.watcher.start()
        assert done.wait(5), "the watcher never refreshed the list's read"
    finally:
        rig.engine.close()


def test_drift_reads_zfs_itself(kept_rig: tuple[Rig, Clock], api: TestClient) -> None:
    """A stale read must never make drift say something false: it reads ZFS now."""
    rig, _clock = kept_rig
    put(api, "vm", nfs())
    listed(api)
    rig.zfs.destroy("tank/datastores/vm", recursive=True)  # behind ZDS's back
    assert listed(api)["vm"]["online"] is True  # the kept read does not know yet
    items = api.get("/api/v1/system/drift").json()["items"]
    assert any(i["subject"] == "vm" and "missing" in i["reason"] for i in items), items


# --- the kept read alone: ordering of changes and reads --------------------------------

def test_a_change_during_a_full_read_is_read_again_after_it() -> None:
    changes = ZfsChanges()
    store = {"tank/datastores/a": 1}
    reads: list[str] = []

    def full() -> dict[str, int]:
        reads.append("full")
        seen = dict(store)
        store["tank/datastores/a"] = 2  # changed while the read was under way...
        changes.touch(["tank/datastores/a"])  # ...and recorded after it
        return seen

    def some(view: dict[str, int], names: Any) -> dict[str, int]:
        reads.append(",".join(names))
        return {**view, **{n: store[n] for n in names}}

    kept = KeptRead(changes, full, some, INTERVAL)
    assert kept.get().view == {"tank/datastores/a": 1}
    assert kept.get().view == {"tank/datastores/a": 2}
    assert kept.get().view == {"tank/datastores/a": 2}
    assert reads == ["full", "tank/datastores/a"]


def test_touches_name_datasets_below_the_datastores_parent_only() -> None:
    changes = ZfsChanges()
    changes.touch(["tank/datastores/a@s1", "tank/replicas/x", "tank/datastores/b"])
    assert changes.since(0) == (False, {"tank/datastores/a": 1, "tank/datastores/b": 1})
    changes.touch(["tank/datastores"])
    assert changes.since(1)[0] is True
    changes.touch(["tank"])
    assert changes.since(2)[0] is True


def test_every_zfs_method_is_a_change_or_unseen() -> None:
    """A new ZfsHost method must be classified here (appliance/kept.py): unclassified,
    it counts as a change of everything, which is safe but makes lists read ZFS."""
    methods = {m for m in vars(ZfsHost) if not m.startswith("_") and callable(
        getattr(ZfsHost, m))}
    assert methods == set(CHANGES) | UNSEEN, methods ^ (set(CHANGES) | UNSEEN)
    assert not set(CHANGES) & UNSEEN


def test_an_unknown_change_method_invalidates_everything() -> None:
    changes = ZfsChanges()

    class Odd:
        def reshuffle(self) -> None:
            pass

        def list_pools(self) -> list[str]:
            return []

    zfs: Any = ObservedZfs(Odd(), changes)  # type: ignore[arg-type]
    zfs.list_pools()
    assert changes.seq == 0
    zfs.reshuffle()
    assert changes.since(0)[0] is True


# --- the paged, filtered list ----------------------------------------------------------

def test_pages_follow_the_cursor_and_the_unpaged_list_is_unchanged(
        kept_rig: tuple[Rig, Clock], api: TestClient) -> None:
    names = [f"ds{i:02d}" for i in range(7)]
    for i, name in enumerate(names):
        put(api, name, nfs() if i % 2 else iscsi())
    everything = api.get("/api/v1/datastores")
    assert [d["name"] for d in everything.json()] == names
    assert "Link" not in everything.headers and "ZDS-Next-After" not in everything.headers
    seen: list[str] = []
    params: dict[str, Any] = {"limit": 3}
    pages = 0
    while True:
        r = api.get("/api/v1/datastores", params=params)
        assert r.status_code == 200, r.text
        pages += 1
        seen += [d["name"] for d in r.json()]
        if "ZDS-Next-After" not in r.headers:
            assert "Link" not in r.headers
            break
        assert r.headers["Link"].endswith('; rel="next"')
        assert f"after={r.headers['ZDS-Next-After']}" in r.headers["Link"]
        params["after"] = r.headers["ZDS-Next-After"]
    assert seen == names and pages == 3
    # a page's items are the unpaged list's
    assert api.get("/api/v1/datastores", params={"limit": 2, "after": "ds02"}).json() == \
        everything.json()[3:5]
    # a cursor that no longer exists still works (names after it)
    assert [d["name"] for d in api.get("/api/v1/datastores",
                                       params={"after": "ds035"}).json()] == names[4:]


def test_filters_by_protocol_pool_and_labels(kept_rig: tuple[Rig, Clock],
                                             api: TestClient) -> None:
    put(api, "a", nfs(labels={"tier": "gold", "site": "x"}))
    put(api, "b", iscsi(labels={"tier": "gold"}))
    put(api, "c", nfs(labels={"tier": "bronze"}))
    assert set(listed(api, protocol="nfs3")) == {"a", "c"}
    assert set(listed(api, protocol="iscsi")) == {"b"}
    assert set(listed(api, pool="tank")) == {"a", "b", "c"}
    assert set(listed(api, pool="other")) == set()
    assert set(listed(api, label="tier=gold")) == {"a", "b"}
    assert set(listed(api, label=["tier=gold", "site=x"])) == {"a"}
    assert set(listed(api, label=["tier=gold", "tier=gold"])) == {"a", "b"}
    assert set(listed(api, label=["tier=gold", "tier=bronze"])) == set()  # both must hold
    assert set(listed(api, label="tier=gold", protocol="iscsi", limit=5)) == {"b"}
    r = api.get("/api/v1/datastores", params={"label": "tier=gold", "limit": 1})
    assert [d["name"] for d in r.json()] == ["a"] and r.headers["ZDS-Next-After"] == "a"
    assert "label=tier%3Dgold" in r.headers["Link"]


@pytest.mark.parametrize("params", [
    {"limit": 0}, {"limit": 1001}, {"protocol": "smb"}, {"label": "tier"},
    {"label": "Tier=gold"}, {"after": "Not A Name"},
    {"pool": "-bad"},
])
def test_bad_list_queries_are_refused(api: TestClient, params: dict[str, Any]) -> None:
    r = api.get("/api/v1/datastores", params=params)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] in ("invalid_input", "validation_error"), r.json()


def test_the_service_listing_says_the_cursor_and_age(kept_rig: tuple[Rig, Clock],
                                                    api: TestClient) -> None:
    rig, clock = kept_rig
    for name in ("a", "b", "c"):
        put(api, name, nfs())
    svc = rig.engine.datastores
    first = svc.listing(ListQuery(limit=2))
    assert [v.record.name for v in first.items] == ["a", "b"] and first.next_after == "b"
    clock.now += 7
    last = svc.listing(ListQuery(limit=2, after="b"))
    assert [v.record.name for v in last.items] == ["c"] and last.next_after is None
    assert last.zfs_age == 7.0
