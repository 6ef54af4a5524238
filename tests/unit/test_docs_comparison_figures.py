"""docs/comparison.md's "Measured" table quotes the latest full `make bench` of docs/benchmarks.md.

Users choose Harvest on that table, so it names the run benchmarks.md's "Latest results" opens
with, and its canonical row (Harvest's and DBOS direct start's workflows/s and the ratio) is
that run's table's row.
"""

from __future__ import annotations

import re

from docs_scan import ROOT

DAY = r"(\d{4}-\d{2}-\d{2})"


def _latest_run() -> tuple[str, str]:
    """(date, HH:MM) of the run benchmarks.md's "Latest results" opens with."""
    text = (ROOT / "docs/benchmarks.md").read_text()
    latest = text.split("## Latest results", 1)[1]
    found = re.search(r"The latest full `make bench`, at (\d{2}:\d{2}) UTC on " + DAY, latest)
    assert found, "docs/benchmarks.md: Latest results no longer opens with its run's time"
    return found.group(2), found.group(1)


def _row(text: str, first_cell: str) -> list[str]:
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == first_cell:
            return cells
    raise AssertionError(f"no table row starting {first_cell!r}")


def test_comparison_names_the_latest_full_run() -> None:
    day, time = _latest_run()
    text = (ROOT / "docs/comparison.md").read_text()
    found = re.search(
        r"The last full run, with nothing\s+else on the machine \(" + DAY + r" (\d{2}:\d{2}) UTC", text
    )
    assert found, "docs/comparison.md: the Measured section no longer names its run"
    assert (found.group(1), found.group(2)) == (day, time), (
        f"docs/comparison.md quotes the run of {found.group(1)} {found.group(2)}; docs/benchmarks.md's "
        f"latest is {day} {time}: bring the Measured table to it"
    )


def test_comparison_canonical_row_is_the_latest_runs() -> None:
    bench = (ROOT / "docs/benchmarks.md").read_text().split("## Latest results", 1)[1]
    harvest, dbos = _row(bench, "Harvest"), _row(bench, "DBOS direct start")
    page = (ROOT / "docs/comparison.md").read_text()
    row = _row(page, "canonical workflow (three activities in sequence), workflows/s")
    assert row[1:] == [harvest[1], f"DBOS, direct start: {dbos[1]}", dbos[-1]], (
        f"docs/comparison.md's canonical row {row[1:]} is not the latest run's "
        f"(Harvest {harvest[1]}, DBOS direct {dbos[1]}, {dbos[-1]})"
    )
