"""Every ```python block of the docs parses, and every name it takes from `harvest` exists.

The pages: docs/**/*.md, README.md and examples/*/README* (tests/unit/docs_scan.py).

- A block parses with `ast` after its common indentation is removed (an excerpt of a
  workflow's body, indented as in the function, is fine) and top-level `await` is allowed.
- `from harvest[.x] import A, B`: the module imports and has A and B; `import harvest.x`: the
  module imports.
- `harvest.x.Y` (with `import harvest`) and `A.attr` (A imported from harvest and not bound
  again in the block): each attribute of the chain exists (a submodule is imported when the
  attribute is one); a call of a Harvest callable passes only keywords its signature has.
- `ctx.name` (in a block, or an inline span starting `ctx.`) is an attribute of a workflow's
  or an activity's context (WorkflowContext, ActivityContext and its local and process kinds).
- An inline span naming a Python object of the package (`harvest.SignalTimeout`,
  `harvest.errors.SchemaMismatch`, `harvest.testing.WorkflowEnvironment.sleep`: a capitalised
  name after `harvest.`; lowercase `harvest.x` is the SQL schema's) exists; not on the pages
  that record past branches (performance.md, benchmarks.md).

The skip marker: a block that is deliberately not Python on its own (a pseudo-signature, a
diff) is skipped only when the line right before its fence is

    <!-- docs-check: fragment (why) -->

(an HTML comment: it does not show on the rendered page). Keep them rare: say why in the
comment, and prefer making the block valid (add the `def ...: ...` a decorator needs).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import textwrap
from collections.abc import Iterator
from functools import cache
from types import ModuleType
from typing import Any, cast

import pytest
from docs_scan import Block, doc_pages, inline_spans, split_page, where

PYTHON = {"python", "py", "python3"}
MARKER = "<!-- docs-check: fragment"
MAX_SKIPS = 3  # keep skips rare: raising this needs a reason in the review


def python_blocks() -> list[Block]:
    return [b for page in doc_pages() for b in split_page(page)[0] if b.lang in PYTHON]


def _parse(block: Block) -> ast.Module:
    """The block's tree (SyntaxError when it does not parse)."""
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    return cast("ast.Module", compile(textwrap.dedent(block.text), str(block.path), "exec", flags=flags))


def _module(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _attribute(value: Any, name: str) -> tuple[bool, Any]:
    if hasattr(value, name):
        return True, getattr(value, name)
    if isinstance(value, ModuleType):  # a submodule not imported yet
        module = _module(f"{value.__name__}.{name}")
        if module is not None:
            return True, module
    return False, None


def _chain(node: ast.expr) -> list[str] | None:
    """`a.b.c` as ['a', 'b', 'c'], or None when the root is not a plain name."""
    names: list[str] = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(names)]


def _bound(tree: ast.Module) -> set[str]:
    """Names the block binds other than by importing (assignments, defs, parameters, targets)."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return bound


def problems(block: Block) -> Iterator[str]:
    try:
        tree = _parse(block)
    except SyntaxError as exc:
        yield f"does not parse: {exc.msg} (line {block.line + (exc.lineno or 1) - 1})"
        return
    roots: dict[str, Any] = {}  # a name of the block -> the harvest object it was imported as
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] != "harvest":
                continue
            module = _module(node.module)
            if module is None:
                yield f"`from {node.module} import ...`: no module {node.module}"
                continue
            for alias in node.names:
                found, value = _attribute(module, alias.name)
                if not found:
                    yield f"`from {node.module} import {alias.name}`: {node.module} has no {alias.name}"
                else:
                    roots[alias.asname or alias.name] = value
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != "harvest":
                    continue
                if _module(alias.name) is None:
                    yield f"`import {alias.name}`: no module {alias.name}"
                elif alias.asname:
                    roots[alias.asname] = _module(alias.name)
                else:
                    roots["harvest"] = _module("harvest")
    for name in _bound(tree):
        roots.pop(name, None)
    seen: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not isinstance(node.ctx, ast.Load):
            continue
        chain = _chain(node)
        if chain is None or chain[0] not in roots or ".".join(chain) in seen:
            continue
        seen.add(".".join(chain))
        value = roots[chain[0]]
        for i, name in enumerate(chain[1:], 1):
            found, value = _attribute(value, name)
            if not found:
                yield f"`{'.'.join(chain[: i + 1])}`: {'.'.join(chain[:i])} has no attribute {name}"
                break
            if not isinstance(value, ModuleType | type):
                break  # an instance's attributes (a constant's, a function's) are not checked
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield from _keywords(node, roots)
    if "ctx" not in roots:
        yield from _context_problems(tree)


def _resolve(chain: list[str], roots: dict[str, Any]) -> Any:
    value = roots[chain[0]]
    for name in chain[1:]:
        found, value = _attribute(value, name)
        if not found:
            return None
    return value


def _keywords(call: ast.Call, roots: dict[str, Any]) -> Iterator[str]:
    """A call of a harvest callable (`activity(...)`, `RetryPolicy.exponential(...)`) passes only
    keywords its signature has (unless it takes **kwargs)."""
    chain = _chain(call.func)
    if chain is None or chain[0] not in roots:
        return
    target = _resolve(chain, roots)
    if target is None or isinstance(target, ModuleType) or not callable(target):
        return
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return
    parameters = signature.parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return
    names = {p.name for p in parameters if p.kind is not inspect.Parameter.POSITIONAL_ONLY}
    for keyword in call.keywords:
        if keyword.arg is not None and keyword.arg not in names:
            have = ", ".join(sorted(names))
            yield f"`{'.'.join(chain)}({keyword.arg}=...)`: no parameter {keyword.arg} (has: {have})"


# `ctx.` names a page mentions on purpose although no context has them, each with its reason.
NOT_CONTEXT = {"signal_handler": "internals.md: says it is not part of the contract"}
HISTORY_PAGES = ("docs/performance.md", "docs/benchmarks.md")
OBJECT_SPAN = re.compile(r"^(harvest(?:\.[a-z_]\w*)*\.[A-Z]\w*)(?:\.(\w+))?(?:\(.*\))?$")
CTX = re.compile(r"\bctx\.(\w+)")


@cache
def context_attributes() -> frozenset[str]:
    """What `ctx` has in a workflow or an activity: the classes' names and what __init__ sets."""
    from harvest.runtime.context import WorkflowContext
    from harvest.runtime.local import LocalActivityContext
    from harvest.worker.activities import ActivityContext
    from harvest.worker.executors import ProcessActivityContext

    found: set[str] = set()
    for cls in (WorkflowContext, ActivityContext, LocalActivityContext, ProcessActivityContext):
        found |= set(dir(cls))
        for klass in cls.__mro__:
            found |= set(getattr(klass, "__slots__", ()) or ()) | set(getattr(klass, "__annotations__", {}))
            if klass.__module__.startswith("harvest"):
                found |= set(re.findall(r"self\.(\w+)\s*(?::[^=\n]*)?=", inspect.getsource(klass)))
    return frozenset(found)


def _context_problems(tree: ast.Module) -> Iterator[str]:
    seen: set[str] = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):
            continue
        if node.value.id == "ctx" and node.attr not in context_attributes() and node.attr not in seen:
            seen.add(node.attr)
            yield f"`ctx.{node.attr}`: no context has {node.attr}"


def span_problems(text: str) -> list[str]:
    """What is wrong with one inline code span ([] when nothing, or when it names no object)."""
    problems = [
        f"`ctx.{name}`: no context has {name}"
        for name in CTX.findall(text)
        if text.startswith("ctx.")
        if name not in context_attributes() and name not in NOT_CONTEXT
    ]
    match = OBJECT_SPAN.match(text)
    if match:
        chain = [*match.group(1).split("."), *([match.group(2)] if match.group(2) else [])]
        value: Any = importlib.import_module("harvest")
        for i, name in enumerate(chain[1:], 1):
            found, value = _attribute(value, name)
            if not found:
                problems.append(
                    f"`{'.'.join(chain[: i + 1])}`: {'.'.join(chain[:i])} has no attribute {name}"
                )
                break
    return problems


def test_inline_python_names_exist() -> None:
    failures, checked = [], 0
    for page in doc_pages():
        if where(page, 0).startswith(HISTORY_PAGES):
            continue
        for span in inline_spans(page, split_page(page)[1]):
            if span.text.startswith("ctx.") or OBJECT_SPAN.match(span.text):
                checked += 1
                failures += [f"{where(page, span.line)}: {p}" for p in span_problems(span.text)]
    assert checked >= 100, f"only {checked} inline python names found: has the scan broken?"
    assert not failures, "the docs name python objects that do not exist:\n" + "\n".join(failures)


def test_the_docs_have_python_blocks() -> None:
    blocks = python_blocks()
    assert len(blocks) >= 60, f"only {len(blocks)} python blocks found: has the scan broken?"


def test_every_python_block_parses_and_names_what_exists() -> None:
    failures = [
        f"{where(b.path, b.line)}: {problem}"
        for b in python_blocks()
        if not b.before.strip().startswith(MARKER)
        for problem in problems(b)
    ]
    assert not failures, "the docs' python blocks:\n" + "\n".join(failures)


def test_skips_are_rare() -> None:
    skipped = [where(b.path, b.line) for b in python_blocks() if b.before.strip().startswith(MARKER)]
    assert len(skipped) <= MAX_SKIPS, f"more python blocks skipped than {MAX_SKIPS}: {skipped}"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from harvest import App, RetryPolicy\nRetryPolicy.exponential(max_attempts=3)", []),
        ("    await ctx.sleep('1s')\n    x = 1", []),
        ("from harvest import Nope", ["`from harvest import Nope`: harvest has no Nope"]),
        ("from harvest.nope import X", ["`from harvest.nope import ...`: no module harvest.nope"]),
        ("import harvest\nharvest.testing.WorkflowEnvironment", []),
        (
            "import harvest\nharvest.testing.Nope",
            ["`harvest.testing.Nope`: harvest.testing has no attribute Nope"],
        ),
        (
            "from harvest import RetryPolicy\nRetryPolicy.nope()",
            ["`RetryPolicy.nope`: RetryPolicy has no attribute nope"],
        ),
        ("from harvest import App\nApp = object()\nApp.whatever", []),
        ("@activity(priority=5)\n", ["does not parse"]),
        (
            "from harvest import activity\n@activity(prio=5)\nasync def a(ctx): ...",
            ["`activity(prio=...)`: no parameter prio"],
        ),
        ("from harvest import RetryPolicy\nRetryPolicy.exponential(max_attempts=2, initial='1s')", []),
        ("async def w(ctx):\n    await ctx.sleep('1s')\n    ctx.nope()", ["`ctx.nope`: no context has nope"]),
    ],
)
def test_the_check_itself(source: str, expected: list[str]) -> None:
    from pathlib import Path

    found = list(problems(Block(Path("x.md"), "python", 1, source, "")))
    assert len(found) == len(expected)
    for problem, start in zip(found, expected, strict=True):
        assert problem.startswith(start), problem


def test_the_span_check_itself() -> None:
    assert span_problems("ctx.execute_activity(charge, order)") == []
    assert span_problems("ctx.heartbeat_details") == []
    assert span_problems("ctx.sleeep('1s')") == ["`ctx.sleeep`: no context has sleeep"]
    assert span_problems("harvest.errors.SchemaMismatch") == []
    assert span_problems("harvest.testing.WorkflowEnvironment.sleep") == []
    assert span_problems("harvest.Nope") == ["`harvest.Nope`: harvest has no attribute Nope"]
    assert span_problems("harvest.start_workflow(p_name)") == []  # the SQL function: not checked
