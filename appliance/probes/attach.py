"""Targets other than ``local``: the appliance reaches its own probe scratch through a
transport, as a hypervisor would reach the datastore.

Each transport says how (``Transport.probe_attacher``): NFS exports the scratch dataset
on loopback and mounts it, iSCSI serves the scratch zvol as a temporary LUN and logs in.
:class:`TransportAttach` turns that into the probe's :class:`ProbeTarget`; everything is
undone in ``detach`` (also after a failure half-way through ``attach``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from appliance.probes.execute import ProbeTarget
from appliance.probes.safety import Scratch
from appliance.transports.base import ProbeAttacher, ProbeAttachment


@dataclass(frozen=True)
class DatastoreRef:
    """What the probe service needs to know about a datastore."""

    name: str
    pool: str
    dataset: str
    is_volume: bool
    protocol: str


class Attacher(Protocol):
    def attach(self, ds: DatastoreRef, scratch: Scratch, probe_id: str) -> ProbeTarget: ...

    def detach(self, target: ProbeTarget) -> None: ...

    def clean_leftovers(self, running: set[str]) -> list[str]:
        """Removes exports/targets of probes that are not running (left by a crash)."""


class TransportAttach:
    """An :class:`Attacher` over a transport's probe attachment (target ``kind``)."""

    def __init__(self, kind: str, attacher: ProbeAttacher) -> None:
        self.kind = kind
        self.attacher = attacher

    def attach(self, ds: DatastoreRef, scratch: Scratch, probe_id: str) -> ProbeTarget:
        a = self.attacher.attach(ds.protocol, ds.name, scratch.path, scratch.name, probe_id)
        return ProbeTarget(self.kind, ds.name, path=a.path, is_device=a.is_device,
                           host=a.host, details=a.details, layer=a.layer)

    def detach(self, target: ProbeTarget) -> None:
        self.attacher.detach(ProbeAttachment(target.path, target.is_device, target.host,
                                             target.layer, target.details))

    def clean_leftovers(self, running: set[str]) -> list[str]:
        return self.attacher.clean_leftovers(running)
