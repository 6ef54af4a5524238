"""The QueryTimeout of a request still waiting for its run's first workflow task (status
``waiting``) says why that task has not completed, from get_query_request's waiting_for
(docs/messages.md, "Before the run's first workflow task")."""

from __future__ import annotations

from typing import Any

import pytest

from harvest.client.messages import _timeout


def waiting(**changes: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "status": "waiting",
        "kind": "query",
        "execution_id": "e-1",
        "execution_status": "RUNNING",
        "queue": "q",
        "live_workers": 2,
        "waiting_for": {"task_status": "pending", "due_at": "T0", "attempt": 0, "last_failure": None},
    }
    row.update(changes)
    return row


def message(row: dict[str, Any]) -> str:
    text = str(_timeout(row, "query 'total' on execution e-1", 2.0))
    assert text.startswith(
        "no answer to query 'total' on execution e-1 within 2s: execution e-1 has not completed its "
        "first workflow task, so it has no state to read yet"
    ), text
    return text


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        (
            {
                "waiting_for": {
                    "task_status": "running",
                    "lease_owner": "w-7",
                    "lease_owner_health": None,
                    "lease_expires_at": "T1",
                }
            },
            "unregistered worker 'w-7' holds its workflow task, lease until T1",
        ),
        (
            {
                "waiting_for": {
                    "task_status": "running",
                    "lease_owner": "w-8",
                    "lease_owner_health": "stale",
                    "lease_expires_at": "T2",
                }
            },
            "stale worker 'w-8' holds its workflow task, lease until T2",
        ),
        ({"live_workers": 0}, "no live worker polls task queue 'q'"),
        ({"execution_status": "PAUSED"}, "the run is PAUSED: resume it"),
        (
            {
                "waiting_for": {
                    "task_status": "pending",
                    "attempt": 3,
                    "last_failure": {"error_type": "Boom", "message": "no"},
                }
            },
            "its workflow task failed (attempt 3, last: Boom: no)",
        ),
        ({"waiting_for": {"task_status": None}}, "it has no workflow task queued"),
        (
            {},
            "its workflow task is pending (due T0) and 2 live worker(s) poll task queue 'q' but none has",
        ),
    ],
)
def test_the_timeout_says_why_the_first_workflow_task_has_not_completed(
    changes: dict[str, Any], why: str
) -> None:
    text = message(waiting(**changes))
    assert why in text, text


def test_a_request_not_waiting_keeps_its_message() -> None:
    text = str(_timeout(waiting(status="pending"), "query 'total' on execution e-1", 2.0))
    assert "first workflow task" not in text
    assert "2 live worker(s) poll task queue 'q', but none answered" in text


def test_a_request_no_worker_took_says_a_live_worker_may_be_dead() -> None:
    """None of the live workers took it: busy, or one killed a moment ago that still counts as
    live (its heartbeat not yet missed twice). Never "do they register the workflow?": a worker
    without the workflow hands the request back, and it is answered UnknownWorkflow."""
    text = str(_timeout(waiting(status="pending"), "query 'total' on execution e-1", 2.0))
    assert "none took the request" in text, text
    assert "killed" in text and "misses two heartbeats" in text, text
    assert "register the workflow" not in text, text


def test_a_request_a_worker_took_names_that_worker() -> None:
    row = waiting(status="running", claimed_by="w-9", kind="update")
    text = str(_timeout(row, "update 'spend' on execution e-1", 2.0))
    assert "worker 'w-9' took the request and has not answered" in text, text
    assert "its update handler still runs, or that worker died or hangs" in text, text
    assert "register the workflow" not in text, text
