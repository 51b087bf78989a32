"""What a replication is (its spec, as asked for and validated) and what it did last
(its status, as recorded after every run)."""

from __future__ import annotations

import json
import re
import string
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from appliance.host.ssh import DATASET_COMPONENT, DATASET_POOL, Endpoint
from appliance.host.zfs_send import Transport
from appliance.model import DATASTORE_PARENT, OWN_PREFIX
from appliance.patterns import anchored, avoiding, int_at_least, word_sets

RunState = Literal["never", "running", "ok", "failed", "cancelled"]

# Names of what a replication leaves on the source: its hold tag, bookmarks and the
# snapshots it takes itself (the datastore's other snapshots are never pruned by it).
HOLD_PREFIX = "zds-repl:"
SNAPSHOT_PREFIX = "zds-repl-"

# User properties the receive sets on a replica (on a ZDS target they find it again).
REPLICA_PROPERTIES = ("zds:replication", "zds:replica_of", "zds:source_path")

_INTERVAL = re.compile(r" *([0-9]+) *([smhd]?) *")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
MIN_INTERVAL = 60  # seconds between scheduled runs, at least
MIN_BANDWIDTH = 64 << 10  # bytes/s: a limit below it would never finish a snapshot

# The rules of a replication request as OpenAPI patterns (appliance/patterns.py).
INTERVAL_PATTERN = anchored(" *(?:" + "|".join(
    f"{int_at_least(-(-MIN_INTERVAL // seconds))} *{unit}" + ("?" if unit == "s" else "")
    for unit, seconds in _UNITS.items() if unit) + ") *")
_COMPONENT_CHARS = set(string.ascii_letters + string.digits + "_.:-")


def _second_component(refused: list[str], prefixes: list[str]) -> str:
    """A dataset component that is none of ``refused`` and starts with none of
    ``prefixes`` (case matters: ZFS names are case-sensitive)."""
    return avoiding(set(string.ascii_letters + string.digits), _COMPONENT_CHARS,
                    words=[word_sets(w, any_case=False) for w in refused],
                    prefixes=[word_sets(p, any_case=False) for p in prefixes])


# where a replica may be received: below a pool, not in the datastores a ZDS target serves
TARGET_DATASET_PATTERN = anchored(
    f"{DATASET_POOL}/{_second_component([DATASTORE_PARENT], [])}(?:/{DATASET_COMPONENT})*")
# what a source's key may receive into: below a pool, outside every dataset ZDS keeps
KEY_PREFIX_PATTERN = anchored(
    f"{DATASET_POOL}/{_second_component([DATASTORE_PARENT], [OWN_PREFIX])}"
    f"(?:/{DATASET_COMPONENT})*")


def hold_tag(name: str) -> str:
    return f"{HOLD_PREFIX}{name}"


def bookmark_prefix(name: str) -> str:
    return f"{SNAPSHOT_PREFIX}{name}-"


def snapshot_prefix(name: str) -> str:
    return f"{SNAPSHOT_PREFIX}{name}-"


def parse_interval(value: int | str) -> int:
    """Seconds from an int or ``90s`` / ``15m`` / ``1h`` / ``1d``."""
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, int):
        return value
    m = _INTERVAL.fullmatch(str(value))
    if not m:
        raise ValueError(value)
    return int(m.group(1)) * _UNITS[m.group(2)]


@dataclass(frozen=True)
class TargetSpec:
    host: str
    dataset: str
    port: int = 22
    user: str = "root"

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(self.host, self.port, self.user)


@dataclass(frozen=True)
class ReplicationSpec:
    """``PUT /replications/{name}`` (validated)."""

    name: str
    datastore: str
    target: TargetSpec
    interval: int | None = None  # seconds between scheduled runs; None: no own schedule
    after_snapshot_policy: bool = False  # run when a snapshot policy snapshotted it
    take_snapshot: bool = True  # scheduled/manual runs snapshot the datastore first
    raw: bool = False  # zfs send -w (encrypted datasets stay encrypted) instead of -Lce
    bandwidth_limit: int | None = None  # bytes/s
    enabled: bool = True
    transport: Transport = "ssh"  # ssh+tcp: the stream outside SSH (trusted links only)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> ReplicationSpec:
        d = json.loads(text)
        d["target"] = TargetSpec(**d["target"])
        return ReplicationSpec(**d)


@dataclass(frozen=True)
class ReplicationStatus:
    """What the runs did; lag and rate are derived from it."""

    state: RunState = "never"
    job_id: str | None = None
    last_run: float | None = None  # when the last run started
    last_finished: float | None = None
    last_success: float | None = None
    last_snapshot: str | None = None  # newest snapshot the target holds (short name)
    last_snapshot_created: int | None = None  # its creation time: the RPO's anchor
    last_bytes: int = 0  # sent by the last successful run
    last_seconds: float = 0.0
    total_bytes: int = 0
    runs: int = 0
    failures: int = 0  # consecutive failed runs
    last_error: dict[str, Any] | None = None  # {code, message}
    resumable_bytes: int = 0  # the target keeps this much of an interrupted stream
    steps: tuple[str, ...] = ()  # what the last run sent (full / incremental / resume)

    def lag(self, now: float) -> float | None:
        return None if self.last_snapshot_created is None else \
            max(0.0, now - self.last_snapshot_created)

    @property
    def rate(self) -> float:
        return self.last_bytes / self.last_seconds if self.last_seconds > 0 else 0.0

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def from_json(text: str | None) -> ReplicationStatus:
        if not text:
            return ReplicationStatus()
        d = json.loads(text)
        d["steps"] = tuple(d.get("steps", ()))
        return ReplicationStatus(**{k: v for k, v in d.items()
                                    if k in ReplicationStatus.__dataclass_fields__})


@dataclass(frozen=True)
class ReplicationRecord:
    spec: ReplicationSpec
    status: ReplicationStatus = field(default_factory=ReplicationStatus)
    created: float = 0.0
    updated: float = 0.0

    @property
    def name(self) -> str:
        return self.spec.name

    def with_status(self, **changes: Any) -> ReplicationRecord:
        return replace(self, status=replace(self.status, **changes))
