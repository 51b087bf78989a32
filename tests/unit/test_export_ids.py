"""NFS export ids: one block per HA node (appliance/transports/nfs.py, export_block),
each with its own never-reused counter (appliance/store.py)."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import pytest

from appliance.errors import Unavailable
from appliance.model import DatastoreRecord, DatastoreSpec
from appliance.store import FIRST_EXPORT_ID, LAST_EXPORT_ID, Store
from appliance.transports.nfs import PROBE_EXPORT_IDS, export_block


def record(name: str, export_id: int) -> DatastoreRecord:
    return DatastoreRecord(DatastoreSpec(name=name, pool="tank", protocol="nfs3",
                                         size=1 << 30), "ready", export_id=export_id)


def test_the_blocks_are_disjoint_and_the_single_appliance_has_them_all() -> None:
    blocks = [export_block(n) for n in (1, 2, 3, 4)]
    assert blocks[0][0] == FIRST_EXPORT_ID
    for (_f1, l1), (f2, _l2) in pairwise(blocks):
        assert l1 + 1 == f2  # adjacent, never overlapping
    assert export_block(None) == (FIRST_EXPORT_ID, blocks[-1][1])
    assert blocks[-1][1] == LAST_EXPORT_ID < PROBE_EXPORT_IDS.start  # not the probes'
    assert export_block(5) == export_block(1)  # nodeids past 4 wrap (a pair uses 1, 2)


def test_each_block_counts_on_its_own_and_never_reuses(tmp_path: Path) -> None:
    store = Store(tmp_path / "zds.db")
    b1, b2 = export_block(1), export_block(2)
    assert store.next_export_id(*b1) == b1[0]
    assert store.next_export_id(*b2) == b2[0]
    store.put_datastore(record("mine", b1[0] + 1))
    store.put_datastore(record("peers", b2[0] + 40))  # adopted from the peer's block
    store.reserve_export_id(b2[0] + 40, *b1)  # not ours to count: no effect on block 1
    assert store.next_export_id(*b1) == b1[0] + 2
    store.delete_datastore("mine")
    assert store.next_export_id(*b1) == b1[0] + 3  # the deleted id is not given again
    assert store.next_export_id(*b2) == b2[0] + 41  # above the adopted one


def test_a_single_appliance_made_the_first_node_counts_on(tmp_path: Path) -> None:
    store = Store(tmp_path / "zds.db")
    ids = [store.next_export_id() for _ in range(3)]  # before the pair: the whole range
    assert ids == [FIRST_EXPORT_ID, FIRST_EXPORT_ID + 1, FIRST_EXPORT_ID + 2]
    assert store.next_export_id(*export_block(1)) == FIRST_EXPORT_ID + 3


def test_a_used_up_block_is_refused(tmp_path: Path) -> None:
    store = Store(tmp_path / "zds.db")
    first, last = export_block(2)
    store.put_datastore(record("top", last))
    with pytest.raises(Unavailable, match="no NFS export id is left"):
        store.next_export_id(first, last)
