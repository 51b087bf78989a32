"""The target side of replication: the sources' keys, each authorized for one dataset
prefix (the gate lets a key receive there and nowhere else), and the replicas held here
(datasets carrying ``zds:replication``, unmounted and read-only)."""

from __future__ import annotations

import builtins
import ipaddress
import logging
import time
from collections.abc import Sequence

from appliance import validate
from appliance.errors import Conflict, InvalidInput, NotFound, ZdsError
from appliance.host.ssh import AuthorizedKey, public_key, require_dataset_name
from appliance.model import DATASTORE_PARENT, zds_dataset
from appliance.replication.model import REPLICA_PROPERTIES
from appliance.replication.part import ReplicationPart
from appliance.replication.views import Identity, IncomingView

log = logging.getLogger(__name__)

INCOMING_PROPERTIES = ("type", "used", "referenced", "receive_resume_token", "readonly",
                       *REPLICA_PROPERTIES, "zds:name", "zds:protocol", "zds:size",
                       "zds:serial", "zds:iqn", "zds:nqn", "zds:managed")


class TargetSide(ReplicationPart):
    """The keys of the sources that send here, and the replicas they sent."""

    def render_keys(self) -> None:
        """At start-up: the authorized keys file from the records (it may have been lost;
        records and file live in the same state directory)."""
        if self.ctx.hosts.ssh is None:
            return
        keys = self.records.source_keys()
        try:
            if keys or self.ssh.authorized():
                self.ssh.set_authorized(keys)
        except (OSError, ZdsError) as exc:
            log.error("cannot write the replication authorized keys: %s", exc)

    def identity(self) -> Identity:
        return Identity(self.ctx.local.hostname(), self.ssh.public_key(), self.ssh.host_keys())

    def authorized_keys(self) -> builtins.list[AuthorizedKey]:
        return self.records.source_keys()

    def authorize(self, name: str, key: str, prefix: str,
                  sources: Sequence[str] = ()) -> tuple[AuthorizedKey, bool]:
        """Lets the source holding ``key`` receive into ``prefix`` and below (and nothing
        else) through the gate; creates ``prefix`` when missing."""
        validate.resource_name(name, "key name")
        entry = AuthorizedKey(name, public_key(key), self._prefix(prefix),
                              tuple(_source(s) for s in sources))
        with self.ctx.lock.hold(f"authorize replication key {name}"):
            for other in self.records.source_keys():
                if other.name == name:
                    continue
                if other.public_key == entry.public_key:
                    raise Conflict(f"that key is authorized already as {other.name!r}")
                if _nested(entry.prefix, other.prefix):
                    # the gate lets a key receive, abort receives and create datasets
                    # anywhere below its prefix: nested prefixes let one source reach the
                    # other's replicas
                    raise Conflict(
                        f"the dataset prefix {entry.prefix} overlaps {other.prefix}, "
                        f"authorized for key {other.name}: one source could receive into "
                        "(or drop the receives of) the other's replicas. Give each key a "
                        "dataset of its own, neither inside the other (e.g. "
                        f"{entry.prefix.split('/')[0]}/replicas/{name}). Nothing was changed",
                        detail={"key": other.name, "dataset_prefix": other.prefix})
            created = all(k.name != name for k in self.records.source_keys())
            if self.ctx.zfs.get_dataset(entry.prefix, ("type",)) is None:
                self.ctx.zfs.create_filesystem(entry.prefix, {"canmount": "off"})
            self.records.put_key(entry)
            self.ssh.set_authorized(self.records.source_keys())
        return entry, created

    def _prefix(self, prefix: str) -> str:
        prefix = require_dataset_name(prefix, "dataset prefix")
        parts = prefix.split("/")
        if len(parts) < 2:
            raise InvalidInput("the prefix must be a dataset below a pool (e.g. "
                               "tank/replicas/zds1): a whole pool would let the source "
                               "overwrite its datastores")
        own = zds_dataset(prefix)
        if own is not None:
            why = ("datastores there are served" if parts[1] == DATASTORE_PARENT else
                   "ZDS keeps its own data there (probe scratch, checks)")
            raise InvalidInput(f"the prefix {prefix} may not be in {own}: {why}. Use a "
                               f"dataset of its own, e.g. {parts[0]}/replicas/NAME",
                               detail={"dataset_prefix": prefix, "zds_dataset": own})
        pools = {p.name for p in self.ctx.zfs.list_pools()}
        if parts[0] not in pools:
            raise NotFound(f"pool {parts[0]!r} is not imported here")
        info = self.ctx.zfs.get_dataset(prefix, ("type",))
        if info is not None and info.type != "filesystem":
            raise Conflict(f"{prefix} is a {info.type}, not a filesystem")
        return prefix

    def revoke(self, name: str) -> None:
        validate.resource_name(name, "key name")
        with self.ctx.lock.hold(f"revoke replication key {name}"):
            if not self.records.delete_key(name):
                raise NotFound(f"no authorized replication key {name!r}")
            self.ssh.set_authorized(self.records.source_keys())

    def incoming(self) -> builtins.list[IncomingView]:
        """Replicas held by this appliance: datasets carrying zds:replication (one ``zfs
        get -r`` per pool, one snapshot listing per replica)."""
        zfs = self.ctx.zfs
        if not zfs.available():
            return []
        found = []
        now = time.time()
        for pool in zfs.list_pools():
            served = f"{pool.name}/{DATASTORE_PARENT}/"
            for ds in zfs.list_datasets(pool.name, INCOMING_PROPERTIES):
                name = ds.prop("zds:replication")
                if not name or ds.name.startswith(served):
                    continue
                try:
                    snaps = zfs.list_snapshots(ds.name)
                except NotFound:
                    snaps = []
                newest = snaps[-1] if snaps else None
                created = newest.int_prop("creation") if newest else None
                found.append(IncomingView(
                    name=name, dataset=ds.name, pool=pool.name,
                    source=ds.prop("zds:replica_of"), datastore=ds.prop("zds:name"),
                    protocol=ds.prop("zds:protocol"), snapshots=len(snaps),
                    newest_snapshot=newest.name.split("@", 1)[1] if newest else None,
                    newest_created=created,
                    lag=max(0.0, now - created) if created else None,
                    resume_pending=ds.prop("receive_resume_token") not in ("", "-"),
                    used=ds.int_prop("used"), referenced=ds.int_prop("referenced")))
        return sorted(found, key=lambda i: (i.name, i.dataset))

def _nested(a: str, b: str) -> bool:
    """``a`` and ``b`` are the same dataset or one lies below the other."""
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")

def _source(value: str) -> str:
    try:
        return str(ipaddress.ip_network(value.strip(), strict=False))
    except (ValueError, AttributeError):
        raise InvalidInput(f"invalid source {value!r}: an IP address or a CIDR network") \
            from None
