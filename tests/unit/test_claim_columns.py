"""The worker's claim (harvest.db.sqlapi.CLAIM_TASKS) names harvest.claim_tasks' columns so that a
task's ``options`` and ``execution_id`` come as text, and ``claimed_rows`` decodes each distinct
options text once (issue 20, "Cheaper Python, seventh cut"). No database: the column list is read
from functions/claim.sql."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from harvest.db import sqlapi
from harvest.db.sqlapi import CLAIM_TASKS, claimed_rows

CLAIM_SQL = Path(__file__).resolve().parents[2] / "functions" / "claim.sql"


def _returned_columns() -> list[str]:
    text = CLAIM_SQL.read_text()
    pattern = r"CREATE OR REPLACE FUNCTION harvest\.claim_tasks\(.*?RETURNS TABLE \((.*?)\n\)\s*LANGUAGE"
    body = re.search(pattern, text, re.S)
    assert body is not None
    lines = [re.sub(r"--.*", "", line).strip() for line in body.group(1).splitlines()]
    return [line.split()[0] for line in lines if line]


def _selected_columns() -> list[str]:
    listed = CLAIM_TASKS.split("SELECT", 1)[1].split("FROM", 1)[0]
    return [item.split()[-1] for item in (part.strip() for part in listed.split(","))]


def test_the_claim_selects_every_column_of_claim_tasks_in_order() -> None:
    returned = _returned_columns()
    assert "options" in returned and len(returned) > 10
    # All but the lease's expiry, which the worker never reads (a handed task has none either).
    assert "lease_expires_at" in returned
    assert _selected_columns() == [c for c in returned if c != "lease_expires_at"]
    assert "options::text AS options" in " ".join(CLAIM_TASKS.split())
    assert "execution_id::text AS execution_id" in " ".join(CLAIM_TASKS.split())


def test_claimed_rows_decode_the_options_text_as_json_does() -> None:
    texts = [
        (
            '{"retry": {"backoff": 2.0, "max_attempts": 3, "non_retryable_errors": []}, "priority": 0,'
            ' "dead_letter": true, "start_to_close": 300, "heartbeat_timeout": null}'
        ),
        '{"key": "\\u00e9t\\u00e9", "rate_limit": {"rps": 1.5, "key": null}, "concurrency_key": "k"}',
        "{}",
        "null",
        '{"n": 1e20, "f": 0.1}',
    ]
    found = claimed_rows([{"task_id": i, "options": text} for i, text in enumerate(texts)])
    for row, text in zip(found, texts, strict=True):
        assert row["options"] == json.loads(text)
        assert type(row["options"]) is type(json.loads(text))
    assert claimed_rows([{"options": None}]) == [{"options": None}]  # a NULL stays None


def test_rows_with_the_same_options_text_share_one_decoded_value() -> None:
    text = '{"start_to_close": 30, "retry": {"max_attempts": 5}}'
    first, second = claimed_rows([{"options": text}, {"options": str(text)}])
    assert first["options"] is second["options"]
    (later,) = claimed_rows([{"options": text}])
    assert later["options"] is first["options"]
    (other,) = claimed_rows([{"options": '{"start_to_close": 31, "retry": {"max_attempts": 5}}'}])
    assert other["options"] == {"start_to_close": 31, "retry": {"max_attempts": 5}}


def test_the_memo_of_decoded_options_stays_bounded() -> None:
    many: list[dict[str, Any]] = [{"options": json.dumps({"start_to_close": i})} for i in range(1000)]
    decoded = claimed_rows(many)
    assert [row["options"]["start_to_close"] for row in decoded] == list(range(1000))
    assert len(sqlapi._CLAIMED_OPTIONS) <= sqlapi._CLAIMED_OPTIONS_MAX
