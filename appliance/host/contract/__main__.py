"""Run the host adapter contract checks against the REAL adapters (inside the appliance).

    python -m appliance.host.contract [--zfs] [--lio] [--nvmet] [--zfs-pool-disks D1 D2 D3 D4]
                                      [--workdir /var/tmp/zds-contract] [--only CHECK]
    python -m appliance.host.contract --knfsd     # with knfsd serving (zds nfs-server knfsd)

Without ``--zfs-pool-disks`` it makes five sparse 512 MiB files in ``--workdir`` and
builds its scratch pools (``zdsct`` for the pool checks, ``zdsctdev`` for the device
checks, ``zdsctds`` for datasets) on them; everything is destroyed at the end. With four
given disks the device checks (which need four unused ones) are left out. ``--lio``
exports two sparse zvols of the scratch pool through LIO, ``--nvmet`` through the
kernel NVMe target (on a port of its own, 127.0.0.1:4421). ``--send`` (part of ``--zfs``)
checks replication's ``zfs send | zfs receive`` adapter on the scratch pool, with a
64 MiB pool on a further file as the full target. ``--knfsd`` runs only the NFS export
contract on the kernel NFS server (it must be the one running), exporting small tmpfs
mounts in ``--workdir``. Prints one line per check; exit status 0 only if all pass.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from appliance.host.contract import lio_checks, nvmet_checks, zfs_checks, zfs_send_checks
from appliance.host.lio import Lio
from appliance.host.nvmet import Nvmet
from appliance.host.run import SubprocessRunner
from appliance.host.ssh import OpenSsh
from appliance.host.zfs import PoolLayout, VdevSpec, Zfs, ZfsHost
from appliance.host.zfs_send import ZfsSend

MiB = 1 << 20
DS_POOL = "zdsctds"
TINY_POOL = "zdsctrx"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m appliance.host.contract")
    ap.add_argument("--zfs", action="store_true", help="run the ZFS checks (default)")
    ap.add_argument("--lio", action="store_true", help="also run the LIO checks")
    ap.add_argument("--nvmet", action="store_true",
                    help="also run the NVMe target checks")
    ap.add_argument("--send", action="store_true",
                    help="only the zfs send/receive checks (--zfs includes them)")
    ap.add_argument("--knfsd", action="store_true",
                    help="only the NFS export checks, on knfsd (which must be running)")
    ap.add_argument("--zfs-pool-disks", nargs=4, metavar="DISK",
                    help="four unused equal-size disks instead of sparse files")
    ap.add_argument("--workdir", default="/var/tmp/zds-contract")
    ap.add_argument("--file-size", type=int, default=512 * MiB)
    ap.add_argument("--json", action="store_true", help="print a JSON summary at the end")
    ap.add_argument("--only", action="append", metavar="CHECK",
                    help="run only this check (e.g. zfs.snapshot_batch_and_holds); "
                         "repeatable")
    args = ap.parse_args(argv)
    run_zfs = args.zfs or not (args.lio or args.send or args.nvmet)
    run_send = run_zfs or args.send

    workdir = Path(args.workdir)
    if args.knfsd:
        return _run_knfsd(workdir, args.json)
    if args.zfs_pool_disks:
        disks = list(args.zfs_pool_disks)
        zfs = Zfs(SubprocessRunner())
    else:
        workdir.mkdir(parents=True, exist_ok=True)
        disks = []
        for i in range(5):
            path = workdir / f"disk{i}.img"
            with open(path, "wb") as f:
                f.truncate(args.file_size)  # sparse
            disks.append(str(path))
        zfs = Zfs(SubprocessRunner(), import_dirs=(str(workdir),))
    missing = str(workdir / "missing.img")

    results: list[dict[str, object]] = []

    def run(name: str, fn: Callable[[], object]) -> bool:
        if args.only and name not in args.only and name not in (
                "zfs.available", "zfs.scratch_pool"):
            return True
        started = time.monotonic()
        try:
            fn()
        except Exception as exc:  # report every failure, keep going
            results.append({"check": name, "ok": False, "error": repr(exc),
                            "seconds": round(time.monotonic() - started, 2)})
            print(f"FAIL {name}: {exc!r}", flush=True)
            traceback.print_exc()
            return False
        results.append({"check": name, "ok": True,
                        "seconds": round(time.monotonic() - started, 2)})
        print(f"ok   {name} ({time.monotonic() - started:.1f} s)", flush=True)
        return True

    ds_pool_ready = False
    try:
        if not run("zfs.available", lambda: zfs_checks.check_available(zfs)):
            return _finish(results, args.json)
        ds_pool_ready = run("zfs.scratch_pool", lambda: zfs.create_pool(
            DS_POOL, PoolLayout(data=(VdevSpec("disk", (disks[-1],)),)), {},
            {"compression": "lz4"}))
        if run_zfs:
            run("zfs.pools", lambda: zfs_checks.check_pools(zfs, disks[:3], missing))
            if len(disks) >= 5:
                run("zfs.devices", lambda: zfs_checks.check_devices(zfs, disks[:4], missing))
            if ds_pool_ready:
                run("zfs.filesystems", lambda: zfs_checks.check_filesystems(zfs, DS_POOL))
                run("zfs.volumes", lambda: zfs_checks.check_volumes(
                    zfs, DS_POOL, os.path.exists, os.unlink))
                run("zfs.snapshots", lambda: zfs_checks.check_snapshots(zfs, DS_POOL))
                run("zfs.snapshot_batch_and_holds",
                    lambda: zfs_checks.check_snapshot_batch_and_holds(zfs, DS_POOL))
                run("zfs.listing_and_snapshot_counts",
                    lambda: zfs_checks.check_listing_and_snapshot_counts(zfs, DS_POOL))
        if run_send and ds_pool_ready:
            _run_send(zfs, workdir, run)
        if args.lio and ds_pool_ready:
            _run_lio(zfs, run)
        if args.nvmet and ds_pool_ready:
            _run_nvmet(zfs, run)
    finally:
        if ds_pool_ready:
            if args.nvmet:
                try:
                    nvmet = Nvmet(SubprocessRunner())
                    nvmet_checks.cleanup(nvmet)
                    nvmet.remove_port(nvmet_checks.PORT_ID)
                except Exception as exc:
                    print(f"cleanup of the NVMe target failed: {exc!r}", flush=True)
            if args.lio:
                try:
                    lio_checks.cleanup(Lio())
                except Exception as exc:
                    print(f"cleanup of LIO failed: {exc!r}", flush=True)
            try:
                zfs.destroy_pool(DS_POOL)
            except Exception as exc:
                print(f"cleanup: destroying {DS_POOL} failed: {exc!r}", flush=True)
        if not args.zfs_pool_disks:
            for d in disks:
                Path(d).unlink(missing_ok=True)
    return _finish(results, args.json)


def random_writer(zfs: ZfsHost) -> zfs_send_checks.Write:
    """Writes incompressible bytes into a new file in a filesystem's mountpoint."""
    counter = [0]

    def write(dataset: str, nbytes: int) -> None:
        info = zfs.get_dataset(dataset, ("mountpoint",))
        assert info is not None and info.prop("mountpoint").startswith("/"), dataset
        counter[0] += 1
        path = Path(info.prop("mountpoint")) / f"data{counter[0]}.bin"
        with open(path, "wb") as f:
            left = nbytes
            while left > 0:
                chunk = min(left, 1 << 20)
                f.write(os.urandom(chunk))
                left -= chunk
            f.flush()
            os.fsync(f.fileno())

    return write


def _run_send(zfs: Zfs, workdir: Path, run: Callable[[str, Callable[[], object]], bool]
              ) -> None:
    runner = SubprocessRunner()
    zsend = ZfsSend(runner, OpenSsh(runner, workdir / "ssh"))
    tiny = workdir / "tiny.img"
    workdir.mkdir(parents=True, exist_ok=True)
    with open(tiny, "wb") as f:
        f.truncate(64 * MiB)
    made = run("send.tiny_pool", lambda: zfs.create_pool(
        TINY_POOL, PoolLayout(data=(VdevSpec("disk", (str(tiny),)),)), {}, {}))
    try:
        write = random_writer(zfs)
        run("send.cursor", lambda: zfs_send_checks.check_cursor(zfs, zsend, DS_POOL))
        run("send.streams", lambda: zfs_send_checks.check_streams(zfs, zsend, DS_POOL, write))
        if made:
            run("send.full_target", lambda: zfs_send_checks.check_full_target(
                zfs, zsend, DS_POOL, TINY_POOL, write))
    finally:
        if made:
            try:
                zfs.destroy_pool(TINY_POOL)
            except Exception as exc:
                print(f"cleanup: destroying {TINY_POOL} failed: {exc!r}", flush=True)
        tiny.unlink(missing_ok=True)


def _run_lio(zfs: Zfs, run: Callable[[str, Callable[[], object]], bool]) -> None:
    lio = Lio()
    devices: list[str] = []

    def make_zvols() -> None:
        for i in range(2):
            name = f"{DS_POOL}/lio{i}"
            zfs.create_volume(name, 64 * MiB, sparse=True, properties={})
            devices.append(zfs.wait_for_device(name, timeout=60))

    if not run("lio.zvols", make_zvols):
        return
    if not run("lio.available", lambda: lio_checks.check_available(lio)):
        return
    run("lio.apply_read_back", lambda: lio_checks.check_apply_read_back(lio, devices))
    run("lio.errors", lambda: lio_checks.check_errors(lio, devices,
                                                      f"/dev/zvol/{DS_POOL}/missing"))


def _run_nvmet(zfs: Zfs, run: Callable[[str, Callable[[], object]], bool]) -> None:
    nvmet = Nvmet(SubprocessRunner())
    devices: list[str] = []

    def make_zvols() -> None:
        for i in range(2):
            name = f"{DS_POOL}/nvmet{i}"
            zfs.create_volume(name, 64 * MiB, sparse=True, properties={})
            devices.append(zfs.wait_for_device(name, timeout=60))

    if not run("nvmet.zvols", make_zvols):
        return
    if not run("nvmet.available", lambda: nvmet_checks.check_available(nvmet)):
        return
    run("nvmet.port", lambda: nvmet_checks.check_port(nvmet))
    run("nvmet.apply_read_back", lambda: nvmet_checks.check_apply_read_back(nvmet, devices))
    run("nvmet.errors", lambda: nvmet_checks.check_errors(
        nvmet, devices, f"/dev/zvol/{DS_POOL}/missing"))


def _run_knfsd(workdir: Path, as_json: bool) -> int:
    """The GaneshaHost contract on knfsd; each exported directory is a tmpfs mount, as
    knfsd exports only mount points (the ``mp`` option ZDS gives every export)."""
    from appliance.host.contract import ganesha_checks
    from appliance.host.knfsd import Knfsd

    runner = SubprocessRunner()
    mounts: list[Path] = []

    def make_dir(name: str) -> str:
        path = workdir / "knfsd" / name
        path.mkdir(parents=True, exist_ok=True)
        if not os.path.ismount(path):
            runner.run(["mount", "-t", "tmpfs", "-o", "size=1m", "zds-contract", str(path)])
            mounts.append(path)
        return str(path)

    results: list[dict[str, object]] = []
    started = time.monotonic()
    try:
        ganesha_checks.check_contract(Knfsd(runner), make_dir,
                                      lambda name: str(workdir / "knfsd-missing" / name))
        results.append({"check": "knfsd.contract", "ok": True,
                        "seconds": round(time.monotonic() - started, 2)})
        print(f"ok   knfsd.contract ({time.monotonic() - started:.1f} s)", flush=True)
    except Exception:
        results.append({"check": "knfsd.contract", "ok": False,
                        "error": traceback.format_exc()[-2000:]})
        print(f"FAIL knfsd.contract\n{traceback.format_exc()}", flush=True)
    finally:
        for path in mounts:
            runner.run(["umount", str(path)], check=False)
    return _finish(results, as_json)


def _finish(results: list[dict[str, object]], as_json: bool) -> int:
    failed = [r for r in results if not r["ok"]]
    if as_json:
        print(json.dumps({"passed": len(results) - len(failed), "failed": len(failed),
                          "results": results}))
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed", flush=True)
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main())
