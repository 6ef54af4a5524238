"""Administration: preflight, concurrency, usage, queue scaling signals, config (with
``shard_topology``), queue coverage, version-gate usage, retention (``placed_elsewhere``; run-now
answers 503 where the janitor does not run), rate-limit pacing overrides, shard health and the
audit log and its pruning (docs/http-api.md, "Admin"). Every route here needs the admin scope."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any, cast

from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from harvest.config import declared_queues, merge_coverage, resolve_queues
from harvest.core.durations import interval_problem, moment
from harvest.core.errors import HarvestError, InvalidArgument, NotPlacedHere
from harvest.core.ids import MAX_SHARD
from harvest.shard.fanout import CONCURRENCY_PAGE, CONCURRENCY_PAGE_MAX, USAGE_SUMS
from harvest.telemetry.metrics import CONTENT_TYPE
from harvest.web.routes import (
    BOOLEAN,
    FANOUT,
    INTEGER,
    ROWS,
    STRING,
    Call,
    Endpoint,
    Param,
    Reply,
    body,
    fanout_keys,
    invalid,
    merged,
    path,
    shape,
)
from harvest.web.routes.health import shard_readiness, shard_urls
from harvest.worker.options import WorkerOptions

log = logging.getLogger("harvest.web")


async def concurrency(call: Call, args: dict[str, Any], _: Any) -> Any:
    """The spec's shape, a JSON array of keys, a page of them in key order; a partial read says
    so in X-Harvest-Status, a next page in X-Harvest-Next-Cursor (the array stays the body)."""
    limit = args["limit"] if args["limit"] is not None else CONCURRENCY_PAGE
    found = merged(call, await call.reads().list_concurrency_keys(args["key"], limit, args["cursor"]), "keys")
    headers = {"X-Harvest-Status": found["status"]}
    if found["unavailable_shards"]:
        headers["X-Harvest-Unavailable-Shards"] = ",".join(map(str, found["unavailable_shards"]))
    if found.get("next_cursor"):
        headers["X-Harvest-Next-Cursor"] = found["next_cursor"]
    return Reply(found["keys"], headers=headers)


async def usage(call: Call, args: dict[str, Any], _: Any) -> Any:
    now = datetime.now(UTC)
    window = {}
    for name, raw in (("from", args["from"]), ("to", args["to"] or "0s")):
        try:
            window[name] = moment(raw, name, now)
        except InvalidArgument as exc:
            raise invalid(name, str(exc)) from None
    start, end = window["from"], window["to"]
    found = await call.reads().count_usage(start, end, args["group_by"])
    rows = merged(call, found, "rows")["rows"]  # (none read: its 503)
    return {
        "from": start.isoformat(),
        "to": end.isoformat(),
        "group_by": args["group_by"],
        "groups": [{"group": r["group_name"], **{k: r.get(k) for k in USAGE_SUMS}} for r in rows],
        **fanout_keys(call, found),
    }


def _rebalance_resume(config: Any) -> dict[str, Any]:
    """The rebalance-resume scanner a worker of this configuration runs (WorkerOptions' defaults
    for the keys not set), in the sharding guide's names."""
    defaults = WorkerOptions()
    enabled = config.get("worker.rebalance_resume_enabled", defaults.rebalance_resume_enabled)
    return {
        "rebalance_resume_enabled": enabled,
        "rebalance_resume_interval_ms": round(
            1000 * config.get("worker.rebalance_resume_interval", defaults.rebalance_resume_interval)
        ),
        "rebalance_stall_after_ms": round(
            1000 * config.get("worker.rebalance_stall_after", defaults.rebalance_stall_after)
        ),
    }


def _queues(call: Call) -> dict[str, Any]:
    app, config, plan = call.state.app, call.state.config, call.state.plan
    if plan is not None and not plan.worker.value:
        # No claim loop in this process (a web replica): it polls no queue and no shard, whatever
        # worker.queues and worker.shard_assignments configure for a worker that is not here.
        why = f"no worker in this process: {plan.worker.line()}"
        return {
            "runs_here": False,
            "drained": call.state.drained,
            "queues": [],
            "declared_queues": declared_queues(app) if app is not None else None,
            "queue_source": why,
            "shard_assignments": [],
            "shard_assignments_source": why,
        }  # (and no rebalance-resume fields: the scanner runs in a worker's scanner pass)
    # The resolved shards a worker of this configuration polls: auto is every shard with a url
    # (a pool here), not every readable one: a shard the router reads but no url reaches is
    # exactly the gap the guide's coverage check is for.
    assignments = config.get("worker.shard_assignments")
    pools = call.state.pools
    if assignments not in (None, "auto"):
        shards = list(assignments)
    elif pools is not None:
        shards = sorted(pools.shards)
    else:
        shards = list(call.state.router.readable)
    out: dict[str, Any] = {
        "runs_here": plan.worker.value if plan is not None else None,
        "drained": call.state.drained,
        "shard_assignments": shards,
        "shard_assignments_source": assignments or "auto",
        **_rebalance_resume(config),
    }
    if app is None:
        return {
            **out,
            "queues": config.get("worker.queues"),
            "declared_queues": None,
            "queue_source": "no App",
        }
    polled, declared, source = resolve_queues(app, config)
    return {**out, "queues": polled, "declared_queues": declared, "queue_source": source}


async def config(call: Call, args: dict[str, Any], _: Any) -> Any:
    state, router = call.state, call.state.router
    plan = state.plan
    return {
        "profile": state.profile,
        "role": plan.role if plan else None,
        "runtimes": {s.name: {"value": s.value, "source": s.source} for s in plan.switches} if plan else {},
        "worker": _queues(call),
        "retention": {
            "run_on": plan.run_on if plan else None,
            "runs_here": bool(plan and plan.retention.value),
            # The janitor's age for the audit log (null: never pruned by the janitor).
            "audit_max_age": state.config.get("retention.audit_max_age"),
        },
        "readiness": {"require_shard_readiness": bool(state.config.get("readiness.require_shard_readiness"))},
        "auth": {"unauthenticated_access": state.unauthenticated},
        # The router's own projection, key-ordered (byte-stable, so a diff across replicas
        # shows a disagreeing map), with every placement field the router has.
        "shard_topology": router.topology(),
    }


async def queue_coverage(call: Call, args: dict[str, Any], _: Any) -> Any:
    """Each declared queue with no live worker on a writable shard (the queues asked for, else
    the served App's); null when unknown, as with no App: the fleet's registered queues are
    reported (``registered_queues``) but miss a queue no worker ever registered."""
    if args["queue"]:
        declared, source = sorted(set(args["queue"])), "request"  # `harvest queue coverage --app`
    elif call.state.app is not None:
        declared, source = declared_queues(call.state.app), "app"
    else:
        declared, source = None, "none"

    async def read(sql: Any) -> Any:
        registered = sorted(
            {q for row in await sql.list_workers(None, None, None) for q in row.get("queues") or []}
        )
        return registered, await sql.list_workers(None, "active", "healthy")

    fan = await call.each_shard(read)
    data = merge_coverage(fan.results, declared, call.state.router.writable, fan.unavailable_shards)
    data["declared_source"] = source
    return {**data, **fanout_keys(call, fan)}


async def version_usage(call: Call, args: dict[str, Any], _: Any) -> Any:
    # (count_versions refuses these too, as HR001; asked here first, the 400 names its field)
    version, history_before = args["recorded_version"], args["history_before"]
    if version is not None and version < 0 and (version != -1 or history_before is None):
        raise invalid(
            "recorded_version",
            f"{version} is not a recorded version: one is 0 or more; -1 (DEFAULT_VERSION, no marker)"
            " needs history_before",
        )
    if history_before is not None and args["state_group"] != "active":
        raise invalid("history_before", f"counts active runs only, not state_group {args['state_group']}")
    shards = None if args["shard_id"] is None else (args["shard_id"],)
    if shards and shards[0] not in call.providers():
        raise invalid("shard_id", f"{shards[0]} is not a shard of this deployment")
    from harvest.shard.fanout import fan_out_async

    fan = await fan_out_async(
        call.providers(),
        lambda sql: sql.count_versions(
            args["change_id"],
            args["recorded_version"],
            args["state_group"],
            args["workflow_name"],
            **({"history_before": args["history_before"]} if args["history_before"] is not None else {}),
        ),
        shards=shards,
        timeout=call.state.shard_timeout if call.sharded else None,
    )
    rows = [{**r, "shard_id": s} for s, found in fan.results.items() for r in found]
    total = sum(r["executions"] for r in rows)
    status = fan.status if fan.status != "complete" else ("complete" if total else "no_matches")
    return {
        **fanout_keys(call, fan),
        "status": status,  # (no_matches: every shard read, no run recorded it)
        "change_id": args["change_id"],
        "recorded_version": args["recorded_version"],
        "state_group": args["state_group"],
        "versions": rows,
        "executions": total,
    }


async def retention(call: Call, args: dict[str, Any], _: Any) -> Any:
    plan = call.state.plan
    here = bool(plan and plan.retention.value)
    out: dict[str, Any] = {
        "run_on": plan.run_on if plan else None,
        "placed_elsewhere": not here,
        "runs_here": {"value": here, "source": plan.retention.source if plan else None},
    }
    if not here:
        return {**out, "shards": []}  # the janitor of this process: none; its config only
    fan = await call.each_shard(lambda sql: sql.get_retention_status())
    shards = [{"shard_id": s, **data} for s, data in fan.results.items()]
    return {**out, "shards": shards, **fanout_keys(call, fan)}


def _not_here(config: Any, plan: Any) -> NotPlacedHere:
    """Why this process runs no janitor, first reason first: the switch turned off, then the
    process running less than its config places, then the placement (run_on)."""
    switch = config.setting("retention.enabled")
    if switch is not None and not switch.value:  # switched off: no placement would run it here
        return NotPlacedHere(
            f"retention does not run in this process: retention.enabled=false (from {switch.source}) "
            "turns the janitor off here; unset it to sweep from the API, or let a process that runs "
            "the janitor sweep"
        )
    if plan is not None and not plan.retention.source.startswith("follows"):
        # Not the placement: the process runs less than its config places (HarvestLifespan
        # with run_worker=False, or worker_options that turn the janitor off).
        here = (
            "HarvestLifespan's worker_options: run_retention=True"
            if "worker_options" in plan.retention.source
            else "HarvestLifespan(run_worker=True)"
        )
        return NotPlacedHere(
            f"retention does not run in this process ({plan.retention.line()}); let a process "
            f"that runs the janitor sweep, or run it here ({here})"
        )
    return NotPlacedHere(
        'retention does not run in this process: run_on = "scheduler" places the janitor with the '
        'scheduler, which this replica does not run; set run_on = "all" (HARVEST_RETENTION__RUN_ON=all) '
        "on the web replicas to sweep from the API, or let the next tick on a worker replica run it"
    )


async def retention_run_now(call: Call, args: dict[str, Any], data: dict[str, Any]) -> Any:
    plan = call.state.plan
    if not (plan and plan.retention.value):
        raise _not_here(call.state.config, plan)
    from harvest.db.prunes import MAX_BATCHES, sweep_retention_steps, sweep_totals
    from harvest.db.steps import arun_steps

    _interval(data, "max_age")
    operator = data.get("operator_id") or call.operator_id
    max_batches = data.get("max_batches") or MAX_BATCHES

    async def sweep(sql: Any) -> dict[str, Any]:
        steps = sweep_retention_steps(data.get("max_age"), data.get("batch_size"), max_batches, operator)
        return await arun_steps(steps, sql)

    # Each shard's sweep to its end (max_batches): never cut off by shard_timeout part way.
    done = await call.each_shard_write(sweep, "nothing was swept", bounded=False)
    shards = [{"shard_id": s, **r} for s, r in done.results.items()]
    return {**sweep_totals(shards, done.unavailable_shards), **done.outcome()}


async def release_owed_ends(call: Call, args: dict[str, Any], data: dict[str, Any]) -> Any:
    """`harvest shard release-owed-ends` in the server: on every readable shard but the parent's
    (nothing is owed to itself), the ends of cross-shard children owed to that shard, gone for
    good, released batch by batch until a batch releases nothing (or their counts: dry_run).
    First the parent's shard is probed (unless ``force``): alive as itself, 409
    ``parent_shard_alive`` and nothing released (a dry run answers it in ``parent_check``)."""
    from harvest.db.steps import arun_steps
    from harvest.shard.children import owed_to, parent_check, release_owed_steps, release_totals
    from harvest.shard.health import probe_shard

    parent = args["shard_id"]
    operator = data.get("operator_id") or call.operator_id
    include_running = bool(data.get("include_running"))
    dry_run = bool(data.get("dry_run"))
    force = bool(data.get("force"))
    batch_size = data.get("batch_size") or 500
    max_batches = data.get("max_batches") or 1000

    async def on(sql: Any) -> dict[str, Any]:
        owed = owed_to(await sql.get_retention_status(), parent)
        if dry_run:
            return owed
        steps = release_owed_steps(parent, batch_size, include_running, max_batches, operator, force=force)
        return await arun_steps(steps, sql)

    others = [s for s in call.state.router.readable if s != parent] if call.sharded else None
    if others == []:
        raise invalid("shard_id", f"no readable shard but {parent}: no end can be owed to it here")
    probe = None
    if not force:  # (its own short connection, in a thread, as /admin/shards/health reads)
        await call.state.open()
        probe = await run_in_threadpool(probe_shard, call.state.router, shard_urls(call.state), parent)
        parent_check(probe, dry_run)  # ParentShardAlive: 409, nothing released
    # Each shard's release to its end (max_batches): never cut off by shard_timeout part way.
    done = await call.each_shard_write(on, "nothing was released", shards=others, bounded=False)
    return {
        **release_totals(parent, include_running, dry_run, done.results, done.unavailable_shards, probe),
        **done.outcome(),
    }


async def every_shard_read(call: Call, fn: Any) -> dict[str, Any]:
    """A pacing read on every shard (a rate limit, a start throttle): each shard's answer by
    shard number, and the shards not read."""
    fan = await call.each_shard(fn)
    return {"shards": {str(s): r for s, r in fan.results.items()}, **fanout_keys(call, fan)}


async def every_shard_write(
    call: Call, fn: Any, audit: tuple[str, str, str | None] | None = None
) -> dict[str, Any]:
    """A pacing write on every shard: the answers, and shard_errors for the shards not reached
    or that refused; none reached is a 503 (no override anywhere), none done the first refusal.
    ``audit`` (operation, target, operator): a write that missed a shard is audited as failed
    on each shard that took it (harvest.record_incomplete_write), so the audit log says so too."""
    done = await call.each_shard_write(fn, "no override was applied anywhere")
    missed = done.shard_errors()
    if audit is not None and missed and done.results:
        operation, target, operator = audit
        try:
            await call.each_shard(
                lambda sql: sql.record_incomplete_write(operation, target, missed, operator),
                "the failed write was not audited",
                shards=list(done.results),
            )
        except HarvestError as exc:  # the answer names the missed shards all the same
            log.warning("%s %s missed shard(s) and that could not be audited: %s", operation, target, exc)
    return {"shards": {str(s): r for s, r in done.results.items()}, **done.outcome()}


async def set_rate_limit_override(call: Call, args: dict[str, Any], data: dict[str, Any]) -> Any:
    name = args["activity_name"]
    operator = data.get("operator_id") or call.operator_id
    out = await every_shard_write(
        call,
        lambda sql: sql.set_rate_limit_override(
            name, data["rps"], data.get("burst"), data.get("ttl_secs") or 3600, operator
        ),
        ("rate_limit.override", name, operator),
    )
    return {"activity_name": name, **out}


async def clear_rate_limit_override(call: Call, args: dict[str, Any], _: Any) -> Any:
    name = args["activity_name"]
    operator = args["operator_id"] or call.operator_id
    out = await every_shard_write(
        call,
        lambda sql: sql.clear_rate_limit_override(name, operator),
        ("rate_limit.clear_override", name, operator),
    )
    return {"activity_name": name, **out}


async def get_rate_limit(call: Call, args: dict[str, Any], _: Any) -> Any:
    name = args["activity_name"]
    return {"activity_name": name, **await every_shard_read(call, lambda sql: sql.get_rate_limit(name))}


async def shards_health(call: Call, args: dict[str, Any], _: Any) -> Any:
    return await shard_readiness(call.state, args["candidate_shard"])


async def audit_log(call: Call, args: dict[str, Any], _: Any) -> Any:
    """Every shard's rows merged newest first, paged by ``cursor`` (harvest.shard.fanout)."""
    found = await call.reads().list_audit_log(args["limit"], args["operation"], args["cursor"])
    return {**merged(call, found, "entries"), "next_cursor": found.next_cursor}


async def audit_prune(call: Call, args: dict[str, Any], data: dict[str, Any]) -> Any:
    """`harvest audit prune` in the server: on every readable shard, the audit rows older than
    older_than deleted batch by batch until none older remains (each deleting batch audited,
    audit.prune), or their count (dry_run); the totals as the CLI over SQL prints them."""
    from harvest.db.prunes import BATCH_SIZE, prune_audit_log_steps
    from harvest.db.steps import arun_steps
    from harvest.shard.fanout import audit_prune_totals

    older_than = _interval(data, "older_than")
    operator = data.get("operator_id") or call.operator_id
    dry_run = bool(data.get("dry_run"))
    batch_size = data.get("batch_size") or BATCH_SIZE

    async def on(sql: Any) -> dict[str, Any]:
        if dry_run:  # (the count only a dry run answers: no progress bar here to size)
            return cast("dict[str, Any]", await sql.count_audit_log(older_than))
        return await arun_steps(prune_audit_log_steps(older_than, batch_size, operator), sql)

    # Each shard's prune to its end: never cut off by shard_timeout part way.
    done = await call.each_shard_write(on, "nothing was pruned", bounded=False)
    return {
        **audit_prune_totals(older_than, dry_run, done.results, done.unavailable_shards),
        **done.outcome(),
    }


async def preflight(call: Call, args: dict[str, Any], _: Any) -> Any:
    """The deploy gate's checks (harvest.config.preflight, as `harvest preflight`), plus whether
    this API has an auth boundary."""
    from harvest.config.preflight import Check, overall, run_checks, run_shard_checks

    state = call.state
    await state.open()
    if state.sharded:
        checks = await run_in_threadpool(run_shard_checks, state.router, shard_urls(state), state.app)
    else:
        checks = await run_in_threadpool(run_checks, cast(str, state.dsn), state.app)  # one database
    unauthenticated = state.unauthenticated
    checks.append(
        Check(
            "admin_auth_boundary",
            "warn" if unauthenticated else "pass",
            "the management API serves every caller as admin (dev profile, no authorizer)"
            if unauthenticated
            else "the management API authorizes every call",
            details={"unauthenticated_access": unauthenticated, "profile": state.profile},
            remediation="give management_app an authorizer (API tokens) before exposing it"
            if unauthenticated
            else None,
        )
    )
    observed = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    return {
        "overall_status": overall(checks),
        "observed_at": observed,
        "checks": [c.to_json() for c in checks],
    }


# -- scaling signals for an autoscaler (KEDA, an HPA on external metrics) -------------------------

# desired_workers assumes a worker runs this many tasks at once unless ?per_worker= says otherwise:
# the worker's own default concurrency (harvest.worker.options.WorkerOptions.concurrency).
DEFAULT_PER_WORKER = 20


def scaling_signals(
    reads: list[tuple[dict[str, Any], list[dict[str, Any]]]], per_worker: int
) -> list[dict[str, Any]]:
    """Per queue, over the shards' (``get_metric_samples``, healthy active ``list_workers``)
    answers, workflow and activity tasks together: claimable backlog, oldest claimable age (the
    oldest on any shard), scheduled and running tasks summed; ``workers`` the distinct healthy,
    active workers polling it (one polling several shards counts once); ``desired_workers`` =
    ceil((backlog + running) / per_worker): enough workers for the work ready now and in hand;
    ``estimated`` whether backlog and scheduled (so desired_workers) sum a sampler's estimate
    (a queue past its cap on some shard, docs/observability.md "Queue depths past the cap")."""
    queues: dict[str, dict[str, Any]] = {}
    polling: dict[str, set[str]] = {}

    def row(name: str) -> dict[str, Any]:
        empty = {"backlog": 0, "oldest_age_seconds": None, "scheduled": 0, "running": 0, "workers": 0}
        return queues.setdefault(name, {"queue": name, **empty, "estimated": False})

    for sample, healthy in reads:
        for q in sample.get("queues") or []:
            out = row(q["queue"])
            out["backlog"] += int(q["claimable"])
            out["scheduled"] += int(q["scheduled"])
            out["running"] += int(q["running"])
            out["estimated"] = out["estimated"] or bool(q.get("estimated"))
            age = q.get("oldest_claimable_secs")
            if age is not None:
                out["oldest_age_seconds"] = max(float(age), out["oldest_age_seconds"] or 0.0)
        for w in sample.get("workers") or []:
            row(w["queue"])  # a queue a registered worker names answers too (desired 0 when idle)
        for worker in healthy:
            for name in worker.get("queues") or []:
                row(name)
                polling.setdefault(name, set()).add(worker["worker_id"])
    for name, out in queues.items():
        out["workers"] = len(polling.get(name, ()))
        out["desired_workers"] = -(-(out["backlog"] + out["running"]) // per_worker)
    return [queues[name] for name in sorted(queues)]


# A queue's row of /admin/queues/scaling, for /openapi.json.
SCALING_QUEUE = shape(
    queue=STRING,
    backlog=INTEGER,
    oldest_age_seconds={"type": ["number", "null"]},
    scheduled=INTEGER,
    running=INTEGER,
    workers=INTEGER,
    desired_workers=INTEGER,
    estimated=BOOLEAN,
)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


GAUGES = (
    ("backlog", "Claimable tasks (due now, not yet claimed) of the queue, over every shard."),
    ("oldest_age_seconds", "Age of the oldest claimable task of the queue (0: none)."),
    ("scheduled", "Tasks of the queue due later (retries, delays), over every shard."),
    ("running", "Tasks of the queue claimed and running now."),
    ("workers", "Healthy workers polling the queue."),
    ("desired_workers", "ceil((backlog + running) / per_worker): a worker-count hint."),
    ("estimated", "1: backlog and scheduled sum an estimate (the queue is past the sampler's cap)."),
)


def scaling_text(queues: list[dict[str, Any]], unavailable: int) -> str:
    """The signals as Prometheus text (one gauge family per signal, a ``queue`` label)."""
    lines: list[str] = []
    for key, help_text in GAUGES:
        name = f"harvest_queue_scaling_{key}"
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        lines += [
            f'{name}{{queue="{_label(q["queue"])}"}} {+(q[key] or 0)}' for q in queues
        ]  # (+: a bool as 0/1)
    name = "harvest_queue_scaling_unavailable_shards"
    lines += [f"# HELP {name} Shards not read for these signals (0: complete).", f"# TYPE {name} gauge"]
    lines.append(f"{name} {unavailable}")
    return "\n".join(lines) + "\n"


async def queue_scaling(call: Call, args: dict[str, Any], _: Any) -> Any:
    """Scaling signals per queue, summed over every shard; JSON, or Prometheus text."""

    async def read(sql: Any) -> Any:
        return await sql.get_metric_samples(0), await sql.list_workers(None, "active", "healthy")

    fan = await call.each_shard(read)
    queues = scaling_signals(list(fan.results.values()), args["per_worker"])
    if args["queue"] is not None:
        queues = [q for q in queues if q["queue"] == args["queue"]]
    headers = {"X-Harvest-Status": fan.status}
    if fan.unavailable_shards:
        headers["X-Harvest-Unavailable-Shards"] = ",".join(map(str, fan.unavailable_shards))
    if args["format"] == "prometheus":
        text = scaling_text(queues, len(fan.unavailable_shards))
        return Response(text, media_type=CONTENT_TYPE, headers=headers)
    body = {
        "status": fan.status,
        "per_worker": args["per_worker"],
        "queues": queues,
        "estimated": any(q["estimated"] for q in queues),
        **fanout_keys(call, fan),
    }
    return Reply(body, headers=headers)


ACTIVITY = path("activity_name")
# A pacing override's fields and bounds, the rate limit's here and the start throttle's
# (routes/lifecycle.py): one override, so its limits are checked alike on both, and both name
# who made it (operator_id, for the audit log; the token's actor when not given).
PACING_OVERRIDE: dict[str, dict[str, Any]] = {
    "rps": {"type": "number", "minimum": 0.001, "maximum": 1_000_000},
    "burst": {"type": "number", "minimum": 1, "maximum": 1_000_000},
    "ttl_secs": {"type": "number", "minimum": 1, "maximum": 604_800},
    "operator_id": STRING,
}
# A DELETE has no body: the clear of an override names who made it by this parameter (the CLI's
# --operator-id), as its POST does by the body's field; the token's actor when not given.
CLEARED_BY = Param("operator_id", description="Who clears it, for the audit log (default: you).")
ENDPOINTS = [
    Endpoint(
        "GET",
        "/admin/preflight",
        "read",
        preflight,
        "The read-only deploy gate: pass, warn or fail.",
        tag="admin",
    ),
    Endpoint(
        "GET",
        "/admin/concurrency",
        "admin",
        concurrency,
        "Per concurrency key, in key order: max_concurrent, in_flight, pending, the workflows on it; "
        "at most limit keys, the next page's cursor in X-Harvest-Next-Cursor.",
        (
            Param("key", description="Only this concurrency key."),
            Param(
                "limit",
                "integer",
                minimum=1,
                maximum=CONCURRENCY_PAGE_MAX,
                description=f"Keys at most (default {CONCURRENCY_PAGE}; a key's activity and workflow rows "
                "stay on one page).",
            ),
            Param("cursor", description="X-Harvest-Next-Cursor of the previous page, with the same key."),
        ),
        tag="admin",
        shape={"type": "array", "items": {"type": "object"}},
    ),
    Endpoint(
        "GET",
        "/admin/usage",
        "admin",
        usage,
        "What each workflow type or tenant consumed over a window, summed over every shard.",
        (
            Param("from", required=True, description="RFC 3339, or a duration back from now (24h)."),
            Param("to", description="RFC 3339, or a duration back from now (default now)."),
            Param("group_by", default="workflow_name", description="workflow_name or search_attr:<key>."),
        ),
        tag="admin",
    ),
    Endpoint(
        "GET",
        "/admin/queues/scaling",
        "admin",
        queue_scaling,
        "Scaling signals per queue over every shard (backlog, oldest age, workers, desired_workers), "
        "for an autoscaler; Prometheus text with format=prometheus.",
        (
            Param("format", "enum", default="json", choices=("json", "prometheus")),
            Param(
                "per_worker",
                "integer",
                default=DEFAULT_PER_WORKER,
                minimum=1,
                maximum=10_000,
                description="Tasks one worker runs at once, for desired_workers (default 20).",
            ),
            Param("queue", description="Only this queue."),
        ),
        tag="admin",
        also=(CONTENT_TYPE,),
        payloads="none",  # (counts per queue)
        shape=shape(
            per_worker=INTEGER,
            queues={"type": "array", "items": SCALING_QUEUE},
            estimated=BOOLEAN,
            **FANOUT,
        ),
    ),
    Endpoint(
        "GET",
        "/admin/config",
        "admin",
        config,
        "This process's configuration and shard topology.",
        tag="admin",
    ),
    Endpoint(
        "GET",
        "/admin/queue-coverage",
        # (read: the facts /workers and /admin/preflight show a read token; the CLI reads it)
        "read",
        queue_coverage,
        "Declared queues with no live worker on a writable shard (null: unknown).",
        (
            Param(
                "queue",
                repeat=True,
                description="A declared queue to check (repeatable; default: the served App's "
                "queues; with neither the list is null, unknown).",
            ),
        ),
        tag="admin",
    ),
    Endpoint(
        "GET",
        "/admin/version-gates/usage",
        "admin",
        version_usage,
        "Runs per recorded version of a ctx.version() gate: complete, no_matches, partial or unavailable.",
        (
            Param("change_id", required=True),
            Param("recorded_version", "integer", minimum=-(2**31), maximum=2**31 - 1),
            Param("state_group", "enum", default="active", choices=("active", "terminal", "all")),
            Param("shard_id", "integer", minimum=0, maximum=MAX_SHARD),
            Param("workflow_name", description="Only runs of this workflow."),
            Param(
                "history_before",
                "datetime",
                description="Also version -1 (DEFAULT_VERSION): the active runs that recorded no marker of "
                "the gate and whose history began before this time (when the rollout of the gate ended: the "
                "last old worker stopped).",
            ),
        ),
        tag="admin",
    ),
    Endpoint(
        "GET",
        "/admin/retention",
        "admin",
        retention,
        "The janitor of this process: each shard's settings and runs, or placed_elsewhere.",
        tag="admin",
    ),
    Endpoint(
        "POST",
        "/admin/retention/run-now",
        "admin",
        retention_run_now,
        "Sweep expired terminal executions now (503 where the janitor does not run).",
        body=body(
            {
                "max_age": STRING,
                "batch_size": {"type": "integer", "minimum": 1, "maximum": 10_000},
                "max_batches": {"type": "integer", "minimum": 1, "maximum": 1_000_000},
                "operator_id": STRING,
            }
        ),
        responses={200: "Swept", 503: "The janitor does not run in this process"},
        tag="admin",
    ),
    Endpoint(
        "GET",
        "/admin/rate-limits/{activity_name}",
        "admin",
        get_rate_limit,
        "An activity's rate limit and override, per shard.",
        (ACTIVITY,),
        tag="admin",
    ),
    Endpoint(
        "POST",
        "/admin/rate-limits/{activity_name}/override",
        "admin",
        set_rate_limit_override,
        "A temporary, self-expiring rate override on every shard (audited; shard_errors names a miss).",
        (ACTIVITY,),
        body(PACING_OVERRIDE, ("rps",)),
        tag="admin",
    ),
    Endpoint(
        "DELETE",
        "/admin/rate-limits/{activity_name}/override",
        "admin",
        clear_rate_limit_override,
        "Remove an activity's rate override on every shard (audited).",
        (ACTIVITY, CLEARED_BY),
        tag="admin",
    ),
    Endpoint(
        "GET",
        "/admin/shards/health",
        "admin",
        shards_health,
        "One row per configured shard: roles, reachability, schema, workers, coverage, pressure, reasons.",
        (Param("candidate_shard", "integer", minimum=0, maximum=MAX_SHARD),),
        tag="admin",
    ),
    Endpoint(
        "POST",
        "/admin/shards/{shard_id}/release-owed-ends",
        "admin",
        release_owed_ends,
        "Let retention take the cross-shard children whose ends are owed to a shard gone for good, on "
        "every other shard, batch by batch (audited); refused (409) while that shard answers as itself "
        "unless force; dry_run: their counts.",
        (
            Param(
                "shard_id",
                "integer",
                required=True,
                where="path",
                minimum=0,
                maximum=MAX_SHARD,
                description="The parent's shard, gone for good.",
            ),
        ),
        body(
            {
                "include_running": BOOLEAN,
                "batch_size": {"type": "integer", "minimum": 1, "maximum": 10_000},
                "max_batches": {"type": "integer", "minimum": 1, "maximum": 1_000_000},
                "dry_run": BOOLEAN,
                "force": BOOLEAN,
                "operator_id": STRING,
            }
        ),
        responses={
            200: "Released (dry_run: their counts); parent_check says what the parent's shard answered",
            409: "parent_shard_alive: the parent's shard answers as itself and is not retired (or could not "
            "be checked: a wrong url, a server that took no connection); nothing released (force: true "
            "releases all the same)",
        },
        tag="admin",
    ),
    Endpoint(
        "POST",
        "/admin/audit/prune",
        "admin",
        audit_prune,
        "Delete the audit rows older than older_than on every shard, batch by batch until none older "
        "remains (each deleting batch audited, audit.prune); dry_run: their counts.",
        body=body(
            {
                "older_than": STRING,
                "batch_size": {"type": "integer", "minimum": 1, "maximum": 100_000},
                "dry_run": BOOLEAN,
                "operator_id": STRING,
            },
            ("older_than",),
        ),
        tag="admin",
    ),
    Endpoint(
        "GET",
        "/admin/audit",
        "admin",
        audit_log,
        "The audit log of operator actions, newest first.",
        (
            Param("limit", "integer", default=100, minimum=1, maximum=1000),
            Param("operation"),
            Param("cursor", description="next_cursor of the previous page."),
        ),
        tag="admin",
        shape=shape(entries=ROWS, next_cursor={"type": ["string", "null"]}, **FANOUT),
    ),
]


# -- the retention settings, wherever the janitor runs (added for `harvest retention status|set`
# over HTTP: /admin/retention answers for this process's janitor only) -----------------------


async def retention_settings(call: Call, args: dict[str, Any], _: Any) -> Any:
    """Each shard's retention settings, last run and eligible count (the database's, not this
    process's janitor: /admin/retention says where that runs)."""
    fan = await call.each_shard(lambda sql: sql.get_retention_status())
    shards = [{"shard_id": s, **data} for s, data in fan.results.items()]
    return {
        "shards": shards,
        **fanout_keys(call, fan),
    }


def _interval(data: dict[str, Any], field: str, *, off: bool = False) -> Any:
    """Body field ``field`` (a PostgreSQL interval; ``off`` too with ``off``) as given, or a 400
    naming it when it cannot be one (the database's refusal named no field)."""
    value = data.get(field)
    if value is None or (off and value.strip().lower() in ("off", "none", "")):
        return value
    problem = interval_problem(value)
    if problem is not None:
        raise invalid(field, problem + ("; off keeps everything" if off else ""))
    return value


async def set_retention_settings(call: Call, args: dict[str, Any], data: dict[str, Any]) -> Any:
    """Set max_age (with batch_size) and/or worker_max_age on every shard; ``off`` keeps all."""
    if data.get("max_age") is None and data.get("worker_max_age") is None:
        raise invalid("max_age", "give max_age, worker_max_age or both")
    if data.get("batch_size") is not None and data.get("max_age") is None:
        raise invalid("batch_size", "batch_size goes with max_age")
    _interval(data, "max_age", off=True)
    _interval(data, "worker_max_age", off=True)
    operator = data.get("operator_id") or call.operator_id

    done = await call.each_shard_write(
        lambda sql: sql.set_retention_settings(
            data.get("max_age"), data.get("batch_size"), data.get("worker_max_age"), operator
        ),
        "nothing was set",
    )
    shards = [{"shard_id": s, **r} for s, r in done.results.items()]
    return {"shards": shards, **done.outcome(), "sharded": call.sharded}


ENDPOINTS += [
    Endpoint(
        "GET",
        "/admin/retention/settings",
        "admin",
        retention_settings,
        "Each shard's retention settings, last run and eligible count, wherever the janitor runs.",
        tag="admin",
    ),
    Endpoint(
        "POST",
        "/admin/retention/settings",
        "admin",
        set_retention_settings,
        "Set the retention age (and batch size) and/or the worker-row age on every shard; off keeps all.",
        body=body(
            {
                "max_age": STRING,
                "batch_size": {"type": "integer", "minimum": 1, "maximum": 10_000},
                "worker_max_age": STRING,
                "operator_id": STRING,
            }
        ),
        tag="admin",
    ),
]
