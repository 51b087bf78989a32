"""Snapshot policies: validate -> record -> schedule; each run is a job of the one clock.

A run, for the ready datastores the policy covers:

1. reads every snapshot below each pool's datastores in one ``zfs get -r`` per pool;
2. runs the pre hook (a failure stops the run: no snapshot, nothing deleted) and the
   VMware step (VMs that could not be quiesced are listed in the job);
3. takes all the snapshots with one ``zfs snapshot`` per pool (atomic per pool), named
   ``<policy>-<UTC time>`` with ``zds:policy`` set on each;
4. removes the VM snapshots and runs the post hook (always, once the pre hook ran);
5. prunes: per datastore, this policy's snapshots that no retention class keeps, one
   ``zfs destroy ds@a,b`` per datastore, never one a clone depends on or one held
   (``zfs hold``) by another feature, and never a snapshot another policy or a person
   took (only those with ``zds:policy`` = this policy are candidates). Nothing is pruned
   when the snapshots could not be taken, nor when the VMware step failed as a whole
   (the new snapshots are then only crash-consistent: the older ones stay).

The state of the last run (ok / warning / failed, with a message) feeds health; the
last good snapshot and the last failure per datastore feed the datastore view.
"""

from __future__ import annotations

import builtins
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from zoneinfo import ZoneInfo

from appliance import validate
from appliance.context import Context
from appliance.errors import Conflict, InvalidInput, NotFound, ZdsError
from appliance.host.hooks import HookHost, HookResult
from appliance.host.vsphere import VsphereConnector
from appliance.host.zfs import DatasetInfo
from appliance.jobs import Job, JobContext
from appliance.model import DATASTORE_PARENT, DatastoreRecord
from appliance.policies.model import (
    CONSISTENCY_PROPERTY,
    SNAPSHOT_PROPERTY,
    Hooks,
    PolicySpec,
    Selector,
    VcenterSpec,
    VmwareStep,
)
from appliance.policies.records import PolicyRecords, PolicyState
from appliance.policies.retention import Retention, Snap, expired
from appliance.policies.schedule import Schedule, utc_stamp
from appliance.policies.vmware import Target, VmwareQuiesce, VmwareReport
from appliance.scheduler import Task

log = logging.getLogger(__name__)

JOB_LOCK_WAIT = 3600.0
SNAPSHOT_PROPS = ("creation", "createtxg", "userrefs", "clones", SNAPSHOT_PROPERTY)
_VCENTER_HOST = validate.nfs_client  # an IP address or a host name (no '*', no CIDR)
VMWARE_TIMEOUT = (1, 3600)  # seconds for all VM snapshots of a run
VMWARE_PARALLEL = (1, 32)  # VM snapshots at once
HOOK_TIMEOUT = (1, 3600)  # seconds per hook command
VCENTER_USER_MAX = 255
VCENTER_PASSWORD_MAX = 1024
PORT_RANGE = (1, 65535)


@dataclass(frozen=True)
class PolicyRequest:
    """The body of ``PUT /snapshot-policies/{name}`` as sent (not yet validated)."""

    every: int | str | None = None
    cron: str | None = None
    timezone: str | None = None
    retention: dict[str, int] = field(default_factory=dict)
    datastores: list[str] = field(default_factory=list)
    all_datastores: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    enabled: bool = True
    vmware: VmwareStep | None = None
    hooks: Hooks | None = None


@dataclass(frozen=True)
class PolicyView:
    spec: PolicySpec
    covered: list[str]  # ready datastores it snapshots now
    missing: list[str]  # named datastores that do not exist
    state: PolicyState | None  # the last run
    last_slot: float | None
    next_run: float | None


@dataclass(frozen=True)
class VcenterRequest:
    host: str
    user: str
    password: str
    port: int = 443
    insecure: bool = False
    verify: bool = True  # log in now and refuse what does not work


def task_name(policy: str) -> str:
    return f"policy:{policy}"


class PolicyService:
    def __init__(self, ctx: Context, records: PolicyRecords,
                 vsphere: VsphereConnector | None = None,
                 hooks: HookHost | None = None) -> None:
        self.ctx = ctx
        self.records = records
        self.vsphere = vsphere
        self.hooks = hooks
        # told, after a run, each datastore it snapshotted (replications that follow
        # the policy send the new snapshot); wired by the engine
        self.after_snapshots: list[Callable[[str], object]] = []
        for spec in records.list():
            self._register(spec)

    # --- scheduling -----------------------------------------------------------------
    def _register(self, spec: PolicySpec) -> None:
        name = task_name(spec.name)
        if not spec.enabled:
            self.ctx.scheduler.unregister(name)
            return
        schedule, created = spec.schedule, spec.created

        def due(last: float | None, now: float) -> float | None:
            # a new policy starts at its first slot after it was made, not at once
            return schedule.due(last if last is not None else created, now)

        def run(job: JobContext, slot: float) -> dict[str, Any]:
            return self.run(job, spec.name, slot)

        self.ctx.scheduler.register(Task(name, "policy.run", spec.name, due, run, long=True))

    # --- policies -------------------------------------------------------------------
    def validate_request(self, name: str, req: PolicyRequest) -> PolicySpec:
        validate.resource_name(name, "policy name")
        schedule = Schedule.parse(req.every, req.cron, req.timezone)
        retention = Retention.parse(dict(req.retention))
        names = tuple(sorted({validate.resource_name(n, "datastore name")
                              for n in req.datastores}))
        labels = validate.labels(dict(req.labels))
        if not names and not req.all_datastores and not labels:
            raise InvalidInput("the policy covers no datastore: give datastores.names, "
                               "datastores.all or datastores.labels")
        for n in names:
            if self.ctx.store.get_datastore(n) is None:
                raise NotFound(f"datastore {n!r} not found (policies may name only "
                               "existing datastores; select by label for future ones)")
        vm = req.vmware
        if vm is not None:
            validate.resource_name(vm.vcenter, "vCenter name")
            if self.records.get_vcenter(vm.vcenter) is None:
                raise NotFound(f"vCenter {vm.vcenter!r} is not registered: PUT "
                               f"/api/v1/vcenters/{vm.vcenter} first")
            if not VMWARE_TIMEOUT[0] <= vm.timeout <= VMWARE_TIMEOUT[1]:
                raise InvalidInput("vmware.timeout: 1 to 3600 seconds")
            if not VMWARE_PARALLEL[0] <= vm.parallel <= VMWARE_PARALLEL[1]:
                raise InvalidInput("vmware.parallel: 1 to 32 VM snapshots at once")
            if self.vsphere is None:
                raise InvalidInput("this appliance has no vSphere client (pyVmomi)")
        hooks = req.hooks
        if hooks is not None:
            if not hooks.pre and not hooks.post:
                hooks = None
            else:
                if self.hooks is None:
                    raise InvalidInput("hooks are not available on this appliance")
                for argv in (hooks.pre, hooks.post):
                    if argv:
                        self.hooks.check(argv)
                if not HOOK_TIMEOUT[0] <= hooks.timeout <= HOOK_TIMEOUT[1]:
                    raise InvalidInput("hooks.timeout: 1 to 3600 seconds")
        return PolicySpec(name=name, schedule=schedule, retention=retention,
                          selector=Selector(names, req.all_datastores, labels),
                          enabled=req.enabled, vmware=vm, hooks=hooks)

    def put(self, name: str, req: PolicyRequest) -> tuple[PolicyView, bool]:
        """Creates or replaces a policy (idempotent); returns (view, created)."""
        spec = self.validate_request(name, req)
        now = time.time()
        existing = self.records.get(name)
        if existing is not None:
            spec = replace(spec, created=existing.created, updated=existing.updated)
            if spec == existing:
                return self.get(name), False
            spec = replace(spec, updated=now)
        else:
            spec = replace(spec, created=now, updated=now)
        self.records.put(spec)
        self._register(spec)
        return self.get(name), existing is None

    def _spec(self, name: str) -> PolicySpec:
        validate.resource_name(name, "policy name")
        spec = self.records.get(name)
        if spec is None:
            raise NotFound(f"snapshot policy {name!r} not found")
        return spec

    def get(self, name: str) -> PolicyView:
        return self._view(self._spec(name), self.ctx.store.list_datastores(),
                          self.records.states())

    def list(self) -> builtins.list[PolicyView]:
        records = self.ctx.store.list_datastores()
        states = self.records.states()
        return [self._view(s, records, states) for s in self.records.list()]

    def _view(self, spec: PolicySpec, records: Sequence[DatastoreRecord],
              states: dict[str, PolicyState]) -> PolicyView:
        names = {r.name for r in records}
        covered = [r.name for r in records if spec.covers(r) and r.state == "ready"]
        last = None
        if spec.enabled:
            try:
                last = self.ctx.scheduler.state(task_name(spec.name)).last_slot
            except NotFound:
                last = None
        base = last if last is not None else spec.created
        nxt = spec.schedule.next_after(max(base, spec.schedule.latest(time.time()) or base)) \
            if spec.enabled else None
        return PolicyView(spec, covered, [n for n in spec.selector.names if n not in names],
                          states.get(spec.name), last, nxt)

    def delete(self, name: str) -> None:
        """Forgets the policy; its snapshots stay (they are ordinary snapshots now, with
        ``zds:policy`` telling where they came from)."""
        self._spec(name)
        self.ctx.scheduler.unregister(task_name(name), forget=True)
        self.records.delete(name)

    def run_now(self, name: str) -> Job:
        """A run outside the schedule (a manual run); refused while one is going."""
        spec = self._spec(name)
        if not spec.enabled:
            raise Conflict(f"snapshot policy {name} is disabled: enable it to run it")
        return self.ctx.scheduler.run_now(task_name(name))

    def recover(self) -> None:
        """At start-up (after JobManager.recover): a run the restart interrupted becomes
        the policy's last run, failed, so health says so and what to do. What it took is
        kept (one ``zfs snapshot`` per pool: all of a pool's or none) and what it did not
        prune yet is pruned by the next run; its slot is not run again (a run that kills
        the API must not do so at every start)."""
        states = self.records.states()
        for spec in self.records.list():
            try:
                job = self.ctx.scheduler.state(task_name(spec.name)).last_job
            except NotFound:
                continue  # disabled: not scheduled
            if job is None or job.state != "failed" or (job.error or {}).get(
                    "code") != "interrupted":
                continue
            last = states.get(spec.name)
            if last is not None and last.job_id == job.id:
                continue
            self.records.set_state(
                spec.name, "failed", "the API stopped during this run: the snapshots it "
                "took are kept and the next run prunes; the next slot runs as usual, or "
                f"POST /api/v1/snapshot-policies/{spec.name}/run now", job.id)

    # --- health ---------------------------------------------------------------------
    def health(self) -> tuple[bool, str]:
        """For the health endpoint: no host call, two SQLite reads."""
        specs = {s.name: s for s in self.records.list()}
        problems = [f"{p} {s.state}: {s.message}"
                    for p, s in sorted(self.records.states().items())
                    if p in specs and s.state != "ok" and specs[p].enabled]
        if problems:
            return False, "snapshot policy " + "; ".join(problems)
        return True, f"{len(specs)} snapshot policies, last runs ok" if specs \
            else "no snapshot policies"

    # --- vCenters -------------------------------------------------------------------
    def put_vcenter(self, name: str, req: VcenterRequest) -> tuple[VcenterSpec, bool]:
        validate.resource_name(name, "vCenter name")
        host = _VCENTER_HOST(req.host)
        if "/" in host or host == "*":
            raise InvalidInput(f"invalid vCenter host {req.host!r}: an address or host name")
        if not PORT_RANGE[0] <= req.port <= PORT_RANGE[1]:
            raise InvalidInput("port: 1 to 65535")
        if (not req.user or len(req.user) > VCENTER_USER_MAX
                or any(ord(c) < 32 for c in req.user)):
            raise InvalidInput("user: 1-255 printable characters")
        if not req.password or len(req.password) > VCENTER_PASSWORD_MAX:
            raise InvalidInput("password: 1-1024 characters")
        if req.verify:
            if self.vsphere is None:
                raise InvalidInput("this appliance has no vSphere client (pyVmomi)")
            # refused credentials -> InvalidInput, nobody answering -> Unavailable;
            # either way nothing is stored
            self.vsphere.connect(host, req.port, req.user, req.password, req.insecure,
                                 timeout=15).close()
        now = time.time()
        old = self.records.get_vcenter(name)
        spec = VcenterSpec(name, host, req.user, req.password, req.port, req.insecure,
                           created=old.created if old else now, updated=now)
        self.records.put_vcenter(spec)
        return spec, old is None

    def get_vcenter(self, name: str) -> VcenterSpec:
        validate.resource_name(name, "vCenter name")
        vc = self.records.get_vcenter(name)
        if vc is None:
            raise NotFound(f"vCenter {name!r} not found")
        return vc

    def list_vcenters(self) -> builtins.list[VcenterSpec]:
        return self.records.list_vcenters()

    def delete_vcenter(self, name: str) -> None:
        self.get_vcenter(name)
        users = [p.name for p in self.records.list() if p.vmware and p.vmware.vcenter == name]
        if users:
            raise Conflict(f"vCenter {name} is used by snapshot policies "
                           f"{', '.join(users)}: change them first")
        self.records.delete_vcenter(name)

    # --- a run ----------------------------------------------------------------------
    def run(self, job: JobContext, name: str, slot: float) -> dict[str, Any]:
        """One run of a policy (the scheduler's job body)."""
        spec = self.records.get(name)
        if spec is None:
            return {"policy": name, "skipped": "the policy was deleted"}
        try:
            result = self._execute(job, spec, slot)
        except ZdsError as exc:
            self.records.set_state(name, "failed", exc.message, job.job_id)
            raise
        except Exception as exc:
            self.records.set_state(name, "failed", f"{type(exc).__name__}: {exc}",
                                   job.job_id)
            raise
        warnings = result["warnings"]
        summary = result.get("note") or (
            f"{result['taken']} snapshot(s) {result['snapshot']}, "
            f"{sum(len(v) for v in result['pruned'].values())} pruned")
        self.records.set_state(name, "warning" if warnings else "ok",
                               "; ".join(warnings) if warnings else summary, job.job_id)
        job.progress(1.0, summary + (f"; {len(warnings)} warning(s)" if warnings else ""))
        for datastore in result.get("snapshotted", []):
            for listener in self.after_snapshots:
                try:
                    listener(datastore)
                except Exception:  # the snapshots are taken: the run itself succeeded
                    log.exception("after the snapshot of %s by policy %s", datastore, name)
        return result

    def _execute(self, job: JobContext, spec: PolicySpec, slot: float) -> dict[str, Any]:
        t0 = time.monotonic()
        records = self.ctx.store.list_datastores()
        known = {r.name for r in records}
        covered = [r for r in records if spec.covers(r)]
        targets = [r for r in covered if r.state == "ready"]
        warnings: list[str] = []
        missing = [n for n in spec.selector.names if n not in known]
        if missing:
            warnings.append(f"named datastores do not exist: {', '.join(missing)}")
        not_ready = [f"{r.name} ({r.state})" for r in covered if r.state != "ready"]
        if not_ready:
            warnings.append(f"not snapshotted (not ready): {', '.join(not_ready)}")
        result: dict[str, Any] = {
            "policy": spec.name,
            "slot": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(slot)),
            "snapshot": None, "datastores": [r.name for r in targets], "taken": 0,
            "consistency": None, "pruned": {}, "kept": {}, "hooks": [],
            "vmware": None, "warnings": warnings}
        if not targets:
            # a label or 'all' that selects nothing (yet) is not a failure; a named
            # datastore that is gone is already a warning above
            result["note"] = "no ready datastore is covered: nothing to snapshot"
            return result

        job.progress(0.05, "reading snapshots")
        existing = self._read_snapshots({r.spec.pool for r in targets})
        now = time.time()
        snapname = self._free_name(spec.name, now, targets, existing)
        result["snapshot"] = snapname
        env = {"ZDS_POLICY": spec.name, "ZDS_SNAPSHOT": snapname,
               "ZDS_DATASTORES": " ".join(r.name for r in targets),
               "ZDS_DATASETS": " ".join(r.spec.dataset for r in targets)}

        pre_ran = False
        quiesce: VmwareQuiesce | None = None
        vm_report: VmwareReport | None = None
        taken: list[DatastoreRecord] = []
        try:
            if spec.hooks and spec.hooks.pre:
                job.progress(0.1, "pre hook")
                pre = self._hook("pre", spec.hooks.pre, spec.hooks.timeout, env)
                result["hooks"].append(pre)
                pre_ran = True
                if pre["returncode"] != 0:
                    msg = f"pre hook failed ({pre['summary']}): no snapshot taken, none deleted"
                    self.records.datastore_failed(spec.name, [r.name for r in targets], msg)
                    raise Conflict(msg, detail={"hooks": result["hooks"]})
            else:
                pre_ran = True
            if spec.vmware:
                job.progress(0.2, "quiescing VMs")
                quiesce, vm_report = self._quiesce(spec.vmware, targets, snapname)
                result["vmware"] = vm_report.as_dict()
            consistency = ("crash" if vm_report is None or vm_report.error
                           else "vm" if vm_report.complete else "partial")
            if vm_report is None:
                consistency = "hooks" if spec.hooks and spec.hooks.pre else "crash"
            result["consistency"] = consistency
            job.progress(0.5, f"taking {len(targets)} snapshot(s)")
            taken = self._snapshot(spec, targets, snapname, consistency, warnings)
        finally:
            if quiesce is not None:
                job.progress(0.6, "removing VM snapshots")
                vm_report = quiesce.release()
                result["vmware"] = vm_report.as_dict()
            if pre_ran and spec.hooks and spec.hooks.post:
                env_post = {**env, "ZDS_RESULT": "ok" if taken else "failed"}
                result["hooks"].append(self._hook("post", spec.hooks.post,
                                                  spec.hooks.timeout, env_post))
        result["taken"] = len(taken)
        result["snapshotted"] = [r.name for r in taken]
        self.records.datastore_ok(spec.name, [(r.name, f"{r.spec.dataset}@{snapname}")
                                              for r in taken], now)
        for h in result["hooks"]:
            if h["phase"] == "post" and h["returncode"] != 0:
                warnings.append(f"post hook failed: {h['summary']}")
        if vm_report is not None:
            if vm_report.error:
                warnings.append(f"VMware step failed ({vm_report.error}): the snapshots are "
                                "crash-consistent, nothing was pruned")
            if vm_report.not_quiesced:
                warnings.append(f"{len(vm_report.not_quiesced)} VM(s) not quiesced: "
                                + ", ".join(f"{v['vm']} ({v['reason']})"
                                            for v in vm_report.not_quiesced))
            if vm_report.left_behind:
                warnings.append(f"{len(vm_report.left_behind)} VM snapshot(s) could not be "
                                "removed: " + ", ".join(v["vm"] for v in vm_report.left_behind))
        if vm_report is not None and vm_report.error:
            return result  # keep the older (consistent) snapshots
        job.progress(0.7, "pruning")
        self._prune(spec, taken, result, warnings)
        result["seconds"] = round(time.monotonic() - t0, 2)
        return result

    def _read_snapshots(self, pools: set[str]) -> dict[str, builtins.list[DatasetInfo]]:
        by_ds: dict[str, list[DatasetInfo]] = {}
        for pool in sorted(pools):
            for snap in self.ctx.zfs.list_snapshots_under(f"{pool}/{DATASTORE_PARENT}",
                                                          SNAPSHOT_PROPS):
                by_ds.setdefault(snap.name.split("@", 1)[0], []).append(snap)
        return by_ds

    @staticmethod
    def _free_name(policy: str, now: float, targets: Sequence[DatastoreRecord],
                   existing: dict[str, builtins.list[DatasetInfo]]) -> str:
        taken = {s.name.split("@", 1)[1] for r in targets
                 for s in existing.get(r.spec.dataset, [])}
        base = f"{policy}-{utc_stamp(now)}"
        name, n = base, 1
        while name in taken:  # two runs in one second (a manual run after a scheduled one)
            n += 1
            name = f"{base}-{n}"
        return name

    def _hook(self, phase: str, argv: Sequence[str], timeout: float,
              env: dict[str, str]) -> dict[str, Any]:
        assert self.hooks is not None
        res: HookResult = self.hooks.run(argv, timeout, {**env, "ZDS_PHASE": phase})
        return {"phase": phase, "argv": list(res.argv), "returncode": res.returncode,
                "stdout": res.stdout, "stderr": res.stderr, "seconds": res.seconds,
                "error": res.error, "summary": res.summary()}

    def _quiesce(self, step: VmwareStep, targets: Sequence[DatastoreRecord],
                 snapname: str) -> tuple[VmwareQuiesce | None, VmwareReport]:
        vc = self.records.get_vcenter(step.vcenter)
        if vc is None or self.vsphere is None:
            return None, VmwareReport(step.vcenter, error=f"vCenter {step.vcenter} is not "
                                                          "registered")
        q = VmwareQuiesce(self.vsphere, vc, step)
        transports = self.ctx.transports
        vt = [Target(r.name, **transports.of(r.spec.protocol).vmware_target(r))
              for r in targets]
        return q, q.quiesce(vt, snapname)

    def _snapshot(self, spec: PolicySpec, targets: Sequence[DatastoreRecord], snapname: str,
                  consistency: str, warnings: builtins.list[str]) -> builtins.list[DatastoreRecord]:
        props = {SNAPSHOT_PROPERTY: spec.name, CONSISTENCY_PROPERTY: consistency,
                 "zds:created_by": "policy"}
        todo = list(targets)
        with self.ctx.lock.hold(f"snapshot policy {spec.name}", timeout=JOB_LOCK_WAIT):
            for attempt in (1, 2):
                try:
                    self.ctx.zfs.snapshot_many([f"{r.spec.dataset}@{snapname}" for r in todo],
                                               props)
                    return todo
                except NotFound:
                    if attempt == 2:
                        raise
                    # a datastore went away since the listing: the others still get theirs
                    gone = [r for r in todo
                            if self.ctx.zfs.get_dataset(r.spec.dataset, ("type",)) is None]
                    if not gone:
                        raise
                    warnings.append("datastores gone during the run: "
                                    + ", ".join(r.name for r in gone))
                    todo = [r for r in todo if r not in gone]
                    if not todo:
                        return []
                except ZdsError as exc:
                    msg = (f"no snapshot taken, none deleted: {exc.message}")
                    self.records.datastore_failed(spec.name, [r.name for r in todo], msg)
                    raise type(exc)(msg, detail=exc.detail) from exc
        return todo

    def _prune(self, spec: PolicySpec, taken: Sequence[DatastoreRecord],
               result: dict[str, Any], warnings: builtins.list[str]) -> None:
        """Under the change lock (manual snapshots and clones take it too): a fresh
        listing, the plan, then one ``zfs destroy -r <pool>/datastores@name`` for each
        expired name that exists exactly where it is to go (a run names all its snapshots
        alike, so in steady state that is one command for any number of datastores), and
        one ``zfs destroy ds@a,b`` per datastore for the rest."""
        with self.ctx.lock.hold(f"pruning for policy {spec.name}", timeout=JOB_LOCK_WAIT):
            existing = self._read_snapshots({r.spec.pool for r in taken})
            plan = self._plan_prune(spec, taken, existing, result)
            where: dict[str, set[str]] = {}  # snapshot name -> datasets that have it
            for snaps in existing.values():
                for s in snaps:
                    ds, name = s.name.split("@", 1)
                    where.setdefault(name, set()).add(ds)
            by_name: dict[str, set[str]] = {}
            for ds_name, names in plan.items():
                for n in names:
                    by_name.setdefault(n, set()).add(ds_name)
            datasets = {r.name: r.spec.dataset for r in taken}
            pools = {r.name: r.spec.pool for r in taken}
            done: dict[str, builtins.list[str]] = {}
            for name, ds_names in sorted(by_name.items()):
                targets = {datasets[d] for d in ds_names}
                pool_set = {pools[d] for d in ds_names}
                if len(pool_set) == 1 and where.get(name) == targets and len(targets) > 1:
                    try:
                        self.ctx.zfs.destroy_snapshot_recursive(
                            f"{pool_set.pop()}/{DATASTORE_PARENT}", name)
                    except ZdsError as exc:  # all or none: per datastore below
                        log.warning("recursive prune of %s: %s", name, exc.message)
                        continue
                    for d in ds_names:
                        done.setdefault(d, []).append(name)
                        plan[d].remove(name)
            for ds_name, names in sorted(plan.items()):
                if not names:
                    continue
                try:
                    self.ctx.zfs.destroy_snapshots(datasets[ds_name], names)
                    done.setdefault(ds_name, []).extend(names)
                except ZdsError as exc:
                    warnings.append(f"pruning {ds_name} failed: {exc.message}")
        result["pruned"] = {d: sorted(n) for d, n in sorted(done.items())}

    def _plan_prune(self, spec: PolicySpec, taken: Sequence[DatastoreRecord],
                    existing: dict[str, builtins.list[DatasetInfo]],
                    result: dict[str, Any]) -> dict[str, builtins.list[str]]:
        """Per datastore, this policy's snapshots no retention class keeps, less those a
        clone depends on or a hold keeps (recorded in ``result["kept"]``)."""
        tz = ZoneInfo(spec.schedule.timezone)
        origins = {r.origin: r.name for r in self.ctx.store.list_datastores() if r.origin}
        plan: dict[str, builtins.list[str]] = {}
        held: builtins.list[str] = []
        for r in taken:
            mine = {s.name.split("@", 1)[1]: s for s in existing.get(r.spec.dataset, [])
                    if s.prop(SNAPSHOT_PROPERTY) == spec.name}
            snaps = [Snap(n, float(s.int_prop("creation")), s.int_prop("createtxg", 1 << 62))
                     for n, s in mine.items()]
            for old in expired(snaps, spec.retention, tz):
                info = mine[old.name]
                full = info.name
                clones = [c for c in info.prop("clones").split(",") if c]
                if full in origins or clones:
                    by = origins.get(full) or ", ".join(clones)
                    result["kept"].setdefault(r.name, []).append(
                        {"snapshot": old.name, "reason": f"a clone depends on it ({by})"})
                elif info.int_prop("userrefs") > 0:
                    held.append(full)
                else:
                    plan.setdefault(r.name, []).append(old.name)
        if held:
            tags = self.ctx.zfs.holds(held)
            for full in held:
                ds_name = next(r.name for r in taken if full.startswith(r.spec.dataset + "@"))
                result["kept"].setdefault(ds_name, []).append(
                    {"snapshot": full.split("@", 1)[1],
                     "reason": f"held by {', '.join(tags.get(full, [])) or 'a zfs hold'}"})
        return plan
