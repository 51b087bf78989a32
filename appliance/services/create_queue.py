"""Creates that arrive while the writer is busy are made together, not refused.

A tool that creates many datastores at once (Terraform applies 10 resources in parallel,
Ansible runs 5 forks, a template deploys many disks) used to queue every PUT on the one
change lock, each holding it for its whole duration, so those that waited past the lock's
timeout got 503 ``busy``. Now a create joins this queue, and one thread (the writer)
takes, each time it gets the lock, every create that queued meanwhile and makes them as
one batch: each dataset with its own ``zfs create`` (ZFS has no command that makes
several), then one reconcile of all of them (one read of the live state, one apply per
transport), then each caller gets its answer. The lock, the intent recorded before any
``zfs create`` (a crash is finished or undone at start-up) and idempotence are unchanged.

A caller waits on its :class:`~concurrent.futures.Future`; the API answers 201 when it is
done within the request's wait, else 202 with a job that follows it. Only a queue that
holds ``limit`` creates already refuses, with 503 ``busy`` (nothing was queued).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

from appliance.errors import Busy, Unavailable

if TYPE_CHECKING:
    from appliance.context import ChangeLock
    from appliance.model import DatastoreSpec

log = logging.getLogger(__name__)

# What a create comes to (for the datastore service: its view, and whether it created it)
Outcome = TypeVar("Outcome")
# How long the writer waits for the lock before it tries again (a long job holds it).
LOCK_WAIT = 3600.0


@dataclass
class PendingCreate(Generic[Outcome]):
    """One PUT of a datastore that did not exist when it was validated."""

    spec: DatastoreSpec
    future: Future[Outcome] = field(default_factory=Future)

    def resolve(self, outcome: Outcome) -> None:
        if not self.future.done():
            self.future.set_result(outcome)

    def fail(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exc)


class CreateQueue(Generic[Outcome]):
    """The queue and its writer thread (started on the first create).

    ``make`` is called with the change lock held and a batch in arrival order; it must
    resolve or fail every item (one that it leaves open is failed for it). A batch never
    holds two creates of one name: the later one waits for the next batch, where it is an
    update of the first (or the same PUT again, which changes nothing)."""

    def __init__(self, make: Callable[[list[PendingCreate[Outcome]]], None], lock: ChangeLock,
                 limit: int = 256, batch_max: int = 64) -> None:
        self._make = make
        self._lock = lock
        self.limit = limit
        self.batch_max = batch_max
        self._pending: deque[PendingCreate[Outcome]] = deque()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.batches: list[int] = []  # the size of each batch made (for tests, the bench)

    def submit(self, spec: DatastoreSpec) -> Future[Outcome]:
        """Queues a create of ``spec``; its future ends with (view, created) or the error
        the create met. Busy (503) when ``limit`` creates are queued already."""
        with self._cond:
            if self._closed:
                raise Unavailable("the API is stopping: nothing was changed; retry when it "
                                  "is back")
            if len(self._pending) >= self.limit:
                raise Busy(f"{len(self._pending)} datastore creates are queued already "
                           f"(the limit); {spec.name} was not queued. Nothing was changed: "
                           "retry in a few seconds", detail={"queued": len(self._pending)})
            item: PendingCreate[Outcome] = PendingCreate(spec)
            self._pending.append(item)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="zds-creates",
                                                daemon=True)
                self._thread.start()
            self._cond.notify()
        return item.future

    @property
    def queued(self) -> int:
        """Creates waiting for the writer now."""
        with self._cond:
            return len(self._pending)

    def close(self) -> None:
        """Stops the writer after the batch it is making; creates still queued fail
        (nothing of them was recorded: the client sees the error, or its job reads
        interrupted)."""
        with self._cond:
            self._closed = True
            left = list(self._pending)
            self._pending.clear()
            self._cond.notify_all()
        for item in left:
            item.fail(Unavailable("the API stopped before this create began: nothing was "
                                  "changed"))

    def _take(self) -> list[PendingCreate[Outcome]]:
        with self._cond:
            batch: list[PendingCreate[Outcome]] = []
            names: set[str] = set()
            kept: deque[PendingCreate[Outcome]] = deque()
            while self._pending and len(batch) < self.batch_max:
                item = self._pending.popleft()
                if item.spec.name in names:
                    kept.append(item)  # after the first of its name: the next batch
                else:
                    names.add(item.spec.name)
                    batch.append(item)
            self._pending.extendleft(reversed(kept))
            return batch

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
            try:
                with self._lock.hold("creating datastores", timeout=LOCK_WAIT):
                    batch = self._take()  # all that queued while the lock was busy
                    if batch:
                        self.batches.append(len(batch))
                        log.info("create batch of %d (%d more queued meanwhile)",
                                 len(batch), self.queued)
                        self._make_all(batch)
            except Busy:
                continue  # an hour-long holder: wait again
            except BaseException:  # the writer must outlive any one batch
                log.exception("the datastore create writer failed")

    def _make_all(self, batch: list[PendingCreate[Outcome]]) -> None:
        try:
            self._make(batch)
        except BaseException as exc:
            for item in batch:
                item.fail(exc)
            raise
        for item in batch:
            item.fail(Unavailable(f"the create of {item.spec.name} was not finished; "
                                  "retry the PUT"))
