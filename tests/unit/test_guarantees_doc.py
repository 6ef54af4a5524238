"""docs/guarantees.md names the test behind each promise: every path and test it names exists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = re.compile(r"`(tests/[\w/]+\.py)(?:::(\w+))?`|`::(\w+)`")


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_")
    }


def test_every_test_the_guarantees_page_names_exists() -> None:
    text = (ROOT / "docs" / "guarantees.md").read_text()
    missing: list[str] = []
    checked = 0
    for line in text.splitlines():
        current: Path | None = None  # a bare `::name` refers to the last file named on its line
        for match in REFERENCE.finditer(line):
            path, name, bare = match.groups()
            if path is not None:
                current = ROOT / path
                if not current.exists():
                    missing.append(path)
                    continue
            if name is None:
                name = bare
            if name is None or current is None:
                continue
            checked += 1
            if name not in _test_names(current):
                missing.append(f"{current.relative_to(ROOT)}::{name}")
    assert checked >= 30, f"only {checked} test references parsed: has the page's format changed?"
    assert not missing, f"docs/guarantees.md names tests that do not exist: {missing}"
