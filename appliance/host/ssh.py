"""OpenSSH between appliances: this appliance's replication key, the target host keys it
pins, the keys it authorizes for a restricted receive, and ``ssh`` command lines.

Why OpenSSH (and not a home-made transport or an SSH library): it is on every OpenZFS
host already, so a ZDS appliance can replicate to any of them; its per-key forced command
(``command="..."``, ``restrict`` in authorized_keys) confines a replication key to one
receive gate (:mod:`appliance.host.sshgate`) without any daemon of ours; host keys are
pinned by ``StrictHostKeyChecking=accept-new`` (first contact) or explicitly; and the
stream goes from ``zfs send`` to ``zfs receive`` through the kernel's pipes, never through
Python buffers on the target.

Files (all under ``<state>/replication``): ``id_ed25519`` (+ ``.pub``) the appliance's
key, ``known_hosts`` the pinned target host keys, ``authorized_keys.root`` the sources
this appliance accepts (sshd reads it: ansible role base adds it to AuthorizedKeysFile).
The records behind ``authorized_keys.root`` live in SQLite; the file is rendered from
them, like ganesha's export files.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import os
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from appliance.errors import Conflict, InvalidInput, Unavailable, ZdsError
from appliance.host.run import CommandError, CommandResult, Runner
from appliance.patterns import anchored, base64_starting_with, literal
from appliance.validate import IP_ADDRESS


class TargetUnreachable(Unavailable):
    """No SSH connection to the target: refused, timed out, no route, unknown host."""

    code = "target_unreachable"


class KeyRefused(Conflict):
    """The target's sshd does not accept this appliance's replication key."""

    code = "key_refused"


class HostKeyChanged(Conflict):
    """The target presented a host key other than the one pinned for it."""

    code = "host_key_mismatch"


class GateRefused(Conflict):
    """The target's receive gate refused a command (outside the authorized dataset)."""

    code = "refused_by_target"


# OpenSSH public key types an appliance accepts for replication (ssh-keygen -t ed25519
# is what ZDS makes; ecdsa and rsa keys of other OpenZFS hosts' tools work too).
KEY_TYPES = ("ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
             "ecdsa-sha2-nistp521", "ssh-rsa", "sk-ssh-ed25519@openssh.com")
DATASET_COMPONENT = r"[A-Za-z0-9][A-Za-z0-9_.:-]*"
DATASET_POOL = r"[A-Za-z][A-Za-z0-9_.:-]*"
DATASET_MAX = 200
_DATASET = re.compile(rf"{DATASET_POOL}(?:/{DATASET_COMPONENT})*")
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,252}")
HOST_MAX = 253
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # refused before any strip(): "host\n" is no host
GATE_MODULE = "appliance.host.sshgate"


def public_key(text: str, what: str = "public key") -> str:
    """An OpenSSH public key line reduced to ``type base64`` (the comment dropped), or
    InvalidInput. The base64 blob must decode and name the same type inside."""
    if not isinstance(text, str) or _CONTROL.search(text):
        raise InvalidInput(f"invalid {what}: expected 'ssh-ed25519 AAAA...' on one line")
    parts = text.strip().split()
    if len(parts) < 2 or parts[0] not in KEY_TYPES:
        raise InvalidInput(f"invalid {what}: expected one of {', '.join(KEY_TYPES)} "
                           "followed by the base64 key, as in a .pub file")
    try:
        blob = base64.b64decode(parts[1], validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput(f"invalid {what}: the key is not base64") from None
    # the blob starts with a length-prefixed copy of the type name (RFC 4253 6.6)
    n = int.from_bytes(blob[:4], "big") if len(blob) >= 4 else 0
    if blob[4:4 + n].decode(errors="replace") != parts[0]:
        raise InvalidInput(f"invalid {what}: the key data does not match its type {parts[0]}")
    return f"{parts[0]} {parts[1]}"


def host_name(value: str) -> str:
    """A target host: an IP address or a DNS name (no user@, no port, no options)."""
    if not isinstance(value, str) or _CONTROL.search(value):
        raise InvalidInput(f"invalid host {value!r}")
    text = value.strip()
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    if _HOST.fullmatch(text) and ".." not in text and not text.startswith("-"):
        return text.lower()
    raise InvalidInput(f"invalid host {value!r}: an IP address or a DNS name")


# The rules above as OpenAPI patterns (appliance/patterns.py), narrower only where the
# checks trim blanks or take Unicode whitespace between a key's words.
PUBLIC_KEY_PATTERN = anchored(" *(?:" + "|".join(
    # the base64 blob starts with the length-prefixed type name, as public_key() checks
    literal(t) + " +" + base64_starting_with(len(t).to_bytes(4, "big") + t.encode())
    for t in KEY_TYPES) + r")(?: [^\x00-\x1f\x7f]*)?")
HOST_PATTERN = anchored(rf"{IP_ADDRESS}|[A-Za-z0-9][A-Za-z0-9-]*(?:\.[A-Za-z0-9-]+)*\.?")


@dataclass(frozen=True)
class Endpoint:
    """Where a target's ``zfs`` commands run: ``host`` over SSH, or this machine when
    ``host`` is None (contract checks, benchmarks)."""

    host: str | None
    port: int = 22
    user: str = "root"

    @property
    def local(self) -> bool:
        return self.host is None

    def known_hosts_name(self) -> str:
        """How known_hosts names this endpoint (``[host]:port`` unless port 22)."""
        assert self.host is not None
        return self.host if self.port == 22 else f"[{self.host}]:{self.port}"

    def describe(self) -> str:
        return "this machine" if self.host is None else \
            f"{self.user}@{self.host}" + (f":{self.port}" if self.port != 22 else "")


@dataclass(frozen=True)
class AuthorizedKey:
    """A source allowed to replicate into ``prefix`` (and below) on this appliance."""

    name: str
    public_key: str  # "type base64"
    prefix: str  # a dataset: the source may receive into it and below it only
    sources: tuple[str, ...] = ()  # from= patterns (addresses/CIDRs); empty: any


def gate_command(entry: AuthorizedKey, python: str = sys.executable) -> str:
    """The forced command of ``entry``'s authorized_keys line."""
    return shlex.join([python, "-m", GATE_MODULE, "--name", entry.name,
                       "--prefix", entry.prefix])


def render_authorized_keys(entries: Sequence[AuthorizedKey],
                           python: str = sys.executable) -> str:
    """authorized_keys text: each key restricted (no pty, no forwarding) to the gate.

    Sample line::

        restrict,command="/opt/zds/venv/bin/python -m appliance.host.sshgate --name zds1
        --prefix tank/replicas/zds1",from="192.0.2.10" ssh-ed25519 AAAAC3Nz... zds:zds1
    """
    lines = ["# Managed by ZDS (PUT /api/v1/replication/authorized-keys/NAME): edits are lost"]
    for e in sorted(entries, key=lambda e: e.name):
        if not _DATASET.fullmatch(e.prefix) or not re.fullmatch(r"[a-z0-9.-]+", e.name):
            raise InvalidInput(f"cannot authorize {e.name!r}: invalid name or prefix")
        options = ["restrict", f'command="{gate_command(e, python)}"']
        if e.sources:
            for s in e.sources:
                if not re.fullmatch(r"[0-9A-Fa-f.:/*?a-z-]+", s):
                    raise InvalidInput(f"invalid from= pattern {s!r}")
            options.append(f'from="{",".join(e.sources)}"')
        lines.append(f"{','.join(options)} {public_key(e.public_key)} zds:{e.name}")
    return "\n".join(lines) + "\n"


def parse_known_hosts(text: str) -> dict[str, list[str]]:
    """known_hosts (unhashed) -> {host pattern: ["type base64", ...]}.

    Sample (what ssh's accept-new writes for 127.0.0.1 on port 22)::

        127.0.0.1 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG...
        [192.0.2.20]:2222 ecdsa-sha2-nistp256 AAAAE2VjZHNh...
    """
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 3 or line.startswith(("#", "|", "@")):
            continue
        for host in parts[0].split(","):
            found.setdefault(host, []).append(f"{parts[1]} {parts[2]}")
    return found


# ---- errors ---------------------------------------------------------------------------
# What ssh 9.2 (Debian 12) prints, exit status 255:
#   ssh: connect to host 127.0.0.1 port 1: Connection refused
#   ssh: connect to host 203.0.113.1 port 22: Connection timed out
#   ssh: Could not resolve hostname no-such-host.invalid: Name or service not known
#   ssh: connect to host 192.0.2.1 port 22: No route to host
#   nobody@127.0.0.1: Permission denied (publickey).
#   @    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @ ... Host key verification failed.
#   Host key verification failed.
#   Connection closed by 127.0.0.1 port 22 / client_loop: send disconnect: Broken pipe
_UNREACHABLE = ("connection refused", "connection timed out", "timed out", "no route to host",
                "could not resolve hostname", "network is unreachable", "name or service not known",
                "temporary failure in name resolution", "connection reset by peer",
                "kex_exchange_identification", "host is unreachable")


def key_refused(where: str, stderr: str = "") -> KeyRefused:
    return KeyRefused(
        f"{where} refused this appliance's replication key: authorize it on the target "
        "(GET /api/v1/replication/identity here, then PUT "
        "/api/v1/replication/authorized-keys/NAME there)", detail={"stderr": stderr[-2000:]})


def host_key_changed(where: str, stderr: str = "") -> HostKeyChanged:
    return HostKeyChanged(
        f"{where} presented a different SSH host key than the one pinned for it: "
        "someone may be intercepting the connection, or the target was reinstalled. "
        "Check the target's key (GET /api/v1/replication/identity on it) and pin it "
        "with PUT /api/v1/replications/NAME {\"target\": {\"host_key\": ...}}",
        detail={"stderr": stderr[-2000:]})


def gate_refused(where: str, reason: str) -> GateRefused:
    return GateRefused(f"{where} refused the command: {reason} (the key is authorized for "
                       "another dataset prefix there)")


def unreachable(where: str, reason: str, stderr: str = "") -> TargetUnreachable:
    return TargetUnreachable(f"cannot reach {where}: {reason}",
                             detail={"stderr": stderr[-2000:]})


def classify_ssh_error(result: CommandResult, endpoint: Endpoint) -> ZdsError | None:
    """The engine error for a failed ssh command, when ssh itself failed (exit 255 with
    its own message); None when the remote command failed (classify its stderr)."""
    text = result.stderr.strip()
    low = text.lower()
    where = endpoint.describe()
    if "zds-gate: refused" in low:
        line = next((x for x in text.splitlines() if "zds-gate" in x), text)
        return gate_refused(where, line.split("refused:", 1)[-1].strip())
    if result.returncode != 255:
        return None
    if "remote host identification has changed" in low or "host key verification failed" in low:
        return host_key_changed(where, text)
    if "permission denied" in low or "too many authentication failures" in low:
        return key_refused(where, text)
    if any(n in low for n in _UNREACHABLE):
        line = text.splitlines()[-1] if text else "no answer"
        return unreachable(where, line.removeprefix("ssh: "), text)
    if text:
        return unreachable(where, f"ssh failed: {text.splitlines()[-1]}", text)
    return None


class SshHost(Protocol):
    """This appliance's side of SSH for replication (real: :class:`OpenSsh`)."""

    def public_key(self) -> str:
        """This appliance's replication public key ("type base64 comment"), made on first
        use."""

    def host_keys(self) -> list[str]:
        """This machine's SSH host keys ("type base64"), what a source pins."""

    def pinned(self, endpoint: Endpoint) -> list[str]:
        """The host keys pinned for ``endpoint`` ([] before first contact)."""

    def pin(self, endpoint: Endpoint, key: str | None) -> None:
        """Pins ``key`` for ``endpoint`` (replacing what was pinned); None forgets it, so
        the next contact pins what the target presents."""

    def authorized(self) -> list[AuthorizedKey]:
        """The entries of the authorized_keys file ZDS manages."""

    def set_authorized(self, entries: Sequence[AuthorizedKey]) -> None:
        """Rewrites that file (atomically) with exactly ``entries``."""

    def close(self, endpoint: Endpoint) -> None:
        """Ends the connection a run's commands to ``endpoint`` shared (if any)."""


class OpenSsh:
    """:class:`SshHost` on OpenSSH's ``ssh`` and ``ssh-keygen`` and files in ``directory``.

    Also builds the command lines :class:`appliance.host.zfs_send.ZfsSend` runs on a
    target (:meth:`argv`, :meth:`runner`)."""

    CONNECT_TIMEOUT = 10
    KEX = "curve25519-sha256"

    def __init__(self, runner: Runner, directory: Path, *, host_key_dir: Path = Path("/etc/ssh"),
                 ssh: str = "ssh", keygen: str = "ssh-keygen", python: str = sys.executable,
                 authorized_name: str = "authorized_keys.root", hostname: str = "zds") -> None:
        self.run = runner
        self.dir = directory
        self.host_key_dir = host_key_dir
        self.ssh = ssh
        self.keygen = keygen
        self.python = python
        self.authorized_file = directory / authorized_name
        self.hostname = hostname

    @property
    def key_file(self) -> Path:
        return self.dir / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.dir / "known_hosts"

    def _ensure_dir(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)

    def public_key(self) -> str:
        pub = self.key_file.with_suffix(".pub")
        if not self.key_file.exists() or not pub.exists():
            self._ensure_dir()
            for p in (self.key_file, pub):
                p.unlink(missing_ok=True)
            self.run.run([self.keygen, "-q", "-t", "ed25519", "-N", "", "-C",
                          f"zds-replication@{self.hostname}", "-f", str(self.key_file)],
                         timeout=60)
        return pub.read_text().strip()

    def host_keys(self) -> list[str]:
        keys = []
        for path in sorted(self.host_key_dir.glob("ssh_host_*_key.pub")):
            parts = path.read_text().split()
            if len(parts) >= 2:
                keys.append(f"{parts[0]} {parts[1]}")
        # ed25519 first: what ssh negotiates first with OpenSSH servers
        return sorted(keys, key=lambda k: (not k.startswith("ssh-ed25519"), k))

    def _read_known(self) -> str:
        try:
            return self.known_hosts.read_text()
        except FileNotFoundError:
            return ""

    def pinned(self, endpoint: Endpoint) -> list[str]:
        if endpoint.host is None:
            return []
        return parse_known_hosts(self._read_known()).get(endpoint.known_hosts_name(), [])

    def pin(self, endpoint: Endpoint, key: str | None) -> None:
        if endpoint.host is None:
            return
        name = endpoint.known_hosts_name()
        kept = [line for line in self._read_known().splitlines()
                if line.strip() and name not in line.split()[0].split(",")]
        if key is not None:
            kept.append(f"{name} {public_key(key, 'host key')}")
        self._write(self.known_hosts, "\n".join(kept) + "\n" if kept else "")

    def _write(self, path: Path, text: str) -> None:
        self._ensure_dir()
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)

    def authorized(self) -> list[AuthorizedKey]:
        try:
            text = self.authorized_file.read_text()
        except FileNotFoundError:
            return []
        return parse_authorized_keys(text)

    def set_authorized(self, entries: Sequence[AuthorizedKey]) -> None:
        self._write(self.authorized_file, render_authorized_keys(entries, self.python))

    # ---- command lines ------------------------------------------------------------
    def options(self, endpoint: Endpoint) -> list[str]:
        """ssh options: batch mode with our key only, host key pinned (first contact
        pins it; a changed key is refused), keepalives so a dead link ends the stream."""
        assert endpoint.host is not None
        self.public_key()  # made on first use
        return [
            "-i", str(self.key_file), "-p", str(endpoint.port), "-l", endpoint.user,
            "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
            "-o", f"UserKnownHostsFile={self.known_hosts}",
            "-o", "GlobalKnownHostsFile=/dev/null", "-o", "HashKnownHosts=no",
            "-o", "StrictHostKeyChecking=accept-new",
            "-o", f"ConnectTimeout={self.CONNECT_TIMEOUT}",
            "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4",
            "-o", "LogLevel=ERROR", "-o", "Compression=no", "-T",
            # curve25519 first (the defaults follow): under emulation a handshake took
            # 4-5 s with it and 7-8 s with ssh 9's default sntrup761 hybrid
            "-o", f"KexAlgorithms=^{self.KEX}",
            # one connection per run: its commands share it (a run's master is closed
            # by close(), so a revoked key stops the next run; 60 s is the safety net)
            "-o", "ControlMaster=auto", "-o", f"ControlPath={self.dir}/cm-%C",
            "-o", "ControlPersist=60",
        ]

    def argv(self, endpoint: Endpoint, command: Sequence[str]) -> list[str]:
        """The local argv that runs ``command`` on ``endpoint`` (itself when local).
        The remote command is one shell-quoted string, as sshd hands it to the shell
        (or, on a ZDS target, to the gate as SSH_ORIGINAL_COMMAND)."""
        if endpoint.host is None:
            return list(command)
        return [self.ssh, *self.options(endpoint), endpoint.host, "--", shlex.join(command)]

    def close(self, endpoint: Endpoint) -> None:
        """Ends the shared connection to ``endpoint`` (``ssh -O exit``), if there is one."""
        if endpoint.host is None or not self.key_file.exists():
            return
        self.run.run([self.ssh, *self.options(endpoint), "-O", "exit", endpoint.host],
                     check=False, timeout=30)

    def runner(self, endpoint: Endpoint) -> Runner:
        """A Runner whose commands run on ``endpoint``; ssh's own failures raise the
        errors above instead of a CommandError."""
        return self.run if endpoint.host is None else SshRunner(self, endpoint)


class SshRunner:
    """Runs argv on a target through :class:`OpenSsh` (a :class:`Runner`)."""

    def __init__(self, ssh: OpenSsh, endpoint: Endpoint) -> None:
        self.ssh = ssh
        self.endpoint = endpoint

    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float = 120.0,
            check: bool = True, env: Mapping[str, str] | None = None) -> CommandResult:
        result = self.ssh.run.run(self.ssh.argv(self.endpoint, argv), input=input,
                                  timeout=timeout, check=False, env=env)
        err = classify_ssh_error(result, self.endpoint) if not result.ok else None
        if err is not None:
            raise err
        # the remote command's own result, with its argv (the zfs parsers quote it)
        result = CommandResult(tuple(argv), result.returncode, result.stdout, result.stderr)
        if check and not result.ok:
            raise CommandError(result)
        return result


def parse_authorized_keys(text: str) -> list[AuthorizedKey]:
    """Reads back what :func:`render_authorized_keys` wrote (other lines are ignored)."""
    entries = []
    for line in text.splitlines():
        if not line.startswith("restrict,") or " zds:" not in line:
            continue
        m = re.search(r'--name (\S+) --prefix ([^"\s]+)"', line)
        src = re.search(r'from="([^"]*)"', line)
        key = re.search(r'" ((?:ssh|ecdsa|sk)-\S+ \S+) zds:', line)
        if not m or not key:
            continue
        entries.append(AuthorizedKey(
            name=shlex.split(m.group(1))[0], public_key=key.group(1),
            prefix=shlex.split(m.group(2))[0],
            sources=tuple(src.group(1).split(",")) if src else ()))
    return entries


def require_dataset_name(name: str, what: str = "dataset") -> str:
    """A ZFS filesystem/volume name (pool/a/b) safe for a command line, or InvalidInput."""
    if not isinstance(name, str) or not _DATASET.fullmatch(name) or len(name) > DATASET_MAX:
        raise InvalidInput(f"invalid {what} {name!r}: a ZFS dataset name such as "
                           "tank/replicas/zds1 (letters, digits, '_', '.', ':', '-')")
    return name

