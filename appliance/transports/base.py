"""The one interface for what a protocol does to a datastore.

A :class:`Transport` is built once per engine on the host adapters (it calls them; it
never runs a command itself) and is chosen by the datastore's ``spec.protocol`` through
:mod:`appliance.transports.registry`. The reconciler, the services, metrics, probes and
the API ask it and never ask "is this NFS?".

What a transport provides (docs/architecture.md, "Transports"):

- what it is: ``name``, ``protocols``, ``storage`` (file system or zvol), the health
  ``component`` and ``daemon``, the request fields it takes (``access_fields``);
- desired state: :meth:`zfs_properties`, :meth:`access_record`, :meth:`new_identity`,
  :meth:`check`, :meth:`desired`;
- live state in a constant number of host calls: :meth:`read_live` (every datastore),
  :meth:`read_for` (a few; :meth:`read_withdraw` to remove them), :meth:`read_one`;
  :meth:`serving`, :meth:`clients`;
- change: :meth:`plan` (desired vs live, pure), :meth:`apply`, :meth:`unserved` (when its
  daemon is down), :meth:`subjects` (what reports name), :meth:`resized` (after growth);
- health: :meth:`available`, :meth:`health_detail`, :meth:`require`;
- attach instructions: :meth:`attach`; vSphere's name for it: :meth:`vmware_target`;
- metrics: :meth:`metrics_read`, :meth:`metrics_sources`, :meth:`probe_read`,
  :meth:`probe_sources`;
- probes: :meth:`probe_attacher`, :meth:`probe_settings`, ``probe_target``,
  ``probe_writes``;
- replication: :meth:`promote_identity` and ``promote_notes`` (what the replica's data
  keeps or drops is the storage kind's: :mod:`appliance.transports.storage`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from appliance.actions import Action, ReconcileReport
from appliance.attach import AttachInstructions
from appliance.host.factory import HostAdapters, ProbeHosts
from appliance.host.iostats import IoStatsHost
from appliance.host.zfs import DatasetInfo
from appliance.metrics.counters import BlockReading, Source
from appliance.model import DatastoreRecord, DatastoreSpec
from appliance.settings import Settings
from appliance.store import Store
from appliance.transports.storage import Storage

# Up to this many datastores an incremental reconcile looks each one up; beyond, one
# full read of the live state is cheaper.
LOOKUP_LIMIT = 16


@dataclass(frozen=True)
class Live:
    """What a transport's daemon serves now, read in one go; ``up``: it answered."""

    up: bool


@dataclass(frozen=True)
class Identity:
    """What a new datastore is known by, allocated once and recorded (never reused)."""

    export_id: int | None = None  # NFS: the export's Export_Id / fsid
    iqn: str | None = None  # iSCSI: the target's IQN
    serial: str | None = None  # a block device's unit serial (its WWN derives from it)
    nqn: str | None = None  # NVMe/TCP: the subsystem's NQN


@dataclass(frozen=True)
class ProbeAttachment:
    """Where a probe does its I/O once the transport serves its scratch on loopback."""

    path: str  # a mount point or a block device
    is_device: bool
    host: str  # the address the appliance reached itself at
    layer: str  # appliance.probes.semantics.Layer: nfs | block
    details: Mapping[str, Any] = field(default_factory=dict)  # recorded with the result


class ProbeAttacher(ABC):
    """Serves a probe's scratch dataset/zvol through the transport and attaches the
    appliance's own client to it, undoing everything in :meth:`detach`."""

    @abstractmethod
    def attach(self, protocol: str, datastore: str, scratch_path: str, scratch_name: str,
               probe_id: str) -> ProbeAttachment:
        """Serves ``scratch_path`` (the scratch of ``datastore``'s probe) over loopback
        with ``protocol``; undoes what it did before raising."""

    @abstractmethod
    def detach(self, attached: ProbeAttachment) -> None:
        """Client off, then the export/target gone; raises the first failure."""

    @abstractmethod
    def clean_leftovers(self, running: set[str]) -> list[str]:
        """Removes what probes that are not ``running`` (ids) left (a crash)."""


DesiredT = TypeVar("DesiredT")
LiveT = TypeVar("LiveT", bound=Live)


class Transport(ABC, Generic[DesiredT, LiveT]):
    """What a protocol does to a datastore; see the module docstring for the list.

    ``DesiredT`` is the object a datastore becomes on the daemon (an export, a target),
    ``LiveT`` what one read of the daemon returns.
    """

    name: ClassVar[str]  # the family: keys live state, status and reports
    protocols: ClassVar[tuple[str, ...]]  # the values of ``spec.protocol`` it serves
    storage: ClassVar[Storage]  # the ZFS dataset kind its datastores are
    component: ClassVar[str]  # its key in health's components
    daemon: ClassVar[str]  # how drift names its server when it does not answer
    access_fields: ClassVar[tuple[str, ...]]  # request/spec fields it takes
    access_said: ClassVar[str]  # how a refusal names those fields
    access_hint: ClassVar[str] = ""  # what to use instead, said when another's are given
    clients_said: ClassVar[str]  # who :meth:`clients` lists, in a refusal
    probe_target: ClassVar[str]  # the probe target that reaches it over loopback
    probe_writes: ClassVar[str]  # what a probe's writes=auto means for its clients
    promote_notes: ClassVar[tuple[str, ...]] = ()  # said after a promote served it

    @classmethod
    @abstractmethod
    def build(cls, settings: Settings, hosts: HostAdapters, store: Store) -> Transport[Any, Any]:
        """The transport on the engine's adapters and records."""

    # --- health -----------------------------------------------------------------------

    @abstractmethod
    def available(self) -> bool:
        """Its daemon is there to take changes (one cheap host call)."""

    @abstractmethod
    def health_detail(self, ok: bool) -> str:
        """What health says about its daemon."""

    @abstractmethod
    def require(self) -> None:
        """Raises Unavailable (saying how to fix it) when a change cannot be served."""

    def restart_daemon(self) -> bool:
        """Restarts its daemon after it stopped answering (see the watcher); True if it
        did. The kernel's targets (LIO, nvmet) have no process to restart: False."""
        return False

    # --- desired state ----------------------------------------------------------------

    def zfs_properties(self, spec: DatastoreSpec) -> dict[str, str]:
        """Native ZFS properties a new datastore of ``spec`` is created with."""
        return self.storage.properties(spec)

    @abstractmethod
    def access_record(self, spec: DatastoreSpec) -> dict[str, Any]:
        """Who may use it, as ``zds:access`` carries it with the pool (no secrets)."""

    @abstractmethod
    def new_identity(self, spec: DatastoreSpec) -> Identity:
        """The identities a new datastore gets (allocated now, never reused)."""

    def adopted(self, rec: DatastoreRecord) -> None:
        """``rec`` was adopted from its pool's ``zds:*`` properties with the identities
        it carries: keep the allocator of :meth:`new_identity` from handing them out."""

    @abstractmethod
    def check(self, spec: DatastoreSpec) -> None:
        """The object ``spec`` will become, checked by the adapter's own rules, so
        nothing it would refuse gets as far as creating a dataset."""

    @abstractmethod
    def desired(self, datastores: Sequence[tuple[DatastoreRecord, DatasetInfo]]
                ) -> list[DesiredT]:
        """What these datastores (ready or creating, with their datasets) should be on
        the daemon; one that cannot be served yet (not mounted) has none."""

    # --- live state (no lock; constant host calls) ------------------------------------

    @abstractmethod
    def read_live(self, view: bool) -> LiveT:
        """Everything the daemon serves: enough to plan (``view`` False) or, cheaper,
        enough for a view (serving, clients). A daemon that does not answer is down,
        not an error."""

    @abstractmethod
    def read_for(self, records: Sequence[DatastoreRecord]) -> LiveT:
        """What the daemon serves of these datastores only (an incremental reconcile
        plans removals for nothing else): a lookup each, or one :meth:`read_live` beyond
        :data:`LOOKUP_LIMIT`."""

    def read_withdraw(self, records: Sequence[DatastoreRecord]) -> LiveT:
        """What the daemon still holds of these datastores, to withdraw them: what
        :meth:`read_for` finds, and pieces a crash left without the object that owns
        them (default: none such)."""
        return self.read_for(records)

    @abstractmethod
    def read_one(self, rec: DatastoreRecord, clients: bool) -> LiveT:
        """One datastore, for its view; without ``clients`` who uses it is not read."""

    @abstractmethod
    def serving(self, live: LiveT, rec: DatastoreRecord) -> bool:
        """Its export/target is there."""

    @abstractmethod
    def clients(self, live: LiveT, rec: DatastoreRecord, window: float | None) -> list[str]:
        """Who uses it now (a delete or rollback is refused while anyone does)."""

    # --- change -----------------------------------------------------------------------

    @abstractmethod
    def plan(self, desired: Sequence[DesiredT], live: LiveT) -> list[Action[Any]]:
        """What must change so the daemon serves ``desired`` (pure). Only ZDS's own
        objects are touched."""

    @abstractmethod
    def apply(self, actions: Sequence[Action[Any]]) -> ReconcileReport:
        """Runs the actions (removals first, additions in one batch); one failure does
        not stop the others, each is reported under its subject."""

    @abstractmethod
    def unserved(self, desired: Sequence[DesiredT]) -> list[tuple[str, str]]:
        """(subject, message) for each object its daemon, being down, cannot serve."""

    @abstractmethod
    def subjects(self, rec: DatastoreRecord) -> tuple[str, ...]:
        """The subjects actions and failures about ``rec`` are reported under."""

    def resized(self, rec: DatastoreRecord) -> None:
        """``rec``'s dataset just grew: tell its clients when the daemon does not (LIO and
        the NFS servers see a new size themselves)."""
        return None

    # --- attach instructions ----------------------------------------------------------

    @abstractmethod
    def attach(self, rec: DatastoreRecord, server: str, port: int | None,
               path: str | None) -> AttachInstructions:
        """How ESXi and libvirt attach it (``path``: where its dataset is mounted)."""

    @abstractmethod
    def vmware_target(self, rec: DatastoreRecord) -> dict[str, str]:
        """How vSphere knows it: keyword arguments of appliance.policies.vmware.Target
        (``nfs_path`` or ``naa``)."""

    # --- metrics ----------------------------------------------------------------------

    @abstractmethod
    def metrics_read(self, stats: IoStatsHost, records: Sequence[DatastoreRecord],
                     errors: list[str]) -> object:
        """Its counters for one collection, in a constant number of reads; a read that
        fails adds to ``errors``."""

    @abstractmethod
    def metrics_sources(self, reading: object, rec: DatastoreRecord,
                        blocks: BlockReading) -> list[Source] | None:
        """``rec``'s counters in ``reading``; None: this server keeps none per datastore
        (no series at all, rather than zeros)."""

    def probe_read(self, stats: IoStatsHost) -> object:
        """What :meth:`probe_sources` needs, read just before a probe is cleaned up."""
        return None

    def probe_sources(self, reading: object, rec: DatastoreRecord,
                      probe_id: str) -> list[Source]:
        """The counters of what a running probe of ``rec`` made on the daemon (its
        export); its scratch zvol's counters are the collector's."""
        return []

    # --- probes -----------------------------------------------------------------------

    @abstractmethod
    def probe_attacher(self, hosts: ProbeHosts) -> ProbeAttacher:
        """How a probe reaches a scratch through this transport."""

    def probe_settings(self, rec: DatastoreRecord) -> dict[str, Any]:
        """What a probe result records about the datastore's export/target."""
        return {}

    # --- replication ------------------------------------------------------------------

    @abstractmethod
    def promote_identity(self, source: DatastoreRecord, keep: bool,
                         records: Sequence[DatastoreRecord], name: str
                         ) -> tuple[Identity, list[str]]:
        """The identities a promoted replica of ``source`` gets as datastore ``name``
        (``keep``: the source's, when the protocol lets hosts tell them apart), and what
        to tell the admin about them. Raises Conflict when they cannot be kept."""


AnyTransport = Transport[Any, Any]

