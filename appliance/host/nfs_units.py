"""Which NFS server's systemd units run: nfs-ganesha (the default) or the kernel's.

Both cannot serve at once (each wants port 2049 and mountd's 20048), so the one not in
use is stopped and masked, which also keeps it from starting at the next boot. The image
and the Ansible roles install knfsd (nfs-kernel-server) with its units masked; ``zds
nfs-server knfsd`` (api/cli/local.py) switches through :class:`SystemdNfsUnits`.
"""

from __future__ import annotations

from typing import Protocol

from appliance.errors import InvalidInput
from appliance.host.run import Runner

UNITS: dict[str, tuple[str, ...]] = {
    # nfs-ganesha-lock is Debian's rpc.statd for ganesha; knfsd brings its own
    # (rpc-statd.service), and two statds would fight over the same port and state
    "ganesha": ("nfs-ganesha.service", "nfs-ganesha-lock.service"),
    "knfsd": ("nfs-server.service", "nfs-kernel-server.service", "nfs-mountd.service",
              "nfsdcld.service", "nfs-blkmap.service"),
}
MAIN_UNIT = {"ganesha": "nfs-ganesha.service", "knfsd": "nfs-server.service"}
API_UNIT = "zds-api.service"


class NfsUnits(Protocol):
    def active(self) -> str | None:
        """The server whose main unit is active now (None: neither)."""

    def use(self, server: str) -> list[str]:
        """Stop and mask the other server, unmask, enable and start ``server``; returns
        what was done (empty: it ran already and the other was masked)."""

    def restart_api(self) -> None:
        """Restart zds-api, whose start-up reconcile gives the new server every export."""


class SystemdNfsUnits:
    """:class:`NfsUnits` with systemctl."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner

    def _state(self, verb: str, unit: str) -> str:
        return self.runner.run(["systemctl", verb, unit], check=False).stdout.strip()

    def active(self) -> str | None:
        for server, unit in MAIN_UNIT.items():
            if self._state("is-active", unit) == "active":
                return server
        return None

    def use(self, server: str) -> list[str]:
        if server not in UNITS:
            raise InvalidInput(f"unknown NFS server {server!r}: use one of {', '.join(UNITS)}")
        other = next(s for s in UNITS if s != server)
        done: list[str] = []
        other_units = UNITS[other]
        if any(self._state("is-active", u) in ("active", "activating") for u in other_units):
            self.runner.run(["systemctl", "stop", *other_units], timeout=180)
            done.append(f"stopped {other}")
        if any(self._state("is-enabled", u) != "masked" for u in other_units):
            self.runner.run(["systemctl", "mask", *other_units])
            done.append(f"masked {other}")
        units = UNITS[server]
        if any(self._state("is-enabled", u) == "masked" for u in units):
            self.runner.run(["systemctl", "unmask", *units])
            done.append(f"unmasked {server}")
        main = MAIN_UNIT[server]
        if self._state("is-enabled", main) != "enabled":
            self.runner.run(["systemctl", "enable", main])
            done.append(f"enabled {main}")
        if self._state("is-active", main) != "active":
            self.runner.run(["systemctl", "start", main], timeout=180)
            done.append(f"started {main}")
        return done

    def restart_api(self) -> None:
        self.runner.run(["systemctl", "restart", API_UNIT], timeout=180)
