"""The Debian mirror the Ansible e2e VM uses through guestfwd (tests/e2e/aptmirror.py):
pipelined HTTP on one connection, .debs from the image build's cache (epoch names too),
upstream only for what is missing, nothing outside the two archives."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from tests.e2e import aptmirror


def test_pipelined_requests_are_served_in_order(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    debs = tmp_path / "debs"
    debs.mkdir()
    (debs / "ethtool_1%3a6.1-1_amd64.deb").write_bytes(b"E" * 10)
    (debs / "fio_3.33-3_amd64.deb").write_bytes(b"F" * 5)
    fetched: list[str] = []

    def fake_fetch(url: str, dest: Path) -> bool:
        fetched.append(url)
        if url.endswith("/missing.deb"):
            return False
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(b"signed")
        return True

    monkeypatch.setattr(aptmirror, "fetch", fake_fetch)
    reqs = [
        "GET /debian/pool/main/e/ethtool/ethtool_6.1-1_amd64.deb HTTP/1.1",
        "GET /debian/pool/main/f/fio/fio_3.33-3_amd64.deb HTTP/1.1",
        "GET /debian-security/dists/bookworm-security/InRelease HTTP/1.1",
        "GET /debian/pool/main/m/missing/missing.deb HTTP/1.1",
        "GET /etc/passwd HTTP/1.1",
        "GET /debian/../../etc/passwd HTTP/1.1",
    ]
    raw = "".join(f"{r}\r\nHost: 10.0.2.100\r\n\r\n" for r in reqs) + \
        "GET /debian/dists/bookworm/InRelease HTTP/1.1\r\nConnection: close\r\n\r\n"
    out = io.BytesIO()
    aptmirror.serve(io.BytesIO(raw.encode()), out, [debs], tmp_path / "cache", io.BytesIO())
    text = out.getvalue()
    statuses = re.findall(r"HTTP/1.1 (\d+)", text.decode("latin-1"))
    assert statuses == ["200", "200", "200", "404", "404", "404", "200"]
    assert b"EEEEEEEEEE" in text and b"FFFFF" in text
    assert fetched == [  # the cached .debs were not fetched; nothing outside the archives
        "http://deb.debian.org/debian-security/dists/bookworm-security/InRelease",
        "http://deb.debian.org/debian/pool/main/m/missing/missing.deb",
        "http://deb.debian.org/debian/dists/bookworm/InRelease",
    ]
