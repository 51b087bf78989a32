"""What a replication peer can do through the receive gate: receive into its prefix and
nothing else. A stream's own properties can never mount, share or execute on the target
(issue 22, item 1), a stray connection on the ssh+tcp port does not end a transfer, and no
argument list whatever leaves the gate's grammar (property-based)."""

from __future__ import annotations

import itertools
import shlex
import socket
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.host import replica_guard, sshgate
from appliance.host.replica_guard import Prop

PFX = ["tank/replicas/zds1"]
DS = "tank/replicas/zds1/nfs01"
FORCED_X = set(replica_guard.FS_EXCLUDE)
FORCED_O = {f"{k}={v}" for k, v in replica_guard.FS_OVERRIDE.items()}


def options(argv: Sequence[str]) -> tuple[set[str], list[str]]:
    """(-x properties, -o assignments) of a receive argv."""
    xs: set[str] = set()
    os_: list[str] = []
    for a, b in itertools.pairwise(argv):
        if a == "-x":
            xs.add(b)
        elif a == "-o":
            os_.append(b)
    return xs, os_


class Host:
    """Answers the gate's ``zfs get`` as a target would."""

    def __init__(self, dataset_type: str | None = None) -> None:
        self.dataset_type = dataset_type
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> tuple[int, str]:
        self.calls.append(list(argv))
        if argv[:2] == ["zfs", "get"] and self.dataset_type:
            return 0, self.dataset_type + "\n"
        return 1, "cannot open: dataset does not exist\n"


def gate(cmd: str, host: Host, capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert sshgate.main(["--name", "zds1", "--prefix", PFX[0]],
                        {"SSH_ORIGINAL_COMMAND": cmd}, run=host) == 0
    return shlex.split(capsys.readouterr().out)


# --- the receive line ------------------------------------------------------------------------

def test_a_file_system_receive_gets_every_protection_whatever_the_source_asked(
        capsys: pytest.CaptureFixture[str]) -> None:
    # what a ZDS source sends for an NFS datastore: it declares a file system
    argv = gate(f"zfs receive -s -u -o readonly=on -o canmount=noauto -o zds:replication=r1 "
                f"-x refreservation -x mountpoint {DS}", Host(), capsys)
    xs, os_ = options(argv)
    assert xs >= FORCED_X and set(os_) >= FORCED_O
    assert "refreservation" in xs and "readonly=on" in os_ and "zds:replication=r1" in os_
    assert len(os_) == len(set(o.partition("=")[0] for o in os_)), "a property given twice"
    assert argv[:4] == ["zfs", "receive", "-s", "-u"] and argv[-1] == DS


def test_an_undeclared_receive_into_an_existing_file_system_is_protected_too(
        capsys: pytest.CaptureFixture[str]) -> None:
    host = Host("filesystem")
    xs, os_ = options(gate(f"zfs receive -s -u {DS}", host, capsys))
    assert xs >= FORCED_X and set(os_) >= FORCED_O
    assert host.calls == [["zfs", "get", "-H", "-p", "-o", "value", "type", DS]]


def test_a_volume_receive_gets_no_file_system_options(
        capsys: pytest.CaptureFixture[str]) -> None:
    # zfs receive refuses -x mountpoint on a volume: the check after the receive covers it
    for host in (Host("volume"), Host(None)):
        argv = gate(f"zfs receive -s -u -o readonly=on {DS}", host, capsys)
        assert argv == ["zfs", "receive", "-s", "-u", "-o", "readonly=on", DS]


# --- after the receive: what landed is checked --------------------------------------------

HOSTILE = [Prop(DS, "type", "filesystem", "-"),
           Prop(DS, "canmount", "on", "default"),
           Prop(DS, "mountpoint", "/usr/local/sbin", "received"),
           Prop(DS, "sharenfs", "rw=@0.0.0.0/0", "received"),
           Prop(DS, "sharesmb", "off", "default"),
           Prop(DS, "setuid", "on", "received"),
           Prop(DS, "exec", "on", "default"),
           Prop(DS, "devices", "on", "default")]


def test_a_hostile_file_system_is_reset() -> None:
    fixes = replica_guard.fixes(HOSTILE)
    assert ["zfs", "inherit", "mountpoint", DS] in fixes
    assert ["zfs", "inherit", "sharenfs", DS] in fixes
    assert ["zfs", "set", "canmount=noauto", DS] in fixes
    assert {"setuid=off", "exec=off", "devices=off"} <= {f[2] for f in fixes if f[1] == "set"}
    assert ["zfs", "inherit", "sharesmb", DS] not in fixes  # already off
    # zfs inherit mountpoint mounts a canmount=on file system at its new place (seen on
    # the appliance): canmount must be off first
    assert fixes.index(["zfs", "set", "canmount=noauto", DS]) < \
        fixes.index(["zfs", "inherit", "mountpoint", DS])


def test_a_protected_file_system_and_a_volume_need_nothing() -> None:
    safe = [Prop(DS, "type", "filesystem", "-"), Prop(DS, "canmount", "noauto", "local"),
            Prop(DS, "mountpoint", f"/{DS}", "inherited from tank"),
            Prop(DS, "sharenfs", "off", "inherited from tank"),
            Prop(DS, "setuid", "off", "local"), Prop(DS, "exec", "off", "local"),
            Prop(DS, "devices", "off", "local")]
    assert replica_guard.fixes(safe) == []
    assert replica_guard.fixes([Prop(DS, "type", "volume", "-")]) == []


def test_the_boot_sweep_touches_only_what_came_from_a_stream() -> None:
    admin = "tank/datastores/nfs01"  # promoted: ZDS set its mountpoint and canmount
    props = [Prop(admin, "mountpoint", "/tank/datastores/nfs01", "local"),
             Prop(admin, "canmount", "on", "local"),
             Prop(DS, "mountpoint", "/etc/cron.d", "received"),
             Prop(DS, "canmount", "on", "default")]
    assert replica_guard.fixes(props, received_only=True) == [
        ["zfs", "set", "canmount=noauto", DS], ["zfs", "inherit", "mountpoint", DS]]


STAND_IN_ZFS = """#!/bin/sh
# a stand-in zfs: the receive reads its stdin; get answers $GET_REPLY; all is logged
echo "$*" >> "$ZFS_LOG"
case "$1" in
receive) cat > "$RECV_FILE"; exit 0 ;;
get) printf "$GET_REPLY"; exit 0 ;;
esac
exit 0
"""


def run_gate(tmp_path: Path, cmd: str, get_reply: str) -> tuple[int, str, list[str]]:
    """The real gate as sshd runs it (a process, the stream on stdin) with a stand-in
    zfs first on PATH."""
    import os
    import subprocess

    (tmp_path / "zfs").write_text(STAND_IN_ZFS)
    (tmp_path / "zfs").chmod(0o755)
    log = tmp_path / "zfs.log"
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}",
           "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
           "SSH_ORIGINAL_COMMAND": cmd, "ZFS_LOG": str(log), "GET_REPLY": get_reply,
           "RECV_FILE": str(tmp_path / "received")}
    proc = subprocess.run([sys.executable, "-m", "appliance.host.sshgate", "--name", "zds1",
                           "--prefix", PFX[0]], input=b"stream bytes", env=env,
                          capture_output=True, timeout=60, check=False)
    assert (tmp_path / "received").read_bytes() == b"stream bytes"
    return proc.returncode, proc.stderr.decode(), log.read_text().splitlines()


def _reply(props: list[Prop]) -> str:
    return "".join(f"{p.dataset}\\t{p.name}\\t{p.value}\\t{p.source}\\n" for p in props)


def test_a_volume_that_lands_as_a_file_system_is_reset_and_refused(tmp_path: Path) -> None:
    rc, err, log = run_gate(tmp_path, f"zfs receive -s -u {DS}", _reply(HOSTILE))
    assert rc == 1 and "tried to mount, share or execute" in err
    assert f"inherit mountpoint {DS}" in log and f"set canmount=noauto {DS}" in log
    # the receive ran first, the check after it
    assert log.index(f"receive -s -u {DS}") < log.index(f"inherit mountpoint {DS}")


def test_an_honest_receive_passes_the_check(tmp_path: Path) -> None:
    rc, err, log = run_gate(tmp_path, f"zfs receive -s -u -x mountpoint {DS}",
                            _reply([Prop(DS, "type", "volume", "-")]))
    assert rc == 0, err
    assert not [line for line in log if line.startswith(("set", "inherit"))]


# --- ssh+tcp: a stray connection does not end the transfer --------------------------------

def test_a_connection_without_the_token_does_not_end_the_wait() -> None:
    listener = sshgate.listen("127.0.0.1", range(29100, 29200))
    port = listener.getsockname()[1]
    token = b"t" * sshgate.TOKEN_BYTES

    def connect(data: bytes, delay: float) -> None:
        time.sleep(delay)
        with socket.create_connection(("127.0.0.1", port)) as c:
            c.sendall(data)
            time.sleep(0.5)

    stray = threading.Thread(target=connect, args=(b"GET / HTTP/1.0\r\n\r\n", 0.0))
    source = threading.Thread(target=connect, args=(token + b"stream", 0.3))
    stray.start()
    source.start()
    conn = sshgate.accept_source(listener, "127.0.0.1", token, timeout=10)
    assert conn.recv(6) == b"stream"
    conn.close()
    for t in (stray, source):
        t.join()
    listener.close()


# --- property: nothing outside the grammar ------------------------------------------------

WORDS = ["zfs", "list", "get", "receive", "recv", "create", "destroy", "send", "rollback",
         "set", "-H", "-p", "-r", "-d", "1", "-t", "filesystem", "-o", "-s", "-u", "-v",
         "-x", "-A", "-F", "-e", "-n", "-su", "-Hp", "--", "all", "name,type",
         "mountpoint", "mountpoint=/usr/local/sbin", "canmount=on", "canmount=noauto",
         "readonly=on", "sharenfs=on", "zds:x=1", "exec=on", "tank", "tank/replicas",
         "tank/replicas/zds1", DS, f"{DS}@s1", "tank/datastores/x", "../etc", "/etc",
         "tank/replicas/zds1/../../datastores", "a;b", "$(id)", "x\n", "-oProxyCommand=x"]
RECEIVE_FLAGS = {"-s", "-u", "-v"}
SETTABLE = {"readonly=on", "readonly=off", "canmount=noauto", "canmount=off"}


def in_grammar(argv: list[str]) -> bool:
    """An independent statement of what the gate may run (docs/security.md)."""
    if argv[:1] != ["zfs"] or len(argv) < 3:
        return False
    under = [a == PFX[0] or a.startswith(PFX[0] + "/") for a in argv[-1:]]
    sub, rest = argv[1], argv[2:]
    if sub == "create":
        return rest[:1] == ["-p"] and len(rest) == 2 and under[0] and "@" not in rest[1]
    if sub == "receive":
        if rest == ["-A", rest[-1]]:
            return under[0]
        k, seen = 0, set()
        while k < len(rest) - 1:
            if rest[k] in ("-o", "-x"):
                value = rest[k + 1]
                if rest[k] == "-o" and not (value in SETTABLE or value.startswith("zds:")
                                            or value in FORCED_O):
                    return False
                k += 2
            elif rest[k] in RECEIVE_FLAGS:
                seen.add(rest[k])
                k += 1
            else:
                return False
        return {"-s", "-u"} <= seen and under[0] and "@" not in rest[-1] and all(
            "mountpoint=" not in a for a in rest)
    if sub in ("list", "get"):
        names = [a for a in rest if "/" in a or a == "tank"]
        return all(n.split("@")[0] == PFX[0] or n.split("@")[0].startswith(PFX[0] + "/")
                   for n in names) and "-F" not in rest
    return False


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(WORDS), min_size=1, max_size=12), st.booleans())
def test_no_argument_list_leaves_the_grammar(words: list[str], filesystem: bool) -> None:
    try:
        argv = sshgate.check(words, PFX)
    except (sshgate.Refused, ValueError):
        return
    assert in_grammar(argv), argv
    if argv[1] == "receive" and "-A" not in argv:
        hardened = sshgate.harden_receive(argv, filesystem)
        assert in_grammar(hardened), hardened
        xs, os_ = options(hardened)
        names = [o.partition("=")[0] for o in os_]
        assert len(names) == len(set(names)), hardened
        assert not (xs & set(names)), hardened
        if filesystem:
            assert xs >= FORCED_X and set(os_) >= FORCED_O
