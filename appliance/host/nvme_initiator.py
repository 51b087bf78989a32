"""nvme-cli on the appliance: connect to its own probe subsystem over loopback.

The host NQN is ``/etc/nvme/hostnqn`` (nvme-cli's package writes one at install; made
with ``nvme gen-hostnqn`` when missing)::

    nqn.2014-08.org.nvmexpress:uuid:5b1e0c2a-7d4f-4e8b-9a61-0c3f2d8e7b14

Connect without discovery, to an explicit address, then find the namespace's block
device by the subsystem NQN sysfs shows for it (``/sys/block/nvme1n1/device/subsysnqn``;
with native multipath ``device`` is the subsystem, without it the controller: both
have ``subsysnqn``)::

    nvme connect -t tcp -a 127.0.0.1 -s 4420 -n NQN -q HOSTNQN
    nvme disconnect -n NQN
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from appliance.errors import HostCommandFailed, Unavailable
from appliance.host.run import Runner

HOSTNQN_FILE = "/etc/nvme/hostnqn"


class NvmeInitiator(Protocol):
    """Connects this machine to an NVMe/TCP subsystem (:class:`NvmeCli`; fakes)."""

    def host_nqn(self) -> str: ...

    def connect(self, nqn: str, host: str, port: int, timeout: float = 30.0) -> str: ...

    def disconnect(self, nqn: str) -> None: ...


def find_device(sys_block: str, nqn: str) -> str | None:
    """The block device (``/dev/nvmeXnY``) of subsystem ``nqn``'s namespace, or None."""
    for name in sorted(os.listdir(sys_block)) if os.path.isdir(sys_block) else []:
        if not re.fullmatch(r"nvme\d+n\d+", name):
            continue
        try:
            with open(os.path.join(sys_block, name, "device", "subsysnqn")) as f:
                if f.read().strip() == nqn:
                    return f"/dev/{name}"
        except OSError:
            continue
    return None


class NvmeCli:
    def __init__(self, runner: Runner, hostnqn_file: str = HOSTNQN_FILE,
                 sys_block: str = "/sys/block",
                 exists: Callable[[str], bool] = os.path.exists) -> None:
        self._runner = runner
        self._file = hostnqn_file
        self._sys_block = sys_block
        self._exists = exists

    def host_nqn(self) -> str:
        """The host NQN; made (as nvme-cli's postinst would) when the file is missing."""
        path = Path(self._file)
        try:
            name = path.read_text().strip()
        except FileNotFoundError:
            name = ""
        except OSError as exc:
            raise Unavailable(f"cannot read {self._file}: {exc}") from None
        if name:
            return name
        made = self._runner.run(["nvme", "gen-hostnqn"], timeout=10).stdout.strip()
        if not made.startswith("nqn."):
            raise Unavailable(f"nvme gen-hostnqn printed no NQN: {made!r}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(made + "\n")
        return made

    def connect(self, nqn: str, host: str, port: int, timeout: float = 30.0) -> str:
        self._runner.run(["nvme", "connect", "-t", "tcp", "-a", host, "-s", str(port),
                          "-n", nqn, "-q", self.host_nqn()], timeout=timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            device = find_device(self._sys_block, nqn)
            if device is not None and self._exists(device):
                return device
            time.sleep(0.2)
        self.disconnect(nqn)
        raise HostCommandFailed(f"connected to {nqn} but no namespace device appeared "
                                f"within {timeout:.0f} s")

    def disconnect(self, nqn: str) -> None:
        self._runner.run(["nvme", "disconnect", "-n", nqn], timeout=30, check=False)


@dataclass
class FakeNvmeInitiator:
    connects: list[str] = field(default_factory=list)
    disconnects: list[str] = field(default_factory=list)
    name: str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-00000000beef"

    def host_nqn(self) -> str:
        return self.name

    def connect(self, nqn: str, host: str, port: int, timeout: float = 30.0) -> str:
        self.connects.append(nqn)
        return "/dev/nvme9n1"

    def disconnect(self, nqn: str) -> None:
        self.disconnects.append(nqn)
