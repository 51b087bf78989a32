"""What a received stream may not do on this appliance: mount, share or execute.

A replication stream (``zfs send -p``) carries its dataset's properties, and a received
value outranks an inherited one: a hostile source could send ``mountpoint=/usr/local/sbin``
with ``canmount=on``, and the next import (boot, or an API export/import) would mount its
files over the appliance's own programs. Three places apply the same rules:

- the receive gate (:mod:`appliance.host.sshgate`) overrides them on the ``zfs receive``
  line of every file system it lets in (:data:`FS_EXCLUDE`, :data:`FS_OVERRIDE`) and, after
  every receive, checks what landed and resets anything left (a stream declared as a
  volume that was a file system);
- ``zds-replica-guard.service`` runs :func:`main` after the pools are imported (``zpool
  import -N``) and before ``zfs mount -a``, so a receive cut between landing and the
  gate's check is caught before anything mounts;
- the API's pool import does the same between ``zpool import -N`` and the mounts
  (:meth:`appliance.host.zfs.Zfs.import_pool`).

Standard library only: the gate and the boot unit import it without the engine.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

# -x on the receive: the value comes from the parent (inside the replica tree), not the
# stream; sharenfs/sharesmb would publish the replica through the kernel's servers
FS_EXCLUDE: tuple[str, ...] = ("mountpoint", "sharenfs", "sharesmb")
# -o on the receive: never mounted by ``zfs mount -a``; and if someone mounts it anyway,
# no set-uid programs, no programs at all, no device nodes
FS_OVERRIDE: dict[str, str] = {"canmount": "noauto", "setuid": "off", "exec": "off",
                               "devices": "off"}
# what the checks read (``zfs get``): every property above
CHECKED: tuple[str, ...] = ("type", "canmount", *FS_EXCLUDE, "setuid", "exec", "devices")

Runner = Callable[[Sequence[str]], tuple[int, str]]


@dataclass(frozen=True)
class Prop:
    dataset: str
    name: str
    value: str
    source: str


def parse_get(text: str) -> list[Prop]:
    """``zfs get -H -p -o name,property,value,source PROPS NAME...`` lines.

    Sample (OpenZFS 2.3)::

        tank/replicas/a\ttype\tfilesystem\t-
        tank/replicas/a\tcanmount\ton\treceived
        tank/replicas/a\tmountpoint\t/usr/local/sbin\treceived
        tank/replicas/a\tsharenfs\toff\tdefault
        tank/replicas/a\tsetuid\ton\tdefault
    """
    found: list[Prop] = []
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) == 4:
            found.append(Prop(*parts))
    return found


def fixes(props: Iterable[Prop], *, received_only: bool = False) -> list[list[str]]:
    """The ``zfs`` argvs that make these datasets harmless (empty when they are).

    For each file system: a mountpoint or share that does not come from the parent is
    inherited again (``zfs inherit`` also overrides a received value), and one that
    could mount by itself gets ``canmount=noauto``. With ``received_only`` (the boot
    sweep over whole pools) only values that came from a stream count, so datasets an
    admin or ZDS configured are never touched; the gate checks its own dataset fully.
    """
    by_ds: dict[str, dict[str, Prop]] = {}
    for p in props:
        by_ds.setdefault(p.dataset, {})[p.name] = p
    argvs: list[list[str]] = []
    for ds, got in by_ds.items():
        kind = got.get("type")
        if kind is not None and kind.value != "filesystem":
            continue  # volumes and snapshots never mount

        def suspect(name: str, harmless: tuple[str, ...], ds_props: dict[str, Prop] = got
                    ) -> bool:
            p = ds_props.get(name)
            if p is None or p.value in harmless:
                return False
            return p.source == "received" if received_only else \
                p.source in ("local", "received")

        inherits = [["zfs", "inherit", name, ds] for name in FS_EXCLUDE
                    if suspect(name, ("none", "legacy") if name == "mountpoint" else ("off",))]
        moved = any(a[2] == "mountpoint" for a in inherits)
        # the sweep reads only received values, so a default canmount=on is not in
        # ``got``: a file system whose mountpoint came from a stream is made noauto.
        # canmount goes first: ``zfs inherit mountpoint`` mounts a canmount=on file
        # system at its new place (seen on OpenZFS 2.3)
        canmount = got.get("canmount")
        mounts_itself = canmount.value == "on" if canmount is not None else moved
        if mounts_itself and (moved or not received_only or (
                canmount is not None and canmount.source == "received")):
            argvs.append(["zfs", "set", "canmount=noauto", ds])
        argvs += inherits
        if not received_only:
            for name, safe in FS_OVERRIDE.items():
                current = got.get(name)
                if name != "canmount" and current is not None and current.value != safe:
                    argvs.append(["zfs", "set", f"{name}={safe}", ds])
    return argvs


def check_dataset(dataset: str, run: Runner) -> list[str]:
    """After a receive into ``dataset``: resets whatever could mount, share or execute;
    returns what it changed (nothing for a volume, a missing dataset, a safe one)."""
    rc, out = run(["zfs", "get", "-H", "-p", "-o", "name,property,value,source",
                   ",".join(CHECKED), dataset])
    if rc != 0:
        return []  # not there (a cut receive keeps its partial state hidden)
    return _apply(fixes(parse_get(out)), run)


def sweep(pools: Sequence[str], run: Runner) -> list[str]:
    """Every file system of ``pools`` whose mount or share settings came from a stream
    and could mount it anywhere: reset. Returns what it changed."""
    if not pools:
        return []
    rc, out = run(["zfs", "get", "-H", "-p", "-r", "-t", "filesystem", "-s", "received",
                   "-o", "name,property,value,source", ",".join(CHECKED[1:]), *pools])
    if rc != 0:
        raise RuntimeError(f"zfs get failed: {out.strip()}")
    return _apply(fixes(parse_get(out), received_only=True), run)


def _apply(argvs: list[list[str]], run: Runner) -> list[str]:
    done: list[str] = []
    for argv in argvs:
        rc, out = run(argv)
        if rc != 0:
            raise RuntimeError(f"{' '.join(argv)} failed: {out.strip()}")
        done.append(" ".join(argv))
    return done


def run_command(argv: Sequence[str]) -> tuple[int, str]:
    """The runner of the gate and the boot unit: no shell, output and errors together."""
    try:
        proc = subprocess.run(list(argv), stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)
    return proc.returncode, proc.stdout + proc.stderr


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m appliance.host.replica_guard [POOL...]``: the boot sweep (every
    imported pool when none is named)."""
    pools = list(sys.argv[1:] if argv is None else argv)
    if not pools:
        rc, out = run_command(["zpool", "list", "-H", "-o", "name"])
        if rc != 0:
            print(f"zds-replica-guard: zpool list failed: {out.strip()}", file=sys.stderr)
            return 1
        pools = out.split()
    try:
        for line in sweep(pools, run_command):
            print(f"zds-replica-guard: {line} (the value came from a replication stream)")
    except RuntimeError as exc:
        print(f"zds-replica-guard: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
