"""The watcher: background threads that keep what health and the list report true.

- every ``health_interval`` seconds, the cheap check (pools, LIO present, ganesha
  answering) that health answers from, so health costs no host call at all; a daemon
  whose unit runs but that has not answered for ``restart_after`` seconds (ganesha hung,
  or its DBus name lost: systemd's Restart=on-failure never fires for those) is
  restarted, and the reconcile round runs at once to give it its exports back;
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
import time
from collections.abc import Callable, Mapping, Sequence

from appliance.errors import ZdsError
from appliance.reconciler import Reconciler

log = logging.getLogger(__name__)

# A background reconcile waits this long for the change lock before skipping a round.
LOCK_WAIT = 600.0


class Watcher:
    def __init__(self, reconciler: Reconciler, finish_interrupted: Callable[[], None],
                 health_interval: float, reconcile_interval: float,
                 list_interval: float = 0.0,
                 also: Sequence[Callable[[], object]] = (),
                 restart_after: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.reconciler = reconciler
        self.restart_after = restart_after  # 0: never restart a silent daemon
        self.clock = clock
        self._silent_since: dict[str, float] = {}  # transport -> first tick it did not answer
        self.restarts: list[tuple[str, float]] = []  # (transport, time.time()) of each restart
        self._repair_now = threading.Event()
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
            self._spawn("zds-reconcile", self.reconcile_interval, self.repair,
                        wake=self._repair_now)
        if self.list_interval > 0:
            self._spawn("zds-list-read", self.list_interval, self.reconciler.kept.refresh)

    def _spawn(self, name: str, interval: float, step: Callable[[], object],
               wake: threading.Event | None = None) -> None:
        def loop() -> None:
            while True:
                if wake is None:
                    if self._stop.wait(interval):
                        return
                else:  # ``wake`` set: this round now rather than at the interval
                    wake.wait(interval)
                    wake.clear()
                    if self._stop.is_set():
                        return
                try:
                    step()
                except Exception:  # the loop must outlive any one failure
                    log.exception("%s failed", name)

        thread = threading.Thread(target=loop, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def check(self) -> None:
        """The health tick: the reconciler's cheap check, a restart of a daemon silent
        too long, then the others' reads."""
        status = self.reconciler.check()
        self.restart_silent(status.daemons)
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

    def restart_silent(self, answering: Mapping[str, bool]) -> list[str]:
        """Restarts each transport's daemon that has not answered at any tick for
        ``restart_after`` seconds; returns the transports restarted. After a try, restarted
        or not, the daemon gets another whole period before the next."""
        if self.restart_after <= 0:
            return []
        now = self.clock()
        done = []
        for t in self.reconciler.ctx.transports:
            if answering.get(t.name, True):
                self._silent_since.pop(t.name, None)
                continue
            since = self._silent_since.setdefault(t.name, now)
            if now - since < self.restart_after:
                continue
            self._silent_since[t.name] = now
            try:
                restarted = t.restart_daemon()
            except ZdsError as exc:
                log.warning("%s has not answered for %.0f s; restarting it failed: %s",
                            t.daemon, now - since, exc.message)
                continue
            if restarted:
                log.warning("%s has not answered for %.0f s: restarted it; the reconcile "
                            "gives it its exports back now", t.daemon, now - since)
                self.restarts.append((t.name, time.time()))
                done.append(t.name)
                self._repair_now.set()
        return done

    def stop(self) -> None:
        self._stop.set()
        self._repair_now.set()
        for thread in self._threads:
            thread.join(timeout=5)
