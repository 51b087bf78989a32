"""Appliance settings, read from /etc/zds/zds.toml (``ZDS_CONFIG`` overrides the path).

Every key has a default, so a missing file means "defaults". Example::

    [api]
    listen = "0.0.0.0"
    port = 8443
    tls = true
    max_body = 1048576            # bytes of a request body (413 beyond)
    max_result_body = 67108864    # ... of POST /api/v1/probes/results (client probe results)
    max_in_flight = 256           # requests answered at once (503 busy beyond)
    max_per_token = 128           # ... by one token (429 beyond)
    create_queue_limit = 256      # datastore creates waiting their turn (503 busy beyond)
    limit_concurrency = 512       # connections uvicorn accepts at once
    keep_alive = 75               # seconds an idle client connection stays open
    daemon_restart_after = 60     # seconds a running nfs-ganesha may not answer before a restart
    [state]
    dir = "/var/lib/zds"
    [nfs]
    server = "ganesha" # or "knfsd", the kernel's (opt-in; docs/architecture.md)
    [ganesha]
    exports_dir = "/var/lib/zds/ganesha"
    [iscsi]
    iqn_prefix = "iqn.2026-11.io.zds"
    [nvme]
    nqn_prefix = "nqn.2026-11.io.zds"
    address = "0.0.0.0:4420"     # the NVMe/TCP port (and discovery); [::]:4420 for IPv6
    port_id = 1                  # its configfs port number
    [metrics]
    interval = 10      # seconds between collections; 0 turns the collector off
    [datastores]
    list_refresh_interval = 60   # seconds between refreshes of the list's ZFS read
    [firstboot]
    pool = "tank"
    disks = ["/dev/disk/by-id/virtio-zdsdata*"]
    layout = "mirror"
    demo_disk_size = "8G"
    admin_token_file = "/etc/zds/admin-token"
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from appliance.errors import InvalidInput

DEFAULT_CONFIG = Path("/etc/zds/zds.toml")
NFS_SERVERS = ("ganesha", "knfsd")


@dataclass(frozen=True)
class Settings:
    listen: str = "0.0.0.0"
    port: int = 8443
    tls: bool = True
    tls_cert: Path = Path("/etc/zds/tls/cert.pem")
    tls_key: Path = Path("/etc/zds/tls/key.pem")
    state_dir: Path = Path("/var/lib/zds")
    # The NFS server: "ganesha" (nfs-ganesha, the default) or "knfsd" (the kernel's).
    nfs_server: str = "ganesha"
    ganesha_exports_dir: Path = Path("/var/lib/zds/ganesha")
    ganesha_dbus_address: str | None = None  # None: the system bus
    iqn_prefix: str = "iqn.2026-11.io.zds"
    iscsi_portal: tuple[str, int] = ("0.0.0.0", 3260)
    # NVMe/TCP: subsystem NQNs are {nqn_prefix}:{host}.{name}; the port's address and id
    nqn_prefix: str = "nqn.2026-11.io.zds"
    nvme_address: tuple[str, int] = ("0.0.0.0", 4420)
    nvme_port_id: int = 1
    # Seconds between background reconciles (0: only at start-up and on changes).
    reconcile_interval: float = 60.0
    # Seconds between the watcher's refreshes of the ZFS read the datastore list answers
    # from (issue 24; its changes the engine makes are seen at once); 0: every list reads
    # ZFS. [datastores] list_refresh_interval
    list_refresh_interval: float = 60.0
    # Seconds between the watcher's cheap checks (pools, daemons) that health answers from.
    health_interval: float = 10.0
    # Seconds a running daemon may go without answering (nfs-ganesha hung, or its DBus
    # name lost) before the watcher restarts its unit (0: never). [api] daemon_restart_after
    daemon_restart_after: float = 60.0
    # Seconds a request waits for the change lock before a 503 "busy".
    lock_timeout: float = 60.0
    # Seconds between metrics collections (0: no collector). [metrics] interval
    metrics_interval: float = 10.0
    # Thin datastores may be promised up to this multiple of a pool's capacity (a pool's
    # own zds:overcommit property wins; PATCH /pools/{name} sets it).
    max_overcommit: float = 20.0
    # The API's limits, checked before a request's body is read (api/guard.py): bytes of
    # a body, and of a client's probe result (a long sweep's per-second series); requests
    # answered at once (503 busy beyond), by one token (429 beyond); connections uvicorn
    # takes at once (its own plain 503 beyond: above max_in_flight, so ours comes first).
    max_body: int = 1 << 20
    max_result_body: int = 64 << 20
    max_in_flight: int = 256
    # half: one token (a script long-polling jobs, or a provisioning storm) never takes
    # all the capacity, and a storm of 100 creates from one tool is still accepted
    max_per_token: int = 128
    # Datastore creates queued for the writer (services/create_queue.py; 503 busy beyond)
    create_queue_limit: int = 256
    limit_concurrency: int = 512
    # An idle connection stays open this long, so clients that poll (the console every
    # 3-10 s, a tool following a job) or send a burst reuse their TLS session; uvicorn's
    # own 5 s made each poll a new handshake, costly on a small or emulated appliance
    keep_alive: int = 75
    # Address put into attach instructions when the request does not tell one.
    public_address: str | None = None
    firstboot_pool: str = "tank"
    firstboot_disks: tuple[str, ...] = ("/dev/disk/by-id/virtio-zdsdata*",)
    firstboot_layout: str = "mirror"
    firstboot_demo_disk_size: str = "8G"
    admin_token_file: Path = Path("/etc/zds/admin-token")
    fw_cfg_dir: Path = Path("/sys/firmware/qemu_fw_cfg/by_name/opt/zds")
    # SSH public keys handed in by the hypervisor (fw_cfg opt/zds/ssh-authorized-keys) are
    # added here at every boot: how the Vagrant box and test harnesses log in
    root_authorized_keys: Path = Path("/root/.ssh/authorized_keys")
    # Snapshot policies' pre/post hooks may run only the programs in this directory.
    hooks_dir: Path = Path("/etc/zds/hooks")
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def db_path(self) -> Path:
        return self.state_dir / "zds.db"

    def with_state_dir(self, state_dir: Path) -> Settings:
        """Everything stateful under one directory (tests, dev runs)."""
        return replace(
            self,
            state_dir=state_dir,
            ganesha_exports_dir=state_dir / "ganesha",
            tls_cert=state_dir / "tls" / "cert.pem",
            tls_key=state_dir / "tls" / "key.pem",
            admin_token_file=state_dir / "admin-token",
        )


def load_settings(path: Path | None = None) -> Settings:
    """Reads the TOML file (if it exists) over the defaults."""
    path = config_path(path)
    if not path.exists():
        return Settings()
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"{path}: not valid TOML: {exc}") from exc
    api = data.get("api", {})
    state = data.get("state", {})
    ganesha = data.get("ganesha", {})
    nfs_server = str(data.get("nfs", {}).get("server", Settings.nfs_server))
    if nfs_server not in NFS_SERVERS:
        raise InvalidInput(f"{path}: [nfs] server = {nfs_server!r}: use one of "
                           f"{', '.join(NFS_SERVERS)}")
    iscsi = data.get("iscsi", {})
    first = data.get("firstboot", {})
    base = Settings()
    if "dir" in state:
        base = base.with_state_dir(Path(state["dir"]))
        # with_state_dir moves TLS and token files too; the file's own keys win below
        base = replace(base, tls_cert=Settings.tls_cert, tls_key=Settings.tls_key,
                       admin_token_file=Settings.admin_token_file)
    portal = iscsi.get("portal", "0.0.0.0:3260")
    host, _, port = str(portal).rpartition(":")
    nvme = data.get("nvme", {})
    nvme_host, _, nvme_port = str(nvme.get("address", "0.0.0.0:4420")).rpartition(":")
    return replace(
        base,
        listen=str(api.get("listen", base.listen)),
        port=int(api.get("port", base.port)),
        tls=bool(api.get("tls", base.tls)),
        tls_cert=Path(api.get("tls_cert", base.tls_cert)),
        tls_key=Path(api.get("tls_key", base.tls_key)),
        public_address=api.get("public_address", base.public_address),
        max_body=_positive_int(path, api, "max_body", base.max_body),
        max_result_body=_positive_int(path, api, "max_result_body", base.max_result_body),
        max_in_flight=_positive_int(path, api, "max_in_flight", base.max_in_flight),
        max_per_token=_positive_int(path, api, "max_per_token", base.max_per_token),
        create_queue_limit=_positive_int(path, api, "create_queue_limit",
                                         base.create_queue_limit),
        limit_concurrency=_positive_int(path, api, "limit_concurrency",
                                        base.limit_concurrency),
        keep_alive=_positive_int(path, api, "keep_alive", base.keep_alive),
        nfs_server=nfs_server,
        ganesha_exports_dir=Path(ganesha.get("exports_dir", base.ganesha_exports_dir)),
        ganesha_dbus_address=ganesha.get("dbus_address") or None,
        iqn_prefix=str(iscsi.get("iqn_prefix", base.iqn_prefix)),
        iscsi_portal=(host or "0.0.0.0", int(port or 3260)),
        nqn_prefix=str(nvme.get("nqn_prefix", base.nqn_prefix)),
        nvme_address=(nvme_host.strip("[]") or "0.0.0.0", int(nvme_port or 4420)),
        nvme_port_id=int(nvme.get("port_id", base.nvme_port_id)),
        max_overcommit=float(data.get("datastores", {}).get("max_overcommit",
                                                            base.max_overcommit)),
        metrics_interval=float(data.get("metrics", {}).get("interval", base.metrics_interval)),
        list_refresh_interval=float(data.get("datastores", {}).get(
            "list_refresh_interval", base.list_refresh_interval)),
        reconcile_interval=float(api.get("reconcile_interval", base.reconcile_interval)),
        health_interval=float(api.get("health_interval", base.health_interval)),
        daemon_restart_after=float(api.get("daemon_restart_after", base.daemon_restart_after)),
        lock_timeout=float(api.get("lock_timeout", base.lock_timeout)),
        firstboot_pool=str(first.get("pool", base.firstboot_pool)),
        firstboot_disks=tuple(first.get("disks", base.firstboot_disks)),
        firstboot_layout=str(first.get("layout", base.firstboot_layout)),
        firstboot_demo_disk_size=str(first.get("demo_disk_size", base.firstboot_demo_disk_size)),
        admin_token_file=Path(first.get("admin_token_file", base.admin_token_file)),
        hooks_dir=Path(data.get("policies", {}).get("hooks_dir", base.hooks_dir)),
        extra=data,
    )


def _positive_int(path: Path, table: dict[str, Any], key: str, default: int) -> int:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput(f"{path}: [api] {key} = {value!r}: expected a whole number >= 1")
    return value


def config_path(path: Path | None = None) -> Path:
    """The settings file in use: ``path``, else ``ZDS_CONFIG``, else /etc/zds/zds.toml."""
    return path or Path(os.environ.get("ZDS_CONFIG", str(DEFAULT_CONFIG)))


def write_nfs_server(path: Path, server: str) -> bool:
    """Sets ``[nfs] server`` in the TOML file at ``path`` (made if missing), keeping every
    other line as it is; True when the file changed."""
    if server not in NFS_SERVERS:
        raise InvalidInput(f"unknown NFS server {server!r}: use one of {', '.join(NFS_SERVERS)}")
    old = path.read_text() if path.exists() else ""
    line = f'server = "{server}"'
    lines = old.splitlines()
    section = next((i for i, ln in enumerate(lines) if ln.strip() == "[nfs]"), None)
    if section is None:
        lines += ["", "[nfs]", line] if lines else ["[nfs]", line]
    else:
        end = next((i for i in range(section + 1, len(lines))
                    if lines[i].lstrip().startswith("[")), len(lines))
        at = next((i for i in range(section + 1, end)
                   if lines[i].split("=")[0].strip() == "server"), None)
        if at is None:
            lines.insert(section + 1, line)
        else:
            lines[at] = line
    new = "\n".join(lines) + "\n"
    if new == old:
        return False
    try:
        got = tomllib.loads(new).get("nfs", {}).get("server")
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"{path}: not valid TOML, not changed: {exc}") from exc
    if got != server:
        raise InvalidInput(f"{path}: could not set [nfs] server, not changed")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(new)
    tmp.replace(path)
    return True
