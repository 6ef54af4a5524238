"""Cross-shard children: where a placed child goes, and the pump's driver of their lifecycle.

**Placement** (:func:`place_child`) runs in the worker when a decision is first made, never on
replay: a ``start_child_workflow`` command carrying a ``placement`` (``ChildPlacement``) is
resolved to a shard number, the command goes to the database with ``"shard": n``, and the
parent's decision (functions/decide.sql, ``_start_child``) mints the child's execution id for
that shard and writes its row in ``harvest.cross_shard_children`` in the same transaction as
ChildWorkflowStarted. A shard this process has no pool for raises :class:`ShardUnavailable`:
the decision is rolled back with nothing recorded and retried, never placed elsewhere.

**The lifecycle** (:func:`drive_children`, one sweep of one parent shard, called by the relay
pump's tick) takes the rows that are due and moves each one step, calling the child's shard
and the parent's shard one after the other, never holding both: start the child there
(idempotent on its id), pull its end back into the parent (a read; a pull, not a push, so a
crash anywhere leaves the row for the next sweep), tell the child's shard once the parent's
history has the end (``clear_owed_child_end``: until then that shard's retention keeps the
ended child, however long the parent's shard is away; the row waits as ``delivered``
meanwhile), or apply the parent's close policy once the parent ended first (which tells the
child's shard too). A child shard that cannot be reached counts an attempt on the row and backs
off ``min(attempts, 6) x 5 s``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from harvest.core.errors import HarvestError, InvalidArgument, ParentShardAlive, ShardUnavailable
from harvest.db import sqlapi
from harvest.db.connection import failure_reason
from harvest.db.steps import Sql, Steps
from harvest.shard.router import ShardRouter, rendezvous

if TYPE_CHECKING:
    from harvest.shard.pools import AsyncShardPools
    from harvest.shard.relay_pump import PumpReport

__all__ = [
    "distributed_key",
    "drive_children",
    "owed_to",
    "parent_check",
    "place_child",
    "release_owed_steps",
    "release_totals",
]

log = logging.getLogger("harvest.shard.children")

_ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TERMINATED", "TIMED_OUT")


def distributed_key(parent_execution_id: str, seq: int) -> str:
    """The rendezvous key of a distributed child: stable across retried decisions."""
    return f"{parent_execution_id}#{seq}"


def place_child(
    router: ShardRouter,
    pooled: Iterable[int],
    parent_shard: int,
    parent_execution_id: str,
    command: dict[str, Any],
) -> int:
    """The shard a ``start_child_workflow`` command's ``placement`` names, for the parent
    ``parent_execution_id`` on ``parent_shard``.

    InvalidArgument for a placement the router refuses (an unknown residency key, a shard
    that is not writable); ShardUnavailable for a shard other than the parent's that this
    process has no pool for."""
    placement = command.get("placement") or {}
    kind = placement.get("kind", "parent_shard")
    if kind == "parent_shard":
        return parent_shard
    if kind == "distributed":
        placeable = [s for s in router.writable if s not in router.reserved]
        if not placeable:  # a full drain: the parent's own shard, never a refusal
            log.warning(
                "distributed child %r of %s stays on the parent's shard %d: no shard is writable",
                command.get("workflow_name"),
                parent_execution_id,
                parent_shard,
            )
            return parent_shard
        shard = rendezvous(distributed_key(parent_execution_id, command["seq"]), placeable)
    elif kind == "shard":
        shard = router.place(command["workflow_name"], None, shard_id=placement.get("shard_id"))
    elif kind == "residency_key":
        shard = router.place(command["workflow_name"], None, residency_key=placement.get("key"))
    else:
        raise InvalidArgument(f"placement {kind!r} is not parent_shard, distributed, shard or residency_key")
    if shard != parent_shard and shard not in set(pooled):
        raise ShardUnavailable(shard, "this process has no pool for it, so no child can be placed there")
    return shard


async def drive_children(
    pools: AsyncShardPools, source: int, report: PumpReport, *, limit: int = 100, poll_secs: float = 1.0
) -> None:
    """Move each due cross-shard child of parents on shard ``source`` one step.

    A claimed row is leased for ``poll_secs``: a child still running is left as it is and
    read again once the lease runs out (no write on the parent's shard for it)."""
    async with pools.api(source) as sql:
        rows = await sql.claim_cross_shard_children(limit, poll_secs)
    for row in rows:
        child = row["child_execution_id"]
        target = row["target_shard"]
        try:
            if target in report.unavailable:
                raise ShardUnavailable(target, report.unavailable[target])
            step = await _step(pools, row, source)
        except ShardUnavailable as exc:
            report.unavailable.setdefault(exc.shard, exc.reason)
            step = ("release", f"shard {exc.shard}: {exc.reason}")
        except Exception as exc:  # refused there (or not there: NotFound): kept, retried with a backoff
            step = ("release", f"shard {target}: {failure_reason(exc)}")
        try:
            await _report(pools, source, row, step, report)
        except ShardUnavailable:
            raise
        except HarvestError as exc:  # one row's report refused: its lease runs out, it is tried again
            log.warning("cross-shard child %s: reporting to shard %s failed: %s", child, source, exc)


async def _report(
    pools: AsyncShardPools, source: int, row: dict[str, Any], step: tuple[Any, ...], report: PumpReport
) -> None:
    child = row["child_execution_id"]
    if step[0] == "running":  # its lease runs out and the next sweep reads it again
        return
    kept = True
    async with pools.api(source) as sql:
        if step[0] == "release":
            log.info("cross-shard child %s not moved: %s", child, step[1])
            await sql.release_cross_shard_child(child, step[1])
            report.children["released"] = report.children.get("released", 0) + 1
        elif step[0] == "started":
            kept = await sql.set_cross_shard_child_running(child)
            report.children["started"] = report.children.get("started", 0) + 1
        elif step[0] == "settle":
            _, status, output, failure = step
            await sql.complete_cross_shard_child(child, status, output, failure)
            report.children["settled"] = report.children.get("settled", 0) + 1
    if step[0] == "settle" and step[1] not in (None, "START_FAILED"):
        # The parent's history has the end (the row is delivered): tell the child's shard at
        # once. Not reached, the row stays delivered and the next sweep tells it (_step).
        try:
            await _clear_owed_end(pools, source, row)
        except (HarvestError, ShardUnavailable) as exc:
            log.info(
                "cross-shard child %s delivered; shard %s not told yet: %s", child, row["target_shard"], exc
            )
    if step[0] == "started" and not kept:
        # The row went while this pump started the child (another pump settled it: the parent
        # ended, and its close policy found no child there yet). The policy is applied here to
        # the child this start made; a child that ended already is not_running, unchanged.
        try:
            async with pools.api(row["target_shard"]) as sql:
                await sql.cancel_cross_shard_child(
                    child, row["parent_close_policy"], row["parent_execution_id"]
                )
        except HarvestError as exc:  # (its row is gone: nothing retries it)
            log.warning(
                "cross-shard child %s: its parent's %s policy could not be applied on shard %s: %s",
                child,
                row["parent_close_policy"],
                row["target_shard"],
                exc,
            )


async def _clear_owed_end(pools: AsyncShardPools, source: int, row: dict[str, Any]) -> None:
    """The child's end, delivered to its parent, is no longer owed: the child's shard lets its
    retention take it, then the parent's row goes."""
    child = row["child_execution_id"]
    async with pools.api(row["target_shard"]) as sql:
        await sql.clear_owed_child_end(child)
    async with pools.api(source) as sql:
        await sql.complete_cross_shard_child(child, None)


async def _step(pools: AsyncShardPools, row: dict[str, Any], source: int) -> tuple[Any, ...]:
    child, target = row["child_execution_id"], row["target_shard"]
    if row["status"] == "delivered":
        # The parent's history has the end; the child's shard was not told (its clear was lost).
        async with pools.api(target) as sql:
            await sql.clear_owed_child_end(child)
        return ("settle", None, None, None)
    async with pools.api(target) as sql:
        if row["cancel_requested"]:  # the parent ended first: its close policy, then forget the row
            # (On a row still ``starting`` too: a start whose report was lost made the child
            # there; a child that was never started is not_running.)
            await sql.cancel_cross_shard_child(child, row["parent_close_policy"], row["parent_execution_id"])
            return ("settle", None, None, None)
        if row["status"] == "starting":
            started = await sql.start_cross_shard_child(
                child,
                row["parent_execution_id"],
                row["parent_seq"],
                row["workflow_name"],
                row["workflow_id"],
                row["queue"],
                row["input"],
                row["parent_close_policy"],
                row.get("traceparent"),  # the parent's child.start span: the root's trace, on this shard
                source,  # where the parent lives, owed the child's end (a moved parent's id names another)
            )
            if started["outcome"] == "failed":
                return ("settle", "START_FAILED", None, started["failure"])
            return ("started",)
        current = await sql.get_cross_shard_child(child)  # NotFound (released) when it is not there
    if current["status"] in _ENDED:
        return ("settle", current["status"], current["output"], current["failure"])
    return ("running",)


# -- the ends owed to a shard gone for good: what `harvest shard release-owed-ends` and its route
# (POST /admin/shards/{shard}/release-owed-ends) read and answer, over release_owed_child_ends.


def owed_to(status: dict[str, Any], parent: int) -> dict[str, Any]:
    """The ends owed to ``parent`` in one shard's retention status (ended, running)."""
    for row in status.get("owed_child_ends_by_shard") or []:
        if row["parent_shard"] == parent:
            return {"ended": row["ended"], "running": row["running"]}
    return {"ended": 0, "running": 0}


def release_owed_steps(
    parent: int,
    batch_size: int,
    include_running: bool,
    max_batches: int,
    operator: str | None,
    *,
    force: bool = False,
    on_batch: Callable[[int], object] | None = None,
) -> Steps[dict[str, Any]]:
    """On one (child's) shard: the ends owed to ``parent`` released batch by batch until a batch
    releases nothing (release_owed_child_ends skips the rows a concurrent step holds: a short
    batch is not the end) or ``max_batches`` (one batch at least); ``on_batch`` is told each
    batch's count (a progress bar); ``force`` (the check of :func:`parent_check` skipped) goes into
    each batch's audit row. Written once as steps (harvest.db.steps) for the CLI over SQL
    (run_steps) and the route (arun_steps). Answers ``{released, batches}``."""
    released = batches = 0
    while True:
        n = yield Sql(sqlapi.release_owed_child_ends, parent, batch_size, include_running, operator, force)
        batches += 1
        released += n
        if on_batch is not None:
            on_batch(n)
        if n == 0 or batches >= max_batches:
            break
    return {"released": released, "batches": batches}


def parent_check(probe: dict[str, Any] | None, dry_run: bool) -> str:
    """What a release (or its dry run) says of the parent's shard before it releases anything,
    from :func:`harvest.shard.health.probe_shard`'s answer (None: not probed, ``--force``).
    A shard alive as itself is refused (ParentShardAlive: its parents would wait for ever for the
    ends let go), and so is one whose url reaches another shard's database (nothing says where its
    own is), and one whose server answered but took no connection (busy: at its connection
    limit, starting up), except in a dry run, where it is a warning; any other answer is a line saying why it
    could not be reached, and the release goes on (docs/sharding.md, "Children on other
    shards"). The CLI over SQL and the route alike; the CLI over HTTP says it from the answer."""
    if probe is None:
        return "not checked whether it is alive (force): recorded in the audit rows"
    shard = probe["shard_id"]
    if probe["reason"] == "identity_mismatch":
        # A wrong url says nothing of where shard N's own database is, nor whether it is alive:
        # refused as an alive one is, since a release cannot be taken back.
        refusal = (
            f"shard {shard} could not be checked: {probe['detail']}; fix shards.urls.{shard} and run "
            "this again, or force it (--force, force: true over HTTP) if shard "
            f"{shard} is gone for good"
        )
    elif probe["reason"] == "busy":
        # Its server is up and turned the probe away for now (at its connection limit, starting
        # up): a live shard as likely as not, and a release cannot be taken back.
        refusal = (
            f"shard {shard} could not be checked: {probe['detail']}; run this again when it takes "
            f"connections, or force it (--force, force: true over HTTP) if shard {shard} is gone for good"
        )
    elif not probe["alive"]:
        what = "is retired" if probe["reason"] == "retired" else "could not be reached"
        return f"shard {shard} {what} ({probe['detail']}): its ends are released as a shard gone for good"
    else:
        refusal = (
            f"shard {shard} is reachable and alive ({probe['detail']}): releasing the ends owed to it "
            "would lose its runs' child ends (retention purges the children its parents still wait for); "
            "retire it first (docs/runbooks/shard-decommission.md: shards.forwards, then this), or force "
            "it (--force, force: true over HTTP) only if it is being restored to before the children started"
        )
    if dry_run:
        return f"warning: {refusal}"
    raise ParentShardAlive(refusal)


def release_totals(
    parent: int,
    include_running: bool,
    dry_run: bool,
    results: dict[int, Any],
    unavailable: list[int],
    probe: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The answer of a release (or its dry run) over the shards' answers: the counts summed, each
    shard's answer under ``shards``, the shards missed, and what the parent's shard answered
    (``parent_check``: :func:`parent_check`'s probe, None with ``force``): the CLI over SQL and
    the route alike."""
    shards = [{"shard_id": s, **r} for s, r in sorted(results.items())]
    counts = ("ended", "running") if dry_run else ("released", "batches")
    return {
        "parent_shard": parent,
        "include_running": include_running,
        "dry_run": dry_run,
        "force": probe is None,
        "parent_check": probe,
        **{k: sum(r[k] for r in shards) for k in counts},
        "shards": shards,
        "unavailable_shards": sorted(unavailable),
    }
