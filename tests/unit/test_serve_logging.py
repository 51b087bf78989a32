"""`zds serve` (the zds-api unit) sends the engine's INFO lines to the journal: the
create queue's batch sizes, the start-up summary and adoptions were dropped before (only
WARNING and above got out, through Python's last-resort handler)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from api.cli.local import journal_logging


@pytest.fixture
def clean_root() -> Iterator[None]:
    root = logging.getLogger()
    engine = logging.getLogger("appliance")
    saved = (root.handlers[:], root.level, engine.level)
    root.handlers = []
    yield
    root.handlers, root.level = saved[0], saved[1]
    engine.setLevel(saved[2])


def test_the_engines_info_lines_reach_stderr_and_other_libraries_stay_quiet(
        clean_root: None, capsys: pytest.CaptureFixture[str]) -> None:
    journal_logging()
    logging.getLogger("appliance.services.create_queue").info(
        "create batch of %d (%d more queued meanwhile)", 12, 3)
    logging.getLogger("httpx").info("HTTP Request: GET /")  # a library's chatter
    logging.getLogger("paramiko").warning("a warning gets out")
    err = capsys.readouterr().err
    assert "INFO appliance.services.create_queue: create batch of 12 (3 more" in err
    assert "HTTP Request" not in err
    assert "WARNING paramiko: a warning gets out" in err
