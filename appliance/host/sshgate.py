"""The receive gate: the forced command of every replication key a ZDS target authorizes.

sshd runs it instead of whatever the source asked for (authorized_keys
``restrict,command="python -m appliance.host.sshgate --name N --prefix P"``) and puts
the source's command in ``SSH_ORIGINAL_COMMAND``. The gate lets through only what a
replicating source needs, and only on datasets at or below ``--prefix``:

    zfs list  -H -p [-r] [-d N] [-t TYPES] [-o FIELDS] [-s FIELD] NAME...
    zfs get   -H -p [-r] [-d N] [-t TYPES] [-o FIELDS] [-s SOURCES] PROPS NAME...
    zfs receive -s -u [-v] [-o PROP=VALUE]... [-x PROP]... NAME   (-F never: no rollback)
    zfs receive -A NAME
    zfs create -p NAME

and then ``exec``s ``zfs`` itself, so the stream flows from sshd straight into
``zfs receive``. ``-o`` may set only readonly, canmount=noauto and ``zds:*`` properties
(never a mountpoint). Anything else exits 1 with ``zds-gate: refused: ...`` on stderr,
which the source reports as ``refused_by_target``.

A receive prefixed with ``via-tcp`` (the ``ssh+tcp`` transport) takes its stream from a
plain TCP connection instead of the SSH channel, for trusted replication links where
SSH's encryption is the bottleneck: the gate listens on a free port of ``--data-ports``
on the address the SSH connection came in on, prints ``zds-tcp PORT TOKEN`` (the token:
128 random bits, which only the SSH channel carries), accepts one connection from the
SSH client's address that starts with that token, and ``exec``s ``zfs receive`` with the
socket as its stdin. The receive's stderr and exit status still come back through SSH.

Standard library only: it starts for every remote command, under emulation too.
"""

from __future__ import annotations

import argparse
import hmac
import os
import random
import re
import secrets
import shlex
import socket
import sys
import time
from collections.abc import Sequence

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/-]*(?:[@][A-Za-z0-9][A-Za-z0-9_.:-]*)?$")
_PROP = re.compile(r"^[a-z][a-z0-9_.:-]*$")
_LIST = re.compile(r"^[a-z][a-z0-9_.:,-]*$")
_SETTABLE = {"readonly": {"on", "off"}, "canmount": {"noauto", "off"}}

# ports the ssh+tcp transport listens on (the appliance's firewall opens them to the
# addresses it lets reach SSH: ansible base__firewall_replication_ports)
DATA_PORTS = "29100-29199"
VIA_TCP = "via-tcp"
ACCEPT_TIMEOUT = 30.0  # seconds the source has to connect and send the token
TOKEN_BYTES = 16


class Refused(Exception):
    pass


def _under(name: str, prefixes: Sequence[str]) -> str:
    if not _NAME.fullmatch(name) or "//" in name or name.endswith("/"):
        raise Refused(f"invalid dataset name {name!r}")
    base = name.split("@", 1)[0]
    if not any(base == p or base.startswith(p + "/") for p in prefixes):
        raise Refused(f"{base} is outside {', '.join(prefixes)}")
    return name


def _options(args: list[str], flags: str, valued: str) -> tuple[list[str], list[str]]:
    """Splits ``args`` into validated options and positionals (getopt style, no
    clustering of valued options)."""
    opts: list[str] = []
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] != "--":
        arg = args[i]
        letters = arg[1:]
        if not letters:
            raise Refused("empty option")
        for j, c in enumerate(letters):
            if c in flags:
                opts.append(f"-{c}")
            elif c in valued:
                value = letters[j + 1:] or (args[i + 1] if i + 1 < len(args) else None)
                if value is None:
                    raise Refused(f"-{c} needs a value")
                if not letters[j + 1:]:
                    i += 1
                opts += [f"-{c}", value]
                break
            else:
                raise Refused(f"option -{c} is not allowed")
        i += 1
    if i < len(args) and args[i] == "--":
        i += 1
    return opts, args[i:]


def check(argv: Sequence[str], prefixes: Sequence[str]) -> list[str]:
    """The zfs argv to run for the source's command ``argv``, or Refused."""
    if len(argv) < 2 or argv[0] != "zfs":
        raise Refused("only zfs commands are allowed")
    sub, rest = argv[1], list(argv[2:])
    if sub in ("list", "get"):
        opts, names = _options(rest, "Hpr", "dtos")
        for k in range(0, len(opts) - 1):
            if opts[k] in ("-d", "-t", "-o", "-s") and not _LIST.fullmatch(opts[k + 1]) and not (
                    opts[k] == "-d" and opts[k + 1].isdigit()):
                raise Refused(f"bad value for {opts[k]}")
        if sub == "get":
            if not names or not _LIST.fullmatch(names[0]):
                raise Refused("zfs get needs a property list")
            props, names = [names[0]], names[1:]
        else:
            props = []
        if not names:
            raise Refused("name the datasets")
        return ["zfs", sub, *opts, *props, *(_under(n, prefixes) for n in names)]
    if sub in ("receive", "recv"):
        opts, names = _options(rest, "suvA", "ox")
        if len(names) != 1:
            raise Refused("receive takes one dataset")
        if "-A" in opts:
            if opts != ["-A"]:
                raise Refused("receive -A takes no other option")
            return ["zfs", "receive", "-A", _under(names[0], prefixes)]
        if "@" in names[0]:
            raise Refused("receive into a dataset, not a snapshot")
        k = 0
        while k < len(opts):
            if opts[k] == "-o":
                key, sep, value = opts[k + 1].partition("=")
                allowed = _SETTABLE.get(key)
                if not sep or (not (key.startswith("zds:") and _PROP.fullmatch(key)
                                   and "\n" not in value) and not (
                                       allowed and value in allowed)):
                    raise Refused(f"receive may not set {key}")
                k += 2
            elif opts[k] == "-x":
                if not _PROP.fullmatch(opts[k + 1]):
                    raise Refused("bad property for -x")
                k += 2
            else:
                k += 1
        if "-s" not in opts or "-u" not in opts:
            raise Refused("receive needs -s and -u")
        return ["zfs", "receive", *opts, _under(names[0], prefixes)]
    if sub == "create":
        opts, names = _options(rest, "p", "")
        if opts != ["-p"] or len(names) != 1 or "@" in names[0]:
            raise Refused("only zfs create -p NAME is allowed")
        return ["zfs", "create", "-p", _under(names[0], prefixes)]
    raise Refused(f"zfs {sub} is not allowed")


def port_range(text: str) -> range:
    """``29100-29199`` -> the ports, both ends included."""
    low, sep, high = text.partition("-")
    first, last = int(low), int(high if sep else low)
    if not 1 <= first <= last <= 65535:
        raise ValueError(text)
    return range(first, last + 1)


def listen(address: str, ports: range) -> socket.socket:
    """A listening socket on ``address`` and a free port of ``ports`` (tried in random
    order, so two receives at once do not race for the same one)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    for port in random.sample(ports, len(ports)):
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.bind((address, port))
        except OSError:
            sock.close()
            continue
        sock.listen(4)
        return sock
    raise Refused(f"no free data port in {ports.start}-{ports.stop - 1}")


def accept_source(listener: socket.socket, client: str, token: bytes,
                  timeout: float = ACCEPT_TIMEOUT) -> socket.socket:
    """The first connection from ``client`` that starts with ``token``. Connections from
    other addresses are closed and ignored; a wrong token from ``client`` is refused
    (nothing is received from it)."""
    deadline = time.monotonic() + timeout
    while True:
        listener.settimeout(max(0.0, deadline - time.monotonic()))
        try:
            conn, peer = listener.accept()
        except (TimeoutError, BlockingIOError):
            raise Refused(f"no data connection from {client} within {timeout:.0f} s") from None
        if _same_address(peer[0], client):
            break
        conn.close()
    conn.settimeout(timeout)
    got = b""
    try:
        while len(got) < len(token):
            chunk = conn.recv(len(token) - len(got))
            if not chunk:
                break
            got += chunk
    except TimeoutError:
        pass
    if not hmac.compare_digest(got, token):
        conn.close()
        raise Refused(f"the data connection from {client} did not present the token")
    conn.settimeout(None)
    # a source that vanishes (link down, power off) must not leave the receive waiting
    # forever: the kernel probes an idle connection after 30 s and gives up after 60 more
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for opt, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 6)):
        if hasattr(socket, opt):
            conn.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), value)
    return conn


def _same_address(a: str, b: str) -> bool:
    def plain(x: str) -> str:
        x = x.split("%", 1)[0]
        return x[7:] if x.startswith("::ffff:") and "." in x else x
    return plain(a) == plain(b)


def serve_tcp(connection: str, ports: range) -> socket.socket:
    """The ``via-tcp`` handshake: listen, tell the source where and with which token
    (on stdout, through SSH), and return its accepted data connection.
    ``connection`` is sshd's SSH_CONNECTION: ``client_ip client_port server_ip
    server_port``."""
    fields = connection.split()
    if len(fields) != 4:
        raise Refused("via-tcp needs an SSH connection (SSH_CONNECTION is not set)")
    client, server = fields[0], fields[2]
    listener = listen(server, ports)
    token = secrets.token_bytes(TOKEN_BYTES)
    try:
        sys.stdout.write(f"zds-tcp {listener.getsockname()[1]} {token.hex()}\n")
        sys.stdout.flush()
        return accept_source(listener, client, token)
    finally:
        listener.close()


def _refused(exc: Exception, key: str) -> int:
    print(f"zds-gate: refused: {exc} (key {key})", file=sys.stderr)
    return 1


def main(argv: Sequence[str] | None = None, environ: dict[str, str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="zds-gate")
    ap.add_argument("--name", required=True)
    ap.add_argument("--prefix", action="append", required=True)
    ap.add_argument("--data-ports", default=DATA_PORTS, type=port_range)
    args = ap.parse_args(argv)
    env = os.environ if environ is None else environ
    original = env.get("SSH_ORIGINAL_COMMAND", "")
    try:
        command = shlex.split(original)
        via_tcp = command[:1] == [VIA_TCP]
        zfs_argv = check(command[1:] if via_tcp else command, args.prefix)
        if via_tcp and (zfs_argv[1] != "receive" or "-A" in zfs_argv):
            raise Refused("via-tcp is for a receive only")
    except (Refused, ValueError) as exc:
        return _refused(exc, args.name)
    if environ is not None:  # tests: say what would run
        print(shlex.join([VIA_TCP, *zfs_argv] if via_tcp else zfs_argv))
        return 0
    if via_tcp:
        try:
            data = serve_tcp(env.get("SSH_CONNECTION", ""), args.data_ports)
        except Refused as exc:
            return _refused(exc, args.name)
        os.dup2(data.fileno(), 0)  # the receive reads the socket: no copy by Python
        data.close()
    os.execvp("zfs", zfs_argv)
    return 127  # pragma: no cover - exec does not return


if __name__ == "__main__":
    sys.exit(main())
