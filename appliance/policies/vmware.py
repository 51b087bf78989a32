"""The VMware consistency step of a policy run: snapshot the powered-on VMs on the
datastores with quiesce (in parallel, within a time limit), let the caller take the ZFS
snapshots, then remove the VM snapshots. Every VM is accounted for in the report:
quiesced, not quiesced (and why), or powered off (its disks are at rest)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from appliance.errors import ZdsError
from appliance.host.vsphere import VmRef, VsphereConnector, VsphereSession
from appliance.policies.model import VcenterSpec, VmwareStep


@dataclass(frozen=True)
class Target:
    """A datastore as vSphere knows it: by NFS export path or by the LUN's NAA id."""

    datastore: str
    nfs_path: str | None = None
    naa: str | None = None


@dataclass
class VmwareReport:
    vcenter: str
    error: str | None = None  # the whole step failed (unreachable, credentials...)
    quiesced: list[dict[str, Any]] = field(default_factory=list)
    not_quiesced: list[dict[str, Any]] = field(default_factory=list)
    powered_off: list[dict[str, Any]] = field(default_factory=list)
    removed: int = 0
    left_behind: list[dict[str, Any]] = field(default_factory=list)  # VM snapshots not removed
    seconds: float = 0.0

    @property
    def complete(self) -> bool:
        """Every running VM was quiesced (none failed, the step itself did not fail)."""
        return self.error is None and not self.not_quiesced

    def as_dict(self) -> dict[str, Any]:
        return {"vcenter": self.vcenter, "error": self.error, "quiesced": self.quiesced,
                "not_quiesced": self.not_quiesced, "powered_off": self.powered_off,
                "removed": self.removed, "left_behind": self.left_behind,
                "seconds": round(self.seconds, 2)}


@dataclass
class _Pending:
    vm: VmRef
    datastores: list[str]
    task: str | None = None
    snapshot: str | None = None


class VmwareQuiesce:
    """One run of the step: :meth:`quiesce`, then (after the ZFS snapshots)
    :meth:`release`, which must be called whatever happened in between."""

    def __init__(self, connector: VsphereConnector, vcenter: VcenterSpec,
                 step: VmwareStep) -> None:
        self.connector = connector
        self.vcenter = vcenter
        self.step = step
        self.report = VmwareReport(vcenter.name)
        self._session: VsphereSession | None = None
        self._done: list[_Pending] = []
        self._timed_out: list[_Pending] = []

    def quiesce(self, targets: Sequence[Target], snapshot_name: str) -> VmwareReport:
        t0 = time.monotonic()
        rep = self.report
        try:
            self._session = self.connector.connect(
                self.vcenter.host, self.vcenter.port, self.vcenter.user,
                self.vcenter.password, self.vcenter.insecure,
                timeout=min(30.0, self.step.timeout))
            found = self._session.vms_on([t.nfs_path for t in targets if t.nfs_path],
                                         [t.naa for t in targets if t.naa])
        except ZdsError as exc:
            rep.error = exc.message
            rep.seconds = time.monotonic() - t0
            return rep
        vms: dict[str, _Pending] = {}
        for t in targets:
            for vm in found.get(t.nfs_path or t.naa or "", []):
                vms.setdefault(vm.moid, _Pending(vm, [])).datastores.append(t.datastore)
        running = [p for p in vms.values() if p.vm.powered_on]
        rep.powered_off = [{"vm": p.vm.name, "moid": p.vm.moid, "datastores": p.datastores}
                           for p in vms.values() if not p.vm.powered_on]
        if running:
            deadline = t0 + self.step.timeout
            session = self._session
            with ThreadPoolExecutor(max_workers=max(1, self.step.parallel),
                                    thread_name_prefix="zds-vmware") as pool:
                outcomes = list(pool.map(
                    lambda p: self._snapshot(session, p, snapshot_name, deadline), running))
            for p, (ok, reason) in zip(running, outcomes, strict=True):
                entry = {"vm": p.vm.name, "moid": p.vm.moid, "datastores": p.datastores}
                if ok:
                    rep.quiesced.append(entry)
                    self._done.append(p)
                else:
                    rep.not_quiesced.append({**entry, "reason": reason})
        rep.seconds = time.monotonic() - t0
        return rep

    def _snapshot(self, session: VsphereSession, p: _Pending, name: str,
                  deadline: float) -> tuple[bool, str]:
        try:
            p.task = session.start_snapshot(
                p.vm.moid, name, "taken by ZDS around a ZFS snapshot; removed right after",
                quiesce=self.step.quiesce, memory=self.step.memory)
            out = session.wait(p.task, max(0.0, deadline - time.monotonic()))
        except ZdsError as exc:
            return False, exc.message
        except Exception as exc:  # a SOAP fault for this VM only
            return False, f"{type(exc).__name__}: {exc}"
        if out.state == "success":
            p.snapshot = out.snapshot
            return True, ""
        if out.state == "running":
            session.cancel(p.task)
            self._timed_out.append(p)
            return False, f"not quiesced within {self.step.timeout:g} s (task cancelled)"
        return False, out.error or "the VM snapshot failed"

    def release(self) -> VmwareReport:
        """Removes the VM snapshots taken (and those of tasks that finished after their
        time was up), in parallel; what cannot be removed is reported."""
        rep = self.report
        session = self._session
        if session is None:
            return rep
        t0 = time.monotonic()
        for p in self._timed_out:  # a cancelled task may have finished anyway
            try:
                late = session.wait(p.task or "", 0)
            except ZdsError:
                continue
            if late.state == "success" and late.snapshot:
                p.snapshot = late.snapshot
                self._done.append(p)
            elif late.state == "running":
                rep.left_behind.append({"vm": p.vm.name, "moid": p.vm.moid,
                                        "reason": "its snapshot task is still running: "
                                                  "check the VM's snapshots in vSphere"})

        def remove(p: _Pending) -> tuple[_Pending, str | None]:
            try:
                out = session.remove_snapshot(p.snapshot or "", self.step.timeout)
            except Exception as exc:
                return p, f"{type(exc).__name__}: {exc}"
            return p, None if out.state == "success" else (out.error or "still running")

        with ThreadPoolExecutor(max_workers=max(1, self.step.parallel),
                                thread_name_prefix="zds-vmware") as pool:
            for p, err in pool.map(remove, self._done):
                if err is None:
                    rep.removed += 1
                else:
                    rep.left_behind.append({"vm": p.vm.name, "moid": p.vm.moid,
                                            "snapshot": p.snapshot, "reason": err})
        session.close()
        self._session = None
        rep.seconds += time.monotonic() - t0
        return rep
