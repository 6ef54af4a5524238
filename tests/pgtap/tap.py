"""Run a pgTAP file through psycopg and read its TAP output.

The files in pgtap/ are plain SQL (no psql meta-commands), so they also run under
`psql -f` or pg_prove. Here each statement is sent on its own so an unexpected
error names its line; every row a statement returns is TAP text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pglast
import psycopg

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
            report.planned = int(match.group(1))
        elif match := TEST.match(line):
            not_ok, number, description = match.groups()
            directive = None
            if found := DIRECTIVE.search(description):
                directive = found.group(1).upper()
                description = description[:found.start()]
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


def statements(sql: str) -> list[tuple[int, str]]:
    """(line number, statement) pairs, split by the PostgreSQL parser."""
    result = []
    for piece in pglast.split(sql, with_parser=False, only_slices=True):
        result.append((sql.count("\n", 0, piece.start) + 1, sql[piece]))
    return result


def run_file(dsn: str, path: Path) -> TapReport:
    """Execute one pgTAP file in its own connection and parse what it printed."""
    sql = path.read_text()
    output: list[str] = []
    notices: list[str] = []
    error = None
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.add_notice_handler(lambda diag: notices.append(f"{diag.severity}: {diag.message_primary}"))
        for line, statement in statements(sql):
            try:
                cursor = conn.execute(statement, prepare=False)
            except psycopg.Error as exc:
                diag = exc.diag
                error = (f"{path.name} line {line}: {diag.sqlstate or ''} "
                         f"{(diag.message_primary or str(exc)).strip()}")
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
