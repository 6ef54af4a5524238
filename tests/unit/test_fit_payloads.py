"""A decision's payloads against the worker's limit (worker/workflows.py, fit_payloads): what the
database would refuse on every attempt becomes a typed failure instead."""

from __future__ import annotations

from harvest.core.payload import payload_size
from harvest.worker.workflows import fit_payloads, payloads_fit

BIG = "x" * 500


def test_a_decision_that_fits_is_left_alone() -> None:
    commands = [
        {"type": "schedule_activity", "seq": 1, "name": "a", "input": ["small"]},
        {"type": "start_child_workflow", "seq": 2, "workflow_name": "c", "input": [BIG]},
    ]
    # A child's input is the database's to refuse: a typed START_FAILED the parent can catch.
    assert payloads_fit(commands, 100, "wf")
    assert fit_payloads(commands, 100, "wf") is commands
    assert (
        fit_payloads([{"type": "complete_workflow", "result": BIG}], None, "wf")[0]["type"]
        == "complete_workflow"
    )  # no known limit: no check


def test_any_other_payload_over_the_limit_ends_the_run_typed() -> None:
    commands = [
        {"type": "schedule_activity", "seq": 1, "name": "a", "input": ["small"]},
        {"type": "record_marker", "seq": 2, "kind": "side_effect", "value": BIG},
        {"type": "start_timer", "seq": 3, "duration": 1},
    ]
    [failed] = fit_payloads(commands, 300, "wf")
    assert failed["type"] == "fail_workflow"
    failure = failed["failure"]
    assert failure["error_type"] == "PayloadTooLarge" and failure["non_retryable"] is True
    # Under a small limit the failure keeps what fits: the hint goes first.
    assert (
        failure["message"] == "the value of marker side_effect (command 2) is 502 bytes, "
        "over the payload limit of 300 bytes"
    )
    assert failure["details"] == {
        "what": "the value of marker side_effect (command 2)",
        "bytes": 502,
        "limit": 300,
    }


def test_the_failure_itself_fits_a_tiny_limit() -> None:
    [failed] = fit_payloads([{"type": "complete_workflow", "result": BIG}], 10_000 // 20, "wf")
    assert "pass a reference" in failed["failure"]["message"]  # room for the whole message
    [failed] = fit_payloads([{"type": "complete_workflow", "result": BIG}], 60, "wf")
    assert failed["failure"]["error_type"] == "PayloadTooLarge"
    assert payload_size(failed["failure"]) <= 60 and failed["failure"]["non_retryable"] is True


def test_an_update_result_over_the_limit_fails_the_update_only() -> None:
    commands = [
        {"type": "complete_update", "seq": 4, "update_id": "u1", "result": BIG},
        {"type": "start_timer", "seq": 5, "duration": 1},
    ]
    fitted = fit_payloads(commands, 300, "wf")
    assert [c["type"] for c in fitted] == ["complete_update", "start_timer"]
    assert "result" not in fitted[0] and fitted[0]["seq"] == 4 and fitted[0]["update_id"] == "u1"
    assert fitted[0]["failure"]["error_type"] == "PayloadTooLarge"
    assert "the result of update u1 is 502 bytes" in fitted[0]["failure"]["message"]
    assert commands[0]["result"] == BIG  # the run's own command is not changed


def test_an_external_signal_payload_over_the_limit_ends_the_run_typed() -> None:
    """As the database names it (functions/decide.sql, _decide_signal_external_workflow)."""
    signal = {
        "type": "signal_external_workflow",
        "seq": 1,
        "execution_id": None,
        "workflow_id": "w",
        "workflow_name": None,
        "signal_name": "capture",
        "payload": BIG,
    }
    [failed] = fit_payloads([signal], 300, "wf")
    assert failed["failure"]["details"]["what"] == "the payload of signal capture"
    cancel = {"type": "cancel_external_workflow", "seq": 1, "workflow_id": "w", "reason": BIG}
    [failed] = fit_payloads([cancel], 300, "wf")
    assert failed["failure"]["details"]["what"] == "the reason of an external cancel"
    assert payloads_fit([{**signal, "payload": "small"}], 300, "wf")


def test_a_signal_carried_over_by_continue_as_new_over_the_limit_ends_the_run_typed() -> None:
    carried = {"type": "continue_as_new", "input": [1], "signals": [{"name": "note", "payload": BIG * 4}]}
    [failed] = fit_payloads([carried], 1000, "wf")
    assert failed["type"] == "fail_workflow"
    assert (
        failed["failure"]["details"]["what"] == "the payload of signal note carried over by continue-as-new"
    )
    assert fit_payloads([carried], 3000, "wf") == [carried]


def test_a_childs_result_over_the_limit_says_it_is_never_offloaded() -> None:
    [failed] = fit_payloads([{"type": "complete_workflow", "result": BIG * 4}], 1000, "wf", child=True)
    assert "a child's end is never offloaded" in failed["failure"]["details"]["what"]


def test_a_payload_the_database_cannot_store_ends_the_run_typed() -> None:
    """A workflow's result, an activity's input or a marker's value holding U+0000 was sent:
    the database refused the decision (22P05), the handler crashed and the task ran again at
    every lease, for good. Like a payload over the limit, it ends the run typed, and an
    update's result fails the update."""
    for command, what in (
        ({"type": "complete_workflow", "result": "a\x00"}, "the result of workflow w"),
        (
            {"type": "schedule_activity", "seq": 1, "name": "echo", "input": ["a\x00"]},
            "the input of activity echo",
        ),
        (
            {"type": "record_marker", "seq": 2, "kind": "side_effect", "value": "\x00"},
            "the value of marker side_effect",
        ),
    ):
        assert not payloads_fit([command], 1000, "w")
        [failed] = fit_payloads([command], 1000, "w")
        assert failed["type"] == "fail_workflow"
        assert failed["failure"]["error_type"] == "PayloadError"
        assert failed["failure"]["message"].startswith(what)
        assert "U+0000" in failed["failure"]["message"]
    update = {"type": "complete_update", "update_id": "u", "result": "a\x00"}
    [answered] = fit_payloads([update], 1000, "w")
    assert answered["type"] == "complete_update" and answered["failure"]["error_type"] == "PayloadError"


def test_a_childs_input_the_database_cannot_store_ends_the_run_typed() -> None:
    """A child's input holding U+0000 was sent: the database refused the decision (22P05)
    before _start_child could turn it into a failed start, so the workflow task crashed its
    handler at every lease. Its size stays the database's to refuse (a typed START_FAILED)."""
    child = {"type": "start_child_workflow", "seq": 3, "workflow_name": "c", "input": ["a\x00b"]}
    assert not payloads_fit([child], 1000, "w")
    [failed] = fit_payloads([{"type": "start_timer", "seq": 1, "duration": 1}, child], 1000, "w")
    assert failed["type"] == "fail_workflow"
    assert failed["failure"]["error_type"] == "PayloadError"
    assert failed["failure"]["message"].startswith(
        "the input of child workflow c (command 3) cannot be stored"
    )


def test_a_carried_signal_the_database_cannot_store_ends_the_run_typed() -> None:
    """A signal carried over by continue-as-new, encoded again (a codec's output) into a string
    holding U+0000: its PayloadError escaped fit_payloads, and the task crashed its handler."""
    command = {"type": "continue_as_new", "input": [1], "signals": [{"name": "s", "payload": "a\x00"}]}
    [failed] = fit_payloads([command], 1000, "w")
    assert failed["failure"]["error_type"] == "PayloadError"
    assert failed["failure"]["message"].startswith("the payload of signal s carried over by continue-as-new")


def test_a_failure_over_the_limit_loses_its_traceback_first() -> None:
    """A workflow's failure (or an update's) records where it was raised; that traceback is
    extra, and over the limit it goes first, as an activity attempt's report drops it: the run
    ended PayloadTooLarge, its own error_type and message lost to a 6000-character traceback."""
    failure = {"error_type": "ValueError", "message": "bad n", "non_retryable": True, "details": None}
    stacked = {**failure, "traceback": "Traceback (most recent call last):\n" + "T" * 500}
    [kept] = fit_payloads([{"type": "fail_workflow", "failure": stacked}], 300, "wf")
    assert kept == {"type": "fail_workflow", "failure": failure}
    update = {"type": "complete_update", "update_id": "u1", "failure": stacked}
    assert fit_payloads([update], 300, "wf") == [{**update, "failure": failure}]
    # Within the limit it stays; over it even without, the run still ends typed.
    assert fit_payloads([{"type": "fail_workflow", "failure": stacked}], 2000, "wf")[0]["failure"] == stacked
    [typed] = fit_payloads([{"type": "fail_workflow", "failure": {**stacked, "message": BIG}}], 300, "wf")
    assert typed["failure"]["error_type"] == "PayloadTooLarge" and "traceback" not in typed["failure"]


def test_a_local_activity_s_failure_over_the_limit_loses_its_traceback_first() -> None:
    """A local activity's outcome is a marker of the run's decision: its failure's traceback
    made the marker too large, and the run ended PayloadTooLarge instead of meeting the failure."""
    failure = {"error_type": "KeyError", "message": "7", "non_retryable": False, "details": None}
    marker = {
        "type": "record_marker",
        "seq": 1,
        "kind": "local_activity",
        "value": {"name": "price", "failure": {**failure, "traceback": "T" * 500}},
    }
    [kept] = fit_payloads([marker], 300, "wf")
    assert kept == {**marker, "value": {"name": "price", "failure": failure}}
