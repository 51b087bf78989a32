"""Snapshot policies through the REST API on the fakes: create, run, prune with guards,
health and the datastore view, bad input that changes nothing."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from appliance.policies.service import task_name
from tests.unit.conftest import Rig

API = "/api/v1"
ESX = "iqn.1998-01.com.vmware:esxi01-4f2a"


def ds(client: TestClient, name: str, protocol: str = "nfs3", **kw: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"protocol": protocol, "size": "1G", **kw}
    if protocol == "iscsi":
        body["iscsi"] = {"initiators": [ESX]}
    r = client.put(f"{API}/datastores/{name}", json=body)
    assert r.status_code == 201, r.text
    return dict(r.json())


def policy(client: TestClient, name: str, expect: int = 201, **kw: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"schedule": {"every": "15m"}, "retention": {"frequent": 2},
                            "datastores": {"labels": {"protect": "gold"}}}
    body.update(kw)
    r = client.put(f"{API}/snapshot-policies/{name}", json=body)
    assert r.status_code == expect, r.text
    return dict(r.json())


def run(client: TestClient, name: str, state: str = "succeeded") -> dict[str, Any]:
    r = client.post(f"{API}/snapshot-policies/{name}/run", params={"wait": 30})
    assert r.status_code == 202, r.text
    job = dict(r.json())
    assert job["state"] == state, job
    return job


def snaps(client: TestClient, datastore: str, **params: str) -> list[dict[str, Any]]:
    r = client.get(f"{API}/datastores/{datastore}/snapshots", params=params)
    assert r.status_code == 200, r.text
    return list(r.json())


def test_a_policy_snapshots_its_datastores_in_one_batch_and_prunes(
        client: TestClient, rig: Rig) -> None:
    ds(client, "a", labels={"protect": "gold"})
    ds(client, "b", labels={"protect": "gold"})
    ds(client, "lun", "iscsi", labels={"protect": "gold"})
    ds(client, "other")
    p = policy(client, "hourly")
    assert p["covered"] == ["a", "b", "lun"] and p["last_run"] is None
    assert policy(client, "hourly", expect=200) == p, "idempotent PUT"
    client.post(f"{API}/datastores/a/snapshots", json={"name": "by-hand"})
    for _ in range(3):
        job = run(client, "hourly")
    res = job["result"]
    assert res["taken"] == 3 and res["datastores"] == ["a", "b", "lun"]
    assert res["snapshot"].startswith("hourly-") and res["snapshot"].endswith(("Z", "-2", "-3"))
    assert sorted(res["pruned"]) == ["a", "b", "lun"]
    mine = snaps(client, "a", policy="hourly")
    assert len(mine) == 2 and all(s["policy"] == "hourly" for s in mine)
    assert [s["name"] for s in snaps(client, "a", policy="")] == ["by-hand"]
    assert snaps(client, "other") == []
    view = client.get(f"{API}/datastores/a").json()
    assert view["labels"] == {"protect": "gold"}
    prot = view["protection"]
    assert prot["policies"] == ["hourly"] and prot["last_error"] is None
    assert prot["last_snapshot"] == f"tank/datastores/a@{res['snapshot']}"
    assert 0 <= prot["age"] < 60
    health = client.get(f"{API}/system/health").json()
    assert health["components"]["snapshot_policies"]["ok"] is True


def test_pruning_never_takes_a_held_or_cloned_snapshot(client: TestClient, rig: Rig) -> None:
    ds(client, "a", labels={"protect": "gold"})
    policy(client, "p", retention={"frequent": 1})
    first = run(client, "p")["result"]["snapshot"]
    second = run(client, "p")["result"]["snapshot"]
    rig.zfs.hold("zds-repl", [f"tank/datastores/a@{second}"])
    r = client.post(f"{API}/datastores/a/snapshots/{second}/clones", json={"name": "a-copy"})
    assert r.status_code == 201, r.text
    assert first not in [s["name"] for s in snaps(client, "a")], "pruned normally"
    res = run(client, "p")["result"]
    kept = {k["snapshot"]: k["reason"] for k in res["kept"]["a"]}
    assert "a clone depends on it (a-copy)" in kept[second]
    names = [s["name"] for s in snaps(client, "a")]
    assert second in names and res["snapshot"] in names
    res = run(client, "p")["result"]
    assert res["pruned"]["a"] and second in [s["name"] for s in snaps(client, "a")]
    client.delete(f"{API}/datastores/a-copy", params={"wait": 10, "force": True})
    res = run(client, "p")["result"]
    assert "held by zds-repl" in {k["snapshot"]: k["reason"] for k in res["kept"]["a"]}[second]
    assert [s["held"] for s in snaps(client, "a") if s["name"] == second] == [True]


def test_bad_policies_are_refused_and_change_nothing(client: TestClient, rig: Rig) -> None:
    ds(client, "a")
    before = list(rig.zfs.iter_names())
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({"retention": {"frequent": 0}}, 422, "would keep no snapshot"),
        ({"datastores": {"names": ["nope"]}}, 404, "datastore 'nope' not found"),
        ({"datastores": {}}, 422, "covers no datastore"),
        ({"schedule": {"every": "5s"}}, 422, "from 10 s"),
        ({"schedule": {"cron": "61 * * * *"}}, 422, "in cron's grammar"),  # the pattern
        ({"schedule": {"cron": "0 0 31 2 *"}}, 422, "invalid cron"),  # a day never coming
        # well formed, so not 422: which zones and hook programs exist is the appliance's
        ({"schedule": {"cron": "0 2 * * *", "timezone": "Mars/Base"}}, 404, "time zone"),
        ({"schedule": {"every": "1h", "cron": "0 2 * * *"}}, 422, "exactly one"),
        ({"vmware": {"vcenter": "vc1"}}, 404, "not registered"),
        ({"hooks": {"pre": ["/bin/sh", "-c", "id"]}}, 404, "hooks directory"),
        ({"hooks": {"pre": ["../zds-ok"]}}, 422, "a file name in"),
        ({"retention": {"daily": -1}}, 422, "retention"),
    ]
    for change, code, text in cases:
        r = client.put(f"{API}/snapshot-policies/p", json={
            "schedule": {"every": "15m"}, "retention": {"daily": 7},
            "datastores": {"names": ["a"]}, **change})
        assert r.status_code == code, (change, r.text)
        assert text in r.json()["error"]["message"], (change, r.text)
    assert client.get(f"{API}/snapshot-policies").json() == []
    assert list(rig.zfs.iter_names()) == before


def test_a_full_pool_fails_the_run_loses_nothing_and_shows_in_health(
        client: TestClient, rig: Rig) -> None:
    ds(client, "a", labels={"protect": "gold"})
    policy(client, "p", retention={"frequent": 1})
    first = run(client, "p")["result"]["snapshot"]
    avail = rig.zfs.get_dataset("tank")
    assert avail is not None
    rig.zfs.write("tank/datastores/a", avail.int_prop("available"))
    job = run(client, "p", state="failed")
    assert "no snapshot taken, none deleted" in job["error"]["message"]
    assert "out of space" in job["error"]["message"]
    assert [s["name"] for s in snaps(client, "a")] == [first]
    h = client.get(f"{API}/system/health").json()
    assert h["status"] == "degraded" and h["components"]["snapshot_policies"]["ok"] is False
    assert "snapshot policy p failed" in h["message"]
    prot = client.get(f"{API}/datastores/a").json()["protection"]
    assert prot["last_snapshot"].endswith(first) and "out of space" in prot["last_error"]


def test_hooks_run_around_the_snapshot_and_a_failed_pre_hook_stops_it(
        client: TestClient, rig: Rig) -> None:
    rig.hosts.hooks.programs.update({"freeze": (0, "frozen\n", "", 0.1),
                                     "thaw": (0, "thawed\n", "", 0.1),
                                     "broken": (2, "", "cannot freeze\n", 0.1)})
    ds(client, "a", labels={"protect": "gold"})
    policy(client, "p", hooks={"pre": ["freeze", "--all"], "post": ["thaw"]})
    res = run(client, "p")["result"]
    assert [h["phase"] for h in res["hooks"]] == ["pre", "post"]
    assert res["hooks"][0]["stdout"] == "frozen\n" and res["consistency"] == "hooks"
    argv, env = rig.hosts.hooks.calls[0]
    assert argv == ("/etc/zds/hooks/freeze", "--all")
    assert env["ZDS_POLICY"] == "p" and env["ZDS_DATASTORES"] == "a"
    assert env["ZDS_SNAPSHOT"] == res["snapshot"]
    policy(client, "p", expect=200, hooks={"pre": ["broken"], "post": ["thaw"]})
    job = run(client, "p", state="failed")
    assert "pre hook failed (exit 2: cannot freeze)" in job["error"]["message"]
    assert [h["phase"] for h in job["error"]["detail"]["hooks"]] == ["pre", "post"]
    assert rig.hosts.hooks.calls[-1][0][0].endswith("/thaw"), "post runs after a failed pre"
    assert len(snaps(client, "a")) == 1


def test_a_label_that_selects_nothing_yet_is_not_a_failure(client: TestClient,
                                                          rig: Rig) -> None:
    policy(client, "future")
    res = run(client, "future")["result"]
    assert res["taken"] == 0 and res["warnings"] == [] and "nothing to snapshot" in res["note"]
    assert client.get(f"{API}/system/health").json()["components"]["snapshot_policies"]["ok"]
    ds(client, "later", labels={"protect": "gold"})  # covered without touching the policy
    assert run(client, "future")["result"]["datastores"] == ["later"]
    # a named datastore deleted later: the run says so, and health warns
    policy(client, "named", datastores={"names": ["later"]})
    job = client.delete(f"{API}/datastores/later", params={"wait": 10}).json()
    assert job["state"] == "succeeded", job
    view = client.get(f"{API}/snapshot-policies/named").json()
    assert view["missing"] == ["later"] and view["covered"] == []
    res = run(client, "named")["result"]
    assert "named datastores do not exist: later" in res["warnings"][0]
    h = client.get(f"{API}/system/health").json()
    assert not h["components"]["snapshot_policies"]["ok"] and "later" in h["message"]


def test_a_new_policy_waits_for_its_next_slot_and_a_disabled_one_never_runs(
        client: TestClient, rig: Rig) -> None:
    ds(client, "a", labels={"protect": "gold"})
    p = policy(client, "p")
    assert p["next_run"] > p["created"] and p["next_run"] % 900 == 0
    sched = rig.engine.ctx.scheduler
    # the metrics collector shares the one clock: only policy runs and tasks count here
    assert [j for j in sched.tick() if j.kind == "policy.run"] == [], \
        "the slot before the policy existed is not run"
    assert task_name("p") in sched.tasks()
    policy(client, "p", expect=200, enabled=False)
    assert task_name("p") not in sched.tasks() and client.get(
        f"{API}/snapshot-policies/p").json()["next_run"] is None
    r = client.post(f"{API}/snapshot-policies/p/run")
    assert r.status_code == 409 and "disabled" in r.json()["error"]["message"]
    assert client.delete(f"{API}/snapshot-policies/p").status_code == 204
    assert client.get(f"{API}/snapshot-policies/p").status_code == 404


def test_a_datastore_in_two_policies_each_prunes_only_its_own(client: TestClient,
                                                             rig: Rig) -> None:
    ds(client, "a", labels={"protect": "gold"})
    ds(client, "b", labels={"protect": "gold"})
    policy(client, "fast", retention={"frequent": 1})
    policy(client, "slow", retention={"frequent": 3}, datastores={"names": ["a"]})
    for _ in range(3):
        run(client, "fast")
        run(client, "slow")
    assert len(snaps(client, "a", policy="fast")) == 1
    assert len(snaps(client, "a", policy="slow")) == 3
    assert len(snaps(client, "b", policy="fast")) == 1 and snaps(client, "b", policy="slow") == []
    calls: list[tuple[str, ...]] = []
    for method in ("destroy_snapshot_recursive", "destroy_snapshots"):
        real = getattr(rig.zfs, method)

        def spy(*args: Any, _real: Any = real, _name: str = method) -> Any:
            calls.append((_name, *args))
            return _real(*args)

        setattr(rig.zfs, method, spy)
    res = run(client, "fast")["result"]
    # both datastores drop the same expired name: one recursive destroy does it
    assert res["pruned"] == {"a": [res["pruned"]["a"][0]], "b": res["pruned"]["a"]}
    assert calls == [("destroy_snapshot_recursive", "tank/datastores",
                      res["pruned"]["a"][0])]
    prot = client.get(f"{API}/datastores/a").json()["protection"]
    assert prot["policies"] == ["fast", "slow"] and "@fast-" in prot["last_snapshot"]


def test_a_clone_says_how_to_mount_it(client: TestClient, rig: Rig) -> None:
    ds(client, "nfs1")
    ds(client, "lun1", "iscsi")
    for name in ("nfs1", "lun1"):
        assert client.post(f"{API}/datastores/{name}/snapshots",
                           json={"name": "s1"}).status_code == 201
    nfs = client.post(f"{API}/datastores/nfs1/snapshots/s1/clones",
                      json={"name": "nfs1-restore"}).json()
    notes = " ".join(nfs["attach"]["notes"])
    assert "clone of snapshot tank/datastores/nfs1@s1" in notes
    assert "registervm /vmfs/volumes/nfs1-restore/" in notes and "qemu-img convert" in notes
    assert any("--share=/tank/datastores/nfs1-restore" in c for c in nfs["attach"]["esxi"])
    lun = client.post(f"{API}/datastores/lun1/snapshots/s1/clones",
                      json={"name": "lun1-restore"}).json()
    esxi = lun["attach"]["esxi"]
    assert "esxcli storage vmfs snapshot resignature --volume-label=lun1" in esxi
    assert not any("create the VMFS datastore" in c for c in esxi), "never format a clone"
    assert lun["iscsi"]["wwn"] in " ".join(lun["attach"]["notes"])
    plain = client.get(f"{API}/datastores/lun1").json()["attach"]["esxi"]
    assert any("create the VMFS datastore" in c for c in plain)
    assert not any("resignature" in c for c in plain)


def test_a_hold_through_the_api_pins_a_snapshot(client: TestClient, rig: Rig) -> None:
    ds(client, "a", labels={"protect": "gold"})
    policy(client, "p", retention={"frequent": 1})
    first = run(client, "p")["result"]["snapshot"]
    base = f"{API}/datastores/a/snapshots/{first}/holds"
    assert client.put(f"{base}/keep").json() == ["keep"]
    assert client.put(f"{base}/keep").status_code == 409
    assert client.put(f"{base}/Bad Tag").status_code == 422
    r = client.delete(f"{API}/datastores/a/snapshots/{first}")
    assert r.status_code == 409 and "release the hold" in r.json()["error"]["message"]
    run(client, "p")
    assert first in [s["name"] for s in snaps(client, "a")], "held: not pruned"
    assert client.get(base).json() == ["keep"]
    assert client.delete(f"{base}/keep").json() == []
    assert client.delete(f"{base}/keep").status_code == 404
    run(client, "p")
    assert first not in [s["name"] for s in snaps(client, "a")], "released: pruned"
