"""Numbers in JSON through the management API: an activity's retry policy that says
max_attempts 2.0 (JSON has no integer type; another SDK's float serialiser writes it so) no
longer fails every failure of the activity at a raw cast (a 400 naming no field, for a value the
caller of /activities/fail never sent), and a value the SQL refuses by its one rule for a JSON
field (functions/core.sql, _json_integer) answers 400 with that field."""

from __future__ import annotations

import json

import psycopg
from web_helpers import api_client, claimed_activity

from harvest.core.errors import InvalidArgument, from_database_error
from harvest.web.errors import error_response


def test_an_activity_whose_retry_policy_says_2_0_fails_and_retries(db: str) -> None:
    token = claimed_activity(db, {"retry": {"max_attempts": 2.0, "initial_interval": 0}})
    with api_client(db) as api:
        failed = api.post("/activities/fail", json={"task_token": token, "message": "boom"})
    # Before: 400 "invalid input syntax for type integer: "2.0"" at every failure, naming no field.
    assert failed.status_code == 200, failed.text
    assert failed.json()["outcome"] == "retry_scheduled"


def test_a_json_field_the_sql_refuses_is_a_400_naming_the_field(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        try:
            conn.execute("SELECT harvest._json_integer('2.5', 'retry.max_attempts', 1)")
        except psycopg.Error as exc:
            refused = from_database_error(exc)
        else:
            raise AssertionError("2.5 was taken as an integer")
    assert isinstance(refused, InvalidArgument) and refused.field == "retry.max_attempts"
    answer = error_response(refused)
    body = json.loads(answer.body)
    assert answer.status_code == 400
    assert body["error"]["code"] == "invalid_argument" and body["error"]["field"] == "retry.max_attempts"
    assert "got 2.5" in body["error"]["message"]
