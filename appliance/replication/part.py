"""What the parts of replication share: the context, the records, the SSH and
zfs-send adapters, the outgoing record by name."""

from __future__ import annotations

import logging

from appliance import validate
from appliance.context import Context
from appliance.errors import NotFound, Unavailable, ZdsError
from appliance.host.ssh import Endpoint, SshHost
from appliance.host.zfs_send import ZfsSendHost
from appliance.replication.model import ReplicationRecord
from appliance.replication.store import ReplicationStore

log = logging.getLogger(__name__)


class ReplicationPart:
    """The base of the source runs, the target side, promote and the service."""

    def __init__(self, ctx: Context, records: ReplicationStore) -> None:
        self.ctx = ctx
        self.records = records

    @property
    def ssh(self) -> SshHost:
        ssh = self.ctx.hosts.ssh
        if ssh is None:
            raise Unavailable("replication is not available: no SSH adapter on this host")
        return ssh

    @property
    def zsend(self) -> ZfsSendHost:
        zs = self.ctx.hosts.zfs_send
        if zs is None:
            raise Unavailable("replication is not available: no zfs send adapter here")
        return zs

    def record(self, name: str) -> ReplicationRecord:
        """The outgoing replication ``name``; NotFound when this appliance sends none."""
        validate.resource_name(name, "replication name")
        rec = self.records.get(name)
        if rec is None:
            raise NotFound(f"replication {name!r} not found (on this appliance as a source)")
        return rec

    def close(self, endpoint: Endpoint) -> None:
        """Ends the run's SSH connection to the target (a failure is only logged)."""
        try:
            self.ssh.close(endpoint)
        except ZdsError as exc:  # the connection times out by itself (ControlPersist)
            log.warning("closing the connection to %s: %s", endpoint.describe(), exc.message)

    def job_running(self, rec: ReplicationRecord) -> bool:
        """Whether the job of the record's last run is still going."""
        if not rec.status.job_id:
            return False
        try:
            return not self.ctx.jobs.get(rec.status.job_id).done
        except NotFound:
            return False
