"""In-memory twin of :class:`appliance.host.nvmet.Nvmet`: subsystems with namespaces,
allowed hosts and port links, ports, and hosts connected to subsystems.

It follows the contract in :mod:`appliance.host.nvmet` (held to the real adapter by
:mod:`appliance.host.contract.nvmet_checks`), including the kernel's own refusals: a
serial fixed once a host connected, allow_any_host and host links excluding each other,
a port taking no address change while subsystems are linked. Test helpers:
:meth:`connect`/:meth:`disconnect` fake a host (refused unless allowed and linked to the
port), ``down = True`` makes every call raise ``Unavailable``, :meth:`linked_to` ties it
to a :class:`~appliance.host.fakes.zfs.FakeZfs` (devices must exist there; zvols
exported here are busy for ``zfs destroy``), ``changes`` counts changes to the tree.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from appliance.errors import Conflict, NotFound, Unavailable, ZdsError
from appliance.host.nvmet import (
    Connections,
    LivePort,
    LiveSubsystem,
    NamespaceSpec,
    PortSpec,
    SubsystemSpec,
    SubsystemSummary,
    check_port,
    check_spec,
)

if TYPE_CHECKING:
    from appliance.host.fakes.zfs import FakeZfs


@dataclass
class _Subsystem:
    nqn: str
    serial: str = "random-serial-0000"  # the kernel makes one up
    model: str = "Linux"
    allow_any_host: bool = False
    hosts: set[str] = field(default_factory=set)
    namespaces: dict[int, NamespaceSpec] = field(default_factory=dict)
    discovered: bool = False  # a host identified it: serial and model are fixed
    connected: set[str] = field(default_factory=set)
    revalidated: int = 0


class FakeNvmet:
    def __init__(self, device_exists: Callable[[str], bool] | None = None) -> None:
        self.down = False
        self.subsystems: dict[str, _Subsystem] = {}
        self.ports: dict[int, PortSpec] = {}
        self.port_links: dict[int, set[str]] = {}
        self.ana_state: dict[int, str] = {}
        self.changes = 0
        self._device_exists = device_exists or (lambda _path: True)

    # ---- test helpers -------------------------------------------------------------
    @classmethod
    def linked_to(cls, zfs: FakeZfs) -> FakeNvmet:
        nvmet = cls(device_exists=zfs.device_exists)
        zfs.add_holder(lambda dev: any(ns.device == dev and ns.enabled
                                       for s in nvmet.subsystems.values()
                                       for ns in s.namespaces.values()))
        return nvmet

    def connect(self, nqn: str, host: str, port: int | None = None) -> None:
        """A host connects: the subsystem must be on a port and allow it."""
        s = self.subsystems.get(nqn)
        on_port = [p for p, links in self.port_links.items() if nqn in links]
        if s is None or not on_port or (port is not None and port not in on_port):
            raise NotFound(f"subsystem {nqn} is not served on that port")
        if not s.allow_any_host and host not in s.hosts:
            raise NotFound(f"host {host} is not allowed on {nqn}: connect refused")
        s.connected.add(host)
        s.discovered = True

    def disconnect(self, nqn: str, host: str) -> None:
        s = self.subsystems.get(nqn)
        if s is not None:
            s.connected.discard(host)

    def _up(self) -> None:
        if self.down:
            raise Unavailable("the NVMe target is not available: configfs nvmet/ is missing")

    def _changed(self) -> None:
        self.changes += 1

    # ---- NvmetHost ----------------------------------------------------------------
    def available(self) -> bool:
        return not self.down

    def _live(self, s: _Subsystem) -> LiveSubsystem:
        spec = SubsystemSpec(
            nqn=s.nqn, serial=s.serial,
            namespaces=tuple(s.namespaces[n] for n in sorted(s.namespaces)),
            hosts=tuple(sorted(s.hosts)), allow_any_host=s.allow_any_host, model=s.model)
        return LiveSubsystem(spec, tuple(sorted(p for p, links in self.port_links.items()
                                                if s.nqn in links)))

    def list_subsystems(self) -> list[LiveSubsystem]:
        self._up()
        return [self._live(self.subsystems[n]) for n in sorted(self.subsystems)]

    def summaries(self) -> dict[str, SubsystemSummary]:
        self._up()
        out = {}
        for live in self.list_subsystems():
            out[live.spec.nqn] = SubsystemSummary(
                live.spec.nqn, sum(1 for ns in live.spec.namespaces if ns.enabled),
                live.ports)
        return out

    def get_subsystem(self, nqn: str) -> LiveSubsystem | None:
        self._up()
        s = self.subsystems.get(nqn)
        return self._live(s) if s is not None else None

    def get_port(self, port_id: int) -> LivePort | None:
        self._up()
        spec = self.ports.get(port_id)
        if spec is None:
            return None
        return LivePort(spec, "tcp", self.ana_state.get(port_id, "optimized"),
                        tuple(sorted(self.port_links.get(port_id, set()))))

    def apply_port(self, spec: PortSpec) -> None:
        check_port(spec)
        self._up()
        if self.ports.get(spec.port_id) != spec:
            self.ports[spec.port_id] = spec  # relinked: the real one unlinks first
            self.port_links.setdefault(spec.port_id, set())
            for nqn in self.port_links[spec.port_id]:
                self.subsystems[nqn].connected.clear()
            self._changed()
        if self.ana_state.get(spec.port_id) != "optimized":
            self.ana_state[spec.port_id] = "optimized"
            self._changed()

    def remove_port(self, port_id: int) -> None:
        self._up()
        if self.ports.pop(port_id, None) is not None:
            for nqn in self.port_links.pop(port_id, set()):
                self.subsystems[nqn].connected.clear()
            self.ana_state.pop(port_id, None)
            self._changed()

    def apply_subsystems(self, specs: Sequence[SubsystemSpec], ports: Sequence[int]
                         ) -> dict[str, ZdsError]:
        self._up()
        failed: dict[str, ZdsError] = {}
        for spec in specs:
            try:
                self.apply_subsystem(spec, ports)
            except ZdsError as exc:
                failed[spec.nqn] = exc
        return failed

    def apply_subsystem(self, spec: SubsystemSpec, ports: Sequence[int]) -> None:
        check_spec(spec)
        self._up()
        for ns in spec.namespaces:
            if not self._device_exists(ns.device):
                raise NotFound(f"cannot export {ns.device}: no such block device")
        for port in ports:
            if port not in self.ports:
                raise NotFound(f"NVMe port {port} does not exist")
        s = self.subsystems.get(spec.nqn)
        if s is not None and s.discovered and (s.serial, s.model) != (spec.serial,
                                                                      spec.model):
            raise Conflict(f"subsystem {spec.nqn} has attr_serial {s.serial!r}, fixed by "
                           "the kernel once a host saw it")
        if s is None:
            s = self.subsystems[spec.nqn] = _Subsystem(spec.nqn)
            self._changed()
        if (s.serial, s.model) != (spec.serial, spec.model):
            s.serial, s.model = spec.serial, spec.model
            self._changed()
        if s.hosts != set(spec.hosts) or s.allow_any_host != spec.allow_any_host:
            s.hosts, s.allow_any_host = set(spec.hosts), spec.allow_any_host
            self._changed()
        wanted = {ns.nsid: ns for ns in spec.namespaces}
        for nsid in [n for n in s.namespaces if n not in wanted]:
            del s.namespaces[nsid]
            self._changed()
        for ns in spec.namespaces:
            if s.namespaces.get(ns.nsid) != ns:
                s.namespaces[ns.nsid] = replace(ns)
                self._changed()
        for port, links in self.port_links.items():
            if port in ports and spec.nqn not in links:
                links.add(spec.nqn)
                self._changed()
            elif port not in ports and spec.nqn in links:
                links.discard(spec.nqn)
                s.connected.clear()
                self._changed()

    def remove_subsystem(self, nqn: str) -> None:
        self._up()
        if self.subsystems.pop(nqn, None) is None:
            return
        for links in self.port_links.values():
            links.discard(nqn)
        self._changed()

    def revalidate(self, nqn: str, nsid: int = 1) -> None:
        self._up()
        s = self.subsystems.get(nqn)
        if s is not None:
            s.revalidated += 1

    def connections(self, port: int) -> Connections:
        hosts = {n: tuple(sorted(s.connected)) for n, s in self.subsystems.items()
                 if s.connected}
        return Connections(hosts, ("127.0.0.1",) if hosts else ())
