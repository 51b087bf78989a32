"""What snapshot policies did for each datastore (its last good policy snapshot and the
last failure), as the datastore view shows it. Read from SQLite only: no host call."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from appliance.model import DatastoreRecord


@dataclass(frozen=True)
class Protection:
    policies: list[str]  # the policies covering the datastore now
    last_snapshot: str | None  # full name of the newest snapshot a policy took
    last_snapshot_at: float | None  # unix time it was taken
    age: float | None  # seconds since then
    last_error: str | None  # the last run that failed for this datastore, and why
    last_error_at: float | None


# records -> {datastore name: Protection}; the datastore service is given one
ProtectionSource = Callable[[Sequence[DatastoreRecord]], dict[str, Protection]]
