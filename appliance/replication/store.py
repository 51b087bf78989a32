"""Replication records in the appliance's SQLite: outgoing replications (this appliance
is the source) and the source keys this appliance authorizes (it is the target)."""

from __future__ import annotations

import builtins
import json
import time
from dataclasses import dataclass

from appliance.host.ssh import AuthorizedKey
from appliance.replication.model import (
    ReplicationRecord,
    ReplicationSpec,
    ReplicationStatus,
)
from appliance.store import Store

SCHEMA = """
CREATE TABLE IF NOT EXISTS replications (
    name TEXT PRIMARY KEY,
    datastore TEXT NOT NULL,
    spec TEXT NOT NULL,
    status TEXT,
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS promotions (
    datastore TEXT PRIMARY KEY,
    replication TEXT NOT NULL,
    replica TEXT NOT NULL,
    dataset TEXT NOT NULL,
    mountpoint TEXT,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS replication_keys (
    name TEXT PRIMARY KEY,
    public_key TEXT NOT NULL,
    prefix TEXT NOT NULL,
    sources TEXT NOT NULL,
    created REAL NOT NULL
);
"""


@dataclass(frozen=True)
class Promotion:
    """A promote in progress, recorded before anything changes: replica ``replica``
    (of replication ``replication``) becoming datastore ``datastore`` at ``dataset``,
    mounted at ``mountpoint`` (file systems). A crash part-way is finished from it."""

    datastore: str
    replication: str
    replica: str
    dataset: str
    mountpoint: str | None


class ReplicationStore:
    def __init__(self, store: Store) -> None:
        self.store = store
        with store.connect() as db:
            for stmt in SCHEMA.split(";"):
                if stmt.strip():
                    db.execute(stmt)

    # --- outgoing -------------------------------------------------------------------
    def put(self, rec: ReplicationRecord) -> None:
        now = time.time()
        with self.store.connect() as db:
            db.execute(
                "INSERT INTO replications (name, datastore, spec, status, created, updated) "
                "VALUES (?,?,?,?,?,?) ON CONFLICT(name) DO UPDATE SET "
                "datastore=excluded.datastore, spec=excluded.spec, status=excluded.status, "
                "updated=excluded.updated",
                (rec.name, rec.spec.datastore, rec.spec.to_json(), rec.status.to_json(),
                 rec.created or now, now))

    def get(self, name: str) -> ReplicationRecord | None:
        with self.store.connect() as db:
            row = db.execute("SELECT * FROM replications WHERE name=?", (name,)).fetchone()
        return _record(row) if row else None

    def list(self) -> list[ReplicationRecord]:
        with self.store.connect() as db:
            rows = db.execute("SELECT * FROM replications ORDER BY name").fetchall()
        return [_record(r) for r in rows]

    def of_datastore(self, datastore: str) -> builtins.list[ReplicationRecord]:
        with self.store.connect() as db:
            rows = db.execute("SELECT * FROM replications WHERE datastore=? ORDER BY name",
                              (datastore,)).fetchall()
        return [_record(r) for r in rows]

    def set_status(self, name: str, status: ReplicationStatus) -> None:
        with self.store.connect() as db:
            db.execute("UPDATE replications SET status=?, updated=? WHERE name=?",
                       (status.to_json(), time.time(), name))

    def delete(self, name: str) -> None:
        with self.store.connect() as db:
            db.execute("DELETE FROM replications WHERE name=?", (name,))

    # --- promotions in progress -------------------------------------------------------
    def put_promotion(self, p: Promotion) -> None:
        with self.store.connect() as db:
            db.execute("INSERT OR REPLACE INTO promotions (datastore, replication, replica, "
                       "dataset, mountpoint, created) VALUES (?,?,?,?,?,?)",
                       (p.datastore, p.replication, p.replica, p.dataset, p.mountpoint,
                        time.time()))

    def get_promotion(self, datastore: str) -> Promotion | None:
        with self.store.connect() as db:
            row = db.execute("SELECT * FROM promotions WHERE datastore=?",
                             (datastore,)).fetchone()
        if row is None:
            return None
        return Promotion(row["datastore"], row["replication"], row["replica"],
                         row["dataset"], row["mountpoint"])

    def promotions(self) -> builtins.list[Promotion]:
        with self.store.connect() as db:
            rows = db.execute("SELECT datastore FROM promotions").fetchall()
        return [p for r in rows if (p := self.get_promotion(r["datastore"])) is not None]

    def delete_promotion(self, datastore: str) -> None:
        with self.store.connect() as db:
            db.execute("DELETE FROM promotions WHERE datastore=?", (datastore,))

    # --- authorized source keys -----------------------------------------------------
    def put_key(self, key: AuthorizedKey) -> None:
        with self.store.connect() as db:
            db.execute(
                "INSERT INTO replication_keys (name, public_key, prefix, sources, created) "
                "VALUES (?,?,?,?,?) ON CONFLICT(name) DO UPDATE SET "
                "public_key=excluded.public_key, prefix=excluded.prefix, "
                "sources=excluded.sources",
                (key.name, key.public_key, key.prefix, json.dumps(list(key.sources)),
                 time.time()))

    def source_keys(self) -> builtins.list[AuthorizedKey]:
        with self.store.connect() as db:
            rows = db.execute("SELECT * FROM replication_keys ORDER BY name").fetchall()
        return [AuthorizedKey(r["name"], r["public_key"], r["prefix"],
                              tuple(json.loads(r["sources"]))) for r in rows]

    def delete_key(self, name: str) -> bool:
        with self.store.connect() as db:
            cur = db.execute("DELETE FROM replication_keys WHERE name=?", (name,))
        return cur.rowcount > 0


def _record(row: object) -> ReplicationRecord:
    r = row  # sqlite3.Row
    return ReplicationRecord(
        spec=ReplicationSpec.from_json(r["spec"]),  # type: ignore[index]
        status=ReplicationStatus.from_json(r["status"]),  # type: ignore[index]
        created=r["created"], updated=r["updated"])  # type: ignore[index]
