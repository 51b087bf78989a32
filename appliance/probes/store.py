"""Probe results in SQLite (the engine's database, /var/lib/zds/zds.db, table probe_results).

The whole result is stored as JSON in ``body``; the columns beside it exist for filtering
and listing without decoding every row. The store takes a connection factory (the
engine's) or a database path, creates its table if missing, and opens one connection per
call so it can be used from job threads.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from appliance.errors import InvalidInput, NotFound
from appliance.probes.model import ProbeResult

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS probe_results (
    id          TEXT PRIMARY KEY,
    profile     TEXT NOT NULL,
    datastore   TEXT NOT NULL,
    target_kind TEXT NOT NULL,
    status      TEXT NOT NULL,
    started_at  TEXT NOT NULL,
    ended_at    TEXT NOT NULL,
    iops        REAL,
    mbps        REAL,
    lat_p99_ms  REAL,
    body        TEXT NOT NULL
)""",
    """CREATE INDEX IF NOT EXISTS probe_results_by_ds
    ON probe_results (datastore, profile, started_at)""",
)

# A factory of transactions: the engine's ``Store.connect`` (a context manager yielding
# its shared connection inside BEGIN/COMMIT), or any callable returning a connection.
Connect = Callable[[], "AbstractContextManager[sqlite3.Connection] | sqlite3.Connection"]


@dataclass(frozen=True)
class ResultFilter:
    profile: str | None = None
    datastore: str | None = None
    target: str | None = None
    status: str | None = None
    since: str | None = None  # ISO time, inclusive
    until: str | None = None  # ISO time, exclusive
    limit: int = 100
    offset: int = 0


class ProbeStore:
    """``ProbeStore(engine.store.connect)`` in the appliance; a path for the CLI/tests."""

    def __init__(self, db: Connect | str | Path) -> None:
        if isinstance(db, str | Path):
            path = str(db)
            if path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._connect: Connect = lambda: sqlite3.connect(path, timeout=30)
        else:
            self._connect = db
        with self._tx() as conn:
            for stmt in SCHEMA:  # not executescript: it would COMMIT the caller's transaction
                conn.execute(stmt)

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        made = self._connect()
        if isinstance(made, sqlite3.Connection):
            try:
                with made:
                    yield made
            finally:
                made.close()
        else:
            with made as conn:
                yield conn

    def save(self, r: ProbeResult) -> None:
        with self._tx() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO probe_results (id, profile, datastore, target_kind, "
                "status, started_at, ended_at, iops, mbps, lat_p99_ms, body) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (r.id, r.profile, r.datastore, str(r.target.get("kind", "")), r.status,
                 r.started_at, r.ended_at, r.summary.get("iops"), r.summary.get("mbps"),
                 r.summary.get("lat_p99_ms"), json.dumps(r.to_dict(), sort_keys=True)),
            )

    def get(self, result_id: str) -> ProbeResult:
        with self._tx() as conn:
            row = conn.execute("SELECT body FROM probe_results WHERE id = ?",
                               (result_id,)).fetchone()
        if row is None:
            raise NotFound(f"no probe result {result_id!r}")
        return ProbeResult.from_dict(json.loads(row[0]))

    def list(self, f: ResultFilter | None = None) -> list[ProbeResult]:
        """Newest first."""
        f = f or ResultFilter()
        if not 1 <= f.limit <= 10_000 or not 0 <= f.offset <= 1 << 31:
            raise InvalidInput("limit must be 1..10000 and offset 0..2147483648")
        where: list[str] = []
        args: list[object] = []
        for col, val in (("profile", f.profile), ("datastore", f.datastore),
                         ("target_kind", f.target), ("status", f.status)):
            if val is not None:
                where.append(f"{col} = ?")
                args.append(val)
        if f.since:
            where.append("started_at >= ?")
            args.append(f.since)
        if f.until:
            where.append("started_at < ?")
            args.append(f.until)
        sql = "SELECT body FROM probe_results"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY started_at DESC, rowid DESC LIMIT ? OFFSET ?"
        with self._tx() as conn:
            rows = conn.execute(sql, (*args, f.limit, f.offset)).fetchall()
        return [ProbeResult.from_dict(json.loads(r[0])) for r in rows]

    def delete(self, result_id: str) -> None:
        with self._tx() as conn:
            cur = conn.execute("DELETE FROM probe_results WHERE id = ?", (result_id,))
        if cur.rowcount == 0:
            raise NotFound(f"no probe result {result_id!r}")
