"""nfs and iscsi targets: the appliance reaches its own probe scratch through the protocol.

- nfs: the scratch dataset gets a temporary ganesha export (ids 65500-65509, reserved
  for probes: the reconciler must leave them alone, see PROBE_EXPORT_IDS), open to
  127.0.0.1 only, with the datastore's protocol (v3 or v4.1); the kernel client mounts it
  over loopback and fio runs in the mount.
- iscsi: the scratch zvol gets a temporary LIO target ``{iqn_prefix}.probe:{id}``
  (outside the reconciler's ``{iqn_prefix}:`` namespace; backstore ``probe-{id}``, not
  ``zds-*``), whose only ACL is the appliance's own initiator; open-iscsi logs in on
  127.0.0.1 and fio runs on the block device.

Both undo everything in ``detach`` (also after a failure half-way through ``attach``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Protocol

from appliance.errors import Conflict, ZdsError
from appliance.host.ganesha import GaneshaHost
from appliance.host.ganesha_config import ClientRule, ExportSpec
from appliance.host.iscsi_initiator import Initiator
from appliance.host.lio import AclSpec, LioHost, LunSpec, TargetSpec
from appliance.host.nfsclient import NfsMounter
from appliance.probes.execute import ProbeTarget
from appliance.probes.safety import Scratch

# Export ids of probe scratch exports: defined with the reconciler, which leaves them alone
from appliance.transports.nfs import PROBE_EXPORT_IDS as PROBE_EXPORT_IDS


@dataclass(frozen=True)
class DatastoreRef:
    """What the probe service needs to know about a datastore."""

    name: str
    pool: str
    dataset: str
    is_volume: bool
    protocol: str  # nfs3 | nfs41 | iscsi


class Attacher(Protocol):
    def attach(self, ds: DatastoreRef, scratch: Scratch, probe_id: str) -> ProbeTarget: ...

    def detach(self, target: ProbeTarget) -> None: ...

    def clean_leftovers(self, running: set[str]) -> list[str]:
        """Removes exports/targets of probes that are not running (left by a crash)."""


class NfsSelfAttach:
    def __init__(self, ganesha: GaneshaHost, client: NfsMounter,
                 mount_root: str = "/run/zds/probes", server: str = "127.0.0.1",
                 port: int = 2049, mountport: int = 20048) -> None:
        self.ganesha = ganesha
        self.client = client
        self.mount_root = mount_root.rstrip("/")
        self.server = server
        self.port = port
        self.mountport = mountport

    def _free_id(self) -> int:
        used = {e.export_id for e in self.ganesha.list_exports()}
        for i in PROBE_EXPORT_IDS:
            if i not in used:
                return i
        raise Conflict("all probe export ids are in use: too many probes at once")

    def attach(self, ds: DatastoreRef, scratch: Scratch, probe_id: str) -> ProbeTarget:
        version = 4 if ds.protocol == "nfs41" else 3
        export_id = self._free_id()
        spec = ExportSpec(export_id=export_id, path=scratch.path, pseudo=scratch.path,
                          protocols=(version,),
                          clients=(ClientRule(clients=("127.0.0.1",), access="RW"),))
        mountpoint = f"{self.mount_root}/{probe_id}"
        target = ProbeTarget("nfs", ds.name, path=mountpoint, host=self.server, details={
            "export_id": export_id, "export_path": scratch.path, "nfs_version": version,
            "scratch": scratch.name})
        self.ganesha.add_export(spec)
        try:
            self.client.mount(self.server, scratch.path, mountpoint, version, self.port,
                              self.mountport)
        except ZdsError:
            with contextlib.suppress(ZdsError):
                self.ganesha.remove_export(export_id)
            raise
        return target

    def clean_leftovers(self, running: set[str]) -> list[str]:
        gone = []
        live = {e.export_id: e for e in self.ganesha.list_exports()}
        for export_id in PROBE_EXPORT_IDS:
            e = live.get(export_id)
            if e is None or any(e.path.endswith(f"-{pid}") for pid in running):
                continue
            with contextlib.suppress(ZdsError):
                self.ganesha.remove_export(export_id)
                gone.append(f"export {export_id} ({e.path})")
        return gone

    def detach(self, target: ProbeTarget) -> None:
        errors = []
        try:
            self.client.umount(target.path)
        except ZdsError as exc:
            errors.append(exc)
        try:
            self.ganesha.remove_export(int(target.details["export_id"]))
        except ZdsError as exc:
            errors.append(exc)
        if errors:
            raise errors[0]


class IscsiSelfAttach:
    def __init__(self, lio: LioHost, initiator: Initiator, iqn_prefix: str,
                 portal: tuple[str, int] = ("0.0.0.0", 3260), host: str = "127.0.0.1") -> None:
        self.lio = lio
        self.initiator = initiator
        self.iqn_base = f"{iqn_prefix}.probe"
        self.portal = portal
        self.host = host

    def iqn(self, probe_id: str) -> str:
        return f"{self.iqn_base}:{probe_id}"

    def attach(self, ds: DatastoreRef, scratch: Scratch, probe_id: str) -> ProbeTarget:
        iqn = self.iqn(probe_id)
        spec = TargetSpec(
            iqn=iqn,
            luns=(LunSpec(backstore=f"probe-{probe_id}", device=scratch.path,
                          serial=f"zdsprobe{probe_id}"),),
            acls=(AclSpec(self.initiator.initiator_name()),),
            portals=(self.portal,),
        )
        self.lio.apply_target(spec)
        try:
            device = self.initiator.login(iqn, self.host, self.portal[1])
        except ZdsError:
            with contextlib.suppress(ZdsError):
                self.lio.remove_target(iqn)
            raise
        return ProbeTarget("iscsi", ds.name, path=device, is_device=True, host=self.host,
                           details={"iqn": iqn, "portal": f"{self.host}:{self.portal[1]}",
                                    "scratch": scratch.name})

    def clean_leftovers(self, running: set[str]) -> list[str]:
        gone = []
        for t in self.lio.list_targets():
            iqn = t.spec.iqn
            if not iqn.startswith(self.iqn_base + ":") or iqn.split(":", 1)[1] in running:
                continue
            with contextlib.suppress(ZdsError):
                self.initiator.logout(iqn, self.host, self.portal[1])
            with contextlib.suppress(ZdsError):
                self.lio.remove_target(iqn)
                gone.append(f"target {iqn}")
        return gone

    def detach(self, target: ProbeTarget) -> None:
        iqn = str(target.details["iqn"])
        errors = []
        try:
            self.initiator.logout(iqn, self.host, self.portal[1])
        except ZdsError as exc:
            errors.append(exc)
        try:
            self.lio.remove_target(iqn)
        except ZdsError as exc:
            errors.append(exc)
        if errors:
            raise errors[0]
