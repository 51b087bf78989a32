"""Host-side clients for the e2e tests: NFSv3 with libnfs (nfs-cp, nfs-ls), iSCSI with
libiscsi (iscsi-inq, iscsi-readcapacity16) and qemu-io/qemu-img over libiscsi for block
data. Every URL names 127.0.0.1 and a forwarded port: nothing follows an address the
appliance advertises (LIO's SendTargets would name the guest's 10.0.2.15).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path


def run(argv: list[str], timeout: float = 300,
        check: bool = True) -> subprocess.CompletedProcess[str]:
    # errors="replace": iscsi-inq prints binary designators as they are
    proc = subprocess.run(argv, capture_output=True, text=True, errors="replace",
                          timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"{argv[0]} failed ({proc.returncode}): {proc.stderr}{proc.stdout}")
    return proc


class Nfs:
    def __init__(self, nfs_port: int, mountd_port: int, workdir: Path) -> None:
        self.nfs_port, self.mountd_port, self.workdir = nfs_port, mountd_port, workdir

    def url(self, export: str, name: str = "") -> str:
        path = export.rstrip("/") + (f"/{name}" if name else "")
        return f"nfs://127.0.0.1{path}?nfsport={self.nfs_port}&mountport={self.mountd_port}"

    def put(self, export: str, name: str, data: bytes) -> None:
        with tempfile.NamedTemporaryFile(dir=self.workdir) as src:
            src.write(data)
            src.flush()
            self._copy_in(src.name, self.url(export, name), 300)

    def put_file(self, export: str, name: str, path: Path) -> None:
        self._copy_in(str(path), self.url(export, name), 900)

    @staticmethod
    def _copy_in(src: str, url: str, timeout: float, patience: float = 120) -> None:
        """nfs-cp, again while the server answers NFS3ERR_JUKEBOX ("try again later": a
        freshly started nfs-ganesha in its grace period refuses the SETATTR of a create),
        as kernel clients do; libnfs's nfs-cp gives up at once."""
        deadline = time.monotonic() + patience
        while True:
            proc = run(["nfs-cp", src, url], timeout=timeout, check=False)
            if proc.returncode == 0:
                return
            if "JUKEBOX" not in proc.stderr + proc.stdout or time.monotonic() > deadline:
                raise AssertionError(f"nfs-cp failed ({proc.returncode}): "
                                     f"{proc.stderr}{proc.stdout}")
            time.sleep(3)

    def get(self, export: str, name: str) -> bytes:
        fd, dst = tempfile.mkstemp(dir=self.workdir)
        os.close(fd)
        os.unlink(dst)  # nfs-cp opens its destination with O_EXCL
        try:
            run(["nfs-cp", self.url(export, name), dst], timeout=900)
            return Path(dst).read_bytes()
        finally:
            if os.path.exists(dst):
                os.unlink(dst)

    def ls(self, export: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run(["nfs-ls", self.url(export)], check=check)


class Iscsi:
    def __init__(self, port: int, workdir: Path) -> None:
        self.port, self.workdir = port, workdir

    def url(self, iqn: str, lun: int = 0) -> str:
        return f"iscsi://127.0.0.1:{self.port}/{iqn}/{lun}"

    def inq(self, iqn: str, initiator: str, *extra: str,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        return run(["iscsi-inq", "-i", initiator, *extra, self.url(iqn)], check=check)

    def readcapacity16(self, iqn: str, initiator: str) -> str:
        return run(["iscsi-readcapacity16", "-i", initiator, self.url(iqn)]).stdout

    def _opts(self, iqn: str, initiator: str) -> str:
        return (f"driver=raw,file.driver=iscsi,file.transport=tcp,"
                f"file.portal=127.0.0.1:{self.port},file.target={iqn},file.lun=0,"
                f"file.initiator-name={initiator}")

    def image_opts(self, iqn: str, initiator: str) -> str:
        """qemu-img/qemu-io --image-opts for LUN 0 through libiscsi as ``initiator``."""
        return self._opts(iqn, initiator)

    def write_image(self, iqn: str, initiator: str, image: Path) -> None:
        """A raw disk image onto LUN 0 from offset 0 (qemu-img convert, no resize)."""
        run(["qemu-img", "convert", "-n", "-f", "raw", str(image), "--target-image-opts",
             self._opts(iqn, initiator)], timeout=600)

    def write(self, iqn: str, initiator: str, data: Path, offset: int) -> None:
        size = data.stat().st_size
        run(["qemu-io", "--image-opts", self._opts(iqn, initiator),
             "-c", f"write -s {data} {offset} {size}"], timeout=600)

    def read(self, iqn: str, initiator: str, offset: int, length: int,
             check: bool = True) -> bytes | None:
        """``length`` bytes at ``offset`` (both multiples of 1 MiB)."""
        mib = 1 << 20
        out = self.workdir / f"read-{os.getpid()}-{offset}.raw"
        out.unlink(missing_ok=True)
        proc = run(["qemu-img", "dd", "--image-opts", "-O", "raw", f"bs={mib}",
                    f"skip={offset // mib}", f"count={(offset + length) // mib}",
                    f"if={self._opts(iqn, initiator)}", f"of={out}"], timeout=600,
                   check=check)
        if proc.returncode != 0:
            return None
        try:
            return out.read_bytes()
        finally:
            out.unlink(missing_ok=True)

    def hold_session(self, iqn: str, initiator: str) -> subprocess.Popen[bytes]:
        """A logged-in initiator for as long as the returned process runs (stop by PID)."""
        return subprocess.Popen(["iscsi-perf", "-i", initiator, self.url(iqn)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
