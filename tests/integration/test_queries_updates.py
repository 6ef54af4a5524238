"""Queries and updates with a real worker on a real Postgres (docs/messages.md)."""

from __future__ import annotations

import asyncio
import time

import pytest

from harvest import App, Client, activity, query, update, workflow
from harvest.client.messages import UpdateHandle
from harvest.core.errors import (
    InvalidArgument,
    QueryFailed,
    QueryTimeout,
    UpdateFailed,
    UpdateRejected,
    WorkflowNotRunning,
)


def check_amount(ctx, amount: int) -> None:
    if amount <= 0:
        raise ValueError(f"amount must be positive, got {amount}")
    if ctx.state["total"] + amount > 100:
        raise ValueError("the budget is 100")


@activity
async def book(ctx, amount: int) -> str:
    return f"booked {amount}"


@workflow
async def budget(ctx, owner: str) -> dict:
    ctx.state.update(owner=owner, total=0, entries=[])
    await ctx.wait_for_signal("close")
    await ctx.drain_admitted_updates()
    return {"total": ctx.state["total"], "entries": ctx.state["entries"]}


@query(workflow="budget")
def total(ctx) -> int:
    return ctx.state["total"]


@query(workflow="budget")
def owner(ctx, shout: bool) -> str:
    return ctx.state["owner"].upper() if shout else ctx.state["owner"]


@query(workflow="budget")
def greeting(ctx, shout: bool = False) -> str:
    return f"hello {ctx.state['owner']}" + ("!" if shout else "")


@query(workflow="budget")
def broken(ctx) -> int:
    raise RuntimeError("this query is broken")


@update(workflow="budget", validator=check_amount)
async def spend(ctx, amount: int) -> dict:
    receipt = await ctx.execute_activity(book, amount)
    ctx.state["total"] += amount
    ctx.state["entries"].append(receipt)
    return {"total": ctx.state["total"], "receipt": receipt}


@update(workflow="budget")
def fail_update(ctx) -> None:
    raise KeyError("nope")


@update(workflow="budget")
async def spend_later(ctx) -> str:
    await ctx.sleep(3600)  # accepted, and not finished for an hour
    return "later"


class Escape(BaseException):
    """A handler's own BaseException: not a worker's stop."""


@query(workflow="budget")
def rotate_in_query(ctx) -> int:
    ctx.continue_as_new("someone else")


@query(workflow="budget")
def escape_in_query(ctx) -> int:
    raise Escape("out of the query")


@update(workflow="budget")
def rotate_in_update(ctx) -> str:
    ctx.continue_as_new("someone else")


def rotate_in_validator(ctx) -> None:
    ctx.continue_as_new("someone else")


@update(workflow="budget", validator=rotate_in_validator)
def rotate_validated(ctx) -> str:
    return "unreachable"


@update(workflow="budget")
def refund(ctx, amount: int) -> int:
    ctx.state["total"] -= amount
    return ctx.state["total"]


@workflow
async def account(ctx, balance: int = 0) -> int:
    """An entity that continues as new on the signal "control" = "rotate" and ends on "stop"."""
    ctx.state["balance"] = balance
    what = await ctx.wait_for_signal("control")
    await ctx.drain_admitted_updates()
    if what == "stop":
        return ctx.state["balance"]
    return ctx.continue_as_new(ctx.state["balance"])


@update(workflow="account")
def credit(ctx, amount: int) -> int:
    ctx.state["balance"] += amount
    return ctx.state["balance"]


@update(workflow="account")
def debit(ctx, amount: int) -> int:
    ctx.state["balance"] -= amount
    return ctx.state["balance"]


@workflow
async def counter(ctx) -> int:
    count = 0

    def bump(ctx, by: int) -> int:
        nonlocal count
        count += by
        return count

    ctx.register_query_handler("count", lambda ctx: count)
    ctx.register_update_handler("bump", bump)
    await ctx.wait_for_signal("stop")
    return count


app = App(
    workflows=[budget, counter, account],
    activities=[book],
    queries=[total, owner, greeting, broken, rotate_in_query, escape_in_query],
    updates=[spend, fail_update, spend_later, rotate_in_update, rotate_validated, refund, credit, debit],
)


def wait_until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def event_types(handle) -> list[str]:
    return [e["event_type"] for e in handle.history()]


def expire_requests(client: Client) -> None:
    """Every request row is past its deadline, as once its caller's timeout has passed."""
    with client.sql() as sql:
        sql.conn.execute("UPDATE harvest.query_requests SET expires_at = harvest.now() - interval '1 second'")


def rotate(handle) -> None:
    """The account continues as new; wait until its run has."""
    handle.signal("control", "rotate")
    wait_until(lambda: handle.describe()["status"] == "CONTINUED_AS_NEW", timeout=20)


def settled(handle) -> None:
    """The first workflow task is done and nothing is pending."""
    wait_until(lambda: "WorkflowTaskCompleted" in event_types(handle))
    with handle.client.sql() as sql:
        conn = sql.conn
        wait_until(
            lambda: (
                conn.execute(
                    "SELECT count(*) FROM harvest.tasks WHERE execution_id = %s", (handle.execution_id,)
                ).fetchone()[0]
                == 0
            )
        )


def test_query_answers_from_current_state_without_writing_history(start_worker, client: Client):
    start_worker(app)
    handle = client.start_workflow(budget, "ann")
    settled(handle)
    before = len(handle.history())
    assert handle.query("total") == 0
    assert handle.query("owner", True) == "ANN"
    assert handle.query("owner", False, timeout="5s") == "ann"
    assert len(handle.history()) == before
    with client.sql() as sql:
        rows = sql.conn.execute("SELECT kind, status FROM harvest.query_requests").fetchall()
    assert rows and all(r == ("query", "completed") for r in rows)


def test_a_worker_hears_of_work_and_queries_by_notify_not_at_its_poll_interval(
    start_worker, client: Client
) -> None:
    """Both of a lane's LISTEN loops (ShardLane.listen): with an hour's poll interval, only the
    tasks channel can wake the claim loop for the run and only the queries channel the
    responder for the query; either one deaf, this waits out its timeout."""
    running = start_worker(app, poll_interval=3600)
    # asleep (its mark committed), so the start notifies it rather than meeting its first look
    wait_until(lambda: running.worker.lanes and running.worker.lanes[0].sleeping, timeout=30)
    handle = client.start_workflow(budget, "ann")
    settled(handle)
    assert handle.query("owner", False, timeout=20) == "ann"


def test_unknown_query_and_a_raising_handler_are_clear_errors(start_worker, client: Client):
    start_worker(app)
    handle = client.start_workflow(budget, "ann")
    settled(handle)
    with pytest.raises(QueryFailed, match=r"no query handler 'nope'; known: .*'owner'") as info:
        handle.query("nope", timeout=10)
    assert info.value.error_type == "UnknownQuery"
    with pytest.raises(QueryFailed, match="RuntimeError: this query is broken"):
        handle.query("broken", timeout=10)


def test_a_query_handler_raising_a_base_exception_is_a_query_failure(start_worker, client: Client):
    """A BaseException (ctx.continue_as_new() raises one) is the handler's failure, answered at
    once, not a request every worker drops until the caller's QueryTimeout; a validator's too."""
    start_worker(app)
    handle = client.start_workflow(budget, "ann")
    settled(handle)
    with pytest.raises(QueryFailed, match=r"called ctx.continue_as_new\(\): queries and validators") as info:
        handle.query("rotate_in_query", timeout=10)
    assert info.value.error_type == "IllegalWorkflowOperation"
    with pytest.raises(QueryFailed, match="Escape: out of the query") as info:
        handle.query("escape_in_query", timeout=10)
    assert info.value.error_type == "Escape"
    with pytest.raises(UpdateRejected, match=r"called ctx.continue_as_new\(\)"):
        handle.update("rotate_validated", timeout=10)
    assert handle.query("total", timeout=10) == 0  # the worker answers on
    assert handle.describe()["status"] == "RUNNING"


def test_no_worker_is_a_timeout_that_says_so(client: Client):
    handle = client.start_workflow(budget, "ann")
    started = time.monotonic()
    with pytest.raises(QueryTimeout, match="no live worker polls task queue 'default'"):
        handle.query("total", timeout=0.5)
    assert time.monotonic() - started < 5


def test_validator_rejects_without_writing_history(start_worker, client: Client):
    start_worker(app)
    handle = client.start_workflow(budget, "ann")
    settled(handle)
    before = handle.history()
    with pytest.raises(UpdateRejected, match="amount must be positive") as info:
        handle.update("spend", -5, timeout=10)
    assert info.value.error_type == "ValueError"
    with pytest.raises(UpdateRejected, match="no update handler 'nope'"):
        handle.update("nope", 1, timeout=10)
    with pytest.raises(UpdateRejected, match="PayloadError"):
        handle.update("spend", "not a number", timeout=10)
    assert handle.history() == before


def test_accepted_update_is_recorded_once_and_returns_its_result(start_worker, client: Client):
    start_worker(app)
    handle = client.start_workflow(budget, "ann")
    settled(handle)
    assert handle.update("spend", 30, update_id="u-1", timeout=20) == {"total": 30, "receipt": "booked 30"}
    # Asking again with the same update id returns the recorded outcome; nothing runs twice.
    assert handle.update("spend", 30, update_id="u-1", timeout=20) == {"total": 30, "receipt": "booked 30"}
    assert handle.query("total") == 30
    with pytest.raises(UpdateRejected, match="the budget is 100"):
        handle.update("spend", 80, timeout=10)
    with pytest.raises(UpdateFailed, match="KeyError") as info:
        handle.update("fail_update", timeout=10)
    assert info.value.error_type == "KeyError"
    handle.signal("close")
    assert handle.result(timeout=30) == {"total": 30, "entries": ["booked 30"]}
    types = event_types(handle)
    assert types.count("UpdateAccepted") == 2 and types.count("UpdateCompleted") == 2
    accepted = [e["event_data"] for e in handle.history() if e["event_type"] == "UpdateAccepted"]
    assert accepted[0] == {"update_id": "u-1", "name": "spend", "input": 30}
    # A finished run still answers queries (from a replay of its history), but takes no update.
    assert handle.query("total") == 30
    with pytest.raises(WorkflowNotRunning, match="COMPLETED"):
        handle.update("spend", 1)


def test_wait_accepted_returns_a_handle_and_drain_waits_for_it(start_worker, client: Client):
    handle = client.start_workflow(budget, "bob")
    accepted = None

    # No worker yet: start one, then ask; the update returns once it is recorded.
    start_worker(app)
    settled(handle)
    accepted = handle.update("spend", 10, wait="accepted", timeout=20)
    assert isinstance(accepted, UpdateHandle)
    assert "UpdateAccepted" in event_types(handle)
    handle.signal("close")  # the workflow drains the admitted update before returning
    assert accepted.result(timeout=20) == {"total": 10, "receipt": "booked 10"}
    assert handle.result(timeout=30) == {"total": 10, "entries": ["booked 10"]}


def test_update_with_start_starts_then_attaches(start_worker, client: Client):
    start_worker(app)
    first, result = client.update_with_start(
        counter, workflow_id="counter-1", update="bump", update_arg=2, timeout=20
    )
    assert first.started_fresh and result == 2
    second, result = client.update_with_start(
        counter, workflow_id="counter-1", update="bump", update_arg=3, timeout=20
    )
    assert not second.started_fresh and second.execution_id == first.execution_id
    assert result == 5
    assert first.query("count") == 5
    with pytest.raises(UpdateRejected, match="no update handler 'other'"):
        first.update("other", 1, timeout=10)
    first.signal("stop")
    assert first.result(timeout=30) == 5


def test_async_update_with_start(start_worker, db: str):
    from harvest import AsyncClient

    start_worker(app)

    async def go() -> tuple:
        async with await AsyncClient.connect(db) as aclient:
            first, one = await aclient.update_with_start(
                counter, workflow_id="counter-async", update="bump", update_arg=2, timeout=20
            )
            second, two = await aclient.update_with_start(
                counter, workflow_id="counter-async", update="bump", update_arg=3, timeout=20
            )
            await second.signal("stop")
            return first, one, second, two, await first.result(timeout=30)

    first, one, second, two, final = asyncio.run(go())
    assert first.started_fresh and not second.started_fresh
    assert second.execution_id == first.execution_id
    assert (one, two, final) == (2, 5, 5)


def test_queries_work_from_a_cold_worker(start_worker, client: Client):
    """A second worker with an empty cache answers from a replay of the history."""
    worker = start_worker(app)
    handle = client.start_workflow(counter)
    settled(handle)
    assert handle.update("bump", 4, timeout=20) == 4
    worker.stop()
    start_worker(app, cache_size=0)
    assert handle.query("count", timeout=20) == 4
    assert handle.update("bump", 1, timeout=20) == 5


def test_an_accepted_update_not_finished_in_time_says_how_to_wait_again(start_worker, client: Client):
    start_worker(app)
    handle = client.start_workflow(budget, "dan")
    settled(handle)
    with pytest.raises(QueryTimeout) as info:
        handle.update("spend_later", update_id="later-1", timeout=1)
    text = str(info.value)
    assert f"update later-1 was accepted and is recorded on execution {handle.execution_id}" in text
    assert "ask again with update_id='later-1'" in text
    handle.terminate()


def test_continue_as_new_in_an_update_handler_fails_the_update_and_the_run_goes_on(
    start_worker, client: Client
):
    """The handler's ContinueAsNew (a BaseException) completes the update as a typed failure,
    recorded and answered at once; the run neither rotates nor loses the update."""
    start_worker(app)
    handle = client.start_workflow(budget, "ann")
    settled(handle)
    with pytest.raises(UpdateFailed, match="continue_as_new is not allowed in an update handler") as info:
        handle.update("rotate_in_update", timeout=10)
    assert info.value.error_type == "IllegalWorkflowOperation"
    assert handle.describe()["status"] == "RUNNING"
    assert "UpdateCompleted" in event_types(handle)
    handle.signal("close")
    assert handle.result(timeout=30) == {"total": 0, "entries": []}


def test_an_update_id_is_one_update_even_after_its_request_expired(start_worker, client: Client):
    """The same id under another update name is refused (HR001) whether the first request's row
    is live or gone; it never answers with the other update's recorded result."""
    start_worker(app)
    handle = client.start_workflow(budget, "ann")
    settled(handle)
    assert handle.update("refund", 10, update_id="op-0", timeout=10) == -10
    with pytest.raises(InvalidArgument, match=r'already used by update "refund".*not by "fail_update"'):
        handle.update("fail_update", update_id="op-0", timeout=10)
    expire_requests(client)
    with pytest.raises(InvalidArgument, match=r'already used by update "refund".*not by "fail_update"'):
        handle.update("fail_update", update_id="op-0", timeout=10)
    assert handle.update("refund", 10, update_id="op-0", timeout=10) == -10  # the recorded outcome
    handle.signal("close")
    assert handle.result(timeout=30)["total"] == -10


def test_an_update_retried_after_the_run_continued_as_new_is_not_applied_twice(start_worker, client: Client):
    """A retry of update_with_start, or of an update by workflow_id, reaches the successor of a
    rotated run: the id is found in the run it continued from and answered from there."""
    start_worker(app)
    handle, first = client.update_with_start(
        account, workflow_id="acct-1", update="credit", update_arg=5, update_id="credit-1", timeout=20
    )
    assert first == 5
    rotate(handle)
    expire_requests(client)
    _, again = client.update_with_start(
        account, workflow_id="acct-1", update="credit", update_arg=5, update_id="credit-1", timeout=20
    )
    by_key = client.get_handle(workflow_id="acct-1", workflow=account)
    assert by_key.update("credit", 5, update_id="credit-1", timeout=20) == 5
    with pytest.raises(InvalidArgument, match='already used by update "credit"'):
        by_key.update("debit", 5, update_id="credit-1", timeout=20)
    rotate(by_key)
    assert by_key.update("credit", 5, update_id="credit-1", timeout=20) == 5  # two runs back
    by_key.signal("control", "stop")
    assert (again, by_key.result(timeout=30)) == (5, 5)


def test_an_argument_a_query_does_not_take_is_refused_not_dropped(start_worker, client: Client):
    """handle.query("total", 5) ran total(ctx) and answered as if nothing was passed: the caller
    believed its argument was used. It is refused, naming the argument and the handler's
    signature; so is an update's (at validation: nothing is accepted)."""
    start_worker(app)
    handle = client.start_workflow(budget, "ann")
    settled(handle)
    with pytest.raises(QueryFailed, match=r"query 'total' takes no argument.*total\(ctx\).*given 5 \(int\)"):
        handle.query("total", 5)
    assert handle.query("total") == 0  # no argument (None) is no argument
    with pytest.raises(UpdateRejected, match=r"update 'fail_update' takes no argument.*given 'x' \(str\)"):
        handle.update("fail_update", "x")
    assert "UpdateAccepted" not in event_types(handle)
    handle.signal("close")
    assert handle.result(timeout=30) == {"total": 0, "entries": []}


def test_a_query_s_missing_argument_is_named_and_a_default_applies(start_worker, client: Client):
    """handle.query("owner") for owner(ctx, shout: bool) said "expected bool, got NoneType None";
    it now says the query takes an argument and none was given. A handler whose parameter has a
    default got None decoded against the hint and failed the same way: the default applies."""
    start_worker(app)
    handle = client.start_workflow(budget, "ann")
    settled(handle)
    with pytest.raises(
        QueryFailed, match=r"query 'owner' takes an argument: .*owner\(ctx, shout: bool\).*none was given"
    ):
        handle.query("owner")
    with pytest.raises(UpdateRejected, match=r"update 'refund' takes an argument: .*none was given"):
        handle.update("refund")
    assert handle.query("greeting") == "hello ann"
    assert handle.query("greeting", True) == "hello ann!"
    handle.signal("close")
    assert handle.result(timeout=30)["total"] == 0
