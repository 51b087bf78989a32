"""A Debian mirror for a VM that may reach nothing: serves one HTTP connection on stdin/
stdout, started by QEMU for each connection the guest opens to its guestfwd address
(``-netdev user,restrict=on,guestfwd=tcp:10.0.2.100:80-cmd:python3 aptmirror.py ...``).

Paths: ``/debian/...`` is the Debian archive, ``/debian-security/...`` the security
archive (the roles' ``base__apt_mirror`` / ``base__apt_security_mirror`` point there).
The guest's apt checks everything as usual: the signed InRelease files and the index
files come from the real archive (fetched by this host), the .debs are served from the
image build's .deb cache when it has them and fetched by this host otherwise, into
``--cache``. The guest itself never reaches any network: only this process does, and only
the two archive URLs below.

  python3 aptmirror.py --debs DIR [--debs DIR...] --cache DIR     (inetd mode, one client)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import BinaryIO

UPSTREAM = {
    "debian": os.environ.get("ZDS_DEBIAN_MIRROR", "http://deb.debian.org/debian"),
    "debian-security": os.environ.get("ZDS_DEBIAN_SECURITY",
                                      "http://deb.debian.org/debian-security"),
}


def local_deb(name: str, dirs: list[Path]) -> Path | None:
    """A cached .deb for a pool file name; apt's cache names carry the epoch (``1%3a``),
    the archive's do not."""
    pkg, _, rest = name.partition("_")
    for d in dirs:
        p = d / name
        if p.is_file():
            return p
        for p in d.glob(f"{pkg}_*%3a{rest}"):
            return p
    return None


def fetch(url: str, dest: Path) -> bool:
    """Downloads url into dest (atomically); False on 404."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".part-")
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=120) as r:
            shutil.copyfileobj(r, out)
        os.replace(tmp, dest)
        return True
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return False
        raise
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def resolve(path: str, debs: list[Path], cache: Path, log: BinaryIO) -> Path | None:
    parts = [p for p in urllib.parse.unquote(path.split("?", 1)[0]).split("/") if p]
    if not parts or parts[0] not in UPSTREAM or any(p in ("..", ".") for p in parts):
        return None
    rel = "/".join(parts[1:])
    target = cache / parts[0] / rel
    if parts[1:2] == ["pool"] and rel.endswith(".deb"):
        hit = local_deb(parts[-1], debs)
        if hit is not None:
            return hit
        if target.is_file():
            return target
    elif "by-hash" in parts and target.is_file():
        return target  # content-addressed: never stale
    t0 = time.monotonic()
    ok = fetch(f"{UPSTREAM[parts[0]]}/{rel}", target)
    log.write(f"fetched {path} ({time.monotonic() - t0:.1f} s){'' if ok else ': 404'}\n"
              .encode())
    return target if ok else None


def serve(inp: BinaryIO, out: BinaryIO, debs: list[Path], cache: Path, log: BinaryIO) -> None:
    while True:
        line = inp.readline()
        if not line:
            return
        if not line.strip():
            continue
        method, path, _ = [*line.decode("latin-1").split(), "", ""][:3]
        headers: dict[str, str] = {}
        while (h := inp.readline()) not in (b"\r\n", b"\n", b""):
            k, _, v = h.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        close = headers.get("connection", "").lower() == "close"
        try:
            f = resolve(path, debs, cache, log) if method in ("GET", "HEAD") else None
        except (OSError, urllib.error.URLError) as e:
            log.write(f"error {path}: {e}\n".encode())
            f = None
        if f is None:
            body = b"not here\n"
            out.write(b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\n"
                      b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        else:
            out.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                      b"Content-Length: %d\r\n\r\n" % f.stat().st_size)
            if method == "GET":
                with f.open("rb") as src:
                    shutil.copyfileobj(src, out)
        out.flush()
        if close:
            return


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--debs", action="append", type=Path, default=[],
                    help="a directory of cached .debs (apt's archive cache naming)")
    ap.add_argument("--cache", type=Path, required=True, help="where fetched files go")
    ap.add_argument("--log", type=Path, help="append what was fetched here")
    args = ap.parse_args()
    with (args.log.open("ab") if args.log else open(os.devnull, "wb")) as log:
        serve(sys.stdin.buffer, sys.stdout.buffer, args.debs, args.cache, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
