"""A ZFS hostid that belongs to the machine, not to the system disk.

ZFS records the importing system's hostid in the pool and refuses (without -f) a pool
that another hostid used last and did not export. The image build leaves a random
/etc/hostid that differs from one image to the next, so after an update (a new system
disk, docs/install.md) the appliance's own pool would look foreign. Deriving the hostid
from the firmware's machine UUID (the VM's UUID on a hypervisor, the board's on bare
metal) keeps it across system disks while data disks moved to another machine still need
a deliberate forced import.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from appliance.host.local import LocalHost


@dataclass(frozen=True)
class HostidResult:
    hostid: str | None  # 8 hex digits, None when there is none
    source: str  # machine-uuid | kept
    changed: bool


def hostid_for(machine_uuid: str) -> str:
    """8 hex digits from the UUID, never 0 or ffffffff (zgenhostid refuses/means random)."""
    value = int.from_bytes(hashlib.sha256(machine_uuid.lower().encode()).digest()[:4], "big")
    if value in (0, 0xFFFFFFFF):
        value = 1
    return f"{value:08x}"


def ensure_machine_hostid(local: LocalHost) -> HostidResult:
    """Sets /etc/hostid from the machine UUID when it differs; keeps it without a UUID."""
    current = local.read_hostid()
    uuid = local.machine_uuid()
    if uuid is None:
        return HostidResult(current, "kept", False)
    wanted = hostid_for(uuid)
    if current == wanted:
        return HostidResult(current, "machine-uuid", False)
    local.write_hostid(wanted)
    return HostidResult(wanted, "machine-uuid", True)


def describe(result: HostidResult) -> str:
    """The line `zds hostid` and the boot unit print."""
    if result.source == "kept":
        return f"zds: no machine UUID; hostid {result.hostid or '(none)'} kept"
    return (f"zds: hostid {result.hostid} from the machine UUID"
            + (" (changed)" if result.changed else ""))


def main() -> int:
    """``python -m appliance.hostid``: what zds-hostid.service runs on every boot, before
    any pool is imported. It imports this module and the local host adapter only: `zds
    hostid` loads the whole CLI and every adapter, 15 s on the boot's critical path under
    emulation (issue 26)."""
    from appliance.host.local import RealLocalHost
    from appliance.host.run import SubprocessRunner

    print(describe(ensure_machine_hostid(RealLocalHost(SubprocessRunner()))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
