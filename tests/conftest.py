"""Where the test command's time goes: wall-clock seconds per suite (unit, fuzz,
integration, e2e, first start to last end) and per e2e module (the sum of its own tests'
setup, call and teardown: e2e modules run in phases, interleaved, so a module's span would
count the others' time; a shared boot or reboot counts for the test that triggered it),
printed at the end of every run and written as JSON
to ``$ZDS_TEST_TIMINGS`` (scripts/test.sh reads it for its phase table; docs/architecture.md
keeps the measured table). Each e2e test of a second or more also prints one line as it
ends (the clock, its seconds, its id), so a run cut off by CI's time limit still shows
where its time went."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime
from pathlib import Path

import pytest

_spans: dict[str, list[float]] = {}  # "suite" -> [first start, last end]
_sums: dict[str, list[float]] = {}  # "e2e/module" -> [first start, seconds of its tests]


def _keys(item: pytest.Item) -> list[str]:
    parts = Path(str(item.fspath)).parts
    if "tests" not in parts:
        return []
    rel = parts[parts.index("tests") + 1:]
    if len(rel) < 2:
        return []
    suite = rel[0]
    return [suite, f"{suite}/{Path(rel[-1]).stem}"] if suite == "e2e" else [suite]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    t0 = time.monotonic()
    yield
    t1 = time.monotonic()
    keys = _keys(item)
    if "e2e" in keys and t1 - t0 >= 1:  # skipped and instant tests say nothing
        reporter = item.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_line(f"[e2e {datetime.now():%H:%M:%S}] {t1 - t0:7.1f} s "
                                f"{item.nodeid}")
    for key in keys:
        if "/" in key:
            _sums.setdefault(key, [t0, 0.0])[1] += t1 - t0
        else:
            span = _spans.setdefault(key, [t0, t1])
            span[0], span[1] = min(span[0], t0), max(span[1], t1)


def durations() -> dict[str, float]:
    """Seconds per suite (wall clock) and per e2e module (its tests' own time), in the
    order they started."""
    rows = [(start, k, end - start) for k, (start, end) in _spans.items()]
    rows += [(start, k, took) for k, (start, took) in _sums.items()]
    # modules under their suite: ordered by the suite, then by their first start
    rows.sort(key=lambda r: (_spans.get(r[1].split("/")[0], [r[0]])[0], "/" in r[1], r[0]))
    return {k: round(took, 1) for _start, k, took in rows}


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    found = durations()
    if not found:
        return
    terminalreporter.section("time per suite (wall clock) and e2e module (its tests' time)")
    for key, seconds in found.items():
        indent = "    " if "/" in key else ""
        terminalreporter.write_line(f"{indent}{key:<44} {seconds:8.1f} s")
    out = os.environ.get("ZDS_TEST_TIMINGS")
    if out:
        Path(out).write_text(json.dumps(found, indent=1) + "\n")
