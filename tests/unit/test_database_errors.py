"""A function's error reaches the caller with its HINT (what to do), not only its message."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harvest.core.errors import InvalidArgument, UnknownWorkflow, WorkflowAlreadyExists, from_database_error


def _raised(
    sqlstate: str, message: str, hint: str | None = None, detail: str | None = None
) -> SimpleNamespace:
    diag = SimpleNamespace(message_primary=message, message_hint=hint, message_detail=detail)
    return SimpleNamespace(sqlstate=sqlstate, diag=diag)


def test_the_hint_follows_the_message() -> None:
    error = from_database_error(
        _raised("HR001", "overlap 'stack' is unknown", "use skip, buffer_one, buffer_all")
    )
    assert isinstance(error, InvalidArgument)
    assert str(error) == "overlap 'stack' is unknown: use skip, buffer_one, buffer_all"


def test_no_hint_leaves_the_message_alone() -> None:
    assert str(from_database_error(_raised("HR001", "bad value"))) == "bad value"


@pytest.mark.parametrize(
    ("sqlstate", "cls", "detail"),
    [
        ("HR003", WorkflowAlreadyExists, '{"existing_execution_id": "e", "existing_status": "RUNNING"}'),
        ("HR010", UnknownWorkflow, '{"workflow_name": "w", "queue": "q", "registered": []}'),
    ],
)
def test_errors_that_carry_details_keep_the_hint_too(sqlstate: str, cls: type, detail: str) -> None:
    error = from_database_error(_raised(sqlstate, "refused", "do this", detail))
    assert isinstance(error, cls) and str(error) == "refused: do this"


def test_a_value_past_the_servers_own_limits_is_an_invalid_argument() -> None:
    """program_limit_exceeded (an index entry over 2,704 bytes that no check of Harvest's
    named first) is the caller's input, not an unmapped server error (a 500 over HTTP)."""
    error = from_database_error(_raised("54000", "index row size 3024 exceeds btree version 4 maximum 2704"))
    assert isinstance(error, InvalidArgument)
