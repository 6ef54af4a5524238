"""JSON nested deeper than 200 levels is refused by the database itself (HR001), whoever writes
it: a worker's JSON parser (Python's) gives up near 1000 levels, so one signal 1000 deep, sent by
an operator's database login (the management API refuses such a body, the SQL did not), stopped
the worker that claimed its run at every restart, and every other run its claims carried with it
(docs/payloads.md, "What is stored")."""

from __future__ import annotations

import psycopg
import pytest

from harvest import App, workflow

DEEP = "[" * 1000 + "]" * 1000
AT_THE_BOUND = "[" * 200 + "]" * 200  # (200 levels: taken)
ATTRIBUTED_START = (
    "SELECT * FROM harvest.start_workflow('waits_for_a_signal', '[]', 'sa', p_search_attributes => %s)"
)


@workflow
async def waits_for_a_signal(ctx) -> int:
    return len(str(await ctx.wait_for_signal("s", timeout="1h")))


def _sqlstate(conn: psycopg.Connection, sql: str, params: tuple) -> str:
    try:
        conn.execute(sql, params)
    except psycopg.Error as exc:
        return exc.sqlstate or type(exc).__name__
    return "ok"


def test_json_nested_past_200_levels_is_refused_and_cannot_stop_a_worker(
    start_worker, client, db: str
) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        starting = "SELECT execution_id FROM harvest.start_workflow('waits_for_a_signal', %s::jsonb, %s)"
        runs = [conn.execute(starting, ("[]", f"run-{n}")).fetchone()[0] for n in range(4)]
        deep_arg = "[" + DEEP + "]"
        refused = {
            "signal": ("SELECT harvest.signal_workflow(%s, 's', %s::jsonb)", (runs[0], DEEP)),
            "start input": (starting, (deep_arg, "deep-input")),
            "search attributes": (ATTRIBUTED_START, ('{"a": ' + DEEP + "}",)),
            "a batch of starts": (
                "SELECT * FROM harvest.start_workflows(%s::jsonb)",
                ('[{"workflow_name": "waits_for_a_signal", "input": ' + deep_arg + "}]",),
            ),
            "an offloaded payload": ("SELECT harvest.put_payloads(%s, ARRAY[%s::jsonb])", (runs[0], DEEP)),
            "a query's argument": ("SELECT harvest.request_query(%s, 'q', %s::jsonb)", (runs[0], DEEP)),
        }
        for what, (sql, params) in refused.items():
            assert _sqlstate(conn, sql, params) == "HR001", what
        with pytest.raises(psycopg.Error, match="arrays and objects nest deeper than 200 levels"):
            conn.execute("SELECT harvest.signal_workflow(%s, 's', %s::jsonb)", (runs[0], DEEP))
        for run in runs:
            conn.execute("SELECT harvest.signal_workflow(%s, 's', %s::jsonb)", (run, AT_THE_BOUND))
    start_worker(App(workflows=[waits_for_a_signal]))
    for run in runs:  # (a worker reads 200 levels back, and every run completes)
        assert client.get_handle(str(run)).result(timeout=30) == len(str(_nested(200)))


def _nested(levels: int) -> list:
    value: list = []
    for _ in range(levels - 1):
        value = [value]
    return value
