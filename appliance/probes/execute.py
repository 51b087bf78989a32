"""Running one probe: profile + target -> fio (or iperf3 / rtt) -> a ProbeResult.

This is the part shared by every target: the service (appliance/probes/service.py)
prepares the target (scratch dataset or zvol, NFS mount, iSCSI login) and hands a path
here; ``zds probe run`` in client mode calls it directly with a local path. Host work goes
through the adapters given to :class:`ProbeExecutor`, so unit tests run it with fakes.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from appliance.errors import InvalidInput, ZdsError
from appliance.host.fio import FioHost, log_prefix
from appliance.host.net import EchoServer, Iperf3, tcp_rtt
from appliance.host.sysstat import CpuSampler, SysStats, arc_delta
from appliance.probes import fioparse, jobfile, profiles, semantics
from appliance.probes.model import (
    ProbeResult,
    Status,
    StepResult,
    group_metrics,
    rtt_metrics,
    summarize,
)
from appliance.probes.profiles import Profile, Step
from appliance.probes.semantics import Semantics
from appliance.transports.registry import probe_targets


def target_kinds() -> tuple[str, ...]:
    """local: on the appliance, straight on the scratch; client: `zds probe run`
    elsewhere; the others: through a transport, over loopback (appliance.probes.attach)."""
    return ("local", *probe_targets(), "client")


# Sets the appliance side of one phase's semantics (ZFS properties of the probe's
# scratch) and returns what it set; None in client mode (the appliance is elsewhere).
PhaseSetup = Callable[[Semantics], Mapping[str, str]]


class CancelToken:
    """Set from another thread (API cancel); callbacks run once, at cancel time."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self.interrupted = False  # cancelled because the API stopped, not by a user

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self, interrupted: bool = False) -> None:
        with self._lock:
            if self._event.is_set():
                return
            self.interrupted = interrupted
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            cb()

    def on_cancel(self, cb: Callable[[], None]) -> None:
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(cb)
                return
        cb()


@dataclass(frozen=True)
class ProbeTarget:
    """Where a probe runs. fio profiles need ``path``; rtt/net need ``host``.

    ``layer`` is what fio does its I/O on (appliance.probes.semantics.Layer): ``zfs`` for
    a dataset's mountpoint, ``nfs``, ``block``, ``fs``; '' = ``block`` for a device, else
    ``fs`` (the attachment of a transport says which).
    """

    kind: str  # one of target_kinds()
    datastore: str
    path: str = ""
    is_device: bool = False
    host: str = "127.0.0.1"
    details: Mapping[str, Any] = field(default_factory=dict)  # mount source, LUN, client host
    layer: str = ""

    def __post_init__(self) -> None:
        if self.kind not in (kinds := target_kinds()):
            raise InvalidInput(f"target: expected one of {', '.join(kinds)}")
        if self.layer and self.layer not in semantics.LAYERS:
            raise InvalidInput(f"layer: expected one of {', '.join(semantics.LAYERS)}")

    @property
    def io_layer(self) -> str:
        if self.layer:
            return self.layer
        return "block" if self.is_device else "fs"

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "datastore": self.datastore, "path": self.path,
                "is_device": self.is_device, "host": self.host, "layer": self.io_layer,
                **dict(self.details)}


@dataclass(frozen=True)
class Phase:
    """Consecutive steps with the same semantics: one fio run."""

    steps: list[Step]
    semantics: Semantics


def phases(profile: Profile, params: Mapping[str, Any], base: Semantics) -> list[Phase]:
    """The plan cut where a step's own semantics (Step.io) change."""
    out: list[Phase] = []
    for step in profile.plan(dict(params)):
        sem = semantics.step_semantics(base, step.io)
        if out and out[-1].semantics == sem:
            out[-1].steps.append(step)
        else:
            out.append(Phase([step], sem))
    return out


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def new_id() -> str:
    return uuid.uuid4().hex[:12]


def estimate_seconds(profile: Profile, params: Mapping[str, Any]) -> float:
    """A generous upper bound for the run (the fio wait timeout)."""
    steps = len(profile.plan(dict(params)))
    per = float(params.get("runtime", 0)) + float(params.get("ramp", 0))
    if profile.kind == "net":
        per = float(params.get("seconds", 3)) + 5
    if profile.kind == "rtt":
        per = float(params.get("samples", 100)) * 0.05
    if profile.name == "size-sweep":
        per = 120.0
    return steps * (per + 30.0) + 120.0


class ProbeExecutor:
    def __init__(
        self,
        fio: FioHost,
        workroot: str,
        stats: SysStats | None = None,
        iperf: Iperf3 | None = None,
        sync: Callable[[str], float] | None = None,
        clock: Callable[[], str] = now_iso,
    ) -> None:
        self.fio = fio
        self.workroot = Path(workroot)
        self.stats = stats
        self.iperf = iperf
        self.sync = sync
        self.clock = clock

    def run(
        self,
        profile_name: str,
        overrides: Mapping[str, object] | None,
        target: ProbeTarget,
        *,
        settings: Mapping[str, Any] | None = None,
        cancel: CancelToken | None = None,
        result_id: str | None = None,
        protocol: str = "",
        setup: PhaseSetup | None = None,
    ) -> ProbeResult:
        """Runs the profile on ``target``. ``protocol`` (the datastore's) resolves
        ``writes=auto``; ``setup`` makes each phase's semantics hold on
        the appliance (see appliance.probes.semantics)."""
        profile = profiles.get(profile_name)
        params = profile.resolve(overrides)
        result = ProbeResult(
            id=result_id or new_id(), profile=profile.name, params=dict(params),
            target=target.describe(), settings=dict(settings or {}),
            started_at=self.clock(), ended_at="", status="ok",
        )
        cancel = cancel or CancelToken()
        sampler = CpuSampler(self.stats) if self.stats else None
        arc_before = self.stats.arcstats() if self.stats else None
        if sampler:
            sampler.start()
        try:
            if profile.kind == "fio":
                self._run_fio(profile, params, target, result, cancel, protocol, setup)
            elif profile.kind == "net":
                self._run_net(profile, params, target, result, cancel)
            else:
                self._run_rtt(profile, params, target, result)
        except ZdsError as exc:
            result.status = "failed"
            result.error = exc.message
        finally:
            if sampler:
                mean = sampler.stop()
                pcts = [p for _t, p in sampler.samples]
                result.cpu = {"mean_pct": mean, "max_pct": max(pcts) if pcts else mean,
                              "cpus": self._cpus(),
                              "series": [[t, p] for t, p in sampler.samples]}
            delta = arc_delta(arc_before, self.stats.arcstats() if self.stats else None)
            if delta is not None:
                result.arc = {"hits": delta.hits, "misses": delta.misses,
                              "hit_ratio": delta.hit_ratio}
            result.ended_at = self.clock()
        if cancel.cancelled and result.status == "ok":
            result.status = "cancelled"
        result.summary = summarize(result.steps, profile.summary_rule)
        return result

    def _cpus(self) -> int | None:
        """The CPUs the busy % is spread over (CPU time per I/O needs it)."""
        try:
            return self.stats.cpus() if self.stats else None
        except (OSError, ValueError):
            return None

    # ------------------------------------------------------------------ fio
    def _run_fio(self, profile: Profile, params: dict[str, Any], target: ProbeTarget,
                 result: ProbeResult, cancel: CancelToken, protocol: str,
                 setup: PhaseSetup | None) -> None:
        if not target.path:
            raise InvalidInput(f"profile {profile.name} needs a target path or device")
        layer = target.io_layer
        plan = phases(profile, params, semantics.requested(params, protocol))
        # asked for by the caller; size-sweep's own disk pass still runs in client mode
        # (its page cache dropped by fio's invalidate=1), recorded as not from disk below
        if setup is None and params.get("reads") == "disk":
            raise InvalidInput("reads=disk needs the appliance to keep data out of its ARC "
                               "(primarycache=metadata on the probe's scratch): run it on "
                               "the appliance, target local, nfs or iscsi")
        with contextlib.suppress(ZdsError):
            result.extra["fio_version"] = self.fio.version()
        texts: list[str] = []
        records: list[dict[str, Any]] = []
        try:
            for n, ph in enumerate(plan):
                if cancel.cancelled:
                    result.status = "cancelled"
                    return
                sem = semantics.on_layer(ph.semantics, layer)
                io = semantics.fio_io(sem, layer)
                record: dict[str, Any] = {"steps": [s.name for s in ph.steps],
                                          "requested": sem.as_dict(), "fio": dict(io.options())}
                if setup is not None:
                    props = dict(setup(ph.semantics))
                    eff, notes = semantics.effective(sem, props)
                    record.update(zfs=props, effective=eff.as_dict(), notes=notes)
                else:
                    notes = ["client mode: the appliance's side (ARC, sync) is as the "
                             "datastore's ZFS properties make it; an NFS client's direct "
                             "writes are stable whatever writes= asks"]
                    eff = sem
                    if sem.reads == "disk":
                        eff = replace(sem, reads="cache")
                        notes.append("no appliance side to set: this pass drops the "
                                     "client's page cache, but the appliance's ARC may "
                                     "still serve its reads")
                    record.update(effective=eff.as_dict(), notes=notes)
                records.append(record)
                workdir = self.workroot / (result.id if n == 0 else f"{result.id}-{n}")
                text = jobfile.render(profile, params,
                                      jobfile.FioTarget(target.path, target.is_device),
                                      log_prefix=log_prefix(str(workdir)), io=io,
                                      steps=ph.steps)
                texts.append(text)
                if not self._fio_phase(profile, params, text, workdir, ph.steps, result,
                                       cancel):
                    return
        finally:
            result.extra["jobfile"] = "\n".join(texts)
            result.semantics = semantics.record(layer, records)
        if profile.measure_drain and self.sync and result.status == "ok" and not target.is_device:
            result.extra["drain_s"] = round(self.sync(target.path), 3)

    def _fio_phase(self, profile: Profile, params: dict[str, Any], text: str, workdir: Path,
                   steps: list[Step], result: ProbeResult, cancel: CancelToken) -> bool:
        """One fio run; False when the probe must stop (failed or cancelled)."""
        run = self.fio.start(text, str(workdir))
        result.extra["pid"] = run.pid
        cancel.on_cancel(run.cancel)
        out = run.wait(timeout=estimate_seconds(profile, params))
        if out.cancelled or cancel.cancelled:
            result.status = "cancelled"
        elif out.returncode != 0:
            result.status = "failed"
            result.error = (out.stderr.strip() or f"fio exited {out.returncode}")[-2000:]
        if out.json_text.strip():
            self._fill_steps(params, out.json_text, out.logs, result, steps)
        elif result.status == "ok":
            result.status = "failed"
            result.error = "fio wrote no results"
        return result.status == "ok"

    def _fill_steps(self, params: dict[str, Any], json_text: str, logs: Mapping[str, str],
                    result: ProbeResult, steps: list[Step]) -> None:
        report = fioparse.parse_json(json_text)
        runtime = int(params["runtime"]) if "runtime" in params else None
        for step in steps:
            g = report.group(step.name)
            if g is None:  # not reached (cancelled) -> no step
                continue
            if g.error and result.status == "ok":
                result.status = "failed"
                result.error = f"fio job {step.name} failed with error {g.error}"
            result.steps.append(StepResult(
                name=step.name, label=step.label, point=dict(step.point),
                metrics=group_metrics(g),
                series=StepResult.series_from(fioparse.series(logs, step.name, runtime)),
            ))

    # ------------------------------------------------------------------ network
    def _run_net(self, profile: Profile, params: dict[str, Any], target: ProbeTarget,
                 result: ProbeResult, cancel: CancelToken) -> None:
        if self.iperf is None:
            raise InvalidInput("net-throughput needs iperf3 on this host")
        port = int(params["port"])
        for step in profile.plan(params):
            if cancel.cancelled:
                break
            server = None
            if target.kind == "local":
                server = self.iperf.server_once("127.0.0.1", port)
            try:
                r = self.iperf.client(target.host if target.kind != "local" else "127.0.0.1",
                                      port, int(params["seconds"]), int(str(step.point["streams"])))
            finally:
                if server is not None:
                    try:
                        server.wait(timeout=10)
                    except ZdsError:
                        server.send_signal(signal.SIGTERM)
                        with contextlib.suppress(ZdsError):
                            server.wait(timeout=5)
            result.extra["iperf_version"] = r.version
            result.steps.append(StepResult(
                name=step.name, label=step.label, point=dict(step.point),
                metrics={"gbps": round(r.gbps, 4), "mbps": round(r.gbps * 1000 / 8, 3),
                         "sent_gbps": round(r.sent_gbps, 4), "seconds": r.seconds}))

    def _run_rtt(self, profile: Profile, params: dict[str, Any], target: ProbeTarget,
                 result: ProbeResult) -> None:
        mode = str(params["mode"])
        echo = None
        host, port = target.host, int(params["port"])
        if target.kind == "local":
            echo = EchoServer("127.0.0.1")  # the loopback baseline, for both modes
            host, port = "127.0.0.1", echo.port
        try:
            samples = tcp_rtt(host, port, int(params["samples"]), mode, int(params["message"]))
        finally:
            if echo:
                echo.close()
        step = profile.plan(params)[0]
        result.steps.append(StepResult(
            name=step.name, label=step.label, point=dict(step.point),
            metrics=rtt_metrics(samples),
            series=[{"t": float(i + 1), "iops": 0.0, "lat_ms": round(v, 6)}
                    for i, v in enumerate(samples)]))


def result_status(value: str) -> Status:
    if value not in ("ok", "failed", "cancelled"):
        raise InvalidInput(f"status: expected ok, failed or cancelled, got {value!r}")
    return value  # type: ignore[return-value]
