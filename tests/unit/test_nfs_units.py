"""Switching the NFS server's systemd units: the other server stopped and masked first,
then this one unmasked, enabled and started; nothing done when it already runs."""

from __future__ import annotations

import pytest

from appliance.errors import InvalidInput
from appliance.host.nfs_units import UNITS, SystemdNfsUnits
from appliance.host.run import CommandResult, RecordingRunner


class Systemd:
    """systemctl's answers for units in ``active`` / ``enabled`` / ``masked`` sets."""

    def __init__(self, active: set[str], masked: set[str]) -> None:
        self.active, self.masked = active, masked
        self.enabled: set[str] = set(active)

    def __call__(self, argv: tuple[str, ...], _input: str | None) -> CommandResult | None:
        verb, units = argv[1], argv[2:]
        out = ""
        if verb == "is-active":
            out = "active" if units[0] in self.active else "inactive"
        elif verb == "is-enabled":
            u = units[0]
            out = "masked" if u in self.masked else "enabled" if u in self.enabled else "disabled"
        elif verb == "stop":
            self.active -= set(units)
        elif verb == "mask":
            self.masked |= set(units)
        elif verb == "unmask":
            self.masked -= set(units)
        elif verb == "enable":
            self.enabled |= set(units)
        elif verb == "start":
            assert not self.masked & set(units), "start of a masked unit"
            self.active |= set(units)
        return CommandResult(argv, 0, out + "\n", "")


def test_ganesha_to_knfsd_and_back() -> None:
    sd = Systemd(active={"nfs-ganesha.service", "nfs-ganesha-lock.service"},
                 masked=set(UNITS["knfsd"]))
    runner = RecordingRunner([sd])
    units = SystemdNfsUnits(runner)
    assert units.active() == "ganesha"
    done = units.use("knfsd")
    assert done == ["stopped ganesha", "masked ganesha", "unmasked knfsd",
                    "enabled nfs-server.service", "started nfs-server.service"]
    assert units.active() == "knfsd"
    assert set(UNITS["ganesha"]) <= sd.masked and not sd.active & set(UNITS["ganesha"])
    changing = [c for c in runner.calls if c[1] in ("stop", "mask", "unmask", "start")]
    assert changing[0][1] == "stop" and changing[-1][1] == "start"  # 2049 freed first
    assert units.use("knfsd") == []  # already so
    assert units.use("ganesha")[-1] == "started nfs-ganesha.service"
    assert units.active() == "ganesha" and set(UNITS["knfsd"]) <= sd.masked


def test_an_unknown_server_changes_nothing() -> None:
    runner = RecordingRunner()
    with pytest.raises(InvalidInput):
        SystemdNfsUnits(runner).use("nfsd")
    assert runner.calls == []
