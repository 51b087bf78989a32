"""Pre/post hook commands of snapshot policies, run through the Runner (no shell).

A hook is an argv list whose program lives in the hooks directory (default
``/etc/zds/hooks``, root-owned): an API token can choose which of the installed hooks a
policy runs and with which arguments, but cannot make the appliance run an arbitrary
program. The program is given by its file name (``freeze-db``) or its full path inside
that directory. Its output is kept (the last 4 KiB of each stream) for the job.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from appliance.errors import InvalidInput, NotFound, Unavailable, ZdsError
from appliance.host.run import Runner

KEEP_OUTPUT = 4096
MAX_ARGS = 64
MAX_ARG_LENGTH = 1024
ARG = r"[^\x00-\x1f\x7f]*"  # no control characters
_ARG = re.compile(ARG)
PROGRAM = r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}"  # a program's file name in the hooks directory
_PROGRAM = re.compile(PROGRAM)


@dataclass(frozen=True)
class HookResult:
    argv: tuple[str, ...]
    returncode: int | None  # None: it did not finish (timeout) or could not start
    stdout: str
    stderr: str
    seconds: float
    error: str | None = None  # why it did not finish

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def summary(self) -> str:
        if self.error:
            return self.error
        return f"exit {self.returncode}" + (f": {self.stderr.strip()[-200:]}"
                                            if self.returncode and self.stderr.strip()
                                            else "")


class HookHost(Protocol):
    def check(self, argv: Sequence[str]) -> tuple[str, ...]:
        """The argv as it will run (program resolved in the hooks directory), or
        InvalidInput saying what is wrong; runs nothing."""

    def run(self, argv: Sequence[str], timeout: float,
            env: Mapping[str, str]) -> HookResult:
        """Runs a checked hook; never raises for the hook's own failure or timeout."""


def _tail(text: str) -> str:
    return text[-KEEP_OUTPUT:]


def check_args(argv: Sequence[str]) -> None:
    if not argv or len(argv) > MAX_ARGS:
        raise InvalidInput("a hook is a list of 1-64 strings: the program and its arguments")
    for a in argv:
        if not isinstance(a, str) or not _ARG.fullmatch(a) or len(a) > MAX_ARG_LENGTH:
            raise InvalidInput(f"hook argument {a!r}: up to 1024 characters, no control "
                               "characters")


class Hooks:
    """:class:`HookHost` on this machine."""

    def __init__(self, runner: Runner, hooks_dir: Path) -> None:
        self.runner = runner
        self.hooks_dir = hooks_dir

    def check(self, argv: Sequence[str]) -> tuple[str, ...]:
        check_args(argv)
        prog = argv[0]
        base = self.hooks_dir.resolve()
        path = Path(prog) if prog.startswith("/") else base / prog
        if not prog.startswith("/") and not _PROGRAM.fullmatch(prog):
            raise InvalidInput(f"hook program {prog!r}: a file name in {base} or its full "
                               "path")
        real = path.resolve()
        if real.parent != base:
            raise NotFound(f"hook program {prog!r} is not in the hooks directory {base} "
                           "(only programs installed there may run)")
        if not real.is_file() or not os.access(real, os.X_OK):
            raise NotFound(f"hook program {real} does not exist or is not executable")
        return (str(real), *argv[1:])

    def run(self, argv: Sequence[str], timeout: float,
            env: Mapping[str, str]) -> HookResult:
        t0 = time.monotonic()
        try:
            full = self.check(argv)
        except (InvalidInput, NotFound) as exc:
            return HookResult(tuple(argv), None, "", "", 0.0, exc.message)
        environment = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", **env}
        try:
            res = self.runner.run(full, timeout=timeout, check=False, env=environment)
        except Unavailable:
            return HookResult(full, None, "", "", round(time.monotonic() - t0, 2),
                              f"timed out after {timeout:g} s")
        except ZdsError as exc:
            return HookResult(full, None, "", "", round(time.monotonic() - t0, 2),
                              exc.message)
        return HookResult(full, res.returncode, _tail(res.stdout), _tail(res.stderr),
                          round(time.monotonic() - t0, 2))


@dataclass
class FakeHooks:
    """In-memory :class:`HookHost`: ``programs`` maps a program name to what it does
    (returncode, stdout, stderr, seconds it takes); calls are recorded."""

    hooks_dir: Path = Path("/etc/zds/hooks")
    programs: dict[str, tuple[int, str, str, float]] = field(default_factory=dict)
    calls: list[tuple[tuple[str, ...], dict[str, str]]] = field(default_factory=list)

    def check(self, argv: Sequence[str]) -> tuple[str, ...]:
        check_args(argv)
        prog = argv[0]
        name = prog
        if prog.startswith("/"):  # as Hooks resolves it: .. taken out
            path = Path(os.path.normpath(prog))
            if path.parent != self.hooks_dir:
                raise NotFound(f"hook program {prog!r} is not in the hooks directory "
                               f"{self.hooks_dir} (only programs installed there may run)")
            name = path.name
        if not _PROGRAM.fullmatch(name):
            raise InvalidInput(f"hook program {prog!r}: a file name in {self.hooks_dir} or "
                               "its full path")
        if name not in self.programs:
            raise NotFound(f"hook program {self.hooks_dir / name} does not exist or is "
                           "not executable")
        return (str(self.hooks_dir / name), *argv[1:])

    def run(self, argv: Sequence[str], timeout: float,
            env: Mapping[str, str]) -> HookResult:
        try:
            full = self.check(argv)
        except (InvalidInput, NotFound) as exc:
            return HookResult(tuple(argv), None, "", "", 0.0, exc.message)
        self.calls.append((full, dict(env)))
        rc, out, err, seconds = self.programs[Path(full[0]).name]
        if seconds > timeout:
            return HookResult(full, None, "", "", timeout, f"timed out after {timeout:g} s")
        return HookResult(full, rc, _tail(out), _tail(err), seconds)
