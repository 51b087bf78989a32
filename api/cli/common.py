"""What every ``zds`` command group shares: the REST client, output helpers, and the
:class:`Wiring` through which commands reach the appliance's parts (tests pass fakes)."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance.settings import Settings, load_settings

if TYPE_CHECKING:  # the local commands' parts; remote commands never load them
    from appliance.engine import Engine
    from appliance.host.factory import HostAdapters
    from appliance.host.nfs_units import NfsUnits
    from appliance.probes.client import ClientTools
    from appliance.services.tokens import TokenService

DEFAULT_SERVER = "https://127.0.0.1:8443"


class Client:
    """The appliance's REST API (``--server``, ``--token``); errors exit with the
    API's message."""

    def __init__(self, args: argparse.Namespace) -> None:
        import httpx

        token = args.token or os.environ.get("ZDS_TOKEN")
        if not token:
            try:
                token = Path(os.environ.get("ZDS_TOKEN_FILE", "/etc/zds/admin-token")) \
                    .read_text().strip()
            except OSError:
                token = None
        verify: bool | str = args.cacert or not args.insecure
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=args.server.rstrip("/") + "/api/v1",
                                 headers=headers, verify=verify, timeout=660)
        self.headers: dict[str, str] = {}  # the last answer's (the list's ZDS-ZFS-Age)

    def call(self, method: str, path: str, body: Any = None,
             params: dict[str, Any] | None = None) -> Any:
        resp = self.http.request(method, path, json=body, params=params)
        self.headers = dict(resp.headers)
        if resp.status_code >= 400:
            try:
                err = resp.json()["error"]
                msg = f"{err['code']}: {err['message']}"
            except (ValueError, KeyError, TypeError):
                msg = resp.text
            raise SystemExit(f"zds: {resp.status_code} {msg}")
        return resp.json() if resp.content else None


def _real_engine(settings: Settings) -> Engine:
    from appliance.engine import Engine

    return Engine.real(settings)


def _real_hosts(settings: Settings) -> HostAdapters:
    from appliance.host.factory import real_hosts

    return real_hosts(settings)


def _real_tokens(settings: Settings) -> TokenService:
    from appliance.services.tokens import TokenService
    from appliance.store import Store

    return TokenService(Store(settings.db_path))


def _real_nfs_units() -> NfsUnits:
    from appliance.host.factory import real_nfs_units

    return real_nfs_units()


def _real_client_tools(workdir: str) -> ClientTools:
    from appliance.probes.client import real_client_tools

    return real_client_tools(workdir)


@dataclass(frozen=True)
class Wiring:
    """How commands get what they act on: the REST client (remote commands), the engine
    and host adapters (commands run on the appliance), the API tokens in its database,
    the probe tools (client mode).
    :data:`REAL` is the appliance's; tests give ``main`` one built on fakes."""

    client: Callable[[argparse.Namespace], Client] = Client
    engine: Callable[[Settings], Engine] = _real_engine
    hosts: Callable[[Settings], HostAdapters] = _real_hosts
    tokens: Callable[[Settings], TokenService] = _real_tokens
    client_tools: Callable[[str], ClientTools] = _real_client_tools
    nfs_units: Callable[[], NfsUnits] = _real_nfs_units


REAL = Wiring()


def wiring(args: argparse.Namespace) -> Wiring:
    w = getattr(args, "wiring", None)
    return w if isinstance(w, Wiring) else REAL


def client(args: argparse.Namespace) -> Client:
    return wiring(args).client(args)


def settings_of(args: argparse.Namespace) -> Settings:
    settings = load_settings(Path(args.config) if args.config else None)
    if getattr(args, "state_dir", None):
        settings = settings.with_state_dir(Path(args.state_dir))
    return settings


def table(rows: Sequence[dict[str, Any]], cols: list[str]) -> str:
    if not rows:
        return "(none)"
    cells = [[_cell(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(cols, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ",".join(str(v) for v in value) or "-"
    return str(value)


def out(args: argparse.Namespace, data: Any, human: Callable[[Any], str]) -> None:
    print(json.dumps(data, indent=2) if args.json else human(data))


def _job_line(job: dict[str, Any]) -> str:
    err = f" error: {job['error']['message']}" if job.get("error") else ""
    return f"job {job['id']} {job['kind']} {job['state']}{err}"


def out_job(args: argparse.Namespace, job: dict[str, Any]) -> int:
    """Prints a job; the exit status is 1 when it failed or was cancelled (scripts)."""
    out(args, job, _job_line)
    return 1 if job["state"] in ("failed", "cancelled") else 0
