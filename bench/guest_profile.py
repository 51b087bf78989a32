"""Runs inside the appliance (the API's own venv): where the time of ``GET /datastores``
and ``GET /system/drift`` goes, split into host commands (by command), configfs walks,
and the engine's own Python. bench/scale.py sends this file to the guest and runs it at
each count with ``--profile``; by hand::

    /opt/zds/venv/bin/python guest_profile.py

It builds a second engine on the same state (reads only: no lock, no jobs, no start-up)
beside the running API, times each read once warm (the split) and once more under
cProfile (the top functions), and prints one JSON object. The list is timed twice: as
it answers (from the kept ZFS read, which the warm-up call made) and reading ZFS; then
what the API does with the list's views before HTTP (its models and their JSON).
"""

from __future__ import annotations

import cProfile
import io
import json
import pstats
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from appliance.engine import Engine
from appliance.host import lio as lio_module
from appliance.host import run as run_module
from appliance.settings import load_settings

spent: dict[str, float] = defaultdict(float)


@contextmanager
def timing(key: str) -> Iterator[None]:
    t0 = time.perf_counter()
    try:
        yield
    finally:
        spent[key] += time.perf_counter() - t0


def instrument() -> None:
    """Wraps the real runner and the configfs reader so their time is counted by kind."""
    real_run = run_module.SubprocessRunner.run

    def run(self: Any, argv: Any, **kw: Any) -> Any:
        args = [str(a) for a in argv]
        key = " ".join(args[:2]) if args[0] in ("zfs", "zpool") else args[0]
        if args[0] == "dbus-send":
            key = "dbus-send " + args[-1].rsplit(".", 1)[-1]
        with timing("cmd: " + key):
            return real_run(self, argv, **kw)

    run_module.SubprocessRunner.run = run  # type: ignore[method-assign]
    for name in ("targets", "backstores", "backstore_names", "summaries"):
        real = getattr(lio_module.ConfigfsReader, name)

        def walk(self: Any, _real: Callable[..., Any] = real, _name: str = name) -> Any:
            with timing(f"configfs: {_name}"):
                return _real(self)

        setattr(lio_module.ConfigfsReader, name, walk)


def profile(label: str, fn: Callable[[], Any]) -> dict[str, Any]:
    fn()  # warm: imports, caches, page cache
    spent.clear()
    t0 = time.perf_counter()
    fn()
    wall = time.perf_counter() - t0
    parts = dict(sorted(spent.items(), key=lambda kv: -kv[1]))
    prof = cProfile.Profile()  # a third run, for where the Python time goes (the
    prof.enable()              # profiler's own cost would inflate the split above)
    fn()
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(8)
    top = [line.strip() for line in buf.getvalue().splitlines()
           if line.strip() and line.strip()[0].isdigit()][:8]
    return {"what": label, "wall_s": round(wall, 3),
            "host_s": {k: round(v, 3) for k, v in parts.items()},
            "python_s": round(wall - sum(parts.values()), 3), "top_tottime": top}


def main() -> None:
    instrument()
    engine = Engine.real(load_settings())
    kept = engine.reconciler.kept
    interval = kept.interval

    def cold() -> Any:  # every call reads ZFS, as before the kept read (issue 24)
        kept.interval = 0
        try:
            return engine.datastores.list()
        finally:
            kept.interval = interval

    from pydantic import TypeAdapter

    from api import convert, schemas

    views = engine.datastores.list()
    answer = TypeAdapter(list[schemas.DatastoreOut])

    def models_and_json() -> bytes:  # what GET /datastores does after the engine
        return answer.dump_json([convert.datastore_out(v) for v in views])

    out = [profile("list", engine.datastores.list), profile("list (ZFS read)", cold),
           profile("drift", engine.system.drift),
           profile("the API's models and JSON of the list", models_and_json)]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
