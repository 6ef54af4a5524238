"""A run blocked in ctx.wait_for_signal names the signals it waits for (its stack), and a signal
of a name no wait asks for is delivered and says so (docs/messages.md, "Which signals a run
waits for"), with a real worker."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
import pytest
from operator_helpers import harvest, start
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from harvest import App, Client, workflow
from harvest.core.errors import TimeoutError_
from harvest.db.sqlapi import SqlApi


@workflow
async def two_waits(ctx) -> list:
    return list(
        await asyncio.gather(ctx.wait_for_signal("approve", timeout="1h"), ctx.wait_for_signal("reject"))
    )


def wait_until(predicate, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := predicate()):
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)
    return found


def test_the_stack_names_the_awaited_signals_and_a_stray_signal_says_so(
    db, start_worker, client: Client
) -> None:
    first = start_worker(App(workflows=[two_waits]))
    handle = client.start_workflow(two_waits)
    with psycopg.connect(db, autocommit=True, row_factory=dict_row) as conn:
        sql = SqlApi(conn)

        def stack() -> dict[str, Any]:
            return sql.get_execution_stack(handle.execution_id)

        def markers() -> list[dict[str, Any]]:
            rows = conn.execute(
                "SELECT event_data FROM harvest.events WHERE execution_id = %s"
                " AND event_type = 'WorkflowTaskCompleted' ORDER BY event_id",
                (handle.execution_id,),
            ).fetchall()
            return [r["event_data"] for r in rows]

        waits = wait_until(lambda: stack()["awaited_signals"])
        assert [w["name"] for w in waits] == ["approve", "reject"]
        approve, reject = waits
        assert approve["timer_seq"] is not None and approve["since"] is not None
        assert reject["timer_seq"] is None and reject["timeout_at"] is None
        timer = next(t for t in stack()["timers"] if t["seq"] == approve["timer_seq"])
        assert approve["timeout_at"] == timer["fire_at"]  # the timeout's deadline is its timer's

        with pytest.raises(TimeoutError_, match=r"it waits for signal 'approve', 'reject'"):
            handle.result(timeout=0.1)  # a result wait says why the run does not end

        stray = handle.signal("aprove", 1)  # misspelt: accepted and buffered, and it says so
        assert not stray.awaited and stray.awaited_signals == ("approve", "reject")
        assert int(stray) > 0

        sent = handle.signal("approve", 2)
        assert sent.awaited and "approve" in sent.awaited_signals
        # The worker's next decision reports the one wait left, since the same marker as before.
        wait_until(lambda: (markers()[-1].get("awaiting") or [{}])[0].get("name") == "reject")
        assert [w["name"] for w in stack()["awaited_signals"]] == ["reject"]
        assert stack()["awaited_signals"][0]["since"] == reject["since"]
        since = markers()[-1]["awaiting"][0]["since"]

        # Another worker replays the run from its history (no cached run): the wait it reports is
        # the same, since the same marker.
        first.stop()
        start_worker(App(workflows=[two_waits]))
        count = len(markers())
        handle.signal("noise", 0)
        wait_until(lambda: len(markers()) > count)
        assert markers()[-1]["awaiting"] == [{"name": "reject", "since": since, "timer_seq": None}]

        handle.signal("reject", 3)
        assert handle.result(timeout=30) == [2, 3]
        assert "awaiting" not in markers()[-1]  # the closing decision reports no wait
        assert stack()["awaited_signals"] == []


def test_the_cli_lists_the_awaited_signals_and_says_a_stray_signal_is_not_awaited(db: str) -> None:
    """`harvest workflow stack` names the signals a run waits for; `harvest workflow signal` of
    another name says the run waits for others, and the signal is delivered all the same."""
    with psycopg.connect(db, autocommit=True) as conn:
        run = start(conn, "approval", "cli-awaits", queue="awq")
        conn.execute(
            "SELECT harvest.complete_workflow_task(c.task_id, c.fencing_token, 1, %s)"
            " FROM harvest.claim_tasks('w', ARRAY['awq'], 1) AS c",
            (Jsonb([{"type": "await_signals", "signals": [{"name": "approve"}]}]),),
        )
    text = harvest(db, "workflow", "stack", run).stdout
    assert "awaited signals:" in text and "approve" in text, text
    assert "waiting on: a signal" not in text, text
    sent = harvest(db, "workflow", "signal", run, "aprove", "--input-json", "true")
    assert sent.returncode == 0, sent.stderr
    assert "; not awaited: the run waits for approve (the signal is buffered)" in sent.stdout, sent.stdout
    answer = harvest(db, "workflow", "signal", run, "approve", "--input-json", "true", "--output", "json")
    assert '"awaited": true' in answer.stdout, answer.stdout
