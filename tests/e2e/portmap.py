"""A portmapper on 127.0.0.1:111 that answers for the appliance's forwarded NFS ports.

QEMU's NFS block driver (libnfs underneath) takes no ports in its URL: it refuses
``?nfsport=&mountport=`` ("Unknown NFS parameter name: nfsport", QEMU 7.2) and always asks
the portmapper on port 111 of the server for MOUNT and NFS. On a real network that is the
appliance's own rpcbind; here the appliance sits behind QEMU user networking with random
host ports, so this stand-in answers GETPORT (portmap v2) and GETADDR (rpcbind v3/v4) with
the forwarded ports on 127.0.0.1. It only ever listens on 127.0.0.1 and only answers.

ONC RPC over TCP (RFC 5531): record marking (a 4-byte header, top bit = last fragment),
call = xid, 0, rpcvers 2, prog, vers, proc, cred, verf, args; a reply is accepted
(xid, 1, 0, verf AUTH_NULL, 0 = SUCCESS, result).
"""

from __future__ import annotations

import socket
import socketserver
import struct
import threading
from dataclasses import dataclass, field
from types import TracebackType

PMAP_PROG = 100000
NFS_PROG = 100003
MOUNT_PROG = 100005
IPPROTO_TCP = 6


def _xdr_string(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data + b"\0" * (-len(data) % 4)


def _read_string(buf: bytes, off: int) -> tuple[bytes, int]:
    (n,) = struct.unpack_from(">I", buf, off)
    off += 4
    return buf[off:off + n], off + n + (-n % 4)


@dataclass
class Portmapper:
    nfs_port: int
    mountd_port: int
    port: int = 111
    calls: list[tuple[int, int, int]] = field(default_factory=list)  # (vers, proc, program)
    _server: socketserver.ThreadingTCPServer | None = None

    def lookup(self, program: int) -> int:
        return {NFS_PROG: self.nfs_port, MOUNT_PROG: self.mountd_port,
                PMAP_PROG: self.port}.get(program, 0)

    def answer(self, call: bytes) -> bytes | None:
        """The reply record body for one call record body (None: not a call)."""
        if len(call) < 24:
            return None
        xid, mtype, rpcvers, prog, vers, proc = struct.unpack_from(">6I", call)
        if mtype != 0 or rpcvers != 2:
            return None
        off = 24
        for _ in range(2):  # cred, verf: flavor + opaque body
            off += 4
            _, off = _read_string(call, off)
        ok = struct.pack(">IIIII", xid, 1, 0, 0, 0) + struct.pack(">I", 0)
        if prog != PMAP_PROG:
            return struct.pack(">IIIII", xid, 1, 0, 0, 0) + struct.pack(">I", 1)  # PROG_UNAVAIL
        if proc == 0:  # NULL
            self.calls.append((vers, proc, 0))
            return ok
        if vers == 2 and proc == 3:  # PMAPPROC_GETPORT(prog, vers, prot, port)
            program, _, prot, _ = struct.unpack_from(">4I", call, off)
            self.calls.append((vers, proc, program))
            port = self.lookup(program) if prot == IPPROTO_TCP else 0
            return ok + struct.pack(">I", port)
        if vers in (3, 4) and proc == 3:  # RPCBPROC_GETADDR(rpcb): prog, vers, netid, addr, owner
            program, _ = struct.unpack_from(">2I", call, off)
            netid, _ = _read_string(call, off + 8)
            self.calls.append((vers, proc, program))
            port = self.lookup(program) if netid == b"tcp" else 0
            uaddr = f"127.0.0.1.{port >> 8}.{port & 0xFF}".encode() if port else b""
            return ok + _xdr_string(uaddr)
        return struct.pack(">IIIII", xid, 1, 0, 0, 0) + struct.pack(">I", 3)  # PROC_UNAVAIL

    def __enter__(self) -> Portmapper:
        owner = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                sock: socket.socket = self.request
                buf = b""
                record = b""
                while True:
                    try:
                        chunk = sock.recv(65536)
                    except ConnectionResetError:  # libnfs resets when it is done
                        return
                    if not chunk:
                        return
                    buf += chunk
                    while len(buf) >= 4:
                        (mark,) = struct.unpack_from(">I", buf)
                        size = mark & 0x7FFFFFFF
                        if len(buf) < 4 + size:
                            break
                        record += buf[4:4 + size]
                        buf = buf[4 + size:]
                        if mark & 0x80000000:
                            reply = owner.answer(record)
                            record = b""
                            if reply is None:
                                return
                            sock.sendall(struct.pack(">I", 0x80000000 | len(reply)) + reply)

        class Server(socketserver.ThreadingTCPServer):
            allow_reuse_address = True
            daemon_threads = True

        self._server = Server(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def getport(port: int, program: int, version: int = 3) -> int:
    """A portmap v2 GETPORT over TCP (what libnfs sends), for checks."""
    call = struct.pack(">6I", 0x1234, 0, 2, PMAP_PROG, 2, 3) + struct.pack(">4I", 0, 0, 0, 0)
    call += struct.pack(">4I", program, version, IPPROTO_TCP, 0)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(struct.pack(">I", 0x80000000 | len(call)) + call)
        data = b""
        while len(data) < 4 + 28:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    xid, mtype, stat, _, _, accept, result = struct.unpack_from(">7I", data, 4)
    assert (xid, mtype, stat, accept) == (0x1234, 1, 0, 0), data
    return int(result)
