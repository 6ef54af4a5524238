"""The type tests: what a user's checker sees of Harvest, and the package clean under both checkers.

``make lint`` runs this file (``pytest tests/typing/check_types.py``); its name keeps it out of
the main ``make test`` collection, which runs after lint. One mypy run (``--strict``) and one
pyright run each cover the package and every case file under ``cases/``:

- the package (``harvest_py/harvest``) has no error;
- a case file type-checks except on the lines marked
  ``# expect-error: mypy=<error code> pyright=<rule>``, where each checker reports an error
  with that code (and possibly others, which a checker may add as follow-ups); ``none`` for
  one checker marks a line that checker must pass (one only the other refuses, such as a rule
  of pyright's strict mode, which a case file turns on with ``# pyright: strict``).
  ``assert_type`` in the cases pins the inferred types (docs/workflows.md "Types").
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CASES = Path(__file__).resolve().parent / "cases"
BIN = Path(sys.executable).parent
MARK = re.compile(r"#\s*expect-error:\s*mypy=(?P<mypy>[\w-]+)\s+pyright=(?P<pyright>\w+)")
# mypy's lines: path:line: error: message  [code]
MYPY_LINE = re.compile(
    r"^(?P<path>[^:]+):(?P<line>\d+): error: (?P<message>.*?)(?:\s+\[(?P<code>[\w-]+)\])?$"
)
TIMEOUT = 600


@dataclass(frozen=True)
class Finding:
    path: str  # relative to the repository
    line: int
    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: [{self.code}] {self.message}"


def _case_files() -> list[Path]:
    return sorted(CASES.glob("*.py"))


def _expected() -> dict[tuple[str, int], dict[str, str]]:
    """(file, line) -> {"mypy": code, "pyright": rule} of every marked line."""
    out: dict[tuple[str, int], dict[str, str]] = {}
    for path in _case_files():
        for number, text in enumerate(path.read_text().splitlines(), 1):
            found = MARK.search(text)
            if found:
                out[(str(path.relative_to(ROOT)), number)] = found.groupdict()
    return out


def _start(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def outputs() -> dict[str, tuple[int, str, str]]:
    """Both checkers at once (one process each, side by side): name -> (exit code, stdout, stderr)."""
    cases = [str(p.relative_to(ROOT)) for p in _case_files()]
    running = {
        "mypy": _start(
            [str(BIN / "mypy"), "--no-error-summary", "--hide-error-context", "harvest_py/harvest", *cases]
        ),
        "pyright": _start([str(BIN / "pyright"), "--outputjson", "harvest_py/harvest", *cases]),
    }
    out = {}
    for name, process in running.items():
        stdout, stderr = process.communicate(timeout=TIMEOUT)
        out[name] = (process.returncode, stdout, stderr)
    return out


@pytest.fixture(scope="module")
def mypy(outputs: dict[str, tuple[int, str, str]]) -> list[Finding]:
    code, stdout, stderr = outputs["mypy"]
    if code not in (0, 1):
        pytest.fail(f"mypy did not run: {stderr or stdout}")
    findings = []
    for text in stdout.splitlines():
        found = MYPY_LINE.match(text)
        if found:
            findings.append(Finding(found["path"], int(found["line"]), found["code"] or "", found["message"]))
    return findings


@pytest.fixture(scope="module")
def pyright(outputs: dict[str, tuple[int, str, str]]) -> list[Finding]:
    _, stdout, stderr = outputs["pyright"]
    try:
        report = json.loads(stdout)
    except ValueError:
        pytest.fail(f"pyright did not run: {stderr or stdout}")
    return [
        Finding(
            os.path.relpath(d["file"], ROOT),
            d["range"]["start"]["line"] + 1,
            d.get("rule", ""),
            d["message"].splitlines()[0],
        )
        for d in report["generalDiagnostics"]
        if d["severity"] == "error"
    ]


def _in_package(findings: list[Finding]) -> Iterator[Finding]:
    return (f for f in findings if f.path.startswith("harvest_py/"))


def _cases_problems(findings: list[Finding], checker: str) -> list[str]:
    marked = _expected()
    assert marked, "no case file marks an expected error"
    # (a line marked ``none`` for this checker is one it must pass: any error there is reported)
    expected = {where: codes for where, codes in marked.items() if codes[checker] != "none"}
    got: dict[tuple[str, int], set[str]] = {}
    for f in findings:
        if f.path.startswith("tests/typing/"):
            got.setdefault((f.path, f.line), set()).add(f.code)
    problems = [
        f"{path}:{line}: expected {checker} error {codes[checker]}, "
        f"got {sorted(got.get((path, line), ())) or 'none'}"
        for (path, line), codes in sorted(expected.items())
        if codes[checker] not in got.get((path, line), set())
    ]
    problems += [
        str(f) for f in findings if f.path.startswith("tests/typing/") and (f.path, f.line) not in expected
    ]
    return problems


def test_mypy_strict_finds_no_error_in_the_package(mypy: list[Finding]) -> None:
    errors = [str(f) for f in _in_package(mypy)]
    assert not errors, f"{len(errors)} mypy --strict error(s):\n" + "\n".join(errors)


def test_pyright_finds_no_error_in_the_package(pyright: list[Finding]) -> None:
    errors = [str(f) for f in _in_package(pyright)]
    assert not errors, f"{len(errors)} pyright error(s):\n" + "\n".join(errors)


def test_mypy_sees_the_cases_as_marked(mypy: list[Finding]) -> None:
    problems = _cases_problems(mypy, "mypy")
    assert not problems, "\n".join(problems)


def test_pyright_sees_the_cases_as_marked(pyright: list[Finding]) -> None:
    problems = _cases_problems(pyright, "pyright")
    assert not problems, "\n".join(problems)
