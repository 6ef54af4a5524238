"""A function's header comment (CONTRIBUTING.md "Adding a SQL function") sits directly above
its own CREATE FUNCTION, so reading a functions/ file top to bottom pairs each "why" with its
function: pairs that once drifted apart are held here."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def header(file: str, name: str) -> str:
    """The comment lines directly above ``CREATE ... FUNCTION harvest.<name>(`` in functions/<file>."""
    lines = (REPO / "functions" / file).read_text().splitlines()
    start = re.compile(rf"CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+harvest\.{name}\s*\(")
    (at,) = [i for i, line in enumerate(lines) if start.match(line)]
    above: list[str] = []
    while at > 0 and lines[at - 1].startswith("--"):
        at -= 1
        above.insert(0, lines[at].removeprefix("--").strip())
    return " ".join(above)


def test_each_batch_functions_comment_is_above_its_own_function() -> None:
    act = header("executions.sql", "_act_on_workflows")
    assert act.startswith("Cancel, terminate, signal, pause or resume the live runs a filter selects"), act
    still = header("executions.sql", "_still_selected")
    assert still.startswith("Whether the run p_execution_id, locked by the caller"), still
    assert "Cancel, terminate" not in still
    pause = header("executions.sql", "pause_workflows")
    assert pause.startswith("Pause or resume the live runs a filter selects"), pause
