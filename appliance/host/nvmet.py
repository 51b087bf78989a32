"""The kernel NVMe target (nvmet, nvmet-tcp) through configfs, written directly.

nvmetcli is in neither Debian 12 nor PyPI, and configfs is plain directories, files and
symlinks, so this adapter reads and writes it itself, the way :mod:`appliance.host.lio`
reads LIO: batched listings and reads straight from the files (:class:`NvmetReader`), and
every change in one place (:class:`Nvmet`). ``appliance.host.fakes.nvmet.FakeNvmet`` is
the in-memory twin; :mod:`appliance.host.contract.nvmet_checks` holds both to this
contract:

- ``apply_subsystem`` validates the whole spec first (:func:`check_spec`: NQNs by the
  NVMe base specification's rules, a serial of 1-20 printable ASCII characters, UUID and
  NGUID as 16 bytes, devices under /dev) and changes nothing when it raises; a device
  that does not exist is ``NotFound``.
- The serial and model are written before any host can connect, and a namespace's
  device path, UUID and NGUID before it is enabled: the kernel otherwise invents a random
  serial and UUID, and refuses to change them once a host has seen them (``EINVAL`` on
  ``attr_serial`` after discovery, ``EBUSY`` on an enabled namespace's ``device_*``).
  A subsystem whose serial differs from the spec and cannot be rewritten is ``Conflict``.
- ``attr_allow_any_host`` is 0 unless the spec asks (the kernel refuses 1 while
  ``allowed_hosts/`` has links, and links while it is 1, so links go first or last).
- ``list_subsystems`` reads back the spec in normal form (namespaces by id, hosts sorted)
  with the ports each subsystem is linked to; ``summaries`` agrees with it on the number
  of enabled namespaces.
- ``remove_subsystem`` unlinks it from every port (which ends its hosts' connections),
  removes its namespaces and host links, then the subsystem; a host entry no subsystem
  links any more goes too. Missing: no error.

Layout (kernel drivers/nvme/target/configfs.c, 6.1)::

    nvmet/subsystems/<nqn>/attr_allow_any_host          0
    nvmet/subsystems/<nqn>/attr_serial                  1f0e6a4c2b7d49e08a11   (space-padded
                                                        to 20 by the kernel)
    nvmet/subsystems/<nqn>/attr_model                   ZDS
    nvmet/subsystems/<nqn>/allowed_hosts/<hostnqn> -> ../../../hosts/<hostnqn>
    nvmet/subsystems/<nqn>/namespaces/1/device_path     /dev/zvol/tank/datastores/ds1
    nvmet/subsystems/<nqn>/namespaces/1/device_uuid     1f0e6a4c-2b7d-49e0-8a11-3c5d7e9f0b21
    nvmet/subsystems/<nqn>/namespaces/1/device_nguid    1f0e6a4c-2b7d-49e0-8a11-3c5d7e9f0b21
    nvmet/subsystems/<nqn>/namespaces/1/ana_grpid       1
    nvmet/subsystems/<nqn>/namespaces/1/enable          1
    nvmet/hosts/<hostnqn>/                              (dhchap_* only with
                                                        CONFIG_NVME_TARGET_AUTH)
    nvmet/ports/1/addr_trtype                           tcp
    nvmet/ports/1/addr_adrfam                           ipv4
    nvmet/ports/1/addr_traddr                           0.0.0.0
    nvmet/ports/1/addr_trsvcid                          4420
    nvmet/ports/1/ana_groups/1/ana_state                optimized
    nvmet/ports/1/subsystems/<nqn> -> ../../../subsystems/<nqn>

Who is connected: the 6.1 target lists no controllers (nvmet's debugfs came in 6.9), so
:meth:`NvmetHost.connections` reads the kernel's own connect messages from the log
(``nvmet: creating nvm controller 2 for subsystem <nqn> for NQN <hostnqn>.``, from
``journalctl -k -b``) and the
established TCP connections to the port (``/proc/net/tcp``, ``tcp6``): a subsystem's
hosts are the ones the log says connected to it, while any connection to the port is
open. That errs towards "connected" (a host that left one subsystem while another host
stays on another is still named), never towards "nobody".
"""

from __future__ import annotations

import errno
import ipaddress
import os
import re
import string
import time
import uuid as uuidlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Protocol

from appliance.errors import (
    Conflict,
    HostCommandFailed,
    InvalidInput,
    NotFound,
    Unavailable,
    ZdsError,
)
from appliance.host.run import Runner
from appliance.patterns import (
    anchored,
    avoiding,
    char_class,
    literal,
    months_except,
    other_digits,
    word_sets,
)

CONFIGFS_NVMET = "/sys/kernel/config/nvmet"
MODULES = ("nvmet", "nvmet-tcp")
SERIAL_MAX = 20  # NVMET_SN_MAX_SIZE
MODEL_MAX = 40  # the Identify Controller MN field
NQN_MAX = 223  # bytes (NVMe base specification, 4.5 NVMe Qualified Names)
DISCOVERY_NQN = "nqn.2014-08.org.nvmexpress.discovery"
UUID_NQN_PREFIX = "nqn.2014-08.org.nvmexpress:uuid:"
ANA_OPTIMIZED = "optimized"

# nqn.yyyy-mm.<reversed domain>:<anything printable but '/', which configfs names cannot
# hold>; ASCII only (the spec allows UTF-8; every shell and attach instruction is safer
# without it). A name that starts like nvme-cli's uuid form carries a UUID after it.
# Written without look-around, so the OpenAPI document publishes this very pattern
# (appliance/patterns.py).
_LABEL_CHARS = set(string.ascii_letters + string.digits + "-")
_STRING_CHARS = {chr(c) for c in range(0x21, 0x7f)} - {"/"}
_NQN_LABEL = char_class(_LABEL_CHARS) + "+"
_NQN_STRING = char_class(_STRING_CHARS) + "+"
_UUID_TEXT = "-".join(f"[0-9A-Fa-f]{{{n}}}" for n in (8, 4, 4, 4, 12))


def _nqn_pattern() -> str:
    """``nqn.<date>.<domain>:<string>``; one that starts as UUID_NQN_PREFIX
    (nqn.2014-08.org.nvmexpress:uuid:) goes on with a UUID. Without look-around: another
    date, or that date and another domain, or both and a string not starting ``uuid:``,
    or the prefix and a UUID."""
    date, rest = UUID_NQN_PREFIX.removeprefix("nqn.").split(".", 1)
    domain, word = rest.rstrip(":").split(":")
    first, second = domain.split(".")
    year, month = date.split("-")
    label = f"(?:\\.{_NQN_LABEL})"
    other_date = f"(?:{other_digits(year)}-(?:0[1-9]|1[0-2])|{year}-{months_except(month)})"

    def not_label(text: str) -> str:
        return avoiding(_LABEL_CHARS, _LABEL_CHARS, words=[word_sets(text, any_case=False)])

    other_domain = (f"(?:{not_label(first)}{label}+|{literal(first)}\\.{not_label(second)}"
                    f"{label}*|{literal(domain)}{label}+)")
    other_string = avoiding(_STRING_CHARS, _STRING_CHARS,
                            prefixes=[word_sets(word + ":", any_case=False)])
    return anchored("|".join([
        f"nqn\\.{other_date}\\.{_NQN_LABEL}{label}+:{_NQN_STRING}",
        f"nqn\\.{literal(date)}\\.{other_domain}:{_NQN_STRING}",
        f"nqn\\.{literal(date)}\\.{literal(domain)}:(?:{other_string}"
        f"|{literal(word)}:{_UUID_TEXT})",
    ]))


NQN_PATTERN = _nqn_pattern()
_NQN = re.compile(NQN_PATTERN)
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def check_nqn(nqn: str, what: str = "NQN") -> str:
    """Returns ``nqn`` if it is an NVMe Qualified Name ZDS can configure, else raises
    ``InvalidInput`` saying the rule: ``nqn.yyyy-mm.<reversed domain>:<string>`` (or
    ``nqn.2014-08.org.nvmexpress:uuid:<UUID>``), printable ASCII without spaces or '/',
    at most 223 bytes, and not the discovery subsystem's NQN."""
    if len(nqn.encode()) > NQN_MAX or not _NQN.fullmatch(nqn):
        raise InvalidInput(
            f"{what} {nqn!r} is not a valid NVMe Qualified Name: expected "
            "nqn.yyyy-mm.reversed.domain:name (e.g. nqn.2014-08.com.vmware:nvme:esx01) or "
            "nqn.2014-08.org.nvmexpress:uuid:<UUID> (what nvme-cli writes to "
            "/etc/nvme/hostnqn), printable ASCII without spaces or '/', at most 223 bytes")
    if nqn == DISCOVERY_NQN:
        raise InvalidInput(f"{what} {nqn!r} is the discovery subsystem's NQN")
    return nqn


def is_nqn(name: str) -> bool:
    """``name`` is written as an NQN (an IQN never starts with ``nqn.``)."""
    return name.startswith("nqn.")


@dataclass(frozen=True)
class NamespaceSpec:
    device: str  # /dev/zvol/...
    uuid: str  # device_uuid, 8-4-4-4-12 lower-case hex
    nguid: str  # device_nguid, 32 lower-case hex digits
    nsid: int = 1
    ana_group: int = 1
    enabled: bool = True


@dataclass(frozen=True)
class SubsystemSpec:
    nqn: str
    serial: str
    namespaces: tuple[NamespaceSpec, ...]
    hosts: tuple[str, ...] = ()  # allowed host NQNs
    allow_any_host: bool = False
    model: str = "ZDS"


@dataclass(frozen=True)
class PortSpec:
    """A TCP port of the target (the discovery subsystem answers on every port)."""

    port_id: int
    address: str  # traddr: an IPv4/IPv6 address, 0.0.0.0 or :: for all
    service: int = 4420  # trsvcid

    @property
    def family(self) -> str:
        return "ipv6" if ":" in self.address else "ipv4"


@dataclass(frozen=True)
class LiveSubsystem:
    spec: SubsystemSpec
    ports: tuple[int, ...] = ()  # port ids it is linked to


@dataclass(frozen=True)
class SubsystemSummary:
    nqn: str
    namespaces: int  # enabled ones
    ports: tuple[int, ...] = ()


@dataclass(frozen=True)
class LivePort:
    spec: PortSpec
    trtype: str
    ana_state: str  # of ANA group 1
    subsystems: tuple[str, ...]


@dataclass(frozen=True)
class Connections:
    """Who the kernel says connected to each subsystem, while any TCP connection to
    the port is open (see the module docstring for why this errs towards connected)."""

    hosts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # nqn -> host NQNs
    peers: tuple[str, ...] = ()  # remote addresses with a connection to the port

    def of(self, nqn: str) -> tuple[str, ...]:
        return self.hosts.get(nqn, ()) if self.peers else ()


class NvmetHost(Protocol):
    def available(self) -> bool:
        """configfs ``nvmet/`` is there (the adapter loads nvmet and nvmet-tcp)."""

    def list_subsystems(self) -> list[LiveSubsystem]:
        """Every subsystem with its namespaces, hosts and ports: one walk."""

    def summaries(self) -> dict[str, SubsystemSummary]:
        """Per subsystem: enabled namespaces and ports (2-3 reads each), for a view."""

    def get_subsystem(self, nqn: str) -> LiveSubsystem | None:
        """One subsystem as :meth:`list_subsystems` shows it; None when missing."""

    def get_port(self, port_id: int) -> LivePort | None:
        """A port's address, ANA state and linked subsystems; None when missing."""

    def apply_port(self, spec: PortSpec) -> None:
        """Creates or changes the port (TCP, the address, ANA group 1 optimized); a
        changed address unlinks and relinks its subsystems (the kernel refuses changes to
        an enabled port). Idempotent."""

    def remove_port(self, port_id: int) -> None:
        """Unlinks its subsystems and removes the port. Missing: no error."""

    def apply_subsystem(self, spec: SubsystemSpec, ports: Sequence[int]) -> None:
        """Makes the subsystem match ``spec`` exactly and links it to ``ports`` (which
        must exist); namespaces and host links not in ``spec`` are removed."""

    def apply_subsystems(self, specs: Sequence[SubsystemSpec], ports: Sequence[int]
                         ) -> dict[str, ZdsError]:
        """:meth:`apply_subsystem` for many; the failed ones by NQN."""

    def remove_subsystem(self, nqn: str) -> None:
        """Unlinks it from every port, then removes it. Missing: no error."""

    def revalidate(self, nqn: str, nsid: int = 1) -> None:
        """Tells hosts a namespace's size changed (after its zvol grew)."""

    def connections(self, port: int) -> Connections:
        """Who is connected, as far as the 6.1 kernel tells (module docstring)."""


def nguid_text(nguid: str) -> str:
    """32 hex digits in the form configfs shows and takes (a UUID's)."""
    return str(uuidlib.UUID(hex=nguid))


def check_spec(spec: SubsystemSpec) -> None:
    """Everything in ``spec`` the kernel would refuse half-way through."""
    check_nqn(spec.nqn, "subsystem NQN")
    if not 1 <= len(spec.serial) <= SERIAL_MAX or any(
            not 0x20 < ord(c) < 0x7f for c in spec.serial):
        raise InvalidInput(f"serial {spec.serial!r} must be 1-{SERIAL_MAX} printable ASCII "
                           "characters without spaces")
    if not 1 <= len(spec.model) <= MODEL_MAX or any(
            not 0x20 <= ord(c) < 0x7f for c in spec.model):
        raise InvalidInput(f"model {spec.model!r} must be 1-{MODEL_MAX} printable ASCII "
                           "characters")
    seen_ns: set[int] = set()
    for ns in spec.namespaces:
        if not 1 <= ns.nsid <= 0xFFFFFFFE or ns.nsid in seen_ns:
            raise InvalidInput(f"namespace id {ns.nsid} is out of range or used twice")
        seen_ns.add(ns.nsid)
        if not ns.device.startswith("/dev/") or any(c in ns.device for c in " \t\n"):
            raise InvalidInput(f"device {ns.device!r} is not a /dev path")
        if not _UUID.fullmatch(ns.uuid):
            raise InvalidInput(f"namespace UUID {ns.uuid!r} is not a lower-case UUID")
        if not re.fullmatch(r"[0-9a-f]{32}", ns.nguid) or ns.nguid == "0" * 32:
            raise InvalidInput(f"namespace NGUID {ns.nguid!r} is not 32 lower-case hex "
                               "digits (and not all zero)")
        if not 1 <= ns.ana_group <= 128:
            raise InvalidInput(f"ANA group {ns.ana_group} is out of range")
    seen_hosts: set[str] = set()
    for host in spec.hosts:
        check_nqn(host, "host NQN")
        if host in seen_hosts:
            raise InvalidInput(f"host {host} is listed twice")
        seen_hosts.add(host)
    if spec.allow_any_host and spec.hosts:
        raise InvalidInput("allow_any_host and a host list exclude each other (the kernel "
                           "refuses both at once)")


def check_port(spec: PortSpec) -> None:
    if not 0 <= spec.port_id <= 0xFFFF:
        raise InvalidInput(f"port id {spec.port_id} is out of range")
    if not 0 < spec.service < 65536 or not re.fullmatch(r"[0-9a-fA-F.:]+", spec.address):
        raise InvalidInput(f"NVMe/TCP address {spec.address}:{spec.service} is not an IP "
                           "address and port")


def _read(path: str) -> str | None:
    """A configfs attribute, stripped; None when it vanished."""
    try:
        with open(path) as f:
            return f.read().strip()
    except (FileNotFoundError, NotADirectoryError):
        return None


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except (FileNotFoundError, NotADirectoryError):
        return []


def _nguid_of(text: str | None) -> str:
    return (text or "").replace("-", "").lower()


class NvmetReader:
    """Reads the target from configfs with listings and file reads; an entry that
    vanishes mid-read (a writer removed it) is skipped."""

    def __init__(self, root: str = CONFIGFS_NVMET) -> None:
        self.root = root

    def present(self) -> bool:
        return os.path.isdir(os.path.join(self.root, "subsystems"))

    def _path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def port_links(self) -> dict[str, list[int]]:
        """Subsystem NQN -> the ports it is linked to (one listing per port)."""
        out: dict[str, list[int]] = {}
        for port in _listdir(self._path("ports")):
            if not port.isdigit():
                continue
            for nqn in _listdir(self._path("ports", port, "subsystems")):
                out.setdefault(nqn, []).append(int(port))
        return out

    def subsystems(self) -> list[LiveSubsystem]:
        links = self.port_links()
        out = []
        for nqn in _listdir(self._path("subsystems")):
            live = self.subsystem(nqn, links)
            if live is not None:
                out.append(live)
        return out

    def summaries(self) -> dict[str, SubsystemSummary]:
        links = self.port_links()
        out: dict[str, SubsystemSummary] = {}
        for nqn in _listdir(self._path("subsystems")):
            enabled = sum(1 for ns in _listdir(self._path("subsystems", nqn, "namespaces"))
                          if _read(self._path("subsystems", nqn, "namespaces", ns,
                                              "enable")) == "1")
            out[nqn] = SubsystemSummary(nqn, enabled, tuple(sorted(links.get(nqn, ()))))
        return out

    def subsystem(self, nqn: str, links: Mapping[str, list[int]] | None = None
                  ) -> LiveSubsystem | None:
        base = self._path("subsystems", nqn)
        serial = _read(os.path.join(base, "attr_serial"))
        if serial is None:
            return None
        namespaces = []
        for entry in _listdir(os.path.join(base, "namespaces")):
            ns = self._namespace(os.path.join(base, "namespaces", entry), entry)
            if ns is not None:
                namespaces.append(ns)
        spec = SubsystemSpec(
            nqn=nqn, serial=serial,
            namespaces=tuple(sorted(namespaces, key=lambda n: n.nsid)),
            hosts=tuple(_listdir(os.path.join(base, "allowed_hosts"))),
            allow_any_host=_read(os.path.join(base, "attr_allow_any_host")) == "1",
            model=_read(os.path.join(base, "attr_model")) or "")
        if links is None:
            links = {nqn: [int(p) for p in _listdir(self._path("ports")) if p.isdigit()
                           and os.path.lexists(self._path("ports", p, "subsystems", nqn))]}
        return LiveSubsystem(spec, tuple(sorted(links.get(nqn, ()))))

    @staticmethod
    def _namespace(path: str, entry: str) -> NamespaceSpec | None:
        if not entry.isdigit():
            return None
        device = _read(os.path.join(path, "device_path"))
        if device is None:
            return None
        group = _read(os.path.join(path, "ana_grpid")) or "1"
        return NamespaceSpec(
            device=device, uuid=(_read(os.path.join(path, "device_uuid")) or "").lower(),
            nguid=_nguid_of(_read(os.path.join(path, "device_nguid"))), nsid=int(entry),
            ana_group=int(group) if group.isdigit() else 1,
            enabled=_read(os.path.join(path, "enable")) == "1")

    def port(self, port_id: int) -> LivePort | None:
        base = self._path("ports", str(port_id))
        address = _read(os.path.join(base, "addr_traddr"))
        if address is None:
            return None
        service = _read(os.path.join(base, "addr_trsvcid")) or "0"
        return LivePort(
            PortSpec(port_id, address, int(service) if service.isdigit() else 0),
            _read(os.path.join(base, "addr_trtype")) or "",
            _read(os.path.join(base, "ana_groups", "1", "ana_state")) or "",
            tuple(_listdir(os.path.join(base, "subsystems"))))

    def hosts(self) -> list[str]:
        return _listdir(self._path("hosts"))


# The kernel's connect message (drivers/nvme/target/core.c, nvmet_alloc_ctrl).
# 6.1 may print "creating controller N" (older) or "creating nvm controller N" (newer,
# which says "discovery" for the discovery subsystem's).
_CONNECT = re.compile(r"nvmet: creating (?:nvm )?controller \d+ for subsystem (\S+) for NQN "
                      r"(\S+?)\.?(?: |$)")


def parse_connects(log: str) -> dict[str, tuple[str, ...]]:
    """Subsystem NQN -> host NQNs from kernel log lines (``journalctl -k -o cat``)::

        nvmet: creating nvm controller 1 for subsystem nqn.2026-11.io.zds:zds.ds1 for NQN
        nqn.2014-08.org.nvmexpress:uuid:5b1e0c2a-7d4f-4e8b-9a61-0c3f2d8e7b14.

    (one line each).
    """
    out: dict[str, set[str]] = {}
    for line in log.splitlines():
        m = _CONNECT.search(line)
        if m and m.group(1) != DISCOVERY_NQN:
            out.setdefault(m.group(1), set()).add(m.group(2))
    return {k: tuple(sorted(v)) for k, v in out.items()}


def parse_tcp_peers(table: str, port: int) -> list[str]:
    """Remote addresses of established connections to local ``port`` in a
    ``/proc/net/tcp`` or ``tcp6`` table::

          sl  local_address rem_address   st tx_queue rx_queue ...
           0: 0100007F:1144 0100007F:D2A6 01 00000000:00000000 ...

    (hex address:port, state 01 = ESTABLISHED; IPv4 as a little-endian word)."""
    peers = []
    for line in table.splitlines()[1:]:
        cols = line.split()
        if len(cols) < 4 or cols[3] != "01":
            continue
        local, remote = cols[1], cols[2]
        if int(local.rsplit(":", 1)[1], 16) != port:
            continue
        addr = remote.rsplit(":", 1)[0]
        if len(addr) == 8:
            peers.append(".".join(str(b) for b in reversed(bytes.fromhex(addr))))
        else:
            words = [bytes.fromhex(addr[i:i + 8])[::-1] for i in range(0, 32, 8)]
            peers.append(str(ipaddress.IPv6Address(b"".join(words))))
    return sorted(set(peers))


def _device_exists(path: str) -> bool:
    return os.path.exists(path)


class Nvmet:
    """:class:`NvmetHost` on the kernel target. Loads ``nvmet`` and ``nvmet-tcp`` with
    modprobe (through the Runner) when configfs has no ``nvmet/`` yet."""

    def __init__(self, runner: Runner, root: str = CONFIGFS_NVMET,
                 device_check: Callable[[str], bool] = _device_exists,
                 proc_net: str = "/proc/net",
                 attr_wait: float = 5.0) -> None:
        self.runner = runner
        self.reader = NvmetReader(root)
        self.root = root
        self._device_check = device_check
        self._proc_net = proc_net
        self._attr_wait = attr_wait

    # ---- reading -----------------------------------------------------------------
    def available(self) -> bool:
        if self.reader.present():
            return True
        for module in MODULES:
            self.runner.run(["modprobe", module], check=False, timeout=30)
        return self.reader.present()

    def _require(self) -> None:
        if not self.reader.present():
            raise Unavailable("the NVMe target is not available: configfs nvmet/ is missing "
                              "(modprobe nvmet nvmet-tcp)")

    def list_subsystems(self) -> list[LiveSubsystem]:
        self._require()
        return self.reader.subsystems()

    def summaries(self) -> dict[str, SubsystemSummary]:
        self._require()
        return self.reader.summaries()

    def get_subsystem(self, nqn: str) -> LiveSubsystem | None:
        self._require()
        return self.reader.subsystem(nqn)

    def get_port(self, port_id: int) -> LivePort | None:
        self._require()
        return self.reader.port(port_id)

    def connections(self, port: int) -> Connections:
        peers: list[str] = []
        for name in ("tcp", "tcp6"):
            try:
                with open(os.path.join(self._proc_net, name)) as f:
                    peers += parse_tcp_peers(f.read(), port)
            except OSError:
                continue
        if not peers:
            return Connections()  # nobody: the kernel log need not be read
        return Connections(parse_connects(self._kernel_log()), tuple(sorted(set(peers))))

    def _kernel_log(self) -> str:
        """This boot's kernel messages from the journal (one command; /dev/kmsg would need
        CAP_SYSLOG, which the API's unit does not keep)."""
        result = self.runner.run(["journalctl", "-k", "-b", "-o", "cat", "--no-pager"],
                                 check=False, timeout=60)
        return result.stdout if result.ok else ""

    # ---- writing -----------------------------------------------------------------
    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except OSError as exc:
            if exc.errno in (errno.EBUSY, errno.EEXIST):
                raise Conflict(f"the NVMe target refused to {what}: {exc}") from exc
            raise HostCommandFailed(f"the NVMe target failed to {what}: {exc}") from exc

    def _write(self, path: str, value: str) -> None:
        """Writes an attribute, waiting for it to appear (configfs makes a new item's
        files a moment after mkdir returns)."""
        deadline = time.monotonic() + self._attr_wait
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        with open(path, "w") as f:
            f.write(value + "\n")

    def _mkdir(self, path: str) -> None:
        if not os.path.isdir(path):
            os.mkdir(path)

    def _link(self, target: str, link: str) -> None:
        if not os.path.lexists(link):
            os.symlink(target, link)

    def apply_port(self, spec: PortSpec) -> None:
        check_port(spec)
        self._require()
        base = os.path.join(self.root, "ports", str(spec.port_id))
        with self._errors(f"configure port {spec.port_id}"):
            live = self.reader.port(spec.port_id)
            want = {"addr_trtype": "tcp", "addr_adrfam": spec.family,
                    "addr_traddr": spec.address, "addr_trsvcid": str(spec.service)}
            linked = list(live.subsystems) if live is not None else []
            differs = live is None or live.trtype != "tcp" or live.spec != spec
            if differs:
                # an enabled port (one with a subsystem linked) takes no changes
                for nqn in linked:
                    os.unlink(os.path.join(base, "subsystems", nqn))
                self._mkdir(base)
                for key, value in want.items():
                    self._write(os.path.join(base, key), value)
            ana = os.path.join(base, "ana_groups", "1", "ana_state")
            if _read(ana) not in (None, ANA_OPTIMIZED):
                self._write(ana, ANA_OPTIMIZED)
            if differs:
                for nqn in linked:
                    self._link(os.path.join(self.root, "subsystems", nqn),
                               os.path.join(base, "subsystems", nqn))

    def remove_port(self, port_id: int) -> None:
        self._require()
        base = os.path.join(self.root, "ports", str(port_id))
        if not os.path.isdir(base):
            return
        with self._errors(f"remove port {port_id}"):
            for nqn in _listdir(os.path.join(base, "subsystems")):
                os.unlink(os.path.join(base, "subsystems", nqn))
            os.rmdir(base)

    def apply_subsystem(self, spec: SubsystemSpec, ports: Sequence[int]) -> None:
        self._check(spec)
        self._apply(spec, ports)

    def apply_subsystems(self, specs: Sequence[SubsystemSpec], ports: Sequence[int]
                         ) -> dict[str, ZdsError]:
        failed: dict[str, ZdsError] = {}
        for spec in specs:
            try:
                self.apply_subsystem(spec, ports)
            except ZdsError as exc:
                failed[spec.nqn] = exc
        return failed

    def _check(self, spec: SubsystemSpec) -> None:
        check_spec(spec)
        self._require()
        for ns in spec.namespaces:
            if not self._device_check(ns.device):
                raise NotFound(f"cannot export {ns.device}: no such block device")

    def _apply(self, spec: SubsystemSpec, ports: Sequence[int]) -> None:
        base = os.path.join(self.root, "subsystems", spec.nqn)
        existed = os.path.isdir(base)
        try:
            with self._errors(f"configure subsystem {spec.nqn}"):
                self._apply_steps(spec, ports, base)
        except ZdsError:
            if not existed:  # a refused create leaves nothing behind
                with suppress(ZdsError):
                    self.remove_subsystem(spec.nqn)
            raise

    def _apply_steps(self, spec: SubsystemSpec, ports: Sequence[int], base: str) -> None:
        self._mkdir(base)
        live = self.reader.subsystem(spec.nqn)
        # identity first: before any host can reach the subsystem through a port
        for key, value in (("attr_serial", spec.serial), ("attr_model", spec.model)):
            have = _read(os.path.join(base, key))
            if have != value:
                try:
                    self._write(os.path.join(base, key), value)
                except OSError as exc:
                    if exc.errno == errno.EINVAL and have is not None:
                        raise Conflict(
                            f"subsystem {spec.nqn} has {key} {have!r}, fixed by the kernel "
                            f"once a host saw it; {value!r} needs the subsystem removed and "
                            "made again (hosts disconnect)") from exc
                    raise
        # hosts: the kernel takes links only while allow_any_host is 0, and 1 only
        # without links
        allow = os.path.join(base, "attr_allow_any_host")
        if not spec.allow_any_host and _read(allow) != "0":
            self._write(allow, "0")
        allowed = os.path.join(base, "allowed_hosts")
        for host in _listdir(allowed):
            if host not in spec.hosts:
                os.unlink(os.path.join(allowed, host))
        for host in spec.hosts:
            host_dir = os.path.join(self.root, "hosts", host)
            self._mkdir(host_dir)
            self._link(host_dir, os.path.join(allowed, host))
        if spec.allow_any_host and _read(allow) != "1":
            self._write(allow, "1")
        # namespaces: device, UUID and NGUID are written while it is disabled
        wanted = {ns.nsid: ns for ns in spec.namespaces}
        have_ns = {ns.nsid: ns for ns in (live.spec.namespaces if live else ())}
        for nsid in have_ns:
            if nsid not in wanted:
                self._remove_namespace(base, nsid)
        for ns in spec.namespaces:
            self._apply_namespace(base, ns, have_ns.get(ns.nsid))
        # ports last: a host can connect only once everything above is in place
        for port in ports:
            port_dir = os.path.join(self.root, "ports", str(port))
            if not os.path.isdir(port_dir):
                raise NotFound(f"NVMe port {port} does not exist")
            self._link(base, os.path.join(port_dir, "subsystems", spec.nqn))
        for port in (live.ports if live else ()):
            if port not in ports:
                os.unlink(os.path.join(self.root, "ports", str(port), "subsystems",
                                       spec.nqn))
        self._prune_hosts()

    def _apply_namespace(self, base: str, ns: NamespaceSpec, have: NamespaceSpec | None
                         ) -> None:
        path = os.path.join(base, "namespaces", str(ns.nsid))
        same = have is not None and (have.device, have.uuid, have.nguid, have.ana_group) \
            == (ns.device, ns.uuid, ns.nguid, ns.ana_group)
        if same and have is not None and have.enabled == ns.enabled:
            return
        self._mkdir(path)
        if not same:
            if have is not None and have.enabled:
                self._write(os.path.join(path, "enable"), "0")
            self._write(os.path.join(path, "device_path"), ns.device)
            self._write(os.path.join(path, "device_uuid"), ns.uuid)
            self._write(os.path.join(path, "device_nguid"), nguid_text(ns.nguid))
            self._write(os.path.join(path, "ana_grpid"), str(ns.ana_group))
        if _read(os.path.join(path, "enable")) != ("1" if ns.enabled else "0"):
            self._write(os.path.join(path, "enable"), "1" if ns.enabled else "0")

    def _remove_namespace(self, base: str, nsid: int) -> None:
        path = os.path.join(base, "namespaces", str(nsid))
        if _read(os.path.join(path, "enable")) == "1":
            self._write(os.path.join(path, "enable"), "0")
        os.rmdir(path)

    def _prune_hosts(self) -> None:
        """Host entries no subsystem links any more (they would only clutter)."""
        linked = {h for nqn in _listdir(os.path.join(self.root, "subsystems"))
                  for h in _listdir(os.path.join(self.root, "subsystems", nqn,
                                                 "allowed_hosts"))}
        for host in self.reader.hosts():
            if host not in linked:
                with suppress(OSError):  # in use after all: kept
                    os.rmdir(os.path.join(self.root, "hosts", host))

    def remove_subsystem(self, nqn: str) -> None:
        self._require()
        base = os.path.join(self.root, "subsystems", nqn)
        if not os.path.isdir(base):
            return
        with self._errors(f"remove subsystem {nqn}"):
            for port in _listdir(os.path.join(self.root, "ports")):
                link = os.path.join(self.root, "ports", port, "subsystems", nqn)
                if os.path.lexists(link):
                    os.unlink(link)  # ends its hosts' connections on that port
            for host in _listdir(os.path.join(base, "allowed_hosts")):
                os.unlink(os.path.join(base, "allowed_hosts", host))
            for entry in _listdir(os.path.join(base, "namespaces")):
                if entry.isdigit():
                    self._remove_namespace(base, int(entry))
            os.rmdir(base)
            self._prune_hosts()

    def revalidate(self, nqn: str, nsid: int = 1) -> None:
        self._require()
        path = os.path.join(self.root, "subsystems", nqn, "namespaces", str(nsid),
                            "revalidate_size")
        with self._errors(f"revalidate the size of {nqn} namespace {nsid}"):
            if os.path.exists(path):
                self._write(path, "1")
