"""The App the chaos tests run in real worker processes.

Every activity records each run durably in ``chaos_runs`` (a side table the
test creates in the same database), through a small per-process pool on
``HARVEST_DATABASE_URL``. Timestamps come from the database clock, so runs on
different processes compare on one clock.

``gated`` (and its local twin ``gated_local``) block on the *first* run of an
invocation (no earlier row for the same ``(execution_id, seq)``) and return at
once on any later run, so a test knows which run to kill and the retry on
another worker finishes quickly. The blocking mode is the activity's argument:

* ``forever``: sleep until killed or cancelled;
* ``until_retry_done``: wait until a later run of the same invocation has
  finished, then return ``"late"`` (a late finisher, to be refused);
* ``sleep:<secs>``: sleep that long, then return;
* ``stale_then:<s1>,<s2>``: the first run sleeps ``s1`` without heartbeats (it loses a
  heartbeat lease), the second sleeps ``s2`` heartbeating every 0.3 s (it keeps its
  lease); later runs return at once.
"""

from __future__ import annotations

import asyncio
import os
import random
from typing import Any

from psycopg_pool import AsyncConnectionPool

from harvest import App, RetryPolicy, activity, workflow
from harvest.db.pools import open_async_pool

RUNS_DDL = """
CREATE TABLE IF NOT EXISTS chaos_runs (
    id bigserial PRIMARY KEY,
    execution_id text NOT NULL,
    seq integer NOT NULL,
    kind text NOT NULL,
    attempt integer NOT NULL,
    worker_pid integer NOT NULL,
    idem_key text NOT NULL,
    mode text,  -- gated runs only: the blocking mode, so a test can tell a held run from a quick one
    started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at timestamptz,
    result text
)
"""

FAST_RETRY = RetryPolicy(max_attempts=10, initial_interval=0.1, backoff=1.0, max_interval=0.2)

_pool_task: asyncio.Future | None = None


async def _open_pool() -> AsyncConnectionPool:
    # Harvest's pool, so a worker cut off from the database (tests/chaos/test_chaos_network.py)
    # finds its side-table writes fail as its own calls do, in about 30 s, not 15 minutes.
    return await open_async_pool(os.environ["HARVEST_DATABASE_URL"], min_size=1, max_size=4)


async def _pool() -> AsyncConnectionPool:
    """The process's pool, opened by the first activity that needs it. Shielded: a cancel of
    one activity waiting for it (its start_to_close) must not cancel the opening the others
    wait for too; it did, and every later activity of the process awaited a cancelled task
    (a worker woken from SIGSTOP, whose first activities' start_to_close ran out)."""
    global _pool_task
    if _pool_task is None:
        _pool_task = asyncio.ensure_future(_open_pool())
    return await asyncio.shield(_pool_task)


def _seq(ctx: Any) -> int:
    seq = getattr(ctx, "seq", None)  # LocalActivityContext
    return int(seq if seq is not None else ctx._task["seq"])  # ActivityContext keeps it on the task


async def _record_start(ctx: Any, kind: str, mode: str | None = None) -> tuple[int, int]:
    """Insert this run; returns (row id, number of earlier runs of the same invocation)."""
    pool = await _pool()
    async with pool.connection() as conn:
        cur = await conn.execute(
            "INSERT INTO chaos_runs (execution_id, seq, kind, attempt, worker_pid, idem_key, mode) "
            "VALUES (%(e)s, %(s)s, %(k)s, %(a)s, %(p)s, %(i)s, %(m)s) "
            "RETURNING id, (SELECT count(*) FROM chaos_runs AS c "
            "               WHERE c.execution_id = %(e)s AND c.seq = %(s)s) AS prior",
            {
                "e": ctx.execution_id,
                "s": _seq(ctx),
                "k": kind,
                "a": ctx.attempt(),
                "p": os.getpid(),
                "i": str(ctx.idempotency_key()),
                "m": mode,
            },
        )
        row = await cur.fetchone()
    return int(row[0]), int(row[1])


async def _record_finish(run_id: int, result: str) -> None:
    pool = await _pool()
    async with pool.connection() as conn:
        await conn.execute(
            "UPDATE chaos_runs SET finished_at = clock_timestamp(), result = %s WHERE id = %s",
            (result, run_id),
        )


async def _later_run_finished(run_id: int, execution_id: str, seq: int) -> bool:
    pool = await _pool()
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT 1 FROM chaos_runs WHERE execution_id = %s AND seq = %s AND id > %s "
            "AND finished_at IS NOT NULL",
            (execution_id, seq, run_id),
        )
        return await cur.fetchone() is not None


async def _gated(ctx: Any, mode: str, kind: str) -> str:
    run_id, prior = await _record_start(ctx, kind, mode)
    result = f"run{prior + 1}"
    if mode.startswith("stale_then:"):
        durations = [float(x) for x in mode.split(":", 1)[1].split(",")]
        if prior == 0:
            await asyncio.sleep(durations[0])
        elif prior == 1:
            for _ in range(int(durations[1] / 0.3)):
                await ctx.aheartbeat()
                await asyncio.sleep(0.3)
    elif prior == 0:
        if mode == "forever":
            await asyncio.sleep(600)
        elif mode == "until_retry_done":
            for _ in range(600):
                if await _later_run_finished(run_id, ctx.execution_id, _seq(ctx)):
                    break
                await asyncio.sleep(0.05)
            result = "late"
        elif mode.startswith("sleep:"):
            await asyncio.sleep(float(mode.split(":", 1)[1]))
        else:
            raise ValueError(f"unknown mode {mode!r}")
    await _record_finish(run_id, result)
    return result


@activity(start_to_close=2, retry=FAST_RETRY)
async def gated(ctx, mode: str) -> str:
    return await _gated(ctx, mode, "activity")


@activity(local=True, start_to_close=60, retry=FAST_RETRY)
async def gated_local(ctx, mode: str) -> str:
    return await _gated(ctx, mode, "local")


@activity(start_to_close=2, retry=FAST_RETRY)
async def quick(ctx, tag: str, max_delay: float = 0.0) -> str:
    run_id, _ = await _record_start(ctx, "activity")
    if max_delay > 0:
        await asyncio.sleep(random.uniform(0, max_delay))
    result = f"{tag}:ok"
    await _record_finish(run_id, result)
    return result


@workflow
async def wf_single(ctx, mode: str, start_to_close: float, heartbeat_timeout: float | None) -> str:
    """One gated activity with the given timeouts and a fast retry policy."""
    return await ctx.execute_activity(
        gated, mode, start_to_close=start_to_close, heartbeat_timeout=heartbeat_timeout, retry=FAST_RETRY
    )


@workflow
async def wf_decider(ctx, mode: str) -> list:
    """A workflow task that runs long: a gated local activity runs inside it."""
    first = await ctx.execute_activity(quick, "a")
    ctx.now()  # a marker command in the same workflow task as the local activity
    local = await ctx.execute_local_activity(gated_local, mode)
    await ctx.sleep(0.1)
    last = await ctx.execute_activity(quick, "c")
    return [first, local, last]


@workflow
async def wf_race(ctx, n: int) -> list:
    """Three activities in sequence, then a fan-out of three."""
    out = []
    for i in range(3):
        out.append(await ctx.execute_activity(quick, f"{n}-s{i}"))
    out.extend(await asyncio.gather(*(ctx.execute_activity(quick, f"{n}-p{i}") for i in range(3))))
    return out


def race_expected(n: int) -> list:
    return [f"{n}-s{i}:ok" for i in range(3)] + [f"{n}-p{i}:ok" for i in range(3)]


@workflow
async def wf_churn(ctx, n: int) -> list:
    """Activities with jitter, a fan-out and a timer: a target for random kills."""
    out = [await ctx.execute_activity(quick, f"{n}-a", 0.3)]
    out.extend(await asyncio.gather(*(ctx.execute_activity(quick, f"{n}-f{i}", 0.3) for i in range(2))))
    await ctx.sleep(0.2)
    out.append(await ctx.execute_activity(quick, f"{n}-z", 0.3))
    return out


def churn_expected(n: int) -> list:
    return [f"{n}-a:ok", f"{n}-f0:ok", f"{n}-f1:ok", f"{n}-z:ok"]


@workflow
async def wf_ahead(ctx, mode: str) -> list:
    """A gated activity, then two quick ones: with one worker, the step after the gated
    activity is decided ahead and committed with its result (docs/internals.md)."""
    first = await ctx.execute_activity(gated, mode, start_to_close=2.0, retry=FAST_RETRY)
    second = await ctx.execute_activity(quick, "b")
    third = await ctx.execute_activity(quick, "c")
    return [first, second, third]


app = App(
    workflows=[wf_single, wf_decider, wf_race, wf_churn, wf_ahead], activities=[gated, gated_local, quick]
)


# ---------------------------------------------------------------------- messages (signals, updates, cancel)
@workflow
async def wf_signals(ctx, n: int, holds: list) -> list:
    """Collect ``n`` signals ``item`` in order. After each one, a step: a regular activity, or,
    for a value in ``holds``, a ``gated_local("forever")`` that holds the workflow task that
    processes the signal until its worker is killed (the rerun returns at once)."""
    out: list = []
    while len(out) < n:
        value = await ctx.wait_for_signal("item")
        out.append(value)
        if value in holds:
            await ctx.execute_local_activity(gated_local, "forever")
        else:
            await ctx.execute_activity(quick, f"sig{value}", 0.05)
    return out


async def _bump(ctx, arg: dict) -> dict:
    """Update ``bump``: a gated local activity (``arg["mode"]``) inside the handler's workflow
    task, then an activity recorded in chaos_runs, then the state change."""
    await ctx.execute_local_activity(gated_local, arg["mode"])
    receipt = await ctx.execute_activity(quick, arg["tag"])
    ctx.state["n"] += 1
    ctx.state["applied"].append(arg["tag"])
    return {"n": ctx.state["n"], "receipt": receipt}


@workflow
async def wf_updates(ctx) -> dict:
    """Applies ``bump`` updates until signal ``close``; query ``n`` reads the count."""
    ctx.state.update(n=0, applied=[])
    ctx.register_query_handler("n", lambda ctx: ctx.state["n"])
    ctx.register_update_handler("bump", _bump)
    await ctx.wait_for_signal("close")
    await ctx.drain_admitted_updates()
    return {"n": ctx.state["n"], "applied": ctx.state["applied"]}


@workflow
async def wf_short(ctx, n: int, steps: int) -> str:
    """Completes quickly: ``steps`` (0 or more) quick activities, then a result."""
    for i in range(steps):
        await ctx.execute_activity(quick, f"{n}-{i}", 0.05)
    return f"done{n}"


app = App(
    workflows=[*app.workflows.values(), wf_signals, wf_updates, wf_short],
    activities=list(app.activities.values()),
)


# ---------------------------------------------------------------------- another workflow (external signal)
@workflow
async def wf_ext_sender(ctx, target: str, hold: bool) -> str:
    """Signal ``item`` ("from-sender") to the run ``target``. With ``hold``, the same step runs
    ``gated_local("forever")``: the signal is decided but the decision waits to commit until
    its worker is killed (the rerun's local activity returns at once)."""
    sent = ctx.signal_external_workflow(target, "item", "from-sender")
    if hold:
        await asyncio.gather(sent, ctx.execute_local_activity(gated_local, "forever"))
    else:
        await sent
    return "sent"


app = App(workflows=[*app.workflows.values(), wf_ext_sender], activities=list(app.activities.values()))


# ---------------------------------------------------------------------- completed elsewhere (task token)
@activity(start_to_close=60, retry=FAST_RETRY)
async def external_step(ctx, tag: str) -> str:
    """Leaves its result to whoever holds its task token: the token is the run's ``mode`` in
    chaos_runs, where the test reads it."""
    await _record_start(ctx, "external", ctx.task_token)
    raise ctx.complete_async()


@workflow
async def wf_external(ctx, tag: str) -> str:
    got = await ctx.execute_activity(external_step, tag)
    return f"{tag}:{got}"


app = App(
    workflows=[*app.workflows.values(), wf_external], activities=[*app.activities.values(), external_step]
)


# ---------------------------------------------------------------------- a claim that decides
@workflow
async def wf_held_decision(ctx, tag: str) -> str:
    """One quick activity. In a worker started with ``CHAOS_HOLD_DECISION`` naming a file that
    exists, the first workflow task blocks the worker's whole event loop (it is killed there)
    after writing ``<file>.entered``: the claim that woke it is still open, its decision not sent
    (harvest/worker/worker.py, "_claim_deciding"). Any other worker decides it at once."""
    hold = os.environ.get("CHAOS_HOLD_DECISION")
    if hold and os.path.exists(hold):
        import time

        with open(hold + ".entered", "w") as marker:
            marker.write(str(os.getpid()))
        time.sleep(600)
    return await ctx.execute_activity(quick, tag)


app = App(workflows=[*app.workflows.values(), wf_held_decision], activities=list(app.activities.values()))


# ------------------------------------------------------------- a def activity that does not end
def _blocked(ctx: Any) -> str:
    """Blocks its thread or process for ten minutes (nothing can cancel it there), once it has
    written the file ``CHAOS_BLOCKED_MARK`` names."""
    import pathlib
    import time

    pathlib.Path(os.environ["CHAOS_BLOCKED_MARK"]).touch()
    time.sleep(600)
    return "late"


@activity(start_to_close=600)
def blocked_in_thread(ctx) -> str:
    return _blocked(ctx)


@activity(start_to_close=600, executor="process")
def blocked_in_process(ctx) -> str:
    return _blocked(ctx)


@activity(local=True, start_to_close=600)
def blocked_local(ctx) -> str:
    return _blocked(ctx)


@workflow
async def wf_blocked(ctx, executor: str) -> str:
    """One ``def`` activity that blocks its thread (``executor`` "thread"), its process
    ("process"), or a local one's thread ("local", in the workflow task)."""
    if executor == "local":
        return await ctx.execute_local_activity(blocked_local)
    return await ctx.execute_activity(blocked_in_process if executor == "process" else blocked_in_thread)


app = App(
    workflows=[*app.workflows.values(), wf_blocked],
    activities=[*app.activities.values(), blocked_in_thread, blocked_in_process, blocked_local],
)


# ------------------------------------------------------------- an entity under every message at once
async def _bump_entity(ctx, tag: str) -> str:
    """Update ``bump``: an activity, then the tag is applied to the entity's state."""
    await ctx.execute_activity(quick, f"u-{tag}", 0.05)
    ctx.state["applied"].append(tag)
    return tag


@workflow
async def wf_entity(ctx, total: int, seen: list, applied: list) -> dict:
    """Collect ``total`` signals ``item`` across rotations (continue-as-new every ``ROTATE``
    signals, carrying what it saw and the updates it applied), a step after each (an activity
    or a timer); updates ``bump`` apply once each."""
    ctx.state["applied"] = list(applied)
    ctx.register_update_handler("bump", _bump_entity)
    this_run = 0
    while len(seen) < total:
        value = await ctx.wait_for_signal("item")
        seen.append(value)
        this_run += 1
        if this_run % 2:
            await ctx.execute_activity(quick, f"s{value}", 0.05)
        else:
            await ctx.sleep(0.05)
        if this_run >= 4 and len(seen) < total:
            await ctx.drain_admitted_updates()
            ctx.continue_as_new(total, seen, ctx.state["applied"])
    await ctx.drain_admitted_updates()
    return {"seen": seen, "applied": ctx.state["applied"]}


app = App(workflows=[*app.workflows.values(), wf_entity], activities=list(app.activities.values()))


@workflow
async def wf_collect(ctx, n: int) -> list:
    """Collect ``n`` signals ``item`` in order, one workflow task each (a reset may fork it at
    the end of any of them)."""
    seen: list = []
    while len(seen) < n:
        seen.append(await ctx.wait_for_signal("item"))
    return seen


app = App(workflows=[*app.workflows.values(), wf_collect], activities=list(app.activities.values()))
