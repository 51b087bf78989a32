"""What a datastore's dataset carries in ZFS, in one place for the datastore service (which
sets it) and the reconciler (which finishes an update a crash cut).

The ``zds:*`` user properties describe the datastore as recorded, so a pool carries its
datastores to another appliance (appliance.adoption rebuilds records from them): every
field a PUT can change is there (size, thin, access, labels, overrides; CHAP secrets
never are). A PUT records the new spec first and then sets the properties; if the
process dies between the two, the dataset's ``zds:*`` differ from the record, and
:func:`lagging` says so, so the reconcile sets them (with the size and tuning they
describe) instead of leaving the change half made.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from appliance.host.zfs import DatasetInfo
from appliance.model import DatastoreRecord, DatastoreSpec, Overrides
from appliance.transports.base import AnyTransport

# Set to "{}" when labels are removed (a user property cannot be unset with zfs set).
EMPTY_JSON = "{}"


def _json(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def overrides_record(overrides: Overrides) -> dict[str, Any]:
    """The overrides a PUT asked for, as ``zds:overrides`` carries them (set ones only)."""
    return {k: v for k, v in asdict(overrides).items() if v is not None}


def user_properties(transport: AnyTransport, rec: DatastoreRecord) -> dict[str, str]:
    """What a pool carries to another appliance about ``rec`` (no secrets)."""
    spec = rec.spec
    props = {
        "zds:managed": "true",
        "zds:name": spec.name,
        "zds:protocol": spec.protocol,
        "zds:profile": spec.profile,
        "zds:thin": "true" if spec.thin else "false",
        "zds:size": str(spec.size),
        "zds:access": _json(transport.access_record(spec)),
    }
    if rec.export_id is not None:
        props["zds:export_id"] = str(rec.export_id)
    if rec.iqn:
        props["zds:iqn"] = rec.iqn
    if rec.serial:
        props["zds:serial"] = rec.serial
    if rec.nqn:
        props["zds:nqn"] = rec.nqn
    if spec.labels:
        props["zds:labels"] = _json(dict(spec.labels))
    if overrides := overrides_record(spec.overrides):
        props["zds:overrides"] = _json(overrides)
    return props


def dataset_properties(transport: AnyTransport, rec: DatastoreRecord) -> dict[str, str]:
    """Native (VM-tuned, sized) and ``zds:*`` properties of ``rec``'s new dataset."""
    props = transport.zfs_properties(rec.spec)
    props.update(user_properties(transport, rec))
    return props


def update_properties(transport: AnyTransport, rec: DatastoreRecord,
                      old: DatastoreSpec) -> dict[str, str]:
    """What changing a dataset made for ``old`` into ``rec``'s sets: every property but
    those fixed at creation, sizes as the storage kind takes them, and the ``zds:*``
    (cleared ones as ``{}``)."""
    props = dataset_properties(transport, rec)
    for key in ("zds:labels", "zds:overrides"):
        props.setdefault(key, EMPTY_JSON)
    return transport.storage.update_properties(props, rec.spec, old)


def lagging(transport: AnyTransport, rec: DatastoreRecord,
            info: DatasetInfo) -> list[str]:
    """The ``zds:*`` properties of ``info`` that differ from what ``rec`` records (an
    update the process did not live to set); [] when the dataset is up to date."""
    return sorted(key for key, value in _with_empty(user_properties(transport, rec)).items()
                  if _said(info, key) != value)


def _with_empty(props: Mapping[str, str]) -> dict[str, str]:
    out = dict(props)
    for key in ("zds:labels", "zds:overrides"):
        out.setdefault(key, EMPTY_JSON)
    return out


def _said(info: DatasetInfo, key: str) -> str:
    value = info.prop(key)
    return EMPTY_JSON if key in ("zds:labels", "zds:overrides") and not value else value
