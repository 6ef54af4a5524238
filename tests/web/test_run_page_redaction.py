"""What a principal without payloads sees of a run's failures on the dashboard's run page: no
more than the API's redaction shows it on GET /workflows/{id}/stack. The page printed the stack's
workflow task whole, so a failing workflow task's details and traceback (payloads: the API
redacts them) showed to a token made with payloads false, and to an operator's page not in full."""

from __future__ import annotations

import json

import psycopg
from web_helpers import api_client, authorizer_for

SECRET = "ZqTaskFailure7731Secret"


def _token(db: str, name: str, scope: str, payloads: bool) -> str:
    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute(
            "SELECT secret FROM harvest.create_api_token(%s, %s, p_payloads => %s)", (name, scope, payloads)
        ).fetchone()[0]


def _failing_task_run(db: str, *, since: bool = True) -> str:
    """A run whose workflow task failed with details and a traceback carrying SECRET (and, if
    ``since``, when it began failing)."""
    failure = {
        "error_type": "ValueError",
        "message": "bad order",
        "details": {"card": SECRET},
        "traceback": f"Traceback (most recent call last):\n  line 1, secret={SECRET}\nValueError: bad order",
    }
    if since:
        failure["failing_since"] = "2030-01-02T03:04:05+00:00"
    with psycopg.connect(db, autocommit=True) as conn:
        eid = str(
            conn.execute(
                "SELECT execution_id FROM harvest.start_workflow('redacted_run', '[]', 'r1', 'default')"
            ).fetchone()[0]
        )
        conn.execute(
            "UPDATE harvest.tasks SET last_failure = %s, attempt = 3"
            " WHERE execution_id = %s AND kind = 'workflow'",
            (json.dumps(failure), eid),
        )
    return eid


def test_a_failing_workflow_tasks_details_and_traceback_are_redacted_on_the_run_page(db: str) -> None:
    eid = _failing_task_run(db)
    bare, operator = _token(db, "bare-run", "admin", False), _token(db, "op-run", "operate", True)
    with api_client(db, authorizer=authorizer_for(db), profile="production") as api:
        # The API's redaction: the failure's type and message, its details' and traceback's size.
        stack = api.get(f"/workflows/{eid}/stack", headers={"Authorization": f"Bearer {bare}"})
        assert stack.status_code == 200, stack.text
        assert SECRET not in stack.text, stack.text
        shown = stack.json()["workflow_task"]["last_failure"]
        assert shown["message"] == "bad order" and shown["details"]["redacted"] is True, shown
        for who, query in ((bare, ""), (bare, "?payloads=full"), (operator, "")):
            page = api.get(f"/ui/workflows/{eid}{query}", headers={"Authorization": f"Bearer {who}"})
            assert page.status_code == 200, page.text
            assert 'id="task-failing"' in page.text and "bad order" in page.text, query
            assert SECRET not in page.text, (who == bare, query)
        # In full, an operator who sees payloads sees them.
        page = api.get(f"/ui/workflows/{eid}?payloads=full", headers={"Authorization": f"Bearer {operator}"})
        assert page.status_code == 200 and SECRET in page.text, page.text


def test_a_failing_workflow_task_without_its_since_still_shows_the_run_page(db: str) -> None:
    """A workflow task's failure written without failing_since (by a release before it was
    recorded) is shown without it: the page answered 500 (the template read a missing key)."""
    eid = _failing_task_run(db, since=False)
    with api_client(db) as api:
        page = api.get(f"/ui/workflows/{eid}")
        assert page.status_code == 200, page.text
        assert 'id="task-failing"' in page.text and "failing since" not in page.text
