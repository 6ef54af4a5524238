"""Shard rebalancing: move quiescent executions from one shard to another (over ShardPools).

    copy ──▶ replay-verify ──▶ ONE atomic cutover on the source ──▶ activation on the target

Every step is one SQL call on one database (functions/rebalance.sql); the durable record
(``harvest.shard_migrations`` on the source) says which step is outstanding, and each step
is idempotent, so a driver killed at any point is finished by :meth:`Rebalancer.resume`
(``harvest shard rebalance-resume``) or, past the cutover, by a worker's resume scanner
(:func:`resume_stalled_migrations`). Only the cutover changes which shard is authoritative.

Verification has two halves. The load-bearing one is structural and codec-independent: the
copy's history is byte-identical to the source's (``history_digest``: every event's id, type,
data and time), gapless from WorkflowStarted to the execution's ``last_event_id``. The other
replays the copied history under the registered workflow code when the driver was given it
(``replay``: the CLI's ``--app``), refusing the move on a divergence; without the code the
move is verified structurally only, and its result says so (``verification``).

docs/sharding.md "Rebalancing" is the user's page; docs/runbooks/shard-decommission.md the drill.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, cast

from harvest.core.errors import (
    ConfigError,
    ExecutionMigrated,
    HarvestError,
    InvalidArgument,
    ShardUnavailable,
)
from harvest.core.ids import shard_of
from harvest.shard.pools import AsyncShardPools, ShardPools

log = logging.getLogger("harvest.shard.rebalance")

__all__ = [
    "RESUME_INTERVAL_SECS",
    "STALL_AFTER_SECS",
    "STALL_FLOOR_SECS",
    "Move",
    "RebalanceReport",
    "Rebalancer",
    "ResumeScanner",
    "resume_stalled_migrations",
    "run_rebalance_resume_scanner",
]

# The worker's resume scanner: a cut-over record idle this long is settled by a worker; the
# floor keeps a scanner from racing a driver that is merely slow; passes run this often.
STALL_AFTER_SECS = 30.0
STALL_FLOOR_SECS = 5.0
RESUME_INTERVAL_SECS = 5.0

# replay(events, workflow_name) -> None when the code of that workflow is not available
# (verification is structural only), else (replays, error or None).
Replay = Callable[[list[dict[str, Any]], str], "tuple[bool, str | None] | None"]
# on_phase(phase, record): called after each durable step (copied, verified, cut_over,
# completed): logging, progress, and the chaos tests' kill points.
OnPhase = Callable[[str, dict[str, Any]], None]
# on_move(done, total): called once the candidates are known (done 0), then after each of them
# is settled (moved, blocked, declined, failed): the CLI's progress bar.
OnMove = Callable[[int, int], None]


@dataclass
class Move:
    """One execution's outcome: ``would_move`` (dry run), ``blocked`` (not quiescent, or another
    move of it is open), ``moved``, ``declined`` (it woke before the cutover: it stays, and is
    moved later from its current history), ``failed`` (before the cutover: it stays on the
    source; past it: ``error`` says to run rebalance-resume; ``error`` "not attempted: ...":
    a shard could not be reached earlier in the run, so this one was left as it was)."""

    execution_id: str
    workflow_name: str
    workflow_id: str
    outcome: str
    blockers: list[str] = field(default_factory=list)
    migration_id: int | None = None
    verification: str | None = None  # "replay" or "structural"
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RebalanceReport:
    source: int
    target: int
    dry_run: bool
    moves: list[Move]

    def count(self, outcome: str) -> int:
        return sum(1 for m in self.moves if m.outcome == outcome)

    def as_dict(self) -> dict[str, Any]:
        outcomes = ("would_move", "blocked", "moved", "declined", "failed")
        return {
            "from": self.source,
            "to": self.target,
            "dry_run": self.dry_run,
            "counts": {o: self.count(o) for o in outcomes},
            "moves": [m.as_dict() for m in self.moves],
        }


def _history_gaps(events: list[dict[str, Any]], last_event_id: int) -> str | None:
    """Why a copied history is not a whole history, or None."""
    if not events:
        return "the copy has no events"
    if events[0]["event_type"] != "WorkflowStarted":
        return f"the copy's first event is {events[0]['event_type']}, not WorkflowStarted"
    ids = [int(e["event_id"]) for e in events]
    if ids != list(range(1, len(ids) + 1)):
        return "the copy's event ids are not gapless from 1"
    if ids[-1] != last_event_id:
        return f"the copy's history ends at event {ids[-1]}, its execution at {last_event_id}"
    return None


class Rebalancer:
    """Moves quiescent executions from shard ``source`` to shard ``target`` over ``pools``
    (which need a pool for both, and for any origin shard whose forwarding pointer a move
    should collapse). ``operator_id`` names who is acting in the audit rows."""

    def __init__(
        self,
        pools: ShardPools,
        source: int,
        target: int,
        *,
        operator_id: str | None = None,
        replay: Replay | None = None,
        on_phase: OnPhase | None = None,
    ):
        if source == target:
            raise InvalidArgument(f"--from and --to are both shard {source}: pick two shards")
        for shard, flag in ((source, "--from"), (target, "--to")):
            if shard not in pools.shards:
                raise ConfigError(
                    f"{flag} {shard}: no database URL for shard {shard} (give it in shards.urls.{shard} or "
                    f"HARVEST_SHARDS__URLS__{shard})"
                )
        self.pools, self.source, self.target = pools, source, target
        self.operator_id = operator_id
        self.replay = replay
        self.on_phase = on_phase
        # The first shard this rebalancer could not reach: the walk stops there, so an outage
        # costs one acquire timeout, not one per remaining run (and per leftover copy).
        self.unreachable: int | None = None

    def _not_attempted(self, move: Move) -> Move:
        move.outcome = "failed"
        move.error = (
            f"not attempted: shard {self.unreachable} could not be reached earlier in this run; "
            "run the command again once it is back"
        )
        return move

    # -- the walk ---------------------------------------------------------------------------------
    def check_schema_parity(self) -> None:
        """Refuse two shards whose copied tables differ (a copy would drop a column): both
        must be at the same migration level."""
        with self.pools.api(self.source) as sql:
            source = sql.get_copy_schema()
        with self.pools.api(self.target) as sql:
            target = sql.get_copy_schema()
        if source != target:
            raise ConfigError(
                f"shards {self.source} and {self.target} are not at the same schema "
                f"({source.get('schema_version')} and {target.get('schema_version')}, or their columns "
                "differ): run harvest migrate run against both first"
            )

    def run(
        self,
        *,
        workflow_name: str | None = None,
        execution_ids: Iterable[str] = (),
        limit: int = 100,
        dry_run: bool = False,
        on_move: OnMove | None = None,
    ) -> RebalanceReport:
        """Move up to ``limit`` quiescent runs (of ``workflow_name``, or exactly
        ``execution_ids``). A dry run walks the same path up to the first write (the schema
        check and the candidates with their blockers) and reports what would move.
        ``on_move(done, total)`` is told the number of candidates, then each one settled."""
        self.check_schema_parity()
        candidates: list[dict[str, Any]] = []
        with self.pools.api(self.source) as sql:
            ids = list(execution_ids)
            if ids:
                for execution_id in ids:
                    found = sql.list_migration_candidates(workflow_name, execution_id, 1)
                    if not found:
                        raise InvalidArgument(f"execution {execution_id} is not on shard {self.source}")
                    candidates.extend(found)
            else:
                candidates = sql.list_migration_candidates(workflow_name, None, limit)
        moves = []
        if on_move is not None:
            on_move(0, len(candidates))
        for row in candidates:
            move = Move(str(row["execution_id"]), row["workflow_name"], row["workflow_id"], "would_move")
            if row["blockers"]:
                move.outcome, move.blockers = "blocked", list(row["blockers"])
            elif not dry_run and self.unreachable is not None:
                move = self._not_attempted(move)
            elif not dry_run:
                move = self.move(move.execution_id, move)
            moves.append(move)
            if on_move is not None:
                on_move(len(moves), len(candidates))
        return RebalanceReport(self.source, self.target, dry_run, moves)

    def move(self, execution_id: str, move: Move | None = None) -> Move:
        """Plan, copy, verify, cut over, activate and complete one execution's move."""
        move = move or Move(execution_id, "", "", "would_move")
        try:
            with self.pools.api(self.source) as sql:
                record = sql.begin_migration(execution_id, self.target, self.operator_id)
        except ExecutionMigrated as exc:
            move.outcome, move.blockers, move.error = "blocked", exc.blockers, str(exc)
            return move
        except ShardUnavailable as exc:  # nothing begun: the report keeps the moves made so far
            self.unreachable = exc.shard
            move.outcome, move.error = "failed", str(exc)
            return move
        move.workflow_name, move.workflow_id = record["workflow_name"], record["workflow_id"]
        return self._drive(record, move)

    def resume(self) -> list[Move]:
        """Settle every open move of the source shard whose target is this rebalancer's: a
        record before its cutover is driven on (each step is idempotent, and the cutover
        re-checks the verified history, so a run that woke since is declined, not sealed
        stale); a record past it is activated and completed. The staged copies of the latest
        failed moves are discarded again (a driver killed between failing a move and dropping
        its copy left an inert one behind; discarding is idempotent)."""
        with self.pools.api(self.source) as sql:
            records = [r for r in sql.list_migrations(["open"], 10000) if r["target_shard"] == self.target]
            failed = [r for r in sql.list_migrations(["failed"], 1000) if r["target_shard"] == self.target]
        moves = []
        for record in sorted(records, key=lambda r: r["id"]):
            move = Move(
                str(record["execution_id"]), record["workflow_name"], record["workflow_id"], "would_move"
            )
            if self.unreachable is not None:
                move.migration_id = record["id"]
                moves.append(self._not_attempted(move))
            else:
                moves.append(self._drive(record, move))
        for record in failed:
            self._discard(str(record["execution_id"]), record["id"])
        return moves

    # -- the steps --------------------------------------------------------------------------------
    def _phase(self, phase: str, record: dict[str, Any]) -> None:
        log.info("migration %s of %s: %s", record["id"], record["execution_id"], phase)
        if self.on_phase is not None:
            self.on_phase(phase, record)

    def _drive(self, record: dict[str, Any], move: Move) -> Move:
        migration_id, execution_id = record["id"], str(record["execution_id"])
        move.migration_id = migration_id
        try:
            if record["phase"] == "planned":
                record = self._copy(record)
            if record["phase"] == "copied":
                record = self._verify(record, move)
                if record["phase"] == "failed":
                    self._discard(execution_id, migration_id)
                    move.outcome, move.error = "failed", record.get("last_error")
                    return move
            if record["phase"] == "verified":
                with self.pools.api(self.source) as sql:
                    record = sql.cut_over_migration(migration_id, self.operator_id)
                if not record.get("cut_over"):
                    self._discard(execution_id, migration_id)
                    move.outcome, move.error = "declined", record.get("last_error")
                    return move
                self._phase("cut_over", record)
            if record["phase"] == "cut_over":
                self._activate(record)
                record["phase"] = "completed"
            move.outcome = "moved" if record["phase"] == "completed" else "failed"
            return move
        except HarvestError as exc:
            return self._failed(record, move, exc)

    def _copy(self, record: dict[str, Any]) -> dict[str, Any]:
        with self.pools.api(self.source) as sql:
            copy = sql.get_migration_copy(record["id"])
        with self.pools.api(self.target) as sql:
            sql.accept_migration_copy(copy)
        with self.pools.api(self.source) as sql:
            record = sql.set_migration_copied(record["id"])
        self._phase("copied", record)
        return record

    def _verify(self, record: dict[str, Any], move: Move) -> dict[str, Any]:
        migration_id, execution_id = record["id"], str(record["execution_id"])
        with self.pools.api(self.target) as sql:
            digest = sql.history_digest(execution_id)
            events = sql.get_history(execution_id)
        problem = _history_gaps(events, int(digest.get("last_event_id") or 0))
        move.verification = "structural"
        if problem is None and self.replay is not None:
            verdict = self.replay(events, record["workflow_name"])
            if verdict is not None:
                move.verification = "replay"
                ok, error = verdict
                if not ok:
                    problem = f"the copied history does not replay under the registered code: {error}"
        with self.pools.api(self.source) as sql:
            if problem is not None:
                return cast(
                    "dict[str, Any]",
                    sql.fail_migration(migration_id, f"verification failed: {problem}", self.operator_id),
                )
            record = sql.verify_migration(migration_id, digest)
        if record["phase"] == "verified":
            self._phase("verified", record)
        return record

    def _activate(self, record: dict[str, Any]) -> None:
        migration_id, execution_id = record["id"], str(record["execution_id"])
        with self.pools.api(self.target) as sql:
            sql.activate_migration(execution_id, migration_id)
        with self.pools.api(self.source) as sql:
            record = sql.complete_migration(migration_id, self.operator_id)
        self._collapse(execution_id)
        self._phase("completed", record)

    def _collapse(self, execution_id: str) -> None:
        """Point the origin shard's seal straight at the new home (A -> B -> C leaves A -> C),
        best effort: correctness comes from following the chain, speed from collapsing it."""
        origin = shard_of(execution_id)
        if origin in (self.source, self.target) or origin not in self.pools.shards:
            return
        try:
            with self.pools.api(origin) as sql:
                sql.set_migration_forward(execution_id, self.target)
        except HarvestError as exc:
            log.warning(
                "could not collapse the forwarding pointer of %s on shard %d: %s", execution_id, origin, exc
            )

    def _discard(self, execution_id: str, migration_id: int) -> None:
        if self.unreachable == self.target:  # (left for a later rebalance-resume)
            return
        try:
            with self.pools.api(self.target) as sql:
                sql.discard_migration_copy(execution_id, migration_id)
        except HarvestError as exc:  # a leftover staged copy is inert; a later import replaces it
            if isinstance(exc, ShardUnavailable):
                self.unreachable = exc.shard
            log.warning(
                "could not discard the staged copy of %s on shard %d: %s", execution_id, self.target, exc
            )

    def _failed(self, record: dict[str, Any], move: Move, exc: HarvestError) -> Move:
        if isinstance(exc, ShardUnavailable):
            self.unreachable = exc.shard
        move.outcome = "failed"
        migration_id, execution_id = record["id"], str(record["execution_id"])
        if record["phase"] in ("cut_over", "completed"):
            move.error = (
                f"{exc}; the run is sealed on shard {self.source}: finish with harvest shard rebalance-resume"
            )
            try:
                with self.pools.api(self.source) as sql:
                    sql.set_migration_error(migration_id, str(exc))
            except HarvestError:
                pass
            return move
        move.error = str(exc)
        try:
            with self.pools.api(self.source) as sql:
                sql.fail_migration(migration_id, str(exc), self.operator_id)
            self._discard(execution_id, migration_id)
        except HarvestError as again:  # the record stays open: rebalance-resume settles it
            move.error = f"{exc} (the move stays open: {again}; run harvest shard rebalance-resume)"
        return move


# -- the worker's automatic resume ----------------------------------------------------------------
async def resume_stalled_migrations(
    pools: AsyncShardPools, source: int, *, stall_after: float = STALL_AFTER_SECS, limit: int = 10
) -> int:
    """One pass of the rebalance-resume scanner for ``source``: claim the cut-over records idle
    for ``stall_after`` seconds (at least STALL_FLOOR_SECS) whose target shard has a pool
    here, activate each on its target and complete it (one shard.rebalance.auto_resume audit
    row each). A target that is down leaves its record cut over with the error noted; the
    next try comes one stall period later. Returns how many records were settled. Never
    starts a move and never cuts one over."""
    targets = [s for s in pools.shards if s != source]
    if not targets:
        return 0
    stall = max(float(stall_after), STALL_FLOOR_SECS)
    async with pools.api(source) as sql:
        claimed = await sql.claim_stalled_migrations(stall, targets, limit)
    settled = 0
    down: set[int] = set()  # a target that failed is asked once a pass: its error noted for the rest
    for record in claimed:
        migration_id, execution_id = record["id"], str(record["execution_id"])
        try:
            if record["target_shard"] in down:
                raise ShardUnavailable(record["target_shard"])
            async with pools.api(record["target_shard"]) as sql:
                await sql.activate_migration(execution_id, migration_id)
            async with pools.api(source) as sql:
                done = await sql.complete_migration(migration_id, None, True)
            settled += 1 if done.get("completed_now") else 0
        except HarvestError as exc:
            if isinstance(exc, ShardUnavailable) and exc.shard == record["target_shard"]:
                down.add(exc.shard)
            log.error(
                "rebalance resume: migration %s of %s (%d -> %d) failed: %s",
                migration_id,
                execution_id,
                source,
                record["target_shard"],
                exc,
            )
            try:
                async with pools.api(source) as sql:
                    await sql.set_migration_error(migration_id, str(exc))
            except HarvestError:
                pass
    return settled


class ResumeScanner:
    """The worker's rebalance-resume scanner as a paced step, for a scanner loop that already
    runs per assigned shard: ``await scanner.tick(pools, shard)`` on every pass of that loop
    runs :func:`resume_stalled_migrations` for ``shard`` at most once per ``interval`` (with
    jitter; both bounded below by STALL_FLOOR_SECS), and never when ``enabled`` is false.
    A failed pass is logged, never raised: the next pass retries."""

    def __init__(
        self,
        *,
        enabled: bool = True,
        interval: float = RESUME_INTERVAL_SECS,
        stall_after: float = STALL_AFTER_SECS,
        clock: Callable[[], float] | None = None,
    ):
        self.enabled = enabled
        self.interval = max(float(interval), STALL_FLOOR_SECS)
        self.stall_after = max(float(stall_after), STALL_FLOOR_SECS)
        self._clock = clock or time.monotonic
        self._next: dict[int, float] = {}

    async def tick(self, pools: AsyncShardPools | None, shard: int) -> int:
        """Settle ``shard``'s stalled cut-over moves if a pass is due; returns how many."""
        if not self.enabled or pools is None or len(pools.shards) < 2:
            return 0
        now = self._clock()
        if now < self._next.get(shard, 0.0):
            return 0
        self._next[shard] = now + self.interval * random.uniform(0.8, 1.2)
        try:
            return await resume_stalled_migrations(pools, shard, stall_after=self.stall_after)
        except HarvestError as exc:
            log.warning("rebalance resume scan of shard %d failed: %s", shard, exc)
            return 0


async def run_rebalance_resume_scanner(
    pools: AsyncShardPools,
    shards: Iterable[int],
    stop: asyncio.Event,
    *,
    interval: float = RESUME_INTERVAL_SECS,
    stall_after: float = STALL_AFTER_SECS,
) -> None:
    """The worker's loop: a :func:`resume_stalled_migrations` pass per assigned shard every
    ``interval`` seconds (at least STALL_FLOOR_SECS, with jitter) until ``stop`` is set."""
    interval = max(float(interval), STALL_FLOOR_SECS)
    assigned = tuple(shards)
    while not stop.is_set():
        for shard in assigned:
            try:
                await resume_stalled_migrations(pools, shard, stall_after=stall_after)
            except HarvestError as exc:
                log.warning("rebalance resume scan of shard %d failed: %s", shard, exc)
        try:
            await asyncio.wait_for(stop.wait(), interval * random.uniform(0.8, 1.2))
        except TimeoutError:
            pass
