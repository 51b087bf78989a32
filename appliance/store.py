"""The appliance's own records in SQLite: datastores, initiator groups, jobs, tokens.

One connection guarded by a lock (the API is one process; SQLite's WAL keeps readers
cheap). Other modules (probes) add their own tables through :meth:`Store.connect`.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from appliance.errors import Unavailable
from appliance.model import DatastoreRecord, DatastoreSpec, InitiatorGroup

SCHEMA = """
CREATE TABLE IF NOT EXISTS datastores (
    name TEXT PRIMARY KEY,
    pool TEXT NOT NULL,
    spec TEXT NOT NULL,
    state TEXT NOT NULL,
    export_id INTEGER UNIQUE,
    iqn TEXT UNIQUE,
    serial TEXT UNIQUE,
    origin TEXT,
    error TEXT,
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS initiator_groups (
    name TEXT PRIMARY KEY,
    initiators TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    target TEXT,
    state TEXT NOT NULL,
    progress REAL NOT NULL DEFAULT 0,
    message TEXT NOT NULL DEFAULT '',
    result TEXT,
    error TEXT,
    created REAL NOT NULL,
    started REAL,
    finished REAL
);
CREATE TABLE IF NOT EXISTS tokens (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    role TEXT NOT NULL,
    hash TEXT NOT NULL,
    created REAL NOT NULL,
    last_used REAL
);
CREATE TABLE IF NOT EXISTS counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS facts (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    recorded REAL NOT NULL
);
"""

FIRST_EXPORT_ID = 100  # ids below are ganesha's own (0 = pseudo root) or the admin's
# ganesha's Export_Id is a DBus uint16; the probes' scratch exports use 65500 and up, and
# four blocks of 16,000 (appliance/transports/nfs.py, export_block) end below them
LAST_EXPORT_ID = 64099


def _export_counter(first: int) -> str:
    """The counters row of the export id block starting at ``first``: the whole range
    (and an HA pair's first node, whose block starts there too) keeps the name it had
    before blocks, so an appliance made a pair counts on from where it was."""
    return "export_id" if first == FIRST_EXPORT_ID else f"export_id:{first}"


class Store:
    def __init__(self, path: Path | str) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        if self.path != ":memory:":
            self._db.execute("PRAGMA journal_mode=WAL")
            # WAL + NORMAL stays consistent on power loss; a lost last record is
            # re-adopted from the zds:* properties ZFS keeps with the dataset
            self._db.execute("PRAGMA synchronous=NORMAL")
            Path(self.path).chmod(0o600)
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(SCHEMA)
        self._migrate()

    def _migrate(self) -> None:
        """Columns added since a database was made (SQLite adds them in place)."""
        columns = {row["name"] for row in self._db.execute("PRAGMA table_info(datastores)")}
        if "nqn" not in columns:  # NVMe/TCP subsystems (round 3)
            self._db.execute("ALTER TABLE datastores ADD COLUMN nqn TEXT")
        self._db.execute("CREATE UNIQUE INDEX IF NOT EXISTS datastores_nqn "
                         "ON datastores(nqn)")

    @contextmanager
    def connect(self) -> Iterator[sqlite3.Connection]:
        """The shared connection, locked, inside one transaction."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # --- datastores -----------------------------------------------------------------

    def put_datastore(self, rec: DatastoreRecord) -> None:
        now = time.time()
        with self.connect() as db:
            db.execute(
                """INSERT INTO datastores (name, pool, spec, state, export_id, iqn, serial,
                       nqn, origin, error, created, updated)
                   VALUES (?,?,?,?,?,?,?,?,?,?,?,?)
                   ON CONFLICT(name) DO UPDATE SET pool=excluded.pool, spec=excluded.spec,
                       state=excluded.state, export_id=excluded.export_id, iqn=excluded.iqn,
                       serial=excluded.serial, nqn=excluded.nqn, origin=excluded.origin,
                       error=excluded.error, updated=excluded.updated""",
                (rec.name, rec.spec.pool, rec.spec.to_json(), rec.state, rec.export_id, rec.iqn,
                 rec.serial, rec.nqn, rec.origin, rec.error, rec.created or now, now),
            )

    def get_datastore(self, name: str) -> DatastoreRecord | None:
        with self.connect() as db:
            row = db.execute("SELECT * FROM datastores WHERE name=?", (name,)).fetchone()
        return _datastore(row) if row else None

    def list_datastores(self) -> list[DatastoreRecord]:
        with self.connect() as db:
            rows = db.execute("SELECT * FROM datastores ORDER BY name").fetchall()
        return [_datastore(r) for r in rows]

    def promised_size(self, pool: str, except_name: str | None = None) -> int:
        """The sizes of ``pool``'s datastores summed (``except_name`` left out), without
        reading every record: a PUT checks overcommit with it at any number of them."""
        with self.connect() as db:
            row = db.execute(
                "SELECT COALESCE(SUM(json_extract(spec, '$.size')), 0) FROM datastores "
                "WHERE pool=? AND name IS NOT ?", (pool, except_name)).fetchone()
        return int(row[0])

    def delete_datastore(self, name: str) -> None:
        with self.connect() as db:
            db.execute("DELETE FROM datastores WHERE name=?", (name,))

    def next_export_id(self, first: int = FIRST_EXPORT_ID,
                       last: int = LAST_EXPORT_ID) -> int:
        """A never-reused ganesha Export_Id in ``first``..``last`` (this node's block in
        an HA pair: appliance/transports/nfs.py, ``export_block``); Unavailable when
        the block is used up. Each block keeps its own counter."""
        key = _export_counter(first)
        with self.connect() as db:
            row = db.execute("SELECT value FROM counters WHERE name=?", (key,)).fetchone()
            used = db.execute("SELECT MAX(export_id) FROM datastores WHERE export_id "
                              "BETWEEN ? AND ?", (first, last)).fetchone()[0] or 0
            counter = row["value"] if row and first <= row["value"] <= last else first - 1
            value = max(counter, used) + 1
            if value > last:
                raise Unavailable(f"no NFS export id is left in {first}..{last}, this "
                                  "appliance's block of ganesha Export_Ids (docs/ha.md, "
                                  "\"Export ids in a pair\")")
            db.execute(
                "INSERT INTO counters(name, value) VALUES (?, ?) "
                "ON CONFLICT(name) DO UPDATE SET value=excluded.value",
                (key, value),
            )
        return int(value)

    def reserve_export_id(self, export_id: int, first: int = FIRST_EXPORT_ID,
                          last: int = LAST_EXPORT_ID) -> None:
        """Keep the counter of the block ``first``..``last`` above an id adopted from a
        pool's zds:* properties; an id outside the block (the HA peer's) is not ours
        to count."""
        if not first <= export_id <= last:
            return
        with self.connect() as db:
            db.execute(
                "INSERT INTO counters(name, value) VALUES (?, ?) "
                "ON CONFLICT(name) DO UPDATE SET value=MAX(value, excluded.value)",
                (_export_counter(first), export_id),
            )

    # --- initiator groups -----------------------------------------------------------

    def put_group(self, group: InitiatorGroup) -> None:
        now = time.time()
        with self.connect() as db:
            db.execute(
                """INSERT INTO initiator_groups (name, initiators, created, updated)
                   VALUES (?,?,?,?) ON CONFLICT(name) DO UPDATE SET
                   initiators=excluded.initiators, updated=excluded.updated""",
                (group.name, json.dumps(list(group.initiators)), group.created or now, now),
            )

    def get_group(self, name: str) -> InitiatorGroup | None:
        with self.connect() as db:
            row = db.execute("SELECT * FROM initiator_groups WHERE name=?", (name,)).fetchone()
        return _group(row) if row else None

    def list_groups(self) -> list[InitiatorGroup]:
        with self.connect() as db:
            rows = db.execute("SELECT * FROM initiator_groups ORDER BY name").fetchall()
        return [_group(r) for r in rows]

    def delete_group(self, name: str) -> None:
        with self.connect() as db:
            db.execute("DELETE FROM initiator_groups WHERE name=?", (name,))

    # --- tokens ---------------------------------------------------------------------

    def add_token(self, token_id: str, name: str, role: str, digest: str) -> None:
        with self.connect() as db:
            db.execute(
                "INSERT INTO tokens (id, name, role, hash, created) VALUES (?,?,?,?,?)",
                (token_id, name, role, digest, time.time()),
            )

    def get_token(self, token_id: str) -> dict[str, Any] | None:
        with self.connect() as db:
            row = db.execute("SELECT * FROM tokens WHERE id=?", (token_id,)).fetchone()
        return dict(row) if row else None

    def list_tokens(self) -> list[dict[str, Any]]:
        with self.connect() as db:
            rows = db.execute(
                "SELECT id, name, role, created, last_used FROM tokens ORDER BY created"
            ).fetchall()
        return [dict(r) for r in rows]

    def touch_token(self, token_id: str) -> None:
        with self.connect() as db:
            db.execute("UPDATE tokens SET last_used=? WHERE id=?", (time.time(), token_id))

    def delete_token(self, token_id: str) -> bool:
        with self.connect() as db:
            cur = db.execute("DELETE FROM tokens WHERE id=?", (token_id,))
        return cur.rowcount > 0

    # one-time facts of this appliance ("first boot imported the admin token"): written
    # once, never changed by a later boot
    def get_fact(self, name: str) -> str | None:
        with self.connect() as db:
            row = db.execute("SELECT value FROM facts WHERE name=?", (name,)).fetchone()
        return str(row["value"]) if row else None

    def set_fact(self, name: str, value: str) -> None:
        with self.connect() as db:
            db.execute("INSERT OR IGNORE INTO facts (name, value, recorded) VALUES (?,?,?)",
                       (name, value, time.time()))

    def replace_fact(self, name: str, value: str) -> None:
        """Like :meth:`set_fact`, but a fact that changes (set_fact keeps the first)."""
        with self.connect() as db:
            db.execute("INSERT OR REPLACE INTO facts (name, value, recorded) VALUES (?,?,?)",
                       (name, value, time.time()))


# Parsed specs by their JSON text: the list, drift, the watcher and the collector read
# every record, and at 1,000 datastores parsing them again each time cost ~0.5 s under
# emulation. Specs are frozen, so sharing one is safe; a changed spec is a new text.
_SPECS: dict[str, DatastoreSpec] = {}
_SPECS_MAX = 20_000


def _spec(text: str) -> DatastoreSpec:
    spec = _SPECS.get(text)
    if spec is None:
        if len(_SPECS) >= _SPECS_MAX:
            _SPECS.clear()
        spec = _SPECS[text] = DatastoreSpec.from_json(text)
    return spec


def _datastore(row: sqlite3.Row) -> DatastoreRecord:
    return DatastoreRecord(
        spec=_spec(row["spec"]),
        state=row["state"],
        export_id=row["export_id"],
        iqn=row["iqn"],
        serial=row["serial"],
        nqn=row["nqn"],
        origin=row["origin"],
        error=row["error"],
        created=row["created"],
        updated=row["updated"],
    )


def _group(row: sqlite3.Row) -> InitiatorGroup:
    return InitiatorGroup(
        name=row["name"],
        initiators=tuple(json.loads(row["initiators"])),
        created=row["created"],
        updated=row["updated"],
    )
