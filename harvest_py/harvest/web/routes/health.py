"""Health probes: ``/health`` (cheap liveness, or readiness with
``readiness.require_shard_readiness``), ``/health/live`` (the process answers) and
``/health/ready`` (the database answers with this Harvest's schema; with
``readiness.require_shard_readiness``, every writable shard is ready). Each answers 503
``worker_stopped`` once the runtimes the process runs beside the API ended by themselves
(HarvestLifespan's worker). No authorization: probes carry no data."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.concurrency import run_in_threadpool

from harvest.db import SCHEMA_VERSION
from harvest.db.connection import SERVER_FULL_ADVICE
from harvest.db.migrate import read_versions, version_mismatch
from harvest.db.pools import met_full_server
from harvest.db.sqlapi import AsyncSqlApi
from harvest.db.steps import arun_steps
from harvest.web.errors import error_body
from harvest.web.routes import Endpoint, Reply, shape

STATUS = shape(status={"type": "string"})

RESPONSES = {200: "Ready", 503: "Not ready"}

# Seconds /health/ready waits for the database's versions before it answers 503: a database gone
# silent held each probe for the pool's 30-second connect wait, so probes piled up and
# `harvest health` waited as long.
PROBE_WAIT_SECS = 5.0


def shard_urls(state: Any) -> dict[int, str]:
    """Each shard's database URL, for the checks that open connections of their own."""
    if state.pools is not None:
        return {s: state.pools.dsn(s) for s in state.pools.shards}
    return {0: state.dsn}


async def shard_readiness(
    state: Any, candidate: int | None = None, *, pressure: bool = True
) -> dict[str, Any]:
    """harvest.shard.health over every configured shard (its own short connections, in a thread);
    ``pressure`` False (the probe's): what the readiness gates on alone, no per-queue counts."""
    from harvest.shard.health import shard_health

    await state.open()
    return await run_in_threadpool(
        shard_health, state.router, shard_urls(state), candidate=candidate, pressure=pressure
    )


async def _schema(state: Any) -> dict[str, tuple[str | None, str | None] | BaseException]:
    """Each writable shard's (one database: the database's, as shard 0) schema version and
    functions_version() (read_versions), or what failed the read of a shard."""
    await state.open()
    if state.pools is None:
        return {"0": await arun_steps(read_versions(), AsyncSqlApi(state.pool))}
    found: dict[str, tuple[str | None, str | None] | BaseException] = {}
    for shard in state.router.writable:
        try:
            async with state.pools.api(shard) as sql:
                found[str(shard)] = await arun_steps(read_versions(), sql)
        except Exception as exc:
            found[str(shard)] = exc
    return found


def _differences(found: dict[str, tuple[str | None, str | None] | BaseException]) -> dict[str, str]:
    """What keeps each shard from serving this Harvest, by shard: its schema version or its
    functions_version() not this package's (version_mismatch: which one, both versions, the
    remedy), or its read failed (the error's type: the probes are unauthenticated)."""
    out: dict[str, str] = {}
    for shard, versions in found.items():
        if isinstance(versions, BaseException):
            out[shard] = (
                f"its versions could not be read ({type(versions).__name__}: unreachable, or not "
                "migrated: harvest migrate)"
            )
        elif (mismatch := version_mismatch(*versions, "this web process")) is not None:
            out[shard] = str(mismatch)
    return out


def _not_ready(message: str, **details: Any) -> Reply:
    """503, with the probe's status and the API's error shape (a retryable 503: Retry-After)."""
    return Reply(
        {"status": "not_ready", **details, **error_body("not_ready", message)}, 503, {"Retry-After": "1"}
    )


def _runtimes_stopped(state: Any) -> Reply | None:
    """503 when the runtimes this process runs beside the API (HarvestLifespan's worker) ended
    by themselves: such a process answers requests and runs nothing, and only a restart brings
    them back (the boot then fails loudly if their cause remains). The error's type only: the
    probes are unauthenticated, its text is in the process's log."""
    error = state.runtimes_failure()
    if error is None:
        return None
    return Reply(
        {
            "status": "worker_stopped",
            **error_body(
                "worker_stopped",
                f"the worker of this process stopped ({type(error).__name__}; its log has the cause): "
                "restart the process",
            ),
        },
        503,
    )


def _ok(state: Any, body: dict[str, Any]) -> Reply:
    """200 with ``body``; once a remote drain stopped the worker this process ran beside the API
    (its claim loop, scheduler and janitor), ``runtimes: "drained"`` and ``drained_at`` too: the
    process serves on, and runs none of them."""
    if state.drained is not None:
        body = {**body, "runtimes": "drained", "drained_at": state.drained["at"]}
    return Reply(body)


async def ready(call: Any) -> Reply:
    state = call.state
    if (stopped := _runtimes_stopped(state)) is not None:
        return stopped
    if state.config.get("readiness.require_shard_readiness"):
        shards_task = asyncio.ensure_future(shard_readiness(state, pressure=False))
        if not await _answered(shards_task):
            return _timed_out()
        health = shards_task.result()
        if health["readiness"] != "ready":
            return _not_ready(
                f"shard readiness is {health['readiness']}: GET /admin/shards/health names the reasons",
                readiness=health["readiness"],
            )
        return _ok(state, {"status": "ready", "readiness": health["readiness"]})
    read_task = asyncio.ensure_future(_schema(state))
    if not await _answered(read_task):
        return _timed_out()
    try:
        found = read_task.result()
    except Exception as exc:
        if met_full_server(exc):  # up, with no connection slot left: the remedy is not the server's restart
            return _not_ready(SERVER_FULL_ADVICE, reason="ServerFull")
        return _not_ready(
            f"the database does not answer with this Harvest's schema {SCHEMA_VERSION} "
            f"({type(exc).__name__}: unreachable, or not migrated: harvest migrate)",
            reason=type(exc).__name__,
        )
    read = {s: (None, None) if isinstance(v, BaseException) else v for s, v in found.items()}
    body: dict[str, Any] = {
        # this process's, then each shard's (one database: "0")
        "schema_version": SCHEMA_VERSION,
        "functions_version": SCHEMA_VERSION,
        "shards": {s: v[0] for s, v in read.items()},
        "functions": {s: v[1] for s, v in read.items()},
    }
    differences = _differences(found)
    if differences:
        # migrated, and its functions not yet: `harvest migrate run` did not finish
        unfinished = sorted(s for s, (v, f) in read.items() if s in differences and v == SCHEMA_VERSION)
        said = "; ".join(
            message if state.pools is None else f"shard {s}: {message}" for s, message in differences.items()
        )
        extra = {"unfinished_migration": unfinished} if unfinished else {}
        return _not_ready(said, differences=differences, **extra, **body)
    return _ok(state, {"status": "ready", **body})


async def _answered(task: asyncio.Future[Any]) -> bool:
    """Whether ``task`` (a read of the database) ended within PROBE_WAIT_SECS; if not, it is
    cancelled and left to end in its own time (a call on a silent server may take long to)."""
    done, _ = await asyncio.wait({task}, timeout=PROBE_WAIT_SECS)
    if not done:
        task.cancel()
        task.add_done_callback(_consume)
    return bool(done)


def _timed_out() -> Reply:
    return _not_ready(
        f"the database did not answer within {PROBE_WAIT_SECS:g} s (it is down or overloaded)",
        reason="timeout",
    )


def _consume(task: asyncio.Future[Any]) -> None:
    """Take the outcome of a read the probe gave up on, so asyncio logs no unretrieved error."""
    if not task.cancelled():
        task.exception()


async def health(call: Any, args: dict[str, Any], _: Any) -> Reply:
    if call.state.config.get("readiness.require_shard_readiness"):
        return await ready(call)
    return _runtimes_stopped(call.state) or _ok(call.state, {"status": "ok"})


async def health_live(call: Any, args: dict[str, Any], _: Any) -> Reply:
    return _runtimes_stopped(call.state) or _ok(call.state, {"status": "ok"})


async def health_ready(call: Any, args: dict[str, Any], _: Any) -> Reply:
    return await ready(call)


ENDPOINTS = [
    Endpoint(
        "GET",
        "/health",
        None,
        health,
        "Liveness (readiness with readiness.require_shard_readiness; 503 once its worker stopped).",
        responses=RESPONSES,
        tag="health",
        shape=STATUS,
    ),
    Endpoint(
        "GET",
        "/health/live",
        None,
        health_live,
        "The process answers (503 once its in-process worker stopped).",
        responses=RESPONSES,
        tag="health",
        shape=STATUS,
    ),
    Endpoint(
        "GET",
        "/health/ready",
        None,
        health_ready,
        "The database answers with this Harvest's schema.",
        responses=RESPONSES,
        tag="health",
        shape=STATUS,
    ),
]
