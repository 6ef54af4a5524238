"""Workflows: list, count, read, wait for a result, start, signal, query, update, cancel,
terminate, reset; the registered types and their handlers (docs/http-api.md, "Workflows")."""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

from harvest.client.client import CONFLICT_POLICIES, REUSE_POLICIES, chain_broken_error
from harvest.core import jsonb
from harvest.core.codecs import refs_in
from harvest.core.durations import parse_duration
from harvest.core.errors import InvalidArgument, NotFound
from harvest.core.ids import ROW_ID_MAX, shard_of
from harvest.core.payload import redact
from harvest.core.statuses import LIVE_STATUSES
from harvest.declare.definitions import PRIORITY_RANGE
from harvest.shard.fanout import (
    CHILD_STATUSES,
    CHILDREN_PAGE,
    CHILDREN_PAGE_MAX,
    CHILDREN_WALK,
    CHILDREN_WALK_MAX,
    children_place,
)
from harvest.web.routes import (
    ANY,
    BOOLEAN,
    DATETIME,
    FANOUT,
    NONEMPTY,
    OBJECT,
    ROWS,
    SHARD_ID,
    STRING,
    Call,
    Endpoint,
    Param,
    Reply,
    body,
    declared_queue,
    fanout_keys,
    invalid,
    merged,
    path,
    shape,
)

EXECUTION = path("execution_id", "uuid", "The execution id (a UUID).")
NAME = path("name", description="The workflow name (as registered).")
WAIT_MAX_SECS = 300.0
# Retry-After of a result that is not there yet.
RESULT_RETRY_AFTER = "1"
# The 204's header naming the run still running: the last of the continue-as-new chain.
RUN_WAITED_ON = "X-Harvest-Execution-Id"
# The continue-as-new rotations one /result request follows (a read a run): a longer chain is
# answered 204 naming the run reached, where the next poll goes on (docs/http-api.md, "Result").
RESULT_HOPS = 100

STATE = Param(
    "state", description="RUNNING, COMPLETED, FAILED, ... (comma-separated for several); alias status."
)
STATUS = Param("status", description="The same as state.")
FILTERS = (
    STATE,
    STATUS,
    Param("workflow_name"),
    Param("search_attr", repeat=True, description="key:value or key=value (repeatable, AND)."),
    Param(
        "search_attr_filter",
        repeat=True,
        description="key:op:value, op one of eq, ne, gt, gte, lt, lte (repeatable, AND).",
    ),
    Param("started_after", "datetime", description="Created at or after (RFC 3339); alias created_after."),
    Param("started_before", "datetime", description="Created before (RFC 3339); alias created_before."),
    Param("created_after", "datetime"),
    Param("created_before", "datetime"),
    Param(
        "filter",
        description="An expression with AND, OR, IN and parentheses over search attributes, workflow_name "
        "and status: tenant = acme OR (region IN (eu, us) AND amount >= 100). Each side of an OR must "
        "test a search attribute or workflow_name = / IN. ANDed with the other filters.",
    ),
    Param(
        "failing",
        "boolean",
        description="true: only the runs whose workflow task is failing (a non-determinism error, a "
        "WorkflowCallError, an unknown workflow: retried every 5 s, the run stays RUNNING); false: only the "
        "others. Each row's task_error_type, task_attempt and task_failing_since mark such a run.",
    ),
)
# The list's and the count's filter: a workflow id's runs, on every shard (fanout.list_workflows).
# An empty value is a 400 (not absent, as other parameters' are: it would select every run).
WORKFLOW_ID = Param(
    "workflow_id",
    description="Only the runs of this workflow id (a continue-as-new chain, a reset's forks, earlier runs "
    "that reused it); its current run is GET /workflows/current. An empty value is a 400.",
    empty_is_absent=False,
)
_OPS = {"eq": "=", "ne": "!=", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}


def _filters(args: dict[str, Any]) -> dict[str, Any]:
    """The list's filters as the fan-out reads take them (the SQL checks states and filters)."""
    if args["state"] and args["status"] and args["state"] != args["status"]:
        raise invalid("status", "give state or status, not both")
    searches = []
    for raw in args["search_attr"]:
        if ":" not in raw and "=" not in raw:
            raise invalid("search_attr", f"{raw!r} has no ':' between key and value (key:value)")
        searches.append(raw)
    for raw in args["search_attr_filter"]:
        parts = raw.split(":", 2)
        if len(parts) != 3 or parts[1].lower() not in _OPS or not parts[0] or not parts[2]:
            raise invalid(
                "search_attr_filter", f"{raw!r} is not key:op:value with op one of {', '.join(_OPS)}"
            )
        searches.append(f"{parts[0]}{_OPS[parts[1].lower()]}{parts[2]}")
    after = args["started_after"] or args["created_after"]
    before = args["started_before"] or args["created_before"]
    return {
        "state": args["state"] or args["status"],
        "workflow_name": args["workflow_name"],
        "search_attributes": searches,
        "created_after": after,
        "created_before": before,
        "filter": args["filter"],
        "failing": args["failing"],
    }


# The SQL's refusals of the list's and a batch's filters, by how their message starts, and the
# field each names (the search attributes' is the list's search_attr, a batch's search_attributes).
_REFUSED_FIELDS = (
    (re.compile(r"filter: "), "filter"),
    (re.compile(r"search attribute filters?\b"), "search_attributes"),
    (re.compile(r"unknown state |cannot \w+ runs in state "), "state"),
    (re.compile(r"(workflow list |the )?cursor\b"), "cursor"),
    (re.compile(r"workflow_id "), "workflow_id"),
)


def _named(exc: InvalidArgument, searches: str = "search_attr") -> InvalidArgument:
    """The SQL's refusal of a filter (an expression, a search attribute filter, a state) or of a
    cursor, as a 400 naming the parameter or field it is about (``searches``: the search
    attributes')."""
    for starts, field in _REFUSED_FIELDS:
        if starts.match(str(exc)):
            exc.field = searches if field == "search_attributes" else field  # type: ignore[attr-defined]
            break
    return exc


async def list_workflows(call: Call, args: dict[str, Any], _: Any) -> Any:
    page_size = args["page_size"] or args["limit"] or 50
    try:
        found = await call.reads().list_workflows(
            **_filters(args),
            workflow_id=args["workflow_id"],
            page_size=page_size,
            cursor=args["cursor"],
            order=args["order"],
        )
    except InvalidArgument as exc:
        raise _named(exc) from None
    # sharded: the CLI shows each row's shard then, as over SQL with [shards] (`workflow list`)
    return merged(call, found, "executions")


async def count_workflows(call: Call, args: dict[str, Any], _: Any) -> Any:
    try:
        found = await call.reads().count_executions(
            group_by=args["group_by"], limit=args["limit"], workflow_id=args["workflow_id"], **_filters(args)
        )
    except InvalidArgument as exc:
        raise _named(exc) from None
    out = merged(call, found, "counts")
    rows, top = out["counts"], args["top"]
    rest = rows[top:]
    out["counts"] = rows[:top]
    out["total"] = sum(r["executions"] for r in rows)
    # With a limit, a capped row and so the total are "at least".
    out["capped"] = any(r.get("capped") for r in rows)
    # The long tail rolled into one bucket (the usage report never does this).
    out["other"] = {"groups": len(rest), "executions": sum(r["executions"] for r in rest)} if rest else None
    return out


# A history page (GET /workflows/{id}/history, and the history of GET /workflows/{id}): a run
# of 100,000 events was one answer, read whole into the server's memory.
HISTORY_PAGE = 500
HISTORY_PAGE_MAX = 1000
HISTORY_CURSOR = "ev1."


def _history_cursor(execution_id: str, after_event_id: int) -> str:
    """The token that continues ``execution_id``'s history after ``after_event_id``."""
    body = json.dumps({"x": str(execution_id), "e": after_event_id}, separators=(",", ":"))
    return HISTORY_CURSOR + base64.urlsafe_b64encode(body.encode()).decode().rstrip("=")


def _after_history_cursor(token: str, execution_id: str) -> int:
    """The event id a history cursor continues after; a 400 naming ``cursor`` for a token this
    route did not make, or made for another run."""
    try:
        if not token.startswith(HISTORY_CURSOR):
            raise ValueError(token)
        raw = token[len(HISTORY_CURSOR) :]
        body = jsonb.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
        run, after = str(uuid.UUID(body["x"])), body["e"]
        if not isinstance(after, int) or isinstance(after, bool) or not 0 <= after <= ROW_ID_MAX:
            raise ValueError(after)
    except (ValueError, KeyError, TypeError, binascii.Error, UnicodeDecodeError):
        raise invalid("cursor", "is not a next_cursor of this route: pass it unchanged") from None
    if run != str(uuid.UUID(str(execution_id))):
        raise invalid("cursor", "was issued for another run's history: start without a cursor")
    return after


async def _history_page(
    call: Call, execution_id: str, after: int, limit: int, *, resolve: str | None
) -> tuple[Any, list[dict[str, Any]], str | None]:
    """The run's row and ``limit`` events after ``after`` with the cursor of the rest (None: no
    more now), from ``limit + 1`` rows: a page costs a page however long the history.
    ``resolve`` ("events", "row and events"): their offloaded payloads read back, in one read
    on the run's shard (the page's own events, not the one read past it)."""

    async def read(sql: Any) -> Any:
        row = call.resident(await sql.get_execution(execution_id))
        rows = await sql.get_history(execution_id, after, limit + 1)
        events = rows[:limit]
        if resolve == "events":
            events = await call.principal.resolved(sql, events)
        elif resolve is not None:
            row, events = await call.principal.resolved(sql, [row, events])
        return row, events, len(rows) > limit

    row, events, more = await call.routed(execution_id, read)
    last = events[-1]["event_id"] if events else after
    return row, events, _history_cursor(execution_id, last) if more else None


async def get_workflow(call: Call, args: dict[str, Any], _: Any) -> Any:
    """The run with the first page of its history (the spec's execution/history payload), and
    the cursor of /history that continues it."""
    execution_id = args["execution_id"]
    # Payloads as stored, offloaded ones resolved (docs/http-api.md, "Payloads in answers").
    limit = args["history_limit"]
    row, events, more = await _history_page(call, execution_id, 0, limit, resolve="row and events")
    return {
        "execution": row,
        "parent_id": row.get("parent_id"),
        "history": events,
        "history_next_cursor": more,
    }


def lookup_path(call: Call, workflow_id: str, workflow_name: str | None) -> str:
    """The URL path (under the API's mount) of :func:`current_run` for ``workflow_id``: what a
    deferred start's 202 names in ``Location``."""
    query = {"workflow_id": workflow_id, **({"workflow_name": workflow_name} if workflow_name else {})}
    mounted_at = call.request.scope.get("root_path", "")
    return f"{mounted_at}/workflows/current?{urlencode(query)}"


async def current_run(call: Call, args: dict[str, Any], _: Any) -> Any:
    """The current run of a workflow id (the start's idempotency key), over every shard
    (harvest.shard.fanout.current_run); a moved run answers where it lives now. Its row's
    payloads as GET /workflows/{id} answers them: offloaded ones resolved, on the run's shard."""
    try:
        found = await call.reads().current_run(args["workflow_id"], args["workflow_name"])
    except InvalidArgument as exc:  # an id two workflows used: name the workflow
        exc.field = "workflow_name"  # type: ignore[attr-defined]
        raise
    best = found.value
    if call.principal.payloads and refs_in(best):
        best = await call.routed(str(best["id"]), lambda sql: call.principal.resolved(sql, found.value))
    return {
        "execution_id": str(best["id"]),
        "workflow_id": best["workflow_id"],
        "workflow_name": best["workflow_name"],
        "state": best["status"],
        "shard_id": shard_of(best["id"]),
        "execution": best,
        **fanout_keys(call, found),
    }


def _terminal(row: dict[str, Any]) -> dict[str, Any]:
    status = row["status"]
    out: dict[str, Any] = {
        "execution_id": str(row["id"]),
        "state": status,
        "completed_at": row.get("completed_at"),
    }
    if status == "COMPLETED":
        out["output"] = row.get("output")
    else:
        out["error"] = row.get("failure") or {"error_type": status, "message": f"run ended {status}"}
    return out


async def _terminal_resolved(call: Call, execution_id: str, row: dict[str, Any]) -> dict[str, Any]:
    """:func:`_terminal` with an offloaded result (or failure) read back from the run's database
    (``harvest.payloads``), as `harvest workflow result` and the clients give it; codec envelopes
    stay as stored (the server holds no keys)."""
    out = _terminal(row)
    key = "output" if "output" in out else "error"
    if refs_in(out[key]):
        value = out[key]
        out[key] = await call.routed(execution_id, lambda sql: call.principal.resolved(sql, value))
    return out


def _successor(row: dict[str, Any]) -> str | None:
    if row.get("status") != "CONTINUED_AS_NEW":
        return None
    return str((row.get("output") or {}).get("continued_as_new") or "") or None


async def workflow_result(call: Call, args: dict[str, Any], _: Any) -> Any:
    """The compact terminal body, or 204 + Retry-After while the run (or its continue-as-new
    successor) is still running after ``wait``. One LISTEN connection per shard serves every
    wait of this process (harvest.db.notify)."""
    wait = 0.0
    if args["wait"] is not None:
        try:
            wait = parse_duration(args["wait"], "wait")
        except InvalidArgument as exc:  # (its message names the parameter already: "wait: ...")
            exc.field = "wait"  # type: ignore[attr-defined]
            raise
        if not 0 <= wait <= WAIT_MAX_SECS:
            raise invalid("wait", f"{args['wait']!r} is out of range 0..{WAIT_MAX_SECS:g}s")
    deadline = time.monotonic() + wait
    current = args["execution_id"]
    waiter = str(uuid.uuid4())
    marked: str | None = None  # the run our waiter row is on (a close deletes it)
    previous: str | None = None  # the run that continued as new as ``current`` (None: the first)
    try:
        for _hop in range(RESULT_HOPS):
            hub = call.state.hub(call.state.router.route(current) if call.sharded else 0)
            if wait > 0:
                await hub.start(timeout=1.0)  # not listening yet: the 5 s re-reads still answer
            async with hub.waiting(current) as woken:
                while True:
                    try:
                        if wait > 0 and marked != current:
                            # Mark the waiter (the close then notifies) and read, in one call.
                            # (mypy infers no lambda with a default; the default binds this hop's id)
                            row = await call.routed(
                                current,
                                lambda sql, c=current: sql.wait_for_result(c, waiter),  # type: ignore[misc]
                            )
                            marked = current
                        else:
                            row = await call.routed(current, lambda sql, c=current: sql.get_execution(c))  # type: ignore[misc]
                    except NotFound:
                        if previous is None:
                            raise
                        # A broken chain (its successor erased or purged): said, naming its last run.
                        raise chain_broken_error(previous, current) from None
                    row = call.resident(row)
                    if row["status"] not in LIVE_STATUSES:  # (a PAUSED run has not ended)
                        marked = None  # the close deleted the mark
                        break
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        # Which run of the chain is still running: the one a client asks why
                        # it is stuck, and polls from next.
                        return Reply(
                            None, 204, {"Retry-After": RESULT_RETRY_AFTER, RUN_WAITED_ON: str(current)}
                        )
                    woken.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(woken.wait(), min(remaining, 5.0))
            successor = _successor(row)
            if successor is None:
                return await _terminal_resolved(call, current, row)
            previous, current = current, successor
        # The chain rotated RESULT_HOPS times in this request: it has not ended as far as this
        # request walked, so it answers what a wait that ran out does, naming the run to ask next.
        # (It answered 400: a valid request refused, where the SQL client follows to the end.)
        return Reply(None, 204, {"Retry-After": "0", RUN_WAITED_ON: str(current)})
    finally:
        if marked is not None:  # gave up on a run still running: drop our mark
            with contextlib.suppress(Exception):
                await call.routed(marked, lambda sql: sql.stop_waiting_for_result(waiter))


# A run's stack (GET /workflows/{id}/stack): at most this many entries in each of its lists (a
# fan-out of 20,000 activities was one answer of 20,000); its totals say how many there are.
STACK_LIMIT = 100
STACK_LIMIT_MAX = 10_000


async def workflow_stack(call: Call, args: dict[str, Any], _: Any) -> Any:
    execution_id = args["execution_id"]
    limit = args["limit"] if args["limit"] is not None else STACK_LIMIT

    async def read(sql: Any) -> Any:
        stack = await sql.get_execution_stack(execution_id, limit)
        if stack.get("status") in ("MIGRATED", "MIGRATING"):
            call.resident(await sql.get_residence(execution_id))
        return await call.principal.resolved(sql, stack)  # (failure details offloaded: read back)

    return await call.routed(execution_id, read)


def _child(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "exec_id": row.get("execution_id"), "started_at": row.get("created_at")}


async def workflow_children(call: Call, args: dict[str, Any], _: Any) -> Any:
    """A page of the children merged over every shard, newest first (created_at DESC, then id),
    continued by a keyset cursor on (created_at, id) that keeps a shard not read for a page at
    its own place; a deeper page walks at most max_nodes descendants (``truncated``)."""
    status, depth, max_nodes = args["status"], args["depth"], args["max_nodes"]
    try:
        children_place(args["cursor"], status, depth, max_nodes)
    except InvalidArgument as exc:
        raise invalid(
            "cursor", f"pass the next_cursor of a page with the same filters unchanged ({exc})"
        ) from None
    found = await call.reads().page_children(
        args["execution_id"], status, depth, args["page_size"], args["cursor"], max_nodes
    )
    out = merged(call, found, "items")
    out["items"] = [_child(r) for r in out["items"]]
    return out


# A run's tree (GET /workflows/{id}/tree): at most this many descendants, breadth first (a run
# with 100,000 children was one answer, read whole from every shard); the answer's
# tree.truncated says it cut, and GET /children pages the direct children.
TREE_NODES = 1000
TREE_NODES_MAX = 10_000


async def workflow_tree(call: Call, args: dict[str, Any], _: Any) -> Any:
    limit = args["max_nodes"] if args["max_nodes"] is not None else TREE_NODES
    found = await call.reads().list_tree(args["execution_id"], args["depth"], limit)
    return merged(call, found, "tree")


async def workflow_history(call: Call, args: dict[str, Any], _: Any) -> Any:
    """A page of the history: ``limit`` events after ``after_event_id`` (or after where
    ``cursor`` left off), and ``next_cursor`` while there are more."""
    execution_id = args["execution_id"]
    after = args["after_event_id"]
    if args["cursor"] is not None:
        if after:
            raise invalid("cursor", "give cursor or after_event_id, not both")
        after = _after_history_cursor(args["cursor"], execution_id)
    # Redacted: nothing read back (a reference records its payload's size, which redact gives).
    redacted = args["payload_policy"] == "redacted"
    resolve = None if redacted else "events"
    _, events, more = await _history_page(call, execution_id, after, args["limit"], resolve=resolve)
    doc = {"execution_id": execution_id, "events": events, "redacted": redacted, "next_cursor": more}
    # A caller who sees no payloads has the answer redacted by the route's filter (withheld):
    # redacted here too, each payload read as the size of its redaction marker.
    return redact(doc) if redacted and call.principal.payloads else doc


def _args(value: Any) -> list[Any]:
    """The run's arguments from ``input``: a JSON array is the arguments, another value the one
    argument, none no argument (as `harvest workflow start --input-json`)."""
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _policy(name: str, value: str | None, allowed: tuple[str, ...]) -> str | None:
    if value is not None and value not in allowed:
        raise invalid(name, f"unknown {name} {value!r}; use {', '.join(allowed)}")
    return value


def _queue(call: Call, name: str, data: dict[str, Any]) -> str | None:
    """A start's queue: the body's (a blank one refused, naming it, as the SQL's start and the
    client refuse it: it read as the default queue), else the workflow's declared one."""
    given = data.get("queue")
    if given is not None and not given.strip():
        raise invalid("queue", "is empty: name a queue, or leave it out for the workflow's own")
    return declared_queue(call, name, given)


async def start_workflow(call: Call, args: dict[str, Any], data: dict[str, Any]) -> Any:
    """201 a new run, 200 an existing run (the policies attached to it), 202 deferred by a
    throttle, debounce or batch; 409 a rejecting policy met a prior; 400 a bad policy or
    placement; 503 a pinned shard this process has no pool for."""
    name = args["name"]
    reuse = _policy("reuse_policy", data.get("reuse_policy"), REUSE_POLICIES) or "allow_duplicate"
    conflict = _policy("conflict_policy", data.get("conflict_policy"), CONFLICT_POLICIES)
    if data.get("shard_id") is not None and data.get("residency_key") is not None:
        raise invalid("residency_key", "give shard_id or residency_key, not both")
    # Admin iff the start can cancel a live run (the resolved active-prior behaviour terminates).
    if conflict == "terminate_existing" or (
        reuse == "terminate_if_running" and conflict in (None, "unspecified")
    ):
        await call.require("admin")
    handle = await call.client().start_workflow(
        name,
        *_args(data.get("input")),
        workflow_id=data.get("workflow_id"),
        queue=_queue(call, name, data),
        reuse_policy=reuse,
        conflict_policy=conflict or "unspecified",
        search_attributes=data.get("search_attributes"),
        priority=data.get("priority") or 0,
        execution_timeout=data.get("execution_timeout_secs"),
        run_timeout=data.get("run_timeout_secs"),
        shard_id=data.get("shard_id"),
        residency_key=data.get("residency_key"),
    )
    pinned = data.get("shard_id") is not None or data.get("residency_key") is not None
    out: dict[str, Any] = {"execution_id": handle.execution_id, "workflow_id": handle.workflow_id}
    if "conflict_policy" in data:
        out["started_fresh"] = handle.started_fresh
    if pinned:
        out["shard_id"] = handle.shard_id
    if handle.deferred:
        # No run yet: the workflow id is what to follow it by (its run once it is released).
        out["deferred"] = True
        return Reply(out, 202, {"Location": lookup_path(call, handle.workflow_id, name)})
    return Reply(out, 201 if handle.started_fresh else 200)


async def signal_workflow(call: Call, args: dict[str, Any], data: dict[str, Any]) -> Any:
    execution_id = args["execution_id"]
    receipt = await call.handle(execution_id).signal(data["signal_name"], data.get("payload"))
    return {
        "execution_id": execution_id,
        "signal_name": data["signal_name"],
        "delivered": True,
        "event_id": int(receipt),
        # Whether a pending ctx.wait_for_signal asks for the name, and the names they ask for: a
        # signal none asks for is still delivered (buffered), and a misspelt name shows here.
        "awaited": receipt.awaited,
        "awaited_signals": list(receipt.awaited_signals),
    }


async def signal_with_start(call: Call, args: dict[str, Any], data: dict[str, Any]) -> Any:
    handle = await call.client().signal_with_start(
        args["name"],
        *_args(data.get("input")),
        workflow_id=data["workflow_id"],
        signal=data["signal_name"],
        signal_payload=data.get("payload"),
        queue=_queue(call, args["name"], data),
        search_attributes=data.get("search_attributes"),
    )
    out = {
        "execution_id": handle.execution_id,
        "workflow_id": handle.workflow_id,
        "started_fresh": handle.started_fresh,
    }
    return Reply(out, 201 if handle.started_fresh else 200)


async def query_workflow(call: Call, args: dict[str, Any], data: dict[str, Any]) -> Any:
    execution_id = args["execution_id"]
    value = await call.handle(execution_id).query(
        data["query_name"], data.get("input"), timeout=data.get("timeout_secs") or 10.0
    )
    return {"execution_id": execution_id, "query_name": data["query_name"], "result": value}


def _update_id(data: dict[str, Any]) -> str:
    """The update's id: the caller's, else one minted here (as request_update mints one), so the
    200 of a completed update names it as the 202 of an accepted one does."""
    return data.get("update_id") or str(uuid.uuid4())


def _update_answer(execution_id: str | None, name: str, update_id: str, wait: str, outcome: Any) -> Reply:
    """Accepted (202): the update's id to wait on; completed (200): the id and the result."""
    out = {"execution_id": execution_id, "update_name": name, "update_id": update_id}
    if wait == "accepted":
        return Reply({**out, "status": "accepted"}, 202)
    return Reply({**out, "status": "completed", "result": outcome})


async def update_workflow(call: Call, args: dict[str, Any], data: dict[str, Any]) -> Any:
    execution_id, wait, update_id = args["execution_id"], data.get("wait") or "completed", _update_id(data)
    outcome = await call.handle(execution_id).update(
        data["update_name"],
        data.get("input"),
        wait=wait,
        timeout=data.get("timeout_secs") or 30.0,
        update_id=update_id,
    )
    return _update_answer(execution_id, data["update_name"], update_id, wait, outcome)


async def update_with_start(call: Call, args: dict[str, Any], data: dict[str, Any]) -> Any:
    wait, update_id = data.get("wait") or "completed", _update_id(data)
    handle, outcome = await call.client().update_with_start(
        args["name"],
        *_args(data.get("input")),
        workflow_id=data["workflow_id"],
        update=data["update_name"],
        update_arg=data.get("update_input"),
        wait=wait,
        timeout=data.get("timeout_secs") or 30.0,
        update_id=update_id,
        queue=_queue(call, args["name"], data),
        search_attributes=data.get("search_attributes"),
    )
    update = _update_answer(handle.execution_id, data["update_name"], update_id, wait, outcome).data
    out = {
        "execution_id": handle.execution_id,
        "workflow_id": handle.workflow_id,
        "started_fresh": handle.started_fresh,
        "update": update,
    }
    return Reply(out, 201 if handle.started_fresh else 200)


async def cancel_workflow(call: Call, args: dict[str, Any], data: dict[str, Any]) -> Any:
    execution_id = args["execution_id"]
    first = await call.handle(execution_id).cancel(data.get("reason"))
    return Reply({"execution_id": execution_id, "cancel_requested": True, "first_request": first}, 202)


async def terminate_workflow(call: Call, args: dict[str, Any], data: dict[str, Any]) -> Any:
    execution_id = args["execution_id"]
    await call.handle(execution_id).terminate(data.get("reason"))
    return {"execution_id": execution_id, "status": "TERMINATED"}


def _act_on_workflows(action: str) -> Any:
    """POST /workflows/{cancel,terminate,signal,pause,resume,reset}: a bounded step of a batch by
    filter on every shard (at most ``limit`` runs each), its moved runs acted on where they live, and the
    next_cursor that goes on (harvest.client.batch; docs/http-api.md, "Acting on many runs")."""

    async def handler(call: Call, args: dict[str, Any], data: dict[str, Any]) -> Any:
        from harvest.client.batch import (
            BATCH_STEP,
            BatchTally,
            astep_request,
            decode_cursor,
            encode_cursor,
            filters_of,
            reset_point_problem,
            step_arguments,
        )

        filters = filters_of(data)
        named = (
            "workflow_name",
            "workflow_id",
            "search_attributes",
            "created_after",
            "created_before",
            "filter",
        )
        # (failing true names the runs whose workflow task fails, a few; false, nearly every run)
        if not any(filters[k] not in (None, "", []) for k in named) and filters["failing"] is not True:
            raise invalid(
                "workflow_name",
                f"a {action} by filter needs one of workflow_name, workflow_id, search_attributes, "
                "created_after, created_before, filter, failing true (a state alone would select every"
                " live run)",
            )
        dry_run = bool(data.get("dry_run"))
        # (as the SQL: a dry run counts the runs and sends nothing, so it needs no name)
        if action == "signal" and not dry_run and not (data.get("signal_name") or "").strip():
            raise invalid("signal_name", "name the signal to send (a dry_run alone may leave it out)")
        if action == "reset" and not dry_run and not (data.get("reason") or "").strip():
            raise invalid("reason", "a reset needs a reason (a dry_run alone may leave it out)")
        if action == "reset" and (
            problem := reset_point_problem(data.get("reset_to") or "before_time", data.get("before"), dry_run)
        ):
            raise invalid("before", problem)
        if data.get("cursor"):
            try:
                batch_id, positions = decode_cursor(data["cursor"])
            except InvalidArgument as exc:
                raise invalid("cursor", str(exc).removeprefix("cursor: ")) from None
            # (the caller's text: a shard this deployment does not read is no position of its
            # batches; on one database every key would run the step there again)
            if stray := sorted(set(positions) - set(call.providers())):
                raise invalid(
                    "cursor", f"names shard(s) {stray} this deployment does not read: pass it unchanged"
                )
        else:
            batch_id = data.get("batch_id") or str(uuid.uuid4())
            positions = dict.fromkeys(sorted(call.providers()))
        options = {
            "reason": data.get("reason"),
            "signal_name": data.get("signal_name"),
            "payload": data.get("payload"),
            "limit": data.get("limit") or BATCH_STEP,
            "dry_run": dry_run,
            "operator_id": data.get("operator_id") or call.operator_id,
            "batch_id": batch_id,
            "reset_to": data.get("reset_to") or "before_time",
            "before": data.get("before"),
            "signal_reapply": data.get("signal_reapply") or "drop",
        }
        arguments = step_arguments(filters, options)
        tally = BatchTally(action, dry_run, batch_id)

        async def on_shard(shard: int, fn: Callable[[Any], Awaitable[Any]]) -> Any:
            try:
                return await call.on_shard(shard if call.sharded else None, fn)
            except InvalidArgument as exc:
                raise _named(exc, "search_attributes") from None

        after = await astep_request(
            positions,
            tally,
            arguments,
            on_shard=on_shard,
            routed=call.routed,
            sharded=call.sharded,
            unreachable="unreachable",
        )
        return {**tally.as_dict(), "next_cursor": encode_cursor(batch_id, after) if after else None}

    handler.__name__ = f"{action}_workflows"
    return handler


async def reset_workflow(call: Call, args: dict[str, Any], data: dict[str, Any]) -> Any:
    execution_id = args["execution_id"]
    return await call.routed(
        execution_id,
        lambda sql: sql.reset_workflow(
            execution_id,
            data["to_event"],
            data["reason"],
            data.get("operator_id") or call.operator_id,
            data.get("signal_reapply") or "drop",
            bool(data.get("dry_run")),
        ),
    )


def _app(call: Call) -> Any:
    if call.state.app is None:
        raise NotFound(
            "this management API was given no App: pass app= to management_app "
            "(harvest serve --app module:app) to serve the workflow catalog"
        )
    return call.state.app


async def workflow_handlers(call: Call, args: dict[str, Any], _: Any) -> Any:
    from harvest.declare.messages import describe_handlers

    return describe_handlers(_app(call), args["workflow_name"])


async def registered_workflows(call: Call, args: dict[str, Any], _: Any) -> Any:
    from harvest.declare.messages import describe_handlers

    app = _app(call)
    rows = []
    for name, definition in sorted(app.workflows.items()):
        handlers = describe_handlers(app, name)
        activities = getattr(definition, "declared_activities", None)
        children = getattr(definition, "declared_children", None)
        rows.append(
            {
                "workflow_name": name,
                "queue": definition.queue,
                "declared_activities": None if activities is None else list(activities),
                "declared_children": None if children is None else list(children),
                "queries": [q["name"] for q in handlers["queries"]],
                "updates": [u["name"] for u in handlers["updates"]],
            }
        )
    return {"workflows": rows, "activities": sorted(app.activities)}


PAGE = (
    Param("page_size", "integer", minimum=1, maximum=1000, description="Rows per page (default 50)."),
    Param("limit", "integer", minimum=1, maximum=1000, description="The same as page_size."),
    Param("cursor", description="next_cursor of the previous page."),
    Param("order", "enum", default="desc", choices=("desc", "asc")),
)
START_BODY = body(
    {
        "workflow_id": NONEMPTY,
        "input": ANY,
        "queue": NONEMPTY,
        "reuse_policy": {"type": "string", "enum": list(REUSE_POLICIES)},
        "conflict_policy": {"type": "string", "enum": list(CONFLICT_POLICIES)},
        "search_attributes": OBJECT,
        # (the one range: check_priority's, which start_workflow applies and the SQL holds too)
        "priority": {"type": "integer", "minimum": PRIORITY_RANGE[0], "maximum": PRIORITY_RANGE[1]},
        "execution_timeout_secs": {"type": "number", "minimum": 0.001, "maximum": 31_536_000},
        "run_timeout_secs": {"type": "number", "minimum": 0.001, "maximum": 31_536_000},
        "shard_id": SHARD_ID,
        "residency_key": STRING,
    }
)
# Search attribute filters a call takes at most (the SQL's bound, harvest._execution_filters).
SEARCH_FILTERS_MAX = 100
BATCH_BODY = body(
    {
        "state": STRING,
        "workflow_name": STRING,
        "workflow_id": NONEMPTY,
        "search_attributes": {"type": "array", "items": {"type": "string"}, "maxItems": SEARCH_FILTERS_MAX},
        "created_after": DATETIME,
        "created_before": DATETIME,
        "filter": STRING,
        "failing": BOOLEAN,
        "reason": STRING,
        "signal_name": {
            **STRING,
            "description": "The signal to send: required unless dry_run (which sends nothing).",
        },
        "payload": ANY,
        "limit": {"type": "integer", "minimum": 1, "maximum": 1000},
        "cursor": STRING,
        "dry_run": BOOLEAN,
        "operator_id": STRING,
        "batch_id": STRING,
        "reset_to": {
            "type": "string",
            "enum": ["before_time", "first_workflow_task"],
            "description": "A reset's point in each run's history: the last completed workflow task "
            "written before `before` (the default) or its first.",
        },
        "before": {
            **DATETIME,
            "description": "A reset's time for reset_to before_time (required there, a 400 otherwise): "
            "the bad deploy's.",
        },
        "signal_reapply": {"type": "string", "enum": ["drop", "buffer"]},
    }
)
BATCH_SHAPE = shape(
    action={"type": "string"},
    dry_run={"type": "boolean"},
    batch_id={"type": "string"},
    matched={"type": "integer"},
    acted={"type": "integer"},
    already_ended={"type": "integer"},
    unchanged={"type": "integer"},
    failed={"type": "integer"},
    failures=ROWS,
    shards=ROWS,
    next_cursor={"type": ["string", "null"]},
    unavailable_shards={"type": "array", "items": {"type": "integer"}},
    shard_errors=ROWS,
    status={"type": "string", "enum": ["complete", "partial"]},
)
# A dry run's sample of the runs it selected (only a dry run answers it).
BATCH_SHAPE["properties"]["execution_ids"] = {"type": "array", "items": {"type": "string"}}
# A reset's (only a reset answers it): of unchanged, the reset's forks whose point was the very
# boundary they were forked at, left with what they did since (summed over the shards).
BATCH_SHAPE["properties"]["forks_kept"] = {"type": "integer", "minimum": 0}
# A reset's dry run's (only it answers them): each sampled run's point (event_id and at, that
# event's time) or why it has none or would be left (why), and its shard.
BATCH_SHAPE["properties"]["points"] = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {
            "execution_id": {"type": "string"},
            "event_id": {"type": ["integer", "null"]},
            "at": {"type": ["string", "null"], "format": "date-time"},
            "why": {"type": ["string", "null"]},
            "shard_id": {"type": "integer"},
        },
    },
}
TIMEOUT = {"type": "number", "minimum": 0.001, "maximum": 3600}
WAIT = {"type": "string", "enum": ["accepted", "completed"]}
# An update's answer: its id in both (the caller's, else minted); result only once completed.
UPDATE_SHAPE = {
    "type": "object",
    "required": ["execution_id", "status", "update_id", "update_name"],
    "properties": {
        "execution_id": {"type": "string"},
        "update_name": {"type": "string"},
        "update_id": {"type": "string"},
        "status": {"type": "string", "enum": ["accepted", "completed"]},
        "result": ANY,
    },
}

ENDPOINTS = [
    Endpoint(
        "GET",
        "/workflows",
        "read",
        list_workflows,
        "List executions over every shard, newest first, keyset-paginated.",
        (*FILTERS, WORKFLOW_ID, *PAGE),
        tag="workflows",
        shape=shape(executions=ROWS, next_cursor={"type": ["string", "null"]}, **FANOUT),
    ),
    Endpoint(
        "GET",
        "/workflows/count",
        "read",
        count_workflows,
        "Count executions per status (or workflow name, or both); the long tail rolls into other.",
        (
            *FILTERS,
            WORKFLOW_ID,
            Param("group_by", "enum", default="status", choices=("status", "workflow_name", "all")),
            Param(
                "top",
                "integer",
                default=20,
                minimum=1,
                maximum=1000,
                description="Groups shown before other.",
            ),
            Param(
                "limit",
                "integer",
                minimum=1,
                maximum=1_000_000,
                description="Count at most this many runs of each status (group_by=status only): a row whose "
                "count reached it is capped (at least that many). Without it every matching run is read.",
            ),
        ),
        tag="workflows",
        shape=shape(
            counts=ROWS,
            total={"type": "integer"},
            capped={"type": "boolean"},
            other={"type": ["object", "null"]},
            **FANOUT,
        ),
    ),
    Endpoint(
        "GET",
        "/workflows/current",
        "read",
        current_run,
        "The current run of a workflow id (the start's idempotency key): its RUNNING run, else its "
        "newest; a continue-as-new chain's last run. Looked up on every shard.",
        (
            Param("workflow_id", required=True, description="The workflow id the run was started with."),
            Param(
                "workflow_name",
                description="The workflow's name: required when two workflows used the same workflow_id.",
            ),
        ),
        tag="workflows",
        shape=shape(
            execution_id={"type": "string"},
            workflow_id={"type": "string"},
            workflow_name={"type": "string"},
            state={"type": "string"},
            shard_id={"type": "integer"},
            execution=OBJECT,
            **FANOUT,
        ),
    ),
    Endpoint(
        "GET",
        "/workflows/registered",
        "read",
        registered_workflows,
        "The workflow types of the served App with their declared dependencies and handlers.",
        tag="workflows",
    ),
    Endpoint(
        "GET",
        "/workflows/types/{workflow_name}/handlers",
        "read",
        workflow_handlers,
        "The query and update handlers a workflow type declares.",
        (path("workflow_name"),),
        tag="workflows",
    ),
    Endpoint(
        "GET",
        "/workflows/{execution_id}",
        "read",
        get_workflow,
        "One execution with its parent_id and the first page of its history (for inspection, not "
        "polling); history_next_cursor continues it at /workflows/{execution_id}/history. "
        "Payloads as stored, offloaded ones resolved.",
        (
            EXECUTION,
            Param(
                "history_limit",
                "integer",
                default=HISTORY_PAGE,
                minimum=0,
                maximum=HISTORY_PAGE_MAX,
                description="Events of the history carried (0: none).",
            ),
        ),
        tag="workflows",
        shape=shape(
            execution=OBJECT,
            parent_id=ANY,
            history=ROWS,
            history_next_cursor={"type": ["string", "null"]},
        ),
    ),
    Endpoint(
        "GET",
        "/workflows/{execution_id}/result",
        "read",
        workflow_result,
        "The compact terminal body; 204 with Retry-After while the run is still running after wait.",
        (EXECUTION, Param("wait", description="How long to wait: 5s, 250ms, 2m or seconds (max 300s).")),
        responses={200: "The run ended", 204: "Still running"},
        tag="workflows",
        shape=shape(execution_id={"type": "string"}, state={"type": "string"}, completed_at=ANY),
    ),
    Endpoint(
        "GET",
        "/workflows/{execution_id}/stack",
        "read",
        workflow_stack,
        "What the execution waits on now, and its last event id: at most limit entries in each "
        "list (the first by seq; timers by fire time; awaited_signals, the signals its pending "
        "ctx.wait_for_signal calls wait for, with since, timeout_at and timer_seq), each list's "
        "length in totals; each activity with its last heartbeat (heartbeat_at, heartbeat_details: over 4096 "
        "bytes a string of their first 200 characters and their size, heartbeat_details_clipped true; "
        "heartbeat_details_bytes). Failure and heartbeat details as stored, offloaded ones resolved.",
        (
            EXECUTION,
            Param(
                "limit",
                "integer",
                minimum=1,
                maximum=STACK_LIMIT_MAX,
                description=f"Entries at most in each list (default {STACK_LIMIT}).",
            ),
        ),
        tag="workflows",
    ),
    Endpoint(
        "GET",
        "/workflows/{execution_id}/children",
        "read",
        workflow_children,
        "The execution's children on every shard, newest first.",
        (
            EXECUTION,
            Param("status", "enum", choices=CHILD_STATUSES),
            Param("depth", "integer", default=1, minimum=1, maximum=100),
            Param(
                "page_size",
                "integer",
                default=CHILDREN_PAGE,
                minimum=1,
                maximum=CHILDREN_PAGE_MAX,
                description=f"Children per page (default {CHILDREN_PAGE}); next_cursor continues.",
            ),
            Param("cursor", description="next_cursor of the previous page."),
            Param(
                "max_nodes",
                "integer",
                minimum=1,
                maximum=CHILDREN_WALK_MAX,
                description=f"With depth above 1: descendants walked at most (default {CHILDREN_WALK}), "
                "breadth first; truncated says the walk cut.",
            ),
        ),
        tag="workflows",
    ),
    Endpoint(
        "GET",
        "/workflows/{execution_id}/tree",
        "read",
        workflow_tree,
        "The execution's descendants as a tree, over every shard: at most max_nodes, breadth "
        "first; tree.truncated says whether it cut.",
        (
            EXECUTION,
            Param("depth", "integer", default=100, minimum=1, maximum=100),
            Param(
                "max_nodes",
                "integer",
                minimum=1,
                maximum=TREE_NODES_MAX,
                description=f"Descendants at most (default {TREE_NODES}), every level whole before the next.",
            ),
        ),
        tag="workflows",
    ),
    Endpoint(
        "GET",
        "/workflows/{execution_id}/history",
        "read",
        workflow_history,
        "A page of the execution's event history in order (payload values redacted unless "
        "payload_policy=full, then offloaded payloads resolved); next_cursor continues it, null "
        "when there are no more events.",
        (
            EXECUTION,
            Param("after_event_id", "integer", default=0, minimum=0, maximum=2**31 - 1),
            Param(
                "limit",
                "integer",
                default=HISTORY_PAGE,
                minimum=1,
                maximum=HISTORY_PAGE_MAX,
                description="Events per page.",
            ),
            Param("cursor", description="next_cursor of the previous page."),
            Param("payload_policy", "enum", default="redacted", choices=("redacted", "full")),
        ),
        tag="workflows",
        shape=shape(
            execution_id={"type": "string"},
            events=ROWS,
            redacted=BOOLEAN,
            next_cursor={"type": ["string", "null"]},
        ),
    ),
    Endpoint(
        "POST",
        "/workflows/{name}/start",
        "operate",
        start_workflow,
        "Start a run (reuse and conflict policies, placement). Admin when the policy can cancel a live run.",
        (NAME,),
        START_BODY,
        responses={200: "Attached to an existing run", 201: "Started", 202: "Deferred"},
        tag="workflows",
        shape=shape(execution_id={"type": ["string", "null"]}, workflow_id={"type": "string"}),
    ),
    Endpoint(
        "POST",
        "/workflows/{name}/signal-with-start",
        "operate",
        signal_with_start,
        "Signal the run of (name, workflow_id), starting it first if none runs.",
        (NAME,),
        body(
            {
                "workflow_id": NONEMPTY,
                "signal_name": NONEMPTY,
                "payload": ANY,
                "input": ANY,
                "queue": NONEMPTY,
                "search_attributes": OBJECT,
            },
            ("workflow_id", "signal_name"),
        ),
        responses={200: "Signalled the running run", 201: "Started and signalled"},
        tag="workflows",
    ),
    Endpoint(
        "POST",
        "/workflows/{name}/update-with-start",
        "operate",
        update_with_start,
        "Send an update to the run of (name, workflow_id), starting it first if none runs.",
        (NAME,),
        body(
            {
                "workflow_id": NONEMPTY,
                "update_name": NONEMPTY,
                "update_input": ANY,
                "input": ANY,
                "update_id": STRING,
                "wait": WAIT,
                "timeout_secs": TIMEOUT,
                "queue": NONEMPTY,
                "search_attributes": OBJECT,
            },
            ("workflow_id", "update_name"),
        ),
        responses={200: "Updated the running run", 201: "Started and updated"},
        tag="workflows",
        payloads="whole",
        shape=shape(
            execution_id={"type": "string"},
            workflow_id={"type": "string"},
            started_fresh=BOOLEAN,
            update=UPDATE_SHAPE,
        ),
    ),
    Endpoint(
        "POST",
        "/workflows/{execution_id}/signal",
        "operate",
        signal_workflow,
        "Send a signal to a running execution (or its continue-as-new successor). The answer's "
        "awaited says whether a pending ctx.wait_for_signal asks for its name, and awaited_signals "
        "the names they ask for: a signal none asks for is delivered (buffered) all the same.",
        (EXECUTION,),
        body({"signal_name": NONEMPTY, "payload": ANY}, ("signal_name",)),
        tag="workflows",
        shape=shape(
            execution_id={"type": "string"},
            signal_name={"type": "string"},
            delivered={"type": "boolean"},
            event_id={"type": "integer"},
            awaited={"type": "boolean"},
            awaited_signals={"type": "array", "items": {"type": "string"}},
        ),
    ),
    Endpoint(
        "POST",
        "/workflows/{execution_id}/query",
        "operate",
        query_workflow,
        "Ask a running execution's query handler; a live worker answers, nothing is written.",
        (EXECUTION,),
        body({"query_name": NONEMPTY, "input": ANY, "timeout_secs": TIMEOUT}, ("query_name",)),
        tag="workflows",
        payloads="whole",
    ),
    Endpoint(
        "POST",
        "/workflows/{execution_id}/update",
        "operate",
        update_workflow,
        "Validate, record and run an update; 202 once accepted with wait=accepted.",
        (EXECUTION,),
        body(
            {
                "update_name": NONEMPTY,
                "input": ANY,
                "update_id": STRING,
                "wait": WAIT,
                "timeout_secs": TIMEOUT,
            },
            ("update_name",),
        ),
        responses={200: "Completed", 202: "Accepted"},
        tag="workflows",
        payloads="whole",
        shape=UPDATE_SHAPE,
    ),
    Endpoint(
        "POST",
        "/workflows/{execution_id}/cancel",
        "operate",
        cancel_workflow,
        "Ask a running execution to cancel (its code may clean up).",
        (EXECUTION,),
        body({"reason": STRING}),
        responses={202: "Cancel requested"},
        tag="workflows",
    ),
    Endpoint(
        "POST",
        "/workflows/{execution_id}/terminate",
        "admin",
        terminate_workflow,
        "End a run at once; no cleanup code runs.",
        (EXECUTION,),
        body({"reason": STRING}),
        tag="workflows",
    ),
    Endpoint(
        "POST",
        "/workflows/cancel",
        "operate",
        _act_on_workflows("cancel"),
        "Ask every live run a filter selects to cancel, on every shard, at most limit a shard a "
        "request; next_cursor goes on (dry_run: count and sample, nothing written).",
        body=BATCH_BODY,
        tag="workflows",
        shape=BATCH_SHAPE,
    ),
    Endpoint(
        "POST",
        "/workflows/terminate",
        "admin",
        _act_on_workflows("terminate"),
        "Terminate every live run a filter selects, on every shard, at most limit a shard a "
        "request; next_cursor goes on (dry_run: count and sample, nothing written).",
        body=BATCH_BODY,
        tag="workflows",
        shape=BATCH_SHAPE,
    ),
    Endpoint(
        "POST",
        "/workflows/signal",
        "operate",
        _act_on_workflows("signal"),
        "Signal every live run a filter selects once per batch, on every shard, at most limit a "
        "shard a request; next_cursor goes on (dry_run: count and sample, nothing written). "
        "signal_name is required (a 400 naming it) unless dry_run, which sends nothing.",
        body=BATCH_BODY,
        tag="workflows",
        shape=BATCH_SHAPE,
    ),
    Endpoint(
        "POST",
        "/workflows/pause",
        "operate",
        _act_on_workflows("pause"),
        "Pause every RUNNING run a filter selects (state may add PAUSED ones, counted unchanged), on "
        "every shard, at most limit a shard a request; next_cursor goes on (dry_run: count and "
        "sample, nothing written).",
        body=BATCH_BODY,
        tag="workflows",
        shape=BATCH_SHAPE,
    ),
    Endpoint(
        "POST",
        "/workflows/resume",
        "operate",
        _act_on_workflows("resume"),
        "Resume every PAUSED run a filter selects, on every shard, at most limit a shard a request; "
        "next_cursor goes on (dry_run: count and sample, nothing written).",
        body=BATCH_BODY,
        tag="workflows",
        shape=BATCH_SHAPE,
    ),
    Endpoint(
        "POST",
        "/workflows/reset",
        "admin",
        _act_on_workflows("reset"),
        "Reset every RUNNING run a filter selects (a terminal run cannot be reset), each to the point "
        "reset_to names in its own history (before_time, the default: the last completed workflow task "
        "written before `before`, the bad deploy's time; or first_workflow_task), on every shard, at most "
        "limit a shard a request; a run once per batch; next_cursor goes on (dry_run: count and sample, "
        "nothing written). reason is required unless dry_run, before with before_time only (a 400 "
        "naming the field).",
        body=BATCH_BODY,
        tag="workflows",
        shape=BATCH_SHAPE,
    ),
    Endpoint(
        "POST",
        "/workflows/{execution_id}/reset",
        "admin",
        reset_workflow,
        "Fork a running execution from a completed boundary under the current code (dry_run: the plan only).",
        (EXECUTION,),
        body(
            {
                "to_event": {"type": "integer", "minimum": 1, "maximum": 2**31 - 1},
                "reason": STRING,
                "operator_id": STRING,
                "signal_reapply": {"type": "string", "enum": ["drop", "buffer"]},
                "dry_run": BOOLEAN,
            },
            ("to_event", "reason"),
        ),
        tag="workflows",
    ),
]
