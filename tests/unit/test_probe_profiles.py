"""Profiles -> fio job files: one golden file per profile (tests/unit/golden/probes/).

Regenerate after an intended change with ZDS_UPDATE_GOLDEN=1 and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from appliance.errors import InvalidInput, NotFound
from appliance.probes import profiles
from appliance.probes.jobfile import FioTarget, render

GOLDEN = Path(__file__).parent / "golden" / "probes"
CATALOGUE = [
    "vm-mixed-4k", "vm-mixed-8k", "randread-4k-qd32", "randrw-4k-qd32", "bst", "hybrid-64k",
    "small-hybrid-4k", "read-only", "write-only", "streaming-read", "streaming-write",
    "block-size-sweep", "size-sweep", "fileserver", "webserver", "varmail", "rfa", "rtt",
    "net-throughput",
]
FIO_PROFILES = [n for n in CATALOGUE if profiles.get(n).kind == "fio"]


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("ZDS_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"job file for {name} changed; see {path}"


def test_every_catalogue_profile_is_registered() -> None:
    assert sorted(profiles.names()) == sorted(CATALOGUE)


@pytest.mark.parametrize("name", FIO_PROFILES)
def test_default_job_file_matches_golden(name: str) -> None:
    p = profiles.get(name)
    _golden(f"{name}.fio", render(p, p.resolve(), FioTarget("/tank/zds-probes/p1")))


@pytest.mark.parametrize("name", FIO_PROFILES)
def test_full_preset_job_file_matches_golden(name: str) -> None:
    p = profiles.get(name)
    text = render(p, p.resolve({"preset": "full"}), FioTarget("/tank/zds-probes/p1"))
    _golden(f"{name}.full.fio", text)


def test_vm_mixed_full_preset_is_the_source_sweep() -> None:
    p = profiles.get("vm-mixed-4k")
    params = p.resolve({"preset": "full"})
    assert params["runtime"] == 300 and params["ramp"] == 300
    assert params["workers"] == [1, 3, 5, 8, 16, 32, 64, 128, 160]
    steps = p.plan(params)
    assert [s.point["workers"] for s in steps] == [1, 3, 5, 8, 16, 32, 64, 128, 160]
    assert ("stonewall", "1") not in steps[0].options
    assert all(("stonewall", "1") in s.options for s in steps[1:])


def test_overrides_are_validated_and_applied() -> None:
    p = profiles.get("vm-mixed-8k")
    params = p.resolve({"runtime": "7", "workers": "1,3", "size": "1g", "iodepth": 8})
    text = render(p, params, FioTarget("/mnt/x"))
    assert "runtime=7\n" in text and "size=1g\n" in text
    assert "[w1]" in text and "[w3]" in text and "[w2]" not in text
    assert text.count("iodepth=8") == 2
    with pytest.raises(InvalidInput, match="no parameter 'colour'"):
        p.resolve({"colour": "red"})
    with pytest.raises(InvalidInput, match="expected a size"):
        p.resolve({"size": "lots"})
    with pytest.raises(InvalidInput, match="between"):
        p.resolve({"rwmixread": 101})
    with pytest.raises(InvalidInput, match="preset"):
        p.resolve({"preset": "huge"})


def test_device_target_uses_filename_and_refuses_file_sets() -> None:
    p = profiles.get("randread-4k-qd32")
    text = render(p, p.resolve(), FioTarget("/dev/zvol/tank/zds-probes/p1", is_device=True))
    assert "filename=/dev/zvol/tank/zds-probes/p1\n" in text
    assert "directory=" not in text and "filename_format" not in text
    with pytest.raises(InvalidInput, match="needs a file system"):
        fs = profiles.get("fileserver")
        render(fs, fs.resolve(), FioTarget("/dev/sdb", is_device=True))
    ss = profiles.get("size-sweep")
    dev = render(ss, ss.resolve(), FioTarget("/dev/sdb", is_device=True))
    assert "filename=zds-size" not in dev and "filename=/dev/sdb" in dev


@pytest.mark.parametrize("bad", ["relative/path", "/a:b", "/a\nrw=write", "/a/../etc", "/a b"])
def test_unsafe_paths_are_refused(bad: str) -> None:
    with pytest.raises(InvalidInput):
        FioTarget(bad)


def test_log_prefix_adds_per_section_logs() -> None:
    p = profiles.get("block-size-sweep")
    text = render(p, p.resolve(), FioTarget("/d"), log_prefix="/run/zds/p1/log")
    assert "log_avg_msec=1000" in text
    for sec in ("bs4k", "bs64k", "bs256k"):
        assert f"write_iops_log=/run/zds/p1/log.{sec}\n" in text
        assert f"write_lat_log=/run/zds/p1/log.{sec}\n" in text


def test_personality_splits_files_across_threads() -> None:
    p = profiles.get("fileserver")
    steps = p.plan(p.resolve({"preset": "full"}))
    opts = dict(steps[0].options)
    assert opts["numjobs"] == "50" and opts["nrfiles"] == "200"  # 10,000 files / 50 threads
    assert opts["filesize"] == "128k" and opts["size"] == "25m"


def test_size_sweep_plans_cache_and_disk_passes_per_size() -> None:
    p = profiles.get("size-sweep")
    steps = p.plan(p.resolve({"preset": "full"}))
    assert len(steps) == 4 * 4
    assert {s.point["size"] for s in steps} == {100 << 10, 1 << 20, 10 << 20, 100 << 20}
    disk_read = next(s for s in steps if s.name == "r-100m-disk")
    opts = dict(disk_read.options)
    assert opts["invalidate"] == "1" and opts["loops"] == "10"
    assert opts["bs"] == "100m" and opts["size"] == "10000m"
    # the passes differ by semantics only (applied on the appliance between two fio
    # runs), not by fio flags on one side: every cache step first, then every disk step
    assert "direct" not in opts and "end_fsync" not in opts
    assert [s.point["cache"] for s in steps] == ["cache"] * 8 + ["disk"] * 8
    assert dict(steps[0].io) == {"reads": "cache", "writes": "async"}
    assert dict(disk_read.io) == {"reads": "disk", "writes": "sync"}


def test_unknown_profile_is_not_found() -> None:
    with pytest.raises(NotFound, match="known:"):
        profiles.get("nope")


def test_net_profiles_plan_without_fio() -> None:
    net = profiles.get("net-throughput")
    assert [s.point["streams"] for s in net.plan(net.resolve())] == [1, 4]
    rtt = profiles.get("rtt")
    assert dict(rtt.plan(rtt.resolve({"samples": 50}))[0].options)["samples"] == "50"
    with pytest.raises(InvalidInput):
        render(rtt, rtt.resolve(), FioTarget("/d"))
