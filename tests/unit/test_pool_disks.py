"""A degraded pool is reported as degraded (200, with the pool's problem and the action),
not down, while everything is still served; the admin replaces, attaches, detaches,
offlines and onlines pool disks through the API as jobs that wait out the resilver."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from fastapi.testclient import TestClient

from appliance.host.zfs import PoolInfo, PoolLayout, PoolStatus, VdevNode, VdevSpec
from tests.unit.conftest import Rig
from tests.unit.test_api_datastores import iscsi_body, nfs_body

API = "/api/v1"
A, B, C = (f"/dev/disk/by-id/virtio-spare{i}" for i in (1, 2, 3))


def mirror(rig: Rig, client: TestClient) -> None:
    """A pool 'fast' mirrored on two spare disks, with an NFS and an iSCSI datastore."""
    rig.zfs.create_pool("fast", PoolLayout(data=(VdevSpec("mirror", (A, B)),)), {},
                        {"acltype": "posixacl", "xattr": "sa"})
    rig.engine.pools.ensure_parent("fast")
    for name, body in (("nfsds", nfs_body()), ("lunds", iscsi_body())):
        r = client.put(f"{API}/datastores/{name}", json={**body, "pool": "fast"})
        assert r.status_code == 201, r.text


def disk_job(client: TestClient, action: str, **body: object) -> dict[str, Any]:
    r = client.post(f"{API}/pools/fast/disks/{action}", params={"wait": 10}, json=body)
    assert r.status_code == 202, r.text
    job: dict[str, Any] = r.json()
    assert job["state"] == "succeeded", job
    return job


def test_a_missing_mirror_disk_is_degraded_not_down(client: TestClient, rig: Rig) -> None:
    mirror(rig, client)
    rig.zfs.fail_disk(B)  # as after a boot without it
    rig.engine.reconciler.check()
    r = client.get(f"{API}/system/health")
    assert r.status_code == 200, r.text
    h = r.json()
    assert h["status"] == "degraded" and h["components"]["zfs"]["ok"] is True
    (problem,) = h["pools"]
    assert problem["pool"] == "fast" and problem["health"] == "DEGRADED"
    assert "zpool replace" in problem["action"] and "fast is DEGRADED" in h["message"]
    assert all(d["serving"] for d in client.get(f"{API}/datastores").json())
    assert client.get(f"{API}/system/drift").json()["in_sync"] is True
    pool = client.get(f"{API}/pools/fast").json()
    states = {d["name"]: d["state"] for d in pool["vdevs"]["children"][0]["children"]}
    assert states == {"virtio-spare1": "ONLINE", "virtio-spare2": "UNAVAIL"}

    job = disk_job(client, "replace", disk="virtio-spare2", new_disk=C)
    assert job["result"]["health"] == "ONLINE" and "resilvered" in job["result"]["scan"]
    rig.engine.reconciler.check()
    h = client.get(f"{API}/system/health").json()
    assert h["status"] == "ok" and h["pools"] == [], h
    pool = client.get(f"{API}/pools/fast").json()
    names = [d["name"] for d in pool["vdevs"]["children"][0]["children"]]
    assert names == ["virtio-spare1", "virtio-spare3"]


def test_offline_online_attach_detach(client: TestClient, rig: Rig) -> None:
    mirror(rig, client)
    disk_job(client, "offline", disk=B)  # a path works as well as the name
    assert client.get(f"{API}/pools/fast").json()["health"] == "DEGRADED"
    r = client.post(f"{API}/pools/fast/disks/offline", params={"wait": 10},
                    json={"disk": "virtio-spare1"})
    assert r.json()["state"] == "failed" and "no valid replicas" in r.json()["error"]["message"]
    disk_job(client, "online", disk="virtio-spare2")
    assert client.get(f"{API}/pools/fast").json()["health"] == "ONLINE"
    disk_job(client, "attach", disk="virtio-spare1", new_disk=C)
    children = client.get(f"{API}/pools/fast").json()["vdevs"]["children"][0]["children"]
    assert len(children) == 3
    disk_job(client, "detach", disk="virtio-spare3")
    children = client.get(f"{API}/pools/fast").json()["vdevs"]["children"][0]["children"]
    assert [c["name"] for c in children] == ["virtio-spare1", "virtio-spare2"]


def test_bad_disk_operations_are_refused_before_anything_runs(client: TestClient,
                                                              rig: Rig) -> None:
    mirror(rig, client)
    for action, body, status in (
            ("replace", {"disk": "virtio-nosuch", "new_disk": C}, 404),  # not a member
            ("replace", {"disk": "virtio-spare2"}, 422),  # no new disk
            ("replace", {"disk": "virtio-spare2", "new_disk": "relative"}, 422),
            ("replace", {"disk": "virtio-spare2", "new_disk": "/dev/disk/by-id/gone"}, 404),
            ("offline", {"disk": "virtio-spare2", "new_disk": C}, 422),
            ("offline", {"disk": "$(reboot)"}, 404),
            ("explode", {"disk": "virtio-spare2"}, 404)):  # one path per action
        r = client.post(f"{API}/pools/fast/disks/{action}", json=body)
        assert r.status_code == status, (action, body, r.text)
        assert "error" in r.json()
    assert client.post(f"{API}/pools/nope/disks/offline",
                       json={"disk": "x"}).status_code == 404
    assert rig.engine.jobs.list(kind="pool.disk") == []
    assert client.get(f"{API}/pools/fast").json()["health"] == "ONLINE"


def test_a_replace_is_done_only_when_zfs_has_detached_the_old_disk(
        client: TestClient, rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """ZFS detaches the replaced disk a moment after the resilver ends, and the resilver
    may not show yet when `zpool replace` returns: until the ``replacing-0`` group is gone
    the pool is DEGRADED, and the job must not answer before that (a CI run got
    'succeeded' with DEGRADED)."""
    mirror(rig, client)
    rig.zfs.fail_disk(B)
    real_status, real_pools, real_replace = \
        rig.zfs.pool_status, rig.zfs.list_pools, rig.zfs.replace_device
    window = {"reads": 0}  # status reads that still show the replace under way

    def replace_device(pool: str, device: str, new_device: str, force: bool = False) -> None:
        real_replace(pool, device, new_device, force)
        window["reads"] = 2

    def status(pool: str) -> PoolStatus:
        st = real_status(pool)
        if pool != "fast" or window["reads"] == 0:
            return st
        window["reads"] -= 1
        (group,) = st.config.children
        interim = replace(group, children=(group.children[0], VdevNode(
            "replacing-1", "DEGRADED", children=(VdevNode("virtio-spare2", "UNAVAIL"),
                                                 group.children[1]))))
        return replace(st, state="DEGRADED", config=replace(st.config, children=(interim,)))

    def pools() -> list[PoolInfo]:
        return [replace(p, health="DEGRADED") if p.name == "fast" and window["reads"] else p
                for p in real_pools()]

    monkeypatch.setattr(rig.zfs, "pool_status", status)
    monkeypatch.setattr(rig.zfs, "list_pools", pools)
    monkeypatch.setattr(rig.zfs, "replace_device", replace_device)
    job = disk_job(client, "replace", disk="virtio-spare2", new_disk=C)
    assert window["reads"] == 0 and job["result"]["health"] == "ONLINE", job
