"""The README's first session runs as written against the booted appliance: its curl
block is taken from README.md itself, with only the token and the API's host port
filled in, and every request must succeed (curl --fail-with-body)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import E2EAppliance
from tests.e2e.rest import api_client

pytestmark = pytest.mark.e2e

README = Path(__file__).resolve().parents[2] / "README.md"


def first_session() -> str:
    text = README.read_text()
    section = text.split("## A first session with curl", 1)[1]
    m = re.search(r"```sh\n(.*?)```", section, re.S)
    assert m, "README: no sh block under 'A first session with curl'"
    return m.group(1)


def test_the_readme_first_session_runs_as_written(appliance: E2EAppliance,
                                                  tmp_path: Path) -> None:
    block = first_session()
    assert "TOKEN=..." in block and "https://127.0.0.1:8443" in block
    script = tmp_path / "session.sh"
    script.write_text(
        "set -euo pipefail\n"
        # every request must succeed; -sS keeps errors visible
        'curl() { command curl -sS --fail-with-body "$@"; }\n'
        + block.replace("TOKEN=...", f"TOKEN={appliance.admin_token}")
               .replace("https://127.0.0.1:8443", appliance.api_url))
    try:
        run = subprocess.run(["bash", str(script)], capture_output=True, text=True,
                             timeout=900)
        assert run.returncode == 0, f"README session failed:\n{run.stdout}\n{run.stderr}"
        out = run.stdout
        assert "esxcli storage nfs add" in out and "--share=/tank/datastores/vmfs-nfs01" in out
        # curl prints the initiator group's JSON without a newline: the WWN follows it
        assert re.search(r"naa\.6001405[0-9a-f]{25}$", out, re.M), out
        assert "before-upgrade" in out
    finally:
        with api_client(appliance.api_url, appliance.admin_token, timeout=600) as c:
            for name in ("vmfs-nfs01", "vmfs-lun01"):
                c.delete(f"/datastores/{name}", params={"wait": 300, "force": True})
            c.delete("/initiator-groups/esx-cluster")
