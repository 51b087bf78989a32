"""Request bodies and parameters are strict: a value of the wrong JSON type is refused
(422) rather than coerced, as the published schema says (issue 24: ``"enabled": 0``
was taken as false)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.unit.conftest import Rig

API = "/api/v1"
POLICY: dict[str, Any] = {"schedule": {"every": "15m"}, "retention": {"daily": 7},
                          "datastores": {"all": True}}


@pytest.mark.parametrize("change", [
    {"enabled": 0},  # not false
    {"enabled": "false"},
    {"retention": {"daily": "7"}},  # not 7
    {"retention": {"daily": True}},  # not 1
    {"retention": {"daily": 7.5}},
    {"schedule": {"every": "15m", "cron": "0 2 * * *"}},  # exactly one (the schema's oneOf)
])
def test_a_value_of_the_wrong_type_is_refused_not_coerced(
        client: TestClient, rig: Rig, change: dict[str, Any]) -> None:
    r = client.put(f"{API}/snapshot-policies/p", json={**POLICY, **change})
    assert r.status_code == 422, (change, r.text)
    assert r.json()["error"]["code"] == "invalid_input"
    assert client.get(f"{API}/snapshot-policies").json() == []


def test_a_whole_number_written_with_a_point_is_that_number(client: TestClient) -> None:
    # JSON does not tell 7 from 7.0, and neither does JSON Schema's "integer"
    r = client.put(f"{API}/snapshot-policies/p", json={**POLICY, "retention": {"daily": 7.0}})
    assert r.status_code == 201, r.text
    assert r.json()["retention"]["daily"] == 7


def test_datastore_flags_are_booleans(client: TestClient) -> None:
    r = client.put(f"{API}/datastores/ds1", json={"protocol": "nfs3", "size": "1G", "thin": 1})
    assert r.status_code == 422, r.text
    assert client.get(f"{API}/datastores").json() == []


def test_an_unknown_or_repeated_query_parameter_is_refused(client: TestClient) -> None:
    r = client.get(f"{API}/datastores", params={"forse": "true"})
    assert r.status_code == 422 and "forse" in r.json()["error"]["message"], r.text
    r = client.get(f"{API}/jobs", params=[("limit", "1"), ("limit", "2")])
    assert r.status_code == 422 and "more than once" in r.json()["error"]["message"], r.text
