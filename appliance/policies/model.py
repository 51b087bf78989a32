"""A snapshot policy as recorded: schedule, retention, which datastores, and the optional
consistency steps (VMware quiesce through vCenter, pre/post hook commands)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from appliance.model import DatastoreRecord
from appliance.policies.retention import Retention
from appliance.policies.schedule import Schedule

SNAPSHOT_PROPERTY = "zds:policy"  # on every snapshot a policy takes: the policy's name
CONSISTENCY_PROPERTY = "zds:consistency"  # vm | crash: were the VMs quiesced


@dataclass(frozen=True)
class Selector:
    """The datastores a policy covers: named ones, all, or those carrying every label
    in ``labels`` (a union of the three)."""

    names: tuple[str, ...] = ()
    all: bool = False
    labels: tuple[tuple[str, str], ...] = ()

    def matches(self, rec: DatastoreRecord) -> bool:
        if self.all or rec.name in self.names:
            return True
        if self.labels:
            have = dict(rec.spec.labels)
            return all(have.get(k) == v for k, v in self.labels)
        return False


@dataclass(frozen=True)
class VmwareStep:
    """Quiesce the powered-on VMs on the datastores through vCenter/ESXi first."""

    vcenter: str  # name of a registered vCenter (its credentials are stored apart)
    quiesce: bool = True  # VMware Tools quiesces the guest file systems
    memory: bool = False  # include the VMs' memory (slow; off like TrueNAS)
    timeout: float = 300.0  # seconds for all VM snapshots together
    parallel: int = 4  # VM snapshots created at once


@dataclass(frozen=True)
class Hooks:
    """Commands run before and after the snapshots (argv lists, no shell)."""

    pre: tuple[str, ...] = ()
    post: tuple[str, ...] = ()
    timeout: float = 60.0


@dataclass(frozen=True)
class PolicySpec:
    name: str
    schedule: Schedule
    retention: Retention
    selector: Selector
    enabled: bool = True
    vmware: VmwareStep | None = None
    hooks: Hooks | None = None
    created: float = 0.0
    updated: float = 0.0

    def covers(self, rec: DatastoreRecord) -> bool:
        return self.selector.matches(rec)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> PolicySpec:
        d: dict[str, Any] = json.loads(text)
        sel = d.get("selector") or {}
        vm = d.get("vmware")
        hooks = d.get("hooks")
        return PolicySpec(
            name=d["name"],
            schedule=Schedule(**d["schedule"]),
            retention=Retention(**d["retention"]),
            selector=Selector(tuple(sel.get("names", ())), bool(sel.get("all", False)),
                              tuple((k, v) for k, v in sel.get("labels", ()))),
            enabled=bool(d.get("enabled", True)),
            vmware=VmwareStep(**vm) if vm else None,
            hooks=Hooks(tuple(hooks.get("pre", ())), tuple(hooks.get("post", ())),
                        float(hooks.get("timeout", 60.0))) if hooks else None,
            created=float(d.get("created", 0.0)),
            updated=float(d.get("updated", 0.0)),
        )


@dataclass(frozen=True)
class VcenterSpec:
    """A vCenter or ESXi host the VMware step logs in to. The password is stored in the
    appliance's SQLite (mode 0600) and is never returned by the API."""

    name: str
    host: str
    user: str
    password: str = field(repr=False)
    port: int = 443
    insecure: bool = False  # accept a certificate that does not verify (self-signed)
    created: float = 0.0
    updated: float = 0.0
