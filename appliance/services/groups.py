"""Initiator groups: named sets of IQNs (like ONTAP igroups), reusable across LUNs."""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import TYPE_CHECKING

from appliance import validate
from appliance.errors import Conflict, NotFound, Unavailable
from appliance.model import InitiatorGroup

if TYPE_CHECKING:
    from appliance.engine import Engine


@dataclass(frozen=True)
class GroupView:
    group: InitiatorGroup
    used_by: list[str]


class InitiatorGroupService:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def _used_by(self, name: str) -> list[str]:
        return [r.name for r in self.engine.store.list_datastores()
                if name in r.spec.iscsi.initiator_groups]

    def list(self) -> list[GroupView]:
        return [GroupView(g, self._used_by(g.name)) for g in self.engine.store.list_groups()]

    def get(self, name: str) -> GroupView:
        validate.resource_name(name, "initiator group name")
        group = self.engine.store.get_group(name)
        if group is None:
            raise NotFound(f"initiator group {name!r} not found")
        return GroupView(group, self._used_by(name))

    def put(self, name: str, initiators: builtins.list[str]) -> tuple[GroupView, bool]:
        validate.resource_name(name, "initiator group name")
        iqns = tuple(sorted({validate.iqn(i) for i in initiators}))
        with self.engine.lock:
            old = self.engine.store.get_group(name)
            if old is not None and old.initiators == iqns:
                return GroupView(old, self._used_by(name)), False
            users = self._used_by(name)
            if users and not self.engine.lio.available():
                raise Unavailable("the LIO target is not available; the group is used by "
                                  f"{', '.join(users)} and could not be applied")
            group = InitiatorGroup(name, iqns, created=old.created if old else 0.0)
            self.engine.store.put_group(group)
            if users:
                report = self.engine.reconcile()
                targets = [r.iqn for r in self.engine.store.list_datastores()
                           if r.name in users]
                failures = report.failures_for(*targets, "zfs")
                if failures:
                    raise Unavailable("group saved but not applied everywhere: "
                                      + "; ".join(failures) + " (retried at every reconcile)")
        return self.get(name), old is None

    def delete(self, name: str) -> None:
        with self.engine.lock:  # a datastore PUT naming this group cannot slip in between
            view = self.get(name)
            if view.used_by:
                raise Conflict(f"initiator group {name} is used by datastores "
                               f"{', '.join(view.used_by)}")
            self.engine.store.delete_group(name)
