"""Rank test files and tests by the CPU they cost, from HARVEST_TEST_CPU_REPORT's JSON lines.

    HARVEST_TEST_CPU_REPORT=/tmp/cpu.jsonl .venv/bin/pytest -q -p no:cacheprovider tests/web
    .venv/bin/python scripts/cpu_report.py /tmp/cpu.jsonl [--top 25]

Each line is one test (tests/conftest.py, CpuReport): ``py`` (the pytest process), ``children``
(the processes the test started), ``server`` (the embedded PostgreSQL servers), their sum
``cpu``, and apart from it ``pool`` (the ClonePool's clones and drops made while the test ran,
for the tests around it). Several files (or one several pytest processes appended to) add up.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

PARTS = ("cpu", "py", "children", "server", "pool", "wall")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("files", nargs="+", type=Path, help="JSON lines written by HARVEST_TEST_CPU_REPORT")
    parser.add_argument("--top", type=int, default=25, help="rows in each table (default 25)")
    args = parser.parse_args()

    tests: list[dict[str, object]] = []
    sessions: list[dict[str, object]] = []
    for path in args.files:
        for text in path.read_text().splitlines():
            if text.strip():
                line = json.loads(text)
                (sessions if line.get("session") else tests).append(line)

    files: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(("tests", *PARTS), 0.0))
    for test in tests:
        row = files[str(test["file"])]
        row["tests"] += 1
        for part in PARTS:
            row[part] += float(test[part])  # type: ignore[arg-type]
    total = {part: sum(row[part] for row in files.values()) for part in ("tests", *PARTS)}

    print(f"{int(total['tests'])} tests in {len(files)} files, {len(sessions)} pytest processes")
    print(
        f"in tests: cpu {total['cpu']:.0f} s (py {total['py']:.0f}, children {total['children']:.0f}, "
        f"server {total['server']:.0f}), pool {total['pool']:.0f} s"
    )
    if sessions:
        whole = {part: sum(float(s[part]) for s in sessions) for part in PARTS}  # type: ignore[arg-type]
        outside = whole["cpu"] + whole["pool"] - total["cpu"] - total["pool"]
        print(
            f"whole processes: cpu {whole['cpu']:.0f} s (py {whole['py']:.0f}, "
            f"children {whole['children']:.0f}, server {whole['server']:.0f}), "
            f"pool {whole['pool']:.0f} s; {outside:.0f} s outside any test (collection, session teardown)"
        )

    header = f"{'cpu':>7} {'%':>5} {'py':>6} {'child':>6} {'server':>6} {'pool':>6} {'wall':>6}"
    print(f"\nfiles by CPU (top {args.top})\n{header} {'tests':>5}  file")
    ranked = sorted(files.items(), key=lambda item: -item[1]["cpu"])
    for name, row in ranked[: args.top]:
        print(f"{_cells(row, total['cpu'])} {int(row['tests']):>5}  {name}")

    print(f"\ntests by CPU (top {args.top})\n{header}  test")
    for test in sorted(tests, key=lambda t: -float(t["cpu"]))[: args.top]:  # type: ignore[arg-type]
        row = {part: float(test[part]) for part in PARTS}  # type: ignore[arg-type]
        print(f"{_cells(row, total['cpu'])}  {test['test']}")


def _cells(row: dict[str, float], total: float) -> str:
    share = 100 * row["cpu"] / total if total else 0.0
    return (
        f"{row['cpu']:7.1f} {share:5.1f} {row['py']:6.1f} {row['children']:6.1f} "
        f"{row['server']:6.1f} {row['pool']:6.1f} {row['wall']:6.1f}"
    )


if __name__ == "__main__":
    main()
