"""The datastore list's kept ZFS read (issue 24).

Under emulation ``zfs list`` costs ~3.5 ms per dataset (the kernel computes each one's
space statistics), so a list that read ZFS every time took 4.1 s at 1,000 datastores,
14x its time at 10. The list now answers from a read the watcher keeps:

- :class:`ZfsChanges` records which datasets the engine changed; :func:`observe` wraps
  the ZFS adapter the context hands out so that every change method (create, set,
  destroy, snapshot, rollback, clone, mount, pool import/export...) records what it
  touched when it returns, whoever called it. A method it does not know is taken as a
  change of everything, so a new adapter method can make the list read more, never show
  less than it should;
- :class:`KeptRead` holds the last full read and when it was made. A list first reads
  again, in one small ``zfs list`` each, the datasets changed since (a handful; more
  than :data:`PARTIAL_MAX` and it reads everything), so a client sees its own change in
  the next list; the watcher reads everything again every ``interval`` seconds while
  someone lists, which bounds how old the rest is: changes ZDS did not make (data
  written by hosts, a ``zfs set`` by hand). The list says how old its oldest figure is.

``GET /datastores/{name}`` and drift never use it (they read ZFS themselves).
"""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Generic, TypeVar, cast

from appliance.host.zfs import DatasetInfo, ZfsHost
from appliance.model import DATASTORE_PARENT

# More changed datasets than this and the list reads everything again: one `zfs list`
# each costs a command start (~50-100 ms under emulation), a full read ~3.5 ms a dataset.
PARTIAL_MAX = 8

# A kept read older than this many intervals is not used (the watcher is stuck or off):
# the list reads ZFS itself.
STALE_INTERVALS = 2.0

# The watcher refreshes the read only if a list used it within this many seconds: an
# appliance nobody lists spends nothing on it (the first list after reads afresh).
IDLE_AFTER = 600.0


class ZfsChanges:
    """What the engine changed in ZFS, in order: each touch gets the next number."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seq = 0
        self._touched: dict[str, int] = {}  # dataset -> number of its last touch
        self._everything = 0  # number of the last change of everything (a pool's)

    @property
    def seq(self) -> int:
        """The number of the last change (0: none yet)."""
        return self._seq

    def touch(self, names: Iterable[str]) -> None:
        """Datasets (or snapshots: their dataset counts) that changed. A pool's root or
        its ``POOL/datastores`` changes everything below (snapshot counts, mounts)."""
        with self._lock:
            self._seq += 1
            for name in names:
                dataset = name.split("@", 1)[0]
                parts = dataset.split("/")
                if len(parts) == 1 or parts[1:] == [DATASTORE_PARENT]:
                    self._everything = self._seq
                elif len(parts) > 2 and parts[1] == DATASTORE_PARENT:
                    self._touched[dataset] = self._seq
                # elsewhere (replicas, probes' scratch datasets): not in the list

    def touch_all(self) -> None:
        """Anything may have changed (a pool imported, exported, created, destroyed)."""
        with self._lock:
            self._seq += 1
            self._everything = self._seq

    def since(self, seq: int) -> tuple[bool, dict[str, int]]:
        """Whether everything changed after ``seq``, and the datasets that did (with
        their touch numbers)."""
        with self._lock:
            return self._everything > seq, {n: s for n, s in self._touched.items() if s > seq}

    def forget(self, seq: int) -> None:
        """Drops touches up to ``seq`` (a full read made after them has them)."""
        with self._lock:
            self._touched = {n: s for n, s in self._touched.items() if s > seq}


# What each change method of ZfsHost touches: the parameters naming datasets or
# snapshots, or ALL. Reads are listed so that an unknown method counts as a change.
ALL = "*"
CHANGES: Mapping[str, tuple[str, ...]] = {
    "create_pool": (ALL,), "destroy_pool": (ALL,), "import_pool": (ALL,),
    "export_pool": (ALL,),
    "create_filesystem": ("name",), "create_volume": ("name",), "set_properties": ("name",),
    "destroy": ("name",), "mount": ("name",), "unmount": ("name",),
    "snapshot": ("dataset",), "snapshot_many": ("names",),
    "destroy_snapshots": ("dataset",), "destroy_snapshot_recursive": ("root",),
    "rollback": ("snapshot",), "clone": ("snapshot", "target"),
}
# Calls that change nothing the list shows: reads, and pool-level changes (devices,
# scrubs, holds, pool properties) that leave every dataset's figures as they were.
UNSEEN = frozenset({
    "available", "list_pools", "pool_status", "importable_pools", "list_datasets",
    "get_dataset", "snapshot_counts", "list_snapshots", "list_snapshots_under", "holds",
    "zvol_device", "wait_for_device", "scrub", "offline_device", "online_device",
    "replace_device", "attach_device", "detach_device", "set_pool_properties", "hold",
    "release", "set_root_user_properties", "clear_root_user_properties",
})


class ObservedZfs:
    """A ZFS adapter whose changes are recorded in :class:`ZfsChanges` (after the call,
    whether it succeeded or not: a failed command may have done part of its work).
    Everything else is the adapter's own (attributes of a fake included)."""

    def __init__(self, zfs: ZfsHost, changes: ZfsChanges) -> None:
        self._zfs = zfs
        self._changes = changes

    @property
    def observed(self) -> ZfsHost:
        """The adapter underneath."""
        return self._zfs

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._zfs, attr)
        if attr.startswith("_") or attr in UNSEEN or not callable(value):
            return value
        params = CHANGES.get(attr, (ALL,))
        changes = self._changes
        signature = _signature(attr)

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return value(*args, **kwargs)
            finally:
                names = _named(signature, params, args, kwargs)
                if names is None:
                    changes.touch_all()
                else:
                    changes.touch(names)

        return call


def observe(zfs: ZfsHost, changes: ZfsChanges) -> ZfsHost:
    """``zfs`` with its changes recorded in ``changes`` (once: an observed adapter is
    returned as it is)."""
    if isinstance(zfs, ObservedZfs):
        return cast(ZfsHost, zfs)
    # the wrapper forwards every ZfsHost method (by __getattr__), so it is one
    return cast(ZfsHost, ObservedZfs(zfs, changes))


@cache
def _signature(method: str) -> inspect.Signature | None:
    fn = getattr(ZfsHost, method, None)
    return inspect.signature(fn) if fn is not None else None


def _named(signature: inspect.Signature | None, params: tuple[str, ...],
           args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[str] | None:
    """The dataset names a call touched, or None for "everything"."""
    if ALL in params or signature is None:
        return None
    try:
        bound = signature.bind(None, *args, **kwargs)
    except TypeError:
        return None
    out: list[str] = []
    for p in params:
        value = bound.arguments.get(p)
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, Sequence):
            out.extend(v for v in value if isinstance(v, str))
    return out


V = TypeVar("V")


@dataclass(frozen=True)
class Kept(Generic[V]):
    """A read as the list uses it: its datasets, and the wall time its oldest figure was
    read (when the full read under it started)."""

    view: V  # the reconciler's ZfsView
    read_at: float


class KeptRead(Generic[V]):
    """The last full ZFS read for the list, with the changes since read again on use.

    ``full()`` reads every pool's datastores (a ZfsView); ``some(view, names)`` returns
    ``view`` with ``names`` read again (a dataset that is gone dropped); a read that is
    not ``usable`` (ZFS did not answer) is returned and not kept. ``interval`` 0 turns
    it off: every :meth:`get` reads in full."""

    def __init__(self, changes: ZfsChanges, full: Callable[[], V],
                 some: Callable[[V, Sequence[str]], V], interval: float,
                 usable: Callable[[V], bool] = lambda view: True,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.changes = changes
        self.full = full
        self.some = some
        self.usable = usable
        self.interval = interval
        self.clock = clock
        self.wall = wall
        self._lock = threading.Lock()  # guards the fields below
        self._reading = threading.Lock()  # one ZFS read at a time
        self._kept: Kept[V] | None = None
        self._seq = 0  # the changes the kept read has (up to this number)
        self._read_mono = 0.0  # clock() when the kept full read started
        self._used = -IDLE_AFTER  # clock() of the last get()

    @property
    def kept(self) -> Kept[V] | None:
        return self._kept

    def get(self) -> Kept[V]:
        """The kept read with the datasets changed since read again; a full read when
        there is none, it is too old, or too much changed."""
        self._used = self.clock()
        if self.interval <= 0:
            return self._read_full()
        ready = self._ready()
        if ready is not None:  # the common case: no ZFS read, no waiting for one
            return ready
        with self._reading:
            # a read that ended while this one waited may be all it needs
            with self._lock:
                kept, seq, started = self._kept, self._seq, self._read_mono
            upto = self.changes.seq  # read first: later touches stay pending
            everything, touched = self.changes.since(seq)
            if kept is None or everything or self._too_old(started) \
                    or len(touched) > PARTIAL_MAX:
                return self._refresh()
            if not touched:
                return kept
            fresh = Kept(self.some(kept.view, sorted(touched)), kept.read_at)
            with self._lock:
                if self.usable(fresh.view):
                    self._kept, self._seq = fresh, upto
                else:  # ZFS stopped answering: nothing kept, the next list reads again
                    self._kept = None
            self.changes.forget(upto)
            return fresh

    def _ready(self) -> Kept[V] | None:
        """The kept read if nothing changed since and it is not too old."""
        with self._lock:
            kept, seq, started = self._kept, self._seq, self._read_mono
        if kept is None or self._too_old(started):
            return None
        everything, touched = self.changes.since(seq)
        return None if everything or touched else kept

    def _too_old(self, started: float) -> bool:
        return self.clock() - started > STALE_INTERVALS * self.interval

    def refresh(self) -> bool:
        """For the watcher: a full read if a list used the kept one lately and it is at
        least half an interval old (True), else nothing: an idle appliance reads
        nothing (the next list reads afresh), and a read a list just made is not made
        again."""
        if self.interval <= 0 or self.clock() - self._used > IDLE_AFTER:
            return False
        with self._reading:
            with self._lock:
                kept, started = self._kept, self._read_mono
            if kept is not None and self.clock() - started < self.interval / 2:
                return False
            self._refresh()
        return True

    def invalidate(self) -> None:
        """Forgets the kept read (the next list reads in full)."""
        with self._lock:
            self._kept = None

    def _refresh(self) -> Kept[V]:
        """A full read, kept if ZFS answered (caller holds ``_reading``)."""
        upto = self.changes.seq  # changes after this may be missing from what is read
        started = self.clock()
        kept = self._read_full()
        if self.usable(kept.view):
            with self._lock:
                self._kept, self._seq, self._read_mono = kept, upto, started
            self.changes.forget(upto)
        return kept

    def _read_full(self) -> Kept[V]:
        at = self.wall()  # before reading: each figure is at least this recent
        return Kept(self.full(), at)


def merged(datasets: Mapping[str, DatasetInfo], names: Sequence[str],
           found: Mapping[str, DatasetInfo]) -> dict[str, DatasetInfo]:
    """``datasets`` with ``names`` replaced by what was ``found`` (gone if absent)."""
    out = dict(datasets)
    for name in names:
        out.pop(name, None)
    out.update({n: found[n] for n in names if n in found})
    return out
