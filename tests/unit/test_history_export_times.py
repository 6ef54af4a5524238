"""A history export's times do not depend on the session's zone (review57d)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

from harvest.client.history_export import export_chunks


def test_an_export_writes_its_times_in_utc_whatever_the_session_zone() -> None:
    """`harvest history export` over SQL read its times in the CLI's session zone (PGTZ, a role's
    TimeZone) and wrote them as str() does, so one export was "...+14:00" over SQL and
    "...+00:00" over HTTP (the server's session), two files for one history; the CLI's rows
    were made zone-free (json_default) but the export was not. Now UTC, in the text it had."""
    instant = datetime(2026, 12, 6, 2, 0, 0, 123456, tzinfo=UTC)
    kiritimati = instant.astimezone(timezone(timedelta(hours=14)))
    texts = [
        "".join(
            export_chunks(
                {"execution_id": "e", "created_at": at},
                [{"event_id": 1, "event_type": "WorkflowStarted", "created_at": at}],
                True,
            )
        )
        for at in (instant, kiritimati)
    ]
    assert texts[0] == texts[1]
    doc = json.loads(texts[1])
    assert (
        doc["execution"]["created_at"] == doc["events"][0]["created_at"] == "2026-12-06T02:00:00.123456+00:00"
    )


def test_an_export_writes_its_times_as_the_rest_of_the_cli_and_the_api_do() -> None:
    """The export wrote its times as str() does, with a space for ISO 8601's T
    ("2026-12-06 02:00:00+00:00"), where every other command's JSON and every API answer write
    "2026-12-06T02:00:00+00:00" (json_default): one time, two spellings for a program reading
    both. Now the same text, ISO 8601 in UTC."""
    from harvest.cli.output import json_default as cli_default
    from harvest.web.errors import json_default as api_default

    at = datetime(2026, 12, 6, 2, 0, 0, tzinfo=timezone(timedelta(hours=-5)))
    doc = json.loads("".join(export_chunks({"created_at": at}, [], False)))
    assert doc["execution"]["created_at"] == cli_default(at) == api_default(at) == "2026-12-06T07:00:00+00:00"
