"""The scheduler's failure lines and its report's errors go through
harvest.db.connection.failure_reason: a first line that quotes a DSN (a client error's) never
carries its password into the log or the tick's report."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging

from harvest.worker.scheduler import tick

PASSWORD = "hunter2-scheduler-secret"


class _FiringFails:
    """An AsyncSqlApi stand-in: one due schedule whose firing fails with a first line that
    quotes a DSN (not a lost connection: the scheduler goes on to the next schedule)."""

    async def start_buffered_firings(self, limit: int) -> int:
        return 0

    async def list_due_schedules(self, limit: int) -> list[dict]:
        return [
            {
                "schedule_id": 1,
                "name": "nightly",
                "cron": None,
                "interval_secs": 60,
                "timezone": "UTC",
                "jitter_secs": 0,
                "catchup_window_secs": 60,
                "anchor_at": dt.datetime(2030, 1, 1, tzinfo=dt.UTC),
                "next_fire_at": None,
                "last_slot_at": None,
                "revision": 1,
                "now": dt.datetime(2030, 1, 1, 0, 0, 30, tzinfo=dt.UTC),
            }
        ]

    async def fire_schedule(self, **args: object) -> dict:
        raise RuntimeError(f"could not open postgresql://harvest:{PASSWORD}@db.internal/app\nsecond line")


def test_a_failed_firing_is_logged_and_reported_without_a_dsn_password(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="harvest"):
        report = asyncio.run(tick(_FiringFails()))
    lines = [r.getMessage() for r in caplog.records if "nightly" in r.getMessage()]
    assert lines and report.errors, (lines, report.errors)
    for text in [*lines, *report.errors]:
        assert PASSWORD not in text, text
        assert "second line" not in text, text
        assert "db.internal" in text, text  # the rest of the first line is kept
