"""The ZDS resource agent for pacemaker: ``ocf:zds:pool`` (OCF 1.1), one per pool.

Installed by the ``ha`` role as /usr/lib/ocf/resource.d/zds/pool, a two-line script that
runs ``python -m api.agent ACTION`` in the appliance's venv. It is a client of the local
REST API (https://127.0.0.1:8443, a root-only token file), never of the store or the
host directly: the API holds the one writer lock, and its start is the boot path
(docs/ha.md, docs/architecture.md):

- ``start``    POST /cluster/pools/{pool}/take, wait for the job: import (pacemaker
               fenced the other node first; ``multihost=on`` refuses a pool still being
               written), adopt the datastores from their ``zds:*`` properties, reconcile
               until the pool's drift has nothing the reconcile can still do;
- ``stop``     POST /cluster/pools/{pool}/release, wait for the job: exports, LUNs and
               NVMe subsystems of the pool withdrawn, the pool exported; a stop that
               fails makes pacemaker fence this node, which is what must happen then;
- ``monitor``  GET /cluster/pools/{pool}: not imported here -> 7 (not running); imported
               and serving -> 0; imported but faulted/suspended or a daemon it needs
               down -> 1.

Exit codes are OCF's; a failure's reason goes to stderr as ``ocf-exit-reason:...``,
which pacemaker shows in ``crm_mon``. Parameters come as ``OCF_RESKEY_<name>``.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

# OCF exit codes (OCF resource agent API 1.1)
OCF_SUCCESS = 0
OCF_ERR_GENERIC = 1
OCF_ERR_ARGS = 2
OCF_ERR_UNIMPLEMENTED = 3
OCF_ERR_PERM = 4
OCF_ERR_INSTALLED = 5
OCF_ERR_CONFIGURED = 6
OCF_NOT_RUNNING = 7

DEFAULT_URL = "https://127.0.0.1:8443"
DEFAULT_TOKEN_FILE = "/etc/zds/cluster-token"
# When the cluster's own token file is missing, firstboot's admin token (root-only too).
FALLBACK_TOKEN_FILE = "/etc/zds/admin-token"
# Seconds, when pacemaker does not pass the operation's timeout.
DEFAULT_TIMEOUTS = {"start": 300.0, "stop": 180.0, "monitor": 60.0}
# Left of the operation's timeout to report before pacemaker gives up on us.
MARGIN = 5.0
POOL_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.:-]{0,254}")

META_DATA = """<?xml version="1.0"?>
<!DOCTYPE resource-agent SYSTEM "ra-api-1.dtd">
<resource-agent name="pool" version="1.0">
  <version>1.1</version>
  <longdesc lang="en">
Serves one ZFS pool of a ZDS HA pair through the local ZDS API: start imports the pool
(after pacemaker fenced the other node; multihost=on refuses a pool still in use),
rebuilds its datastores from their zds:* properties and serves them (NFS exports, iSCSI
LUNs, NVMe/TCP subsystems: the same export paths, IQNs, serials and NQNs as on the other
node); stop withdraws them and exports the pool; monitor is the engine's own check.
Put it first in the pool's group, before the floating address (IPaddr2).
  </longdesc>
  <shortdesc lang="en">ZDS pool (import, serve, withdraw, export)</shortdesc>
  <parameters>
    <parameter name="pool" unique="1" required="1">
      <longdesc lang="en">The ZFS pool (made with multihost=on on the shared disks).</longdesc>
      <shortdesc lang="en">pool name</shortdesc>
      <content type="string"/>
    </parameter>
    <parameter name="url" required="0">
      <longdesc lang="en">The local ZDS API.</longdesc>
      <shortdesc lang="en">API URL</shortdesc>
      <content type="string" default="https://127.0.0.1:8443"/>
    </parameter>
    <parameter name="token_file" required="0">
      <longdesc lang="en">A file (root only) holding an admin token of the local API;
when it is missing, /etc/zds/admin-token is used.</longdesc>
      <shortdesc lang="en">API token file</shortdesc>
      <content type="string" default="/etc/zds/cluster-token"/>
    </parameter>
  </parameters>
  <actions>
    <action name="start" timeout="300s"/>
    <action name="stop" timeout="180s"/>
    <action name="monitor" timeout="60s" interval="10s" depth="0"/>
    <action name="validate-all" timeout="10s"/>
    <action name="meta-data" timeout="5s"/>
  </actions>
</resource-agent>
"""


class ApiError(Exception):
    """The API could not be reached, or answered with an error."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class Api(Protocol):
    def call(self, method: str, path: str, params: Mapping[str, Any] | None = None
             ) -> Any:
        """The JSON answer of ``method path`` under /api/v1; ApiError otherwise
        (``status`` 0: not reached)."""


class HttpApi:
    """The local API over HTTPS. Its certificate is the appliance's self-signed one and
    the address is the loopback: not verified (nothing else can answer on 127.0.0.1)."""

    def __init__(self, url: str, token: str, timeout: float) -> None:
        import httpx

        self._httpx = httpx
        self.http = httpx.Client(base_url=url.rstrip("/") + "/api/v1", verify=False,
                                 headers={"Authorization": f"Bearer {token}"},
                                 timeout=timeout)

    def call(self, method: str, path: str, params: Mapping[str, Any] | None = None
             ) -> Any:
        try:
            resp = self.http.request(method, path, params=dict(params or {}))
        except self._httpx.HTTPError as exc:
            raise ApiError(f"the ZDS API does not answer: {exc}") from exc
        return _answer(resp.status_code, resp.text)


def _answer(status: int, text: str) -> Any:
    if status >= 400:
        try:
            err = json.loads(text)["error"]
            message = f"{err['code']}: {err['message']}"
        except (ValueError, KeyError, TypeError):
            message = text.strip()[:300]
        raise ApiError(f"{status} {message}", status)
    return json.loads(text) if text else None


@dataclass
class Agent:
    """One action of one resource: ``pool`` on ``api``, within ``timeout`` seconds."""

    pool: str
    api: Api
    timeout: float
    out: Callable[[str], None] = lambda line: print(line, file=sys.stderr)
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep

    def __post_init__(self) -> None:
        self.deadline = self.clock() + max(1.0, self.timeout - MARGIN)

    def left(self) -> float:
        return self.deadline - self.clock()

    def fail(self, code: int, reason: str) -> int:
        self.out(f"ocf-exit-reason:{reason}")
        return code

    def _call(self, method: str, path: str, params: Mapping[str, Any] | None = None
              ) -> Any:
        """Retries while the API is not reachable (it may be starting) or busy, until
        the deadline."""
        while True:
            try:
                return self.api.call(method, path, params)
            except ApiError as exc:
                busy = exc.status == 0 or (exc.status == 503 and "busy" in str(exc))
                if not busy or self.left() <= 2.0:
                    raise
                self.sleep(2.0)

    def _job(self, path: str) -> dict[str, Any]:
        job: dict[str, Any] = self._call("POST", path, {"wait": _wait(self.left())})
        while job.get("state") not in ("succeeded", "failed", "cancelled"):
            if self.left() <= 1.0:
                raise ApiError(f"job {job.get('id')} ({job.get('message')}) still "
                               f"{job.get('state')} at the operation's timeout")
            job = self._call("GET", f"/jobs/{job['id']}", {"wait": _wait(self.left())})
        return job

    def monitor(self) -> int:
        try:
            st = self._call("GET", f"/cluster/pools/{self.pool}")
        except ApiError as exc:
            return self.fail(OCF_ERR_GENERIC, str(exc))
        if not st.get("imported"):
            return OCF_NOT_RUNNING
        if not st.get("ok"):
            return self.fail(OCF_ERR_GENERIC, str(st.get("message", "not serving")))
        return OCF_SUCCESS

    def start(self) -> int:
        try:
            job = self._job(f"/cluster/pools/{self.pool}/take")
        except ApiError as exc:
            return self.fail(OCF_ERR_GENERIC, f"take {self.pool}: {exc}")
        if job["state"] != "succeeded":
            err = job.get("error") or {}
            return self.fail(OCF_ERR_GENERIC,
                             f"take {self.pool}: {err.get('message', job['state'])}")
        result = job.get("result") or {}
        self.out(f"took {self.pool}: {result.get('seconds')}; adopted "
                 f"{', '.join(result.get('adopted', [])) or 'nothing new'}")
        for line in result.get("attention", []):
            self.out(f"needs attention: {line}")
        return self.monitor()

    def stop(self) -> int:
        try:
            job = self._job(f"/cluster/pools/{self.pool}/release")
        except ApiError as exc:
            return self.fail(OCF_ERR_GENERIC, f"release {self.pool}: {exc}")
        if job["state"] != "succeeded":
            err = job.get("error") or {}
            return self.fail(OCF_ERR_GENERIC,
                             f"release {self.pool}: {err.get('message', job['state'])}")
        return OCF_SUCCESS


def _wait(left: float) -> float:
    """A job long-poll: at most 600 s (the API's limit), within what is left."""
    return max(0.0, min(600.0, left - 1.0))


def _timeout(env: Mapping[str, str], action: str) -> float:
    ms = env.get("OCF_RESKEY_CRM_meta_timeout", "")
    return int(ms) / 1000.0 if ms.isdigit() else DEFAULT_TIMEOUTS.get(action, 60.0)


def _token(env: Mapping[str, str]) -> str | None:
    path = env.get("OCF_RESKEY_token_file") or DEFAULT_TOKEN_FILE
    candidates = [path] if env.get("OCF_RESKEY_token_file") else [path, FALLBACK_TOKEN_FILE]
    for p in candidates:
        try:
            token = Path(p).read_text().strip()
        except OSError:
            continue
        if token:
            return token
    return None


def run(argv: Sequence[str], env: Mapping[str, str],
        make_api: Callable[[str, str, float], Api] = HttpApi,
        out: Callable[[str], None] = lambda line: print(line, file=sys.stderr)) -> int:
    """The agent: ``argv[0]`` is the action, parameters are in ``env``."""
    action = argv[0] if argv else ""
    if action == "meta-data":
        print(META_DATA, end="")
        return OCF_SUCCESS
    if action not in ("start", "stop", "monitor", "status", "validate-all"):
        out(f"ocf-exit-reason:action {action!r} is not implemented")
        return OCF_ERR_UNIMPLEMENTED
    pool = env.get("OCF_RESKEY_pool", "")
    if not POOL_NAME.fullmatch(pool):
        out(f"ocf-exit-reason:parameter pool is missing or not a pool name: {pool!r}")
        return OCF_ERR_CONFIGURED
    token = _token(env)
    if token is None:
        # this node cannot use its API, so it can neither run the pool nor tell: pacemaker
        # reads 5 as "not installed here" and runs the pool on another node
        out("ocf-exit-reason:no API token: neither the token_file nor "
            f"{FALLBACK_TOKEN_FILE} can be read")
        return OCF_ERR_INSTALLED
    if action == "validate-all":
        return OCF_SUCCESS
    timeout = _timeout(env, "monitor" if action == "status" else action)
    api = make_api(env.get("OCF_RESKEY_url") or DEFAULT_URL, token, timeout)
    agent = Agent(pool, api, timeout, out=out)
    if action in ("monitor", "status"):
        return agent.monitor()
    if action == "start":
        return agent.start()
    return agent.stop()


def main() -> None:
    sys.exit(run(sys.argv[1:], os.environ))


if __name__ == "__main__":
    main()
