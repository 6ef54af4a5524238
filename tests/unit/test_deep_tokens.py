"""Text a caller hands in (a page's cursor, a dashboard form's field, a CLI option's JSON)
nested past Python's JSON parser (about 1000 levels) is refused as a bad value, never a 500 or
a traceback: the parser's RecursionError is no ValueError, and a crafted cursor of 3,000
brackets was an internal error (sec71)."""

from __future__ import annotations

import base64
import uuid
from pathlib import Path

import pytest

from harvest.cli.replay import _read_history
from harvest.cli.workflow import loads_json_option
from harvest.client.batch import CURSOR_PREFIX, decode_cursor
from harvest.core import jsonb
from harvest.core.errors import InvalidArgument
from harvest.shard import fanout
from harvest.web.routes.workflows import HISTORY_CURSOR, _after_history_cursor
from harvest.web.ui.app import _absorb, _drawn

DEEP = "[" * 3000 + "]" * 3000


def token(prefix: str, text: str = DEEP) -> str:
    return prefix + base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def test_loads_refuses_text_past_the_parser_as_a_value_error() -> None:
    with pytest.raises(ValueError, match="nested deeper than 200 levels"):
        jsonb.loads(DEEP)
    assert jsonb.loads('{"a": [1]}') == {"a": [1]}


def test_a_deep_history_cursor_is_a_bad_cursor() -> None:
    with pytest.raises(InvalidArgument, match="cursor"):
        _after_history_cursor(token(HISTORY_CURSOR), str(uuid.uuid4()))


def test_a_deep_list_cursor_is_a_bad_cursor() -> None:
    with pytest.raises(InvalidArgument, match="malformed"):
        fanout._decode_token("x1.", token("x1."), "workflows")


def test_a_deep_batch_cursor_is_a_bad_cursor() -> None:
    with pytest.raises(InvalidArgument, match="cursor"):
        decode_cursor(token(CURSOR_PREFIX))


def test_a_deep_dashboard_form_field_is_refused_or_ignored() -> None:
    with pytest.raises(InvalidArgument, match="so_far"):
        _absorb(None, DEEP)  # type: ignore[arg-type]  # (refused before the tally is read)
    assert _drawn({"drawn": DEEP}) is None  # (a form without its drawn values: compared whole)


def test_a_deep_cli_json_option_is_one_line(tmp_path: Path) -> None:
    """``--input-json`` (and every --X-json) and ``harvest replay``'s history file: an
    InvalidArgument naming the option or the file (the CLI's one line), not a traceback."""
    with pytest.raises(InvalidArgument, match="--input-json: not valid JSON"):
        loads_json_option(DEEP, "input-json")
    history = tmp_path / "history.json"
    history.write_text(DEEP)
    with pytest.raises(InvalidArgument, match="not valid JSON"):
        _read_history(history)
