"""Client mode: the same profile run on a hypervisor host or guest (``zds probe run
--server URL --token T --datastore D PROFILE --path P``), the result posted to the API.

The probe writes only inside a scratch directory it creates under ``--path`` (removed
afterwards, also on failure or Ctrl-C), refuses to fill that file system past 80%, and
runs on a raw block device only when explicitly asked (``--device`` + ``--force``).
"""

from __future__ import annotations

import contextlib
import platform
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.errors import InsufficientSpace, InvalidInput
from appliance.probes import profiles
from appliance.probes.execute import CancelToken, ProbeExecutor, ProbeTarget, new_id
from appliance.probes.model import ProbeResult
from appliance.probes.safety import MARGIN, MAX_POOL_FILL, footprint, human_size_approx

FsUsage = Callable[[str], tuple[int, int]]  # path -> (total, used) bytes


@dataclass(frozen=True)
class ClientTools:
    """What client mode needs of the machine it runs on (real: :func:`real_client_tools`)."""

    executor: ProbeExecutor
    usage: FsUsage
    make_dir: Callable[[str], None]
    remove_tree: Callable[[str], None]
    is_block: Callable[[str], bool]
    hostname: str | None = None  # None: this machine's name


def real_client_tools(workdir: str) -> ClientTools:
    """fio, iperf3 and the file-system helpers of this machine (appliance.host)."""
    from appliance.host.factory import real_client_hosts
    from appliance.host.localfs import fs_usage, is_block_device

    hosts, fs = real_client_hosts()
    executor = ProbeExecutor(hosts.fio, workdir, stats=hosts.stats, iperf=hosts.iperf,
                             sync=hosts.sync)
    return ClientTools(executor, fs_usage, fs.make_dir, fs.remove_tree, is_block_device)


def run_on_client(
    executor: ProbeExecutor,
    profile_name: str,
    overrides: Mapping[str, object],
    datastore: str,
    *,
    path: str | None = None,
    device: str | None = None,
    force: bool = False,
    usage: FsUsage,
    make_dir: Callable[[str], None],
    remove_tree: Callable[[str], None],
    is_dir: Callable[[str], bool] = lambda p: Path(p).is_dir(),
    is_block: Callable[[str], bool] = lambda p: False,
    cancel: CancelToken | None = None,
    hostname: str | None = None,
    appliance_host: str = "127.0.0.1",
) -> ProbeResult:
    """Runs ``profile_name`` here; rtt/net-throughput measure the path to
    ``appliance_host`` (the --server's host) and need no path."""
    profile = profiles.get(profile_name)
    params = profile.resolve(dict(overrides))
    probe_id = new_id()
    host = hostname or platform.node()
    settings: dict[str, Any] = {"client": {"hostname": host, "kernel": platform.release(),
                                           "python": platform.python_version()}}
    if profile.kind != "fio":
        target = ProbeTarget("client", datastore, host=appliance_host,
                             details={"client": host})
        return executor.run(profile.name, overrides, target, settings=settings, cancel=cancel,
                            result_id=probe_id)
    if (path is None) == (device is None):
        raise InvalidInput("give exactly one of --path (a directory on the datastore) or "
                           "--device (a block device on it)")
    if device is not None:
        if not force:
            raise InvalidInput(f"--device {device} overwrites data on it: add --force")
        if not is_block(device):
            raise InvalidInput(f"{device} is not a block device")
        target = ProbeTarget("client", datastore, device, is_device=True,
                             details={"client": host})
        return executor.run(profile.name, overrides, target, settings=settings, cancel=cancel,
                            result_id=probe_id)
    assert path is not None
    if not is_dir(path):
        raise InvalidInput(f"--path {path} is not a directory")
    need = footprint(profile, params) + MARGIN
    total, used = usage(path)
    if total and (used + need) > total * MAX_POOL_FILL:
        raise InsufficientSpace(
            f"probe needs {human_size_approx(need)} in {path}, which would fill it to "
            f"{100.0 * (used + need) / total:.0f}% (limit {MAX_POOL_FILL:.0%}); "
            "use a smaller size= override")
    scratch = str(Path(path) / f"zds-probe-{probe_id}")
    make_dir(scratch)
    try:
        target = ProbeTarget("client", datastore, scratch,
                             details={"client": host, "client_path": path})
        return executor.run(profile.name, overrides, target, settings=settings,
                            cancel=cancel, result_id=probe_id)
    finally:
        with contextlib.suppress(OSError):
            remove_tree(scratch)
