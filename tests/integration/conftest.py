"""Fixtures for integration tests against real daemons on this host.

``ganesha_server`` (session): one private nfs-ganesha 4.3 with rpcbind and its own
dbus-daemon in a network namespace (see ganesha_harness.py); started once, stopped and
cleaned up at the end even when tests fail.

``ganesha_env`` (per test): the same server, and at teardown every export a test left
behind is removed (live and its file), so tests do not see each other's exports.

Tests that use them need root; without root they are skipped with that reason (on the
project's test machines they run: root and the packages from scripts/setup-host.sh).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ganesha_harness import GaneshaHarness


@pytest.fixture(scope="session")
def ganesha_server() -> Iterator[GaneshaHarness]:
    if os.geteuid() != 0:
        pytest.skip("needs root: starts nfs-ganesha, rpcbind and dbus in a network namespace")
    harness = GaneshaHarness()
    harness.start()
    try:
        yield harness
    finally:
        harness.stop()


@pytest.fixture
def ganesha_env(ganesha_server: GaneshaHarness) -> Iterator[GaneshaHarness]:
    yield ganesha_server
    adapter = ganesha_server.adapter()
    if adapter.available():
        for export in adapter.list_exports():
            adapter.remove_export(export.export_id)
    for leftover in ganesha_server.exports_dir.glob("export-*.conf"):
        leftover.unlink()
