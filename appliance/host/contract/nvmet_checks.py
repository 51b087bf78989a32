"""Contract checks for :class:`appliance.host.nvmet.NvmetHost` (real ``Nvmet`` and
``FakeNvmet``).

``devices`` are two block devices the target may export (zvols of a scratch pool); the
checks use port ``PORT_ID`` on 127.0.0.1:``SERVICE`` and subsystems named
``nqn.2026-11.org.zds-contract:*`` (outside ZDS's prefix, so a running appliance's
reconciler leaves them alone) and remove them when they pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from appliance.errors import InvalidInput, NotFound
from appliance.host.contract import expect
from appliance.host.nvmet import (
    LiveSubsystem,
    NamespaceSpec,
    NvmetHost,
    PortSpec,
    SubsystemSpec,
    SubsystemSummary,
)

PREFIX = "nqn.2026-11.org.zds-contract:"
PORT_ID = 9901
SERVICE = 4421
HOST_A = "nqn.2014-08.org.nvmexpress:uuid:0c6b1a52-3f1e-4d2a-9b7c-5e8f0a1d2c3b"
HOST_B = "nqn.2026-11.org.example:kvm-b"
UUID_1 = "6a1e5c3d-0000-4000-8000-00000000c001"
UUID_2 = "6a1e5c3d-0000-4000-8000-00000000c002"


def _ns(device: str, ns_uuid: str, nsid: int = 1) -> NamespaceSpec:
    return NamespaceSpec(device=device, uuid=ns_uuid, nguid=ns_uuid.replace("-", ""),
                         nsid=nsid)


def _live(nvmet: NvmetHost, nqn: str) -> LiveSubsystem | None:
    return next((s for s in nvmet.list_subsystems() if s.spec.nqn == nqn), None)


def _normal(spec: SubsystemSpec) -> SubsystemSpec:
    return replace(spec, namespaces=tuple(sorted(spec.namespaces, key=lambda n: n.nsid)),
                   hosts=tuple(sorted(spec.hosts)))


def _assert_matches(nvmet: NvmetHost, spec: SubsystemSpec, ports: tuple[int, ...]
                    ) -> LiveSubsystem:
    live = _live(nvmet, spec.nqn)
    assert live is not None, f"subsystem {spec.nqn} not found after apply"
    assert live.spec == _normal(spec), f"read back {live.spec}\n  expected {_normal(spec)}"
    assert live.ports == ports, f"ports {live.ports}, expected {ports}"
    assert nvmet.get_subsystem(spec.nqn) == live, "get_subsystem disagrees with the walk"
    summary = nvmet.summaries().get(spec.nqn)
    assert summary == SubsystemSummary(spec.nqn, sum(1 for n in spec.namespaces
                                                     if n.enabled), ports), summary
    return live


def cleanup(nvmet: NvmetHost) -> None:
    for s in nvmet.list_subsystems():
        if s.spec.nqn.startswith(PREFIX):
            nvmet.remove_subsystem(s.spec.nqn)


def check_available(nvmet: NvmetHost) -> None:
    assert nvmet.available() is True


def check_port(nvmet: NvmetHost) -> None:
    """apply_port makes a TCP port with ANA group 1 optimized, reads back, is idempotent,
    and takes an address change."""
    spec = PortSpec(PORT_ID, "127.0.0.1", SERVICE)
    nvmet.apply_port(spec)
    port = nvmet.get_port(PORT_ID)
    assert port is not None and port.spec == spec and port.trtype == "tcp", port
    assert port.ana_state == "optimized", port
    nvmet.apply_port(spec)
    assert nvmet.get_port(PORT_ID) == port
    expect(InvalidInput, nvmet.apply_port, PortSpec(PORT_ID, "not an address", SERVICE))


def check_apply_read_back(nvmet: NvmetHost, devices: Sequence[str]) -> None:
    """apply_subsystem creates exactly the spec (identity as given, never the kernel's),
    reads back equal, is idempotent, converges (a host added and removed, a namespace
    added and dropped, allow_any_host on and off, a port link dropped) and
    remove_subsystem cleans up."""
    assert len(devices) >= 2
    cleanup(nvmet)
    nvmet.apply_port(PortSpec(PORT_ID, "127.0.0.1", SERVICE))
    nqn = PREFIX + "ds1"
    spec = SubsystemSpec(nqn=nqn, serial=UUID_1.replace("-", "")[:20],
                         namespaces=(_ns(devices[0], UUID_1),), hosts=(HOST_B, HOST_A))
    try:
        nvmet.apply_subsystem(spec, [PORT_ID])
        live = _assert_matches(nvmet, spec, (PORT_ID,))
        assert live.spec.namespaces[0].uuid == UUID_1 and live.spec.serial == spec.serial
        nvmet.apply_subsystem(spec, [PORT_ID])  # idempotent
        _assert_matches(nvmet, spec, (PORT_ID,))

        two = replace(spec, namespaces=(_ns(devices[0], UUID_1), _ns(devices[1], UUID_2, 2)),
                      hosts=(HOST_A,))
        nvmet.apply_subsystem(two, [PORT_ID])
        _assert_matches(nvmet, two, (PORT_ID,))

        anyone = replace(two, namespaces=(_ns(devices[1], UUID_2, 2),), hosts=(),
                         allow_any_host=True)
        nvmet.apply_subsystem(anyone, [PORT_ID])
        _assert_matches(nvmet, anyone, (PORT_ID,))
        back = replace(anyone, allow_any_host=False, hosts=(HOST_B,))
        nvmet.apply_subsystem(back, [])
        _assert_matches(nvmet, back, ())
        nvmet.apply_subsystem(back, [PORT_ID])
        _assert_matches(nvmet, back, (PORT_ID,))

        nvmet.remove_subsystem(nqn)
        assert _live(nvmet, nqn) is None and nqn not in nvmet.summaries()
        assert nvmet.get_subsystem(nqn) is None
        port = nvmet.get_port(PORT_ID)
        assert port is not None and nqn not in port.subsystems
        nvmet.remove_subsystem(nqn)  # missing: no error
    finally:
        cleanup(nvmet)


def check_errors(nvmet: NvmetHost, devices: Sequence[str], missing_device: str) -> None:
    """Bad NQNs, serials, UUIDs -> InvalidInput, a missing device or port -> NotFound;
    nothing is created."""
    cleanup(nvmet)
    nvmet.apply_port(PortSpec(PORT_ID, "127.0.0.1", SERVICE))
    good = SubsystemSpec(nqn=PREFIX + "err", serial="zdscontract0001",
                         namespaces=(_ns(devices[0], UUID_1),), hosts=(HOST_A,))
    before = nvmet.list_subsystems()
    try:
        for bad in ("nqn.2026-11.test:x", "nqn.2026-13.org.example:x", "nqn.2026-11.org.ex",
                    "nqn.2026-11.org.example:a b", "nqn.2026-11.org.example:a/b",
                    "iqn.2026-11.org.example:x", "nqn.2014-08.org.nvmexpress:uuid:nope",
                    "nqn.2014-08.org.nvmexpress.discovery", "", "nqn.2026-11.org.e:" + "x" * 220):
            expect(InvalidInput, nvmet.apply_subsystem, replace(good, nqn=bad), [PORT_ID])
            expect(InvalidInput, nvmet.apply_subsystem, replace(good, hosts=(bad,)),
                   [PORT_ID])
        for serial in ("", "x" * 21, "with space"):
            expect(InvalidInput, nvmet.apply_subsystem, replace(good, serial=serial),
                   [PORT_ID])
        bad_ns = (replace(good.namespaces[0], uuid="not-a-uuid"),
                  replace(good.namespaces[0], nguid="0" * 32),
                  replace(good.namespaces[0], device="relative/path"))
        for ns in bad_ns:
            expect(InvalidInput, nvmet.apply_subsystem, replace(good, namespaces=(ns,)),
                   [PORT_ID])
        expect(InvalidInput, nvmet.apply_subsystem, replace(good, allow_any_host=True),
               [PORT_ID])
        expect(InvalidInput, nvmet.apply_subsystem, replace(
            good, hosts=(HOST_A, HOST_A)), [PORT_ID])
        expect(NotFound, nvmet.apply_subsystem, replace(good, namespaces=(
            replace(good.namespaces[0], device=missing_device),)), [PORT_ID])
        assert nvmet.list_subsystems() == before, "a refused apply must change nothing"
    finally:
        cleanup(nvmet)


def run_all(nvmet: NvmetHost, devices: Sequence[str], missing_device: str) -> list[str]:
    check_available(nvmet)
    check_port(nvmet)
    check_apply_read_back(nvmet, devices)
    check_errors(nvmet, devices, missing_device)
    return ["available", "port", "apply_read_back", "errors"]
