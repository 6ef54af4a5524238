"""The database's rule for a decision's own events (functions/decide.sql, ``_apply_decision``'s
``v_own``) names the commands a worker's run records itself (``harvest.runtime.run._SELF_RECORDING``):
decided_through moves past a decision's events only when the worker took them as read
(docs/internals.md, "Deciding ahead"). A kind on one side only would still be correct (the worker
reads its history again, or the claim carries events the worker skips) but would quietly undo the
fan-out row's twelfth cut, so the two lists are kept equal here. No database: read from the file."""

from __future__ import annotations

import re
from pathlib import Path

from harvest.runtime.run import _SELF_RECORDING

DECIDE_SQL = Path(__file__).resolve().parents[2] / "functions" / "decide.sql"


def test_the_database_takes_as_read_exactly_the_commands_a_run_records_itself() -> None:
    rule = re.search(r"IF v_type NOT IN \(([^)]*)\) THEN\s+v_own := false;", DECIDE_SQL.read_text())
    assert rule is not None, "_apply_decision's v_own rule was not found in functions/decide.sql"
    kinds = {kind.strip().strip("'") for kind in rule.group(1).split(",")}
    assert kinds == set(_SELF_RECORDING)
