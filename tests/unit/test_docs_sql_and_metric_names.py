"""The SQL functions and the Prometheus metrics the docs name exist, with the names they give.

The pages: docs/**/*.md, README.md and examples/*/README* (tests/unit/docs_scan.py), less the
pages that record past branches (performance.md, benchmarks.md).

- A call `harvest.name(...)` anywhere on a page (a SQL block, a Python block's SQL string, an
  inline span) that is not a table with its columns (`harvest.events(event_id, ...)`) nor a
  function of the Python package (`harvest.describe_handlers(app, ...)`) names a function of
  the schema: one `CREATE [OR REPLACE] FUNCTION harvest.name`
  of functions/*.sql or migrations/*.sql. Each named argument it passes (`p_x => ...`) is a
  parameter of one of that function's definitions in functions/*.sql (the SQL API as installed
  now: a parameter a migration dropped is not there).
- A metric the docs name (`harvest_..._total`, `_seconds`, `_bucket`, or a name in the first
  column of observability.md's tables) is a name the package registers or exports: it occurs in
  harvest_py's source, or starts with a prefix the source builds names from (an f-string).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from docs_scan import ROOT, doc_pages, where

HISTORY_PAGES = ("performance.md", "benchmarks.md")
CALL = re.compile(r"(?<![\w.])harvest\.([a-z_][a-z0-9_]*)\(")
NAMED = re.compile(r"\b(p_[a-z0-9_]+)\s*=>")
DEFINITION = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+harvest\.([a-z_][a-z0-9_]*)\s*\(", re.I)
METRIC = re.compile(r"`(harvest_[a-z0-9_]+?)(?:\{[^`]*\})?`")
METRIC_SUFFIX = ("_total", "_seconds", "_bucket")
TABLE_ROW = re.compile(r"^\| `(harvest_[a-z0-9_]+)`", re.M)


def pages() -> list[Path]:
    return [p for p in doc_pages() if p.name not in HISTORY_PAGES]


TABLE = re.compile(r"CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?harvest\.([a-z_][a-z0-9_]*)", re.I)


@cache
def not_functions() -> frozenset[str]:
    """`harvest.x(` that is no SQL call: a table with its columns (`harvest.events(...)`), or the
    Python package's own function (`harvest.describe_handlers(app, ...)`)."""
    import harvest

    sql = [*(ROOT / "sql").glob("*.sql"), *(ROOT / "migrations").glob("*.sql")]
    tables = {m.group(1) for path in sql for m in TABLE.finditer(path.read_text())}
    return frozenset(tables | {name for name in harvest.__all__ if name.islower()})


@cache
def sql_functions() -> tuple[frozenset[str], dict[str, frozenset[str]]]:
    """Every function name the schema ever defined, and the parameters each has now."""
    names: set[str] = set()
    params: dict[str, set[str]] = {}
    for path in sorted((ROOT / "migrations").glob("*.sql")):
        names |= {m.group(1) for m in DEFINITION.finditer(path.read_text())}
    for path in sorted((ROOT / "functions").glob("*.sql")):
        text = path.read_text()
        for m in DEFINITION.finditer(text):
            names.add(m.group(1))
            declared = re.sub(r"--[^\n]*", "", _arguments(text, m.end()))
            params.setdefault(m.group(1), set()).update(re.findall(r"\b(p_[a-z0-9_]+)\b", declared))
    return frozenset(names), {k: frozenset(v) for k, v in params.items()}


def _arguments(text: str, start: int) -> str:
    """The text of a call's arguments: from `start` (after its `(`) to the matching `)`."""
    depth, i = 1, start
    while i < len(text) and depth:
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        i += 1
    return text[start:i]


def sql_problems(text: str) -> list[tuple[int, str]]:
    """(offset, problem) for each call of a function the schema lacks or a named argument it
    does not take."""
    names, params = sql_functions()
    found = []
    for m in CALL.finditer(text):
        name = m.group(1)
        if name in not_functions() and name not in names:
            continue
        if name not in names:
            problem = f"`harvest.{name}(...)`: no function harvest.{name} in functions/ or migrations/"
            found.append((m.start(), problem))
            continue
        for arg in NAMED.findall(_arguments(text, m.end())):
            if arg not in params.get(name, frozenset()):
                have = ", ".join(sorted(params.get(name, ()))) or "none"
                found.append((m.start(), f"`harvest.{name}({arg} => ...)`: no parameter {arg} (has: {have})"))
    return found


@cache
def package_source() -> str:
    return "\n".join(p.read_text() for p in sorted((ROOT / "harvest_py" / "harvest").rglob("*.py")))


@cache
def metric_prefixes() -> frozenset[str]:
    """Prefixes of metric names the package builds (`f"harvest_queue_scaling_{key}"`)."""
    return frozenset(re.findall(r"f[\"'](harvest_[a-z0-9_]*)\{", package_source()))


@cache
def package_words() -> frozenset[str]:
    """Every whole word of the package's source (a search of the source per name the docs give
    took 6 to 26 s of the suite)."""
    return frozenset(re.findall(r"\w+", package_source()))


def metric_exists(name: str) -> bool:
    base = re.sub(r"_(total|bucket|sum|count)$", "", name)
    if name in package_words() or base in package_words():
        return True
    return any(name.startswith(prefix) for prefix in metric_prefixes())


def named_metrics(page: Path) -> list[tuple[int, str]]:
    text = page.read_text()
    found = [(m.start(), m.group(1)) for m in METRIC.finditer(text) if m.group(1).endswith(METRIC_SUFFIX)]
    if page.name == "observability.md":
        found += [(m.start(), m.group(1)) for m in TABLE_ROW.finditer(text)]
    return found


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def test_the_docs_name_sql_functions_and_metrics() -> None:
    calls = sum(len(CALL.findall(p.read_text())) for p in pages())
    metrics = sum(len(named_metrics(p)) for p in pages())
    assert calls >= 100, f"only {calls} harvest.x(...) calls found: has the scan broken?"
    assert metrics >= 50, f"only {metrics} metric names found: has the scan broken?"


def test_every_sql_function_and_named_argument_the_docs_name_exists() -> None:
    failures = []
    for page in pages():
        text = page.read_text()
        failures += [f"{where(page, _line(text, at))}: {problem}" for at, problem in sql_problems(text)]
    assert not failures, "the docs name SQL that does not exist:\n" + "\n".join(failures)


def test_every_metric_the_docs_name_exists() -> None:
    failures = []
    for page in pages():
        text = page.read_text()
        failures += [
            f"{where(page, _line(text, at))}: `{name}`: no such metric in harvest_py"
            for at, name in named_metrics(page)
            if not metric_exists(name)
        ]
    assert not failures, "the docs name metrics that do not exist:\n" + "\n".join(failures)


def test_the_checks_themselves() -> None:
    assert sql_problems("SELECT harvest.cancel_workflow('id', 'reason');") == []
    assert sql_problems("harvest.start_workflow('wf', p_workflow_id => 'x', p_queue => 'q')") == []
    [(_, problem)] = sql_problems("SELECT harvest.no_such_thing(1)")
    assert problem.startswith("`harvest.no_such_thing(...)`: no function")
    [(_, problem)] = sql_problems("harvest.start_workflow('wf', p_parent_id => 'x')")  # dropped by 0080
    assert problem.startswith("`harvest.start_workflow(p_parent_id => ...)`: no parameter p_parent_id")
    assert sql_problems("harvest.toml and harvest.errors.NotFound") == []  # not calls
    assert sql_problems("harvest.events(event_id, execution_id)") == []  # a table and its columns
    assert metric_exists("harvest_queue_dispatched_total")
    assert metric_exists("harvest_queue_scaling_backlog")  # an f-string prefix
    assert not metric_exists("harvest_queue_dispatched_typo_total")
