"""The vocabulary of reconciling: an :class:`Action` a transport plans, and the
:class:`ReconcileReport` of applying them (appliance/reconciler.py runs them).

Each transport (:mod:`appliance.transports`) plans its own actions purely (plain data in,
a list of actions out, unit-tested without a host) and applies them through its
adapters; :mod:`appliance.reconciler` runs them for every transport. The same plan, not
applied, is the "drift" the system endpoint reports.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from appliance.errors import DeviceMissing, ZdsError

log = logging.getLogger(__name__)

PayloadT = TypeVar("PayloadT")


@dataclass(frozen=True)
class Action(Generic[PayloadT]):
    kind: str  # what the transport does: add_export, apply_target... (drift shows it)
    subject: str  # what it does it to: an export id, a target IQN, a backstore name
    reason: str
    payload: PayloadT | None = None  # the desired object, for adds and updates

    def describe(self) -> str:
        return f"{self.kind} {self.subject}: {self.reason}"


@dataclass
class ReconcileReport:
    planned: list[Action[Any]] = field(default_factory=list)
    applied: list[Action[Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # subject (export id, target IQN, backstore) -> what went wrong with it
    failed: dict[str, list[str]] = field(default_factory=dict)
    # subjects that failed because a block device was missing (udev may still make it)
    missing_devices: set[str] = field(default_factory=set)

    @property
    def ok(self) -> bool:
        return not self.errors

    def fail(self, subject: str, message: str) -> None:
        self.failed.setdefault(subject, []).append(message)
        self.errors.append(message)

    def failures_for(self, *subjects: str | int | None) -> list[str]:
        """Error messages about any of ``subjects`` (exact match, not substring)."""
        return [m for s in subjects if s is not None for m in self.failed.get(str(s), [])]

    def merge(self, other: ReconcileReport) -> None:
        """Adds what ``other`` (another transport's pass) planned, applied and failed."""
        self.planned += other.planned
        self.applied += other.applied
        self.errors += other.errors
        for subject, messages in other.failed.items():
            self.failed.setdefault(subject, []).extend(messages)
        self.missing_devices |= other.missing_devices

    def retried(self, subjects: set[str], again: ReconcileReport) -> None:
        """``subjects`` were applied once more (``again``): their first failures go, what
        the second pass did counts."""
        gone = [m for s in subjects for m in self.failed.pop(s, [])]
        self.errors = [e for e in self.errors if e not in gone]
        self.missing_devices -= subjects
        self.merge(again)

    def run(self, action: Action[Any], step: Callable[[], object]) -> None:
        """Runs one action; its failure is reported, not raised."""
        try:
            step()
        except ZdsError as exc:
            self._failed(action, exc)
        else:
            self.applied.append(action)

    def settle(self, actions: Sequence[Action[Any]],
               batch: Callable[[], Mapping[str, ZdsError]]) -> None:
        """Runs ``actions`` as one batch that returns the failed subjects; a batch that
        raises (its daemon went away) failed every one of them the same way."""
        if not actions:
            return
        try:
            failed = batch()
        except ZdsError as exc:
            failed = {a.subject: exc for a in actions}
        for action in actions:
            error = failed.get(action.subject)
            if error is None:
                self.applied.append(action)
            else:
                self._failed(action, error)

    def _failed(self, action: Action[Any], exc: ZdsError) -> None:
        log.warning("reconcile: %s failed: %s", action.describe(), exc.message)
        self.fail(action.subject, f"{action.describe()}: {exc.message}")
        if isinstance(exc, DeviceMissing):
            self.missing_devices.add(action.subject)
