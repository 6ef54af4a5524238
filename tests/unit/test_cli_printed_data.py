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


def test_an_events_tail_line_shows_an_encrypted_payload_by_what_it_is_on_one_line() -> None:
    """`harvest events tail` printed an encrypted envelope's bytes where every other CLI view
    shows ``<encrypted (key k1)>``, and a workflow id's newline split its line; --output json
    keeps the envelope (a reader holding the key decodes it)."""
    from datetime import UTC, datetime

    from harvest.cli.events import _line

    envelope = {"_harvest_codec": ["aesgcm:k1"], "data": "c2VjcmV0LWJ5dGVz"}
    event = {
        "global_id": 7,
        "created_at": datetime(2026, 12, 6, tzinfo=UTC),
        "workflow_name": "checkout",
        "workflow_id": "order-1\n8  2026-12-06T00:00:00.000+00:00  forged",
        "event_id": 3,
        "event_type": "ActivityCompleted",
        "event_data": {"seq": 1, "result": envelope},
        "execution_id": "e1",
    }
    line = _line(event, "text", None)
    assert len(line.splitlines()) == 1, line
    assert '"result":"<encrypted (key k1)>"' in line and "c2VjcmV0" not in line, line
    assert "order-1\\n8" in line, line
    assert "c2VjcmV0-bytes" not in _line(event, "json", None) and "c2VjcmV0LWJ5dGVz" in _line(
        event, "json", None
    )


def test_a_command_s_text_view_prints_no_control_character_of_the_data(capsys) -> None:
    """A text view composes lines of its own around free text (a pause's reason, a failure's
    message in `harvest workflow stack`): an escape sequence in it reached the terminal raw."""
    from harvest.cli.output import emit

    emit({"reason": "ops\x1b[2J\rdone"}, "text", lambda d: f"paused: {d['reason']}\nnext line")
    printed = capsys.readouterr().out
    assert printed == "paused: ops\\x1b[2J\\rdone\nnext line\n", printed
    emit({"reason": "ops\x1b"}, "json", lambda d: "unused")
    assert "\\u001b" in capsys.readouterr().out  # JSON escapes it as JSON does
