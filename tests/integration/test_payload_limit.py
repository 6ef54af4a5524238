"""The payload limit (issue 12, item 11): harvest.engine_settings.max_payload_bytes is
checked by the client before sending, by the database at every entry point (HR008),
and by the worker on activity results, which fail typed and for good."""

from __future__ import annotations

import time

import psycopg
import pytest

from harvest import App, Client, RetryPolicy, activity, query, update, workflow
from harvest.core.errors import ActivityError, PayloadTooLarge, QueryFailed, UpdateFailed, WorkflowFailed
from harvest.core.payload import payload_size


def _set_limit(db: str, limit: int) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("UPDATE harvest.engine_settings SET max_payload_bytes = %s", (limit,))


def _executions(db: str) -> int:
    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM harvest.executions").fetchone()[0]


@activity(retry=RetryPolicy.exponential(max_attempts=5, initial="0.05s"), dead_letter=False)
async def produce(ctx, n: int) -> str:
    return "x" * n


@workflow
async def wants(ctx, n: int) -> dict:
    try:
        result = await ctx.execute_activity(produce, n)
    except ActivityError as exc:
        return {
            "error_type": exc.failure.error_type,
            "non_retryable": exc.failure.non_retryable,
            "message": exc.failure.message,
        }
    return {"length": len(result)}


@workflow
async def takes(ctx, blob: str) -> int:
    return len(blob)


def test_the_client_measures_payloads_as_the_database_does(db: str) -> None:
    values = [
        None,
        1e20,
        -0.0,
        1.5e-7,
        'é\u00e9\n\t"\\',
        {"b": 1, "a": [1, 2.50, {"ü": None}]},
        ["x" * 1000, 12345678901234567890],
        {"k" * 3: True, "kk": False},
    ]
    with psycopg.connect(db, autocommit=True) as conn:
        for value in values:
            text = psycopg.types.json.Jsonb(value)
            [server] = conn.execute("SELECT octet_length(%s::jsonb::text)", (text,)).fetchone()
            assert payload_size(value) == server, value


def test_the_client_refuses_an_input_over_the_servers_limit_before_sending(db: str) -> None:
    _set_limit(db, 1000)
    with Client(db) as client:
        assert client.max_payload_bytes == 1000  # read from the server, which is the authority
        with pytest.raises(
            PayloadTooLarge,
            match=r"the input of workflow takes is 2004 bytes, over the "
            r"payload limit of 1000 bytes",
        ) as info:
            client.start_workflow(takes, "x" * 2000)
        assert (info.value.what, info.value.bytes, info.value.limit) == (
            "the input of workflow takes",
            2004,
            1000,
        )
        assert info.value.exit_code == 2
        handle = client.start_workflow(takes, "x" * 996)  # exactly 1000 bytes: accepted
        assert handle.execution_id
        with pytest.raises(PayloadTooLarge, match="the payload of signal poke is 2002 bytes"):
            handle.signal("poke", "x" * 2000)
        with pytest.raises(PayloadTooLarge, match="the argument of update set is 2002 bytes"):
            handle.update("set", "x" * 2000, timeout=1)
        with pytest.raises(PayloadTooLarge, match="the argument of query q is 2002 bytes"):
            handle.query("q", "x" * 2000, timeout=1)
        with pytest.raises(PayloadTooLarge, match="the payload of signal poke is 2002 bytes"):
            client.signal_with_start(takes, "", workflow_id="sws", signal="poke", signal_payload="x" * 2000)
    assert _executions(db) == 1


def test_the_database_refuses_what_a_laxer_client_sends(db: str) -> None:
    _set_limit(db, 1000)
    with Client(db, max_payload_bytes=10**9) as client:
        with pytest.raises(PayloadTooLarge) as info:
            client.start_workflow(takes, "x" * 2000)
        # HR008, mapped: what, size, limit and what to do.
        assert (info.value.what, info.value.bytes, info.value.limit) == (
            "the input of workflow takes",
            2004,
            1000,
        )
        assert "pass a reference" in str(info.value)
    assert _executions(db) == 0  # a refused call wrote nothing


def test_a_client_limit_must_be_positive(db: str) -> None:
    with pytest.raises(Exception, match="max_payload_bytes must be a positive"):
        Client(db, max_payload_bytes=0)


@pytest.mark.parametrize("worker_limit", [None, 10**9], ids=["worker-checks", "server-refuses"])
def test_an_activity_result_over_the_limit_fails_typed_and_final(db: str, start_worker, worker_limit) -> None:
    """The worker's own check (its limit read from the server), or, when the worker's limit
    is laxer, the server's refusal of the completion: either way the activity fails at the
    first attempt with a non-retryable PayloadTooLarge the workflow sees, and the worker lives."""
    _set_limit(db, 1000)
    running = start_worker(App(workflows=[wants], activities=[produce]), max_payload_bytes=worker_limit)
    with Client(db, max_payload_bytes=10**9) as client:
        outcome = client.start_workflow(wants, 5000).result(timeout=30)
        assert outcome["error_type"] == "PayloadTooLarge"
        assert outcome["non_retryable"] is True
        assert "the result of activity" in outcome["message"] and "5002 bytes" in outcome["message"]
        history = client.get_handle(client.start_workflow(wants, 10).execution_id).result(timeout=30)
        assert history == {"length": 10}  # the same worker goes on working
    with psycopg.connect(db, autocommit=True) as conn:
        [attempts] = conn.execute(
            "SELECT array_agg((event_data ->> 'attempt')::int) FROM harvest.events "
            "WHERE event_type = 'ActivityFailed'"
        ).fetchone()
    assert attempts == [1]  # not retried
    assert running.error is None


def _wait_for_first_decision(db: str, execution_id: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    with psycopg.connect(db, autocommit=True) as conn:
        while time.monotonic() < deadline:
            if conn.execute(
                "SELECT 1 FROM harvest.events WHERE execution_id = %s"
                " AND event_type = 'WorkflowTaskCompleted'",
                (execution_id,),
            ).fetchone():
                return
            time.sleep(0.05)
    raise AssertionError(f"execution {execution_id} completed no workflow task in {timeout} s")


@workflow
async def holder(ctx, n: int) -> None:
    ctx.state["n"] = n
    await ctx.wait_for_signal("stop")


@query(workflow="holder")
def blob(ctx) -> str:
    return "x" * ctx.state["n"]


def test_a_query_answer_over_the_limit_is_a_typed_failure_not_a_timeout(db: str, start_worker) -> None:
    _set_limit(db, 1000)
    start_worker(App(workflows=[holder], queries=[blob]))
    with Client(db) as client:
        handle = client.start_workflow(holder, 5000)
        # A query served before the run's first workflow task would find no state["n"] yet.
        _wait_for_first_decision(db, handle.execution_id)
        # Without the worker's check the answer was refused (HR008) and the caller waited out
        # its timeout; now it hears why at once.
        with pytest.raises(QueryFailed, match="the answer to query blob is 5002 bytes") as info:
            handle.query("blob", timeout=10)
        assert info.value.error_type == "PayloadTooLarge"
        handle.terminate()


# A decision the database would refuse on every attempt (issue 12 leftover): the run ends,
# typed, instead of its workflow task failing and retrying forever.


@workflow
async def returns(ctx, n: int) -> str:
    return "x" * n


@activity
async def echo(ctx, value: str) -> str:
    return value


@workflow
async def schedules(ctx, n: int) -> str:
    return await ctx.execute_activity(echo, "x" * n)


@workflow
async def returns_after_activity(ctx, n: int) -> str:
    await ctx.execute_activity(echo, "small")  # its result may carry the decision (decide ahead)
    return "x" * n


@workflow
async def answers(ctx) -> str:
    await ctx.wait_for_signal("stop")
    return "done"


@update(workflow="answers")
def big(ctx, n: int) -> str:
    return "x" * n


def _failure_of(client: Client, workflow, *args) -> dict:
    handle = client.start_workflow(workflow, *args)
    with pytest.raises(WorkflowFailed) as info:
        handle.result(timeout=30)  # bounded: the run ends, it does not retry forever
    return info.value.failure


@pytest.mark.parametrize("worker_limit", [None, 10**9], ids=["worker-checks", "server-refuses"])
def test_a_workflow_result_over_the_limit_fails_the_run_typed(db: str, start_worker, worker_limit) -> None:
    _set_limit(db, 1000)
    running = start_worker(
        App(workflows=[returns, schedules, returns_after_activity], activities=[echo]),
        max_payload_bytes=worker_limit,
    )
    with Client(db) as client:
        failure = _failure_of(client, returns, 5000)
        assert failure["error_type"] == "PayloadTooLarge"
        assert failure["non_retryable"] is True
        assert (
            "the result of workflow returns is 5002 bytes, over the payload limit of 1000 bytes"
            in failure["message"]
        )
        assert failure["details"] == {"what": "the result of workflow returns", "bytes": 5002, "limit": 1000}
        # Any other payload of a decision over the limit ends the run the same way.
        failure = _failure_of(client, schedules, 5000)
        assert failure["error_type"] == "PayloadTooLarge"
        assert "the input of activity" in failure["message"] and "5004 bytes" in failure["message"]
        failure = _failure_of(client, returns_after_activity, 5000)
        assert "the result of workflow returns_after_activity is 5002 bytes" in failure["message"]
        # Under the limit the same workflows complete, on the same worker.
        assert client.start_workflow(returns, 900).result(timeout=30) == "x" * 900
        assert client.start_workflow(returns_after_activity, 900).result(timeout=30) == "x" * 900
    with psycopg.connect(db, autocommit=True) as conn:
        failed = conn.execute(
            "SELECT count(*) FROM harvest.executions WHERE status = 'FAILED' "
            "AND failure ->> 'error_type' = 'PayloadTooLarge'"
        ).fetchone()[0]
        retried = conn.execute("SELECT count(*) FROM harvest.tasks WHERE kind = 'workflow'").fetchone()[0]
    assert (failed, retried) == (3, 0)  # no workflow task left retrying
    assert running.error is None


def test_an_update_result_over_the_limit_fails_the_update_not_the_run(db: str, start_worker) -> None:
    _set_limit(db, 1000)
    start_worker(App(workflows=[answers], updates=[big]))
    with Client(db) as client:
        handle = client.start_workflow(answers)
        with pytest.raises(UpdateFailed, match=r"the result of update .* is 5002 bytes") as info:
            handle.update("big", 5000, timeout=30)
        assert info.value.error_type == "PayloadTooLarge"
        assert handle.update("big", 10, timeout=30) == "x" * 10  # the run goes on
        handle.signal("stop")
        assert handle.result(timeout=30) == "done"
