"""bench/scale.py's seeding script: several groups at once, and a failure in any is seen."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from bench.scale import main, parallel_script


def _run(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30,
                          check=False)


def test_every_line_runs_once_across_the_groups(tmp_path: Path) -> None:
    lines = [f"echo {i} >> {tmp_path}/ran.$BASHPID" for i in range(10)]
    r = _run(parallel_script(lines, 4))
    assert r.returncode == 0, r.stdout + r.stderr
    ran = sorted(int(x) for f in tmp_path.glob("ran.*") for x in f.read_text().split())
    assert ran == list(range(10))
    assert len(list(tmp_path.glob("ran.*"))) == 4, "the groups did not run as 4 processes"


def test_a_failing_group_fails_the_script_and_stops_that_group_only(tmp_path: Path) -> None:
    lines = [f"touch {tmp_path}/a", "false", f"touch {tmp_path}/b", f"touch {tmp_path}/c"]
    r = _run(parallel_script(lines, 2))  # groups: [a, b] and [false, c]
    assert r.returncode == 1
    assert (tmp_path / "a").exists() and (tmp_path / "b").exists()
    assert not (tmp_path / "c").exists(), "the failing group went on after its failure"


def test_replot_draws_a_saved_run_without_an_appliance(tmp_path: Path) -> None:
    rows = [{"n": n, "put_p50": 2.0 + n / 1000, "list": 0.3 * n ** 0.8, "drift": 0.3 * n ** 0.8,
             "get": 0.2, "metrics": 0.03 * n ** 0.5, "health": 0.01}
            for n in (10, 100, 300, 1000)]
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps({"rows": rows, "boot": {}, "profiles": {}}))
    png = tmp_path / "scale.png"
    assert main(["--replot", str(saved), "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
