"""The secrets a datastore needs that must move with its pool: an iSCSI datastore's CHAP
credentials. They never go into ZFS properties (``zfs get`` shows those to any user), so
a pool imported elsewhere, or taken by the other node of an HA pair, used to bring its
CHAP datastores back as ``error`` until a PUT gave the credentials again: in a takeover,
LUNs the hosts could no longer log in to.

Each CHAP datastore's credentials are kept in a root-only file (0600) in its pool's
``POOL/datastores`` file system, ``<mount>/.zds-secrets/<name>.json``: written when the
datastore is made or changed, removed when it loses CHAP or is deleted, read when the
pool's datastores are adopted. Only what the system disk held moves: whoever can read
the pool's disks could read them, as whoever can read the system disk could read the
appliance's database (docs/security.md).

The initiator groups the pool's datastores name move the same way: a datastore's
``zds:access`` names its groups, but the groups (who the hosts are) live in the
appliance's database, so a node that took the pool without them would serve the LUN to
no host. Each group a datastore on the pool uses is kept in
``<mount>/.zds-groups/<group>.json``, written when such a datastore is made or changed
and when the group changes; adoption makes the ones this node lacks.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, replace
from pathlib import Path

from appliance import validate
from appliance.errors import ZdsError
from appliance.host.local import LocalHost
from appliance.host.zfs import DatasetInfo, ZfsHost
from appliance.model import DATASTORE_PARENT, ChapSettings, DatastoreRecord, InitiatorGroup

log = logging.getLogger(__name__)

SECRETS_DIR = ".zds-secrets"
GROUPS_DIR = ".zds-groups"


def secrets_file(mountpoint: str, name: str) -> Path:
    """Where datastore ``name``'s credentials are kept, under its pool's
    ``POOL/datastores`` mounted at ``mountpoint``."""
    return Path(mountpoint) / SECRETS_DIR / f"{name}.json"


def mount_of(info: DatasetInfo | None) -> str | None:
    """Where a listed ``POOL/datastores`` (with ``mountpoint`` and ``mounted``) is
    mounted; None when it is not (or not there)."""
    if info is None or info.prop("mounted") != "yes":
        return None
    mountpoint = info.prop("mountpoint")
    return mountpoint if mountpoint.startswith("/") else None


def keep(zfs: ZfsHost, local: LocalHost, rec: DatastoreRecord,
         had_chap: bool = False) -> None:
    """Writes ``rec``'s CHAP credentials onto its pool, or removes them when it has none
    (only looked for when ``had_chap``: a datastore that never had CHAP costs nothing)."""
    if rec.spec.iscsi.chap is not None or had_chap:
        _store(zfs, local, rec.spec.pool, rec.name, rec.spec.iscsi.chap)


def forget(zfs: ZfsHost, local: LocalHost, rec: DatastoreRecord) -> None:
    """Removes a deleted datastore's credentials from its pool."""
    if rec.spec.iscsi.chap is not None:
        _store(zfs, local, rec.spec.pool, rec.name, None)


def _mount(zfs: ZfsHost, pool: str) -> str | None:
    return mount_of(zfs.get_dataset(f"{pool}/{DATASTORE_PARENT}", ("mountpoint", "mounted")))


def _store(zfs: ZfsHost, local: LocalHost, pool: str, name: str,
           chap: ChapSettings | None) -> None:
    """Writes (or, with None, removes) datastore ``name``'s file on ``pool``. A pool that
    cannot keep it is logged: the datastore is served all the same, and only a takeover
    would need the credentials given again."""
    try:
        mount = _mount(zfs, pool)
        if mount is None:
            log.warning("%s/%s is not mounted: the CHAP credentials of %s stay on this "
                        "node only", pool, DATASTORE_PARENT, name)
            return
        path = secrets_file(mount, name)
        if chap is None:
            local.remove_file(path)
        else:
            local.write_secret(path, json.dumps(asdict(chap), sort_keys=True))
    except (ZdsError, OSError) as exc:
        log.warning("cannot keep the CHAP credentials of %s on pool %s: %s", name, pool, exc)


def read(local: LocalHost, mountpoint: str, name: str) -> ChapSettings | None:
    """The credentials kept for datastore ``name`` under ``mountpoint``; None when there
    are none or the file is not what :func:`keep` writes (logged)."""
    path = secrets_file(mountpoint, name)
    text = local.read_text(path)
    if text is None:
        return None
    try:
        found = json.loads(text)
        chap = ChapSettings(user=found["user"], secret=found["secret"],
                            mutual_user=found.get("mutual_user"),
                            mutual_secret=found.get("mutual_secret"))
        if not all(isinstance(v, str) for v in (chap.user, chap.secret)):
            raise TypeError("user and secret must be strings")
        return chap
    except (ValueError, KeyError, TypeError) as exc:
        log.error("ignoring %s: %s", path, exc)
        return None


def replace_chap(rec: DatastoreRecord, chap: ChapSettings | None) -> DatastoreRecord:
    """``rec`` with other CHAP credentials (or none)."""
    return replace(rec, spec=replace(rec.spec, iscsi=replace(rec.spec.iscsi, chap=chap)))


def group_file(mountpoint: str, name: str) -> Path:
    """Where initiator group ``name`` is kept under a pool's mounted ``POOL/datastores``."""
    return Path(mountpoint) / GROUPS_DIR / f"{name}.json"


def keep_groups(zfs: ZfsHost, local: LocalHost, pool: str,
                groups: list[InitiatorGroup]) -> None:
    """Writes ``groups`` (used by datastores on ``pool``) onto the pool. Nothing to write
    costs nothing; a pool that cannot keep them is logged (served all the same: only a
    takeover would find a group missing)."""
    if not groups:
        return
    try:
        mount = _mount(zfs, pool)
        if mount is None:
            log.warning("%s/%s is not mounted: initiator groups %s stay on this node only",
                        pool, DATASTORE_PARENT, ", ".join(g.name for g in groups))
            return
        for g in groups:
            local.write_secret(group_file(mount, g.name), json.dumps(
                {"name": g.name, "initiators": list(g.initiators)}, sort_keys=True))
    except (ZdsError, OSError) as exc:
        log.warning("cannot keep initiator groups on pool %s: %s", pool, exc)


def read_group(local: LocalHost, mountpoint: str, name: str) -> InitiatorGroup | None:
    """Group ``name`` as kept under ``mountpoint``; None when it is not there or the file
    is not what :func:`keep_groups` writes (logged)."""
    path = group_file(mountpoint, name)
    text = local.read_text(path)
    if text is None:
        return None
    try:
        found = json.loads(text)
        initiators = found["initiators"]
        if found["name"] != name or not isinstance(initiators, list):
            raise TypeError("not a group of initiator names")
        return InitiatorGroup(name, tuple(sorted({validate.initiator_name(i)
                                                  for i in initiators})))
    except (ValueError, KeyError, TypeError, ZdsError) as exc:
        log.error("ignoring %s: %s", path, exc)
        return None
