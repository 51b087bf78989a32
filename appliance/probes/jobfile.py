"""fio job files (INI text) from a profile, its resolved parameters and a target.

A target is a directory (files are created inside it) or a block device. Paths are
checked so nothing but a plain absolute path reaches the job file: fio treats ':' as a
list separator, and a newline would start a new option.

Example (``vm-mixed-4k`` on /srv/scratch with default parameters)::

    ; zds probe vm-mixed-4k
    [global]
    ioengine=libaio
    direct=1
    ...
    directory=/srv/scratch

    [w1]
    rw=randrw
    ...
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from appliance.errors import InvalidInput
from appliance.probes import semantics
from appliance.probes.params import Params
from appliance.probes.profiles import Profile, Step

_SAFE_PATH = re.compile(r"/[A-Za-z0-9._+@/-]*")
LOG_AVG_MSEC = 1000


@dataclass(frozen=True)
class FioTarget:
    """Where a probe does its I/O: a directory (``is_device=False``) or a block device."""

    path: str
    is_device: bool = False

    def __post_init__(self) -> None:
        p = self.path
        if not _SAFE_PATH.fullmatch(p) or "/../" in f"{p}/" or "//" in p:
            raise InvalidInput(
                f"probe path {p!r}: use a plain absolute path of letters, digits and . _ + @ - /"
            )


def render(profile: Profile, params: Params, target: FioTarget,
           log_prefix: str | None = None, io: semantics.FioIo | None = None,
           steps: Sequence[Step] | None = None) -> str:
    """The job file for ``profile`` with ``params`` against ``target``.

    ``log_prefix`` (an absolute path prefix) adds per-second IOPS and latency logs, one
    set per section: ``{log_prefix}.{section}_iops.N.log`` etc. ``io`` is fio's direct=
    and sync= for the target's layer and the probe's semantics (default: the requested
    semantics on a generic file system or device); ``steps`` renders only those steps
    of the plan (one phase of a probe whose steps differ in semantics).
    """
    if profile.kind != "fio":
        raise InvalidInput(f"profile {profile.name} is not an fio profile")
    if target.is_device and profile.needs_directory:
        raise InvalidInput(
            f"profile {profile.name} needs a file system (a file set of its own); "
            "run it on a directory target (local dataset, nfs, or a mounted client path)"
        )
    if log_prefix is not None:
        FioTarget(log_prefix)  # same path rules
    if io is None:
        layer = "block" if target.is_device else "fs"
        io = semantics.fio_io(semantics.requested(params, ""), layer)
    lines = [f"; zds probe {profile.name}", "[global]"]
    for key, value in [*profile.global_options(params), *io.options()]:
        if target.is_device and key == "filename_format":
            continue
        lines.append(f"{key}={value}")
    if log_prefix is not None:
        lines.append(f"log_avg_msec={LOG_AVG_MSEC}")
    lines.append(f"{'filename' if target.is_device else 'directory'}={target.path}")
    for step in (profile.plan(params) if steps is None else steps):
        lines.append("")
        lines.append(f"[{step.name}]")
        for key, value in step.options:
            if target.is_device and key == "filename":
                continue
            lines.append(f"{key}={value}")
        if log_prefix is not None:
            lines.append(f"write_iops_log={log_prefix}.{step.name}")
            lines.append(f"write_lat_log={log_prefix}.{step.name}")
    return "\n".join(lines) + "\n"
