"""Local machine facts and files the engine needs beyond ZFS/LIO/ganesha: device paths,
sparse files for demo pools, QEMU fw_cfg values, secret files, the host name, versions
of the storage stack, and the self-signed TLS certificate (openssl).
"""

from __future__ import annotations

import glob
import os
import socket
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from appliance.errors import InvalidInput, ZdsError
from appliance.host.run import Runner


class LocalHost(Protocol):
    def device_exists(self, path: str) -> bool: ...

    def glob_devices(self, patterns: tuple[str, ...]) -> list[str]: ...

    def create_sparse_file(self, path: Path, size: int) -> None: ...

    def read_fw_cfg(self, directory: Path, name: str) -> str | None: ...

    def write_secret(self, path: Path, text: str) -> None: ...

    def add_authorized_keys(self, path: Path, keys: list[str]) -> int:
        """Appends the key lines not yet in ``path`` (an OpenSSH authorized_keys file,
        made 0600 in a 0700 directory); returns how many were added."""

    def read_text(self, path: Path) -> str | None: ...

    def remove_file(self, path: Path) -> bool:
        """Removes a file; False when there was none."""
        ...

    def hostname(self) -> str: ...

    def versions(self) -> dict[str, str]: ...

    def machine_uuid(self) -> str | None:
        """The firmware's machine UUID (SMBIOS product_uuid: the VM's UUID on a
        hypervisor), lower case; None when missing or a placeholder (all 0 or all f)."""

    def read_hostid(self) -> str | None:
        """/etc/hostid as ZFS reads it (8 hex digits), None when absent."""

    def write_hostid(self, hostid: str) -> None:
        """Sets /etc/hostid (``zgenhostid -f``)."""

    def ensure_tls_certificate(self, cert: Path, key: Path, hostname: str) -> bool:
        """Creates a self-signed certificate if none exists; True when it made one."""


class RealLocalHost:
    DMI_UUID = "/sys/class/dmi/id/product_uuid"
    HOSTID_FILE = "/etc/hostid"

    def __init__(self, runner: Runner) -> None:
        self.runner = runner

    def device_exists(self, path: str) -> bool:
        try:
            mode = os.stat(path).st_mode
        except OSError:
            return False
        return stat.S_ISBLK(mode) or stat.S_ISREG(mode)

    def glob_devices(self, patterns: tuple[str, ...]) -> list[str]:
        found: list[str] = []
        for pattern in patterns:
            # by-id links to partitions (-partN) are not whole disks
            found.extend(p for p in sorted(glob.glob(pattern)) if "-part" not in p)
        return found

    def create_sparse_file(self, path: Path, size: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab") as f:
            if f.tell() < size:
                f.truncate(size)

    def read_fw_cfg(self, directory: Path, name: str) -> str | None:
        raw = directory / name / "raw"
        if not raw.exists():
            # the fw_cfg sysfs directory appears only with the module loaded
            self.runner.run(["modprobe", "qemu_fw_cfg"], check=False)
        try:
            return raw.read_text().strip()
        except OSError:
            return None

    def write_secret(self, path: Path, text: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, path)

    def add_authorized_keys(self, path: Path, keys: list[str]) -> int:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            text = path.read_text()
        except FileNotFoundError:
            text = ""
        have = {line.strip() for line in text.splitlines()}
        new = [k for k in dict.fromkeys(keys) if k not in have]
        if new:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with os.fdopen(fd, "a") as f:
                if text and not text.endswith("\n"):
                    f.write("\n")
                f.write("".join(k + "\n" for k in new))
        path.chmod(0o600)
        return len(new)

    def read_text(self, path: Path) -> str | None:
        try:
            return path.read_text().strip()
        except OSError:
            return None

    def remove_file(self, path: Path) -> bool:
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        return True

    def hostname(self) -> str:
        return socket.gethostname()

    def machine_uuid(self) -> str | None:
        try:
            text = Path(self.DMI_UUID).read_text().strip().lower()
        except OSError:
            return None
        digits = set(text.replace("-", ""))
        return None if not digits or digits <= {"0"} or digits <= {"f"} else text

    def read_hostid(self) -> str | None:
        # /etc/hostid holds the 32-bit id in native (little-endian) byte order:
        #   $ od -An -tx1 /etc/hostid  ->  33 1f 62 7f  (hostid 7f621f33)
        try:
            raw = Path(self.HOSTID_FILE).read_bytes()
        except OSError:
            return None
        return f"{int.from_bytes(raw[:4], 'little'):08x}" if len(raw) >= 4 else None

    def write_hostid(self, hostid: str) -> None:
        self.runner.run(["zgenhostid", "-f", "-o", self.HOSTID_FILE, hostid], timeout=30)

    def versions(self) -> dict[str, str]:
        out: dict[str, str] = {"kernel": os.uname().release}
        probes = {
            "zfs": ["zfs", "version"],
            "ganesha": ["ganesha.nfsd", "-v"],
            "targetcli": ["targetcli", "--version"],
        }
        for key, argv in probes.items():
            try:
                res = self.runner.run(argv, check=False, timeout=10)
            except ZdsError:
                continue
            # targetcli prints warnings (no preferences file...) before its version
            text = [line.strip() for line in (res.stdout + "\n" + res.stderr).splitlines()
                    if line.strip() and "warning" not in line.lower()]
            if res.ok and text:
                out[key] = " ".join(text[:2])
        return out

    def ensure_tls_certificate(self, cert: Path, key: Path, hostname: str) -> bool:
        if cert.exists() and key.exists():
            return False
        if not all(c.isalnum() or c in ".-" for c in hostname):
            raise InvalidInput(f"host name {hostname!r} cannot go into a certificate")
        cert.parent.mkdir(parents=True, exist_ok=True)
        key.parent.mkdir(parents=True, exist_ok=True)
        self.runner.run([
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-days", "3650", "-subj", f"/CN={hostname}/O=ZDS appliance",
            "-addext", f"subjectAltName=DNS:{hostname},DNS:localhost,IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ])
        key.chmod(0o600)
        return True


@dataclass
class FakeLocalHost:
    """In-memory twin for unit tests."""

    devices: set[str] = field(default_factory=set)
    fw_cfg: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    name: str = "zds-test"
    sparse_files: dict[str, int] = field(default_factory=dict)
    certificates: list[str] = field(default_factory=list)
    uuid: str | None = None
    hostid: str | None = None

    def device_exists(self, path: str) -> bool:
        return path in self.devices or path in self.sparse_files

    def glob_devices(self, patterns: tuple[str, ...]) -> list[str]:
        import fnmatch

        return sorted(d for d in self.devices if any(fnmatch.fnmatch(d, p) for p in patterns))

    def create_sparse_file(self, path: Path, size: int) -> None:
        self.sparse_files[str(path)] = size

    def read_fw_cfg(self, directory: Path, name: str) -> str | None:
        return self.fw_cfg.get(name)

    def write_secret(self, path: Path, text: str) -> None:
        self.files[str(path)] = text

    def add_authorized_keys(self, path: Path, keys: list[str]) -> int:
        have = self.files.get(str(path), "").splitlines()
        new = [k for k in dict.fromkeys(keys) if k not in have]
        self.files[str(path)] = "\n".join([*have, *new])
        return len(new)

    def read_text(self, path: Path) -> str | None:
        return self.files.get(str(path))

    def remove_file(self, path: Path) -> bool:
        return self.files.pop(str(path), None) is not None

    def hostname(self) -> str:
        return self.name

    def machine_uuid(self) -> str | None:
        return self.uuid

    def read_hostid(self) -> str | None:
        return self.hostid

    def write_hostid(self, hostid: str) -> None:
        self.hostid = hostid

    def versions(self) -> dict[str, str]:
        return {"kernel": "test", "zfs": "fake"}

    def ensure_tls_certificate(self, cert: Path, key: Path, hostname: str) -> bool:
        if str(cert) in self.certificates:
            return False
        self.certificates.append(str(cert))
        return True
