"""The shape of the code: no import cycles in appliance/ and api/, the engine never imports
FastAPI or the API, only appliance/host/ starts processes or talks to rtslib, and a
protocol is known only to its transport (appliance/transports/): no protocol name outside
its module, no ``is_nfs``, transports below the services and above the adapters.

Imports are read from the source (every ``import``/``from ... import`` anywhere in a
module, including inside functions and under ``TYPE_CHECKING``, plus
``importlib.import_module("...")`` with a literal name), so a cycle hidden behind a
local import or a type-checking guard fails here too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("appliance", "api")


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imported_names(path: Path, module: str) -> Iterator[str]:
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                yield f"{base}.{alias.name}"  # a submodule, or a name in ``base``
                yield base
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            yield node.args[0].value


def graph() -> dict[str, set[str]]:
    mods = modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        for name in imported_names(path, mod):
            if name in mods and name != mod:
                edges[mod].add(name)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles() -> None:
    assert cycles(graph()) == []


def test_the_cycle_finder_finds_cycles() -> None:
    """The check above could pass by finding nothing: it must see a hidden cycle."""
    edges = graph()
    edges["appliance.host.run"].add("appliance.engine")  # as a TYPE_CHECKING import would
    assert any({"appliance.engine", "appliance.host.run"} <= set(c) for c in cycles(edges))


def test_function_level_and_type_checking_imports_are_seen() -> None:
    mods = modules()
    # api.cli.common imports the engine only under TYPE_CHECKING, and the factory only
    # inside functions: both must still be edges
    names = set(imported_names(mods["api.cli.common"], "api.cli.common"))
    assert "appliance.engine" in names and "appliance.host.factory" in names


def test_the_engine_never_imports_the_api_or_fastapi() -> None:
    for mod, path in modules().items():
        if not mod.startswith("appliance"):
            continue
        for name in imported_names(path, mod):
            assert not name.startswith(("api.", "fastapi", "starlette", "uvicorn")) \
                and name != "api", f"{mod} imports {name}"


def test_only_the_host_layer_touches_the_os() -> None:
    for mod, path in modules().items():
        if mod.startswith("appliance.host"):
            continue
        for name in imported_names(path, mod):
            top = name.split(".")[0]
            assert top not in ("subprocess", "rtslib_fb", "pyudev"), f"{mod} imports {name}"


def test_services_get_what_they_need_instead_of_the_engine() -> None:
    for mod, path in modules().items():
        if mod.startswith(("appliance.services", "appliance.reconciler", "appliance.probes")):
            assert "appliance.engine" not in set(imported_names(path, mod)), mod


# --- input validation: full matches only -------------------------------------------------

def _pattern_text(node: ast.expr) -> str | None:
    """The literal text of a regex argument (a string, or an f-string's literal tail)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values:
        last = node.values[-1]
        if isinstance(last, ast.Constant) and isinstance(last.value, str):
            return last.value
    return None


def _ends_with_dollar(pattern: str) -> bool:
    return pattern.endswith("$") and not pattern.endswith("\\$")


def dollar_matches(source: str, filename: str = "<src>") -> list[int]:
    """Lines of ``source`` that apply a pattern ending in ``$`` with ``match``/``search``
    (``re.match(r"...$", s)`` or ``NAME.match(s)`` of a ``NAME = re.compile(r"...$")``):
    ``$`` also matches before a trailing newline, so "g1\\n" passes such a check."""
    tree = ast.parse(source, filename)
    compiled: set[str] = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Attribute)
                and node.value.func.attr == "compile" and node.value.args):
            text = _pattern_text(node.value.args[0])
            if text is not None and _ends_with_dollar(text):
                compiled.add(node.targets[0].id)
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("match", "search")
                and isinstance(node.func.value, ast.Name)):
            continue
        owner = node.func.value.id
        if owner == "re" and node.args:
            text = _pattern_text(node.args[0])
            if text is not None and _ends_with_dollar(text):
                found.append(node.lineno)
        elif owner in compiled:
            found.append(node.lineno)
    return found


def test_no_input_is_checked_with_match_and_a_dollar_anchor() -> None:
    """Issue 22 item 9: ``re.fullmatch`` (or ``\\Z``) wherever a pattern must cover the
    whole string; ``re.match(r"^g\\d$", "g1\\n")`` matches."""
    offenders = [f"{path.relative_to(ROOT)}:{line}" for path in modules().values()
                 for line in dollar_matches(path.read_text(), str(path))]
    assert offenders == [], "use re.fullmatch (a trailing newline passes `$`): " + \
        ", ".join(offenders)


def test_the_dollar_check_finds_what_it_must() -> None:
    src = '''
import re
_NAME = re.compile(r"^[a-z]+$")
_OK = re.compile(r"[a-z]+")
_ESCAPED = re.compile(r"cost \\$")
def f(s):
    re.match(r"^[a-z]+$", s)
    re.search(rf"^{s}[a-z]+$", s)
    _NAME.match(s)
    _NAME.fullmatch(s)
    _OK.match(s)
    _ESCAPED.match(s)
    re.fullmatch(r"[a-z]+$", s)
'''
    assert dollar_matches(src) == [7, 8, 9]


# --- transports: a protocol is known to its own module and nowhere else ---------------

# Protocol names not registered yet that must not appear anywhere before their transport
# does (none now: nvme-tcp arrived with appliance/transports/nvme.py).
FUTURE_PROTOCOLS: tuple[str, ...] = ()

# Where a protocol's name may appear outside its transport, and why. Each is a name in
# another role (a file's section, a recorded field, the kernel's own name, the REST
# body's section shown in an example), never a protocol compared or dispatched on.
PROTOCOL_NAME_ALLOWED: dict[tuple[str, str], str] = {
    ("appliance/settings.py", "iscsi"):
        "the [iscsi] section of zds.toml (iqn_prefix, portal): installed files use it",
    ("appliance/model.py", "iscsi"):
        "spec_from_dict reads the recorded spec's `iscsi` field (SQLite rows of every "
        "release)",
    ("api/schemas.py", "nfs3"): "an OpenAPI example request body",
    ("api/schemas.py", "iscsi"): "an OpenAPI example request body (and its section)",
    ("api/schemas_replication.py", "iscsi"): "the `iscsi` section of an OpenAPI example",
    ("api/cli/datastores.py", "iscsi"):
        "the REST body's and answer's `iscsi` section (the CLI is a REST client)",
    ("api/cli/replication.py", "iscsi"): "the promote body's `iscsi` section",
}


def protocol_owners() -> dict[str, str]:
    """Protocol name -> the one module (path from the root) that may name it."""
    import inspect

    from appliance.transports.registry import TRANSPORT_TYPES

    owners = {p: str(Path(inspect.getfile(t)).relative_to(ROOT))
              for t in TRANSPORT_TYPES for p in t.protocols}
    owners.update((p, "") for p in FUTURE_PROTOCOLS)  # owned by no module yet
    return owners


def protocol_names_in(source: str, path: str) -> Iterator[tuple[int, str]]:
    """(line, name) of every string literal that is a protocol name."""
    names = set(protocol_owners())
    for node in ast.walk(ast.parse(source, path)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value in names:
            yield node.lineno, node.value


def test_protocol_names_stay_in_their_transport_module() -> None:
    """Outside appliance/transports/<its module>.py (and the registry) nothing compares,
    lists or dispatches on a protocol's name: the code asks the datastore's transport.
    appliance/host/ is below the question (test_the_host_layer_never_sees_a_datastore):
    it speaks the kernel's names (configfs's `iscsi` fabric)."""
    owners = protocol_owners()
    found, used = [], set()
    for pkg in PACKAGES:
        for file in sorted((ROOT / pkg).rglob("*.py")):
            path = str(file.relative_to(ROOT))
            if path.startswith("appliance/host/") or \
                    path == "appliance/transports/registry.py":
                continue
            for line, name in protocol_names_in(file.read_text(), path):
                if owners[name] == path:
                    continue
                if (path, name) in PROTOCOL_NAME_ALLOWED:
                    used.add((path, name))
                    continue
                found.append(f"{path}:{line}: {name!r}")
    assert not found, "protocol names outside their transport: " + ", ".join(found)
    assert used == set(PROTOCOL_NAME_ALLOWED), \
        f"allow-list entries no longer needed: {set(PROTOCOL_NAME_ALLOWED) - used}"


def test_the_protocol_name_check_sees_comparisons_and_lists() -> None:
    code = ('if spec.protocol == "nfs3":\n    pass\n'
            'x = rec.spec.protocol in ("nfs41", "nvme-tcp")\n'
            'HANDLERS = {"iscsi": print}\n')
    assert sorted(protocol_names_in(code, "x.py")) == [
        (1, "nfs3"), (3, "nfs41"), (3, "nvme-tcp"), (4, "iscsi")]
    assert protocol_owners()["nfs3"] == "appliance/transports/nfs.py"


def test_no_is_nfs_anywhere() -> None:
    """The protocol is not a boolean: nothing defines or asks ``is_nfs``."""
    for top in (*PACKAGES, "tests", "bench", "images"):
        for file in sorted((ROOT / top).rglob("*.py")):
            text = file.read_text()
            if "is_nfs" not in text:  # parsing every file would take seconds
                continue
            for node in ast.walk(ast.parse(text, str(file))):
                name = (node.attr if isinstance(node, ast.Attribute) else
                        node.id if isinstance(node, ast.Name) else
                        node.name if isinstance(node, ast.FunctionDef) else
                        node.arg if isinstance(node, ast.arg) else None)
                where = f"{file.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
                assert name != "is_nfs", where


def test_the_host_layer_never_sees_a_datastore() -> None:
    """Adapters drive daemons; what a datastore is (its record, its protocol) is above
    them, so they cannot ask which protocol it has."""
    for mod, path in modules().items():
        if mod.startswith("appliance.host"):
            for name in imported_names(path, mod):
                assert not name.startswith(("appliance.model", "appliance.transports")), \
                    f"{mod} imports {name}"


def test_transports_sit_below_the_services() -> None:
    """A transport calls adapters and knows the model; the reconciler, services, probes,
    metrics and the API call it, never the other way round."""
    above = ("appliance.context", "appliance.engine", "appliance.reconciler",
             "appliance.services", "appliance.probes", "appliance.metrics.collector",
             "appliance.metrics.service", "appliance.policies", "appliance.replication",
             "api")
    for mod, path in modules().items():
        if mod.startswith("appliance.transports"):
            for name in imported_names(path, mod):
                assert not name.startswith(above), f"{mod} imports {name}"


def reachable(edges: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        for w in edges[todo.pop()]:
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


def test_the_appliance_imports_no_fake() -> None:
    """The engine and the API the appliance serves reach no module of the in-memory
    twins, even through a function-level import (they are made in appliance/fake_hosts.py
    for tests and `zds demo`)."""
    edges = graph()
    for start in ("appliance.engine", "api.app"):
        fakes = sorted(m for m in reachable(edges, start) if m.startswith(
            ("appliance.host.fakes", "appliance.fake_hosts", "appliance.demo")))
        assert fakes == [], f"{start} imports {fakes}"
    # and the check sees one when it is there
    edges["appliance.host.factory"].add("appliance.fake_hosts")
    assert "appliance.fake_hosts" in reachable(edges, "appliance.engine")


# Made outside the factory on purpose, with the reason:
MADE_ELSEWHERE = {
    # zds-hostid.service runs on every boot before any pool import: it loads the local
    # adapter alone, not the factory's every adapter module (issue 26's boot path)
    ("appliance.hostid", "RealLocalHost"), ("appliance.hostid", "SubprocessRunner"),
}


def made_by_the_factory() -> set[str]:
    """The classes appliance/host/factory.py instantiates, except the records it fills."""
    tree = ast.parse((ROOT / "appliance/host/factory.py").read_text())
    called = {node.func.id for node in ast.walk(tree)
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    classes = {name for name in called if name[:1].isupper()}
    return classes - {"ProbeHosts", "HostAdapters"}


def adapter_calls(tree: ast.AST, adapters: set[str]) -> list[str]:
    """Calls of ``adapters`` imported from appliance.host in ``tree`` (a name the model
    also uses, NfsClient or Hooks, counts only when it is the host layer's)."""
    from_host = {alias.asname or alias.name for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                     "appliance.host") for alias in node.names}
    return [node.func.id for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in adapters & from_host]


def test_the_real_adapters_are_made_by_the_factory_only() -> None:
    """One factory: the engine, the probes and the CLI take their real adapters from
    appliance/host/factory.py, so a setting reaches every adapter the same way."""
    adapters = made_by_the_factory()
    assert {"Zfs", "Lio", "Ganesha", "LocalFs", "Fio", "SystemdNfsUnits"} <= adapters
    outside = [(mod, name) for mod, path in modules().items()
               if not mod.startswith("appliance.host")
               for name in adapter_calls(ast.parse(path.read_text(), str(path)), adapters)
               if (mod, name) not in MADE_ELSEWHERE]
    assert outside == []
    # and the check sees one made elsewhere, and not a model's record of the same name
    made = "from appliance.host.zfs import Zfs\nzfs = Zfs(runner)\n"
    record = "from appliance.model import NfsClient\nc = NfsClient('*', 'rw')\n"
    assert adapter_calls(ast.parse(made), adapters) == ["Zfs"]
    assert adapter_calls(ast.parse(record), adapters) == []


def test_one_layout_for_the_use_cases() -> None:
    """A domain's use cases live in appliance/services/X.py, or, when the domain has
    modules of its own (a model, a store, a planner), in appliance/X/service.py: never
    both, so nobody looks for them in the wrong place (docs/architecture.md)."""
    services = {p.stem for p in (ROOT / "appliance/services").glob("*.py")} - {"__init__"}
    packages = {p.parent.name for p in (ROOT / "appliance").glob("*/service.py")}
    assert {"replication", "probes", "policies"} <= packages
    assert services & packages == set()
    for package in packages:  # each package's use cases are in its service.py
        assert not (ROOT / "appliance/services" / f"{package}.py").exists()
