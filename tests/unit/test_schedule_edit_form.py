"""The dashboard's Edit form of a schedule (harvest.web.ui.app): drawn filled with the schedule's
fields, sent back as it was drawn it changes nothing, and a field the user changed is the one
sent (review68c)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from harvest.web.ui.app import _edit_changes, _schedule_values


def _row(**fields: Any) -> dict[str, Any]:
    return {
        "kind": "workflow",
        "workflow_name": "report",
        "queue": "default",
        "max_active_runs": 1,
        "overlap": "skip",
        "catchup": False,
        "catchup_window_secs": 60,
        "cron": None,
        "timezone": None,
        "interval_secs": 3600,
        "jitter_secs": 0.0,
        "input": None,
        **fields,
    }


@pytest.mark.parametrize(
    "fields",
    [
        {"jitter_secs": 12345.25},  # ":g" drew 12345.2: a jitter change nobody asked for
        {"interval_secs": 30 * 86400, "jitter_secs": 1234567.0},  # ":g" drew 1.23457e+06: refused
        {"jitter_secs": 0.1234567},
        {"cron": "0 2 * * *", "timezone": "Europe/Paris", "interval_secs": None, "input": [{"a": 1}]},
        {"catchup": True, "catchup_window_secs": 3600, "max_active_runs": 7},
    ],
)
def test_an_edit_form_sent_as_drawn_changes_nothing(fields: dict[str, Any]) -> None:
    row = _row(**fields)
    assert _edit_changes(row, _schedule_values(row, True)) == {}


def test_a_changed_field_is_sent_and_the_jitter_kept() -> None:
    row = _row(jitter_secs=12345.25)
    form = {**_schedule_values(row, True), "every": "2h"}
    assert _edit_changes(row, form) == {"interval_secs": 7200}


def test_catch_up_turned_off_with_the_window_the_form_showed_turns_it_off() -> None:
    row = _row(catchup=True, catchup_window_secs=3600)
    form = {**_schedule_values(row, True), "catchup": "false"}
    assert _edit_changes(row, form) == {"catchup": False}


def test_a_window_typed_with_catch_up_off_is_refused_naming_it() -> None:
    row = _row(catchup=True, catchup_window_secs=3600)
    form = {**_schedule_values(row, True), "catchup": "false", "catchup_window": "2h"}
    with pytest.raises(Exception, match="catchup_window"):
        _edit_changes(row, form)


def _drawn_form(row: dict[str, Any], **changed: str) -> dict[str, str]:
    """The Edit form as the schedule page draws it (its ``drawn`` field too), ``changed`` typed in."""
    values = _schedule_values(row, True)
    return {**values, "drawn": json.dumps(values), **changed}


def test_an_edit_saves_what_the_user_changed_not_what_changed_since_it_was_drawn() -> None:
    """A deploy declared a new queue and jitter while the form was open: saving a new interval
    keeps them (the form's old values, sent, put the old spec back)."""
    drawn = _row(queue="reports", jitter_secs=5.0)
    form = _drawn_form(drawn, every="2h")
    now = _row(queue="reports-v2", jitter_secs=30.0)
    assert _edit_changes(now, form) == {"interval_secs": 7200}


def test_a_field_changed_to_what_the_schedule_has_now_is_not_sent_again() -> None:
    drawn = _row(queue="reports")
    now = _row(queue="reports-v2")
    assert _edit_changes(now, _drawn_form(drawn, queue="reports-v2")) == {}
    assert _edit_changes(now, _drawn_form(drawn, queue="other")) == {"queue": "other"}


def test_a_form_without_what_it_was_drawn_with_is_compared_with_the_schedule() -> None:
    row = _row(queue="reports")
    form = {**_schedule_values(row, True), "drawn": "not json"}
    assert _edit_changes(_row(queue="reports-v2"), form) == {"queue": "reports"}
