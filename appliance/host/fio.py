"""fio adapter: writes a job file into a work directory, runs fio, collects its output.

fio runs as ``fio --output-format=json+ --output=WORKDIR/fio.json WORKDIR/job.fio`` (json+
adds the completion-latency histogram ``clat_ns.bins`` that the parser merges across jobs
and directions); the job file's ``write_iops_log``/``write_lat_log`` lines (prefix
:func:`log_prefix`) give the per-second time series. A started run can be cancelled from
another thread: SIGINT first (fio stops and still writes its JSON for the time run),
SIGKILL after a grace period.

:class:`Fio` is real; :class:`FakeFio` (unit tests) records job files and answers with
captured output.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from appliance.errors import Unavailable
from appliance.host.run import Runner
from appliance.host.spawn import Process, Spawner

JOB_NAME = "job.fio"
OUTPUT_NAME = "fio.json"
LOG_STEM = "log"


def log_prefix(workdir: str) -> str:
    return str(Path(workdir) / LOG_STEM)


@dataclass(frozen=True)
class FioOutput:
    returncode: int
    json_text: str  # '' when fio wrote nothing
    logs: dict[str, str]  # log file name (no directory) -> text
    stderr: str
    cancelled: bool


class FioRun(Protocol):
    @property
    def pid(self) -> int: ...

    def wait(self, timeout: float | None = None) -> FioOutput: ...

    def cancel(self, grace: float = 10.0) -> None: ...


class FioHost(Protocol):
    def version(self) -> str:
        """e.g. 'fio-3.33'; raises Unavailable when fio is not installed."""

    def start(self, jobfile: str, workdir: str) -> FioRun:
        """Writes ``jobfile`` to WORKDIR/job.fio and starts fio on it."""


def _collect(workdir: Path) -> tuple[str, dict[str, str]]:
    out = workdir / OUTPUT_NAME
    text = out.read_text(errors="replace") if out.exists() else ""
    logs = {p.name: p.read_text(errors="replace")
            for p in sorted(workdir.glob(f"{LOG_STEM}.*.log"))}
    return text, logs


class _RealRun:
    def __init__(self, proc: Process, workdir: Path) -> None:
        self._proc = proc
        self._workdir = workdir
        self._cancelled = threading.Event()

    @property
    def pid(self) -> int:
        return self._proc.pid

    def wait(self, timeout: float | None = None) -> FioOutput:
        """Waits, reads the JSON and logs, then removes the work directory."""
        res = self._proc.wait(timeout)
        text, logs = _collect(self._workdir)
        shutil.rmtree(self._workdir, ignore_errors=True)
        return FioOutput(res.returncode, text, logs, res.stderr, self._cancelled.is_set())

    def cancel(self, grace: float = 10.0) -> None:
        self._cancelled.set()
        self._proc.send_signal(signal.SIGINT)
        try:
            self._proc.wait(grace)
        except Unavailable:
            self._proc.send_signal(signal.SIGKILL)


class Fio:
    def __init__(self, runner: Runner, spawner: Spawner, binary: str = "fio") -> None:
        self._runner = runner
        self._spawner = spawner
        self._binary = binary
        self._version: str | None = None

    def version(self) -> str:
        """``fio --version`` ("fio-3.33"), asked once: each probe records it, and under
        emulation asking costs 0.4 s a probe. (An upgrade of fio restarts nothing, so a
        running API keeps reporting the old version until it restarts.)"""
        if self._version is None:
            self._version = self._runner.run([self._binary, "--version"],
                                             timeout=10).stdout.strip()
        return self._version

    def start(self, jobfile: str, workdir: str) -> FioRun:
        wd = Path(workdir)
        wd.mkdir(parents=True, exist_ok=True)
        job = wd / JOB_NAME
        job.write_text(jobfile)
        os.chmod(job, 0o600)
        argv = [self._binary, "--output-format=json+", f"--output={wd / OUTPUT_NAME}", str(job)]
        return _RealRun(self._spawner.start(argv, cwd=str(wd)), wd)


@dataclass
class FakeRun:
    output: FioOutput
    pid: int = 4242
    cancels: int = 0
    _done: threading.Event = field(default_factory=threading.Event)
    block: bool = False

    def wait(self, timeout: float | None = None) -> FioOutput:
        if self.block and not self._done.wait(timeout):
            raise Unavailable("fake fio still running")
        return self.output

    def cancel(self, grace: float = 10.0) -> None:
        self.cancels += 1
        o = self.output
        self.output = FioOutput(-int(signal.SIGINT), o.json_text, o.logs, o.stderr, True)
        self._done.set()


class NoFio:
    """The fio of an engine made without probe tools (``HostAdapters.probes`` None):
    every probe is refused as unavailable, rather than a real fio started behind the
    back of a rig of fakes."""

    def version(self) -> str:
        raise Unavailable("probes are not set up here (no fio among the host adapters)")

    def start(self, jobfile: str, workdir: str) -> FioRun:
        raise Unavailable("probes are not set up here (no fio among the host adapters)")


@dataclass
class FakeFio:
    """Answers every start with ``json_text``/``logs``; records job files and work dirs."""

    json_text: str = ""
    logs: dict[str, str] = field(default_factory=dict)
    returncode: int = 0
    stderr: str = ""
    block: bool = False
    fio_version: str = "fio-3.33"
    jobs: list[tuple[str, str]] = field(default_factory=list)
    runs: list[FakeRun] = field(default_factory=list)

    def version(self) -> str:
        return self.fio_version

    def start(self, jobfile: str, workdir: str) -> FioRun:
        self.jobs.append((jobfile, workdir))
        run = FakeRun(FioOutput(self.returncode, self.json_text, dict(self.logs), self.stderr,
                                False), pid=4242 + len(self.runs), block=self.block)
        self.runs.append(run)
        return run
