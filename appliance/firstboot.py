"""First boot (runs every boot, idempotent): TLS certificate, admin token, default pool.

On the first boot only (no token recorded yet and no record that it ran), the admin token
comes from QEMU fw_cfg ``opt/zds/admin-token`` when the host passed one, else from the
token file, else it is made now; it is written to a root-only file and printed once (the
unit sends stdout to the console). Later boots import nothing, so a revoked token stays
revoked, and print nothing secret. SSH public keys the hypervisor hands in (fw_cfg
``opt/zds/ssh-authorized-keys``, one per line: the Vagrant box uses it) are added to
root's authorized_keys on the first boot only too, so a key Vagrant replaced (or an
admin removed) never comes back. Pools found on the disks but not imported
(a new system disk) are imported, without force. The default pool is made only when no
pool is imported or importable: on the configured disks, else on sparse files (a demo
pool, labelled as such).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from appliance import validate
from appliance.engine import Engine
from appliance.errors import InvalidInput, ZdsError
from appliance.services.pools import PoolRequest, VdevRequest

# recorded once the first boot has taken its admin token and SSH keys
ADMIN_TOKEN_FACT = "firstboot_admin_token"


@dataclass
class FirstbootResult:
    certificate_created: bool
    token: str | None  # on the first boot only: later boots never show it again
    token_source: str  # fw_cfg | file | new | kept (not the first boot)
    pool: str | None
    pool_created: bool
    demo_pool: bool
    messages: list[str]
    ssh_keys_added: int = 0


def run_firstboot(engine: Engine, pool_timeout: float = 300.0) -> FirstbootResult:
    s = engine.settings
    local = engine.ctx.local
    msgs: list[str] = []
    cert = local.ensure_tls_certificate(s.tls_cert, s.tls_key, local.hostname()) if s.tls \
        else False

    store = engine.ctx.store
    token: str | None = None
    source, keys_added = "kept", 0
    if store.get_fact(ADMIN_TOKEN_FACT) is None and not engine.tokens.list():
        token = local.read_fw_cfg(s.fw_cfg_dir, "admin-token")
        source = "fw_cfg"
        if not token:
            token, source = local.read_text(s.admin_token_file) or "", "file"
        if not token:
            token, source = engine.tokens.create("admin", "admin"), "new"
        else:
            engine.tokens.create("admin" if source == "file" else "admin-fwcfg", "admin",
                                 token)
        local.write_secret(s.admin_token_file, token)
        keys_added = _fw_cfg_ssh_keys(engine, msgs)
    # also on an appliance older than this record: its tokens are the admin's now
    store.set_fact(ADMIN_TOKEN_FACT, source)

    pool, created, demo = None, False, False
    if engine.ctx.zfs.available():
        pools = [p.name for p in engine.ctx.zfs.list_pools()]
        if pools:
            pool = pools[0]
        elif importable := engine.ctx.zfs.importable_pools():
            # a data disk that already holds a pool (a new system disk, a moved appliance):
            # serve it rather than make a new one; a pool another system did not export
            # is left for the admin to import with force
            pool = _import_existing(engine, importable, pool_timeout, msgs)
        else:
            pool, demo = s.firstboot_pool, False
            disks = local.glob_devices(s.firstboot_disks)
            if disks:
                layout = s.firstboot_layout if len(disks) >= 2 else "disk"
                vdevs = ([VdevRequest("disk", [d]) for d in disks] if layout == "disk"
                         else [VdevRequest(layout, disks)])
                # no -f: a disk that holds anything (a file system, an old label) is refused,
                # and the message tells the admin; nothing is overwritten at boot
                req = PoolRequest(name=pool, vdevs=vdevs)
            else:
                demo = True
                req = PoolRequest(name=pool, sparse_files={
                    "count": 2, "size": s.firstboot_demo_disk_size, "type": "mirror"})
            try:
                job = engine.jobs.wait(engine.pools.create(req).id, pool_timeout)
            except ZdsError as exc:
                msgs.append(f"default pool not created: {exc.message}")
                pool = None
            else:
                if job.state == "succeeded":
                    created = True
                    what = "DEMO pool on sparse files" if demo else f"pool on {len(req.vdevs)}"
                    msgs.append(f"created {what} {pool!r}" +
                                ("" if demo else " vdev(s)"))
                else:
                    msgs.append(f"default pool not created: {_error_text(job.error)}")
                    pool = None
    else:
        msgs.append("ZFS is not available: no default pool")
    return FirstbootResult(cert, token, source, pool, created, demo, msgs, keys_added)


def _fw_cfg_ssh_keys(engine: Engine, msgs: list[str]) -> int:
    """Adds the valid key lines of fw_cfg opt/zds/ssh-authorized-keys for root."""
    s, local = engine.settings, engine.ctx.local
    text = local.read_fw_cfg(s.fw_cfg_dir, "ssh-authorized-keys")
    if not text:
        return 0
    keys: list[str] = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            keys.append(validate.ssh_public_key(line))
        except InvalidInput as exc:
            msgs.append(f"fw_cfg ssh-authorized-keys: ignored: {exc.message}")
    added = local.add_authorized_keys(s.root_authorized_keys, keys) if keys else 0
    if added:
        msgs.append(f"added {added} SSH key(s) from fw_cfg to {s.root_authorized_keys}")
    return added


def _import_existing(engine: Engine, names: list[str], timeout: float,
                     msgs: list[str]) -> str | None:
    """Imports every pool in ``names`` (no force); the first one imported, or None."""
    first: str | None = None
    for name in names:
        try:
            job = engine.jobs.wait(engine.pools.import_(name).id, timeout)
        except ZdsError as exc:
            msgs.append(f"pool {name!r} not imported: {exc.message}")
            continue
        if job.state == "succeeded":
            msgs.append(f"imported pool {name!r}")
            first = first or name
        else:
            msgs.append(f"pool {name!r} not imported: {_error_text(job.error)} "
                        f"(POST /api/v1/pools/{name}/import?force=true)")
    if first is None:
        msgs.append("no default pool created: the disks hold a pool")
    return first


def _error_text(error: dict[str, Any] | None) -> str:
    """The message of a failed job's error (``{"code": ..., "message": ...}``)."""
    return str((error or {}).get("message", "unknown error"))
