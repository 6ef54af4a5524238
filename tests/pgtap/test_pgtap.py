"""One test per pgtap/*.sql file: every SQL function's contract, checked in SQL."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from harvest.db.paths import functions_dir, repo_root

PGTAP_DIR = repo_root() / "pgtap"
FILES = sorted(PGTAP_DIR.glob("*.sql"))
FUNCTION = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+harvest\.(\w+)", re.IGNORECASE)
HELPER = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+pg_temp\.(\w+)", re.IGNORECASE)


@pytest.mark.parametrize("functions_file", sorted(functions_dir().glob("*.sql")), ids=lambda p: p.stem)
def test_every_function_has_a_pgtap_test(functions_file: Path) -> None:
    """functions/X.sql is tested by pgtap/X.sql, which calls every function X defines."""
    tests = PGTAP_DIR / functions_file.name
    assert tests.is_file(), f"functions/{functions_file.name} has no pgtap/{functions_file.name}"
    text = tests.read_text()
    untested = [
        name
        for name in FUNCTION.findall(functions_file.read_text())
        if not re.search(rf"\bharvest\.{name}\b|'{name}'", text)
    ]
    assert not untested, f"pgtap/{functions_file.name} never mentions " + ", ".join(
        f"harvest.{name}" for name in untested
    )


def test_no_file_recreates_a_shared_fixture() -> None:
    """The helpers of pgtap/fixtures/common.sql exist once: a file that created its own copy
    would fail at run time (the name exists), and this names it before that."""
    shared = set(HELPER.findall((PGTAP_DIR / "fixtures" / "common.sql").read_text()))
    assert shared, "pgtap/fixtures/common.sql defines no helper"
    copies = {p.name: sorted(shared & set(HELPER.findall(p.read_text()))) for p in FILES}
    assert not {k: v for k, v in copies.items() if v}, copies


def _runner():
    """The runner (tests/pgtap/conftest.py), loaded from its file: "conftest" names more than one
    module here."""
    if (loaded := sys.modules.get("pgtap_runner")) is not None:
        return loaded
    spec = importlib.util.spec_from_file_location("pgtap_runner", Path(__file__).with_name("conftest.py"))
    runner = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = runner  # its dataclasses look their module up
    spec.loader.exec_module(runner)
    return runner


def test_the_tap_parser_adds_up_the_plans_of_a_files_transactions() -> None:
    parse_tap = _runner().parse_tap
    report = parse_tap("x.sql", ["1..2", "ok 1 - a", "ok 2 - b", "1..1", "not ok 1 - c", "# why"])
    assert report.planned == 3 and len(report.assertions) == 3
    assert [a.description for a in report.failures] == ["c"] and report.failures[0].diagnostics == ["why"]
    assert parse_tap("y.sql", ["1..2", "ok 1 - a", "1..1", "ok 1 - c"]).failed_count == 1  # one short


# A test, then a statement the scanner cannot split (a parenthesis never closed), then another
# test: the scanner stopped there and left the rest out, so the file was only "planned 2
# assertions but ran 1".
UNCLOSED = """BEGIN;
SELECT plan(2);
SELECT ok(true, 'one');
-- the next statement never closes its parenthesis
SELECT ok(true, 'two' ;
SELECT ok(true, 'three');
SELECT * FROM finish();
ROLLBACK;
"""


def test_the_runner_sends_what_the_scanner_cannot_split() -> None:
    """No text of a file is left out: the statements before the one the scanner stops at, each
    at the line of its first word; from that one on, one statement."""
    split = _runner().statements
    assert [line for line, _ in split(UNCLOSED)] == [1, 2, 3, 5]
    assert split(UNCLOSED)[-1][1].startswith("SELECT ok(true, 'two' ;\nSELECT ok(true, 'three');")
    # A quote never ended: the scanner raises; the statements before it are still split.
    assert split("SELECT 1;\nSELECT $$ never ended;\nSELECT 3;") == [
        (1, "SELECT 1"),
        (2, "SELECT $$ never ended;\nSELECT 3;"),
    ]
    assert split("-- a\nSELECT 1; /* b */ SELECT 2;\n-- c\n") == [
        (2, "-- a\nSELECT 1"),
        (2, "/* b */ SELECT 2"),
    ]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (UNCLOSED, "bad.sql line 5: SELECT ok(true, 'two' ; ...\n    42601 syntax error"),
        (
            "BEGIN;\nSELECT plan(1);\nSELECT ok(1 / 0 = 1, 'raises');\nSELECT * FROM finish();\nROLLBACK;\n",
            "bad.sql line 3: SELECT ok(1 / 0 = 1, 'raises')\n    22012 division by zero",
        ),
    ],
    ids=["unparsable", "raises"],
)
def test_a_statement_that_fails_outside_a_test_is_named(
    text: str, said: str, pgtap_db: str, tmp_path: Path
) -> None:
    """A statement that cannot be parsed, or raises outside a test, stops the file: its report
    names the file, the statement's line and first line, and the server's error."""
    bad = tmp_path / "bad.sql"
    bad.write_text(text)
    report = _runner().run_file(pgtap_db, bad)
    assert report.problems[0].startswith(f"error: {said}"), report.problems


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_pgtap_file(path: Path, run_pgtap) -> None:
    report = run_pgtap(path)
    problems = report.problems
    if problems:
        pytest.fail(
            f"pgtap/{path.name}: {len(report.failures)} of {len(report.assertions)} assertions "
            "failed\n" + "\n".join(problems),
            pytrace=False,
        )
