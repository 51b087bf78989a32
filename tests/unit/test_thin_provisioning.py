"""Thin provisioning like an array: thin datastores may promise a pool several times its
capacity (a per-pool ratio, 20x by default, kept with the pool), the answer warns when
the pool is overcommitted, health alerts at 80/90/95% fill, and only a promise beyond
the ratio is refused (409 insufficient_space, nothing created)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from appliance.host.fakes.zfs import GiB
from tests.unit.conftest import Rig

API = "/api/v1"


def nfs(size: str, thin: bool = True) -> dict[str, object]:
    return {"protocol": "nfs3", "size": size, "thin": thin,
            "nfs": {"clients": [{"match": "192.0.2.0/24"}]}}


def test_thin_datastores_overcommit_up_to_the_pools_ratio(client: TestClient,
                                                          rig: Rig) -> None:
    pool = client.get(f"{API}/pools/tank").json()
    assert pool["overcommit"] == 20.0 and pool["promised"] == 0
    r = client.put(f"{API}/datastores/small", json=nfs("10G"))
    assert r.status_code == 201 and r.json()["warnings"] == []
    # the fake pool holds ~100 GiB: 500G thin is 5x, allowed, with a warning
    r = client.put(f"{API}/datastores/big", json=nfs("500G"))
    assert r.status_code == 201, r.text
    (warning,) = r.json()["warnings"]
    assert "overcommitted 5." in warning and "80/90/95%" in warning
    assert client.get(f"{API}/pools/tank").json()["promised"] == 510 * GiB
    # thick is still limited by free space, not by the ratio
    r = client.put(f"{API}/datastores/thick", json=nfs("200G", thin=False))
    assert r.status_code == 409 and r.json()["error"]["code"] == "insufficient_space"
    # beyond 20x: refused, clearly, and nothing is made
    r = client.put(f"{API}/datastores/huge", json=nfs("2T"))
    assert r.status_code == 409, r.text
    err = r.json()["error"]
    assert err["code"] == "insufficient_space" and "20x" in err["message"]
    assert "PATCH /api/v1/pools/tank" in err["message"]
    assert err["detail"]["overcommit"] == 20.0
    assert rig.engine.store.get_datastore("huge") is None
    assert rig.zfs.get_dataset("tank/datastores/huge") is None


def test_the_ratio_is_set_per_pool_and_travels_with_it(client: TestClient, rig: Rig) -> None:
    assert client.put(f"{API}/datastores/big", json=nfs("500G")).status_code == 201
    r = client.patch(f"{API}/pools/tank", json={"overcommit": 30})
    assert r.status_code == 200 and r.json()["overcommit"] == 30.0
    props = {p.name: p.properties for p in rig.zfs.list_pools()}
    assert props["tank"]["zds:overcommit"] == "30"  # a pool property: moves with the pool
    assert client.put(f"{API}/datastores/huge", json=nfs("2T")).status_code == 201
    # not below what is promised already, and only sane values
    r = client.patch(f"{API}/pools/tank", json={"overcommit": 2})
    assert r.status_code == 409 and r.json()["error"]["detail"]["promised"] > 0
    assert client.patch(f"{API}/pools/tank", json={"overcommit": 0.5}).status_code == 422
    assert client.patch(f"{API}/pools/nope", json={"overcommit": 2}).status_code == 404
    assert client.get(f"{API}/pools/tank").json()["overcommit"] == 30.0


def test_health_alerts_as_the_pool_fills(client: TestClient, rig: Rig) -> None:
    assert client.put(f"{API}/datastores/vm", json=nfs("500G")).status_code == 201
    seen = []
    size = rig.zfs.list_pools()[0].size
    for fill in (70, 82, 91, 100):
        free = rig.zfs.get_dataset("tank/datastores/vm")
        assert free is not None
        most = free.int_prop("referenced") + free.int_prop("available")
        rig.zfs.write("tank/datastores/vm", min(most, int(size * fill / 100)))
        rig.engine.reconciler.check()  # what the watcher does every health_interval
        h = client.get(f"{API}/system/health").json()
        pct = rig.zfs.list_pools()[0].capacity
        seen.append((pct // 5 * 5 if pct < 95 else 95, h["status"],
                     [a["level"] for a in h["alerts"]]))
        if h["alerts"]:
            assert h["alerts"][0]["pool"] == "tank" and f"{pct}% full" in h["message"]
    assert seen == [(70, "ok", []), (80, "ok", ["warning"]), (90, "degraded", ["critical"]),
                    (95, "degraded", ["full"])], seen


def test_the_promise_is_summed_by_the_store_without_reading_every_record(
        client: TestClient, rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PUT checks overcommit with one SQL sum, not by parsing every record (at 1,000
    datastores that made each PUT ~1 s slower under emulation); growing a datastore does
    not count its old size against itself."""
    for name, size in (("a", "10G"), ("b", "30G")):
        assert client.put(f"{API}/datastores/{name}", json=nfs(size)).status_code == 201
    store = rig.engine.store
    assert store.promised_size("tank") == 40 * GiB
    assert store.promised_size("tank", except_name="b") == 10 * GiB
    assert store.promised_size("other") == 0

    listed: list[int] = []
    real = type(store).list_datastores

    def counting(self: Any) -> Any:
        listed.append(1)
        return real(self)

    monkeypatch.setattr(type(store), "list_datastores", counting)
    r = client.put(f"{API}/datastores/b", json=nfs("1800G"))  # 1810G of the 20x of ~95G
    assert r.status_code == 200 and "overcommitted" in r.json()["warnings"][0], r.text
    assert client.put(f"{API}/datastores/c", json=nfs("1T")).status_code == 409
    assert listed == [], "a PUT read every datastore record"
