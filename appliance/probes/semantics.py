"""What a probe's I/O means, made the same on every target so a ratio compares like with like.

A local probe and an nfs (or iscsi) probe of the same profile on the same datastore must
differ only by the protocol. Three things decide what a measured I/O costs, and each is
fixed here for both sides of a comparison, then recorded in the result:

- **client_cache**: whether the page cache of the client side (the NFS client, the block
  device of a zvol or LUN, an ext4 on it) may serve or absorb I/O. ``bypassed`` by
  default (fio ``direct=1``), as ESXi (no host page cache for virtual disks) and KVM with
  ``cache=none`` do. A local probe straight on a ZFS dataset has no client at all
  (``none``): there fio runs *without* O_DIRECT, because OpenZFS 2.3's O_DIRECT bypasses
  the ARC, which nfs-ganesha and knfsd never do. Before this module the local baseline of
  an NFS datastore read from disk while the nfs target read from the ARC, and the
  size-sweep's "cache" writes went into the NFS client's page cache, never reaching the
  appliance (1 MB: 38.0 ms local vs 8.95 ms through NFS).
- **reads**: ``cache`` (the appliance's ARC may serve them) or ``disk`` (the probe's
  scratch gets ``primarycache=metadata`` on both sides: every read goes to the disks).
- **writes**: ``sync`` (a write completes only on stable storage: ZIL, or the SLOG when
  the pool has one) or ``async`` (it completes in the appliance's memory and goes to the
  disks with the next transaction group). The Linux NFS client turns every O_DIRECT
  write into a stable one (FILE_SYNC, or UNSTABLE + COMMIT before the write returns), and
  ESXi writes FILE_SYNC: so ``sync`` is the default on NFS datastores, and the local
  side gets O_SYNC (fio ``sync=1``) to match. ``async`` on an NFS datastore sets
  ``sync=disabled`` on the probe's scratch (both sides), so stable-write requests cost
  nothing there: the same "in memory" completion through the protocol and locally. A
  zvol LUN reports a volatile write cache (WCE=1), so ``async`` is the default on iSCSI
  datastores and ``sync`` adds O_SYNC (a SCSI SYNCHRONIZE CACHE after each write) on both
  the LUN and the zvol.

The ZFS properties are set on the probe's own scratch dataset or zvol, never on the
datastore; a datastore's own ``sync=disabled``/``always`` or ``primarycache`` wins over
what was asked (the probe measures what the datastore gives), and the result says so in
``effective``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from appliance.errors import InvalidInput
from appliance.probes.params import Params
from appliance.transports.registry import probe_writes

# What fio does its I/O on:
#   zfs    a ZFS dataset's mountpoint on the appliance (local target of an NFS datastore)
#   nfs    an NFS mount (the appliance's loopback client, or a client's mount)
#   block  a block device: a zvol (local) or a LUN logged in over iSCSI
#   fs     any other file system: ext4 on a scratch zvol or LUN, a client's directory
Layer = Literal["zfs", "nfs", "block", "fs"]
LAYERS: tuple[str, ...] = ("zfs", "nfs", "block", "fs")
READS = ("cache", "disk")
WRITES = ("auto", "sync", "async")


@dataclass(frozen=True)
class Semantics:
    reads: str  # cache | disk
    writes: str  # sync | async
    client_cache: str  # bypassed | used | none (a ZFS dataset: no client in between)

    def as_dict(self) -> dict[str, str]:
        return {"reads": self.reads, "writes": self.writes, "client_cache": self.client_cache}

    def key(self) -> tuple[str, str, str]:
        """What must be equal for two results to compare like with like: a dataset with
        no client (``none``) matches a client whose cache is ``bypassed``."""
        cc = "bypassed" if self.client_cache == "none" else self.client_cache
        return (self.reads, self.writes, cc)


@dataclass(frozen=True)
class FioIo:
    """The fio options that carry the semantics on one layer."""

    direct: bool
    sync: bool

    def options(self) -> list[tuple[str, str]]:
        return [("direct", "1" if self.direct else "0"), ("sync", "1" if self.sync else "0")]


def requested(params: Mapping[str, Any], protocol: str) -> Semantics:
    """The semantics a probe asks for: its ``reads``/``writes``/``direct`` parameters,
    ``writes=auto`` resolved for the datastore's protocol as its transport says (NFS:
    sync, as ESXi writes; a LUN and anything else: async)."""
    reads = str(params.get("reads", "cache"))
    writes = str(params.get("writes", "auto"))
    if reads not in READS:
        raise InvalidInput(f"reads: expected one of {', '.join(READS)}, got {reads!r}")
    if writes not in WRITES:
        raise InvalidInput(f"writes: expected one of {', '.join(WRITES)}, got {writes!r}")
    if writes == "auto":
        writes = probe_writes(protocol)
    direct = params.get("direct", True)
    return Semantics(reads, writes, "bypassed" if direct is not False else "used")


def on_layer(sem: Semantics, layer: str) -> Semantics:
    """The semantics as they hold on ``layer`` (a ZFS dataset has no client cache)."""
    if layer not in LAYERS:
        raise InvalidInput(f"layer: expected one of {', '.join(LAYERS)}")
    return replace(sem, client_cache="none") if layer == "zfs" else sem


def fio_io(sem: Semantics, layer: str) -> FioIo:
    """fio's direct= and sync= for ``sem`` on ``layer``.

    On a ZFS dataset fio never uses O_DIRECT (OpenZFS 2.3 would bypass the ARC for it,
    unlike nfs-ganesha and knfsd, which read and write through the ARC); elsewhere
    O_DIRECT is what bypasses the client's page cache. ``sync`` writes add O_SYNC on every
    layer (on an NFS mount the client's direct writes are stable already, and the extra
    fsync finds nothing left to COMMIT).
    """
    if layer not in LAYERS:
        raise InvalidInput(f"layer: expected one of {', '.join(LAYERS)}")
    direct = layer != "zfs" and sem.client_cache == "bypassed"
    return FioIo(direct=direct, sync=sem.writes == "sync")


def zfs_props(sem: Semantics, *, volume: bool, datastore: Mapping[str, str] | None = None
              ) -> dict[str, str]:
    """Properties for the probe's scratch so ``sem`` holds on both sides of a comparison.

    ``datastore`` holds the datastore's own ``sync``/``primarycache``: a datastore that
    never caches data or never makes writes stable keeps that (see :func:`effective`).
    """
    ds = dict(datastore or {})
    ds_cache = ds.get("primarycache", "all") or "all"
    ds_sync = ds.get("sync", "standard") or "standard"
    props = {"primarycache": "metadata" if sem.reads == "disk" and ds_cache == "all"
             else ds_cache}
    if sem.writes == "async" and not volume:
        props["sync"] = "disabled"  # stable-write requests from the NFS client cost nothing
    else:
        props["sync"] = ds_sync
    return props


def effective(sem: Semantics, props: Mapping[str, str]) -> tuple[Semantics, list[str]]:
    """What the scratch's properties really give, and why it differs from ``sem``."""
    notes = []
    reads, writes = sem.reads, sem.writes
    if props.get("primarycache") in ("metadata", "none") and reads == "cache":
        reads = "disk"
        notes.append(f"the datastore has primarycache={props['primarycache']}: reads go "
                     "to disk")
    if props.get("sync") == "disabled" and writes == "sync":
        writes = "async"
        notes.append("the datastore has sync=disabled: writes are never stable")
    if props.get("sync") == "always" and writes == "async":
        writes = "sync"
        notes.append("the datastore has sync=always: every write is stable")
    return replace(sem, reads=reads, writes=writes), notes


def step_semantics(base: Semantics, overrides: Sequence[tuple[str, str]]) -> Semantics:
    """A step's own reads/writes (size-sweep's cache and disk passes) over ``base``."""
    o = dict(overrides)
    return replace(base, reads=o.get("reads", base.reads), writes=o.get("writes", base.writes))


def record(layer: str, phases: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``semantics`` of a result: the first phase's at the top (most probes have one
    phase), every phase with its steps, fio options and ZFS properties below."""
    first = dict(phases[0]) if phases else {}
    out: dict[str, Any] = {"layer": layer}
    for key in ("reads", "writes", "client_cache"):
        values = {str(p.get("effective", p).get(key, "")) for p in phases}
        out[key] = values.pop() if len(values) == 1 else "per step"
    out["phases"] = [dict(p) for p in phases]
    if first.get("notes"):
        out["notes"] = first["notes"]
    return out


def describe(params: Params) -> str:
    """One line for logs: reads=..., writes=..., direct=..."""
    return ", ".join(f"{k}={params[k]}" for k in ("reads", "writes", "direct") if k in params)
