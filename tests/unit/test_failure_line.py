"""One wording of a stored failure (harvest.core.errors.failure_line) wherever one is shown.

The CLI's history and stack, the dashboard's history and `harvest dlq list` each formatted
``error_type: message`` themselves and said "None" for a part the failure lacks; the client's
hint (why_stuck) left it out. They now share the client's wording."""

from __future__ import annotations

from harvest.cli.workflow import _summary as cli_summary
from harvest.core.errors import failure_line
from harvest.web.ui.views import _summary as page_summary


def test_failure_line_leaves_out_a_missing_part() -> None:
    assert failure_line({"error_type": "ValueError", "message": "bad input"}) == "ValueError: bad input"
    assert failure_line({"error_type": "Timeout", "message": None}) == "Timeout"
    assert failure_line({"message": "lost"}) == "lost"
    assert failure_line("not a mapping") == "not a mapping"


def test_histories_word_a_failure_as_the_client_does() -> None:
    failure = {"error_type": "Timeout", "non_retryable": False}  # (no message)
    assert cli_summary({"event_data": {"seq": 3, "failure": failure}}) == "seq=3 Timeout"
    assert page_summary("ActivityFailed", {"seq": 3, "failure": failure}) == "seq=3 Timeout"


def test_a_failure_message_is_made_recordable() -> None:
    """PostgreSQL's jsonb refuses U+0000 and lone surrogates: a failure's message holding one
    is recorded with it escaped, whether an activity raised it or workflow code did."""
    from harvest.core.errors import ActivityFailure, recordable
    from harvest.runtime.commands import failure_json

    assert recordable("bad\x00header \ud800 é") == "bad\\x00header \\ud800 é"
    assert recordable("plain é") == "plain é"
    assert ActivityFailure.from_exception(ValueError("a\x00b")).message == "a\\x00b"
    assert failure_json(RuntimeError("x\x00y"))["message"] == "x\\x00y"
