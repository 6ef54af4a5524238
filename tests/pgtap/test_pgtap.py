"""One test per pgtap/*.sql file: every SQL function's contract, checked in SQL."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harvest.db.paths import functions_dir, repo_root

PGTAP_DIR = repo_root() / "pgtap"
FILES = sorted(PGTAP_DIR.glob("*.sql"))
FUNCTION = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+harvest\.(\w+)", re.IGNORECASE)


@pytest.mark.parametrize("functions_file", sorted(functions_dir().glob("*.sql")), ids=lambda p: p.stem)
def test_every_function_has_a_pgtap_test(functions_file: Path) -> None:
    """functions/X.sql is tested by pgtap/X.sql, which calls every function X defines."""
    tests = PGTAP_DIR / functions_file.name
    assert tests.is_file(), f"functions/{functions_file.name} has no pgtap/{functions_file.name}"
    text = tests.read_text()
    untested = [name for name in FUNCTION.findall(functions_file.read_text())
                if not re.search(rf"\bharvest\.{name}\b|'{name}'", text)]
    assert not untested, (f"pgtap/{functions_file.name} never mentions "
                          + ", ".join(f"harvest.{name}" for name in untested))


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_pgtap_file(path: Path, run_pgtap) -> None:
    report = run_pgtap(path)
    problems = report.problems
    if problems:
        pytest.fail(f"pgtap/{path.name}: {len(report.failures)} of {len(report.assertions)} assertions "
                    "failed\n" + "\n".join(problems), pytrace=False)
