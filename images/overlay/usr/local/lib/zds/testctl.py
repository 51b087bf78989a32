#!/usr/bin/python3
"""ZDS test control agent: runs shell commands sent by the e2e harness (test boots only).

It talks over a virtio-serial port that only test boots have (QEMU `-device virtserialport,
name=org.zds.control`) and it refuses to serve unless the host also passed the fw_cfg file
opt/zds/test-control. Protocol, one JSON object per line each way:
  host  -> guest  {"id": 7, "cmd": "zpool version", "timeout": 120}
  guest -> host   {"id": 7, "rc": 0, "out": "<base64 of stdout+stderr>"}
On start the agent announces itself with {"hello": "<boot_id>"}.
Stdlib only: it runs with Debian's python3 before anything else is set up.
"""

import base64
import json
import os
import subprocess
import sys
import time

FW_CFG = "/sys/firmware/qemu_fw_cfg/by_name/opt/zds/test-control/raw"


def enabled() -> bool:
    subprocess.run(["modprobe", "qemu_fw_cfg"], check=False, capture_output=True)
    return os.path.exists(FW_CFG)


def send(fd: int, obj: dict[str, object]) -> None:
    data = (json.dumps(obj) + "\n").encode()
    while data:
        try:
            n = os.write(fd, data)
        except OSError:
            time.sleep(0.2)  # host side not connected yet
            continue
        data = data[n:]


def run(cmd: str, timeout: float) -> tuple[int, bytes]:
    try:
        p = subprocess.run(["/bin/bash", "-c", cmd], stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
        return p.returncode, p.stdout
    except subprocess.TimeoutExpired as e:
        return 124, (e.output or b"") + b"\n[testctl: timed out]\n"


def main() -> int:
    path = sys.argv[1]
    if not enabled():
        print("no opt/zds/test-control fw_cfg file: control channel disabled")
        return 0
    fd = os.open(path, os.O_RDWR)
    with open("/proc/sys/kernel/random/boot_id") as f:
        boot_id = f.read().strip()
    send(fd, {"hello": boot_id})
    buf = b""
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:  # host not connected: virtio-serial reads return EOF
            time.sleep(0.1)
            continue
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            try:
                req = json.loads(line)
            except ValueError:
                continue
            if "cmd" not in req:
                if req.get("ping"):
                    send(fd, {"id": req.get("id"), "hello": boot_id})
                continue
            rc, out = run(str(req["cmd"]), float(req.get("timeout", 600)))
            send(fd, {"id": req.get("id"), "rc": rc, "out": base64.b64encode(out).decode()})


if __name__ == "__main__":
    sys.exit(main())
