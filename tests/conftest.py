"""Where the test command's time goes: wall-clock seconds per suite (unit, fuzz,
integration, e2e) and per e2e module, printed at the end of every run and written as JSON
to ``$ZDS_TEST_TIMINGS`` (scripts/test.sh reads it for its phase table; docs/architecture.md
keeps the measured table)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

_spans: dict[str, list[float]] = {}  # "suite" or "suite/module" -> [first start, last end]


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
    for key in _keys(item):
        span = _spans.setdefault(key, [t0, t1])
        span[0], span[1] = min(span[0], t0), max(span[1], t1)


def durations() -> dict[str, float]:
    """Seconds per suite and per e2e module, in the order they ran."""
    ordered = sorted(_spans.items(), key=lambda kv: kv[1][0])
    return {k: round(end - start, 1) for k, (start, end) in ordered}


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    found = durations()
    if not found:
        return
    terminalreporter.section("time per suite and e2e module (wall clock)")
    for key, seconds in found.items():
        indent = "    " if "/" in key else ""
        terminalreporter.write_line(f"{indent}{key:<44} {seconds:8.1f} s")
    out = os.environ.get("ZDS_TEST_TIMINGS")
    if out:
        Path(out).write_text(json.dumps(found, indent=1) + "\n")
