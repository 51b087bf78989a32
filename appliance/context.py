"""What every service is handed: settings, records, host adapters, the transports, the
one lock, jobs.

The composition root (:mod:`appliance.engine`) builds one :class:`Context`; nothing else
constructs host adapters or opens the store.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from appliance.errors import Busy
from appliance.host.factory import HostAdapters
from appliance.host.local import LocalHost
from appliance.host.zfs import ZfsHost
from appliance.jobs import JobManager
from appliance.kept import ZfsChanges, observe
from appliance.scheduler import Scheduler
from appliance.settings import Settings
from appliance.store import Store
from appliance.transports.registry import Transports, TransportType


class ChangeLock:
    """The one lock around every change to ZFS datastores, LIO and ganesha.

    Peers corrupt configfs with concurrent writers, so all writers queue here. A request
    waits at most ``timeout`` seconds and then gets :class:`~appliance.errors.Busy`
    (503, naming what holds the lock and for how long) instead of hanging; background
    work (start-up, the watcher, jobs) may wait longer. Reads never take it.
    """

    def __init__(self, timeout: float = 60.0) -> None:
        self._lock = threading.RLock()
        self.timeout = timeout
        self._holder: tuple[str, float] | None = None  # (what, since) of the outermost hold
        self._depth = 0

    @contextmanager
    def hold(self, what: str, timeout: float | None = None) -> Iterator[None]:
        """Holds the lock for ``what`` (said in the Busy message others get)."""
        wait = self.timeout if timeout is None else timeout
        if not self._lock.acquire(timeout=wait):
            holder = self._holder
            busy = f"{holder[0]} for {time.monotonic() - holder[1]:.0f} s" if holder else "work"
            raise Busy(f"the appliance is busy with {busy}; {what} waited {wait:.0f} s. "
                       "Nothing was changed: retry later",
                       detail={"holder": holder[0] if holder else None})
        try:
            if self._depth == 0:
                self._holder = (what, time.monotonic())
            self._depth += 1
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                self._holder = None
            self._lock.release()

    @property
    def holder(self) -> str | None:
        """What holds the lock now (None when free)."""
        h = self._holder
        return h[0] if h else None


@dataclass(frozen=True)
class Context:
    settings: Settings
    store: Store
    hosts: HostAdapters
    lock: ChangeLock
    jobs: JobManager
    scheduler: Scheduler  # the one clock: policies, replication, metrics register here
    transports: Transports  # what each protocol does, by spec.protocol
    # what the engine changed in ZFS (hosts.zfs records it), for the list's kept read
    zfs_changes: ZfsChanges = field(default_factory=ZfsChanges)

    @property
    def zfs(self) -> ZfsHost:
        return self.hosts.zfs

    @property
    def local(self) -> LocalHost:
        return self.hosts.local

    @classmethod
    def create(cls, settings: Settings, hosts: HostAdapters, store: Store | None = None,
               transports: Sequence[TransportType] | None = None) -> Context:
        """``transports``: these instead of the registered ones (a test's own)."""
        store = store or Store(settings.db_path)
        jobs = JobManager(store)
        # every change through the engine's ZFS adapter is recorded, whoever makes it
        changes = ZfsChanges()
        hosts = replace(hosts, zfs=observe(hosts.zfs, changes))
        return cls(settings, store, hosts, ChangeLock(settings.lock_timeout), jobs,
                   Scheduler(store, jobs), Transports.build(settings, hosts, store, transports),
                   changes)
