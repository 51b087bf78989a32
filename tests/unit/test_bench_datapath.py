"""The data-path benchmarks' own logic (no VM): ganesha.conf edits, CPU accounting from
/proc/stat, and ratios of interleaved rounds."""

from __future__ import annotations

import pytest

from bench.guest import Measurement, parse_proc_stat, ratio
from bench.nfs_servers import core_param_text

# as the nfs_ganesha role renders it (ansible/roles/nfs_ganesha/templates/ganesha.conf.j2)
CONF = """NFS_CORE_PARAM {
\tProtocols = 3, 4;
\tNFS_Port = 2049;
\tMNT_Port = 20048;
}

NFSV4 {
\tGrace_Period = 20;
}
"""


def test_core_params_are_replaced_or_added_inside_the_block() -> None:
    out = core_param_text(CONF, {"NFS_Port": "2050", "Nb_Worker": "16"})
    block = out.split("}")[0]
    assert "\tNFS_Port = 2050;" in block and "\tNb_Worker = 16;" in block
    assert "2049" not in out and out.count("NFS_CORE_PARAM") == 1
    assert out.endswith("NFSV4 {\n\tGrace_Period = 20;\n}\n")
    with pytest.raises(ValueError):
        core_param_text("NFSV4 {\n}\n", {"Nb_Worker": "16"})


def test_cpu_busy_leaves_out_idle_and_iowait() -> None:
    busy, total = parse_proc_stat("cpu  4705 356 584 3699176 23060 0 277 0 0 0")
    assert (busy, total) == (4705 + 356 + 584 + 277, 4705 + 356 + 584 + 3699176 + 23060 + 277)
    with pytest.raises(ValueError):
        parse_proc_stat("cpu0 1 2 3")


def _m(config: str, rnd: int, iops: float, error: str = "") -> Measurement:
    return Measurement("servers", config, "vm-mixed-4k", rnd, {"iops": iops}, error=error)


def test_ratio_is_the_median_of_per_round_ratios_and_skips_failed_rounds() -> None:
    runs = [_m("ganesha", 0, 100), _m("knfsd", 0, 200),
            _m("ganesha", 1, 50), _m("knfsd", 1, 150),
            _m("ganesha", 2, 100), _m("knfsd", 2, 0, error="mount failed")]
    r = ratio(runs, "servers", "vm-mixed-4k", "ganesha", "knfsd")
    assert r is not None
    assert r.rounds == 2 and (r.low, r.high) == (2.0, 3.0) and r.ratio == 2.5
    assert (r.median_a, r.median_b) == (75.0, 175.0)
    assert ratio(runs, "servers", "streaming-read", "ganesha", "knfsd") is None
