"""Every subprocess ZDS starts goes through a :class:`Runner`.

Commands are argv lists, never shell strings, so no text reaches a shell. The real
runner is :class:`SubprocessRunner`; unit tests use :class:`RecordingRunner`, which
records each argv and answers from a script of canned results.
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from appliance.errors import HostCommandFailed, Unavailable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class CommandError(HostCommandFailed):
    """A command exited non-zero. Adapters catch it and raise a clearer engine error."""

    def __init__(self, result: CommandResult) -> None:
        msg = result.stderr.strip() or result.stdout.strip() or f"exit {result.returncode}"
        super().__init__(f"{result.argv[0]} failed: {msg}", detail={"argv": list(result.argv)})
        self.result = result


class Runner(Protocol):
    def run(
        self,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float = 120.0,
        check: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult: ...


class SubprocessRunner:
    """Runs commands for real: no shell, captured text output, a timeout on each."""

    def run(
        self,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float = 120.0,
        check: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        args = tuple(str(a) for a in argv)
        started = time.monotonic()
        try:
            proc = subprocess.run(
                args,
                input=input,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                env=dict(env) if env is not None else None,
            )
        except FileNotFoundError as exc:
            raise Unavailable(f"{args[0]} is not installed on this host") from exc
        except subprocess.TimeoutExpired as exc:
            raise Unavailable(f"{args[0]} did not answer within {timeout:.0f} s") from exc
        result = CommandResult(args, proc.returncode, proc.stdout, proc.stderr)
        log.debug("ran %s -> %d in %.3fs", args, proc.returncode, time.monotonic() - started)
        if check and not result.ok:
            raise CommandError(result)
        return result


Responder = Callable[[tuple[str, ...], str | None], CommandResult | None]


@dataclass
class RecordingRunner:
    """Records argv of every call; answers from ``responders`` (first non-None wins).

    With no matching responder a call succeeds with empty output.
    """

    responders: list[Responder] = field(default_factory=list)
    calls: list[tuple[str, ...]] = field(default_factory=list)

    def on(self, prefix: Sequence[str], stdout: str = "", returncode: int = 0,
           stderr: str = "") -> None:
        """Answer every call whose argv starts with ``prefix``."""
        want = tuple(prefix)

        def responder(argv: tuple[str, ...], _input: str | None) -> CommandResult | None:
            if argv[: len(want)] == want:
                return CommandResult(argv, returncode, stdout, stderr)
            return None

        self.responders.insert(0, responder)

    def run(
        self,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float = 120.0,
        check: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        args = tuple(str(a) for a in argv)
        self.calls.append(args)
        for responder in self.responders:
            result = responder(args, input)
            if result is not None:
                break
        else:
            result = CommandResult(args, 0, "", "")
        if check and not result.ok:
            raise CommandError(result)
        return result
