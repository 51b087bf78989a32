"""System: health (are ZFS, LIO, ganesha up and in sync?), version, drift."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from appliance import __version__

if TYPE_CHECKING:
    from appliance.engine import Engine


@dataclass(frozen=True)
class ComponentHealth:
    ok: bool
    detail: str


@dataclass(frozen=True)
class Health:
    status: str  # ok | degraded | down
    components: dict[str, ComponentHealth]
    in_sync: bool
    drift: int


@dataclass(frozen=True)
class DriftItem:
    kind: str  # the action the reconciler would take, or a ZFS-level problem
    subject: str
    reason: str


@dataclass(frozen=True)
class Drift:
    in_sync: bool
    items: list[DriftItem] = field(default_factory=list)


class SystemService:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def version(self) -> dict[str, str]:
        return {"zds": __version__, **self.engine.local.versions()}

    def drift(self) -> Drift:
        e = self.engine
        items: list[DriftItem] = []
        if e.zfs.available():
            items += [DriftItem("zfs", s, r) for s, r in e.zfs_problems()]
        try:
            actions = e.plan()
        except Exception as exc:  # a down daemon: drift cannot be read, say why
            items.append(DriftItem("unknown", "live state", str(exc)))
        else:
            items += [DriftItem(a.kind, a.subject, a.reason) for a in actions]
        return Drift(in_sync=not items, items=items)

    def health(self) -> Health:
        e = self.engine
        comps: dict[str, ComponentHealth] = {}
        if e.zfs.available():
            bad = [f"{p.name}: {p.health}" for p in e.zfs.list_pools() if p.health != "ONLINE"]
            comps["zfs"] = ComponentHealth(not bad, "; ".join(bad) or "pools online")
        else:
            comps["zfs"] = ComponentHealth(False, "ZFS module or tools not available")
        comps["lio"] = (ComponentHealth(True, "configfs target ready") if e.lio.available()
                        else ComponentHealth(False, "LIO target (configfs) not available"))
        comps["ganesha"] = (ComponentHealth(True, "answering on DBus")
                            if e.ganesha.available()
                            else ComponentHealth(False, "nfs-ganesha not answering on DBus"))
        drift = self.drift() if all(c.ok for c in comps.values()) else None
        in_sync = drift.in_sync if drift else False
        if not comps["zfs"].ok:
            status = "down"
        elif all(c.ok for c in comps.values()) and in_sync:
            status = "ok"
        else:
            status = "degraded"
        return Health(status, comps, in_sync, len(drift.items) if drift else -1)
