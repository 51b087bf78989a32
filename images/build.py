"""Builds the ZDS appliance disk images: raw (GPT, UEFI), qcow2 and OVA.

Pipeline (each step's time is recorded in the build's manifest.json):
  resolve    Debian package versions (kernel ABI, zfs-dkms, ...) from a private apt index
  rootfs     mmdebstrap bookworm root with the kernel, the .deb cache kept between runs
  zfs        spl.ko/zfs.ko built once per kernel ABI + zfs version in a throwaway chroot
  wheels     `pip wheel` of this repo + its dependencies (installed --no-index in the image)
  ansible    ansible/playbooks/image.yml in the root (chroot connection): the OS content
  finish     image-specific bits: fstab, hostname, DHCP, trimmed initrd, test-control agent
  assemble   FAT ESP (systemd-boot) + ext4 root -> GPT raw -> qcow2 + OVA + Vagrant box

Every input (ansible/, images/, the project source, resolved package versions) is hashed;
an unchanged tree reuses the cached build. Run as root on a Debian 12 host.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from images import ovf, vagrant
from images.paths import REPO, images_dir

FORMAT_VERSION = "1"  # bump to invalidate every cached build
MIRROR = os.environ.get("ZDS_DEBIAN_MIRROR", "http://deb.debian.org/debian")
SECURITY = os.environ.get("ZDS_DEBIAN_SECURITY", "http://deb.debian.org/debian-security")
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
SUITE = "bookworm"
ROOT_SIZE_MIB = 6 * 1024
ESP_SIZE_MIB = 128
ESP_TYPE = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B"
ROOT_TYPE = "4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709"  # Linux root (x86-64)
# Packages the image itself needs before Ansible runs (boot, kernel, python for Ansible).
# The appliance's services are NOT listed here: ansible/roles are their single source.
ROOTFS_PACKAGES = [
    "systemd-sysv", "udev", "dbus", "kmod", "e2fsprogs", "procps", "iproute2", "netbase",
    "ca-certificates", "linux-image-amd64", "initramfs-tools", "zstd", "python3",
    "python3-apt", "systemd-boot-efi", "less",
]
BACKPORTS_PIN = [
    "zfs-dkms", "zfsutils-linux", "zfs-zed", "libzfs6linux", "libzpool6linux",
    "libnvpair3linux", "libuutil3linux", "libzfsbootenv1linux",
]
HASHED_DIRS = ["ansible", "images", "appliance", "api"]
HASHED_FILES = ["pyproject.toml", "README.md"]
OUTPUTS = ("zds.raw", "zds.qcow2", "zds.ova", vagrant.BOX_FILE)
# In images/ but not read by the build (the QEMU harness, the e2e guests and Debian VM):
# changing them needs no rebuild.
NOT_BUILD_INPUTS = {"images/vm.py", "images/paths.py", "images/guest.py", "images/hostvm.py"}


def log(msg: str) -> None:
    print(f"[build {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def sh(argv: Sequence[str | Path], *, capture: bool = False, **kw: object) -> str:
    """Runs a build command; its output goes to the terminal unless captured."""
    args = [str(a) for a in argv]
    p = subprocess.run(args, check=False, text=True,
                       stdout=subprocess.PIPE if capture else None, **kw)  # type: ignore[call-overload]
    if p.returncode != 0:
        raise SystemExit(f"build: command failed ({p.returncode}): {' '.join(args)}")
    return p.stdout if capture else ""


def sources() -> list[str]:
    comp = "main contrib"
    return [
        f"deb [signed-by={KEYRING}] {MIRROR} {SUITE} {comp}",
        f"deb [signed-by={KEYRING}] {MIRROR} {SUITE}-updates {comp}",
        f"deb [signed-by={KEYRING}] {SECURITY} {SUITE}-security {comp}",
        f"deb [signed-by={KEYRING}] {MIRROR} {SUITE}-backports {comp}",
    ]


# ---------------------------------------------------------------------------- resolve


class AptIndex:
    """A private apt index on the host (no effect on the host's own apt state)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        for d in ("state/lists/partial", "cache/archives/partial", "etc/preferences.d"):
            (root / d).mkdir(parents=True, exist_ok=True)
        (root / "state/status").touch()
        (root / "etc/sources.list").write_text("\n".join(sources()) + "\n")

    def opts(self) -> list[str]:
        r = self.root
        return [
            "-o", f"Dir::State={r}/state", "-o", f"Dir::State::status={r}/state/status",
            "-o", f"Dir::Cache={r}/cache", "-o", f"Dir::Etc::SourceList={r}/etc/sources.list",
            "-o", "Dir::Etc::SourceParts=/nonexistent",
            "-o", f"Dir::Etc::Preferences={r}/etc/preferences",
            "-o", f"Dir::Etc::PreferencesParts={r}/etc/preferences.d",
            "-o", "APT::Architecture=amd64", "-o", "APT::Architectures=amd64",
            "-o", "Debug::NoLocking=1", "-o", "APT::Sandbox::User=root",
        ]

    def update(self) -> None:
        sh(["apt-get", *self.opts(), "-qq", "update"])

    def candidate(self, pkg: str, release: str | None = None) -> str:
        """apt's candidate (default priorities: backports only when asked for by release)."""
        if release is None:
            out = sh(["apt-cache", *self.opts(), "policy", pkg], capture=True)
            m = re.search(r"^\s*Candidate:\s*(\S+)", out, re.M)
            if not m or m.group(1) == "(none)":
                raise SystemExit(f"build: no candidate for {pkg}")
            return m.group(1)
        out = sh(["apt-cache", *self.opts(), "madison", pkg], capture=True)
        return pick_version(out, release)

    def depends(self, pkg: str, version: str) -> str:
        return sh(["apt-cache", *self.opts(), "show", f"{pkg}={version}"], capture=True)


def pick_version(madison: str, release: str | None) -> str:
    """Highest version from `apt-cache madison` output, optionally from one suite only.

    Sample (madison lists newest first; URL shortened):
      zfs-dkms | 2.3.2-2~bpo12+2 | http://deb.debian.org/debian bookworm-backports/contrib amd64 ...
      zfs-dkms | 2.1.11-1+deb12u1 | http://deb.debian.org/debian bookworm/contrib amd64 Packages
    """
    for line in madison.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < 3:
            continue
        suite = parts[2].split()[1].split("/")[0] if len(parts[2].split()) > 1 else ""
        if release is None or suite == release:
            return parts[1]
    raise SystemExit(f"build: no version found for release {release!r} in:\n{madison}")


def kernel_abi(show: str) -> str:
    """'6.1.0-N-amd64' from `apt-cache show linux-image-amd64=V`.

    Sample: "Depends: linux-image-6.1.0-56-amd64 (= 6.1.158-1)"
    """
    m = re.search(r"^Depends:.*?linux-image-(\d[^\s,(]*-amd64)", show, re.M)
    if not m:
        raise SystemExit("build: cannot find the kernel ABI in linux-image-amd64's Depends")
    return m.group(1)


@dataclass
class Resolved:
    kernel_abi: str
    versions: dict[str, str]


def resolve(cache: Path) -> Resolved:
    apt = AptIndex(cache / "apt-index")
    apt.update()
    v: dict[str, str] = {}
    v["linux-image-amd64"] = apt.candidate("linux-image-amd64")
    abi = kernel_abi(apt.depends("linux-image-amd64", v["linux-image-amd64"]))
    v["linux-image"] = apt.candidate(f"linux-image-{abi}")
    v["zfs-dkms"] = apt.candidate("zfs-dkms", f"{SUITE}-backports")
    v["zfsutils-linux"] = apt.candidate("zfsutils-linux", f"{SUITE}-backports")
    v["nfs-ganesha"] = apt.candidate("nfs-ganesha", f"{SUITE}-backports")
    v["targetcli-fb"] = apt.candidate("targetcli-fb")
    v["systemd"] = apt.candidate("systemd")
    v["python3"] = apt.candidate("python3")
    return Resolved(abi, v)


# ---------------------------------------------------------------------------- hashing


def snapshot(repo: Path, dest: Path) -> None:
    """Copies the hashed inputs (HASHED_DIRS, HASHED_FILES) to dest."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for d in HASHED_DIRS:
        if (repo / d).exists():
            shutil.copytree(repo / d, dest / d, symlinks=True, ignore=ignore)
    for f in HASHED_FILES:
        if (repo / f).exists():
            shutil.copy2(repo / f, dest / f)


def tree_files(repo: Path) -> list[Path]:
    files: list[Path] = []
    for d in HASHED_DIRS:
        base = repo / d
        if not base.exists():
            continue
        for p in sorted(base.rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc" \
                    and p.relative_to(repo).as_posix() not in NOT_BUILD_INPUTS:
                files.append(p)
    files += [repo / f for f in HASHED_FILES if (repo / f).exists()]
    return files


def inputs_hash(repo: Path, resolved: Resolved) -> str:
    h = hashlib.sha256()
    h.update(f"format={FORMAT_VERSION}\n".encode())
    for p in tree_files(repo):
        rel = p.relative_to(repo).as_posix()
        h.update(f"{rel}\0{oct(p.stat().st_mode & 0o111)}\0".encode())
        h.update(hashlib.sha256(p.read_bytes()).digest())
    h.update(json.dumps(resolved.versions, sort_keys=True).encode())
    return h.hexdigest()[:20]


def changed_tasks(output: str) -> list[str]:
    """Names of the tasks reported changed in ansible-playbook's default output.

    Sample:
      TASK [zfs : Copy the prebuilt modules] *****
      changed: [/root/.cache/zds/images/work/KEY/root] => (item=/x/zfs.ko)
    """
    names: list[str] = []
    task = ""
    for line in output.splitlines():
        if line.startswith(("TASK [", "RUNNING HANDLER [")):
            task = line[line.index("[") + 1 : line.rindex("]")]
        elif line.startswith("changed:") and task and (not names or names[-1] != task):
            names.append(task)
    return names


# ---------------------------------------------------------------------------- chroot helpers


@contextlib.contextmanager
def chroot_mounts(root: Path) -> Iterator[None]:
    """proc/sys/dev for package scripts in the chroot, a policy-rc.d so nothing starts."""
    mounted: list[Path] = []
    policy = root / "usr/sbin/policy-rc.d"
    had_policy = policy.exists()
    resolv = root / "etc/resolv.conf"
    resolv_backup = None
    if resolv.is_symlink() or resolv.exists():
        resolv_backup = root / "etc/resolv.conf.zds-build"
        os.replace(resolv, resolv_backup)
    try:
        for src, dst, kind in (("proc", "proc", "proc"), ("sysfs", "sys", "sysfs"),
                               ("/dev", "dev", "bind"), ("devpts", "dev/pts", "devpts")):
            target = root / dst
            target.mkdir(parents=True, exist_ok=True)
            if kind == "bind":
                sh(["mount", "--bind", src, target])
            else:
                sh(["mount", "-t", kind, src, target])
            mounted.append(target)
        if not had_policy:
            policy.write_text("#!/bin/sh\nexit 101\n")
            policy.chmod(0o755)
        shutil.copy("/etc/resolv.conf", resolv)
        yield
    finally:
        for target in reversed(mounted):
            subprocess.run(["umount", "-l", str(target)], check=False)
        if not had_policy:
            policy.unlink(missing_ok=True)
        resolv.unlink(missing_ok=True)
        if resolv_backup is not None:
            os.replace(resolv_backup, resolv)


@contextlib.contextmanager
def bind(src: Path, dst: Path) -> Iterator[None]:
    dst.mkdir(parents=True, exist_ok=True)
    sh(["mount", "--bind", src, dst])
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(dst)], check=False)


def chroot(root: Path, *argv: str) -> None:
    sh(["chroot", root, *argv], env={**os.environ, "DEBIAN_FRONTEND": "noninteractive",
                                     "LC_ALL": "C.UTF-8", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})


# ---------------------------------------------------------------------------- steps


@dataclass
class Build:
    cache: Path
    work: Path
    resolved: Resolved
    src: Path  # a snapshot of the hashed inputs: the tree may change while we build
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def debs(self) -> Path:
        return self.cache / "debs"

    @property
    def root(self) -> Path:
        return self.work / "root"

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        log(f"{name} ...")
        t = time.monotonic()
        yield
        self.timings[name] = round(time.monotonic() - t, 1)
        log(f"{name} done in {self.timings[name]} s")

    def mmdebstrap(self, target: Path, include: list[str], hooks: list[str]) -> None:
        self.debs.mkdir(parents=True, exist_ok=True)
        sh([
            "mmdebstrap", "--mode=root", "--variant=apt", "--format=directory",
            "--aptopt=APT::Install-Recommends \"false\"",
            f"--include={','.join(include)}",
            "--skip=download/empty",
            "--setup-hook=mkdir -p \"$1\"/var/cache/apt/archives",
            f"--setup-hook=sync-in {self.debs} /var/cache/apt/archives/",
            *hooks,
            f"--customize-hook=sync-out /var/cache/apt/archives {self.debs}",
            "--customize-hook=rm -f \"$1\"/var/cache/apt/archives/*.deb",
            SUITE, target, *sources(),
        ])

    def rootfs(self) -> None:
        overlay = self.src / "images" / "overlay"
        # The overlay (initramfs config, units) lands before the kernel so its postinst
        # already builds the small initrd.
        self.mmdebstrap(self.root, ROOTFS_PACKAGES,
                        [f"--essential-hook=cp -a {overlay}/. \"$1\"/"])
        mods = sorted(p.name for p in (self.root / "lib/modules").iterdir())
        if mods != [self.resolved.kernel_abi]:
            raise SystemExit(f"build: kernel in root {mods} != resolved {self.resolved.kernel_abi}")

    def zfs_modules(self) -> Path:
        abi, ver = self.resolved.kernel_abi, self.resolved.versions["zfs-dkms"]
        out = self.cache / "zfs-modules" / f"{abi}_zfs-{ver}"
        if any(out.glob("zfs.ko*")):
            log(f"zfs modules cached: {out}")
            return out
        tmp = Path(tempfile.mkdtemp(prefix="zfs-build-", dir=self.work))
        stage = Path(tempfile.mkdtemp(prefix="zfs-out-", dir=self.work))
        pin = "".join(
            f"Package: {p}\nPin: release n={SUITE}-backports\nPin-Priority: 990\n\n"
            for p in BACKPORTS_PIN
        )
        pinfile = self.work / "zfs-backports.pref"
        pinfile.write_text(pin)
        moddir = f"/lib/modules/{abi}/updates/dkms"
        self.mmdebstrap(tmp / "root", [f"linux-headers-{abi}", f"zfs-dkms={ver}"], [
            "--setup-hook=mkdir -p \"$1\"/etc/apt/preferences.d",
            f"--setup-hook=copy-in {pinfile} /etc/apt/preferences.d/",
            # dkms usually builds for the chroot's kernel headers in postinst; make sure.
            f"--customize-hook=ls \"$1\"{moddir}/zfs.ko* >/dev/null 2>&1 || "
            f"chroot \"$1\" dkms autoinstall -k {abi}",
            f"--customize-hook=sync-out {moddir} {stage}",
        ])
        shutil.rmtree(tmp)
        if not any(stage.glob("zfs.ko*")):
            raise SystemExit(f"build: the ZFS build produced no zfs.ko: {list(stage.iterdir())}")
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.exists():
            shutil.rmtree(out)
        shutil.move(str(stage), out)
        return out

    def wheels(self) -> Path:
        wh = self.work / "wheelhouse"
        wh.mkdir(exist_ok=True)
        src = self.work / "wheel-src"
        # Build from a copy: pip must not write build/ or egg-info into the snapshot.
        shutil.copytree(self.src, src, ignore=shutil.ignore_patterns("ansible", "images"))
        pip = Path(sys.executable).parent / "pip"
        sh([pip, "wheel", "-q", "--wheel-dir", wh, src], stderr=subprocess.DEVNULL)
        shutil.rmtree(src)
        return wh

    def ansible(self, wheelhouse: Path, zfs_dir: Path) -> dict[str, int]:
        playbook = self.src / "ansible" / "playbooks" / "image.yml"
        if not playbook.exists():
            log("ansible/playbooks/image.yml does not exist yet: the image has no ZDS services")
            return {}
        ap = Path(sys.executable).parent / "ansible-playbook"
        # zfs__prebuilt_modules_dir is read on the controller (the host); the wheelhouse may
        # be read in the chroot: bind both into the root at their host paths so either works.
        argv = [
            str(ap), "-i", f"{self.root},", "-c", "community.general.chroot", str(playbook),
            "-e", "ansible_python_interpreter=/usr/bin/python3",
            "-e", f"zds_api__wheelhouse={wheelhouse}",
            "-e", f"zfs__prebuilt_modules_dir={zfs_dir}",
            "-e", f"zfs__kernel_version={self.resolved.kernel_abi}",
        ]
        env = {**os.environ, "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1",
               "ANSIBLE_CONFIG": str(self.src / "ansible" / "ansible.cfg"),
               "ANSIBLE_ROLES_PATH": str(self.src / "ansible" / "roles")}
        changed: dict[str, int] = {}
        with contextlib.ExitStack() as stack:
            stack.enter_context(chroot_mounts(self.root))
            stack.enter_context(bind(self.debs, self.root / "var/cache/apt/archives"))
            for d in (wheelhouse, zfs_dir):
                stack.enter_context(bind(d, self.root / str(d).lstrip("/")))
            passes = 2 if os.environ.get("ZDS_IMAGE_IDEMPOTENCE", "1") == "1" else 1
            for n in range(1, passes + 1):
                log(f"ansible image.yml pass {n}/{passes}")
                p = subprocess.run(argv, env=env, text=True, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, check=False)
                logdir = self.cache / "logs"
                logdir.mkdir(exist_ok=True)
                logfile = logdir / f"ansible-pass{n}.log"
                logfile.write_text(p.stdout)
                sys.stderr.write(p.stdout[-6000:])
                if p.returncode != 0:
                    raise SystemExit(f"build: image.yml failed (pass {n}), log: {logfile}")
                m = re.search(r"changed=(\d+)", p.stdout.split("PLAY RECAP")[-1])
                changed[f"pass{n}"] = int(m.group(1)) if m else -1
            if passes == 2 and changed["pass2"] != 0:
                log2 = (self.cache / "logs" / "ansible-pass2.log").read_text()
                tasks = changed_tasks(log2)
                raise SystemExit(f"build: image.yml is not idempotent: the second pass changed "
                                 f"{tasks} (log: {self.cache / 'logs' / 'ansible-pass2.log'}; "
                                 "ZDS_IMAGE_IDEMPOTENCE=0 skips this check)")
        for d in (wheelhouse, zfs_dir):  # remove the empty mount points the binds made
            _rmdir_up(self.root / str(d).lstrip("/"), self.root)
        return changed

    def finish(self, root_uuid: str) -> None:
        r = self.root
        (r / "etc/hostname").write_text("zds\n")
        (r / "etc/hosts").write_text("127.0.0.1\tlocalhost\n127.0.1.1\tzds\n"
                                     "::1\tlocalhost ip6-localhost ip6-loopback\n")
        (r / "etc/fstab").write_text(
            "# ZDS appliance image (ESP not mounted: the kernel and initrd on it are the "
            "image's own)\n"
            f"UUID={root_uuid}\t/\text4\terrors=remount-ro,noatime\t0\t1\n")
        (r / "etc/machine-id").write_text("")  # a new machine id on each appliance's first boot
        (r / "var/lib/dbus/machine-id").unlink(missing_ok=True)
        with chroot_mounts(r):
            chroot(r, "systemctl", "enable", "systemd-networkd.service")
            chroot(r, "update-initramfs", "-u", "-k", self.resolved.kernel_abi)
            chroot(r, "apt-get", "clean")
        for p in (r / "var/lib/apt/lists").glob("*_*"):
            p.unlink()
        for p in (r / "tmp").iterdir():
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()

    def assemble(self, root_uuid: str, out: Path) -> None:
        abi = self.resolved.kernel_abi
        r = self.root
        esp = self.work / "esp.img"
        sh(["truncate", "-s", f"{ESP_SIZE_MIB}M", esp])
        sh(["mkfs.vfat", "-F", "32", "-n", "ZDS-ESP", esp], capture=True)
        m = ["-i", str(esp)]
        env = {**os.environ, "MTOOLS_SKIP_CHECK": "1"}
        sh(["mmd", *m, "::/EFI", "::/EFI/BOOT", "::/EFI/systemd", "::/loader",
            "::/loader/entries", "::/zds"], env=env)
        efi = r / "usr/lib/systemd/boot/efi/systemd-bootx64.efi"
        loader = self.work / "loader.conf"
        loader.write_text("default zds.conf\ntimeout 0\nconsole-mode keep\neditor no\n")
        entry = self.work / "zds.conf"
        entry.write_text(
            "title ZDS appliance\nlinux /zds/vmlinuz\ninitrd /zds/initrd.img\n"
            f"options root=UUID={root_uuid} rw console=tty0 console=ttyS0,115200n8 "
            "panic=10\n")
        for src, dst in ((efi, "::/EFI/BOOT/BOOTX64.EFI"),
                         (efi, "::/EFI/systemd/systemd-bootx64.efi"),
                         (r / f"boot/vmlinuz-{abi}", "::/zds/vmlinuz"),
                         (r / f"boot/initrd.img-{abi}", "::/zds/initrd.img"),
                         (loader, "::/loader/loader.conf"), (entry, "::/loader/entries/zds.conf")):
            sh(["mcopy", *m, src, dst], env=env)
        rootimg = self.work / "root.img"
        sh(["mkfs.ext4", "-q", "-F", "-L", "zds-root", "-U", root_uuid, "-d", r,
            rootimg, f"{ROOT_SIZE_MIB}M"])
        raw = out / "zds.raw"
        total_mib = 1 + ESP_SIZE_MIB + ROOT_SIZE_MIB + 1
        sh(["truncate", "-s", f"{total_mib}M", raw])
        s = 2048  # sectors per MiB
        table = (
            "label: gpt\nfirst-lba: 2048\n"
            f"start={s}, size={ESP_SIZE_MIB * s}, type={ESP_TYPE}, name=ESP\n"
            f"start={(1 + ESP_SIZE_MIB) * s}, size={ROOT_SIZE_MIB * s}, type={ROOT_TYPE}, "
            "name=zds-root\n"
        )
        subprocess.run(["sfdisk", "-q", str(raw)], input=table, text=True, check=True)
        sh(["dd", f"if={esp}", f"of={raw}", "bs=1M", "seek=1", "conv=notrunc,sparse",
            "status=none"])
        sh(["dd", f"if={rootimg}", f"of={raw}", "bs=1M", f"seek={1 + ESP_SIZE_MIB}",
            "conv=notrunc,sparse", "status=none"])
        esp.unlink()
        rootimg.unlink()

    def convert(self, out: Path) -> None:
        raw = out / "zds.raw"
        vmdk = self.work / "zds-disk1.vmdk"
        # Both conversions are single-threaded compression: run them side by side.
        jobs = [
            subprocess.Popen(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", "-c", "-o",
                              "compression_type=zstd", str(raw), str(out / "zds.qcow2")]),
            subprocess.Popen(["qemu-img", "convert", "-f", "raw", "-O", "vmdk", "-o",
                              "subformat=streamOptimized,adapter_type=lsilogic", str(raw),
                              str(vmdk)]),
        ]
        if any(rc != 0 for rc in [j.wait() for j in jobs]):
            raise SystemExit("build: qemu-img convert failed")
        ovf.write_ova(out / "zds.ova", vmdk, capacity_bytes=raw.stat().st_size,
                      version=self.resolved.versions.get("zds", "0.1.0"))
        vmdk.unlink()
        # the same qcow2 as a Vagrant libvirt box: `vagrant box add` from this file, offline
        vagrant.write_box(out / vagrant.BOX_FILE, out / "zds.qcow2",
                          capacity_bytes=raw.stat().st_size)


def build(force: bool = False) -> Path:
    """Builds or reuses the images; returns their directory. One build at a time per cache."""
    if os.geteuid() != 0:
        raise SystemExit("build: run as root (mmdebstrap root mode, chroot, bind mounts)")
    cache = images_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log("another build is running with this cache: waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        return _build_locked(cache, force)


def _build_locked(cache: Path, force: bool) -> Path:
    t0 = time.monotonic()
    log("resolving package versions")
    resolved = resolve(cache)
    snap = cache / "work" / "snapshot"
    if snap.exists():
        shutil.rmtree(snap)
    snapshot(REPO, snap)
    key = inputs_hash(snap, resolved)
    out = cache / "builds" / key
    current = cache / "current"
    if not force and (out / "manifest.json").exists():
        shutil.rmtree(snap)
        log(f"inputs unchanged ({key}): reusing {out}")
        _point(current, out)
        return out
    work = cache / "work" / key
    if work.exists():
        _cleanup_work(work)
    work.mkdir(parents=True)
    os.replace(snap, work / "src")
    b = Build(cache, work, resolved, work / "src")
    b.timings["resolve"] = round(time.monotonic() - t0, 1)
    log(f"kernel {resolved.kernel_abi}, zfs {resolved.versions['zfs-dkms']}, inputs {key}")
    try:
        with b.step("rootfs"):
            b.rootfs()
        with b.step("zfs"):
            zfs_dir = b.zfs_modules()
        with b.step("wheels"):
            wh = b.wheels()
        with b.step("ansible"):
            changed = b.ansible(wh, zfs_dir)
        root_uuid = str(uuid.uuid4())
        with b.step("finish"):
            b.finish(root_uuid)
        stage = work / "out"
        stage.mkdir()
        with b.step("assemble"):
            b.assemble(root_uuid, stage)
        with b.step("convert"):
            b.convert(stage)
        b.timings["total"] = round(time.monotonic() - t0, 1)
        manifest = {
            "inputs": key, "kernel_abi": resolved.kernel_abi, "versions": resolved.versions,
            "ansible_changed": changed, "ansible": bool(changed),
            "root_uuid": root_uuid, "timings_s": b.timings,
            "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "files": {n: (stage / n).stat().st_size for n in OUTPUTS},
        }
        (stage / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.exists():
            shutil.rmtree(out)
        os.replace(stage, out)
    finally:
        _cleanup_work(work)
    _point(current, out)
    _prune(cache / "builds", keep=out)
    log(f"images in {out} ({b.timings['total']} s): " + ", ".join(OUTPUTS))
    return out


def _rmdir_up(path: Path, stop: Path) -> None:
    while path != stop and path.is_dir() and not any(path.iterdir()):
        path.rmdir()
        path = path.parent


def _cleanup_work(work: Path) -> None:
    # Never rm -rf through a live mount: unmount anything left below the work dir first.
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for m in sorted((m for m in mounts if m.startswith(str(work) + "/")), reverse=True):
        subprocess.run(["umount", "-l", m], check=False)
    shutil.rmtree(work, ignore_errors=True)


def _point(link: Path, target: Path) -> None:
    tmp = link.with_name(link.name + ".tmp")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target)
    os.replace(tmp, link)


def _prune(builds: Path, keep: Path, n: int = 4) -> None:
    """Keeps the newest n builds, and any build a running process (a VM's overlay on its
    zds.raw; checkouts side by side build different images) still has open."""
    old = sorted((p for p in builds.iterdir() if p != keep), key=lambda p: p.stat().st_mtime)
    busy = _open_paths()
    for p in old[: max(0, len(old) - (n - 1))]:
        if any(str(b).startswith(str(p) + os.sep) for b in busy):
            continue
        shutil.rmtree(p, ignore_errors=True)


def _open_paths() -> set[str]:
    """Every file some process on this machine has open (from /proc/*/fd)."""
    found: set[str] = set()
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            for fd in fd_dir.iterdir():
                with contextlib.suppress(OSError):
                    found.add(os.readlink(fd))
        except OSError:
            continue
    return found


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="zds-appliance build", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--force", action="store_true", help="rebuild even if inputs are unchanged")
    args = ap.parse_args(argv)
    out = build(force=args.force)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
