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

Standard library only: it starts for every remote command, under emulation too.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
from collections.abc import Sequence

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/-]*(?:[@][A-Za-z0-9][A-Za-z0-9_.:-]*)?$")
_PROP = re.compile(r"^[a-z][a-z0-9_.:-]*$")
_LIST = re.compile(r"^[a-z][a-z0-9_.:,-]*$")
_SETTABLE = {"readonly": {"on", "off"}, "canmount": {"noauto", "off"}}


class Refused(Exception):
    pass


def _under(name: str, prefixes: Sequence[str]) -> str:
    if not _NAME.match(name) or "//" in name or name.endswith("/"):
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
            if opts[k] in ("-d", "-t", "-o", "-s") and not _LIST.match(opts[k + 1]) and not (
                    opts[k] == "-d" and opts[k + 1].isdigit()):
                raise Refused(f"bad value for {opts[k]}")
        if sub == "get":
            if not names or not _LIST.match(names[0]):
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
                if not sep or (not (key.startswith("zds:") and _PROP.match(key)
                                   and "\n" not in value) and not (
                                       allowed and value in allowed)):
                    raise Refused(f"receive may not set {key}")
                k += 2
            elif opts[k] == "-x":
                if not _PROP.match(opts[k + 1]):
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


def main(argv: Sequence[str] | None = None, environ: dict[str, str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="zds-gate")
    ap.add_argument("--name", required=True)
    ap.add_argument("--prefix", action="append", required=True)
    args = ap.parse_args(argv)
    env = os.environ if environ is None else environ
    original = env.get("SSH_ORIGINAL_COMMAND", "")
    try:
        command = shlex.split(original)
        zfs_argv = check(command, args.prefix)
    except (Refused, ValueError) as exc:
        print(f"zds-gate: refused: {exc} (key {args.name})", file=sys.stderr)
        return 1
    if environ is not None:  # tests: say what would run
        print(shlex.join(zfs_argv))
        return 0
    os.execvp("zfs", zfs_argv)
    return 127  # pragma: no cover - exec does not return


if __name__ == "__main__":
    sys.exit(main())
