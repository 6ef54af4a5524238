"""The worker's line about a failed activity attempt masks a password in the failure's message
(docs/security.md, "What a log line carries"); what is stored (its dead letter, the run's
history) keeps the message as raised. A dead-lettered attempt's line is a warning: it waits for
an operator."""

from __future__ import annotations

import logging
import time

import pytest

from harvest import App, Client, RetryPolicy, activity, workflow

SECRET = "hunter2-activity-secret"


@activity(retry=RetryPolicy.exponential(max_attempts=1))
async def fl_refused(ctx) -> None:
    raise RuntimeError(f"could not reach postgresql://svc:{SECRET}@billing-db/prod")


@workflow
async def fl_caller(ctx) -> None:
    await ctx.execute_activity(fl_refused)


APP = App(workflows=[fl_caller], activities=[fl_refused])


def test_a_failed_attempts_log_line_masks_a_password_in_its_message(
    start_worker, client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="harvest.worker")
    worker = start_worker(APP)
    client.start_workflow(fl_caller)
    for _ in range(600):  # its one attempt fails, dead-lettered
        records = [r for r in caplog.records if "activity fl_refused attempt 1 failed" in r.getMessage()]
        if records:
            break
        time.sleep(0.05)
    worker.stop()

    assert len(records) == 1, [r.getMessage() for r in caplog.records]
    line = records[0].getMessage()
    assert SECRET not in line and "billing-db/prod" in line and "(dead_lettered)" in line, line
    assert records[0].levelno == logging.WARNING
    assert all(SECRET not in r.getMessage() for r in caplog.records)
