"""The e2e suite's portmapper stand-in (tests/e2e/portmap.py): QEMU's NFS driver asks it
for the MOUNT and NFS ports; it must answer with the forwarded ones, over RPC record
marking, for portmap v2 GETPORT and rpcbind v4 GETADDR."""

from __future__ import annotations

import socket
import struct

from tests.e2e.portmap import MOUNT_PROG, NFS_PROG, PMAP_PROG, Portmapper, getport


def test_getport_answers_the_forwarded_ports() -> None:
    with Portmapper(nfs_port=12049, mountd_port=30048, port=0) as pm:
        assert getport(pm.port, MOUNT_PROG) == 30048
        assert getport(pm.port, NFS_PROG) == 12049
        assert getport(pm.port, 100021) == 0  # NLM: not forwarded, "not registered"
    assert [c[2] for c in pm.calls] == [MOUNT_PROG, NFS_PROG, 100021]


def test_rpcbind_v4_getaddr_gives_a_universal_address() -> None:
    with Portmapper(nfs_port=12049, mountd_port=30048, port=0) as pm:
        netid, addr, owner = b"tcp\0", b"", b""
        args = struct.pack(">2I", NFS_PROG, 3)
        for text in (netid[:3], addr, owner):
            args += struct.pack(">I", len(text)) + text + b"\0" * (-len(text) % 4)
        call = struct.pack(">6I", 7, 0, 2, PMAP_PROG, 4, 3) + struct.pack(">4I", 0, 0, 0, 0)
        call += args
        with socket.create_connection(("127.0.0.1", pm.port), timeout=5) as sock:
            # two fragments: the server must join them before answering
            sock.sendall(struct.pack(">I", 8) + call[:8])
            sock.sendall(struct.pack(">I", 0x80000000 | (len(call) - 8)) + call[8:])
            data = sock.recv(4096)
    (n,) = struct.unpack_from(">I", data, 28)
    assert data[32:32 + n] == b"127.0.0.1.47.17"  # 12049 = 47 * 256 + 17
