"""docs/snapshots.md really runs: every ``zds`` line of its ```sh blocks, in order,
against the API of ``zds demo`` (the fakes, with the demo's vCenter and hook programs),
must exit as the walk-through says (0, or the status in a trailing ``# exit N``).

A snapshot name such as ``gold-2026-11-23T030000Z`` in a command stands for the newest
snapshot of that policy on the datastore named in the command (the real name depends on
when the test runs)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from api.cli import main
from appliance.engine import Engine
from tests.unit.test_cli import server  # noqa: F401 (the fixture)

DOC = Path(__file__).resolve().parents[2] / "docs" / "snapshots.md"
SNAPSHOT = re.compile(r"\b([a-z0-9][a-z0-9.-]*)-\d{4}-\d\d-\d\dT\d{6}Z\b")


def commands() -> list[str]:
    out: list[str] = []
    in_sh = False
    for line in DOC.read_text().splitlines():
        if line.startswith("```"):
            in_sh = line.strip() == "```sh"
            continue
        if in_sh and re.match(r"^(\w+=\S+ )*zds ", line):
            out.append(line)
    return out


def test_the_walk_through_has_commands() -> None:
    cmds = commands()
    assert len(cmds) >= 10 and any(" policy put " in c for c in cmds)


def test_every_command_in_the_walk_through_runs(
        server: tuple[str, str, Engine],  # noqa: F811
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    url, token, engine = server
    for line in commands():
        code, _, _comment = line.partition(" # exit ")
        expected = int(_comment) if _comment else 0
        words = shlex.split(code, comments=True)
        while "=" in words[0]:
            key, value = words.pop(0).split("=", 1)
            monkeypatch.setenv(key, value)
        assert words[0] == "zds"
        args = words[1:]
        for i, word in enumerate(args):
            m = SNAPSHOT.fullmatch(word)
            if m:
                ds = next(a for a in args if engine.store.get_datastore(a) is not None)
                mine = [s for s in engine.snapshots.list(ds) if s.policy == m.group(1)]
                assert mine, f"{line}: no snapshot of policy {m.group(1)} on {ds}"
                args[i] = mine[-1].name
        try:
            rc = main(["--server", url, "--token", token, *args])
        except SystemExit as exc:
            rc = 2 if exc.code not in (0, None) else 0
        output = capsys.readouterr()
        assert rc == expected, f"{line}\n{output.out}\n{output.err}"
