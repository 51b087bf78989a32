"""The snapshot policies' own records in the appliance's SQLite: policies, vCenters
(with their passwords: the file is mode 0600 and the API never returns them), the state
of each policy's last run and, per datastore, the last good snapshot and last failure."""

from __future__ import annotations

import builtins
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass

from appliance.model import DatastoreRecord
from appliance.policies.model import PolicySpec, VcenterSpec
from appliance.policies.protection import Protection
from appliance.store import Store

SCHEMA = """
CREATE TABLE IF NOT EXISTS snapshot_policies (
    name TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS policy_state (
    policy TEXT PRIMARY KEY,
    state TEXT NOT NULL,          -- ok | warning | failed
    message TEXT NOT NULL,
    job_id TEXT,
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS policy_datastores (
    policy TEXT NOT NULL,
    datastore TEXT NOT NULL,
    last_ok REAL,
    last_snapshot TEXT,
    last_error TEXT,
    last_error_at REAL,
    PRIMARY KEY (policy, datastore)
);
CREATE TABLE IF NOT EXISTS vcenters (
    name TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    port INTEGER NOT NULL,
    user TEXT NOT NULL,
    password TEXT NOT NULL,
    insecure INTEGER NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL
);
"""


@dataclass(frozen=True)
class PolicyState:
    policy: str
    state: str  # ok | warning | failed
    message: str
    job_id: str | None
    at: float


class PolicyRecords:
    def __init__(self, store: Store) -> None:
        self.store = store
        with store.connect() as db:
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)

    # --- policies -------------------------------------------------------------------
    def put(self, spec: PolicySpec) -> None:
        with self.store.connect() as db:
            db.execute(
                "INSERT INTO snapshot_policies (name, spec, created, updated) VALUES "
                "(?,?,?,?) ON CONFLICT(name) DO UPDATE SET spec=excluded.spec, "
                "updated=excluded.updated",
                (spec.name, spec.to_json(), spec.created, spec.updated))

    def get(self, name: str) -> PolicySpec | None:
        with self.store.connect() as db:
            row = db.execute("SELECT spec FROM snapshot_policies WHERE name=?",
                             (name,)).fetchone()
        return PolicySpec.from_json(row["spec"]) if row else None

    def list(self) -> list[PolicySpec]:
        with self.store.connect() as db:
            rows = db.execute("SELECT spec FROM snapshot_policies ORDER BY name").fetchall()
        return [PolicySpec.from_json(r["spec"]) for r in rows]

    def delete(self, name: str) -> None:
        with self.store.connect() as db:
            db.execute("DELETE FROM snapshot_policies WHERE name=?", (name,))
            db.execute("DELETE FROM policy_state WHERE policy=?", (name,))
            db.execute("DELETE FROM policy_datastores WHERE policy=?", (name,))

    # --- run state ------------------------------------------------------------------
    def set_state(self, policy: str, state: str, message: str, job_id: str | None) -> None:
        with self.store.connect() as db:
            db.execute(
                "INSERT INTO policy_state (policy, state, message, job_id, at) VALUES "
                "(?,?,?,?,?) ON CONFLICT(policy) DO UPDATE SET state=excluded.state, "
                "message=excluded.message, job_id=excluded.job_id, at=excluded.at",
                (policy, state, message, job_id, time.time()))

    def states(self) -> dict[str, PolicyState]:
        with self.store.connect() as db:
            rows = db.execute("SELECT * FROM policy_state").fetchall()
        return {r["policy"]: PolicyState(r["policy"], r["state"], r["message"], r["job_id"],
                                         r["at"]) for r in rows}

    def datastore_ok(self, policy: str, snapshots: Sequence[tuple[str, str]],
                     at: float) -> None:
        """``snapshots``: (datastore, full snapshot name) taken at ``at``."""
        with self.store.connect() as db:
            db.executemany(
                "INSERT INTO policy_datastores (policy, datastore, last_ok, last_snapshot) "
                "VALUES (?,?,?,?) ON CONFLICT(policy, datastore) DO UPDATE SET "
                "last_ok=excluded.last_ok, last_snapshot=excluded.last_snapshot",
                [(policy, d, at, snap) for d, snap in snapshots])

    def datastore_failed(self, policy: str, datastores: Sequence[str], error: str) -> None:
        now = time.time()
        with self.store.connect() as db:
            db.executemany(
                "INSERT INTO policy_datastores (policy, datastore, last_error, "
                "last_error_at) VALUES (?,?,?,?) ON CONFLICT(policy, datastore) DO UPDATE "
                "SET last_error=excluded.last_error, last_error_at=excluded.last_error_at",
                [(policy, d, error, now) for d in datastores])

    def protection(self, records: Sequence[DatastoreRecord]) -> dict[str, Protection]:
        """Per datastore: the policies covering it, its newest policy snapshot and the
        newest failure (only when newer than that snapshot). Two queries for any N."""
        policies = self.list()
        with self.store.connect() as db:
            rows = db.execute("SELECT * FROM policy_datastores").fetchall()
        by_ds: dict[str, list[sqlite3.Row]] = {}
        for r in rows:
            by_ds.setdefault(r["datastore"], []).append(r)
        now = time.time()
        out: dict[str, Protection] = {}
        for rec in records:
            covering = [p.name for p in policies if p.covers(rec)]
            # rows of an earlier datastore of the same name (deleted, made again) do not
            # speak for this one
            mine = [r for r in by_ds.get(rec.name, [])
                    if max(r["last_ok"] or 0, r["last_error_at"] or 0) >= rec.created]
            if not covering and not mine:
                continue
            ok = max((r for r in mine if r["last_ok"]), key=lambda r: float(r["last_ok"]),
                     default=None)
            err = max((r for r in mine if r["last_error_at"]),
                      key=lambda r: float(r["last_error_at"]), default=None)
            last_ok: float | None = ok["last_ok"] if ok else None
            if err is not None and last_ok is not None and err["last_error_at"] < last_ok:
                err = None  # an older failure, mended since
            out[rec.name] = Protection(
                policies=covering,
                last_snapshot=ok["last_snapshot"] if ok else None,
                last_snapshot_at=last_ok,
                age=round(now - last_ok, 1) if last_ok else None,
                last_error=err["last_error"] if err else None,
                last_error_at=err["last_error_at"] if err else None)
        return out

    # --- vCenters -------------------------------------------------------------------
    def put_vcenter(self, vc: VcenterSpec) -> None:
        with self.store.connect() as db:
            db.execute(
                "INSERT INTO vcenters (name, host, port, user, password, insecure, created, "
                "updated) VALUES (?,?,?,?,?,?,?,?) ON CONFLICT(name) DO UPDATE SET "
                "host=excluded.host, port=excluded.port, user=excluded.user, "
                "password=excluded.password, insecure=excluded.insecure, "
                "updated=excluded.updated",
                (vc.name, vc.host, vc.port, vc.user, vc.password, int(vc.insecure),
                 vc.created, vc.updated))

    def get_vcenter(self, name: str) -> VcenterSpec | None:
        with self.store.connect() as db:
            row = db.execute("SELECT * FROM vcenters WHERE name=?", (name,)).fetchone()
        return _vcenter(row) if row else None

    def list_vcenters(self) -> builtins.list[VcenterSpec]:
        with self.store.connect() as db:
            rows = db.execute("SELECT * FROM vcenters ORDER BY name").fetchall()
        return [_vcenter(r) for r in rows]

    def delete_vcenter(self, name: str) -> None:
        with self.store.connect() as db:
            db.execute("DELETE FROM vcenters WHERE name=?", (name,))


def _vcenter(r: sqlite3.Row) -> VcenterSpec:
    return VcenterSpec(name=r["name"], host=r["host"], user=r["user"],
                       password=r["password"], port=int(r["port"]),
                       insecure=bool(r["insecure"]), created=r["created"],
                       updated=r["updated"])
