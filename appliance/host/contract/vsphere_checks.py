"""Contract checks for :class:`appliance.host.vsphere.VsphereConnector` (pyVmomi against
govmomi's vcsim in tests/integration, and :class:`FakeVsphere` in unit tests).

The server at ``host:port`` must accept ``user``/``password`` (any other password is
refused), serve a self-signed certificate, and have an NFS datastore mounted from
``nfs_path`` holding the powered-on VM ``vm_on`` and the powered-off VM ``vm_off``;
nothing may listen on ``closed_port``.
"""

from __future__ import annotations

from appliance.errors import NotFound, Unavailable
from appliance.host.contract import expect
from appliance.host.vsphere import LoginRefused, VsphereConnector


def check_vsphere(vc: VsphereConnector, host: str, port: int, user: str, password: str,
                  nfs_path: str, vm_on: str, vm_off: str, closed_port: int) -> None:
    expect(LoginRefused, vc.connect, host, port, user, password + "-wrong", True)
    expect(LoginRefused, vc.connect, host, port, user, password, False)  # self-signed
    expect(Unavailable, vc.connect, host, closed_port, user, password, True, 5.0)
    s = vc.connect(host, port, user, password, True)
    try:
        found = s.vms_on([nfs_path + "/", "/no/such/export"],
                         ["naa.6001405ffffffffffffffffffffffff"])
        assert set(found) == {nfs_path + "/"}, found
        vms = {v.name: v for v in found[nfs_path + "/"]}
        assert vms[vm_on].powered_on and not vms[vm_off].powered_on, vms
        assert [v.name for v in found[nfs_path + "/"]] == sorted(vms)

        moid = vms[vm_on].moid
        task = s.start_snapshot(moid, "zds-contract", "contract check", quiesce=True,
                                memory=False)
        out = s.wait(task, 60)
        assert out.state == "success" and out.snapshot, out
        assert "zds-contract" in s.snapshots(moid)
        assert s.wait(task, 0).state == "success", "a finished task can be looked at again"
        gone = s.remove_snapshot(out.snapshot, 60)
        assert gone.state == "success", gone
        assert "zds-contract" not in s.snapshots(moid)
        again = s.remove_snapshot(out.snapshot, 10)
        assert again.state == "error" and again.error, again
        expect(NotFound, s.start_snapshot, "vm-999999", "x", "", True, False)
        expect(NotFound, s.wait, "task-nope", 0)
    finally:
        s.close()
