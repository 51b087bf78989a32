"""The probe use cases: validate, run (as a job), record, list, compare, plot, report.

:meth:`ProbeService.submit` checks everything it can first (profile, overrides, datastore,
target, one probe per datastore, free space), then runs the probe as an engine job:
scratch dataset/zvol like the datastore -> (nfs/iscsi: attach over loopback) -> fio ->
result saved -> detach -> scratch destroyed. Results are saved also when the probe fails
or is cancelled, so the record says what happened.

:func:`build` makes the service from the appliance's context and the probe hosts of
appliance.host.factory (real or fake); everything else takes plain callables.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.context import Context
from appliance.errors import Conflict, InvalidInput, NotFound, Unavailable, ZdsError
from appliance.host.factory import ProbeHosts
from appliance.host.localfs import DeviceFs
from appliance.host.zfs import DatasetInfo, ZfsHost
from appliance.jobs import JobCancelled, JobContext, JobManager
from appliance.probes import compare as _compare
from appliance.probes import plots, profiles, protocols, report, semantics
from appliance.probes.attach import Attacher, DatastoreRef, TransportAttach
from appliance.probes.execute import (
    CancelToken,
    ProbeExecutor,
    ProbeTarget,
    new_id,
    now_iso,
    target_kinds,
)
from appliance.probes.model import ProbeResult, StepResult, summarize
from appliance.probes.params import Params
from appliance.probes.profiles import Profile
from appliance.probes.safety import ProbeRegistry, Scratch, ScratchManager, footprint
from appliance.probes.store import ProbeStore, ResultFilter
from appliance.transports.storage import Storage

log = logging.getLogger(__name__)

# Results in one plot or report: each is read, parsed and drawn in the request, and a
# readonly token may ask, so the list is capped (a comparison of more is not readable)
MAX_PLOT_IDS = 20

# ZFS properties recorded with each result (the settings in force)
RECORDED_PROPS = ("recordsize", "volblocksize", "compression", "sync", "logbias", "atime",
                  "xattr", "acltype", "primarycache", "secondarycache", "dedup", "checksum")


@dataclass(frozen=True)
class ProbeRequest:
    profile: str
    datastore: str
    target: str = "local"
    overrides: Mapping[str, Any] = field(default_factory=dict)


# ext4 on a scratch zvol for file-set profiles: room for its metadata and journal
FS_OVERHEAD_FIXED = 96 << 20
FS_OVERHEAD_FRACTION = 16  # 1/16 of the data


@dataclass(frozen=True)
class Planned:
    request: ProbeRequest
    profile: Profile
    params: Params
    ref: DatastoreRef
    need: int  # bytes the probe writes at most
    # a comparison's leg has no datastore: the scratch is made like these properties
    # (the protocol's datastore defaults) and the result records ``settings`` as given
    like: DatasetInfo | None = None
    settings: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class ComparisonRequest:
    """``POST /probes/comparisons``: one profile on one pool through several legs."""

    pool: str
    profile: str
    legs: tuple[str, ...] = ()  # protocols and baselines; () = every one available
    rounds: int = 1
    overrides: Mapping[str, Any] = field(default_factory=dict)


class ProbeService:
    def __init__(
        self,
        store: ProbeStore,
        executor: ProbeExecutor,
        lookup: Callable[[str], DatastoreRef],
        zfs: ZfsHost | None = None,
        attachers: Mapping[str, Attacher] | None = None,
        settings_for: Callable[[DatastoreRef], dict[str, Any]] | None = None,
        targets: Mapping[str, str] | None = None,
        registry: ProbeRegistry | None = None,
        devfs: DeviceFs | None = None,
        mount_root: str = "/run/zds/probes",
        storages: Mapping[str, Storage] | None = None,
    ) -> None:
        self.store = store
        self.executor = executor
        self.lookup = lookup
        self.zfs = zfs
        self.scratch = ScratchManager(zfs) if zfs is not None else None
        self.attachers = dict(attachers or {})
        # protocol -> the target that reaches a datastore of it (a fio probe through
        # another protocol's target would measure a different datastore kind)
        self.targets = dict(targets or {})
        self.settings_for = settings_for or (lambda ref: {})
        self.registry = registry or ProbeRegistry()
        self.devfs = devfs
        self.mount_root = mount_root.rstrip("/")
        # protocol -> the storage its datastores are (a comparison's scratch is made so)
        self.storages = dict(storages or {})
        self._cleaned: set[str] = set()
        # called with (datastore, probe id) after fio ends, before the scratch, its export
        # or LUN go away (the metrics collector takes its last reading of them)
        self.before_cleanup: list[Callable[[str, str], None]] = []

    # ----------------------------------------------------------------- catalogue
    @staticmethod
    def profiles() -> list[profiles.ProfileInfo]:
        return [profiles.info(p) for p in profiles.PROFILES.values()]

    # ----------------------------------------------------------------- running
    def plan(self, req: ProbeRequest) -> Planned:
        """Every check that can be made before anything is created (4xx on failure)."""
        profile = profiles.get(req.profile)
        params = profile.resolve(dict(req.overrides))
        if req.target not in (kinds := target_kinds()) or req.target == "client":
            raise InvalidInput(f"target: expected {', '.join(kinds[:-1])} (client "
                               "results are posted by `zds probe run` on the client)")
        return self._plan(req, profile, params, self.lookup(req.datastore))

    def _plan(self, req: ProbeRequest, profile: Profile, params: Params, ref: DatastoreRef,
              like: DatasetInfo | None = None,
              settings: Mapping[str, Any] | None = None) -> Planned:
        if profile.kind == "fio":
            own = self.targets.get(ref.protocol)
            if req.target != "local" and own is not None and req.target != own:
                raise Conflict(f"datastore {ref.name} is {ref.protocol}: use target "
                                   f"local or {own}")
            if ref.is_volume and profile.needs_directory and self.devfs is None:
                raise Conflict(f"profile {profile.name} needs a file system; datastore "
                                   f"{ref.name} is a zvol (run it on an NFS datastore or "
                                   "from a client on a mounted path)")
            if req.target != "local" and req.target not in self.attachers:
                raise Unavailable(f"target {req.target} is not available on this appliance")
        # a file-set profile on a zvol datastore runs in an ext4 made on the scratch zvol
        # (local) or on the LUN as the initiator sees it (iscsi), as a guest would
        with_fs = ref.is_volume and profile.needs_directory
        need = footprint(profile, params, is_device=ref.is_volume and not with_fs)
        if with_fs and need:
            need += need // FS_OVERHEAD_FRACTION + FS_OVERHEAD_FIXED
        busy = self.registry.busy(ref.name)
        if busy:
            raise Conflict(f"probe {busy} is already running on datastore {ref.name}",
                           detail={"probe": busy})
        if self.scratch is not None and need:
            self.scratch.check_space(ref.pool, need)
        return Planned(req, profile, params, ref, need, like, settings)

    def run(self, req: ProbeRequest, probe_id: str | None = None,
            cancel: CancelToken | None = None) -> ProbeResult:
        """Runs one probe to the end (the job body). Always saves a result."""
        return self._run(self.plan(req), probe_id, cancel)

    def _run(self, planned: Planned, probe_id: str | None = None,
             cancel: CancelToken | None = None) -> ProbeResult:
        req = planned.request
        probe_id = probe_id or new_id()
        cancel = cancel or CancelToken()
        ref = planned.ref
        with self.registry.hold(ref.name, probe_id, cancel):
            self._clean_leftovers(ref.pool)
            scratch: Scratch | None = None
            target: ProbeTarget | None = None
            attacher: Attacher | None = None
            settings = dict(self.settings_for(ref) if planned.settings is None
                            else planned.settings)
            started = now_iso()
            cleanup_errors: list[str] = []
            try:
                if planned.profile.kind == "fio":
                    scratch, target, attacher = self._prepare(planned, probe_id, settings)
                else:
                    target = ProbeTarget(req.target, ref.name, host="127.0.0.1")
                result = self.executor.run(planned.profile.name, dict(req.overrides), target,
                                           settings=settings, cancel=cancel,
                                           result_id=probe_id, protocol=ref.protocol,
                                           setup=self._semantics_setup(scratch))
            except ZdsError as exc:
                result = ProbeResult(
                    id=probe_id, profile=planned.profile.name, params=dict(planned.params),
                    target=(target.describe() if target else
                            {"kind": req.target, "datastore": ref.name}),
                    settings=settings, started_at=started, ended_at=now_iso(),
                    status="cancelled" if cancel.cancelled else "failed", error=exc.message)
            finally:
                for hook in self.before_cleanup:
                    try:
                        hook(ref.name, probe_id)
                    except Exception:
                        log.exception("probe %s: a before-cleanup hook failed", probe_id)
                if target is not None and "fs_mount" in target.details and self.devfs:
                    fs_mount = str(target.details["fs_mount"])
                    try:
                        self.devfs.unmount(fs_mount)
                    except ZdsError as exc:
                        cleanup_errors.append(f"unmount {fs_mount}: {exc.message}")
                if attacher is not None and target is not None:
                    try:
                        attacher.detach(target)
                    except ZdsError as exc:
                        cleanup_errors.append(f"detach: {exc.message}")
                if scratch is not None and self.scratch is not None:
                    try:
                        self.scratch.destroy(scratch)
                    except ZdsError as exc:
                        cleanup_errors.append(f"destroy {scratch.name}: {exc.message}")
            if cleanup_errors:
                result.extra["cleanup_errors"] = cleanup_errors
            if result.status == "cancelled" and cancel.interrupted:
                # as its job says: nobody cancelled it, the API stopped under it
                result.status = "failed"
                result.error = ("interrupted: the API stopped while the probe ran; "
                                "run it again")
            self.store.save(result)
            return result

    def _semantics_setup(self, scratch: Scratch | None
                         ) -> Callable[[semantics.Semantics], dict[str, str]] | None:
        """Sets one phase's semantics on the scratch (the same for every target of a
        datastore, so local and nfs/iscsi compare like with like); None without one."""
        zfs = self.zfs
        if scratch is None or zfs is None:
            return None
        info = zfs.get_dataset(scratch.name)
        own = {k: info.prop(k) for k in ("sync", "primarycache")} if info else {}

        def setup(sem: semantics.Semantics) -> dict[str, str]:
            props = semantics.zfs_props(sem, volume=scratch.is_volume, datastore=own)
            zfs.set_properties(scratch.name, props)
            return props

        return setup

    def _prepare(self, planned: Planned, probe_id: str, settings: dict[str, Any]
                 ) -> tuple[Scratch, ProbeTarget, Attacher | None]:
        if self.scratch is None or self.zfs is None:
            raise Unavailable("ZFS is not available: no scratch dataset can be made")
        ref = planned.ref
        like = planned.like or self.zfs.get_dataset(ref.dataset)
        if like is None:
            raise NotFound(f"dataset {ref.dataset} of datastore {ref.name} is missing")
        scratch = self.scratch.create(ref.pool, ref.name, probe_id, planned.need,
                                      volume=ref.is_volume, like=like)
        info = self.zfs.get_dataset(scratch.name)
        if info is not None:
            settings["scratch"] = {"name": scratch.name, **{
                k: info.prop(k) for k in RECORDED_PROPS if info.prop(k)}}
        attacher: Attacher | None = None
        target: ProbeTarget | None = None
        try:
            kind = planned.request.target
            if kind == "local":
                # straight on the dataset (no client in between) or on the zvol device
                target = ProbeTarget("local", ref.name, scratch.path, scratch.is_volume,
                                     details={"scratch": scratch.name},
                                     layer="block" if scratch.is_volume else "zfs")
            else:
                attacher = self.attachers[kind]
                target = attacher.attach(ref, scratch, probe_id)
            if target.is_device and planned.profile.needs_directory:
                target = self._with_filesystem(target, probe_id)
            return scratch, target, attacher
        except BaseException:
            if attacher is not None and target is not None:
                with contextlib.suppress(ZdsError):
                    attacher.detach(target)
            self.scratch.destroy(scratch)
            raise

    def _with_filesystem(self, target: ProbeTarget, probe_id: str) -> ProbeTarget:
        """The same target seen through a fresh ext4 on its (scratch) block device."""
        if self.devfs is None:
            raise Unavailable("no file system can be made on the scratch device here")
        mountpoint = f"{self.mount_root}/fs-{probe_id}"
        fstype = self.devfs.mount_new_filesystem(target.path, mountpoint)
        return ProbeTarget(target.kind, target.datastore, mountpoint, is_device=False,
                           host=target.host, details={**target.details, "device": target.path,
                                                      "fs": fstype, "fs_mount": mountpoint})

    def _clean_leftovers(self, pool: str) -> None:
        """Once per pool per process: exports, targets and scratch of probes a crash left
        behind (exports/targets first: they hold the scratch busy)."""
        if pool in self._cleaned:
            return
        self._cleaned.add(pool)
        running_ids = set(self.registry.running().values())
        if self.devfs is not None:  # ext4 mounts on scratch zvols/LUNs hold them busy
            for mnt in sorted(Path(self.mount_root).glob("fs-*")):
                if mnt.name[3:] not in running_ids:
                    with contextlib.suppress(ZdsError):
                        self.devfs.unmount(str(mnt))
                        log.warning("unmounted probe file system %s left by an earlier run",
                                    mnt)
        for attacher in self.attachers.values():
            with contextlib.suppress(ZdsError):
                for what in attacher.clean_leftovers(running_ids):
                    log.warning("removed probe %s left by an earlier run", what)
        if self.scratch is None:
            return
        running = {f"{pool}/zds-probes/{ds}-{pid}" for ds, pid in self.registry.running().items()}
        with contextlib.suppress(ZdsError):
            for name in self.scratch.clean_leftovers(pool, keep=running):
                log.warning("removed probe scratch %s left by an earlier run", name)

    # ----------------------------------------------------------------- comparisons
    def legs(self) -> dict[str, protocols.Leg]:
        """Every leg this appliance can run: the protocols whose transport attaches a
        probe on loopback, and the baseline of each storage kind among them."""
        return protocols.legs_for(
            (proto, target, self.storages[proto].is_volume)
            for proto, target in self.targets.items()
            if target in self.attachers and proto in self.storages)

    def plan_comparison(self, req: ComparisonRequest, comparison_id: str
                        ) -> list[tuple[int, Planned]]:
        """Every run of a comparison, in running order, each checked like a probe."""
        available = self.legs()
        profile = profiles.get(req.profile)
        if profile.kind != "fio":
            raise InvalidInput(f"profile {profile.name} measures the network, not a "
                               "protocol: a comparison runs fio profiles")
        if not 1 <= req.rounds <= protocols.MAX_ROUNDS:
            raise InvalidInput(f"rounds: 1 to {protocols.MAX_ROUNDS}")
        if self.zfs is None or self.zfs.get_dataset(req.pool) is None:
            raise NotFound(f"pool {req.pool!r} not found")
        asked = list(dict.fromkeys(req.legs)) or list(available)
        unknown = [name for name in asked if name not in available]
        if unknown:
            raise InvalidInput(f"legs: {', '.join(unknown)} cannot be compared here; "
                               f"expected some of {', '.join(available)}",
                               detail={"available": list(available)})
        legs = [available[name] for name in asked]
        params = profile.resolve(dict(req.overrides))
        name = protocols.datastore_of(comparison_id)
        planned: dict[str, Planned] = {}
        for leg in legs:
            storage = self.storages[leg.protocol]
            ref = DatastoreRef(name, req.pool, req.pool, leg.is_volume, leg.protocol)
            like = DatasetInfo(f"({leg.name} defaults)",
                               "volume" if storage.is_volume else "filesystem",
                               storage.defaults)
            planned[leg.name] = self._plan(
                ProbeRequest(req.profile, name, leg.target, dict(req.overrides)),
                profile, params, ref, like, settings={})
        return [(r, self._with_leg(planned[leg.name], leg, r, seq, req, comparison_id, legs))
                for seq, (r, leg) in enumerate(protocols.schedule(legs, req.rounds))]

    @staticmethod
    def _with_leg(planned: Planned, leg: protocols.Leg, round_: int, seq: int,
                  req: ComparisonRequest, comparison_id: str,
                  legs: builtins.list[protocols.Leg]) -> Planned:
        from appliance import __version__

        settings = {"zds_version": __version__, "comparison": {
            "id": comparison_id, "pool": req.pool, "leg": leg.name, "target": leg.target,
            "baseline": leg.baseline, "round": round_, "seq": seq, "rounds": req.rounds,
            "legs": [x.name for x in legs]},
            "scratch_like": dict(planned.like.properties) if planned.like else {}}
        return dataclasses.replace(planned, settings=settings)

    def run_comparison(self, runs: builtins.list[tuple[int, Planned]],
                       cancel: CancelToken | None = None,
                       progress: Callable[[int, int], None] | None = None
                       ) -> builtins.list[ProbeResult]:
        """Runs the planned legs one after the other (the job body); stops when cancelled.
        A leg that fails is recorded and the comparison goes on."""
        cancel = cancel or CancelToken()
        out: builtins.list[ProbeResult] = []
        for i, (_round, planned) in enumerate(runs):
            if cancel.cancelled:
                break
            if progress:
                progress(i, len(runs))
            out.append(self._run(planned, None, cancel))
        return out

    def comparison(self, comparison_id: str) -> dict[str, Any]:
        """A comparison read back from its results (404 when it has none yet)."""
        return protocols.view(comparison_id, self.comparison_results(comparison_id))

    def comparison_plot(self, comparison_id: str, fmt: str) -> bytes:
        v = self.comparison(comparison_id)
        return plots.render_comparison(
            v["rows"], f"{v['profile']} on pool {v['pool']}: comparison {v['id']}", fmt)

    def comparison_report(self, comparison_id: str) -> str:
        results = self.comparison_results(comparison_id)
        return report.render_comparison_html(protocols.view(comparison_id, results), results)

    def comparison_results(self, comparison_id: str) -> builtins.list[ProbeResult]:
        """Its results in running order (404 when it has none yet)."""
        results = self.store.list(ResultFilter(
            datastore=protocols.datastore_of(comparison_id), limit=10_000))
        if not results:
            raise NotFound(f"no protocol comparison {comparison_id!r}")
        return sorted(results, key=protocols.running_order)

    def cancel(self, probe_id: str) -> bool:
        return self.registry.cancel(probe_id)

    # ----------------------------------------------------------------- client results
    def record_client(self, body: Mapping[str, Any]) -> ProbeResult:
        """A result posted by ``zds probe run`` on a client: validated, then stored."""
        try:
            r = ProbeResult.from_dict(dict(body))
        except TypeError as exc:
            raise InvalidInput(f"not a probe result: {exc}") from exc
        profile = profiles.get(r.profile)
        profile.resolve({k: v for k, v in r.params.items() if k not in profile.defaults
                         or v != profile.defaults[k]})
        self.lookup(r.datastore)  # the datastore must exist here
        if r.target.get("kind") != "client":
            raise InvalidInput("posted results must have target.kind = client")
        if r.status not in ("ok", "failed", "cancelled"):
            raise InvalidInput("status: expected ok, failed or cancelled")
        if not all(isinstance(v, int | float) for v in r.summary.values()):
            raise InvalidInput("summary values must be numbers")
        for st in r.steps:
            if not isinstance(st, StepResult) or not all(
                    isinstance(v, int | float) for v in st.metrics.values()):
                raise InvalidInput("step metrics must be numbers")
        if not r.id.isalnum() or len(r.id) > 32:
            raise InvalidInput("id: 1-32 letters and digits")
        with contextlib.suppress(NotFound):
            self.store.get(r.id)
            raise Conflict(f"probe result {r.id} already exists")
        r.summary = r.summary or summarize(r.steps, profile.summary_rule)
        self.store.save(r)
        return r

    # ----------------------------------------------------------------- reading
    def get(self, result_id: str) -> ProbeResult:
        return self.store.get(result_id)

    def list(self, f: ResultFilter | None = None) -> list[ProbeResult]:
        return self.store.list(f)

    def compare(self, a: str, b: str) -> _compare.Comparison:
        return _compare.compare(self.store.get(a), self.store.get(b))

    def published(self, result_id: str, local: str | None = None
                  ) -> builtins.list[_compare.PublishedCheck]:
        return _compare.against_published(self.store.get(result_id),
                                         self.store.get(local) if local else None)

    def plot(self, ids: builtins.list[str], kind: str | None, fmt: str) -> bytes:
        """One figure of up to :data:`MAX_PLOT_IDS` results."""
        _check_ids(ids)
        results = [self.store.get(i) for i in ids]
        return plots.render(kind or plots.default_kind(results[0]), results, fmt)

    def report(self, ids: builtins.list[str], title: str = "ZDS probe report") -> str:
        """One HTML page of up to :data:`MAX_PLOT_IDS` results."""
        _check_ids(ids)
        return report.render_html([self.store.get(i) for i in ids], title)


def _check_ids(ids: builtins.list[str]) -> None:
    if not ids:
        raise InvalidInput("give at least one result id")
    if len(ids) > MAX_PLOT_IDS:
        raise InvalidInput(f"at most {MAX_PLOT_IDS} result ids in one plot or report, "
                           f"got {len(ids)}")


# --------------------------------------------------------------------- wiring

def build(ctx: Context, hosts: ProbeHosts | None,
          versions: Callable[[], Mapping[str, str]]) -> ProbeService:
    """The service on the appliance's context; ``hosts`` are fio and the loopback
    NFS/iSCSI/NVMe clients, real (appliance.host.factory) or fake
    (appliance.fake_hosts); None refuses every run as unavailable. ``versions`` is the
    system service's memo of the stack's versions (each result records them; asking the
    tools costs seconds a probe under emulation)."""
    from appliance import __version__

    def lookup(name: str) -> DatastoreRef:
        rec = ctx.store.get_datastore(name)
        if rec is None:
            raise NotFound(f"datastore {name!r} not found")
        if rec.state != "ready":
            raise Conflict(f"datastore {name} is {rec.state}")
        return DatastoreRef(rec.name, rec.spec.pool, rec.spec.dataset,
                            ctx.transports.of(rec.spec.protocol).storage.is_volume,
                            rec.spec.protocol)

    def settings_for(ref: DatastoreRef) -> dict[str, Any]:
        out: dict[str, Any] = {"zds_version": __version__,
                               "datastore": {"protocol": ref.protocol,
                                             "dataset": ref.dataset}}
        with contextlib.suppress(ZdsError):
            out["versions"] = {k: v for k, v in versions().items() if k != "zds"}
        with contextlib.suppress(ZdsError):
            info = ctx.zfs.get_dataset(ref.dataset)
            if info is not None:
                out["zfs"] = {k: info.prop(k) for k in RECORDED_PROPS if info.prop(k)}
        rec = ctx.store.get_datastore(ref.name)
        if rec is not None:
            out.update(ctx.transports.of(rec.spec.protocol).probe_settings(rec))
        return out

    workroot = str(Path(ctx.settings.state_dir) / "probes")
    targets = {p: t.probe_target for t in ctx.transports for p in t.protocols}
    storages = {p: t.storage for t in ctx.transports for p in t.protocols}
    if hosts is None:  # an engine made without probe tools: every run is refused
        from appliance.host.fio import NoFio

        return ProbeService(ProbeStore(ctx.store.connect), ProbeExecutor(NoFio(), workroot),
                            lookup, ctx.zfs, {}, settings_for, targets)
    executor = ProbeExecutor(hosts.fio, workroot, stats=hosts.stats, iperf=hosts.iperf,
                             sync=hosts.sync)
    attachers: dict[str, Attacher] = {
        t.probe_target: TransportAttach(t.probe_target, t.probe_attacher(hosts))
        for t in ctx.transports}
    return ProbeService(ProbeStore(ctx.store.connect), executor, lookup, ctx.zfs, attachers,
                        settings_for, targets, devfs=hosts.devfs, storages=storages)


def submit(jobs: JobManager, svc: ProbeService, req: ProbeRequest) -> tuple[str, Any]:
    """Checks the request, then runs it as an engine job; returns (probe id, job)."""

    planned = svc.plan(req)
    probe_id = new_id()

    def body(ctx: JobContext) -> dict[str, Any]:
        token = CancelToken()
        ctx.on_cancel.append(lambda: token.cancel(interrupted=ctx.stopping))
        done = threading.Event()

        def watch() -> None:  # JobManager.shutdown sets the event without calling hooks
            while not done.is_set():
                if ctx.cancel_event.wait(1.0):
                    token.cancel(interrupted=ctx.stopping)
                    return

        threading.Thread(target=watch, name=f"zds-probe-{probe_id}", daemon=True).start()
        ctx.progress(0.01, f"probe {probe_id}: {planned.profile.name} on {req.datastore}")
        try:
            result = svc.run(req, probe_id, token)
        finally:
            done.set()
        if result.status == "cancelled":
            raise JobCancelled()
        if result.status == "failed":
            raise ZdsError(f"probe {probe_id} failed: {result.error}",
                           detail={"result_id": probe_id})
        return {"result_id": probe_id, "status": result.status, "summary": result.summary}

    job = jobs.submit("probe", req.datastore, body,
                             message=f"probe {probe_id}: {planned.profile.name} "
                                     f"({req.target})")
    return probe_id, job


def submit_comparison(jobs: JobManager, svc: ProbeService, req: ComparisonRequest
                      ) -> tuple[str, Any]:
    """Checks a protocol comparison, then runs it as one job; returns (its id, the job).
    Its results appear under GET /probes/comparisons/{id} as each leg ends."""
    comparison_id = new_id()
    runs = svc.plan_comparison(req, comparison_id)

    def body(ctx: JobContext) -> dict[str, Any]:
        token = CancelToken()
        ctx.on_cancel.append(lambda: token.cancel(interrupted=ctx.stopping))

        def progress(i: int, n: int) -> None:
            if ctx.cancel_event.is_set():
                token.cancel(interrupted=ctx.stopping)
            leg = runs[i][1].settings or {}
            ctx.progress(i / n, f"comparison {comparison_id}: "
                                f"{leg.get('comparison', {}).get('leg')} ({i + 1} of {n})")

        results = svc.run_comparison(runs, token, progress)
        if token.cancelled:
            raise JobCancelled()
        failed = [r.id for r in results if r.status != "ok"]
        return {"comparison_id": comparison_id, "results": [r.id for r in results],
                "failed": failed}

    job = jobs.submit("probe", req.pool, body,
                      message=f"protocol comparison {comparison_id}: {req.profile} on "
                              f"{req.pool}, {len(runs)} runs")
    return comparison_id, job
