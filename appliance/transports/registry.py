"""The transports ZDS serves datastores with, by protocol name.

:data:`TRANSPORT_TYPES` is the one list of them: a new protocol is a module in this
package and a line here (tests/unit/test_transports.py adds one from a test). The API's
protocol enum, the CLI's choices and the probe targets come from it, read when asked
(the API's enum: when the API is imported); an engine builds one :class:`Transports` on
its host adapters and dispatches every datastore on ``spec.protocol`` through it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence

from appliance.errors import InvalidInput
from appliance.host.factory import HostAdapters
from appliance.model import DatastoreRecord
from appliance.settings import Settings
from appliance.store import Store
from appliance.transports.base import AnyTransport
from appliance.transports.iscsi import IscsiTransport
from appliance.transports.nfs import NfsTransport
from appliance.transports.nvme import NvmeTransport

log = logging.getLogger(__name__)

TransportType = type[AnyTransport]

# In the order the API lists their protocols.
TRANSPORT_TYPES: tuple[TransportType, ...] = (NfsTransport, IscsiTransport, NvmeTransport)


def protocols() -> tuple[str, ...]:
    """Every protocol a datastore may have, in the API's order."""
    return tuple(p for t in TRANSPORT_TYPES for p in t.protocols)


def probe_targets() -> tuple[str, ...]:
    """What a probe's ``target`` may be besides ``local``: the transports' loopback
    attachments."""
    return tuple(t.probe_target for t in TRANSPORT_TYPES)


def transport_type(protocol: str) -> TransportType | None:
    """The registered transport serving ``protocol`` (None: no such protocol)."""
    return next((t for t in TRANSPORT_TYPES if protocol in t.protocols), None)


def probe_writes(protocol: str) -> str:
    """What a probe's ``writes=auto`` means on a datastore of ``protocol`` (async when
    no transport says otherwise: a local path, a client's directory)."""
    t = transport_type(protocol)
    return t.probe_writes if t is not None else "async"


class Transports:
    """The transports one engine runs, built on its adapters: dispatch by protocol."""

    def __init__(self, transports: Sequence[AnyTransport]) -> None:
        self._all = tuple(transports)
        self._by_protocol: dict[str, AnyTransport] = {}
        for t in self._all:
            for p in t.protocols:
                if p in self._by_protocol:
                    raise ValueError(f"protocol {p} is served by {self._by_protocol[p].name} "
                                     f"and {t.name}")
                self._by_protocol[p] = t
        for attr in ("name", "component", "probe_target"):
            values = [getattr(t, attr) for t in self._all]
            if len(set(values)) != len(values):
                raise ValueError(f"two transports share a {attr}: {values}")

    @classmethod
    def build(cls, settings: Settings, hosts: HostAdapters, store: Store,
              types: Sequence[TransportType] | None = None) -> Transports:
        """Every transport (``types``: these instead of the registered ones)."""
        return cls([t.build(settings, hosts, store) for t in types or TRANSPORT_TYPES])

    def __iter__(self) -> Iterator[AnyTransport]:
        return iter(self._all)

    @property
    def protocols(self) -> tuple[str, ...]:
        return tuple(self._by_protocol)

    def get(self, protocol: str) -> AnyTransport | None:
        return self._by_protocol.get(protocol)

    def of(self, protocol: str) -> AnyTransport:
        """The transport of ``protocol``; InvalidInput names the ones there are."""
        t = self._by_protocol.get(protocol)
        if t is None:
            raise InvalidInput(f"invalid protocol {protocol!r}: one of "
                               f"{', '.join(self._by_protocol)}")
        return t

    def grouped(self, records: Iterable[DatastoreRecord]
                ) -> list[tuple[AnyTransport, list[DatastoreRecord]]]:
        """Every transport (in order) with the records it serves; a record of a protocol
        no transport serves (a pool from a newer appliance) is left out and logged."""
        by_name: dict[str, list[DatastoreRecord]] = {t.name: [] for t in self._all}
        for rec in records:
            t = self._by_protocol.get(rec.spec.protocol)
            if t is None:
                log.error("datastore %s: protocol %r is not served here", rec.name,
                          rec.spec.protocol)
                continue
            by_name[t.name].append(rec)
        return [(t, by_name[t.name]) for t in self._all]
