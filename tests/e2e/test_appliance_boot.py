"""The booted appliance has its storage stack: ZFS module + tools, LIO, nfs-ganesha, rpcbind,
the zds command, the data disks, and an API answering on the forwarded 127.0.0.1 port."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from images import ovf
from tests.e2e.conftest import E2EAppliance

pytestmark = pytest.mark.e2e


def test_zfs_module_and_tools_match(appliance: E2EAppliance) -> None:
    out = appliance.check("modprobe zfs && zpool version")
    # Sample: "zfs-2.3.2-2~bpo12+2\nzfs-kmod-2.3.2-2~bpo12+2"
    lines = out.split()
    user = next(x for x in lines if x.startswith("zfs-") and not x.startswith("zfs-kmod"))
    kmod = next(x for x in lines if x.startswith("zfs-kmod-"))
    assert user.startswith("zfs-2.3"), out
    assert kmod.removeprefix("zfs-kmod-") == user.removeprefix("zfs-"), out


def test_the_boots_wait_for_zvol_links_is_bounded(appliance: E2EAppliance) -> None:
    # without the role's drop-in zvol_wait has no limit: at 255 zvols one boot waited
    # forever for two links udev never made, and the API (after it) never started
    out = appliance.check("systemctl show -p TimeoutStartUSec -p ActiveState "
                          "zfs-volume-wait.service")
    assert "TimeoutStartUSec=3min" in out and "ActiveState=active" in out, out


def test_the_boot_waits_for_one_online_link_not_all(appliance: E2EAppliance) -> None:
    # every wired NIC runs DHCP; without --any a NIC with no DHCP server (a replication or
    # cluster link, set up later) held network-online.target for 2 minutes at each boot
    out = appliance.check("systemctl show -p ExecStart -p ActiveState "
                          "systemd-networkd-wait-online.service")
    assert "--any" in out and "ActiveState=active" in out, out


def test_statd_starts_after_rpcbind_runs_so_a_slow_mount_cannot_time_it_out(
        appliance: E2EAppliance) -> None:
    # ordered on rpcbind's socket alone, rpc.statd's start timed out whenever the ZFS
    # mounts (before rpcbind.service) took over 90 s, and nfs-ganesha waited 90 s more
    out = appliance.check("systemctl show -p After -p ActiveState -p Result "
                          "nfs-ganesha-lock.service")
    after = next(line for line in out.splitlines() if line.startswith("After="))
    assert "rpcbind.service" in after.split("=", 1)[1].split(), out
    assert "ActiveState=active" in out and "Result=success" in out, out


def test_lio_target_in_configfs(appliance: E2EAppliance) -> None:
    appliance.check("modprobe target_core_mod && modprobe iscsi_target_mod")
    appliance.check("mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config")
    appliance.check("test -d /sys/kernel/config/target/iscsi")
    appliance.check("python3 -c 'import rtslib_fb; rtslib_fb.RTSRoot()'")


def test_nfs_ganesha_and_rpcbind_running(appliance: E2EAppliance) -> None:
    out = appliance.check("systemctl is-active nfs-ganesha.service rpcbind.service")
    assert out.split() == ["active", "active"], out
    # ganesha listens on the pinned NFS and mountd ports the host forwards to.
    listening = appliance.check("ss -Htln")
    assert ":2049 " in listening and ":20048 " in listening, listening


def test_kernel_nfs_server_is_carried_but_masked(appliance: E2EAppliance) -> None:
    """knfsd is in the image for bench/nfs_servers.py only: masked, not running, and
    the NFS and mountd ports belong to nfs-ganesha."""
    appliance.check("test -x /usr/sbin/rpc.nfsd && test -x /usr/sbin/exportfs")
    _rc, state = appliance.exec("systemctl is-enabled nfs-server.service nfs-mountd.service")
    assert state.split() == ["masked", "masked"], state
    _rc, active = appliance.exec("systemctl is-active nfs-server.service")
    assert active.strip() == "inactive", active
    _rc, threads = appliance.exec("cat /proc/fs/nfsd/threads 2>/dev/null || echo 0")
    assert threads.strip() in ("", "0"), threads  # no kernel nfsd threads
    owners = appliance.check("ss -Htlnp 'sport = :2049 or sport = :20048'")
    assert owners.count("ganesha") >= 2, owners


def test_cluster_stack_is_carried_but_inert(appliance: E2EAppliance) -> None:
    """corosync, pacemaker, crmsh, fence_scsi, the watchdog daemon and the quorum
    device's client and arbiter are in the image for HA pairs (ansible role ha); an
    appliance that is not in a pair runs none of them, and without a corosync.conf
    (Debian's one-node sample is removed) corosync cannot even start."""
    appliance.check("command -v corosync pacemakerd crm fence_scsi sg_persist iscsiadm "
                    "watchdog corosync-qdevice corosync-qnetd")
    units = "corosync pacemaker logd watchdog corosync-qdevice corosync-qnetd"
    _rc, state = appliance.exec(f"systemctl is-enabled {units}")
    assert state.split() == ["disabled"] * 6, state
    _rc, active = appliance.exec(f"systemctl is-active {units}")
    assert active.split() == ["inactive"] * 6, active
    # the arbiter's CA is made where it runs (ansible playbooks/qnetd.yml): the one the
    # package's install made in the image build would be the same in every appliance
    appliance.check("test ! -e /etc/corosync/qnetd/nssdb")
    appliance.check("test ! -e /etc/corosync/corosync.conf")
    # the ha role's firewall drop-in is loaded with base's table
    assert "corosync" in appliance.check("nft list chain inet zds input")


def test_the_guest_runs_on_the_hosts_clock_and_no_calendar_timer_fired(
        appliance: E2EAppliance) -> None:
    """Holds for a booted guest and for one restored from a saved state (conftest
    warm_state): the guest's clock is the host's, no unit failed, and the monthly scrub
    never started. A restored guest's clock jumps forward by the state's age; without its
    timers restarted around the jump, every calendar timer it passes fires at once."""
    before = time.time()
    _rc, out = appliance.exec("date +%s.%N; systemctl is-system-running; "
                              "systemctl show -p InactiveExitTimestampMonotonic "
                              "zds-scrub.service; zpool status tank | grep -c 'scan:' || true")
    after = time.time()
    guest_now, state, scrub_started, scans = out.split()[:4]
    assert before - 5 <= float(guest_now) <= after + 5, (before, out)
    assert state == "running", out
    assert (scrub_started, scans) == ("InactiveExitTimestampMonotonic=0", "0"), out


def test_zed_forks_no_shell_per_property_change_and_still_logs_pool_events(
        appliance: E2EAppliance) -> None:
    """Debian's ZED runs a syslog shell for every event and a list-cache shell for every
    history_event, one per property of a `zfs create`: about 2 s of guest CPU per datastore
    under emulation (role zfs, zfs__zed_quiet). On a throw-away file pool: creating a
    dataset with 12 properties costs ZED's children under 0.2 s of CPU, while the pool's
    creation and scrub still reach the journal."""
    # a pool name of this run's own: the journal is searched for it, not from a start time
    pool = f"zedcheck{os.getpid() % 10000}"
    zed_children_ticks = ("awk '{print $16 + $17}' /proc/$(systemctl show -p MainPID "
                          "--value zfs-zed)/stat")
    props = " ".join(f"-o zds:p{i}=v{i}" for i in range(12))
    try:
        out = appliance.check(
            f"set -e; truncate -s 96M /var/tmp/{pool}.img; "
            f"zpool create -m none {pool} /var/tmp/{pool}.img; sleep 2; "
            f"a=$({zed_children_ticks}); zfs create {props} {pool}/ds; sleep 3; "
            f"b=$({zed_children_ticks}); zpool scrub -w {pool}; echo \"ticks $a $b\"",
            timeout=120)
        ticks = next(line.split() for line in out.splitlines() if line.startswith("ticks "))
        # with the stock zedlets the same create cost them 123 ticks (1/100 s) on this image
        assert int(ticks[2]) - int(ticks[1]) < 20, out
        wanted = [f"class={event} pool='{pool}'" for event in ("pool_create", "scrub_finish")]
        logged = ""
        for _ in range(30):  # ZED handles events a moment after they happen
            # by syslog identifier, not unit (-u): journald learns a sender's unit from
            # /proc, and a zedlet's logger may be gone before it looks (systemd issue
            # 2913); a loaded CI run and a local one missed pool_create with -u
            logged = appliance.check(f"journalctl -t zed --no-pager | grep -F \"'{pool}'\" "
                                     "|| true")
            if all(line in logged for line in wanted):
                break
            time.sleep(1)
        assert all(line in logged for line in wanted), logged
        assert "class=history_event" not in logged, logged
    finally:
        appliance.exec(f"zpool destroy -f {pool}; rm -f /var/tmp/{pool}.img")


def test_data_disks_have_their_serials(appliance: E2EAppliance) -> None:
    for i in (0, 1):
        appliance.check(f"test -b /dev/disk/by-id/virtio-zdsdata{i}")


def test_zds_command_on_path(appliance: E2EAppliance) -> None:
    appliance.check("command -v zds && test -x /opt/zds/venv/bin/python")


def test_admin_token_passed_by_fw_cfg(appliance: E2EAppliance) -> None:
    out = appliance.check("modprobe qemu_fw_cfg; "
                          "cat /sys/firmware/qemu_fw_cfg/by_name/opt/zds/admin-token/raw")
    assert out.strip() == appliance.admin_token


def test_api_health_answers_on_forwarded_port(appliance: E2EAppliance) -> None:
    h = appliance.vm.health(timeout=10)
    assert h is not None, f"nothing on {appliance.api_url}; serial log {appliance.serial_log}"
    assert h[0] == 200, h


def test_image_artefacts(appliance: E2EAppliance) -> None:
    d = appliance.image_dir
    info = json.loads(subprocess.run(["qemu-img", "info", "--output=json", str(d / "zds.qcow2")],
                                     capture_output=True, text=True, check=True).stdout)
    assert info["format"] == "qcow2" and "backing-filename" not in info
    assert info["virtual-size"] == (d / "zds.raw").stat().st_size
    ova = ovf.read_ova(d / "zds.ova")
    assert (ova.cpus, ova.memory_mib, ova.nic, ova.scsi) == (2, 4096, "VMXNET3", "VirtualSCSI")
    assert ova.disks["system"] == (d / "zds.raw").stat().st_size
    manifest = json.loads((d / "manifest.json").read_text())
    assert manifest["ansible"] is True


def test_root_fs_checked_at_boot_and_mounted_rw(appliance: E2EAppliance) -> None:
    # The initrd carries fsck.ext4 (FSTYPE=ext4 in images/overlay/.../conf.d/zds.conf).
    log = appliance.serial_log.read_bytes().decode(errors="replace")
    assert "fsck not present" not in log
    out = appliance.check("findmnt -n -o FSTYPE,OPTIONS /")
    assert out.split()[0] == "ext4" and "rw" in out.split()[1].split(","), out


def test_initrd_is_trimmed_but_has_the_root_disk_drivers(appliance: E2EAppliance) -> None:
    listing = appliance.check("lsinitramfs /boot/initrd.img-$(uname -r)")
    for module in ("virtio_blk.ko", "virtio_scsi.ko", "nvme.ko", "ahci.ko", "vmw_pvscsi.ko",
                   "sd_mod.ko", "ext4.ko"):
        assert f"/{module}" in listing, f"{module} missing from the initrd"
    assert "sbin/fsck.ext4" in listing
    assert "/zfs.ko" not in listing  # the root is ext4; ZFS loads from the real root
    size = int(appliance.check("stat -c %s /boot/initrd.img-$(uname -r)"))
    assert size < 16 * 1024 * 1024, size  # MODULES=most would be ~36 MB
