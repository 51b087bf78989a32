"""open-iscsi on the appliance: log in to its own probe LUN over loopback.

``/etc/iscsi/initiatorname.iscsi`` holds the initiator's name::

    ## DO NOT EDIT OR REMOVE THIS FILE!
    InitiatorName=iqn.1993-08.org.debian:01:5b2e6c1f9a7

Login without discovery (a SendTargets answer would name the guest's own address, and
we connect only to an explicit 127.0.0.1 portal)::

    iscsiadm -m node -T IQN -p 127.0.0.1:3260 -o new
    iscsiadm -m node -T IQN -p 127.0.0.1:3260 --login

The LUN appears as /dev/disk/by-path/ip-127.0.0.1:3260-iscsi-IQN-lun-0 (udev).
The twin for unit tests is ``RecordingRunner`` plus a ``device_exists`` stand-in.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from appliance.errors import Unavailable
from appliance.host.run import Runner

INITIATOR_FILE = "/etc/iscsi/initiatorname.iscsi"


def parse_initiator_name(text: str) -> str | None:
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("InitiatorName="):
            return line.split("=", 1)[1].strip() or None
    return None


def by_path(iqn: str, host: str, port: int, lun: int = 0) -> str:
    return f"/dev/disk/by-path/ip-{host}:{port}-iscsi-{iqn}-lun-{lun}"


class IscsiInitiator:
    def __init__(self, runner: Runner, initiator_file: str = INITIATOR_FILE,
                 exists: Callable[[str], bool] = os.path.exists) -> None:
        self._runner = runner
        self._file = initiator_file
        self._exists = exists

    def initiator_name(self) -> str:
        try:
            name = parse_initiator_name(Path(self._file).read_text())
        except OSError:
            name = None
        if not name:
            raise Unavailable(f"no iSCSI initiator name in {self._file} (install open-iscsi)")
        return name

    def login(self, iqn: str, host: str, port: int, timeout: float = 30.0) -> str:
        portal = f"{host}:{port}"
        self._runner.run(["iscsiadm", "-m", "node", "-T", iqn, "-p", portal, "-o", "new"])
        self._runner.run(["iscsiadm", "-m", "node", "-T", iqn, "-p", portal, "--login"],
                         timeout=60)
        dev = by_path(iqn, host, port)
        deadline = time.monotonic() + timeout
        while not self._exists(dev):
            if time.monotonic() > deadline:
                self.logout(iqn, host, port)
                raise Unavailable(f"logged in to {iqn} but {dev} did not appear")
            time.sleep(0.2)
        return os.path.realpath(dev)

    def logout(self, iqn: str, host: str, port: int) -> None:
        portal = f"{host}:{port}"
        self._runner.run(["iscsiadm", "-m", "node", "-T", iqn, "-p", portal, "--logout"],
                         check=False, timeout=60)
        self._runner.run(["iscsiadm", "-m", "node", "-T", iqn, "-p", portal, "-o", "delete"],
                         check=False)
