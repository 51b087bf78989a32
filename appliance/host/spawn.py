"""Long-running child processes that must be cancellable (fio, an iperf3 server).

:class:`appliance.host.run.Runner` runs a command to completion; a probe must also be
stoppable half-way, by PID, from another thread. A :class:`Spawner` starts a process and
hands back a :class:`Process` to wait on or signal. Argv lists only, never a shell.
:class:`PopenSpawner` is the real one; :class:`FakeSpawner` (unit tests) records argv and
completes each process from a script, optionally running a callback that plays the
process's side effects (e.g. writing fio's output file).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from appliance.errors import Unavailable
from appliance.host.run import CommandResult


class Process(Protocol):
    @property
    def pid(self) -> int: ...

    def wait(self, timeout: float | None = None) -> CommandResult:
        """Waits for exit; raises ``Unavailable`` if it is still running after ``timeout``."""

    def poll(self) -> int | None: ...

    def send_signal(self, sig: int) -> None:
        """Signals the process (its whole process group for PopenSpawner)."""


class Spawner(Protocol):
    def start(self, argv: Sequence[str], *, cwd: str | None = None) -> Process: ...


class _PopenProcess:
    def __init__(self, argv: tuple[str, ...], proc: subprocess.Popen[str]) -> None:
        self._argv = argv
        self._proc = proc
        self._lock = threading.Lock()
        self._result: CommandResult | None = None

    @property
    def pid(self) -> int:
        return self._proc.pid

    def wait(self, timeout: float | None = None) -> CommandResult:
        with self._lock:
            if self._result is None:
                try:
                    out, err = self._proc.communicate(timeout=timeout)
                except subprocess.TimeoutExpired as exc:
                    raise Unavailable(
                        f"{self._argv[0]} (pid {self.pid}) still running after {timeout} s"
                    ) from exc
                self._result = CommandResult(self._argv, self._proc.returncode, out, err)
            return self._result

    def poll(self) -> int | None:
        return self._proc.poll()

    def send_signal(self, sig: int) -> None:
        if self._proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, sig)


class PopenSpawner:
    """Starts each process in its own process group so a cancel reaches its children."""

    def start(self, argv: Sequence[str], *, cwd: str | None = None) -> Process:
        args = tuple(str(a) for a in argv)
        try:
            proc = subprocess.Popen(
                args, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True, start_new_session=True,
            )
        except FileNotFoundError as exc:
            raise Unavailable(f"{args[0]} is not installed on this host") from exc
        return _PopenProcess(args, proc)


@dataclass
class FakeProcess:
    argv: tuple[str, ...]
    result: CommandResult
    pid: int
    signals: list[int] = field(default_factory=list)
    _done: threading.Event = field(default_factory=threading.Event)
    block: bool = False  # when True, wait() blocks until a signal arrives

    def wait(self, timeout: float | None = None) -> CommandResult:
        if self.block and not self._done.wait(timeout):
            raise Unavailable(f"{self.argv[0]} (pid {self.pid}) still running after {timeout} s")
        return self.result

    def poll(self) -> int | None:
        return None if self.block and not self._done.is_set() else self.result.returncode

    def send_signal(self, sig: int) -> None:
        self.signals.append(sig)
        if sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
            self.result = CommandResult(self.argv, -sig, self.result.stdout, self.result.stderr)
            self._done.set()


SideEffect = Callable[[tuple[str, ...]], CommandResult | None]


@dataclass
class FakeSpawner:
    """Records argv; each start runs ``effect`` (if any) to produce the result."""

    effect: SideEffect | None = None
    block: bool = False
    calls: list[tuple[str, ...]] = field(default_factory=list)
    processes: list[FakeProcess] = field(default_factory=list)

    def start(self, argv: Sequence[str], *, cwd: str | None = None) -> Process:
        args = tuple(str(a) for a in argv)
        self.calls.append(args)
        result = (self.effect(args) if self.effect else None) or CommandResult(args, 0, "", "")
        proc = FakeProcess(args, result, pid=4000 + len(self.calls), block=self.block)
        self.processes.append(proc)
        return proc
