"""``WorkflowEnvironment``: run workflows in a test against a real database, with a worker in
this process, activity mocks, and time skipping.

::

    with WorkflowEnvironment(app) as env:
        env.mock_activity(charge, lambda ctx, order_id, amount: {"charged": amount})
        handle = env.client.start_workflow(checkout, "order-1", 42)
        assert handle.result(timeout=10) == {"charged": 42}   # a one-day timer: milliseconds

Time skipping: every connection of the environment reads the database's shared test clock
(``harvest.fake_now = 'shared'``, harvest/db/testkit.py). While a client waits for a run's
result and nothing can run (no task due or in flight, no relay to deliver), the environment
moves that clock to the next due time (a timer, a retry's backoff, a run's timeout, a deferred
start) and wakes the worker, so waits that take days take milliseconds. ``env.sleep(...)``
moves it by hand. docs/testing.md has the whole guide.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import datetime as _dt
import difflib
import functools
import inspect
import itertools
import logging
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Self, TypeVar, TypeVarTuple, overload

from harvest.client.client import AsyncClient, Client, why_stuck
from harvest.core.codecs import Payloads
from harvest.core.durations import Duration, parse_duration, plain_number
from harvest.core.errors import InvalidArgument, NotFound, TimeoutError_
from harvest.db import testkit
from harvest.db.connection import failure_reason
from harvest.declare.definitions import ActivityDefinition, App, require_app
from harvest.declare.schedules import schedule_problem
from harvest.testing.server import TestServer, default_server
from harvest.worker.options import WorkerOptions
from harvest.worker.worker import Worker

__all__ = ["ActivityCall", "ScheduleFiring", "WorkflowEnvironment"]

log = logging.getLogger("harvest.testing")

# A result() given no timeout waits at most this long (real seconds; the environment's
# result_timeout), so a test whose run is stuck fails instead of hanging the session.
RESULT_TIMEOUT_SECS = 30.0
# While a result is awaited and nothing can run (no task due or in flight, no timer, backoff or
# deadline to skip to), the wait fails as stuck once that has lasted this long (stuck_after): a
# signal or an update sent meanwhile from another thread or task still gets through.
STUCK_AFTER_SECS = 2.0
# How often the time skipper looks at the database while a result is awaited (seconds).
SKIP_POLL_SECS = 0.005
# ... and while none is (a result wait starts skipping within this long).
IDLE_POLL_SECS = 0.02
# How long start() waits for the worker to register, and close() for it to drain.
WORKER_START_SECS = 30.0
# env.sleep and env.skip_schedule walk the clock from one due time to the next (a timer, a
# retry, a schedule's slot): at most this many stops a call, so a span that crosses a schedule's
# slots by the million fails saying so instead of running for hours.
MAX_WALK_STOPS = 10_000
# The worker's defaults here: a short scan tick (deadlines, relays), a quick drain.
# No retention janitor: a test's database is thrown away, and a janitor on the skipped clock
# would delete the runs (and the worker rows) a test reads after a skip past their retention.
WORKER_DEFAULTS: dict[str, Any] = {
    "poll_interval": 0.5,
    "scan_interval": 0.05,
    "shutdown_grace": 2.0,
    "run_retention": False,
}


@dataclasses.dataclass
class ActivityCall:
    """One call of a mocked activity: its arguments (``ctx`` excluded)."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class ScheduleFiring:
    """One slot a schedule fired (harvest.get_schedule's firings): ``status`` is ``started``,
    ``skipped`` (``reason``: ``max_active_runs``, ``buffer_full``, ``superseded``), ``buffered``
    or ``failed`` (``reason``: the start's error); ``origin`` is ``schedule``, ``trigger`` or
    ``backfill``. The run, once started: ``env.client.get_handle(firing.execution_id)``."""

    slot: _dt.datetime
    status: str
    reason: str | None
    origin: str
    workflow_id: str
    execution_id: str | None

    @classmethod
    def from_json(cls, firing: dict[str, Any]) -> ScheduleFiring:
        return cls(
            slot=_dt.datetime.fromisoformat(firing["slot_at"]),
            status=firing["status"],
            reason=firing.get("reason"),
            origin=firing["origin"],
            workflow_id=firing["workflow_id"],
            execution_id=firing.get("execution_id"),
        )


class _WorkerThread:
    """A Worker on its own event loop in a daemon thread."""

    def __init__(self, worker: Worker):
        self.worker = worker
        self.loop: asyncio.AbstractEventLoop | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="harvest-test-worker", daemon=True)

    def _main(self) -> None:
        async def go() -> None:
            self.loop = asyncio.get_running_loop()
            await self.worker.run()

        try:
            asyncio.run(go())
        except BaseException as exc:
            self.error = exc

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + WORKER_START_SECS
        while not (self.worker.lanes[0].ready and self.loop is not None):
            if self.error is not None or not self._thread.is_alive():
                raise RuntimeError(f"the test worker did not start: {self.error!r}") from self.error
            if time.monotonic() > deadline:
                raise TimeoutError_(f"the test worker did not register within {WORKER_START_SECS:.0f}s")
            time.sleep(0.005)

    def wake(self) -> None:
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.worker.wake)

    def tick_schedules(self) -> list[str]:
        """The worker's own scheduler tick, now, on its loop; the schedules it could not compute."""
        if self.loop is None or self.loop.is_closed() or not self.worker.run_scanner:
            return []
        future = asyncio.run_coroutine_threadsafe(self.worker.tick_schedules(), self.loop)
        return [name for report in future.result(WORKER_START_SECS) for name in report.uncomputable]

    def stop(self) -> None:
        if self.loop is not None and self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.worker.request_stop)
        self._thread.join(WORKER_START_SECS)
        if self.error is not None:
            raise self.error


_OWN_OPTIONS = ("server", "dsn", "time_skipping", "result_timeout", "stuck_after")
_MOCK_CALLS = itertools.count()  # a key per mock call in flight


def _check_worker_options(options: dict[str, Any]) -> None:
    """The keywords the environment passes to its Worker, checked as the Worker would check
    them (names, then the tunables' bounds), with a hint for a misspelt one."""
    tunables = {f.name for f in dataclasses.fields(WorkerOptions)}
    keywords = {
        p.name for p in inspect.signature(Worker.__init__).parameters.values() if p.kind is p.KEYWORD_ONLY
    }
    accepted = sorted(tunables | keywords)
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        described = []
        for name in unknown:
            near = difflib.get_close_matches(name, [*_OWN_OPTIONS, *accepted], n=1)
            described.append(f"{name} (did you mean {near[0]}?)" if near else name)
        raise TypeError(
            f"WorkflowEnvironment() got unknown option(s) {', '.join(described)}; its own are "
            f"{', '.join(_OWN_OPTIONS)}, and it passes these to its Worker: {', '.join(accepted)}"
        )
    WorkerOptions().replace(**{k: v for k, v in options.items() if k in tunables})


def _check_mock_signature(name: str, original: ActivityDefinition, fn: Callable[..., Any]) -> None:
    """Refuse a mock that cannot take the activity's required arguments (ctx first), now
    rather than as a TypeError in every attempt and a dead letter."""
    try:
        mock_signature = inspect.signature(fn)
        params = list(inspect.signature(original.fn).parameters.values())
    except (TypeError, ValueError):  # a callable with no signature to read: let it run
        return
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p.name for p in positional[1:] if p.default is p.empty]
    try:
        mock_signature.bind(None, *required)
    except TypeError as exc:
        shape = ", ".join(p.name for p in positional)
        raise TypeError(
            f"mock for activity {name!r} cannot take its arguments ({shape}); the mock takes "
            f"{mock_signature}: {exc}; "
            "a mock takes what the activity takes, ctx first"
        ) from None


def _warn_near_miss(name: str, app: App) -> None:
    """A name the App does not register may be another service's activity, so it is mocked;
    but one close to a registered name is most likely a typo that leaves the real one running."""
    near = difflib.get_close_matches(name, list(app.activities), n=1, cutoff=0.8)
    if near:
        warnings.warn(
            f"mock_activity: the App registers no activity {name!r}, did you mean {near[0]!r}? "
            f"(the mock runs only for calls by the name {name!r}; pass the @activity function "
            "to have a misspelling refused)",
            UserWarning,
            stacklevel=3,
        )


_ClientT = TypeVar("_ClientT", Client, AsyncClient)
# mock_activity's typing by function: the activity's ctx type and positional parameters.
_CtxT = TypeVar("_CtxT")
_MockArgs = TypeVarTuple("_MockArgs")


class _StuckWatch:
    """The environment's watch on its clients' result waits (harvest.client.client.ResultWatch):
    a bound for a wait given no timeout, and the waits the time skipper found stuck."""

    def __init__(self, env: WorkflowEnvironment):
        self.env = env
        self.bound = env.result_timeout

    def stuck(self, execution_id: str, waiter_id: str) -> str | None:
        return self.env._stuck.get((execution_id, waiter_id))

    def bound_note(self, execution_id: str) -> str:
        return self.env._bound_note(execution_id)


class WorkflowEnvironment:
    """A database, a worker running ``app`` in this process, a client, and a test clock.

    ``server``: a :class:`~harvest.testing.TestServer` to clone the database on (default: the
    process's shared one, ``HARVEST_TEST_DSN`` or an embedded server started on first use).
    ``dsn``: use this migrated database instead (connect as its owner: the environment turns
    the owner-only test clock switch on there; it is not dropped at the end).
    ``time_skipping``: move the clock to the next due time while a result is awaited and
    nothing can run (default True). ``result_timeout``: how long a ``result()`` given no
    timeout waits on the environment's clients (real time; None: for ever). ``stuck_after``:
    while a result is awaited, how long nothing may be able to run (no task, no timer: the run
    waits for a signal nobody sends) before the wait fails naming what the run waits on (None:
    never; needs time skipping). ``worker_options``: passed to the Worker
    (``concurrency``, ``queues``, ...).
    """

    def __init__(
        self,
        app: App,
        *,
        server: TestServer | None = None,
        dsn: str | None = None,
        time_skipping: bool = True,
        result_timeout: Duration | None = RESULT_TIMEOUT_SECS,
        stuck_after: Duration | None = STUCK_AFTER_SECS,
        **worker_options: Any,
    ):
        require_app(app, "WorkflowEnvironment")
        self.result_timeout = (
            None
            if result_timeout is None
            else parse_duration(result_timeout, "result_timeout", positive=True)
        )
        self.stuck_after = None if stuck_after is None else parse_duration(stuck_after, "stuck_after")
        _check_worker_options(worker_options)  # here, not first when the `with` starts the Worker
        self._original_app = app
        self.app = copy.copy(app)  # the worker's App: the same, but mocks replace activities
        self.app.activities = dict(app.activities)
        self._server = server
        self._given_dsn = dsn
        self._database: str | None = None
        self.time_skipping = time_skipping
        self._worker_options = {**WORKER_DEFAULTS, **worker_options}
        self.dsn: str = ""
        self._client: Client | None = None
        self._clock: testkit.SharedClock | None = None
        self._clock_lock = threading.Lock()
        self._offset = _dt.timedelta(0)
        self._worker: _WorkerThread | None = None
        self._skipper: threading.Thread | None = None
        self._closing = threading.Event()
        self._paused = 0
        self._calls: dict[str, list[ActivityCall]] = {}
        # Stuck waits: since when (monotonic) nothing could run while a result was awaited, at
        # which event count; and (execution, waiter) -> why, read by the clients' watch.
        self._stall: tuple[float, int] | None = None
        self._stuck: dict[tuple[str, str], str] = {}
        self._mocks_running: dict[int, tuple[str, float]] = {}  # a mock call in flight: name, since
        self._uncomputable: list[str] = []  # schedules the last tick could not compute (never due)
        self.skips = 0  # how many times time skipping moved the clock
        self._payloads: Payloads | None = None  # the worker's codecs, for the clients
        self.started = False

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> Self:
        if self.started:
            return self
        self._closing.clear()
        if self._given_dsn is not None:
            base = self._given_dsn
            testkit.allow_test_clock(base)
        else:
            server = self._server or default_server()
            self._server = server
            self._database, base = server.new_database()
        try:
            self.dsn = testkit.shared_clock_dsn(base)
            self._clock = testkit.SharedClock(base)
            self._offset = self._clock.offset()
            worker = Worker(self.app, self.dsn, **self._worker_options)
            worker.clock = self._now  # ctx.now() in workflows reads the test clock too
            self._worker = _WorkerThread(worker)
            self._worker.start()
            # The clients encode and decode as the worker does (the App's codecs, or the
            # worker's codecs= option): a client without them cannot read an encrypted answer.
            self._payloads = worker.payloads
            self._client = self._watched(Client(self.dsn, codecs=self._payloads))
            if self.time_skipping:
                self._skipper = threading.Thread(
                    target=self._skip_loop, name="harvest-time-skipper", daemon=True
                )
                self._skipper.start()
        except BaseException:
            self.close()
            raise
        self.started = True
        return self

    def close(self) -> None:
        """Stop the skipper and the worker, close the client, drop the cloned database."""
        self._closing.set()
        if self._skipper is not None:
            self._skipper.join(5)
            self._skipper = None
        error: BaseException | None = None
        try:
            if self._worker is not None:
                self._worker.stop()
        except BaseException as exc:  # reported after the rest is cleaned up
            error = exc
        finally:
            self._worker = None
            if self._client is not None:
                self._client.close()
                self._client = None
            if self._clock is not None:
                self._clock.close()
                self._clock = None
            if self._database is not None and self._server is not None:
                self._server.drop_database(self._database)
                self._database = None
            self.started = False
        if error is not None:
            raise error

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- clients -----------------------------------------------------------------------------
    @property
    def client(self) -> Client:
        """A :class:`~harvest.Client` on the environment's database (closed by :meth:`close`)."""
        if self._client is None:
            raise RuntimeError("the environment is not started: use `with WorkflowEnvironment(app) as env`")
        return self._client

    async def async_client(self) -> AsyncClient:
        """A new :class:`~harvest.AsyncClient` on the environment's database, for asyncio tests
        (``async with await env.async_client() as client``); the caller closes it."""
        return self._watched(await AsyncClient.connect(self.dsn, codecs=self._payloads))

    def _watched(self, client: _ClientT) -> _ClientT:
        """``client`` with the environment's watch on its result waits (a bound, stuck runs)."""
        client._result_watch = _StuckWatch(self)
        return client

    @property
    def worker(self) -> Worker:
        if self._worker is None:
            raise RuntimeError("the environment is not started")
        return self._worker.worker

    # -- activity mocks ----------------------------------------------------------------------
    @overload
    def mock_activity(
        self, activity: Callable[[_CtxT, *_MockArgs], object], fn: Callable[[_CtxT, *_MockArgs], object]
    ) -> None: ...
    @overload
    def mock_activity(self, activity: str | ActivityDefinition, fn: Callable[..., object]) -> None: ...
    def mock_activity(self, activity: Any, fn: Callable[..., Any]) -> None:
        """Run ``fn`` instead of the activity named ``activity`` (a name or the ``@activity``
        function). ``fn`` takes what the activity takes (``ctx`` first) and may be ``def`` or
        ``async def``; arguments are decoded by the real activity's type hints, and its
        options (timeouts, retries) stay. A mock that cannot take the activity's arguments is a
        TypeError here. A name no activity of the App has is mocked too (a workflow may call
        activities by name that another worker runs); one close to a registered name warns.

        Typing (docs/testing.md "Activity mocks"): given the ``@activity`` function, a checker
        types ``fn``'s parameters from the activity's own (its ``ctx`` type, then each positional
        parameter), so a ``lambda`` mock is typed and one of the wrong arity is refused; the
        mock's result is checked at run time, against the activity's return hint. Given a name,
        ``fn`` is unchecked."""
        name = activity if isinstance(activity, str) else self._original_app.activity(activity).name
        original = self._original_app.activities.get(name)
        if original is not None:
            _check_mock_signature(name, original, fn)
        else:
            _warn_near_miss(name, self._original_app)
        calls = self._calls.setdefault(name, [])

        call: Callable[..., Any]
        running = self._mocks_running  # (a wait the bound ends names the mocks still running)
        if inspect.iscoroutinefunction(fn):

            async def call(ctx: Any, *args: Any, **kwargs: Any) -> Any:
                calls.append(ActivityCall(args, kwargs))
                key = next(_MOCK_CALLS)
                running[key] = (name, time.monotonic())
                try:
                    return await fn(ctx, *args, **kwargs)
                finally:
                    running.pop(key, None)
        else:

            def call(ctx: Any, *args: Any, **kwargs: Any) -> Any:
                calls.append(ActivityCall(args, kwargs))
                key = next(_MOCK_CALLS)
                running[key] = (name, time.monotonic())
                try:
                    return fn(ctx, *args, **kwargs)
                finally:
                    running.pop(key, None)

        if original is not None:
            functools.update_wrapper(call, original.fn)  # decode by the real activity's hints
            # A mock runs in this process (a thread or the loop), never in the process pool.
            definition = dataclasses.replace(
                original, fn=call, is_async=inspect.iscoroutinefunction(fn), executor=None
            )
        else:
            definition = ActivityDefinition(name=name, fn=call, is_async=inspect.iscoroutinefunction(fn))
        self.app.activities[name] = definition

    def unmock_activity(self, activity: Any) -> None:
        """Run the real activity again (or none, for a name the App does not have)."""
        name = activity if isinstance(activity, str) else self._original_app.activity(activity).name
        original = self._original_app.activities.get(name)
        if original is None:
            self.app.activities.pop(name, None)
        else:
            self.app.activities[name] = original

    def activity_calls(self, activity: Any) -> list[ActivityCall]:
        """The calls a mock of ``activity`` received so far, oldest first (retries included).
        A ValueError for an activity no mock was set for: its calls are not recorded, and an
        empty list would pass an assertion that nothing was called."""
        name = activity if isinstance(activity, str) else self._original_app.activity(activity).name
        if name not in self._calls:
            raise ValueError(
                f"no mock was set for activity {name!r}, so its calls are not recorded "
                f"(mocked: {', '.join(sorted(self._calls)) or 'none'}); mock it first with "
                "env.mock_activity"
            )
        return list(self._calls[name])

    # -- the clock ---------------------------------------------------------------------------
    def _now(self) -> _dt.datetime:
        return _dt.datetime.now(_dt.UTC) + self._offset

    def now(self) -> _dt.datetime:
        """The environment's clock: what ``harvest.now()`` answers in its database."""
        with self._clock_lock:
            return self._require_clock().now()

    def _require_clock(self) -> testkit.SharedClock:
        if self._clock is None:
            raise RuntimeError("the environment is not started")
        return self._clock

    def sleep(self, duration: Duration, *, outage: bool = False, settle_timeout: Duration = 10.0) -> None:
        """Move the clock forward by ``duration`` (``"1d"``, seconds, a timedelta) and return once
        nothing can run any more (each wait for that bounded by ``settle_timeout``).

        The clock walks: every due time on the way (a timer, a retry's backoff, a timeout, a
        schedule's slot) is stopped at in order and what it brings runs before the clock goes
        on, as with a worker and a scheduler running all along, so each schedule slot fires at
        its time. ``outage=True`` jumps at once instead, as if nothing ran meanwhile: what became
        due fires late, and schedules catch up (or miss their slots) as after a real outage.
        A timedelta is checked as a number or a string is: a negative one, or one longer than
        100 years, is an InvalidArgument and the clock stays where it was."""
        seconds = parse_duration(duration, "duration")
        by = _dt.timedelta(seconds=seconds)
        if outage:
            with self._clock_lock:
                clock = self._require_clock()
                self._move(clock, by)
                clock.scan()
            self._tick_and_wake()
            self.wait_until_idle(settle_timeout)
            return
        # The target is an offset, not an instant: the clock moves by exactly ``duration``,
        # whatever real time the walk takes.
        target = self._offset + by

        def stop_at(clock: testkit.SharedClock, state: testkit.ClockState) -> _dt.datetime | None:
            return None if self._offset >= target else state.now + (target - self._offset)

        self._walk(stop_at, f"env.sleep({duration!r})", settle_timeout)

    def skip_schedule(
        self, name: str, fires: int = 1, *, settle_timeout: Duration = 10.0
    ) -> list[ScheduleFiring]:
        """Walk the clock (as :meth:`sleep` does) to the schedule's next ``fires`` slots and
        return their firings, oldest first, once nothing can run any more: a slot the overlap
        policy skipped or buffered is a firing too (its ``status`` says so). The clock stops at
        the last slot's due time (its jitter included). An InvalidArgument for a schedule the
        database does not have, one that is paused (it would never fire), or one whose slots
        cannot be computed."""
        if isinstance(fires, bool) or not isinstance(fires, int) or not 1 <= fires <= MAX_WALK_STOPS:
            raise InvalidArgument(
                f"skip_schedule: fires must be a whole number from 1 to {MAX_WALK_STOPS}, got {fires!r}"
            )
        self.wait_until_idle(settle_timeout)  # a schedule the worker just declared: computed first
        before = {f.slot for f in self._firings(self._schedule_row(name))}
        fired: list[ScheduleFiring] = []

        def stop_at(clock: testkit.SharedClock, state: testkit.ClockState) -> _dt.datetime | None:
            row = self._checked_schedule(name, clock.schedule(name))
            fired[:] = [f for f in self._firings(row) if f.slot not in before]
            if len(fired) >= fires:
                return None
            if row["next_due_at"] is None:  # (not computed yet: the idle wait ticks it first)
                return state.now
            return _dt.datetime.fromisoformat(row["next_due_at"])

        self._walk(stop_at, f"skip_schedule({name!r}, fires={fires})", settle_timeout)
        return fired[:fires]

    def schedule_firings(self, name: str) -> list[ScheduleFiring]:
        """The schedule's firings, oldest first (the newest 1000: the database keeps as many)."""
        return self._firings(self._schedule_row(name, check=False))

    def _schedule_row(self, name: str, *, check: bool = True) -> dict[str, Any]:
        with self._clock_lock:
            clock = self._require_clock()
            try:
                row = clock.schedule(name)
            except NotFound:
                names = ", ".join(repr(n) for n in clock.schedule_names()) or "none"
                raise InvalidArgument(
                    f"no schedule {name!r} in the environment's database (it has: {names}); declare "
                    "it in the App (App(schedules=[WorkflowSchedule(...)])) or create it with "
                    "harvest.create_schedule"
                ) from None
        return self._checked_schedule(name, row) if check else row

    def _checked_schedule(self, name: str, row: dict[str, Any]) -> dict[str, Any]:
        """``row``, or InvalidArgument when the schedule cannot fire here."""
        if row.get("paused"):
            note = f" ({row['paused_note']})" if row.get("paused_note") else ""
            raise InvalidArgument(
                f"schedule {name!r} is paused{note}: it fires nothing until resumed "
                "(SELECT harvest.resume_schedule(...))"
            )
        if self._worker is not None and not self._worker.worker.run_scanner:
            raise InvalidArgument(
                f"schedule {name!r} cannot fire: the environment's worker runs no scheduler "
                "(run_scanner=False)"
            )
        if row.get("next_due_at") is None and name in self._uncomputable:
            problem = schedule_problem(row) or "its next slot cannot be computed"
            raise InvalidArgument(f"schedule {name!r} never fires: {problem}")
        return row

    @staticmethod
    def _firings(row: dict[str, Any]) -> list[ScheduleFiring]:
        return sorted((ScheduleFiring.from_json(f) for f in row.get("firings") or []), key=lambda f: f.slot)

    def _walk(
        self,
        stop_at: Callable[[testkit.SharedClock, testkit.ClockState], _dt.datetime | None],
        what: str,
        settle_timeout: Duration,
    ) -> None:
        """Move the clock towards ``stop_at(clock, state)`` until it answers None (done), stopping
        at each due time before it (a run's, a schedule's slot) and letting what that brings run
        first."""
        for _ in range(MAX_WALK_STOPS):
            self.wait_until_idle(settle_timeout)
            with self._clock_lock:
                clock = self._require_clock()
                state = self._state(clock)
                target = stop_at(clock, state)
                if target is None:
                    return
                ahead = [t for t in (state.next_due, state.next_slot) if t is not None and state.now < t]
                step = min([*ahead, target])
                if step > state.now:  # (else it is due now: the tick and the idle wait run it)
                    self._move(clock, step - state.now)
                clock.scan()
            self._tick_and_wake()
        raise TimeoutError_(
            f"{what} stopped at {self.now().isoformat()} after {MAX_WALK_STOPS} stops on the way (timers, "
            "retries, schedule slots: each fires at its time): move the clock in shorter steps, pause a "
            "schedule that fires that often (SELECT harvest.pause_schedule(...)), or jump at once with "
            "env.sleep(..., outage=True)"
        )

    def _state(self, clock: testkit.SharedClock) -> testkit.ClockState:
        """One look at the database; schedules count only where the worker runs its scheduler."""
        scheduling = self._worker is not None and self._worker.worker.run_scanner
        return clock.state(schedules=scheduling, uncomputable=self._uncomputable, queues=self._polled())

    def _polled(self) -> list[str] | None:
        """The queues the environment's worker polls (None: no worker; every task counts): a
        task on another is no work this environment can do, however due."""
        return None if self._worker is None else list(self._worker.worker.queues)

    def _tick_and_wake(self) -> None:
        """After a scanner pass (clock.scan()), the rest of what the worker's scanner loop does,
        now rather than on its next pass: the worker's own scheduler tick (due slots fire,
        buffered ones start); then wake the worker. Called without the clock lock: the tick runs
        on the worker's loop, where an async mock may read env.now()."""
        if self._worker is not None:
            self._uncomputable = self._worker.tick_schedules()
            self._worker.wake()

    def wait_until_idle(self, timeout: Duration = 10.0) -> None:
        """Return once nothing can run: no task is due or in flight, no relay waits, and no
        schedule is due (a slot that has come, a buffered slot with a free run). A schedule's
        next slot ahead is not work: an environment with active schedules is idle between their
        slots (TimeoutError_ after ``timeout``: seconds, ``"30s"`` or a timedelta, as every
        duration of the kit; a string was a bare TypeError from the arithmetic)."""
        seconds = parse_duration(timeout, "timeout")
        deadline = time.monotonic() + seconds
        time.sleep(SKIP_POLL_SECS)  # let the woken worker claim first
        while True:
            with self._clock_lock:
                state = self._state(self._require_clock())
            if state.schedules_due:  # (the worker's scanner would tick within scan_interval)
                self._tick_and_wake()
            if not state.busy:
                return
            if time.monotonic() > deadline:
                raise TimeoutError_(f"the environment was still busy after {plain_number(seconds)}s")
            time.sleep(SKIP_POLL_SECS)

    @contextmanager
    def time_skipping_paused(self) -> Iterator[None]:
        """No automatic time skipping inside this block (``env.sleep`` still moves the clock)."""
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1

    def _move(self, clock: testkit.SharedClock, by: _dt.timedelta) -> None:
        """Move the clock forward: the worker's ``ctx.now()`` first, then the database, so a
        workflow woken by the move never reads the time before it."""
        self._offset += by
        # The worker still fresh at the new time, so a start notifies it and no scanner takes it
        # for lost.
        worker = self._worker
        clock.set_offset(self._offset, heartbeat=() if worker is None else [worker.worker.worker_id])

    def _wake(self) -> None:
        if self._worker is not None:
            self._worker.wake()

    def _forget_stall(self) -> None:
        self._stall = None
        if self._stuck:
            self._stuck = {}

    def _watch_stall(self, clock: testkit.SharedClock, next_slot: _dt.datetime | None = None) -> None:
        """A result is awaited and nothing can run: once that has lasted ``stuck_after`` with no
        event appended anywhere, each such wait fails, woken to read its run again. ``next_slot``:
        a schedule's next slot, which the wait does not skip to (the report says so)."""
        if self.stuck_after is None:
            return
        progress, waits = clock.waits()
        now = time.monotonic()
        if self._stall is None or self._stall[1] != progress:
            self._stall = (now, progress)
            return
        if now - self._stall[0] < self.stuck_after:
            return
        stuck = dict(self._stuck)
        woken = []
        for execution_id, waiter_id, workflow_name in waits:
            if (execution_id, waiter_id) not in stuck:
                stuck[(execution_id, waiter_id)] = self._stuck_reason(
                    clock, execution_id, workflow_name
                ) + self._slot_note(next_slot)
                woken.append(execution_id)
        self._stuck = stuck  # (replaced whole: the clients' threads read it)
        for execution_id in dict.fromkeys(woken):
            clock.wake_result_waits(execution_id)

    @staticmethod
    def _slot_note(next_slot: _dt.datetime | None) -> str:
        if next_slot is None:
            return ""
        return (
            f". A schedule's next slot ({next_slot.isoformat(timespec='seconds')}) is not skipped to "
            "while a result is awaited: fire it first with env.skip_schedule(name) or env.sleep(...)"
        )

    def _stuck_reason(self, clock: testkit.SharedClock, execution_id: str, workflow_name: str) -> str:
        waits_on = self._waits_on(clock, execution_id, depth=0)
        try:  # what the run's stack says (an activity dead-lettered, a task failing), as a timeout would
            stack = clock.stack(execution_id)
            # Its awaited signals are named once: by the cached run above (with what was sent
            # unread), else by the stack, as what it waits on (so the advice to send it follows).
            awaited = dict.fromkeys(w["name"] for w in stack.get("awaited_signals") or ())
            if awaited and not waits_on:
                waits_on = "waits for signal " + ", ".join(repr(n) for n in awaited)
            why = why_stuck({**stack, "awaited_signals": ()}).removeprefix("; ")
        except Exception:  # a hint only
            why = ""
        text = (
            "nothing in the test environment can make it progress: no task on a queue it polls is due or "
            "running and nothing is pending to skip to (a timer, a retry, a timeout), for "
            f"{plain_number(self.stuck_after or 0)}s while its result was awaited; {workflow_name}: "
        )
        if why or "does not poll" in waits_on:
            return text + "; ".join(filter(None, (waits_on, why)))
        return (
            text
            + (waits_on or "waits for something only a client can give (a signal, an update, a cancel)")
            + ". Send it before waiting (handle.signal(...)), or from another thread or task within "
            "that time (WorkflowEnvironment(stuck_after=...))"
        )

    def _waits_on(self, clock: testkit.SharedClock, execution_id: str, depth: int) -> str:
        """What a stuck run waits on, as far as the worker's cached run and its children say."""
        parts = []
        run = self._worker.worker.cache.peek(execution_id) if self._worker is not None else None
        if run is not None:
            try:
                names = run.signals.awaited()
            except RuntimeError:  # (changed under us: nothing to report)
                names = []
            if names:
                listed = ", ".join(repr(n) for n in names)
                waits = f"waits for signal {listed}, which nobody has sent"
                try:  # a misspelt name sent instead is buffered unread (as a SignalTimeout says)
                    unread = {n: c for n, c in run.signals.unread("").items() if n not in names}
                except RuntimeError:
                    unread = {}
                if unread:
                    waits += (
                        " (signals of other names wait unread: "
                        + ", ".join(f"{n!r} ({c})" for n, c in sorted(unread.items()))
                        + ")"
                    )
                parts.append(waits)
            try:
                predicates = run.awaited_conditions()
            except RuntimeError:  # (changed under us: nothing to report)
                predicates = []
            if predicates:
                parts.append(
                    "waits in ctx.wait_condition on "
                    + ", ".join(predicates)
                    + ", which nothing that came has made true (a signal, an update or a result that "
                    "changes the state it reads)"
                )
        polled = self._polled()
        if polled is not None:
            for kind, activity_name, queue in clock.unpolled_tasks(execution_id, polled)[:3]:
                what = f"activity {activity_name!r}" if kind == "activity" else f"{kind} task"
                parts.append(
                    f"its {what} waits on queue {queue!r}, which the environment's worker does not poll "
                    f"(it polls {', '.join(repr(q) for q in polled)}; WorkflowEnvironment(..., queues=[...]) "
                    "names the queues it polls)"
                )
        for child_id, child_name in clock.running_children(execution_id)[:3]:
            child = f"waits for its child {child_name} ({child_id})"
            inner = self._waits_on(clock, child_id, depth + 1) if depth < 3 else ""
            parts.append(f"{child}, which {inner}" if inner else child)
        return " and ".join(parts)

    def _bound_note(self, execution_id: str) -> str:
        """What a wait that the result_timeout bound ended adds: the bound, what still runs."""
        note = (
            f"the test environment bounds a result() given no timeout to "
            f"{plain_number(self.result_timeout or 0)}s (WorkflowEnvironment(result_timeout=...))"
        )
        now = time.monotonic()
        mocks = sorted(
            {(name, since) for name, since in list(self._mocks_running.values())}, key=lambda m: m[1]
        )
        if mocks:
            listed = ", ".join(
                f"{name!r} (called {plain_number(round(now - since, 1))}s ago)" for name, since in mocks
            )
            note += f"; mocked activities still running: {listed}"
        else:
            try:
                with self._clock_lock:
                    running = self._require_clock().running_activities(execution_id)
            except Exception:  # a hint only
                running = []
            if running:
                listed = ", ".join(f"{name!r} (attempt {attempt})" for name, attempt in running)
                note += f"; activities still running: {listed}"
        return note

    def _skip_loop(self) -> None:
        """While a result is awaited and nothing can run, move the clock to the next due time."""
        interval = SKIP_POLL_SECS
        while not self._closing.wait(interval):
            interval = IDLE_POLL_SECS  # nobody waits: look less often
            if self._paused:
                self._forget_stall()
                continue
            try:
                with self._clock_lock:
                    clock = self._require_clock()
                    state = self._state(clock)
                    if state.waiting:
                        interval = SKIP_POLL_SECS
                    if state.waiting and not state.busy and state.next_due is None:
                        # Nothing can run, nor will by any clock. A schedule's next slot does
                        # not count: it fires for ever, so skipping along its slots would keep a
                        # wait on a run that needs a signal going until the result_timeout.
                        self._watch_stall(clock, state.next_slot)
                        continue
                    self._forget_stall()
                    if not state.waiting:
                        continue
                    # A due schedule: tick it now (the worker's scanner would within scan_interval).
                    tick = state.schedules_due
                    if not state.busy and state.next_due is not None:
                        # A schedule's slot before the run's next due time fires at its time on
                        # the way, as a scheduler running all along fires it (not late, not missed).
                        step = state.next_due
                        if state.next_slot is not None and state.next_slot < step:
                            step = state.next_slot
                        if step > state.now:
                            self._move(clock, step - state.now)
                            self.skips += 1
                        clock.scan()
                        tick = True
                if tick:
                    self._tick_and_wake()
            except Exception as exc:
                if self._closing.is_set():
                    return
                log.warning("time skipping: %s; retrying", failure_reason(exc))
                time.sleep(0.1)
