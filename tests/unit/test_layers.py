"""The layers of harvest_py/harvest/, kept by a test over the import graph (docs/internals.md, Layers).

Every module lives in a layer folder; each layer imports only the layers it may (ALLOWED);
psycopg and pglast stay in the database layer; no two modules import each other, directly or
around a loop; and ``import harvest`` / ``import harvest.runtime`` load neither psycopg nor pglast.
The graph is read with ``ast`` (nothing is imported), so a violation anywhere is found, even in a
module no test imports.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
from parsed_source import parsed

PACKAGE = Path(__file__).resolve().parents[2] / "harvest_py" / "harvest"

# layer -> the layers its modules may import (itself included). Bottom to top:
#   core      errors, payloads and codecs, jsonb text, durations, idempotency keys (pure)
#   telemetry metrics, traces and structured logs: hooks that cost nothing unless configured
#   declare   what users declare: @workflow/@activity, App, RetryPolicy, @query/@update, flow control
#   runtime   deterministic execution: a history in, commands out (no database)
#   db        the only importer of psycopg: connections, SQL calls, channels, migrations
#   shard     beside db: the router (pure), a pool per shard, fan-out reads; never the client or worker
#   client    start, signal, query, update, result, over db (one database) or shard (pools)
#   worker    claim loop, dispatch, heartbeats, scanners, WorkerOptions
#   testing   the user-facing test kit (the replayer)
#   config    process configuration (harvest.toml, HARVEST_*, roles), beside the faces. It may
#             import the worker layer: the [worker] keys' types and bounds are WorkerOptions'.
#             Nothing below the faces imports it (the Worker takes a WorkerOptions instead).
#   cli       the `harvest` command (a face); it may start the web face (`harvest serve`)
#   web       the HTTP face: the management API, event streams, the dashboard
#   integrations  a face inside a web framework's process (FastAPI/Starlette lifespan, Django):
#             a client, a worker and the management API, through config and web
# "harvest" is the package's own __init__: the public names, resolved lazily from the layers.
BELOW_FACES = {"core", "telemetry", "declare", "runtime", "db", "shard", "client", "worker"}
ALLOWED: dict[str, set[str]] = {
    "core": {"core"},
    "telemetry": {"core", "telemetry"},
    "declare": {"core", "declare"},
    "runtime": {"core", "declare", "runtime"},
    "db": {"core", "telemetry", "db"},
    "shard": {"core", "telemetry", "db", "shard"},
    "client": {"core", "telemetry", "declare", "db", "shard", "client"},
    "worker": {"core", "telemetry", "declare", "runtime", "db", "shard", "worker"},
    "testing": BELOW_FACES | {"testing"},
    "config": BELOW_FACES | {"config"},
    "cli": BELOW_FACES | {"testing", "config", "cli", "web"},
    "web": BELOW_FACES | {"config", "web"},
    "integrations": BELOW_FACES | {"config", "web", "integrations"},
    "harvest": BELOW_FACES,
}
DRIVERS = ("psycopg", "psycopg_pool", "pglast")
# Modules outside db/ that still import psycopg itself (its exception classes, the pools they
# open). Layer rules above keep them off core, declare and runtime; this list may only shrink.
PSYCOPG_OUTSIDE_DB: set[str] = set()


@dataclass(frozen=True)
class Edge:
    source: str  # module name
    target: str  # module name (harvest.*) or a top-level package (psycopg, ...)
    line: int
    type_only: bool  # under `if TYPE_CHECKING:`: never executed

    def where(self) -> str:
        return f"{self.source} (line {self.line}) imports {self.target}"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(name: str, path: Path, known: set[str]) -> list[Edge]:
    """Every import statement of a module (module level, in functions, under TYPE_CHECKING)."""
    is_package = path.name == "__init__.py"
    edges: list[Edge] = []

    def target_of(module: str) -> str | None:
        if module.split(".")[0] in DRIVERS:
            return module.split(".")[0]
        return module if module.split(".")[0] == "harvest" else None

    def visit(node: ast.AST, type_only: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, type_only)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = target_of(alias.name)
                if target:
                    edges.append(Edge(name, target, node.lineno, type_only))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            target = target_of(module)
            if target:
                # `from harvest.core import payload` depends on the submodule, not the package
                subs = [f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in known]
                for t in subs or [target]:
                    edges.append(Edge(name, t, node.lineno, type_only))
        for child in ast.iter_child_nodes(node):
            visit(child, type_only)

    visit(parsed(path), False)
    return edges


@cache
def graph() -> tuple[Edge, ...]:
    modules = _modules()
    known = set(modules)
    return tuple(edge for name, path in modules.items() for edge in imports_of(name, path, known))


def layer_of(module: str) -> str:
    parts = module.split(".")
    return "harvest" if len(parts) == 1 else parts[1]


def strongly_connected(nodes: set[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative): the components of the directed graph."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


# -- the tests ---------------------------------------------------------------------------------


def test_every_module_lives_in_a_layer_folder() -> None:
    loose = [name for name in _modules() if name != "harvest" and layer_of(name) not in ALLOWED]
    loose += [
        name for name in _modules() if name.count(".") == 1 and (PACKAGE / f"{layer_of(name)}.py").exists()
    ]
    assert not loose, f"modules outside a layer folder (give each one a layer): {sorted(set(loose))}"


def test_each_layer_imports_only_the_layers_below_it() -> None:
    bad = [
        edge.where()
        + f": layer {layer_of(edge.source)} may import only {sorted(ALLOWED[layer_of(edge.source)])}"
        for edge in graph()
        if edge.target.startswith("harvest") and layer_of(edge.target) not in ALLOWED[layer_of(edge.source)]
    ]
    assert not bad, "\n".join(bad)


def test_psycopg_and_pglast_stay_in_the_database_layer() -> None:
    bad = []
    for edge in graph():
        if edge.target not in DRIVERS or layer_of(edge.source) == "db":
            continue
        if edge.target in ("psycopg", "psycopg_pool") and edge.source in PSYCOPG_OUTSIDE_DB:
            continue
        bad.append(edge.where() + ": only harvest.db imports the database drivers")
    bad += [
        edge.where() + ": pglast is the migrator's alone"
        for edge in graph()
        if edge.target == "pglast" and edge.source != "harvest.db.migrate"
    ]
    assert not bad, "\n".join(bad)


def test_the_pure_layers_import_no_database() -> None:
    # Spelled out although ALLOWED implies it: the runtime and the core run with no server.
    bad = [
        edge.where()
        for edge in graph()
        if layer_of(edge.source) in ("core", "declare", "runtime")
        and (edge.target in DRIVERS or layer_of(edge.target) == "db")
    ]
    assert not bad, "\n".join(bad)


def test_the_shard_router_imports_no_database() -> None:
    # The router is pure (placement, hashing, topology): only the pools reach the database.
    pure = {"harvest.shard", "harvest.shard.router"}
    bad = [
        edge.where()
        for edge in graph()
        if edge.source in pure
        and not edge.type_only
        and (edge.target in DRIVERS or layer_of(edge.target) == "db" or edge.target == "harvest.shard.pools")
        and not (edge.source == "harvest.shard" and edge.target == "harvest.shard.pools")
    ]
    assert not bad, "\n".join(bad)
    code = (
        "import sys, harvest.shard.router, harvest.shard\n"
        "loaded = [m for m in ('psycopg', 'psycopg_pool') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_no_import_cycles_between_modules() -> None:
    # Imports under TYPE_CHECKING never run, so they cannot make a cycle at import time.
    edges: dict[str, set[str]] = {}
    for edge in graph():
        if edge.target.startswith("harvest") and not edge.type_only and edge.target != edge.source:
            edges.setdefault(edge.source, set()).add(edge.target)
    cycles = [c for c in strongly_connected(set(_modules()), edges) if len(c) > 1]
    assert not cycles, f"modules importing each other (around a loop): {cycles}"


def test_the_cycle_finder_finds_a_cycle() -> None:
    # The check above must be able to fail.
    components = strongly_connected({"a", "b", "c", "d"}, {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})
    assert sorted(map(tuple, components)) == [("a", "b", "c"), ("d",)]


def test_import_harvest_and_its_runtime_load_no_database_driver() -> None:
    code = (
        "import sys, harvest, harvest.runtime, harvest.testing\n"
        "loaded = [m for m in ('psycopg', 'psycopg_pool', 'pglast') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
        "import harvest.client, harvest.worker\n"  # the migrator is imported, its parser is not
        "assert 'pglast' not in sys.modules\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr


def _type_checking_names(module: Path) -> set[str]:
    """The names a module's ``if TYPE_CHECKING:`` block imports: what type checkers see."""
    tree = ast.parse(module.read_text())
    return {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and _is_type_checking(node.test)
        for stmt in node.body
        if isinstance(stmt, ast.ImportFrom)
        for alias in stmt.names
    }


def test_the_public_names_resolve_lazily_and_stay_the_same() -> None:
    import harvest

    assert set(harvest.__all__) == {
        "DEFAULT_VERSION",
        "ActivityContext",
        "ActivityError",
        "ActivityFailure",
        "App",
        "AsyncClient",
        "AsyncWorkflowHandle",
        "Batch",
        "ChildHandle",
        "ChildPlacement",
        "ChildWorkflowError",
        "Client",
        "Concurrency",
        "ConditionTimeout",
        "Dag",
        "Debounce",
        "Duration",
        "ExternalWorkflow",
        "ExternalWorkflowError",
        "ExternalWorkflowNotFound",
        "ExternalWorkflowNotRunning",
        "ExternalWorkflowUnreachable",
        "HarvestError",
        "LocalActivityContext",
        "NonDeterminismError",
        "QueryFailed",
        "QueryTimeout",
        "Quota",
        "RateLimit",
        "RetryPolicy",
        "Saga",
        "Schedule",
        "SignalTimeout",
        "SkipTask",
        "StartOptions",
        "Throttle",
        "UpdateFailed",
        "UpdateHandle",
        "UpdateRejected",
        "Worker",
        "WorkflowAlreadyExists",
        "WorkflowCancelled",
        "WorkflowContext",
        "WorkflowFailed",
        "WorkflowHandle",
        "WorkflowNotRunning",
        "WorkflowSchedule",
        "WorkflowTerminated",
        "WorkflowTimedOut",
        "activity",
        "describe_handlers",
        "query",
        "update",
        "workflow",
    }
    for name in harvest.__all__:
        assert getattr(harvest, name) is not None, name
    # what type checkers see (the TYPE_CHECKING block) is what __getattr__ resolves
    typed = _type_checking_names(PACKAGE / "__init__.py")
    assert typed == set(harvest.__all__)
    with pytest.raises(AttributeError, match="no_such_name"):
        harvest.no_such_name  # noqa: B018


def test_every_public_class_and_function_says_what_it_is() -> None:
    """`help(harvest.Worker)` opened on nothing of its own (its class had no docstring), while
    docs/messages.md and operations.md build one in code: each public class and function of
    `harvest` and `harvest.testing` carries a docstring of its own."""
    import inspect

    import harvest
    import harvest.testing

    bare = [
        f"{module.__name__}.{name}"
        for module in (harvest, harvest.testing)
        for name in module.__all__
        if (inspect.isclass(obj := getattr(module, name)) or inspect.isfunction(obj))
        and not (obj.__dict__.get("__doc__") if inspect.isclass(obj) else obj.__doc__)
    ]
    assert bare == []


def test_the_test_kit_names_are_typed_as_they_resolve() -> None:
    """harvest.testing resolves lazily too; its TYPE_CHECKING block must name every public name,
    or a checker sees that name as Any and a user's tests go unchecked."""
    import harvest.testing

    for name in harvest.testing.__all__:
        assert getattr(harvest.testing, name) is not None, name
    typed = _type_checking_names(PACKAGE / "testing" / "__init__.py")
    assert typed == set(harvest.testing.__all__)


def test_the_client_names_are_typed_as_they_resolve() -> None:
    """A list page and a count answer a ``Page`` (children a ``Children``), which docs/workflows.md
    names: ``harvest.client`` exports both, typed as they resolve, so a user's annotation
    needs no private module path."""
    import harvest.client
    from harvest.client.client import Children, Page

    assert {"Page", "Children"} <= set(harvest.client.__all__)
    assert harvest.client.Page is Page
    assert harvest.client.Children is Children
    for name in harvest.client.__all__:
        assert getattr(harvest.client, name) is not None, name
    typed = _type_checking_names(PACKAGE / "client" / "__init__.py")
    assert typed == set(harvest.client.__all__)


def test_harvest_errors_is_the_public_home_of_the_exceptions() -> None:
    """The spec and the docs name `harvest.errors`; it is harvest.core.errors under that name."""
    code = (
        "import sys; from harvest.errors import NotFound, PayloadTooLarge; import harvest.errors as e; "
        "import harvest.core.errors as c; assert e is c and NotFound is c.NotFound; "
        "assert 'psycopg' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
