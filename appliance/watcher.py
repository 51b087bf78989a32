"""The watcher: background threads that keep what health and the list report true.

- every ``health_interval`` seconds, the cheap check (pools, LIO present, ganesha
  answering) that health answers from, so health costs no host call at all;
- every ``reconcile_interval`` seconds, a full reconcile that finishes interrupted
  creates and deletes (those start-up could not) and re-applies whatever was lost
  behind ZDS's back (a ganesha restart, a daemon that came up after the API), and
  records the drift that remains;
- every ``list_interval`` seconds, a new full read of the ZFS figures the datastore list
  answers from (:class:`~appliance.kept.KeptRead`), while anyone lists.

They are separate so a long reconcile (thousands of datastores under emulation) never
makes health stale, and neither waits for the list's read (seconds under emulation at
1,000 datastores).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from appliance.reconciler import Reconciler

log = logging.getLogger(__name__)

# A background reconcile waits this long for the change lock before skipping a round.
LOCK_WAIT = 600.0


class Watcher:
    def __init__(self, reconciler: Reconciler, finish_interrupted: Callable[[], None],
                 health_interval: float, reconcile_interval: float,
                 list_interval: float = 0.0,
                 also: Sequence[Callable[[], object]] = ()) -> None:
        self.reconciler = reconciler
        self.also = list(also)  # more cheap reads at each health tick (pacemaker's state)
        self.finish_interrupted = finish_interrupted
        self.health_interval = health_interval
        self.reconcile_interval = reconcile_interval
        self.list_interval = list_interval
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        if self._threads:
            return
        if self.health_interval > 0:
            self._spawn("zds-health", self.health_interval, self.check)
        if self.reconcile_interval > 0:
            self._spawn("zds-reconcile", self.reconcile_interval, self.repair)
        if self.list_interval > 0:
            self._spawn("zds-list-read", self.list_interval, self.reconciler.kept.refresh)

    def _spawn(self, name: str, interval: float, step: Callable[[], object]) -> None:
        def loop() -> None:
            while not self._stop.wait(interval):
                try:
                    step()
                except Exception:  # the loop must outlive any one failure
                    log.exception("%s failed", name)

        thread = threading.Thread(target=loop, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def check(self) -> None:
        """The health tick: the reconciler's cheap check, then the others'."""
        self.reconciler.check()
        for step in self.also:
            try:
                step()
            except Exception:  # one failing read must not stop the reconciler's
                log.exception("health tick: %s failed", step)

    def repair(self) -> None:
        """One reconcile round: finish creates and deletes, re-apply, log what was
        repaired."""
        with self.reconciler.ctx.lock.hold("the background reconcile", timeout=LOCK_WAIT):
            self.finish_interrupted()
            report = self.reconciler.full(wait=LOCK_WAIT)
        for action in report.applied:
            log.warning("repaired drift: %s", action.describe())

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
