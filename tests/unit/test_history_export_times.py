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
    assert doc["events"][0]["created_at"] == "2026-12-06 02:00:00.123456+00:00"  # as before, in UTC
