"""pgTAP under pytest: each pgtap/*.sql file runs in a fresh clone of the migrated
template (the session harness of tests/conftest.py), its TAP output is parsed, and
a failing file fails with its failing assertions and their diagnostics.

Before each file, pgtap/fixtures/common.sql (the helpers the files share) runs in
the same connection. The files are plain SQL (no psql meta-commands). A file may hold several
transactions (BEGIN; plan(N); ... finish(); ROLLBACK;), one per topic of its
functions/ file; their plans add up. Here each statement is sent on its own so an unexpected error names
the file, its line and first line and the server's error (text the scanner cannot split is sent as
one statement, never left out); every row a statement returns is TAP text.

Without the pgtap extension in the server the tests skip, except in CI (the CI
environment variable is set), where a missing pgTAP is a failure: run `make pgtap`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pglast
import psycopg
import pytest

PLAN = re.compile(r"^1\.\.(\d+)")
TEST = re.compile(r"^(not )?ok\b\s*(\d+)?\s*(?:-\s*)?(.*)$")
DIRECTIVE = re.compile(r"\s+#\s*(TODO|SKIP)\b.*$", re.IGNORECASE)


@dataclass
class Assertion:
    number: int
    ok: bool
    description: str
    directive: str | None = None
    diagnostics: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        # A failing TODO test is expected to fail; a SKIP never ran.
        return not self.ok and self.directive != "TODO"


@dataclass
class TapReport:
    name: str
    planned: int | None = None
    assertions: list[Assertion] = field(default_factory=list)
    diagnostics: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def failures(self) -> list[Assertion]:
        return [a for a in self.assertions if a.failed]

    @property
    def failed_count(self) -> int:
        """Failed assertions, plus one for an aborted file or a plan that was not met."""
        aborted = self.error is not None or self.planned != len(self.assertions)
        return len(self.failures) + (1 if aborted else 0)

    @property
    def problems(self) -> list[str]:
        """Everything that makes the file fail, as readable lines."""
        out = []
        if self.error:
            out.append(f"error: {self.error}")
        if self.planned is None:
            out.append("no plan: the file must call plan(N) (and finish())")
        elif self.planned != len(self.assertions) and not self.error:
            out.append(f"planned {self.planned} assertions but ran {len(self.assertions)}")
        for assertion in self.failures:
            out.append(f"not ok {assertion.number} - {assertion.description}")
            out.extend(f"    {line}" for line in assertion.diagnostics)
        return out


def parse_tap(name: str, lines: list[str]) -> TapReport:
    report = TapReport(name)
    for line in lines:
        if not line.strip():
            continue
        if match := PLAN.match(line):
            # A file may hold several transactions, each with its own plan: they add up.
            report.planned = (report.planned or 0) + int(match.group(1))
        elif match := TEST.match(line):
            not_ok, number, description = match.groups()
            directive = None
            if found := DIRECTIVE.search(description):
                directive = found.group(1).upper()
                description = description[: found.start()]
            number = int(number) if number else len(report.assertions) + 1
            report.assertions.append(Assertion(number, not_ok is None, description.strip(), directive))
        elif line.startswith("#"):
            text = line[2:] if line.startswith("# ") else line[1:]
            if report.assertions and not report.assertions[-1].ok:
                report.assertions[-1].diagnostics.append(text)
            else:
                report.diagnostics.append(text)
        else:
            report.diagnostics.append(line)
    return report


# What may stand between two statements: blanks, comments and semicolons.
_BETWEEN = re.compile(r"(?:\s+|;|--[^\n]*|/\*.*?\*/)*", re.DOTALL)


def statements(sql: str) -> list[tuple[int, str]]:
    """(line number, statement) pairs, split by the PostgreSQL scanner, the line that of the
    statement's first word (not of a comment above it). The scanner stops at what it cannot
    split (a parenthesis never closed, a quote never ended) and leaves the rest out: the rest
    is one statement then, sent as it is, so that the server's error names it (the file's
    remaining statements never ran, and were otherwise only a plan not met)."""
    try:
        spans = [(s.start, s.stop) for s in pglast.split(sql, with_parser=False, only_slices=True)]
    except pglast.parser.ParseError as exc:
        # (args: the message and where the token it could not read starts) The statements
        # before that token's are whole; the one holding it goes with the rest.
        at = exc.args[1] if len(exc.args) > 1 and isinstance(exc.args[1], int) else 0
        spans = [(s.start, s.stop) for s in pglast.split(sql[:at], with_parser=False, only_slices=True)]
        if spans and ";" not in sql[spans[-1][1] : at]:
            spans.pop()
    pieces = []
    end = 0
    for start, stop in [*spans, (len(sql), len(sql))]:
        left = _BETWEEN.match(sql, end, start).end()
        if left < start:  # text the scanner left out: one statement up to the next it split
            pieces.append((left, sql[left:start]))
        if start < stop:
            pieces.append((_BETWEEN.match(sql, start, stop).end(), sql[start:stop]))
        end = stop
    return [(sql.count("\n", 0, at) + 1, piece) for at, piece in pieces]


# Helpers every pgTAP file may use (pg_temp functions), run before each file in its connection.
FIXTURES = Path(__file__).resolve().parents[2] / "pgtap" / "fixtures" / "common.sql"


def run_file(dsn: str, path: Path, fixtures: Path | None = FIXTURES) -> TapReport:
    """Execute the shared fixtures, then one pgTAP file, in one connection of its own, and
    parse what the file printed."""
    sql = path.read_text()
    output: list[str] = []
    notices: list[str] = []
    error = None
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.add_notice_handler(lambda diag: notices.append(f"{diag.severity}: {diag.message_primary}"))
        if fixtures is not None:
            conn.execute(fixtures.read_text(), prepare=False)
        for line, statement in statements(sql):
            try:
                cursor = conn.execute(statement, prepare=False)
            except psycopg.Error as exc:
                diag = exc.diag
                # The file, the statement's line and first line, the server's error: a statement
                # that fails outside a test (it cannot be parsed, or it raises) stops the file.
                code = statement[_BETWEEN.match(statement).end() :].splitlines() or [""]
                error = (
                    f"{path.name} line {line}: {code[0].strip()}"
                    + (" ..." if len(code) > 1 else "")
                    + f"\n    {diag.sqlstate or ''} {(diag.message_primary or str(exc)).strip()}"
                )
                if diag.message_detail:
                    error += f"\n    DETAIL: {diag.message_detail}"
                if diag.context:
                    error += f"\n    CONTEXT: {diag.context.strip()}"
                break
            while True:
                if cursor.description:
                    for row in cursor.fetchall():
                        if row and row[0] is not None:
                            output.extend(str(row[0]).splitlines())
                if not cursor.nextset():
                    break
    report = parse_tap(path.name, output)
    report.error = error
    report.diagnostics.extend(notices)
    return report


REPORTS = pytest.StashKey[list[TapReport]]()
SERVER = pytest.StashKey[str]()


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


@pytest.fixture(scope="session")
def pgtap_available(pg_server, pytestconfig: pytest.Config) -> bool:
    with pg_server.admin() as conn:
        row = conn.execute(
            "SELECT default_version FROM pg_available_extensions WHERE name = 'pgtap'"
        ).fetchone()
        version = conn.execute("SHOW server_version").fetchone()[0]
    pytestconfig.stash[SERVER] = f"PostgreSQL {version}"
    if row is None:
        message = (
            f"the pgtap extension is not installed in the PostgreSQL {version} server under test: "
            "run `make pgtap`"
        )
        if in_ci():
            pytest.fail(message + " (CI is set, so a missing pgTAP is a failure, not a skip)", pytrace=False)
        pytest.skip(message)
    return True


@pytest.fixture
def pgtap_db(db: str, pgtap_available: bool) -> str:
    """A migrated database of its own with the pgtap extension created, and the test
    clock allowed (the pgTAP files move it with harvest.fake_now)."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pgtap")
        conn.execute("UPDATE harvest.engine_settings SET test_clock_allowed = true")
    return db


@pytest.fixture
def run_pgtap(request: pytest.FixtureRequest, pgtap_db: str) -> Callable[[Path], TapReport]:
    def run(path: Path) -> TapReport:
        report = run_file(pgtap_db, path)
        request.config.stash.setdefault(REPORTS, []).append(report)
        return report

    return run


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    reports = config.stash.get(REPORTS, [])
    if not reports:
        return
    terminalreporter.write_sep("-", "pgTAP")
    for report in reports:
        failed = report.failed_count
        terminalreporter.write_line(
            f"pgtap/{report.name}: {len(report.assertions)} assertions"
            f" (planned {report.planned}), {failed} failed"
        )
    total = sum(len(r.assertions) for r in reports)
    failed = sum(r.failed_count for r in reports)
    todo = sum(1 for r in reports for a in r.assertions if a.directive == "TODO" and not a.ok)
    server = config.stash.get(SERVER, "")
    terminalreporter.write_line(
        f"pgtap: {len(reports)} files, {total} assertions, {failed} failed"
        + (f", {todo} known bugs (TODO)" if todo else "")
        + (f" on {server}" if server else "")
    )
    for report in reports:
        for assertion in report.assertions:
            if assertion.directive == "TODO" and not assertion.ok:
                terminalreporter.write_line(
                    f"  TODO pgtap/{report.name} #{assertion.number}: {assertion.description}"
                )
