"""The engine killed at a chosen point, the way ``systemctl kill -s KILL zds-api`` kills
it, and a fresh engine started on what it left.

A crash point is a host call (any method of any adapter the engine is given) or a point
between the steps of a host command the fakes model as several (``on_step``: a ``zfs
create`` that created and did not mount, a target half-written to configfs, an export
file written and not yet taken). :class:`Killer` counts them across every adapter and,
armed with N, raises :class:`Killed` at the Nth: a ``BaseException`` the engine cannot
catch (it catches ``Exception``), and from then on every host call raises it too, since
a dead process calls nothing (so ``finally:`` blocks that reach for the host change
nothing either). The fakes keep the state reached so far, SQLite keeps what was
committed; :func:`restart` starts a new :class:`Engine` on both, as systemd restarts the
API.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from appliance.engine import Engine
from appliance.fake_hosts import FakeHosts
from appliance.host.factory import HostAdapters, ProbeHosts
from appliance.host.hooks import HookHost
from appliance.host.lio import LioHost
from appliance.host.local import LocalHost
from appliance.host.nfs_server import GaneshaHost
from appliance.host.nvmet import NvmetHost
from appliance.host.ssh import SshHost
from appliance.host.vsphere import VsphereConnector
from appliance.host.zfs import ZfsHost
from appliance.host.zfs_send import ZfsSendHost
from appliance.jobs import Job
from appliance.settings import Settings
from appliance.store import Store


class Killed(BaseException):
    """The API process died here (SIGKILL): nothing in the engine may catch it."""


class Killer:
    """Counts crash points across every adapter; armed with N, kills at the Nth."""

    def __init__(self) -> None:
        self.at: int | None = None
        self.count = 0
        self.fired: str | None = None  # where it killed
        self._lock = threading.Lock()

    def arm(self, n: int) -> None:
        self.at, self.count, self.fired = n, 0, None

    def disarm(self) -> None:
        self.at = None

    def point(self, what: str) -> None:
        with self._lock:
            if self.fired is not None:
                raise Killed(f"the process is dead (killed at {self.fired}): {what}")
            if self.at is None:
                return
            self.count += 1
            if self.count >= self.at:
                self.fired = f"#{self.count} {what}"
                raise Killed(self.fired)


class Counted:
    """An adapter whose every method call is a crash point first."""

    def __init__(self, target: object, killer: Killer, name: str) -> None:
        self._target = target
        self._killer = killer
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._target, attr)
        if attr.startswith("_") or not callable(value):
            return value
        killer, name = self._killer, self._name

        def call(*args: Any, **kwargs: Any) -> Any:
            killer.point(f"{name}.{attr}")
            return value(*args, **kwargs)

        return call


def killable(hosts: FakeHosts, killer: Killer) -> HostAdapters:
    """``hosts``' adapters with every call and every modelled step a crash point."""
    hosts.zfs.on_step = killer.point
    hosts.lio.on_step = killer.point
    hosts.ganesha.on_step = killer.point
    if hosts.zfs_send is not None:
        hosts.zfs_send.on_step = killer.point
    raw = hosts.adapters()

    def wrap(adapter: object, name: str) -> Any:
        return None if adapter is None else Counted(adapter, killer, name)

    return HostAdapters(
        zfs=cast(ZfsHost, wrap(raw.zfs, "zfs")),
        lio=cast(LioHost, wrap(raw.lio, "lio")),
        ganesha=cast(GaneshaHost, wrap(raw.ganesha, "ganesha")),
        local=cast(LocalHost, wrap(raw.local, "local")),
        probes=cast(ProbeHosts, raw.probes),
        ssh=cast(SshHost, wrap(raw.ssh, "ssh")),
        zfs_send=cast(ZfsSendHost, wrap(raw.zfs_send, "zfs_send")),
        vsphere=cast(VsphereConnector, wrap(raw.vsphere, "vsphere")),
        hooks=cast(HookHost, wrap(raw.hooks, "hooks")),
        iostats=raw.iostats,
        nvmet=cast(NvmetHost, wrap(raw.nvmet, "nvmet")),
    )


def unhook(hosts: FakeHosts) -> None:
    """The fakes as a restarted engine finds them: nobody counting their steps."""
    hosts.zfs.on_step = None
    hosts.lio.on_step = None
    hosts.ganesha.on_step = None
    if hosts.zfs_send is not None:
        hosts.zfs_send.on_step = None


@dataclass
class Outcome:
    """What one run of an operation armed at a crash point came to."""

    killed: str | None  # where (None: the operation finished before the Nth point)
    result: object = None
    error: BaseException | None = None  # an engine error the operation raised


def run_killable(engine: Engine, killer: Killer, operation: Callable[[], object],
                 job_wait: float = 10.0) -> Outcome:
    """Runs ``operation`` (the engine's call, as the API would make it); a job it returns
    is waited for, its thread dying with the process."""
    try:
        result = operation()
    except Killed:
        return Outcome(killer.fired)
    except Exception as exc:  # refused or failed before or without a kill: a real answer
        return Outcome(killer.fired, error=exc)
    if isinstance(result, Job):
        deadline = time.monotonic() + job_wait
        while time.monotonic() < deadline:
            job = engine.jobs.get(result.id)
            if job.done or (killer.fired is not None
                            and result.id not in engine.jobs._contexts):
                break
            time.sleep(0.002)
        else:
            raise AssertionError(f"job {result.id} neither finished nor died")
    return Outcome(killer.fired, result)


def die(engine: Engine) -> None:
    """What a SIGKILL leaves of the engine: its threads stop taking work, its store is
    closed (every commit is on disk); nothing is marked interrupted, nothing cleaned."""
    engine.jobs._pool.shutdown(wait=False, cancel_futures=True)
    engine.jobs._long.shutdown(wait=False, cancel_futures=True)
    engine.store.close()


def restart(settings: Settings, hosts: FakeHosts) -> Engine:
    """A new API process on the same SQLite file and the same host: started as the
    service starts it (jobs recovered, pools adopted, interrupted work finished, every
    export and LUN reconciled)."""
    unhook(hosts)
    engine = Engine.create(settings, hosts.adapters(), Store(settings.db_path))
    engine.start(daemon_wait=0.0)
    return engine


def fresh_settings(state_dir: Path) -> Settings:
    return Settings().with_state_dir(state_dir)
