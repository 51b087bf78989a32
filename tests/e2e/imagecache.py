"""Which image the e2e suite tests: one per run, and the one of this tree already built
with its guests saved, before a new build.

images/build.py keys an image by the tree *and* by the Debian packages the archive offers
when it resolves them (kernel, ZFS, ganesha, ...). When the archive moves, the same tree
gets a new key, so a new build, every guest booted again and the HA bed configured again:
about half an hour more under TCG, which CI's 90 minutes do not have. On 2026-11-29 the
kernel 6.1.0-57 appeared in the middle of a run, and the replication pair's module (which
asked for the image again) rebuilt it while the session appliance ran the older one.

The suite tests the tree. So it asks once per run, and takes an image of this tree that
is already built: the one with the most guests saved, then the newest; it prints which.
Only when there is none does it build. ``./zds-appliance build`` and ``run`` still take
the archive's newest packages, and any change to the image's inputs builds afresh.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path

from images import build
from images.paths import REPO, images_dir


@dataclass(frozen=True)
class CachedBuild:
    """A finished build in the cache (``builds/<key>`` with its manifest)."""

    path: Path
    built: str  # the manifest's UTC time stamp, ISO 8601: sorts as it reads
    kernel_abi: str
    saved_guests: int  # warm/*/ram.state: guests a run can restore instead of booting


def builds_of_tree(cache: Path, repo: Path) -> list[CachedBuild]:
    """The finished builds in ``cache`` made from ``repo``'s image inputs as they are now,
    whatever packages each was built with: a build's key is the inputs' hash with the
    versions its manifest records, so the same hash means the same tree."""
    found: list[CachedBuild] = []
    builds = cache / "builds"
    if not builds.is_dir():
        return found
    for d in sorted(builds.iterdir()):
        try:
            manifest = json.loads((d / "manifest.json").read_text())
            resolved = build.Resolved(str(manifest["kernel_abi"]),
                                      {str(k): str(v) for k, v in manifest["versions"].items()})
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue  # unfinished, or not a build
        if build.inputs_hash(repo, resolved) != d.name:
            continue
        found.append(CachedBuild(d, str(manifest.get("built", "")), resolved.kernel_abi,
                                 sum(1 for _ in (d / "warm").glob("*/ram.state"))))
    return found


def choose(builds: list[CachedBuild]) -> CachedBuild | None:
    """The build to test: the most guests saved, then the newest; None for none."""
    return max(builds, key=lambda b: (b.saved_guests, b.built), default=None)


_lock = threading.Lock()
_chosen: list[Path] = []


def tested_image() -> Path:
    """The image directory this run tests (chosen once; the boot in the background and
    the modules that boot guests of their own all get the same one)."""
    with _lock:
        if not _chosen:
            pick = choose(builds_of_tree(images_dir(), REPO))
            if pick is None:
                _chosen.append(build.build())
            else:
                build.log(f"testing the image of this tree built {pick.built} (kernel "
                          f"{pick.kernel_abi}, {pick.saved_guests} guests saved): "
                          f"{pick.path}; `./zds-appliance build` takes the archive's "
                          "newest packages")
                _chosen.append(pick.path)
        return _chosen[0]
