"""vSphere (vCenter or a standalone ESXi) through pyVmomi: which VMs live on a ZDS
datastore, and VM snapshots (with quiesce) around the ZFS snapshot.

A ZDS datastore is found in vSphere by what identifies it there: an NFS datastore by
the export path it mounts (``NasDatastoreInfo.nas.remotePath``, any server address), a
VMFS datastore by the NAA id of the LUN under it (``VmfsDatastoreInfo.vmfs.extent[]
.diskName``). The VMs are those the datastore lists (a disk or a config file on it).

Error contract (held by ``appliance.host.contract.vsphere_checks``, which runs against
govmomi's vcsim in the integration tests and against :class:`FakeVsphere` in unit
tests): an address nobody answers at is ``Unavailable``; a user name or password the
server refuses, or a certificate that does not verify, is :class:`LoginRefused` (409);
a VM snapshot the server refuses or that fails is a
:class:`TaskOutcome` with state ``error`` (never an exception); a task that has not
finished when its wait is over is ``running`` (cancel it, and look again later).
"""

from __future__ import annotations

import contextlib
import itertools
import ssl
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from appliance.errors import Conflict, NotFound, Unavailable

TaskState = Literal["success", "error", "running"]


class LoginRefused(Conflict):
    """The vCenter refused the credentials, or its certificate does not verify: a well
    formed request that the vCenter's state refuses (409, not 422)."""

    code = "vcenter_refused"


@dataclass(frozen=True)
class VmRef:
    moid: str  # managed object id, e.g. vm-42
    name: str
    powered_on: bool


@dataclass(frozen=True)
class TaskOutcome:
    state: TaskState
    snapshot: str | None = None  # the snapshot's moid on success
    error: str | None = None


class VsphereSession(Protocol):
    def vms_on(self, nfs_paths: Sequence[str],
               naa_ids: Sequence[str]) -> dict[str, list[VmRef]]:
        """For each NFS export path / LUN NAA id that backs a datastore here, the VMs on
        that datastore (sorted by name); keys nobody mounts are absent."""

    def start_snapshot(self, vm: str, name: str, description: str, quiesce: bool,
                       memory: bool) -> str:
        """Starts a VM snapshot; returns the task's id. ``NotFound`` for an unknown VM."""

    def wait(self, task: str, timeout: float) -> TaskOutcome:
        """Waits up to ``timeout`` seconds for a task (0: just look)."""

    def cancel(self, task: str) -> None:
        """Asks the server to cancel a running task (best effort)."""

    def snapshots(self, vm: str) -> list[str]:
        """The names of a VM's snapshots."""

    def remove_snapshot(self, snapshot: str, timeout: float) -> TaskOutcome:
        """Removes one VM snapshot (its disks are consolidated)."""

    def close(self) -> None: ...


class VsphereConnector(Protocol):
    def connect(self, host: str, port: int, user: str, password: str, insecure: bool,
                timeout: float = 20.0) -> VsphereSession:
        """Logs in; ``Unavailable`` when nothing answers, :class:`LoginRefused` when the
        credentials are refused (or the certificate does not verify)."""


# --------------------------------------------------------------------------------------
# pyVmomi
# --------------------------------------------------------------------------------------

class PyVmomiSession:
    def __init__(self, si: Any) -> None:
        from pyVmomi import vim, vmodl

        self.si = si
        self.vim: Any = vim  # pyVmomi's types are made at run time: untyped for mypy
        self.not_found: Any = vmodl.fault.ManagedObjectNotFound
        self.content = si.RetrieveContent()
        self._tasks: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _datastores(self) -> list[Any]:
        view = self.content.viewManager.CreateContainerView(
            self.content.rootFolder, [self.vim.Datastore], True)
        try:
            return list(view.view)
        finally:
            view.Destroy()

    def vms_on(self, nfs_paths: Sequence[str],
               naa_ids: Sequence[str]) -> dict[str, list[VmRef]]:
        paths = {p.rstrip("/") or "/": p for p in nfs_paths}
        naas = {n.lower(): n for n in naa_ids}
        found: dict[str, list[VmRef]] = {}
        for ds in self._datastores():
            info = ds.info
            keys: list[str] = []
            if isinstance(info, self.vim.host.NasDatastoreInfo) and info.nas is not None:
                remote = (info.nas.remotePath or "").rstrip("/") or "/"
                if remote in paths:
                    keys.append(paths[remote])
            elif isinstance(info, self.vim.host.VmfsDatastoreInfo) and info.vmfs is not None:
                for ext in info.vmfs.extent or []:
                    if (ext.diskName or "").lower() in naas:
                        keys.append(naas[ext.diskName.lower()])
            if not keys:
                continue
            vms = sorted((VmRef(vm._moId, vm.name,
                                str(vm.runtime.powerState) == "poweredOn")
                          for vm in ds.vm), key=lambda v: (v.name, v.moid))
            for key in keys:
                found.setdefault(key, []).extend(vms)
        return found

    def _vm(self, moid: str) -> Any:
        vm = self.vim.VirtualMachine(moid, self.si._stub)
        try:
            _ = vm.name  # a missing VM raises here
        except self.not_found:
            raise NotFound(f"no VM {moid} in vSphere") from None
        return vm

    def _keep(self, task: Any) -> str:
        with self._lock:
            self._tasks[task._moId] = task
        return str(task._moId)

    def start_snapshot(self, vm: str, name: str, description: str, quiesce: bool,
                       memory: bool) -> str:
        task = self._vm(vm).CreateSnapshot_Task(name=name, description=description,
                                                memory=memory, quiesce=quiesce)
        return self._keep(task)

    def wait(self, task: str, timeout: float) -> TaskOutcome:
        with self._lock:
            t = self._tasks.get(task)
        if t is None:
            raise NotFound(f"no task {task}")
        deadline = time.monotonic() + timeout
        while True:
            info = t.info
            state = str(info.state)
            if state == "success":
                result = info.result
                return TaskOutcome("success", snapshot=getattr(result, "_moId", None))
            if state == "error":
                err = info.error
                msg = getattr(err, "msg", None) or type(err).__name__
                return TaskOutcome("error", error=str(msg))
            if time.monotonic() >= deadline:
                return TaskOutcome("running")
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))

    def cancel(self, task: str) -> None:
        with self._lock:
            t = self._tasks.get(task)
        if t is None:
            return
        with contextlib.suppress(Exception):  # not cancelable, or done: looked at later
            t.CancelTask()

    def snapshots(self, vm: str) -> list[str]:
        snap = getattr(self._vm(vm), "snapshot", None)  # unset (not None) with none left
        names: list[str] = []

        def walk(trees: Any) -> None:
            for tree in trees or []:
                names.append(tree.name)
                walk(tree.childSnapshotList)

        if snap is not None:
            walk(snap.rootSnapshotList)
        return names

    def remove_snapshot(self, snapshot: str, timeout: float) -> TaskOutcome:
        snap = self.vim.vm.Snapshot(snapshot, self.si._stub)
        try:
            task = snap.RemoveSnapshot_Task(removeChildren=False, consolidate=True)
        except self.not_found:
            return TaskOutcome("error", error=f"snapshot {snapshot} no longer exists")
        return self.wait(self._keep(task), timeout)

    def close(self) -> None:
        from pyVim import connect

        disconnect: Any = connect.Disconnect
        with contextlib.suppress(Exception):  # an expired session: nothing to log out of
            disconnect(self.si)


class PyVmomiConnector:
    """:class:`VsphereConnector` with pyVmomi (SOAP over HTTPS)."""

    def connect(self, host: str, port: int, user: str, password: str, insecure: bool,
                timeout: float = 20.0) -> VsphereSession:
        from pyVim import connect
        from pyVmomi import vim

        smart_connect: Any = connect.SmartConnect
        try:
            # an explicit context: pyVim would skip verification for 127.0.0.1 itself
            si = smart_connect(host=host, port=port, user=user, pwd=password,
                              disableSslCertValidation=insecure,
                              sslContext=None if insecure else ssl.create_default_context(),
                              httpConnectionTimeout=timeout)
        except vim.fault.InvalidLogin:
            raise LoginRefused(f"vSphere at {host}:{port} refused the user name or "
                               f"password of {user!r}") from None
        except ssl.SSLError as exc:
            raise LoginRefused(f"the certificate of {host}:{port} does not verify ({exc}); "
                               "install a trusted one or set insecure=true") from None
        except (TimeoutError, OSError) as exc:
            raise Unavailable(f"vSphere at {host}:{port} is unreachable: {exc}") from None
        except Exception as exc:  # SOAP faults other than the login: not a vSphere API
            raise Unavailable(f"vSphere at {host}:{port} did not answer as vSphere: "
                              f"{type(exc).__name__}: {exc}") from None
        return PyVmomiSession(si)


# --------------------------------------------------------------------------------------
# In-memory twin
# --------------------------------------------------------------------------------------

@dataclass
class FakeVm:
    moid: str
    name: str
    powered_on: bool = True
    datastores: tuple[str, ...] = ()  # fake datastore names
    quiesce_error: str | None = None  # the snapshot fails with this message
    hang: bool = False  # its snapshot tasks never finish
    snapshots: dict[str, str] = field(default_factory=dict)  # moid -> name


@dataclass
class FakeDatastore:
    name: str
    nfs_path: str | None = None
    naa: str | None = None


@dataclass
class _FakeTask:
    vm: str
    outcome: TaskOutcome
    cancelled: bool = False


class FakeVsphere:
    """vCenter in memory: datastores (NFS by path, VMFS by NAA id), VMs on them,
    ``users`` (user -> password), ``reachable`` (and ``port``: None answers on any),
    ``self_signed`` (then only insecure=True connects). Records every snapshot made and
    removed."""

    def __init__(self) -> None:
        self.reachable = True
        self.port: int | None = None
        self.self_signed = False
        self.users: dict[str, str] = {}
        self.datastores: list[FakeDatastore] = []
        self.vms: dict[str, FakeVm] = {}
        self.tasks: dict[str, _FakeTask] = {}
        self.created: list[tuple[str, str, bool]] = []  # (vm, name, quiesce)
        self.removed: list[str] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def add_vm(self, name: str, datastores: Sequence[str], powered_on: bool = True,
               **kw: Any) -> FakeVm:
        vm = FakeVm(f"vm-{next(self._ids)}", name, powered_on, tuple(datastores), **kw)
        self.vms[vm.moid] = vm
        return vm

    def connect(self, host: str, port: int, user: str, password: str, insecure: bool,
                timeout: float = 20.0) -> VsphereSession:
        if not self.reachable or self.port not in (None, port):
            raise Unavailable(f"vSphere at {host}:{port} is unreachable: [Errno 111] "
                              "Connection refused")
        if self.self_signed and not insecure:
            raise LoginRefused(f"the certificate of {host}:{port} does not verify "
                               "(self-signed certificate); install a trusted one or set "
                               "insecure=true")
        if self.users.get(user) != password:
            raise LoginRefused(f"vSphere at {host}:{port} refused the user name or "
                               f"password of {user!r}")
        return _FakeSession(self)


class _FakeSession:
    def __init__(self, vc: FakeVsphere) -> None:
        self.vc = vc

    def vms_on(self, nfs_paths: Sequence[str],
               naa_ids: Sequence[str]) -> dict[str, list[VmRef]]:
        out: dict[str, list[VmRef]] = {}
        paths = {p.rstrip("/"): p for p in nfs_paths}
        naas = {n.lower(): n for n in naa_ids}
        for ds in self.vc.datastores:
            key = (paths.get((ds.nfs_path or "").rstrip("/")) if ds.nfs_path
                   else naas.get((ds.naa or "").lower()))
            if key is None:
                continue
            vms = [VmRef(v.moid, v.name, v.powered_on) for v in self.vc.vms.values()
                   if ds.name in v.datastores]
            out.setdefault(key, []).extend(sorted(vms, key=lambda v: (v.name, v.moid)))
        return out

    def start_snapshot(self, vm: str, name: str, description: str, quiesce: bool,
                       memory: bool) -> str:
        v = self.vc.vms.get(vm)
        if v is None:
            raise NotFound(f"no VM {vm} in vSphere")
        with self.vc._lock:
            tid = f"task-{next(self.vc._ids)}"
            self.vc.created.append((vm, name, quiesce))
            if v.hang:
                outcome = TaskOutcome("running")
            elif v.quiesce_error and quiesce:
                outcome = TaskOutcome("error", error=v.quiesce_error)
            else:
                sid = f"snapshot-{next(self.vc._ids)}"
                v.snapshots[sid] = name
                outcome = TaskOutcome("success", snapshot=sid)
            self.vc.tasks[tid] = _FakeTask(vm, outcome)
        return tid

    def wait(self, task: str, timeout: float) -> TaskOutcome:
        t = self.vc.tasks.get(task)
        if t is None:
            raise NotFound(f"no task {task}")
        if t.cancelled and t.outcome.state == "running":
            return TaskOutcome("error", error="The task was canceled by a user.")
        return t.outcome

    def cancel(self, task: str) -> None:
        t = self.vc.tasks.get(task)
        if t is not None:
            t.cancelled = True

    def snapshots(self, vm: str) -> list[str]:
        v = self.vc.vms.get(vm)
        if v is None:
            raise NotFound(f"no VM {vm} in vSphere")
        return list(v.snapshots.values())

    def remove_snapshot(self, snapshot: str, timeout: float) -> TaskOutcome:
        for v in self.vc.vms.values():
            if snapshot in v.snapshots:
                del v.snapshots[snapshot]
                self.vc.removed.append(snapshot)
                return TaskOutcome("success")
        return TaskOutcome("error", error=f"snapshot {snapshot} no longer exists")

    def close(self) -> None:
        pass
