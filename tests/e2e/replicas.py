"""What the replication e2e tests share: a run through the API, and the data of a source
datastore and of its replica read in the guest (sha256), the replica through a
throw-away clone so it stays untouched."""

from __future__ import annotations

from typing import Any

import httpx

from tests.e2e.conftest import E2EAppliance
from tests.e2e.rest import ok


def run(api: httpx.Client, name: str) -> dict[str, Any]:
    """Runs replication ``name`` and returns its job once ended (succeeded or not)."""
    job = ok(api.post(f"/replications/{name}/run", params={"wait": 600}), 202)
    assert job["state"] in ("succeeded", "failed", "cancelled"), job
    return dict(job)


def succeeded(job: dict[str, Any]) -> dict[str, Any]:
    """The result of a job that must have succeeded."""
    assert job["state"] == "succeeded", job
    return dict(job["result"])


def sha_in_guest(app: E2EAppliance, path: str, nbytes: int | None = None) -> str:
    """sha256 of a file or device in the guest (its first ``nbytes`` when given)."""
    cmd = f"head -c {nbytes} {path}" if nbytes else f"cat {path}"
    return app.check(f"{cmd} | sha256sum").split()[0]


def newest_snapshot(app: E2EAppliance, dataset: str) -> str:
    return app.check(f"zfs list -H -o name -t snapshot -s createtxg -d 1 {dataset} "
                     "| tail -1").strip()


def replica_sha(app: E2EAppliance, dataset: str, *, file: str | None = None,
                nbytes: int | None = None) -> str:
    """sha256 of ``file`` (an NFS replica) or of the first ``nbytes`` (a LUN replica) in
    the newest snapshot of replica ``dataset``, read from a clone in the same pool."""
    snap = newest_snapshot(app, dataset)
    clone = f"{dataset.split('/', 1)[0]}/zds-chk"
    if file is not None:
        app.check(f"zfs clone -o mountpoint=/mnt/zds-chk {snap} {clone}")
        path = f"/mnt/zds-chk/{file}"
    else:
        app.check(f"zfs clone {snap} {clone} && udevadm settle && for i in $(seq 30); do "
                  f"[ -b /dev/zvol/{clone} ] && break; sleep 1; done")
        path = f"/dev/zvol/{clone}"
    try:
        return sha_in_guest(app, path, nbytes)
    finally:
        app.check(f"sleep 1; zfs destroy {clone}")
