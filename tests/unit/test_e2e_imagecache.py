"""The e2e suite's choice of image (tests/e2e/imagecache.py): this tree's builds only,
whatever packages they were built with; the one with the most guests saved; a build only
when there is none; one choice per run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from images import build
from tests.e2e import imagecache

OLD = build.Resolved("6.1.0-56-amd64", {"linux-image-amd64": "6.1.192-2", "zfs-dkms": "2.3.2"})
NEW = build.Resolved("6.1.0-57-amd64", {"linux-image-amd64": "6.1.193-1", "zfs-dkms": "2.3.2"})


def make_repo(root: Path, source: str) -> Path:
    (root / "appliance").mkdir(parents=True)
    (root / "appliance" / "engine.py").write_text(source)
    (root / "pyproject.toml").write_text("[project]\nname = 'zds'\n")
    return root


def add_build(cache: Path, repo: Path, resolved: build.Resolved, built: str,
              saved: int = 0) -> Path:
    """A finished build of ``repo`` with ``resolved``, as images/build.py leaves it."""
    d = cache / "builds" / build.inputs_hash(repo, resolved)
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps({
        "inputs": d.name, "kernel_abi": resolved.kernel_abi, "versions": resolved.versions,
        "built": built}))
    for i in range(saved):
        (d / "warm" / f"guest{i}").mkdir(parents=True)
        (d / "warm" / f"guest{i}" / "ram.state").write_bytes(b"")
    return d


def test_only_this_trees_finished_builds_whatever_their_packages(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    other = make_repo(tmp_path / "other", "ENGINE = 1\n")
    stale = add_build(cache, other, OLD, "2026-11-28T20:23:10Z", saved=7)
    repo = make_repo(tmp_path / "repo", "ENGINE = 2\n")
    old = add_build(cache, repo, OLD, "2026-11-29T04:44:36Z", saved=7)
    new = add_build(cache, repo, NEW, "2026-11-29T09:40:00Z", saved=2)
    (cache / "builds" / "0123456789abcdef0123").mkdir()  # a build that never finished
    found = {b.path: b for b in imagecache.builds_of_tree(cache, repo)}
    assert set(found) == {old, new}, found  # never the other tree's, however warm
    assert stale not in found
    assert found[old].saved_guests == 7 and found[old].kernel_abi == "6.1.0-56-amd64"
    assert found[new].saved_guests == 2


def test_the_most_guests_saved_then_the_newest(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    repo = make_repo(tmp_path / "repo", "ENGINE = 2\n")
    old = add_build(cache, repo, OLD, "2026-11-29T04:44:36Z", saved=7)
    new = add_build(cache, repo, NEW, "2026-11-29T09:40:00Z", saved=2)
    pick = imagecache.choose(imagecache.builds_of_tree(cache, repo))
    assert pick is not None and pick.path == old  # the warm one, not the newest cold one
    for i in range(2, 7):
        (new / "warm" / f"guest{i}").mkdir(parents=True)
        (new / "warm" / f"guest{i}" / "ram.state").write_bytes(b"")
    pick = imagecache.choose(imagecache.builds_of_tree(cache, repo))
    assert pick is not None and pick.path == new  # as warm: the newer packages
    assert imagecache.choose([]) is None


def test_a_build_only_when_the_tree_has_none_and_one_choice_per_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    repo = make_repo(tmp_path / "repo", "ENGINE = 2\n")
    built = tmp_path / "fresh"
    builds: list[Path] = []

    def fake_build(force: bool = False) -> Path:
        builds.append(built)
        return built

    monkeypatch.setattr(imagecache, "images_dir", lambda: cache)
    monkeypatch.setattr(imagecache, "REPO", repo)
    monkeypatch.setattr(build, "build", fake_build)
    monkeypatch.setattr(imagecache, "_chosen", [])
    assert imagecache.tested_image() == built and builds == [built]
    add_build(cache, repo, OLD, "2026-11-29T04:44:36Z", saved=1)
    assert imagecache.tested_image() == built and builds == [built]  # chosen once per run

    monkeypatch.setattr(imagecache, "_chosen", [])  # the next run
    reused = imagecache.tested_image()
    assert reused == cache / "builds" / build.inputs_hash(repo, OLD) and len(builds) == 1
