"""The client side of queries and updates: submit a request, wait for its answer.

A request is a row (``harvest.request_query`` / ``request_update`` /
``update_with_start``) on the shard the execution lives on (a moved run's seal refuses it with
HR013 and the request is made where the pointer says); the client LISTENs on
``harvest_query_answers`` there *before* submitting on the same connection, so
no answer can slip by, and re-reads the row (``harvest.get_query_request``)
whenever its id is notified, or at least every second. Outcomes map to one
exception each: ``QueryFailed`` (unknown query, a handler that raised, a replay
that failed), ``UpdateRejected`` (validator, unknown update, run not running:
nothing recorded), ``UpdateFailed`` (recorded, but the handler raised or the run
ended first) and ``QueryTimeout`` (no answer in time; the message says whether
any live worker polls the queue, or why the run has not completed the first workflow task a
query or a validator waits for).
"""

from __future__ import annotations

import time
from typing import Any, cast

from harvest.client import payloads as payload_policy
from harvest.client import routing
from harvest.client.outage import Outage
from harvest.core import payload
from harvest.core.durations import Duration, parse_duration
from harvest.core.errors import (
    ExecutionMigrated,
    InvalidArgument,
    NotFound,
    QueryFailed,
    QueryTimeout,
    UpdateFailed,
    UpdateRejected,
)
from harvest.core.statuses import LIVE_STATUSES
from harvest.db import channels, sqlapi
from harvest.db.connection import one_line
from harvest.db.pools import never_sent
from harvest.db.steps import (
    InTransaction,
    Notified,
    Sql,
    Steps,
    alisten,
    arun_steps_on_hub,
    bounded_by,
    run_steps_on_hub,
)
from harvest.telemetry import tracing

__all__ = ["WAIT_STAGES", "AsyncUpdateHandle", "UpdateHandle"]

WAIT_STAGES = ("accepted", "completed")
CHANNEL = channels.QUERY_ANSWERS
_RECHECK_SECS = 1.0


def check_wait(wait: str) -> str:
    if wait not in WAIT_STAGES:
        raise InvalidArgument(f"wait: {wait!r} is not one of {list(WAIT_STAGES)}")
    return wait


def seconds(timeout: Any, what: str = "timeout") -> float:
    value = parse_duration(timeout, what)
    if value <= 0:
        raise InvalidArgument(f"{what}: {timeout!r} must be more than 0 seconds")
    return value


def _settled(row: dict[str, Any], wait: str) -> bool:
    status = row["status"]
    if status in ("completed", "failed", "rejected"):
        return True
    if status == "accepted":
        return wait == "accepted" or row["execution_status"] not in LIVE_STATUSES
    return False


def _what(row: dict[str, Any]) -> str:
    return f"{row['kind']} {row['name']!r} on execution {row['execution_id']}"


def _refuse_moved(row: dict[str, Any]) -> None:
    """A request the run's move answered (``harvest.cut_over_migration`` fails the open queries
    of a run it seals, ExecutionMigrated naming the shard): raised as a seal's HR013 is, so a
    call routed by the execution id asks again where the run lives, within the same timeout."""
    error = row.get("error") or {}
    if row["status"] != "failed" or error.get("error_type") != "ExecutionMigrated":
        return
    details = error.get("details") or {}
    raise ExecutionMigrated(
        f"{_what(row)}: {error.get('message', 'the run moved')}",
        details.get("reason", "migrated"),
        str(row["execution_id"]),
        details.get("shard_id"),
    )


def _outcome(row: dict[str, Any], result_type: Any) -> Any:
    """The decoded answer of a settled request, or its typed exception."""
    status, error = row["status"], row.get("error") or {}
    message = f"{_what(row)}: {error.get('error_type', 'Error')}: {error.get('message', '')}"
    if status == "completed":
        return payload.decode(row["answer"], result_type, f"{row['kind']} {row['name']!r} result")
    if status == "rejected":
        raise UpdateRejected(f"rejected {message}", error.get("error_type"), error.get("details"))
    if status == "failed":
        cls = UpdateFailed if row["kind"] == "update" else QueryFailed
        raise cls(f"failed {message}", error.get("error_type"), error.get("details"))
    if status == "accepted" and row["execution_status"] not in LIVE_STATUSES:
        raise UpdateFailed(
            f"update {row['name']!r} ({row['update_id']}) was accepted, but execution "
            f"{row['execution_id']} ended {row['execution_status']} before its "
            "handler finished (call ctx.drain_admitted_updates() before returning)",
            "WorkflowNotRunning",
        )
    raise AssertionError(f"unsettled request {row}")


def _timeout(row: dict[str, Any] | None, what: str, timeout: float, failed: str = "") -> QueryTimeout:
    """No answer in time: what the last row read says (``failed``: why the database could not
    be read at the end; the workers' count read before it is not given)."""
    text = f"no answer to {what} within {timeout:g}s" + (f" ({failed})" if failed else "")
    if row is None:
        return QueryTimeout(text)
    if row["status"] == "accepted":
        return QueryTimeout(
            f"{text}: update {row['update_id']} was accepted and is recorded on execution "
            f"{row['execution_id']}, but its handler has not finished; wait again with its "
            f"UpdateHandle's result(), or ask again with update_id={row['update_id']!r}"
        )
    if failed:
        return QueryTimeout(text)
    if row["status"] == "waiting":
        return QueryTimeout(f"{text}: {_first_task_wait(row)}")
    if not row["live_workers"]:
        return QueryTimeout(f"{text}: no live worker polls task queue {row['queue']!r}")
    # (Not "do they register the workflow?": a worker without it hands the request back and,
    # with no live worker left to try, it is answered UnknownWorkflow, not left to time out.)
    head = f"{text}: {row['live_workers']} live worker(s) poll task queue {row['queue']!r}, but none answered"
    if row["status"] == "running" and row.get("claimed_by"):
        return QueryTimeout(
            f"{head}: worker {row['claimed_by']!r} took the request and has not answered (its "
            f"{row['kind']} handler still runs, or that worker died or hangs: the request goes to "
            "another worker once its lease runs out)"
        )
    return QueryTimeout(
        f"{head}: none took the request (they are busy, or one of them was killed or hangs: a "
        "worker counts as live until it misses two heartbeats)"
    )


def _first_task_wait(row: dict[str, Any]) -> str:
    """Why a request waiting for its run's first workflow task (status ``waiting``) still waits."""
    head = (
        f"execution {row['execution_id']} has not completed its first workflow task, so it has no "
        f"state to read yet ({row['kind']} handlers and validators read the state the workflow's "
        "code builds); "
    )
    task = row.get("waiting_for") or {}
    if row["execution_status"] == "PAUSED":
        return head + "the run is PAUSED: resume it (harvest workflow resume)"
    if task.get("task_status") == "running" and task.get("lease_owner"):
        health = task.get("lease_owner_health")
        state = f"{health} " if health else "unregistered "
        return head + (
            f"{state}worker {task['lease_owner']!r} holds its workflow task, lease until "
            f"{task.get('lease_expires_at')} (a worker that died keeps it until then; another "
            "worker takes it after)"
        )
    if not row["live_workers"]:
        return head + f"no live worker polls task queue {row['queue']!r}"
    failure = task.get("last_failure")
    if failure:
        return head + (
            f"its workflow task failed (attempt {task.get('attempt')}, last: "
            f"{failure.get('error_type')}: {failure.get('message')}); see the worker's log"
        )
    if task.get("task_status") is None:
        return head + "it has no workflow task queued"
    return head + (
        f"its workflow task is {task['task_status']} (due {task.get('due_at')}) and "
        f"{row['live_workers']} live worker(s) poll task queue {row['queue']!r} but none has "
        "taken it yet (busy, or flow control holds it)"
    )


def _answer(
    submit: Steps[int],
    wait: str,
    timeout: float,
    what: str,
    payloads: Any = None,
    deadline: float | None = None,
) -> Steps[dict[str, Any]]:
    """Submit the request (``submit`` yields its calls and returns the request id), then
    re-read its row whenever its id is notified (or every _RECHECK_SECS) until it settles.
    The one wait loop of both clients (harvest.db.steps); the timeout runs from now, or
    until ``deadline`` (a request asked again where a moved run lives keeps the first's)."""
    deadline = time.monotonic() + timeout if deadline is None else deadline
    return _answer_steps(submit, wait, deadline, timeout, what, payloads)


def _read_request(request_id: int, wait: str, payloads: Any) -> Steps[tuple[dict[str, Any], bool]]:
    """The request's row and whether it has settled; settled, with its answer and its error's
    details as the worker's codecs wrote them (docs/payloads.md; offloaded ones read too)."""
    row = yield Sql(sqlapi.get_query_request, request_id)
    if not _settled(row, wait):
        return row, False
    decoded = {
        **row,
        "answer": (yield from payload_policy.decoded(payloads, row.get("answer"))),
        "error": (yield from payload_policy.decoded(payloads, row.get("error"))),
    }
    return decoded, True


def _answer_steps(
    submit: Steps[int], wait: str, deadline: float, timeout: float, what: str, payloads: Any = None
) -> Steps[dict[str, Any]]:
    try:  # sent once; its calls wait for a connection until the deadline at most
        request_id = yield from bounded_by(submit, deadline)
    except Exception as exc:
        if not never_sent(exc):
            raise
        raise _timeout(None, what, timeout, f"the request was not sent: {one_line(exc)}") from exc
    row = None
    outage = Outage(f"the wait for an answer to {what}")
    while True:
        try:
            latest, settled = yield from bounded_by(_read_request(request_id, wait, payloads), deadline)
        except NotFound:
            raise _timeout(row, what, timeout) from None
        except Exception as exc:
            # A read the database could not answer (the request is recorded): made again.
            if not outage.began(exc):
                raise
            if (pause := outage.pause_until(deadline)) is None:
                raise _timeout(row, what, timeout, outage.reason()) from exc
            yield Notified(str(request_id), pause)
            continue
        outage.ended()
        row = latest
        if settled:
            _refuse_moved(row)
            return row
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _timeout(row, what, timeout)
        yield Notified(str(request_id), min(remaining, _RECHECK_SECS))


def _request_query(
    execution_id: str, name: str, encoded: Any, secs: float, payloads: Any = None
) -> Steps[int]:
    if not payload_policy.offload_plan(payloads, [encoded]):
        return cast("int", (yield Sql(sqlapi.request_query, execution_id, name, encoded, secs)))

    # A large argument is stored (owned by the run) in the request's own transaction.
    def request() -> Steps[int]:
        values, _owned = yield from payload_policy.offloaded(payloads, execution_id, [encoded])
        return cast("int", (yield Sql(sqlapi.request_query, execution_id, name, values[0], secs)))

    return cast("int", (yield InTransaction(request)))


def _request_update(
    execution_id: str,
    name: str,
    encoded: Any,
    update_id: str | None,
    secs: float,
    traceparent: str | None,
    payloads: Any = None,
) -> Steps[int]:
    if not payload_policy.offload_plan(payloads, [encoded]):
        row = yield Sql(sqlapi.request_update, execution_id, name, encoded, update_id, secs, traceparent)
        return cast(int, row["request_id"])

    # A large argument is stored (owned by the run) in the request's own transaction.
    def request() -> Steps[Any]:
        values, _owned = yield from payload_policy.offloaded(payloads, execution_id, [encoded])
        return (yield Sql(sqlapi.request_update, execution_id, name, values[0], update_id, secs, traceparent))

    row = yield InTransaction(request)
    return cast(int, row["request_id"])


def _start_and_update(
    call: dict[str, Any], secs: float, started: dict[str, Any], payloads: Any = None
) -> Steps[int]:
    values = [*call["input"], call["arg"]]  # the start's arguments, then the update's
    if not payload_policy.offload_plan(payloads, values):
        started.update((yield Sql(sqlapi.update_with_start, **call, timeout=secs)))
        return cast("int", started["request_id"])

    # Large ones are stored before the run exists, then handed to the run the call started or
    # attached to, all in the call's one transaction (docs/payloads.md).
    def request() -> Steps[dict[str, Any]]:
        stored, owned = yield from payload_policy.offloaded(payloads, None, values)
        row = yield Sql(
            sqlapi.update_with_start, **{**call, "input": stored[:-1], "arg": stored[-1]}, timeout=secs
        )
        if owned and row.get("execution_id") is not None:
            yield Sql(sqlapi.set_payloads_execution, owned, str(row["execution_id"]))
        return cast("dict[str, Any]", row)

    started.update((yield InTransaction(request)))
    return cast("int", started["request_id"])


def _argument(client: Any, arg: Any, kind: str, name: str) -> Any:
    """A query's or an update's argument, encoded and checked as the request holds it (an
    argument the client offloads: its reference)."""
    payload_policy.text(name, f"{kind} name", optional=False)
    limit = getattr(client, "max_payload_bytes", None)
    return payload_policy.written(
        payload_policy.of(client), arg, f"{kind} arg", f"the argument of {kind} {name}", limit
    )


# The steps of each operation, shared by the sync and the asyncio functions below; the
# arguments are checked here, before any connection is opened.
def _query_steps(
    client: Any, execution_id: str, name: str, arg: Any, timeout: Any, deadline: float | None = None
) -> Steps[dict[str, Any]]:
    secs, policy = seconds(timeout), payload_policy.of(client)
    encoded = _argument(client, arg, "query", name)
    return _answer(
        _request_query(execution_id, name, encoded, secs, policy),
        "completed",
        secs,
        f"query {name!r} on execution {execution_id}",
        payload_policy.of(client),
        deadline,
    )


def _update_steps(
    client: Any,
    execution_id: str,
    name: str,
    arg: Any,
    wait: str,
    timeout: Any,
    update_id: str | None,
    deadline: float | None = None,
) -> Steps[dict[str, Any]]:
    secs, wait, policy = seconds(timeout), check_wait(wait), payload_policy.of(client)
    encoded = _argument(client, arg, "update", name)
    payload_policy.text(update_id, "update_id")
    return _answer(
        # The caller's update span: the workflow task that runs the handler links to it.
        _request_update(execution_id, name, encoded, update_id, secs, tracing.traceparent(), policy),
        wait,
        secs,
        f"update {name!r} on execution {execution_id}",
        payload_policy.of(client),
        deadline,
    )


def _update_with_start_steps(
    call: dict[str, Any], wait: str, timeout: Any, started: dict[str, Any], payloads: Any = None
) -> Steps[dict[str, Any]]:
    secs, wait = seconds(timeout), check_wait(wait)
    return _answer(
        _start_and_update(call, secs, started, payloads),
        wait,
        secs,
        f"update {call['name']!r} on workflow {call['workflow_id']!r}",
        payloads,
    )


def _steps_per_attempt(make: Any, deadline: float) -> Any:
    """``make(deadline)`` now (its arguments are checked before any connection is opened), then
    a fresh one for each further attempt, each waiting until the one ``deadline``."""
    pending = [make(deadline)]
    return lambda: pending.pop() if pending else make(deadline)


def _listen_where_it_lives(client: Any, execution_id: str, make: Any, timeout: Any) -> Any:
    """Drive the steps on the shard ``execution_id`` lives on: its id's shard, then a rebalance's
    forwarding pointer (a seal refuses the request with HR013 before anything is written, and
    the request is made afresh there), woken by the client's one LISTEN connection there."""
    target, deadline = client._target, _deadline(timeout)
    steps = _steps_per_attempt(make, deadline)
    return target.follow(execution_id, lambda shard: _listen_on(client, shard, steps(), deadline))


def _deadline(timeout: Any) -> float:
    return time.monotonic() + seconds(timeout)


def _listen_on(client: Any, shard: int, steps: Steps[dict[str, Any]], deadline: float) -> dict[str, Any]:
    """Drive ``steps`` (a wait until ``deadline``) on ``shard``: each call on a pooled connection,
    each wait on the client's one LISTEN connection of the shard (``Client._listener``, a
    ThreadNotificationHub, given what is left of the wait's time at most to come up)."""
    target = client._target
    hub = client._listener(shard, CHANNEL, deadline - time.monotonic())
    return run_steps_on_hub(steps, lambda: routing.api(target, shard), hub)


def _alisten_where_it_lives(client: Any, execution_id: str, make: Any, timeout: Any) -> Any:
    """:func:`_listen_where_it_lives` under asyncio (an awaitable)."""
    target, deadline = client._target, _deadline(timeout)
    steps = _steps_per_attempt(make, deadline)
    return target.follow(execution_id, lambda shard: _alisten_on(client, shard, steps(), deadline))


async def _alisten_on(
    client: Any, shard: int, steps: Steps[dict[str, Any]], deadline: float
) -> dict[str, Any]:
    """Drive ``steps`` on ``shard``: through the process's one LISTEN connection of the shard
    (``AsyncClient._listener``: its own, or the one it was given, ``client.notifications``, the
    HTTP API's), else (``notifications`` None) on a connection of its own."""
    if getattr(client, "notifications", None) is None:
        return await alisten(client._target.dsn_of(shard), CHANNEL, steps)
    hub = await client._listener(shard, CHANNEL, deadline - time.monotonic())
    return await arun_steps_on_hub(steps, client._target.sql(shard), hub)


# ---------------------------------------------------------------------- the sync API
def query(client: Any, execution_id: str, name: str, arg: Any, timeout: Any, result_type: Any) -> Any:
    row = _listen_where_it_lives(
        client,
        execution_id,
        lambda deadline: _query_steps(client, execution_id, name, arg, timeout, deadline),
        timeout,
    )
    return _outcome(row, result_type)


def _update_outcome(client: Any, row: dict[str, Any], wait: str, result_type: Any, handle_cls: type) -> Any:
    if wait == "accepted" and row["status"] == "accepted":
        return handle_cls(client, str(row["execution_id"]), row["update_id"], row["name"], result_type)
    value = _outcome(row, result_type)
    if wait == "accepted":  # it already completed: the handle answers at once
        return handle_cls(client, str(row["execution_id"]), row["update_id"], row["name"], result_type)
    return value


def update(
    client: Any,
    execution_id: str,
    name: str,
    arg: Any,
    wait: str,
    timeout: Any,
    update_id: str | None,
    result_type: Any,
) -> Any:
    row = _listen_where_it_lives(
        client,
        execution_id,
        lambda deadline: _update_steps(client, execution_id, name, arg, wait, timeout, update_id, deadline),
        timeout,
    )
    return _update_outcome(client, row, wait, result_type, UpdateHandle)


def _update_with_start_request(
    client: Any, call: dict[str, Any], wait: str, timeout: Any
) -> tuple[dict[str, Any], int, Steps[dict[str, Any]]]:
    """What update_with_start fills in with the row of the run it started or attached to, the
    shard it goes to (an unpinned start's of the key) and its steps there."""
    started: dict[str, Any] = {}
    shard = routing.hashed_shard(client._target, call["workflow_name"], call["workflow_id"])
    return started, shard, _update_with_start_steps(call, wait, timeout, started, payload_policy.of(client))


def update_with_start(
    client: Any, call: dict[str, Any], wait: str, timeout: Any, result_type: Any
) -> tuple[dict[str, Any], Any]:
    started, shard, steps = _update_with_start_request(client, call, wait, timeout)
    row = _listen_on(client, shard, steps, _deadline(timeout))
    return started, _update_outcome(client, row, wait, result_type, UpdateHandle)


class UpdateHandle:
    """An accepted (durably recorded) update: ``update_id`` names it (the caller's, else the one
    minted: ask again with it to attach), ``execution_id`` its run; ``result()`` waits for its
    handler's outcome."""

    execution_id: str
    update_id: str
    name: str

    def __init__(self, client: Any, execution_id: str, update_id: str, name: str, result_type: Any = Any):
        self.client, self.execution_id = client, execution_id
        self.update_id, self.name, self.result_type = update_id, name, result_type

    def __repr__(self) -> str:
        return f"UpdateHandle({self.name!r}, update_id={self.update_id!r})"

    def _again(self, timeout: Any) -> tuple[Any, str, str, None, str, Any, str, Any]:
        """update()'s arguments that wait for this update's outcome."""
        return (
            self.client,
            self.execution_id,
            self.name,
            None,
            "completed",
            timeout,
            self.update_id,
            self.result_type,
        )

    def result(self, timeout: Duration = 30.0) -> Any:
        return update(*self._again(timeout))


# ---------------------------------------------------------------------- the asyncio API
async def aquery(client: Any, execution_id: str, name: str, arg: Any, timeout: Any, result_type: Any) -> Any:
    row = await _alisten_where_it_lives(
        client,
        execution_id,
        lambda deadline: _query_steps(client, execution_id, name, arg, timeout, deadline),
        timeout,
    )
    return _outcome(row, result_type)


async def aupdate(
    client: Any,
    execution_id: str,
    name: str,
    arg: Any,
    wait: str,
    timeout: Any,
    update_id: str | None,
    result_type: Any,
) -> Any:
    row = await _alisten_where_it_lives(
        client,
        execution_id,
        lambda deadline: _update_steps(client, execution_id, name, arg, wait, timeout, update_id, deadline),
        timeout,
    )
    return _update_outcome(client, row, wait, result_type, AsyncUpdateHandle)


async def aupdate_with_start(
    client: Any, call: dict[str, Any], wait: str, timeout: Any, result_type: Any
) -> tuple[dict[str, Any], Any]:
    started, shard, steps = _update_with_start_request(client, call, wait, timeout)
    row = await _alisten_on(client, shard, steps, _deadline(timeout))
    return started, _update_outcome(client, row, wait, result_type, AsyncUpdateHandle)


class AsyncUpdateHandle(UpdateHandle):
    async def result(self, timeout: Duration = 30.0) -> Any:  # pyright: ignore[reportIncompatibleMethodOverride]
        return await aupdate(*self._again(timeout))
