"""System: health (from what the watcher last saw, never computed inline), version, drift."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from appliance import __version__
from appliance.context import Context
from appliance.errors import ZdsError
from appliance.reconciler import DriftItem, FillAlert, PoolProblem, Reconciler
from appliance.services.cluster import ClusterRole


@dataclass(frozen=True)
class ComponentHealth:
    ok: bool
    detail: str


@dataclass(frozen=True)
class Health:
    status: str  # ok | degraded | down | starting
    components: dict[str, ComponentHealth]
    in_sync: bool
    drift: int  # -1: not known (yet)
    checked_at: float  # unix time of the check this answer comes from (0: none yet)
    age: float  # seconds since then
    started_at: float = 0.0  # unix time start-up finished restoring exports/LUNs (0: not yet)
    pools: list[PoolProblem] = field(default_factory=list)  # pools that are not ONLINE
    alerts: list[FillAlert] = field(default_factory=list)  # pools 80/90/95% full
    message: str = ""
    cluster: ClusterRole | None = None  # in an HA pair: this node's role and its peer


@dataclass(frozen=True)
class Drift:
    in_sync: bool
    items: list[DriftItem] = field(default_factory=list)


# Drift items health's message spells out (the rest: GET /api/v1/system/drift).
DRIFT_SHOWN = 3
# A component's health answers from its own records (never a host call).
HealthCheck = Callable[[], ComponentHealth]


class SystemService:
    def __init__(self, ctx: Context, reconciler: Reconciler,
                 checks: Mapping[str, HealthCheck] | None = None,
                 cluster_role: Callable[[], ClusterRole | None] | None = None) -> None:
        self.ctx = ctx
        self.cluster_role = cluster_role
        self.reconciler = reconciler
        # more components health reports (snapshot policies, replication...)
        self.checks: dict[str, HealthCheck] = dict(checks or {})
        self._versions: dict[str, str] | None = None
        self._versions_lock = threading.Lock()

    def version(self) -> dict[str, str]:
        """ZDS's and the storage stack's versions. Asking the tools costs three commands
        (seconds under emulation), and the answer cannot change while the API runs (a new
        version comes with a restart): asked once, then answered from memory."""
        with self._versions_lock:
            if self._versions is None:
                self._versions = {"zds": __version__, **self.ctx.local.versions()}
            return dict(self._versions)

    def drift(self) -> Drift:
        """Computed now, from one batched read of ZFS, ganesha and LIO."""
        try:
            items = self.reconciler.drift()
        except ZdsError as exc:  # ZFS down: drift cannot be read, say why
            items = [DriftItem("unknown", "live state", exc.message)]
        return Drift(in_sync=not items, items=items)

    def health(self) -> Health:
        """From the watcher's last check: costs no host call, whatever the number of
        datastores. ``age`` says how old the answer is; an answer older than a few check
        intervals is itself reported as degraded (the watcher is stuck)."""
        st = self.reconciler.status
        now = time.time()
        age = now - st.checked_at if st.checked_at else 0.0
        comps = {"zfs": ComponentHealth(st.zfs_ok, st.zfs_detail)}
        for t in self.ctx.transports:  # each protocol's daemon: lio, ganesha...
            ok = st.daemons.get(t.name, False)
            comps[t.component] = ComponentHealth(ok, t.health_detail(ok))
        for name, check in self.checks.items():
            comps[name] = check()
        known = st.drift_at > 0 and st.drift_error is None
        drift = len(st.drift) if known else -1
        in_sync = known and not st.drift
        messages: list[str] = []
        if st.phase == "starting":
            status = "starting"
            messages.append(st.note or "the API is starting")
        elif not st.checked_at:
            status = "starting"
            messages.append("no check has run yet")
        elif not st.zfs_ok:
            status = "down"
            messages.append(st.zfs_detail)
        else:
            problems = [f"pool {p.pool} is {p.health}" + (f": {p.action}" if p.action else "")
                        for p in st.pool_problems]
            full = [a for a in st.fill_alerts if a.level != "warning"]
            messages += [f"pool {a.pool} is {a.percent}% full ({a.level}): free space or add "
                         "disks; thin datastores fail writes when it fills"
                         for a in st.fill_alerts]
            down = [n for n, c in comps.items() if not c.ok]
            messages += problems
            messages += [f"{n}: {comps[n].detail}" for n in down]
            if st.drift_error:
                messages.append(f"drift unknown: {st.drift_error}")
            elif st.drift:
                messages.append(f"{len(st.drift)} item(s) differ from the records "
                                "(GET /api/v1/system/drift)")
                # the first few in full: what is wrong and what repairs it
                messages += [f"{i.subject}: {i.reason}" + (f" -> {i.action}" if i.action
                                                            else "")
                             for i in st.drift[:DRIFT_SHOWN]]
            stale = self.ctx.settings.health_interval * 3 + 30
            if age > stale:
                messages.append(f"the last check is {age:.0f} s old (the watcher is busy "
                                f"with {self.ctx.lock.holder or 'something'})")
            status = "degraded" if (problems or full or down or not in_sync
                                    or age > stale) else "ok"
        role = self.cluster_role() if self.cluster_role is not None else None
        return Health(status, comps, in_sync, drift, st.checked_at, round(age, 1),
                      st.started_at, list(st.pool_problems), list(st.fill_alerts),
                      "; ".join(messages), role)
