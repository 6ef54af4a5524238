"""The test kit (harvest.testing.WorkflowEnvironment, docs/testing.md): a real database, a worker
in this process, activity mocks, time skipping over the shared test clock, and the pytest plugin."""

from __future__ import annotations

import asyncio
import datetime as dt
import enum
import importlib.metadata
import itertools
import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import NamedTuple, TypedDict

import psycopg
import pytest

from harvest import App, RetryPolicy, activity, query, update, workflow
from harvest.core.errors import (
    ActivityFailure,
    InvalidArgument,
    QueryFailed,
    SignalTimeout,
    TimeoutError_,
    WorkflowFailed,
    WorkflowTimedOut,
)
from harvest.db import testkit
from harvest.testing import TestServer, WorkflowEnvironment

ROOT = Path(__file__).resolve().parents[2]


class Carrier(enum.Enum):
    POST = "post"
    COURIER = "courier"


@activity(retry=RetryPolicy.exponential(max_attempts=4, initial="1h", maximum="1d"), dead_letter=False)
async def charge(ctx, order_id: str, amount: int) -> dict:
    raise RuntimeError("the real payment service must not be called in tests")


@workflow
async def checkout(ctx, order_id: str, amount: int) -> dict:
    await ctx.sleep("1d")
    receipt = await ctx.execute_activity(charge, order_id, amount)
    return {"receipt": receipt, "at": ctx.now().isoformat()}


@workflow
async def weekly(ctx) -> list:
    days = []
    for _ in range(7):
        await ctx.sleep("1d")
        days.append(ctx.now().isoformat())
    return days


@workflow
async def approval(ctx, request: str) -> str:
    ctx.state.update(status="waiting", request=request)
    try:
        decision = await ctx.wait_for_signal("decide", timeout="3d")
    except SignalTimeout:
        ctx.state["status"] = "expired"
        return "expired"
    ctx.state["status"] = decision
    await ctx.drain_admitted_updates()
    return decision


@query(workflow="approval")
def status(ctx) -> str:
    return ctx.state["status"]


@update(workflow="approval")
def rename(ctx, request: str) -> str:
    ctx.state["request"] = request
    return f"renamed to {request}"


@workflow
async def reminder(ctx) -> str:
    ctx.state["phase"] = "sleeping"
    await ctx.sleep("1h")
    ctx.state["phase"] = "awake"
    await ctx.wait_for_signal("done")
    return "done"


@query(workflow="reminder")
def phase(ctx) -> str:
    return ctx.state["phase"]


@activity(local=True)
def lookup_rate(ctx, currency: str) -> float:
    raise RuntimeError("the real rates service must not be called in tests")


@workflow
async def convert(ctx, amount: float) -> float:
    return amount * await ctx.execute_local_activity(lookup_rate, "EUR")


class Parcel(NamedTuple):
    sku: str
    weight: Decimal
    shipped: dt.date


class Label(TypedDict):
    parcel: Parcel
    barcode: bytes
    carrier: Carrier
    tracking: uuid.UUID | None


@activity
def print_label(ctx, parcel: Parcel, carrier: Carrier) -> Label:
    raise RuntimeError("mocked in the tests")


@workflow
async def ship(ctx, parcel: Parcel, carrier: Carrier = Carrier.POST) -> Label:
    label = await ctx.execute_activity(print_label, parcel, carrier)
    assert isinstance(label["parcel"], Parcel) and isinstance(label["barcode"], bytes)
    return label


@workflow
async def forever(ctx) -> None:
    await ctx.wait_for_signal("never")


@workflow
async def forgets_to_await(ctx) -> None:
    ctx.sleep("1d")  # a bug of the code under test: its workflow task fails on every attempt


@workflow
async def parent_of_forever(ctx) -> None:
    await ctx.execute_child_workflow(forever)


@workflow
async def mistyped(ctx) -> int:
    return "seven"  # type: ignore[return-value]  (a bug of the code under test)


@workflow
async def prices(ctx, sku: int) -> int:
    table: dict[int, int] = {}
    return table[sku]  # the line a failed test's report must show


app = App(
    workflows=[
        checkout,
        weekly,
        approval,
        reminder,
        convert,
        ship,
        forever,
        parent_of_forever,
        forgets_to_await,
        mistyped,
        prices,
    ],
    activities=[charge, lookup_rate, print_label],
    queries=[status, phase],
    updates=[rename],
)
# The database's clock and this process's differ by a few milliseconds.
SLACK = dt.timedelta(seconds=1)


@pytest.fixture(scope="module")
def kit_server(pg_server) -> Iterator[TestServer]:
    """The test kit's server is the suite's own (a template of its own on it, dropped after)."""
    server = TestServer(dsn=pg_server.dsn).start()
    yield server
    server.stop()
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        left = conn.execute("SELECT count(*) FROM pg_database WHERE datname = %s", (server.template,))
        assert left.fetchone()[0] == 0


@pytest.fixture
def env(kit_server: TestServer) -> Iterator[WorkflowEnvironment]:
    with WorkflowEnvironment(app, server=kit_server) as environment:
        yield environment


# No wall-clock bound in these tests (a loaded CI machine makes one flaky): a real day, week or
# backoff could not end inside the wait's timeout, and the skips and the moved clock are the proof.
def test_a_one_day_timer_is_skipped_with_a_mocked_activity(env: WorkflowEnvironment):
    env.mock_activity("charge", lambda ctx, order_id, amount: {"order": order_id, "charged": amount})
    handle = env.client.start_workflow(checkout, "order-1", 42)
    result = handle.result(timeout=10)
    assert result["receipt"] == {"order": "order-1", "charged": 42}
    assert env.skips >= 1
    assert [(c.args, c.kwargs) for c in env.activity_calls(charge)] == [(("order-1", 42), {})]
    # ctx.now() in the workflow and harvest.now() in the database both read the moved clock.
    assert dt.datetime.fromisoformat(result["at"]) - dt.datetime.now(dt.UTC) > dt.timedelta(hours=23)
    assert env.now() - dt.datetime.now(dt.UTC) > dt.timedelta(hours=23)


def test_a_simulated_week_is_skipped_day_by_day(env: WorkflowEnvironment):
    days = env.client.start_workflow(weekly).result(timeout=10)
    stamps = [dt.datetime.fromisoformat(d) for d in days]
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert all(dt.timedelta(days=1) <= gap < dt.timedelta(days=1, minutes=1) for gap in gaps), gaps
    assert env.skips >= 7


def test_retry_backoff_is_skipped_and_the_mock_sees_each_attempt(env: WorkflowEnvironment):
    attempts = []

    async def flaky(ctx, order_id: str, amount: int) -> dict:
        attempts.append(ctx.attempt())
        if ctx.attempt() < 3:
            raise ActivityFailure("Declined", "try again later")
        return {"charged": amount}

    env.mock_activity(charge, flaky)
    result = env.client.start_workflow(checkout, "order-2", 7).result(timeout=10)
    assert result["receipt"] == {"charged": 7}
    assert attempts == [1, 2, 3]  # backoffs of 1 h and 2 h, skipped
    assert env.now() - dt.datetime.now(dt.UTC) > dt.timedelta(days=1, hours=3) - SLACK


def test_a_timeout_is_simulated_by_a_mock_raising_its_failure(env: WorkflowEnvironment):
    """docs/testing.md: a mock raising ActivityFailure("StartToCloseTimeout", ...) gives the
    workflow what a real overrun gives it, retried per the policy (a plain TimeoutError the
    activity raises is its own failure, typed TimeoutError)."""
    attempts = []

    def slow(ctx, order_id: str, amount: int) -> dict:
        attempts.append(ctx.attempt())
        raise ActivityFailure("StartToCloseTimeout", "simulated: the gateway hung")

    env.mock_activity(charge, slow)
    with pytest.raises(WorkflowFailed, match="StartToCloseTimeout"):
        env.client.start_workflow(checkout, "order-t", 1).result(timeout=10)
    assert attempts == [1, 2, 3, 4]


def test_a_local_activity_is_mocked_too(env: WorkflowEnvironment):
    env.mock_activity(lookup_rate, lambda ctx, currency: 2.0)
    assert env.client.start_workflow(convert, 21.0).result(timeout=10) == 42.0
    assert env.activity_calls("lookup_rate")[0].args == ("EUR",)


def test_rich_payloads_round_trip_through_the_database(env: WorkflowEnvironment):
    """A NamedTuple, a TypedDict, bytes, an enum, a Decimal, a date, a UUID and an Optional,
    as workflow and activity parameters and results (docs/activities.md, "Payloads")."""
    tracking = uuid.uuid4()

    def label(ctx, parcel: Parcel, carrier: Carrier) -> Label:
        assert isinstance(parcel, Parcel) and isinstance(parcel.weight, Decimal)
        assert carrier is Carrier.COURIER
        return {"parcel": parcel, "barcode": b"\x00\x01\xff", "carrier": carrier, "tracking": tracking}

    env.mock_activity(print_label, label)
    parcel = Parcel("sku-1", Decimal("1.25"), dt.date(2030, 5, 1))
    result = env.client.start_workflow(ship, parcel, Carrier.COURIER).result(timeout=10)
    barcode = b"\x00\x01\xff"
    assert result == {"parcel": parcel, "barcode": barcode, "carrier": Carrier.COURIER, "tracking": tracking}


def test_unmocked_activity_runs_the_real_one(env: WorkflowEnvironment):
    env.mock_activity(charge, lambda ctx, order_id, amount: "mocked")
    env.unmock_activity(charge)
    with pytest.raises(WorkflowFailed, match="real payment service"):
        env.client.start_workflow(checkout, "order-3", 1).result(timeout=10)
    assert env.skips >= 3  # four attempts, their backoffs (15 h) skipped


def test_time_stands_still_until_a_result_is_awaited(env: WorkflowEnvironment):
    """Signals, queries and updates go through the handle; a signal sent before the result is
    awaited beats a three-day timeout, because nothing skips time while no one waits."""
    handle = env.client.start_workflow(approval, "laptop")
    env.wait_until_idle()  # the first workflow task has run: the state is there to query
    assert handle.query("status", timeout=10) == "waiting"
    assert handle.update("rename", "monitor", timeout=10) == "renamed to monitor"
    start = env.now()
    handle.signal("decide", "approved")
    assert handle.result(timeout=10) == "approved"
    assert env.now() - start < dt.timedelta(minutes=1)
    assert env.skips == 0


def test_a_signal_timeout_fires_at_once_when_the_result_is_awaited(env: WorkflowEnvironment):
    handle = env.client.start_workflow(approval, "desk")
    assert handle.result(timeout=10) == "expired"
    assert env.now() - dt.datetime.now(dt.UTC) >= dt.timedelta(days=3) - SLACK


def test_a_query_given_an_argument_it_does_not_take_is_refused(env: WorkflowEnvironment):
    """The test kit's queries are the worker's: an extra argument is an error, not dropped."""
    handle = env.client.start_workflow(approval, "chair")
    env.wait_until_idle()
    with pytest.raises(QueryFailed, match=r"query 'status' takes no argument.*status\(ctx\).*'verbose'"):
        handle.query("status", "verbose", timeout=10)
    assert handle.query("status", timeout=10) == "waiting"


def test_env_sleep_moves_the_clock_by_hand(env: WorkflowEnvironment):
    handle = env.client.start_workflow(reminder)
    env.wait_until_idle()
    assert handle.query("phase", timeout=10) == "sleeping"
    env.sleep("30m")
    assert handle.query("phase", timeout=10) == "sleeping"
    env.sleep(dt.timedelta(minutes=31))
    assert handle.query("phase", timeout=10) == "awake"
    handle.signal("done")
    assert handle.result(timeout=10) == "done"


@pytest.mark.parametrize(
    "duration",
    [-3600, "-1h", dt.timedelta(hours=-1), 400 * 365 * 86400, dt.timedelta(days=999_999_999), float("nan")],
)
def test_env_sleep_refuses_a_negative_or_too_long_duration_of_any_form(env: WorkflowEnvironment, duration):
    """A timedelta is checked as seconds and strings are (it was taken as is: a negative one did
    nothing without a word, one past the database's last timestamp broke the environment's clock),
    and a refused sleep leaves the clock where it was."""
    before = env.now()
    with pytest.raises(InvalidArgument):
        env.sleep(duration)
    assert before <= env.now() < before + dt.timedelta(minutes=1)
    assert env.client.start_workflow(weekly).result(timeout=10)  # the environment still works


def test_a_run_timeout_is_skipped_to(env: WorkflowEnvironment):
    handle = env.client.start_workflow(forever, run_timeout="2d")
    with pytest.raises(WorkflowTimedOut):
        handle.result(timeout=10)
    assert env.now() - dt.datetime.now(dt.UTC) >= dt.timedelta(days=2) - SLACK


def test_time_skipping_paused_leaves_the_clock_alone(env: WorkflowEnvironment):
    from harvest.core.errors import TimeoutError_

    handle = env.client.start_workflow(weekly)
    with env.time_skipping_paused(), pytest.raises(TimeoutError_):
        handle.result(timeout=0.3)
    assert env.skips == 0
    assert len(handle.result(timeout=10)) == 7


def test_without_time_skipping_the_clock_is_real(kit_server: TestServer):
    with WorkflowEnvironment(app, server=kit_server, time_skipping=False) as env:
        handle = env.client.start_workflow(approval, "chair")
        from harvest.core.errors import TimeoutError_

        with pytest.raises(TimeoutError_):
            handle.result(timeout=0.3)
        assert abs(env.now() - dt.datetime.now(dt.UTC)) < dt.timedelta(seconds=5)


def test_an_asyncio_client_gets_the_same_time_skipping(env: WorkflowEnvironment):
    env.mock_activity("charge", lambda ctx, order_id, amount: {"ok": True})

    async def main() -> dict:
        async with await env.async_client() as client:
            handle = await client.start_workflow(checkout, "order-4", 3)
            return await handle.result(timeout=10)

    assert asyncio.run(main())["receipt"] == {"ok": True}


def test_a_failed_run_s_error_carries_where_the_workflow_raised(env: WorkflowEnvironment):
    """The kit's clients add the workflow's traceback to WorkflowFailed as a note (pytest prints
    it under the error): its message alone named the KeyError but not the line."""
    with pytest.raises(WorkflowFailed, match="KeyError: 7") as sync_error:
        env.client.start_workflow(prices, 7).result(timeout=10)

    async def main() -> None:
        async with await env.async_client() as client:
            handle = await client.start_workflow(prices, 7)
            await handle.result(timeout=10)

    with pytest.raises(WorkflowFailed) as async_error:
        asyncio.run(main())
    for error in (sync_error.value, async_error.value):
        (note,) = error.__notes__
        assert note.startswith("the workflow's traceback:\nTraceback (most recent call last):")
        assert "return table[sku]  # the line a failed test's report must show" in note
    # A client of the user's own on env.dsn is a production client: no note.
    from harvest import Client

    with Client(env.dsn) as client, pytest.raises(WorkflowFailed) as plain:
        client.start_workflow(prices, 7).result(timeout=10)
    assert not getattr(plain.value, "__notes__", None)


def test_the_shared_clock_is_per_database_and_owner_only(env: WorkflowEnvironment, db: str):
    """Moving one test database's clock moves no other; a harvest role cannot move it, and a
    session that sets harvest.fake_now = 'shared' where the switch is off sees real time."""
    env.sleep("10d")
    with psycopg.connect(testkit.shared_clock_dsn(db), autocommit=True) as other:
        other.execute("UPDATE harvest.engine_settings SET test_clock_allowed = false")
        other.execute("UPDATE harvest.engine_settings SET test_clock_offset = interval '5 days'")
        now, real = other.execute("SELECT harvest.now(), now()").fetchone()
        assert now == real
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        now, real = conn.execute("SELECT harvest.now(), now()").fetchone()
        assert now - real >= dt.timedelta(days=10)
        conn.execute("SET ROLE harvest_admin")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("UPDATE harvest.engine_settings SET test_clock_offset = interval '0'")


def test_the_pytest_plugin_fixtures(pg_server, tmp_path: Path):
    """A user's test file, run by pytest in a process of its own with only the plugin
    (registered by the package's pytest11 entry point) and a harvest_app fixture."""
    (tmp_path / "conftest.py").write_text(
        textwrap.dedent(
            """
            import pytest
            from harvest import App, workflow

            @workflow
            async def nap(ctx, days: int) -> str:
                await ctx.sleep(f"{days}d")
                return "rested"

            @pytest.fixture
            def harvest_app():
                return App(workflows=[nap])
            """
        )
    )
    (tmp_path / "test_user.py").write_text(
        textwrap.dedent(
            """
            def test_nap(harvest_env):
                assert harvest_env.client.start_workflow("nap", 30).result(timeout=10) == "rested"
                assert harvest_env.skips >= 1

            def test_database(harvest_database):
                assert "harvest_test_" in harvest_database

            def test_one_server_for_the_fixtures_and_a_plain_environment(harvest_server, harvest_app):
                # WorkflowEnvironment(app) clones on default_server(): the fixture is that one,
                # so a suite using both migrates one template, not two
                from harvest.testing import WorkflowEnvironment, default_server

                assert harvest_server is default_server()
                with WorkflowEnvironment(harvest_app) as env:
                    assert env.client.start_workflow("nap", 1).result(timeout=10) == "rested"
            """
        )
    )
    # Only Harvest's plugin (loaded by its entry point, not named here): the others this
    # environment installs (schemathesis, hypothesis, pytest-postgresql ...) are switched off,
    # as their loading cost 3 s of CPU of this test's 5.
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)]
    for entry in importlib.metadata.entry_points(group="pytest11"):
        if not entry.value.startswith("harvest."):
            args += ["-p", f"no:{entry.name}"]
    run = subprocess.run(
        args,
        cwd=tmp_path,
        env={**os.environ, "HARVEST_TEST_DSN": pg_server.dsn},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "3 passed" in run.stdout


def test_the_plugin_asks_for_harvest_app_in_one_line():
    """Its message spelled a newline as a backslash and an n."""
    from harvest.testing import pytest_plugin

    with pytest.raises(pytest.UsageError) as error:
        pytest_plugin.harvest_app.__wrapped__()
    assert "\\" not in str(error.value) and "\n" not in str(error.value)
    assert "`def harvest_app(): return App(workflows=[...])` under `@pytest.fixture`" in str(error.value)


def test_a_paused_run_s_waiting_work_does_not_stop_time_skipping(env: WorkflowEnvironment):
    """A paused run's workflow task (a signal woke it) waits in 'paused' with a due time that has
    passed: no worker may claim it, so it is not work that can run. It held time skipping up, and
    a result awaited beside it waited out its own timeout instead of a few milliseconds."""
    paused = env.client.start_workflow(forever)
    env.wait_until_idle()
    assert paused.pause("held for the test")
    paused.signal("never")  # its workflow task is 'paused', due now
    assert len(env.client.start_workflow(weekly).result(timeout=10)) == 7
    assert paused.describe()["status"] == "PAUSED"


def test_a_failing_workflow_task_is_not_skipped_into_a_spin(env: WorkflowEnvironment):
    """Time skipping moved the clock past each 5 s retry of a workflow task that fails on every
    attempt (a bug of the workflow code): the worker retried it hundreds of times a second, each
    logged at ERROR, until the test's result wait ran out with "still running". Its retries keep
    real time; the wait's error quotes the failure."""
    handle = env.client.start_workflow(forgets_to_await)
    with pytest.raises(TimeoutError_, match=r"its workflow task fails .*IllegalWorkflowOperation"):
        handle.result(timeout=1)
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        attempts = conn.execute(
            "SELECT attempt FROM harvest.tasks WHERE execution_id = %s AND kind = 'workflow'",
            (handle.execution_id,),
        ).fetchone()[0]
    assert attempts <= 2  # the first attempt, and at most one retry 5 s of real time later


def test_a_result_its_return_hint_does_not_allow_fails_the_task_not_the_run(env: WorkflowEnvironment):
    """`-> int` returning "seven" completed the run; only the client's decode raised, after the
    fact, and a parent reading it as a child failed in turn. The worker now refuses to complete
    it: the task fails (retried in real time, as any bug of the workflow code), the run stays
    RUNNING with no result recorded, and the wait's error quotes why."""
    handle = env.client.start_workflow(mistyped)
    with pytest.raises(
        TimeoutError_,
        match=r"its workflow task fails .*PayloadError: workflow 'mistyped' "
        r"returned str 'seven', which its return hint int does not allow",
    ):
        handle.result(timeout=1)
    assert handle.describe()["status"] == "RUNNING"
    assert "WorkflowCompleted" not in [e["event_type"] for e in handle.history()]


def _within(seconds: float, wait, *args):
    """``wait(*args)`` in a thread, given ``seconds`` to end: what it returned or raised.
    (A wait that would hang fails the test here instead of hanging the session.)"""
    import threading

    outcome: dict = {}

    def run() -> None:
        try:
            outcome["value"] = wait(*args)
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still waiting after {seconds}s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def test_a_result_wait_on_a_run_nothing_can_move_fails_naming_what_it_waits_for(kit_server: TestServer):
    """result() with no timeout on a run waiting for a signal nobody sends waited for ever: the
    test hung the session. Nothing can run and no timer is pending, so after stuck_after of
    that the wait fails and says what the run waits on (a child's wait included)."""
    with WorkflowEnvironment(app, server=kit_server, stuck_after="200ms") as env:
        handle = env.client.start_workflow(forever)
        handle.signal("nevr")  # a misspelt name: buffered unread, and named
        began = time.monotonic()
        with pytest.raises(
            TimeoutError_,
            match=r"cannot go on: nothing in the test environment can make it progress: .*; "
            r"forever: waits for signal 'never', which nobody has sent \(signals of other names wait "
            r"unread: 'nevr' \(1\)\)\. Send it before waiting",
        ):
            _within(20, handle.result)
        assert time.monotonic() - began < 10
        parent = env.client.start_workflow(parent_of_forever)
        with pytest.raises(
            TimeoutError_, match=r"waits for its child forever \(.*\), which waits for signal 'never'"
        ):
            _within(20, parent.result)
        # The run is untouched, and a later wait with the signal sent completes.
        handle.signal("never", "at last")
        assert handle.result() is None


def test_an_asyncio_result_wait_on_a_stuck_run_fails_too(kit_server: TestServer):
    async def go() -> None:
        async with await env.async_client() as client:
            handle = await client.start_workflow(forever)
            with pytest.raises(TimeoutError_, match=r"waits for signal 'never'"):
                await asyncio.wait_for(handle.result(), 20)

    with WorkflowEnvironment(app, server=kit_server, stuck_after="200ms") as env:
        asyncio.run(go())


def test_a_signal_sent_while_the_result_is_awaited_still_gets_through(env: WorkflowEnvironment):
    """The stuck check waits stuck_after (2 s by default) of nothing able to run: a signal sent
    from another thread once the wait is registered arrives in time."""
    import threading

    handle = env.client.start_workflow(forever)

    def send_once_waited() -> None:
        with psycopg.connect(env.dsn, autocommit=True) as conn:
            while not conn.execute("SELECT count(*) FROM harvest.result_waiters").fetchone()[0]:
                time.sleep(0.01)
        handle.signal("never", "here")

    sender = threading.Thread(target=send_once_waited, daemon=True)
    sender.start()
    assert _within(20, handle.result) is None
    sender.join(5)


def test_a_result_wait_without_timeout_is_bounded_and_names_the_mock_still_running(kit_server: TestServer):
    """A mocked activity that never returns is work in flight (nothing is stuck by the clock's
    measure), so result() waited for ever; a result() given no timeout is now bounded by
    result_timeout and says which mock is still running."""
    import threading

    release = threading.Event()
    with WorkflowEnvironment(app, server=kit_server, result_timeout="500ms") as env:
        env.mock_activity(print_label, lambda ctx, parcel, carrier: release.wait(30) and {})
        handle = env.client.start_workflow(ship, Parcel("sku", Decimal("1.5"), dt.date(2026, 1, 1)))
        try:
            with pytest.raises(
                TimeoutError_,
                match=r"still running after 0\.5s; the test environment bounds a "
                r"result\(\) given no timeout to 0\.5s .*mocked activities still running: 'print_label'",
            ):
                _within(20, handle.result)
            with pytest.raises(TimeoutError_, match=r"after 0\.1s$"):  # a timeout given is the caller's
                handle.result(timeout=0.1)
        finally:
            release.set()


def test_a_stuck_wait_on_a_dead_lettered_activity_says_so(kit_server: TestServer):
    """An activity no worker registers is dead-lettered: nothing can run, and the stuck wait
    quotes the dead letter (as a timed-out wait does), not "waits for a signal"."""
    unregistered = App(workflows=[ship], activities=[])
    with WorkflowEnvironment(unregistered, server=kit_server, stuck_after="200ms") as env:
        handle = env.client.start_workflow(ship, Parcel("sku", Decimal("1"), dt.date(2026, 1, 1)))
        with pytest.raises(
            TimeoutError_, match=r"ship: its activity 'print_label' is dead-lettered .*ActivityNotRegistered"
        ) as err:
            _within(20, handle.result)
        assert "Send it before waiting" not in str(err.value)


@activity
async def render_on_gpu(ctx, frame: int) -> int:
    return frame


@workflow
async def render_elsewhere(ctx) -> int:
    return await ctx.execute_activity(render_on_gpu, 1, queue="gpu-pool")


def test_a_task_on_a_queue_the_worker_does_not_poll_is_not_work_it_can_do(
    kit_server: TestServer,
):
    """An activity sent to a queue the environment's worker does not poll ("gpu-pool": another
    fleet's in production) is a task due now that nothing here will ever take. It kept the
    environment busy: wait_until_idle and env.sleep never settled (TimeoutError_ "still busy"),
    and a result wait was never found stuck, only ended by the result_timeout bound, saying
    nothing of the queue. It is now not work the environment can do, and the stuck wait names
    the queue."""
    gpu = App(workflows=[render_elsewhere], activities=[render_on_gpu])
    with WorkflowEnvironment(gpu, server=kit_server, stuck_after="200ms", result_timeout="20s") as env:
        handle = env.client.start_workflow(render_elsewhere)
        env.wait_until_idle(timeout=5)  # the decision ran; the activity's task waits on gpu-pool
        before = env.now()
        env.sleep("1h", settle_timeout=5)
        assert env.now() - before >= dt.timedelta(hours=1)
        with pytest.raises(
            TimeoutError_,
            match=r"nothing in the test environment can make it progress: .*render_elsewhere: its activity "
            r"'render_on_gpu' waits on queue 'gpu-pool', which the environment's worker does not poll "
            r"\(it polls 'default'; WorkflowEnvironment\(\.\.\., queues=\[\.\.\.\]\) names",
        ):
            _within(20, handle.result)


def test_the_environment_s_result_bound_and_stuck_check_can_be_turned_off(kit_server: TestServer):
    with pytest.raises(InvalidArgument, match="result_timeout"):
        WorkflowEnvironment(app, server=kit_server, result_timeout=0)
    with WorkflowEnvironment(app, server=kit_server, result_timeout=None, stuck_after=None) as env:
        handle = env.client.start_workflow(forever)
        # no stuck check: the wait's own timeout ends it, with what the run's stack says
        with pytest.raises(TimeoutError_, match=r"still running after 1s; it waits for signal 'never'$"):
            handle.result(timeout=1)


# -- mistakes a test author makes, refused where they are made (no database needed) ----------


def test_a_mock_that_cannot_take_the_activity_s_arguments_is_refused_when_made():
    """A mock missing a parameter failed only when the activity ran: each attempt a TypeError
    about a lambda, then a dead letter, and the test saw its result wait time out."""
    environment = WorkflowEnvironment(app)
    with pytest.raises(TypeError, match=r"mock for activity 'charge' .*\(ctx, order_id, amount\)"):
        environment.mock_activity(charge, lambda ctx, order_id: {})
    with pytest.raises(TypeError, match=r"mock for activity 'charge'"):
        environment.mock_activity("charge", lambda: "charged")  # no ctx
    # what can take the arguments is accepted: named alike or not, *args, a default, async
    environment.mock_activity(charge, lambda ctx, a, b, c=None: {})
    environment.mock_activity(charge, lambda *args: {})

    async def mocked(ctx, order_id, amount):
        return {}

    environment.mock_activity(charge, mocked)


def test_a_mock_of_a_name_close_to_a_registered_one_warns():
    """Mocking a name the App does not register is allowed (another service's activity), so a
    misspelt name mocked nothing and the real activity ran; a near miss now warns."""
    environment = WorkflowEnvironment(app)
    with pytest.warns(UserWarning, match=r"no activity 'chrage'.*did you mean 'charge'"):
        environment.mock_activity("chrage", lambda ctx, order_id, amount: {})
    environment.mock_activity("payments.refund", lambda ctx, charge_id: {})  # far from any: silent


def test_an_unknown_environment_option_is_refused_when_made_naming_the_options():
    # It reached the Worker only on entering, which listed the Worker's options and not the
    # environment's own (time_skipping misspelt was reported as an unknown Worker option).
    unknown = r"WorkflowEnvironment\(\) got unknown option\(s\) time_skiping \(did you mean time_skipping\?\)"
    with pytest.raises(TypeError, match=unknown):
        WorkflowEnvironment(app, time_skiping=False)
    with pytest.raises(TypeError, match=r"concurency.*concurrency"):
        WorkflowEnvironment(app, concurency=4)
    with pytest.raises(InvalidArgument, match=r"concurrency"):
        WorkflowEnvironment(app, concurrency=0)  # a Worker option's bounds, checked at once too
    with pytest.raises(TypeError, match=r"WorkflowEnvironment\(\) takes an App, got list"):
        WorkflowEnvironment([checkout])


def test_the_calls_of_an_activity_that_was_never_mocked_are_refused():
    """activity_calls("chrage") answered [] for a name no mock was set for (a typo, or an
    activity left real), so `assert not env.activity_calls(...)` passed whatever ran."""
    environment = WorkflowEnvironment(app)
    environment.mock_activity(charge, lambda ctx, order_id, amount: {})
    assert environment.activity_calls("charge") == []  # mocked, not called yet
    with pytest.raises(ValueError, match=r"no mock was set for activity 'lookup_rate'.*mocked: charge"):
        environment.activity_calls(lookup_rate)
    environment.unmock_activity(charge)
    assert environment.activity_calls(charge) == []  # what the mock received stays readable


class Rates:
    """Activities as methods of an instance that holds what they share."""

    def __init__(self, rate: float):
        self.rate = rate

    @activity
    def convert(self, ctx, amount: float) -> float:
        return amount * self.rate

    @activity(local=True)
    def convert_locally(self, ctx, amount: float) -> float:
        return amount * self.rate


RATES = Rates(2.0)


@workflow
async def converts_by_method(ctx, amount: float) -> list:
    return [
        await ctx.execute_activity(RATES.convert, amount),
        await ctx.execute_local_activity(RATES.convert_locally, amount),
    ]


def test_an_instance_s_methods_run_as_activities(kit_server: TestServer):
    methods = App(workflows=[converts_by_method], activities=[RATES.convert, RATES.convert_locally])
    with WorkflowEnvironment(methods, server=kit_server) as environment:
        assert environment.client.start_workflow(converts_by_method, 21.0).result(timeout=10) == [42.0, 42.0]


@workflow
async def sealed(ctx, note: str) -> str:
    ctx.state["note"] = note
    await ctx.wait_for_signal("go")
    return f"sealed {note}"


@query(workflow="sealed")
def sealed_note(ctx) -> str:
    return ctx.state["note"]


def test_the_environments_clients_use_the_apps_codecs(kit_server: TestServer):
    """An App with an encrypting codec: its worker encodes every answer and result, and the
    environment's clients decode them with the same codecs (before, they had none, and a query's
    answer raised PayloadKeyMissing, "it has no encryption codec"); their inputs are stored
    encrypted, as a Client(codecs=...) of production writes them."""
    from harvest.core.codecs import AesGcmCodec, ZlibCodec

    app = App(workflows=[sealed], queries=[sealed_note], codecs=[ZlibCodec(), AesGcmCodec({"k1": b"k" * 32})])
    with WorkflowEnvironment(app, server=kit_server) as env:
        handle = env.client.start_workflow(sealed, "secret-note")
        env.wait_until_idle()
        assert handle.query("sealed_note") == "secret-note"
        handle.signal("go")
        assert handle.result(timeout=10) == "sealed secret-note"
        started = handle.history()[0]["event_data"]["input"][0]
        assert started["_harvest_codec"] == ["zlib", "aesgcm:k1"]

        async def read_async() -> object:
            async with await env.async_client() as client:
                return await client.get_handle(handle.execution_id).result(timeout=10)

        assert asyncio.run(read_async()) == "sealed secret-note"


def test_the_kits_waits_take_a_duration_in_any_form(env: WorkflowEnvironment):
    """wait_until_idle's timeout and sleep's settle_timeout are durations like the kit's others
    ("5s", a timedelta); a string was a TypeError from the deadline's arithmetic."""
    env.wait_until_idle("5s")
    env.wait_until_idle(dt.timedelta(seconds=5))
    env.sleep("1m", settle_timeout="5s")
    with pytest.raises(InvalidArgument, match="timeout"):
        env.wait_until_idle("soon")
