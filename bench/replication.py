"""Replication throughput vs a plain local ``zfs send | zfs receive`` of the same snapshot,
and the time of an incremental run after a 1% change, inside one booted appliance.

    flock /tmp/zds-vm.lock python -m bench.replication [--size 256] [--rounds 3]

Boots the appliance image of this checkout (built or reused like the e2e suite does),
makes a second pool ``zdsbench`` on a sparse file, authorizes the appliance's own key for
``zdsbench/replicas`` and an NFS datastore filled with ``--size`` MiB of random data in the
guest. Each round then times, interleaved on the same snapshot:

  local  ``zfs send -L -c -e -p DS@b1 | zfs receive -s -u zdsbench/local`` in the guest
  zds    a replication run through the API: SSH to 127.0.0.1, the receive gate, the
         spliced pump, the target queries and the cursor (hold + bookmark)
  zds ssh+tcp  the same run with the ssh+tcp transport: SSH for the commands, the stream
         over a plain TCP connection the receive gate accepts once

and the table shows the medians and the median ratio local/zds (throughput of zds
relative to the plain pipe; the target is >= 0.8). Then 1% of the data changes and an
incremental run is timed against the local ``zfs send -I`` of the same change, once per
transport.
``--server/--token/--no-boot`` measure an appliance that is already up instead (it must
have the test-control channel: use the e2e harness's).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from appliance.host.zfs_send import TRANSPORTS
from bench.protocol_overhead import Api

MiB = 1 << 20
Exec = Callable[[str, float], tuple[int, str]]
DS = "bench-repl"
DATASET = f"tank/datastores/{DS}"


class Bench:
    def __init__(self, run: Exec, api_url: str, token: str) -> None:
        self._exec = run
        self.api = Api(api_url, token, insecure=True)
        self.call = self.api.call

    def sh(self, cmd: str, timeout: float = 900) -> str:
        rc, out = self._exec(cmd, timeout)
        if rc != 0:
            raise SystemExit(f"guest command failed ({rc}): {cmd}\n{out}")
        return out

    def timed(self, cmd: str) -> float:
        out = self.sh(f"s=$(date +%s.%N); {cmd}; e=$(date +%s.%N); "
                      "awk -v s=$s -v e=$e 'BEGIN { printf \"T=%.3f\\n\", e - s }'")
        return float(out.strip().splitlines()[-1].split("=", 1)[1])

    def busy(self) -> float:
        """CPU seconds the guest has been busy since boot, all CPUs together (the first
        line of /proc/stat: ``cpu  user nice system idle iowait irq softirq steal ...`` in
        USER_HZ ticks)."""
        f = [int(x) for x in self.sh("head -1 /proc/stat").split()[1:9]]
        return (f[0] + f[1] + f[2] + f[5] + f[6] + f[7]) / int(self.sh("getconf CLK_TCK"))

    def timed_cpu(self, cmd: str) -> tuple[float, float]:
        """(wall seconds, guest CPU seconds) of ``cmd``."""
        before = self.busy()
        seconds = self.timed(cmd)
        return seconds, self.busy() - before

    def setup(self, size_mib: int) -> None:
        pools = {p["name"] for p in self.call("GET", "/pools")}
        if "zdsbench" not in pools:
            job = self.call("POST", "/pools", params={"wait": 300}, json={
                "name": "zdsbench", "sparse_files": {"count": 1, "size": "4G", "type": "disk"}})
            assert job["state"] == "succeeded", job
        self.sh("for i in $(seq 120); do systemctl is-active -q ssh && exit 0; sleep 1; done; "
                "exit 1")
        key = self.call("GET", "/replication/identity")["public_key"]
        self.call("PUT", "/replication/authorized-keys/bench", json={
            "public_key": key, "dataset_prefix": "zdsbench/replicas"})
        if not any(d["name"] == DS for d in self.call("GET", "/datastores")):
            self.call("PUT", f"/datastores/{DS}", json={"protocol": "nfs3", "size": "8G"})
        self.sh(f"dd if=/dev/urandom of=/{DATASET}/data.bin bs=1M count={size_mib} "
                "status=none && sync", timeout=1800)
        self.call("POST", f"/datastores/{DS}/snapshots", json={"name": "b1"})
        self.set_transport("ssh")

    def set_transport(self, transport: str) -> None:
        self.call("PUT", "/replications/bench", json={
            "datastore": DS, "take_snapshot": False, "transport": transport,
            "target": {"host": "127.0.0.1", "dataset": f"zdsbench/replicas/{DS}"}})

    def replicate(self) -> tuple[float, dict[str, Any]]:
        t0 = time.monotonic()
        job = self.api.finish(self.call("POST", "/replications/bench/run",
                                        params={"wait": 600}))
        seconds = time.monotonic() - t0
        if job["state"] != "succeeded":
            raise SystemExit(f"replication failed: {job['error']}")
        return seconds, job["result"]

    def forget_replica(self) -> None:
        self.sh(f"zfs destroy -r zdsbench/replicas/{DS}")

    def plain_ssh(self) -> str:
        """An ssh command line to 127.0.0.1 as root with a bench-only key that is not
        forced to the receive gate (it runs any command), for timing the bare stream."""
        self.sh("mkdir -p -m 700 /root/.ssh && { test -f /root/.ssh/zds-bench || "
                "ssh-keygen -q -t ed25519 -N '' -C zds-bench -f /root/.ssh/zds-bench; } && "
                "grep -qf /root/.ssh/zds-bench.pub /root/.ssh/authorized_keys 2>/dev/null || "
                "cat /root/.ssh/zds-bench.pub >> /root/.ssh/authorized_keys")
        return ("ssh -T -i /root/.ssh/zds-bench -o BatchMode=yes -o IdentitiesOnly=yes "
                "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
                "-o LogLevel=ERROR -o Compression=no -o KexAlgorithms=curve25519-sha256")

    def cleanup(self) -> None:
        self.call("DELETE", "/replications/bench")
        self.call("DELETE", f"/datastores/{DS}", params={"wait": 300, "force": True})
        self.call("DELETE", "/replication/authorized-keys/bench")
        self.sh("zfs destroy -r zdsbench/local 2>/dev/null; zfs destroy -r zdsbench/replicas "
                "2>/dev/null; sed -i '/ zds-bench$/d' /root/.ssh/authorized_keys 2>/dev/null; "
                "rm -f /root/.ssh/zds-bench /root/.ssh/zds-bench.pub /root/zds-bench-*.py; true")


# OpenSSH 9.2's default first choice, then the AES-GCM ciphers (AES-NI and PCLMULQDQ
# on any x86 server since 2010)
CIPHERS = ("chacha20-poly1305@openssh.com", "aes128-gcm@openssh.com", "aes256-gcm@openssh.com")


# A TCP hop without encryption: two user-space copiers on 127.0.0.1 (what ssh adds to a
# local pipe, minus the crypto)
TCP_RECV = """import shutil, socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 9977))
s.listen(1)
shutil.copyfileobj(s.accept()[0].makefile("rb"), sys.stdout.buffer, 1 << 20)
"""
TCP_SEND = """import shutil, socket, sys, time
for _ in range(300):
    try:
        s = socket.create_connection(("127.0.0.1", 9977))
        break
    except ConnectionRefusedError:
        time.sleep(0.05)
f = s.makefile("wb")
shutil.copyfileobj(sys.stdin.buffer, f, 1 << 20)
f.close()
s.close()
"""


def measure(bench: Bench, size_mib: int, rounds: int,
            ciphers: tuple[str, ...] = CIPHERS) -> str:
    bench.setup(size_mib)
    send = f"zfs send -L -c -e -p {DATASET}@b1"
    local: list[float] = []
    # per transport: wall seconds of a run through the API, and of its stream alone
    zds: dict[str, list[float]] = {t: [] for t in TRANSPORTS}
    stream: dict[str, list[float]] = {t: [] for t in TRANSPORTS}
    cpu: dict[str, list[float]] = {}
    # wall seconds of the bare stream per hop: each ssh cipher, and "tcp" (no encryption)
    by_hop: dict[str, list[float]] = {c: [] for c in (*ciphers, "tcp")}
    ssh = bench.plain_ssh() if ciphers else ""
    for name, script in (("recv", TCP_RECV), ("send", TCP_SEND)):
        bench.sh(f"cat > /root/zds-bench-{name}.py <<'EOF'\n{script}EOF")
    via_cipher = {c: f"{ssh} -c {c} 127.0.0.1" for c in ciphers}
    for _ in range(rounds):
        t, c = bench.timed_cpu(f"{send} | zfs receive -s -u zdsbench/local")
        local.append(t)
        cpu.setdefault("local", []).append(c)
        bench.sh("zfs destroy -r zdsbench/local")
        for cipher, via in via_cipher.items():  # the bare stream, one cipher at a time
            t, c = bench.timed_cpu(f"{send} | {via} zfs receive -s -u zdsbench/local")
            by_hop[cipher].append(t)
            cpu.setdefault(cipher, []).append(c)
            bench.sh("zfs destroy -r zdsbench/local")
        t, c = bench.timed_cpu("python3 /root/zds-bench-recv.py | zfs receive -s -u "
                               f"zdsbench/local & {send} | python3 /root/zds-bench-send.py; wait")
        by_hop["tcp"].append(t)
        cpu.setdefault("tcp", []).append(c)
        bench.sh("zfs destroy -r zdsbench/local")
        for transport in TRANSPORTS:
            bench.set_transport(transport)
            before = bench.busy()
            seconds, result = bench.replicate()
            cpu.setdefault(transport, []).append(bench.busy() - before)
            zds[transport].append(seconds)
            stream[transport].append(float(result["transfer_seconds"]))
            bench.forget_replica()
    nbytes = int(result["bytes"])

    def ratio(times: list[float]) -> float:
        """The median of the per-round ratios local / path (each round's own local)."""
        return statistics.median([loc / t for loc, t in zip(local, times, strict=True)])

    # the last replica stays for the incrementals: per transport, 1% of the data
    # changes (another 1% each time), timed locally and through the API
    bench.replicate()
    bench.timed(f"{send} | zfs receive -s -u zdsbench/local")
    change = max(1, size_mib // 100)
    incr: dict[str, tuple[float, float, int]] = {}  # (local s, run s, bytes sent)
    for n, transport in enumerate(TRANSPORTS, start=2):
        bench.sh(f"dd if=/dev/urandom of=/{DATASET}/data.bin bs=1M count={change} "
                 f"seek={size_mib // (2 * (n - 1))} conv=notrunc status=none && sync")
        bench.call("POST", f"/datastores/{DS}/snapshots", json={"name": f"b{n}"})
        t_local = bench.timed(f"zfs send -L -c -e -p -I {DATASET}@b{n - 1} {DATASET}@b{n} "
                              "| zfs receive -s -u zdsbench/local")
        bench.set_transport(transport)
        t_run, result = bench.replicate()
        incr[transport] = (t_local, t_run, int(result["bytes"]))
    bench.cleanup()

    def mbs(seconds: float) -> float:
        return nbytes / seconds / MiB

    def full_rows(t: str) -> list[str]:
        run = f"zds replication run over {t} (full)"
        hop = t.rsplit("+", 1)[-1]  # ssh, or tcp for ssh+tcp
        of_which = f"  of which the stream (send | {hop} | receive)"
        return [f"{run:<44} {statistics.median(zds[t]):8.2f} "
                f"{mbs(statistics.median(zds[t])):8.1f} {ratio(zds[t]):6.2f} "
                f"{statistics.median(cpu[t]):6.1f}",
                f"{of_which:<44} {statistics.median(stream[t]):8.2f} "
                f"{mbs(statistics.median(stream[t])):8.1f} {ratio(stream[t]):6.2f}"]

    def incremental_rows(t: str, again: bool) -> list[str]:
        t_local, t_run, sent = incr[t]
        local_label = "local zfs send -I | receive " + ("(another 1%)" if again else
                                                        "(1% change)")
        run_label = f"zds replication run over {t} " + ("(the same)" if again else
                                                        "(1% change)")
        return [f"{local_label:<44} {t_local:8.2f}",
                f"{run_label:<44} {t_run:8.2f}  ({sent / MiB:.1f} MiB sent)"]

    lines = [
        f"# replication bench, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
        f"{size_mib} MiB of random data, {rounds} rounds (medians)",
        f"{'path':<44} {'seconds':>8} {'MiB/s':>8} {'ratio':>6} {'cpu s':>6}",
        f"{'local zfs send | zfs receive (full)':<44} {statistics.median(local):8.2f} "
        f"{mbs(statistics.median(local)):8.1f} {1.0:6.2f} {statistics.median(cpu['local']):6.1f}",
        *(row for t in TRANSPORTS for row in full_rows(t)),
        *(f"{('  plain ssh -c ' + c.split('@')[0]) if c != 'tcp' else '  tcp, no encryption':<44} "
          f"{statistics.median(t):8.2f} {mbs(statistics.median(t)):8.1f} "
          f"{ratio(t):6.2f} "
          f"{statistics.median(cpu[c]):6.1f}"
          for c, t in by_hop.items()),
        *(row for i, t in enumerate(TRANSPORTS) for row in incremental_rows(t, i > 0)),
        f"rounds: local {[round(x, 2) for x in local]}, "
        + ", ".join(f"zds {t} {[round(x, 2) for x in zds[t]]}, its stream "
                    f"{[round(x, 2) for x in stream[t]]}" for t in TRANSPORTS)
        + f"; {nbytes} bytes per full stream",
        *(f"  {c}: {[round(x, 2) for x in t]}" for c, t in by_hop.items()),
        "cpu s: guest CPU seconds busy during the path, all vCPUs "
        f"({bench.sh('nproc').strip()}) together",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=256, help="MiB of random data")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", help="also write the table to this file")
    ap.add_argument("--ciphers", default=",".join(CIPHERS),
                    help="SSH ciphers to time the bare stream with ('' for none)")
    args = ap.parse_args(argv)

    from images import build
    from images.vm import Appliance, Ports, kvm_works

    image = build.build()
    state = Path(tempfile.mkdtemp(prefix="zds-bench-repl-"))
    vm = Appliance(state_dir=state, base_image=image / "zds.raw", ports=Ports.random_free(),
                   test_control=True)
    vm.prepare(fresh_system=True, fresh_data=True)
    vm.start(kvm=kvm_works())
    try:
        vm.wait_control(900)
        vm.wait_healthy(900)
        table = measure(Bench(vm.exec, vm.api_url, vm.admin_token()), args.size, args.rounds,
                        tuple(c for c in args.ciphers.split(",") if c))
    finally:
        vm.stop(timeout=60)
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
