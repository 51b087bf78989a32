"""A daemon whose unit runs but that stopped answering (nfs-ganesha hung, or its DBus name
lost) is restarted by the watcher after ``daemon_restart_after`` seconds, and the reconcile
gives it its exports back at once (appliance/watcher.py). The real adapter's commands are
checked with a recording runner; tests/e2e/test_degraded_e2e.py stops the real ganesha
with SIGSTOP on the appliance."""

from __future__ import annotations

from pathlib import Path

from appliance.host.ganesha import Ganesha
from appliance.host.run import RecordingRunner
from appliance.services.datastores import DatastoreRequest
from appliance.watcher import Watcher
from tests.unit.conftest import Rig

NFS = DatastoreRequest(protocol="nfs3", size="128M",
                       nfs_clients=[{"match": "192.0.2.0/24", "access": "rw"}])


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def watcher(rig: Rig, clock: Clock, after: float = 60.0) -> Watcher:
    return Watcher(rig.engine.reconciler, rig.engine.datastores.finish_interrupted,
                   health_interval=0, reconcile_interval=0, restart_after=after, clock=clock)


def test_a_silent_ganesha_is_restarted_after_the_period_and_serves_again(rig: Rig) -> None:
    rig.engine.datastores.put("ds", NFS)
    clock = Clock()
    w = watcher(rig, clock)
    rig.ganesha.down = True  # hung: its process runs (the unit is active), no answer
    w.check()
    clock.now += 59.0
    w.check()
    assert rig.ganesha.restarts == 0  # not before the period
    clock.now += 1.0
    w.check()
    assert rig.ganesha.restarts == 1 and [t for t, _ in w.restarts] == ["nfs"]
    assert rig.ganesha.list_exports() == []  # a restarted ganesha has nothing live...
    w.repair()  # ...until the round the restart asked for
    assert rig.engine.datastores.get("ds").serving
    assert rig.engine.reconciler.drift() == []


def test_an_answer_in_between_starts_the_period_again(rig: Rig) -> None:
    clock = Clock()
    w = watcher(rig, clock)
    rig.ganesha.down = True
    w.check()
    clock.now += 50.0
    rig.ganesha.down = False
    w.check()
    rig.ganesha.down = True
    clock.now += 50.0
    w.check()
    clock.now += 50.0
    w.check()
    assert rig.ganesha.restarts == 0


def test_a_stopped_unit_is_left_alone_and_tried_again_a_period_later(rig: Rig) -> None:
    """Stopped on purpose (``zds nfs-server knfsd`` masks ganesha) or failed (systemd's
    Restart= is on it): not the watcher's to restart."""
    clock = Clock()
    w = watcher(rig, clock)
    rig.ganesha.down = rig.ganesha.stopped = True
    w.check()
    clock.now += 60.0
    assert w.restart_silent({"nfs": False}) == []
    rig.ganesha.stopped = False  # now running and still silent
    clock.now += 30.0
    assert w.restart_silent({"nfs": False}) == []  # within the next period
    clock.now += 30.0
    assert w.restart_silent({"nfs": False}) == ["nfs"]


def test_zero_turns_it_off_and_kernel_targets_have_nothing_to_restart(rig: Rig) -> None:
    clock = Clock()
    off = watcher(rig, clock, after=0.0)
    rig.ganesha.down = True
    off.check()
    clock.now += 3600.0
    off.check()
    assert rig.ganesha.restarts == 0
    w = watcher(rig, clock)
    w.restart_silent({"iscsi": False, "nvme-tcp": False})
    clock.now += 61.0
    assert w.restart_silent({"iscsi": False, "nvme-tcp": False}) == []


def systemd(state: str) -> RecordingRunner:
    """systemctl answering ``is-active`` with ``state`` (exit 3 for anything but active)."""
    runner = RecordingRunner()
    runner.on(["systemctl", "is-active"], stdout=f"{state}\n",
              returncode=0 if state == "active" else 3)
    return runner


def test_the_real_adapter_restarts_only_an_active_unit(tmp_path: Path) -> None:
    running = systemd("active")
    assert Ganesha(running, tmp_path).restart_stuck()
    assert running.calls == [("systemctl", "is-active", "nfs-ganesha.service"),
                             ("systemctl", "restart", "nfs-ganesha.service")]
    for state in ("inactive", "failed", "activating"):
        other = systemd(state)
        assert not Ganesha(other, tmp_path).restart_stuck()
        assert other.calls == [("systemctl", "is-active", "nfs-ganesha.service")]
    assert not Ganesha(running, tmp_path, unit=None).restart_stuck()


def test_a_daemon_that_does_not_answer_is_one_drift_item_wherever_drift_is_read(
        rig: Rig) -> None:
    """GET /system/drift and the drift a full reconcile records (health's count) decide
    alike: a silent ganesha is one "unknown" item, not one failure per NFS datastore it
    could not be given; an iSCSI datastore's own drift still shows."""
    for name in ("a", "b", "c"):
        rig.engine.datastores.put(name, NFS)
    lun = rig.engine.datastores.put("lun", DatastoreRequest(
        protocol="iscsi", size="64M", initiators=["iqn.2026-11.org.example:h1"]))[0]
    rig.ganesha.down = True
    rig.lio.remove_target(lun.record.iqn or "")
    report = rig.engine.reconciler.full()
    assert report.failed  # the exports could not be given: the report keeps each one
    recorded = [(i.kind, i.subject) for i in rig.engine.reconciler.status.drift]
    assert recorded == [("unknown", "nfs-ganesha")], recorded
    rig.lio.remove_target(lun.record.iqn or "")
    asked = sorted((i.kind, i.subject) for i in rig.engine.reconciler.drift())
    assert ("unknown", "nfs-ganesha") in asked and len(
        [k for k, _ in asked if k == "unknown"]) == 1, asked
    assert any(k == "apply_target" for k, _ in asked), asked
