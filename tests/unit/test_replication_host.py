"""Replication's host code without ZFS: the receive gate's grammar, the SSH helpers
(keys, known_hosts, authorized_keys, error texts of ssh 9.2), the parsers of zfs 2.3.2's
output, the planner, and the real send | receive pipeline driven with stand-in
commands (counting, rate limit, cancel, the side that failed first)."""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path

import pytest

from appliance.errors import Conflict, InsufficientSpace, InvalidInput, NotFound, ZdsError
from appliance.host import sshgate
from appliance.host.fakes.replication import fake_key
from appliance.host.run import CommandResult, RecordingRunner, SubprocessRunner
from appliance.host.ssh import (
    AuthorizedKey,
    Endpoint,
    GateRefused,
    HostKeyChanged,
    KeyRefused,
    OpenSsh,
    SshRunner,
    TargetUnreachable,
    classify_ssh_error,
    host_name,
    parse_authorized_keys,
    parse_known_hosts,
    public_key,
    render_authorized_keys,
)
from appliance.host.zfs import Zfs
from appliance.host.zfs_send import (
    Diverged,
    PartialReceive,
    ReceiveSpec,
    ResumeToken,
    SendSpec,
    SnapRef,
    StaleResume,
    TargetState,
    TransferCancelled,
    TransferInterrupted,
    ZfsSend,
    classify_stream_error,
    parse_refs,
    parse_resume_token,
    parse_send_size,
    parse_target,
)
from appliance.replication.model import parse_interval
from appliance.replication.plan import plan

PFX = ["tank/replicas/zds1"]
KEY = fake_key("k")


# --- the receive gate ---------------------------------------------------------------------

@pytest.mark.parametrize("cmd", [
    "zfs list -H -p -t filesystem,volume,snapshot -o name,type,guid,createtxg,creation,"
    "receive_resume_token,written,available -r -d 1 tank/replicas/zds1/nfs01",
    "zfs list -H -p -o name,available tank/replicas/zds1",
    "zfs receive -s -u -o readonly=on -o canmount=noauto -o zds:replication=r1 "
    "-o 'zds:replica_of=zds-a/nfs01' -x refreservation -x mountpoint tank/replicas/zds1/nfs01",
    "zfs receive -A tank/replicas/zds1/nfs01",
    "zfs create -p tank/replicas/zds1/sub",
    "zfs get -H -p -o name,property,value,source all tank/replicas/zds1/x@s1",
])
def test_gate_lets_through_what_a_source_needs(cmd: str) -> None:
    import shlex

    argv = shlex.split(cmd)
    assert sshgate.check(argv, PFX) == ["zfs", *argv[1:]]


@pytest.mark.parametrize("cmd, why", [
    ("zfs destroy -r tank", "not allowed"),
    ("rm -rf /", "only zfs"),
    ("zfs receive -s -u -F tank/replicas/zds1/x", "-F"),
    ("zfs receive -s -u tank/datastores/x", "outside"),
    ("zfs receive -s -u tank/replicas/zds1-other/x", "outside"),
    ("zfs receive -s -u tank/replicas", "outside"),
    ("zfs receive -s -u -o mountpoint=/etc tank/replicas/zds1/x", "may not set"),
    ("zfs receive -s -u -o sharenfs=on tank/replicas/zds1/x", "may not set"),
    ("zfs receive -u tank/replicas/zds1/x", "needs -s"),
    ("zfs receive -s -u -d tank/replicas/zds1", "-d"),
    ("zfs receive -A -s tank/replicas/zds1/x", "no other"),
    ("zfs list -H tank/replicas/zds1/x;reboot", "invalid"),
    ("zfs list -H ../../etc", "invalid"),
    ("zfs list -H tank/replicas/zds1/%recv", "invalid"),
    ("zfs create -o mountpoint=/ tank/replicas/zds1/x", "-o"),
    ("zfs get -H all", "name the datasets"),
    ("zfs send tank/replicas/zds1/x@s", "not allowed"),
])
def test_gate_refuses_everything_else(cmd: str, why: str) -> None:
    import shlex

    with pytest.raises(sshgate.Refused) as err:
        sshgate.check(shlex.split(cmd), PFX)
    assert why in str(err.value)


def test_gate_main_reports_refusals_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--name", "zds1", "--prefix", PFX[0]]
    assert sshgate.main(args, {"SSH_ORIGINAL_COMMAND": "zfs destroy tank"}) == 1
    assert "zds-gate: refused: zfs destroy is not allowed (key zds1)" in capsys.readouterr().err
    assert sshgate.main(args, {"SSH_ORIGINAL_COMMAND": "zfs receive -A tank/replicas/zds1/a"}
                        ) == 0
    assert capsys.readouterr().out.strip() == "zfs receive -A tank/replicas/zds1/a"
    assert sshgate.main(args, {"SSH_ORIGINAL_COMMAND": "zfs list 'unterminated"}) == 1


# --- SSH helpers ------------------------------------------------------------------------------

def test_public_keys_are_checked_and_reduced() -> None:
    assert public_key(f"{KEY} zds-replication@a") == KEY
    for bad in ("", "ssh-ed25519", "ssh-dss AAAAB3NzaC1kc3M=", "ssh-ed25519 !!!",
                "ssh-ed25519 " + fake_key("x", "ssh-rsa").split()[1]):
        with pytest.raises(InvalidInput):
            public_key(bad)


def test_host_names() -> None:
    assert host_name(" 192.0.2.1 ") == "192.0.2.1"
    assert host_name("DR.Example.NET") == "dr.example.net"
    assert host_name("::1") == "::1"
    for bad in ("-oProxyCommand=sh", "a b", "user@host", "host:22", "", "a..b"):
        with pytest.raises(InvalidInput):
            host_name(bad)


def test_authorized_keys_render_and_read_back() -> None:
    entries = [AuthorizedKey("zds1", KEY, "tank/replicas/zds1", ("192.0.2.10", "2001:db8::/64")),
               AuthorizedKey("a", fake_key("a"), "tank/r/a")]
    text = render_authorized_keys(entries, python="/opt/zds/venv/bin/python")
    lines = text.splitlines()
    assert lines[0].startswith("# Managed by ZDS")
    assert lines[2] == (
        'restrict,command="/opt/zds/venv/bin/python -m appliance.host.sshgate --name zds1 '
        f'--prefix tank/replicas/zds1",from="192.0.2.10,2001:db8::/64" {KEY} zds:zds1')
    assert parse_authorized_keys(text) == sorted(entries, key=lambda e: e.name)
    with pytest.raises(InvalidInput):
        render_authorized_keys([AuthorizedKey('x"', KEY, "tank/r")])
    with pytest.raises(InvalidInput):
        render_authorized_keys([AuthorizedKey("x", KEY, "tank/r x")])


def test_known_hosts_pinning(tmp_path: Path) -> None:
    ssh = OpenSsh(RecordingRunner(), tmp_path / "r")
    a, b = Endpoint("192.0.2.20"), Endpoint("192.0.2.20", 2222)
    assert ssh.pinned(a) == []
    ssh.pin(a, KEY + " root@zds")
    ssh.pin(b, fake_key("b"))
    assert ssh.pinned(a) == [KEY] and ssh.pinned(b) == [fake_key("b")]
    ssh.pin(a, fake_key("new"))  # replaces
    text = (tmp_path / "r" / "known_hosts").read_text()
    assert text.splitlines() == [f"[192.0.2.20]:2222 {fake_key('b')}",
                                 f"192.0.2.20 {fake_key('new')}"]
    ssh.pin(a, None)
    assert ssh.pinned(a) == [] and ssh.pinned(b) == [fake_key("b")]
    assert stat.S_IMODE(os.stat(tmp_path / "r").st_mode) == 0o700
    # what accept-new writes (with HashKnownHosts=no) reads back too
    assert parse_known_hosts("127.0.0.1 ssh-ed25519 AAAA\n|1|x|y ssh-rsa B\n") == {
        "127.0.0.1": ["ssh-ed25519 AAAA"]}


def test_ssh_command_line(tmp_path: Path) -> None:
    runner = RecordingRunner()
    ssh = OpenSsh(runner, tmp_path, hostname="zds-a")
    (tmp_path / "id_ed25519").write_text("k")
    (tmp_path / "id_ed25519.pub").write_text(KEY + " zds-replication@zds-a\n")
    argv = ssh.argv(Endpoint("192.0.2.20", 2222, "root"), ["zfs", "list", "-H", "a b"])
    assert argv[0] == "ssh" and argv[-3:] == ["192.0.2.20", "--", "zfs list -H 'a b'"]
    joined = " ".join(argv)
    for opt in ("BatchMode=yes", "StrictHostKeyChecking=accept-new", "IdentitiesOnly=yes",
                f"UserKnownHostsFile={tmp_path}/known_hosts", "ServerAliveInterval=15",
                "-p 2222", "-l root"):
        assert opt in joined
    assert ssh.argv(Endpoint(None), ["zfs", "list"]) == ["zfs", "list"]
    assert f"ControlPath={tmp_path}/cm-%C" in joined and "KexAlgorithms=^curve25519-sha256" \
        in joined
    assert runner.calls == []  # the key existed: no ssh-keygen
    ssh.close(Endpoint("192.0.2.20", 2222))
    assert runner.calls[-1][-3:] == ("-O", "exit", "192.0.2.20")


def test_key_is_made_once(tmp_path: Path) -> None:
    runner = RecordingRunner()

    def keygen(argv: tuple[str, ...], _input: str | None) -> CommandResult | None:
        if argv[0] == "ssh-keygen":
            path = Path(argv[argv.index("-f") + 1])
            path.write_text("private")
            path.with_suffix(".pub").write_text(KEY + " zds-replication@zds-a\n")
        return None

    runner.responders.append(keygen)
    ssh = OpenSsh(runner, tmp_path / "r", hostname="zds-a")
    assert ssh.public_key() == KEY + " zds-replication@zds-a"
    assert ssh.public_key() == KEY + " zds-replication@zds-a"
    assert [c[:4] for c in runner.calls] == [("ssh-keygen", "-q", "-t", "ed25519")]


# What ssh 9.2 printed in the appliance (exit 255)
SSH_ERRORS = [
    ("ssh: connect to host 127.0.0.1 port 1: Connection refused", TargetUnreachable,
     "Connection refused"),
    ("ssh: connect to host 203.0.113.1 port 22: Network is unreachable", TargetUnreachable,
     "Network is unreachable"),
    ("ssh: Could not resolve hostname no-such-host.invalid: Temporary failure in name "
     "resolution", TargetUnreachable, "Could not resolve"),
    ("nobody@127.0.0.1: Permission denied (publickey,password).", KeyRefused, "authorize"),
    ("@@@@@@@@@@@\n@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n...\n"
     "Host key verification failed.", HostKeyChanged, "pin"),
]


@pytest.mark.parametrize("stderr, error, words", SSH_ERRORS)
def test_ssh_errors(stderr: str, error: type, words: str) -> None:
    err = classify_ssh_error(CommandResult(("ssh",), 255, "", stderr), Endpoint("127.0.0.1"))
    assert err is not None and isinstance(err, error) and words in err.message


def test_remote_command_errors_are_not_ssh_errors() -> None:
    ep = Endpoint("127.0.0.1")
    assert classify_ssh_error(CommandResult(("ssh",), 1, "", "cannot open 'x': dataset does "
                                                             "not exist"), ep) is None
    gate = classify_ssh_error(CommandResult(("ssh",), 1, "", "zds-gate: refused: tank/x is "
                                                             "outside tank/r (key a)"), ep)
    assert isinstance(gate, GateRefused) and "outside" in gate.message


def test_ssh_runner_turns_remote_failures_into_zfs_errors(tmp_path: Path) -> None:
    runner = RecordingRunner()
    runner.on(["ssh"], returncode=1, stderr="cannot open 'tank/r/x': dataset does not exist")
    (tmp_path / "id_ed25519").write_text("k")
    (tmp_path / "id_ed25519.pub").write_text(KEY)
    zs = ZfsSend(runner, OpenSsh(runner, tmp_path))
    state = zs.target_state(Endpoint("192.0.2.20"), "tank/r/x")
    assert not state.exists and not state.parent_exists
    assert isinstance(OpenSsh(runner, tmp_path).runner(Endpoint("h")), SshRunner)


# --- zfs 2.3.2 output --------------------------------------------------------------------------

def test_parse_target_and_refs() -> None:
    # zfs list -H -p -t filesystem,volume,snapshot -o name,type,guid,createtxg,creation,
    #   receive_resume_token,written,available -r -d 1 p2/replicas/ds   (zfs 2.3.2)
    out = ("p2/replicas/ds\tfilesystem\t14446319978904024953\t17\t1795405502\t-\t0\t293470208\n"
           "p2/replicas/ds@s1\tsnapshot\t4043549333006935781\t22\t1795405495\t-\t21102592\t-\n")
    st = parse_target("p2/replicas/ds", out)
    assert st.exists and st.type == "filesystem" and st.resume_token is None
    assert st.available == 293470208 and st.written == 0
    assert st.snapshots == (SnapRef("p2/replicas/ds@s1", 4043549333006935781, 22, 1795405495),)
    tok = "1-f4c53da3e-120-789c6360640003"
    st = parse_target("p2/replicas/ds", out.replace("17\t1795405502\t-", f"17\t1795405502\t{tok}"))
    assert st.resume_token == tok
    # zfs list -H -p -t bookmark -o name,guid,createtxg,creation -d 1 p1/datastores/ds
    assert parse_refs("p1/datastores/ds#zds-r1\t7550954167357546292\t32\t1795405519\n") == [
        SnapRef("p1/datastores/ds#zds-r1", 7550954167357546292, 32, 1795405519)]


def test_parse_send_size_and_holds() -> None:
    # zfs send -nP -L -c -e -p -I p1/datastores/ds@s1 p1/datastores/ds@s3
    assert parse_send_size("incremental\ts1\tp1/datastores/ds@s2\t2140528\n"
                           "incremental\ts2\tp1/datastores/ds@s3\t624\nsize\t2141152\n") == 2141152
    # zfs send -nP -t TOKEN (the token's contents first)
    assert parse_send_size("resume token contents:\nnvlist version: 0\n\ttoguid = 0xfe2d\n"
                           "incremental\tp1/ds@s4\tp1/ds@s5\t18110152\nsize\t18110152\n") \
        == 18110152
    with pytest.raises(Exception, match="no size"):
        parse_send_size("")


# zfs receive/send stderr, as zfs 2.3.2 printed it in the appliance
STREAM_ERRORS = [
    ("cannot receive new filesystem stream: destination 'p2/replicas/full' exists\n"
     "must specify -F to overwrite it", Diverged),
    ("cannot receive incremental stream: destination p2/replicas/ds contains "
     "partially-complete state from \"zfs receive -s\".", PartialReceive),
    ("cannot receive incremental stream: checksum mismatch or incomplete stream.\n"
     "Partially received snapshot is saved.\nA resuming stream can be generated on the "
     "sending system by running:\n    zfs send -t 1-f4c53da3e-120-789c", TransferInterrupted),
    ("cannot receive resume stream: out of space", InsufficientSpace),
    ("cannot resume send: 'p1/ds@s6' used in the initial send no longer exists", StaleResume),
    ("cannot resume send: resume token is corrupt (invalid format)", StaleResume),
    ("cannot receive incremental stream: most recent snapshot of p2/r/ds does not\n"
     "match incremental source", Diverged),
    ("cannot receive incremental stream: destination p2/r/ds has been modified\n"
     "since most recent snapshot", Diverged),
    ("cannot receive resume stream: destination 'p2/replicas/ds' does not exist", NotFound),
    ("cannot receive: failed to read from stream", TransferInterrupted),
]


@pytest.mark.parametrize("stderr, error", STREAM_ERRORS)
def test_stream_errors(stderr: str, error: type) -> None:
    err = classify_stream_error(stderr, 1234, ["zfs", "receive"])
    assert type(err) is error, (err, err.message)


# --- planning ---------------------------------------------------------------------------------

def refs(*names: str) -> list[SnapRef]:
    return [SnapRef(f"tank/ds@{n}", 1000 + i, 10 + i, 100 + i) for i, n in enumerate(names)]


def test_plan_cases() -> None:
    src = refs("a", "b", "c")
    new = TargetState("r/ds", False, parent_exists=False)
    step = plan("tank/ds", src, [], new)
    assert step.kind == "full" and step.send == SendSpec(snapshot="tank/ds@a")
    have_a = TargetState("r/ds", True, "filesystem", snapshots=(SnapRef("r/ds@a", 1000, 5, 100),))
    step = plan("tank/ds", src, [], have_a)
    assert step.kind == "incremental" and step.send == SendSpec("tank/ds@c", "tank/ds@a")
    have_c = TargetState("r/ds", True, snapshots=(SnapRef("r/ds@c", 1002, 9, 102),))
    assert plan("tank/ds", src, [], have_c).kind == "up_to_date"
    # only a bookmark left of the common snapshot
    mark = SnapRef("tank/ds#zds-repl-r1-10", 1000, 10, 100)
    step = plan("tank/ds", src[1:], [mark], have_a)
    assert step.send == SendSpec("tank/ds@c", "tank/ds#zds-repl-r1-10")
    resume = TargetState("r/ds", True, resume_token="1-abc")
    token = ResumeToken("tank/ds@c", 1002, 1001)
    assert plan("tank/ds", src, [], resume, resume=token).send == SendSpec(resume_token="1-abc")
    assert plan("tank/ds", src, [], resume, resume=ResumeToken("tank/ds@a", 1000)).kind == \
        "resume"  # a full stream
    assert plan("tank/ds", src[2:], [mark], resume, resume=ResumeToken(
        "tank/ds@c", 1002, 1000)).kind == "resume"  # from the bookmark
    with pytest.raises(NotFound):
        plan("tank/ds", [], [], new)


@pytest.mark.parametrize("target, words", [
    (TargetState("r/ds", True), "holds no snapshot"),
    (TargetState("r/ds", True, snapshots=(SnapRef("r/ds@x", 9, 1, 1),)), "shares no snapshot"),
    (TargetState("r/ds", True, snapshots=(SnapRef("r/ds@a", 1000, 1, 1),
                                          SnapRef("r/ds@rogue", 9, 2, 2))), "rogue"),
    (TargetState("r/ds", True, written=4096, snapshots=(SnapRef("r/ds@a", 1000, 1, 1),)),
     "modified"),
])
def test_plan_refuses_a_diverged_target(target: TargetState, words: str) -> None:
    with pytest.raises(Diverged) as err:
        plan("tank/ds", refs("a", "b"), [], target)
    assert words in err.value.message


@pytest.mark.parametrize("token, words", [
    (None, "not read here"),
    (ResumeToken("tank/other@c", 1002, 1001), "no snapshot of tank/ds"),  # another dataset
    (ResumeToken("tank/ds2@c", 1002), "no snapshot of tank/ds"),  # a prefix is no match
    (ResumeToken("tank/ds@c", 7777), "no longer has"),  # a guid of none of ours (a sibling's)
    (ResumeToken("tank/ds@x", 1002), "no snapshot of tank/ds"),  # our guid, another name
    (ResumeToken("tank/ds@c", 1002, 8888), "no snapshot or bookmark"),  # a foreign base
])
def test_plan_refuses_a_resume_token_that_is_not_this_datasets(
        token: ResumeToken | None, words: str) -> None:
    """The token comes from the target: a hostile one must not make the source send
    another dataset (zfs send -t finds the snapshot by guid near the name it holds)."""
    resume = TargetState("r/ds", True, resume_token="1-abc",
                         snapshots=(SnapRef("r/ds@a", 1000, 1, 1),))
    with pytest.raises(StaleResume) as err:
        plan("tank/ds", refs("a", "b", "c"), [], resume, resume=token)
    assert words in err.value.message and err.value.detail["target"] == "r/ds"


# `zfs send -n -v -t TOKEN`: the layout of OpenZFS's nvlist_print (libnvpair.c) after
# libzfs_sendrecv.c's "resume token contents:" line
NVTOKEN = """resume token contents:
nvlist version: 0
\tfromguid = 0x595d9f81aa9dddab
\tobject = 0x1
\toffset = 0x0
\tbytes = 0x0
\ttoguid = 0x854f02a2dd32cf0d
\ttoname = pool1/test@b
\tembedok = 1
\tcompressok = 1
send from pool1/test@a to pool1/test@b estimated size is 1.03M
"""


def test_parse_resume_token() -> None:
    assert parse_resume_token(NVTOKEN) == ResumeToken(
        "pool1/test@b", 0x854f02a2dd32cf0d, 0x595d9f81aa9dddab)
    full = NVTOKEN.replace("\tfromguid = 0x595d9f81aa9dddab\n", "")
    assert parse_resume_token(full) == ResumeToken("pool1/test@b", 0x854f02a2dd32cf0d, 0)
    # printed before the error of a token whose snapshot is gone: still read
    stale = NVTOKEN + "cannot resume send: 'pool1/test@b' used in the initial send no " \
                      "longer exists\n"
    assert parse_resume_token(stale) is not None
    nested = NVTOKEN.replace("\tembedok = 1\n", "\tx = (embedded nvlist)\n\tnvlist version: 0"
                             "\n\t\ttoname = pool1/other@b\n\t(end x)\n\tembedok = 1\n")
    assert parse_resume_token(nested) == parse_resume_token(NVTOKEN)
    for bad in ("cannot resume send: resume token is corrupt (checksum mismatch)\n",
                NVTOKEN.replace("nvlist version: 0\n", ""),
                NVTOKEN.replace("\ttoguid = 0x854f02a2dd32cf0d\n", ""),
                NVTOKEN.replace("pool1/test@b", "pool1/test"),  # not a snapshot
                NVTOKEN.replace("pool1/test@b", "pool1/test@b x"),
                # a name that smuggles a second toname line
                NVTOKEN.replace("\ttoname = pool1/test@b\n",
                                "\ttoname = pool1/other@b\n\ttoname = pool1/test@b\n"),
                ""):
        assert parse_resume_token(bad) is None, bad


def test_resume_info_runs_send_nvt(tmp_path: Path) -> None:
    runner = RecordingRunner()
    runner.on(["zfs", "send", "-n", "-v", "-t"], stdout=NVTOKEN)
    zs = ZfsSend(runner, OpenSsh(runner, tmp_path))
    assert zs.resume_info("1-abc-e0-789c").toname == "pool1/test@b"
    assert runner.calls[-1] == ("zfs", "send", "-n", "-v", "-t", "1-abc-e0-789c")
    runner.on(["zfs", "send", "-n", "-v", "-t"], returncode=1,
              stderr="cannot resume send: resume token is corrupt (checksum mismatch)")
    with pytest.raises(StaleResume) as err:
        zs.resume_info("1-abc-e0-789c")
    assert "checksum mismatch" in err.value.message
    calls = len(runner.calls)
    with pytest.raises(StaleResume):  # never on a command line
        zs.resume_info("1-abc; rm -rf /")
    assert len(runner.calls) == calls


def test_intervals() -> None:
    assert [parse_interval(v) for v in (90, "90", "90s", "15m", "1h", "2d")] == [
        90, 90, 90, 900, 3600, 172800]
    for bad in ("", "1w", "m", True):
        with pytest.raises(ValueError):
            parse_interval(bad)  # type: ignore[arg-type]


def test_send_and_receive_argv() -> None:
    assert SendSpec("t/d@b", "t/d@a").args() == ["send", "-L", "-c", "-e", "-p", "-I",
                                                  "t/d@a", "t/d@b"]
    assert SendSpec("t/d@b", "t/d#m").args()[-3:] == ["-i", "t/d#m", "t/d@b"]
    assert SendSpec("t/d@b", raw=True).args() == ["send", "-w", "-p", "t/d@b"]
    assert SendSpec(resume_token="1-ab-cd").args() == ["send", "-t", "1-ab-cd"]
    with pytest.raises(InvalidInput):
        SendSpec(resume_token="1; rm -rf").args()
    with pytest.raises(InvalidInput):
        SendSpec("-R t/d@b").args()
    assert ReceiveSpec("r/d", {"readonly": "on"}, ("mountpoint",)).args() == [
        "receive", "-s", "-u", "-o", "readonly=on", "-x", "mountpoint", "r/d"]


# --- the real pipeline, with stand-ins for zfs ---------------------------------------------------

FAKE_ZFS = """#!/bin/sh
# a stand-in for zfs: send streams $SEND_BYTES bytes (or fails), receive stores stdin
case "$1" in
send)
  [ -n "$SEND_FAIL" ] && { echo "$SEND_FAIL" >&2; exit 1; }
  exec head -c "$SEND_BYTES" /dev/zero ;;
receive)
  [ -n "$RECV_FAIL" ] && { head -c 100000 >/dev/null; echo "$RECV_FAIL" >&2; exit 1; }
  exec cat > "$RECV_FILE" ;;
esac
exit 2
"""


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[ZfsSend, Path]:
    exe = tmp_path / "zfs"
    exe.write_text(FAKE_ZFS)
    exe.chmod(0o755)
    out = tmp_path / "received"
    monkeypatch.setenv("RECV_FILE", str(out))
    monkeypatch.setenv("SEND_BYTES", str(8 << 20))
    runner = SubprocessRunner()
    return ZfsSend(runner, OpenSsh(runner, tmp_path / "ssh"), zfs=str(exe)), out


def test_pipeline_moves_and_counts_every_byte(stand_in: tuple[ZfsSend, Path]) -> None:
    zs, out = stand_in
    seen: list[int] = []
    zs.REPORT_EVERY = 0.0
    stats = zs.transfer(SendSpec("t/d@a"), Endpoint(None), ReceiveSpec("r/d"),
                        progress=seen.append)
    assert stats.bytes == 8 << 20 == out.stat().st_size
    assert seen[-1] == 8 << 20 and seen == sorted(seen)


def test_pipeline_rate_limit(stand_in: tuple[ZfsSend, Path],
                             monkeypatch: pytest.MonkeyPatch) -> None:
    zs, _out = stand_in
    monkeypatch.setenv("SEND_BYTES", str(1 << 20))
    t0 = time.monotonic()
    zs.transfer(SendSpec("t/d@a"), Endpoint(None), ReceiveSpec("r/d"), rate_limit=2 << 20)
    assert time.monotonic() - t0 >= 0.4  # 1 MiB at 2 MiB/s: about half a second


def test_pipeline_cancel_keeps_what_went(stand_in: tuple[ZfsSend, Path],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    zs, _out = stand_in
    monkeypatch.setenv("SEND_BYTES", str(64 << 20))
    cancel = threading.Event()
    zs.REPORT_EVERY = 0.0

    def progress(n: int) -> None:
        if n >= 1 << 20:
            cancel.set()

    with pytest.raises(TransferCancelled) as err:
        zs.transfer(SendSpec("t/d@a"), Endpoint(None), ReceiveSpec("r/d"),
                    rate_limit=4 << 20, progress=progress, cancel=cancel)
    went = err.value.detail["bytes"]
    assert isinstance(went, int) and (1 << 20) <= went < 64 << 20


def test_pipeline_reports_the_receive_side_refusal(stand_in: tuple[ZfsSend, Path],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    zs, _ = stand_in
    monkeypatch.setenv("RECV_FAIL", "cannot receive incremental stream: destination r/d has "
                                    "been modified since most recent snapshot")
    with pytest.raises(Diverged):
        zs.transfer(SendSpec("t/d@b", "t/d@a"), Endpoint(None), ReceiveSpec("r/d"))


def test_pipeline_reports_the_send_side_failure(stand_in: tuple[ZfsSend, Path],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    zs, _ = stand_in
    monkeypatch.setenv("SEND_FAIL", "cannot open 't/d@b': dataset does not exist")
    with pytest.raises(NotFound):
        zs.transfer(SendSpec("t/d@b"), Endpoint(None), ReceiveSpec("r/d"))
    monkeypatch.setenv("SEND_FAIL", "cannot resume send: 't/d@b' used in the initial send "
                                    "no longer exists")
    with pytest.raises(StaleResume):
        zs.transfer(SendSpec(resume_token="1-ab"), Endpoint(None), ReceiveSpec("r/d"))


def test_hold_repeats_are_told_apart_from_missing_snapshots(tmp_path: Path) -> None:
    """The cursor's hold goes through the Zfs adapter: replication ignores a repeated
    hold (Conflict) or release (NotFound), so the adapter must classify them so, and a
    missing snapshot as NotFound, not Conflict."""
    runner = RecordingRunner()
    runner.on(["zfs", "hold"], returncode=1, stderr="cannot hold snapshot 't/d@s': tag "
                                                     "already exists on this dataset")
    runner.on(["zfs", "release"], returncode=1, stderr="cannot release hold from snapshot "
                                                       "'t/d@s': no such tag on this dataset")
    zfs = Zfs(runner)
    with pytest.raises(Conflict):
        zfs.hold("zds-repl:r1", ["t/d@s"])
    with pytest.raises(NotFound):
        zfs.release("zds-repl:r1", ["t/d@s"])
    runner.on(["zfs", "hold"], returncode=1, stderr="cannot open 't/d@x': dataset does not "
                                                     "exist")
    with pytest.raises(NotFound):
        zfs.hold("zds-repl:r1", ["t/d@x"])
    runner.on(["zfs", "bookmark"], returncode=1, stderr="cannot create bookmark 't/d#b': "
                                                         "bookmark exists")
    with pytest.raises(Conflict):
        ZfsSend(runner, OpenSsh(runner, tmp_path)).bookmark("t/d@s", "t/d#b")


# --- the ssh+tcp transport: the real gate and pipeline, with stand-ins for ssh and zfs ----

# A stand-in for ssh: runs the receive gate as sshd would (the remote command in
# SSH_ORIGINAL_COMMAND, the connection's addresses in SSH_CONNECTION); with SSH_DROP set
# it starts the gate in the background and ends after that many seconds, like a session
# killed mid-stream.
FAKE_SSH = """#!/bin/sh
for last in "$@"; do :; done
echo "$last" >> "$SSH_LOG"
export SSH_ORIGINAL_COMMAND="$last" SSH_CONNECTION="127.0.0.1 40000 127.0.0.1 22"
if [ -n "$SSH_DROP" ]; then
  "$PYTHON" -m appliance.host.sshgate --name t --prefix r --data-ports "$PORTS" &
  sleep "$SSH_DROP"
  echo "Connection to 127.0.0.1 closed by remote host." >&2
  exit 255
fi
exec "$PYTHON" -m appliance.host.sshgate --name t --prefix r --data-ports "$PORTS"
"""


@pytest.fixture
def over_tcp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[ZfsSend, Path, Path]:
    import sys

    for name, text in (("zfs", FAKE_ZFS), ("ssh", FAKE_SSH)):
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(0o755)
    keys = tmp_path / "keys"
    keys.mkdir()
    (keys / "id_ed25519").write_text("k")
    (keys / "id_ed25519.pub").write_text(KEY)
    out, log = tmp_path / "received", tmp_path / "ssh.log"
    repo = Path(__file__).resolve().parents[2]
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")  # the gate's zfs
    monkeypatch.setenv("PYTHONPATH", str(repo))
    monkeypatch.setenv("PYTHON", sys.executable)
    monkeypatch.setenv("PORTS", "29100-29199")
    monkeypatch.setenv("RECV_FILE", str(out))
    monkeypatch.setenv("SSH_LOG", str(log))
    monkeypatch.setenv("SEND_BYTES", str(8 << 20))
    runner = SubprocessRunner()
    return ZfsSend(runner, OpenSsh(runner, keys, ssh=str(tmp_path / "ssh")),
                   zfs=str(tmp_path / "zfs")), out, log


def test_ssh_tcp_sends_the_stream_outside_ssh(over_tcp: tuple[ZfsSend, Path, Path]) -> None:
    zs, out, log = over_tcp
    seen: list[int] = []
    zs.REPORT_EVERY = 0.0
    stats = zs.transfer(SendSpec("t/d@a"), Endpoint("127.0.0.1"), ReceiveSpec("r/d"),
                        progress=seen.append, transport="ssh+tcp")
    assert stats.bytes == 8 << 20 == out.stat().st_size and seen[-1] == 8 << 20
    # the stand-in ssh got no stdin at all: every byte came through the data connection
    assert log.read_text().startswith("via-tcp zfs receive -s -u r/d")


def test_ssh_tcp_reports_the_receive_side_refusal(over_tcp: tuple[ZfsSend, Path, Path],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    zs, _, _ = over_tcp
    monkeypatch.setenv("RECV_FAIL", "cannot receive incremental stream: destination r/d has "
                                    "been modified since most recent snapshot")
    with pytest.raises(Diverged):
        zs.transfer(SendSpec("t/d@b", "t/d@a"), Endpoint("127.0.0.1"), ReceiveSpec("r/d"),
                    transport="ssh+tcp")


def test_ssh_tcp_stops_when_the_ssh_session_ends(over_tcp: tuple[ZfsSend, Path, Path],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Without SSH the receive's status can no longer come back: the source must cut the
    data connection too (the target then keeps what arrived, resumable)."""
    zs, out, _ = over_tcp
    monkeypatch.setenv("SEND_BYTES", str(64 << 20))
    monkeypatch.setenv("SSH_DROP", "1")
    with pytest.raises(ZdsError) as err:
        zs.transfer(SendSpec("t/d@a"), Endpoint("127.0.0.1"), ReceiveSpec("r/d"),
                    rate_limit=8 << 20, transport="ssh+tcp")
    assert isinstance(err.value, TransferInterrupted), err.value
    for _ in range(50):  # the stand-in's background receive ends on the socket's EOF
        if out.exists() and out.stat().st_size > 0:
            break
        time.sleep(0.1)
    assert 0 < out.stat().st_size < 64 << 20


def test_ssh_tcp_needs_a_target_that_names_a_reachable_port(
        over_tcp: tuple[ZfsSend, Path, Path], tmp_path: Path) -> None:
    zs, _, _ = over_tcp
    ssh = tmp_path / "ssh"
    ssh.write_text("#!/bin/sh\necho 'zds-tcp 1 " + "ab" * 16 + "'\nsleep 5\n")
    with pytest.raises(TargetUnreachable) as err:
        zs.transfer(SendSpec("t/d@a"), Endpoint("127.0.0.1"), ReceiveSpec("r/d"),
                    transport="ssh+tcp")
    assert "127.0.0.1:1" in err.value.message and "29100-29199" in err.value.message
    ssh.write_text("#!/bin/sh\necho 'welcome to some other host'\nsleep 5\n")
    with pytest.raises(TargetUnreachable) as err:
        zs.transfer(SendSpec("t/d@a"), Endpoint("127.0.0.1"), ReceiveSpec("r/d"),
                    transport="ssh+tcp")
    assert "does not speak ssh+tcp" in err.value.message


def test_gate_data_connection_needs_the_token_and_the_ssh_client() -> None:
    import socket

    listener = sshgate.listen("127.0.0.1", range(29100, 29200))
    port = listener.getsockname()[1]
    assert 29100 <= port < 29200
    token = b"t" * sshgate.TOKEN_BYTES

    def connect(data: bytes) -> None:
        with socket.create_connection(("127.0.0.1", port)) as c:
            c.sendall(data)
            time.sleep(0.3)

    t = threading.Thread(target=connect, args=(b"x" * sshgate.TOKEN_BYTES,))
    t.start()
    with pytest.raises(sshgate.Refused, match="did not present the token"):
        sshgate.accept_source(listener, "127.0.0.1", token, timeout=2)
    t.join()
    # a connection from another address than the SSH client's is ignored (then: timeout)
    t = threading.Thread(target=connect, args=(token,))
    t.start()
    with pytest.raises(sshgate.Refused, match=r"no data connection from 192\.0\.2\.7"):
        sshgate.accept_source(listener, "192.0.2.7", token, timeout=1)
    t.join()
    t = threading.Thread(target=connect, args=(token + b"stream",))
    t.start()
    conn = sshgate.accept_source(listener, "127.0.0.1", token, timeout=5)
    assert conn.recv(6) == b"stream"
    conn.close()
    t.join()
    listener.close()
    assert sshgate._same_address("::ffff:192.0.2.7", "192.0.2.7")
    assert sshgate.port_range("29100-29199") == range(29100, 29200)
    with pytest.raises(ValueError):
        sshgate.port_range("0-10")


def test_gate_via_tcp_is_for_a_receive_only(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--name", "zds1", "--prefix", PFX[0]]
    assert sshgate.main(args, {"SSH_ORIGINAL_COMMAND": "via-tcp zfs list -H tank/replicas/"
                                                       "zds1"}) == 1
    assert "via-tcp is for a receive only" in capsys.readouterr().err
    assert sshgate.main(args, {"SSH_ORIGINAL_COMMAND": "via-tcp zfs receive -A tank/replicas/"
                                                       "zds1/a"}) == 1
    assert sshgate.main(args, {"SSH_ORIGINAL_COMMAND": "via-tcp zfs receive -s -u tank/"
                                                       "replicas/zds1/a"}) == 0
    assert capsys.readouterr().out.strip() == "via-tcp zfs receive -s -u tank/replicas/zds1/a"
