"""Network probes: iperf3 throughput and TCP round-trip times.

``iperf3 -c HOST -p PORT -t SECONDS -P STREAMS -J`` prints one JSON document; the number
we keep is what the receiver got. Sample (iperf 3.12, trimmed)::

    {"start": {"version": "iperf 3.12", ...}, "intervals": [...],
     "end": {"sum_sent": {"bits_per_second": 18791140000.0, ...},
             "sum_received": {"seconds": 1.000523, "bytes": 2349465600,
                              "bits_per_second": 18785899774.41798, "sender": true},
             "cpu_utilization_percent": {"host_total": 61.2, "remote_total": 40.1}}}

RTT is measured in-process with sockets: ``connect`` mode times TCP handshakes to a
listening port (the NFS port needs no extra service), ``pingpong`` times small echo
exchanges over one connection to an :class:`EchoServer` (the appliance's, or one started
on loopback for the local target).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass

from appliance.errors import HostCommandFailed, Unavailable
from appliance.host.run import Runner
from appliance.host.spawn import Process, Spawner


@dataclass(frozen=True)
class IperfResult:
    gbps: float
    sent_gbps: float
    seconds: float
    cpu_host_pct: float | None
    version: str


def parse_iperf3(text: str) -> IperfResult:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HostCommandFailed(f"iperf3 JSON output is not valid: {exc}") from exc
    if "error" in doc:
        raise Unavailable(f"iperf3: {doc['error']}")
    end = doc.get("end", {})
    recv = end.get("sum_received") or end.get("sum") or {}
    sent = end.get("sum_sent") or recv
    cpu = end.get("cpu_utilization_percent", {})
    return IperfResult(
        gbps=float(recv.get("bits_per_second", 0.0)) / 1e9,
        sent_gbps=float(sent.get("bits_per_second", 0.0)) / 1e9,
        seconds=float(recv.get("seconds", 0.0)),
        cpu_host_pct=float(cpu["host_total"]) if "host_total" in cpu else None,
        version=str(doc.get("start", {}).get("version", "")),
    )


class Iperf3:
    def __init__(self, runner: Runner, spawner: Spawner, binary: str = "iperf3") -> None:
        self._runner = runner
        self._spawner = spawner
        self._binary = binary

    def client(self, host: str, port: int, seconds: int, streams: int,
               wait_for_server: float = 5.0) -> IperfResult:
        """Retries while the server is not listening yet (a just-started one-shot server)."""
        deadline = time.monotonic() + wait_for_server
        while True:
            res = self._runner.run(
                [self._binary, "-c", host, "-p", str(port), "-t", str(seconds), "-P",
                 str(streams), "-J"], timeout=seconds + 30, check=False)
            if not res.stdout.strip():
                raise Unavailable(f"iperf3 to {host}:{port} failed: {res.stderr.strip()}")
            try:
                return parse_iperf3(res.stdout)
            except Unavailable as exc:
                if "refused" not in exc.message or time.monotonic() > deadline:
                    raise
            time.sleep(0.2)

    def server_once(self, bind: str, port: int) -> Process:
        """A one-shot server (exits after one client test)."""
        return self._spawner.start([self._binary, "-s", "-1", "-B", bind, "-p", str(port)])


class EchoServer:
    """A TCP echo server in a thread (the ping-pong peer)."""

    def __init__(self, bind: str = "127.0.0.1", port: int = 0) -> None:
        self._sock = socket.create_server((bind, port))
        self._sock.settimeout(0.2)
        self.port = int(self._sock.getsockname()[1])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="zds-echo", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _addr = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.settimeout(30)
            try:
                while not self._stop.is_set():
                    data = conn.recv(65536)
                    if not data:
                        return
                    conn.sendall(data)
            except OSError:
                return

    def close(self) -> None:
        self._stop.set()
        self._sock.close()
        self._thread.join(timeout=2)


def _recv_exact(sock: socket.socket, n: int) -> None:
    got = 0
    while got < n:
        chunk = sock.recv(n - got)
        if not chunk:
            raise Unavailable("echo peer closed the connection")
        got += len(chunk)


def tcp_rtt(host: str, port: int, samples: int, mode: str, message: int = 64,
            timeout: float = 5.0) -> list[float]:
    """Round-trip times in milliseconds, one per sample."""
    out: list[float] = []
    try:
        if mode == "connect":
            for _ in range(samples):
                t0 = time.perf_counter()
                s = socket.create_connection((host, port), timeout=timeout)
                out.append((time.perf_counter() - t0) * 1e3)
                s.close()
            return out
        payload = b"z" * message
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for _ in range(samples):
                t0 = time.perf_counter()
                s.sendall(payload)
                _recv_exact(s, message)
                out.append((time.perf_counter() - t0) * 1e3)
    except OSError as exc:
        raise Unavailable(f"cannot reach {host}:{port} for rtt: {exc}") from exc
    return out
