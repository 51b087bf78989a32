"""Initiator groups: named sets of hosts by their initiator names (like ONTAP igroups),
reusable across datastores: iSCSI IQNs and NVMe host NQNs side by side, so one group
names a cluster's hosts for every block protocol (each takes the names it speaks)."""

from __future__ import annotations

import builtins
from dataclasses import dataclass

from appliance import pool_secrets, validate
from appliance.context import Context
from appliance.errors import Conflict, NotFound, Unavailable
from appliance.model import InitiatorGroup
from appliance.reconciler import Reconciler


@dataclass(frozen=True)
class GroupView:
    group: InitiatorGroup
    used_by: list[str]


class InitiatorGroupService:
    def __init__(self, ctx: Context, reconciler: Reconciler) -> None:
        self.ctx = ctx
        self.reconciler = reconciler

    def _used_by(self, name: str) -> list[str]:
        return [r.name for r in self.ctx.store.list_datastores()
                if name in r.spec.initiator_groups]

    def list(self) -> list[GroupView]:
        return [GroupView(g, self._used_by(g.name)) for g in self.ctx.store.list_groups()]

    def get(self, name: str) -> GroupView:
        validate.resource_name(name, "initiator group name")
        group = self.ctx.store.get_group(name)
        if group is None:
            raise NotFound(f"initiator group {name!r} not found")
        return GroupView(group, self._used_by(name))

    def put(self, name: str, initiators: builtins.list[str]) -> tuple[GroupView, bool]:
        validate.resource_name(name, "initiator group name")
        iqns = tuple(sorted({validate.initiator_name(i) for i in initiators}))
        with self.ctx.lock.hold(f"PUT initiator group {name}"):
            old = self.ctx.store.get_group(name)
            if old is not None and old.initiators == iqns:
                return GroupView(old, self._used_by(name)), False
            users = self._used_by(name)
            records = [r for r in self.ctx.store.list_datastores() if r.name in users]
            serving = [(t, recs) for t, recs in self.ctx.transports.grouped(records) if recs]
            for t, _recs in serving:
                if not t.available():
                    raise Unavailable(f"the {t.daemon} target is not available; the group "
                                      f"is used by {', '.join(users)} and could not be "
                                      "applied")
            group = InitiatorGroup(name, iqns, created=old.created if old else 0.0)
            self.ctx.store.put_group(group)
            # the pools of the datastores that use it keep it (it moves with them)
            for pool in sorted({r.spec.pool for r in records}):
                pool_secrets.keep_groups(self.ctx.zfs, self.ctx.local, pool, [group])
            if users:
                report = self.reconciler.datastores(records)
                failures = report.failures_for(
                    *(s for t, recs in serving for r in recs for s in t.subjects(r)), "zfs")
                if failures:
                    raise Unavailable("group saved but not applied everywhere: "
                                      + "; ".join(failures) + " (retried at every reconcile)")
        return self.get(name), old is None

    def delete(self, name: str) -> None:
        # a datastore PUT naming this group cannot slip in between
        with self.ctx.lock.hold(f"DELETE initiator group {name}"):
            view = self.get(name)
            if view.used_by:
                raise Conflict(f"initiator group {name} is used by datastores "
                               f"{', '.join(view.used_by)}")
            self.ctx.store.delete_group(name)
