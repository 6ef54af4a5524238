"""What the CLI prints of data a user or a caller chose (a workflow id, a failure's message):
a newline in a table's cell started a row of its own, and an escape sequence or a carriage
return reached the operator's terminal raw (harvest/core/text.py, harvest/cli/output.py)."""

from __future__ import annotations

from harvest.cli.output import mapping, table
from harvest.core.text import escape_controls

HOSTILE = "order-1\nexec-2  COMPLETED\r\x1b[2J\x9b"


def test_a_table_keeps_one_line_per_row_and_no_control_reaches_the_terminal() -> None:
    rows = [{"workflow_id": HOSTILE, "status": "FAILED"}, {"workflow_id": "plain\tid", "status": "RUNNING"}]
    printed = table(rows, ["workflow_id", "status"])
    lines = printed.splitlines()
    assert len(lines) == 3, printed  # the header and one line per row
    assert lines[1].startswith("order-1\\nexec-2  COMPLETED\\r\\x1b[2J\\x9b  FAILED"), lines
    assert "plain\tid" in lines[2]  # a tab is only whitespace
    assert not any(c in printed for c in "\r\x1b\x9b")
    shown = mapping({"error": HOSTILE})
    assert len(shown.splitlines()) == 1 and "\x1b" not in shown, shown


def test_escape_controls_keeps_newlines_where_asked_and_leaves_the_usual_text_alone() -> None:
    assert escape_controls(HOSTILE) == "order-1\nexec-2  COMPLETED\\r\\x1b[2J\\x9b"
    assert escape_controls("\x00\x7f", newlines=False) == "\\x00\\x7f"
    text = "a plain line, é and 中文 too"
    assert escape_controls(text) is text
