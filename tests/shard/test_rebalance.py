"""Shard rebalancing on three real PostgreSQL servers: a quiescent run (parked on a timer or
waiting for a signal) moves from shard 0 to shard 1 under real workers, a signal by its id
reaches it through the forwarding pointer and it completes on shard 1 with its history
replaying under the registered code; runs with work in flight are refused with their
blockers; a dry run writes nothing; of two rebalancers on one run exactly one moves it; a
wake racing the cutover is never lost nor doubled; forwarding chains are followed and
collapsed; a child of a parent on another shard is never moved, so its shard is retired only
once it ended."""

from __future__ import annotations

import json
import threading
import uuid

import psycopg
import pytest
from click.testing import CliRunner
from cross_shard_helpers import ShardWorker, enable_cross_shard_relays, shard_workers, wait_for
from rebalance_helpers import RunningWorker, authoritative, park, row, scalar, signals, wait_until

from harvest import App, ChildPlacement, Client, ExternalWorkflow, query, workflow
from harvest.cli.main import main as cli
from harvest.core.errors import ExecutionMigrated, WrongShard
from harvest.core.ids import shard_of
from harvest.shard import ShardPools, ShardRouter
from harvest.shard.rebalance import Rebalancer
from harvest.testing import WorkflowReplayer

pytestmark = pytest.mark.shard

ALL = [0, 1, 2]


@workflow
async def parked(ctx, mode: str) -> dict:
    if mode == "timer":
        # Long enough to still be pending when the rebalance moves it, at CI's load too (2 s fired
        # first once, at load 30, and the run moved with no timer left to move).
        await ctx.sleep(10)
    value = await ctx.wait_for_signal("go")
    return {"mode": mode, "value": value}


@workflow
async def waits_for_go(ctx) -> object:
    return await ctx.wait_for_signal("go")


@workflow
async def awaits_remote_child(ctx, shard: int) -> object:
    return await ctx.execute_child_workflow(waits_for_go, placement=ChildPlacement.shard(shard))


@workflow
async def signals_remote(ctx, target: str) -> str:
    await ctx.signal_external_workflow(ExternalWorkflow(execution_id=target), "go", 5)
    return "sent"


@workflow
async def queried(ctx, mode: str) -> object:
    ctx.state["mode"] = mode
    return await ctx.wait_for_signal("go")


@query(workflow="queried")
def mode(ctx) -> str:
    return ctx.state["mode"]


APP = App(workflows=[parked, waits_for_go, awaits_remote_child, signals_remote, queried], queries=[mode])


def _pools(shards) -> ShardPools:
    return ShardPools(ShardRouter(ALL, ALL, 0), shards.dsns, max_size=4)


def _replay(events, workflow_name):
    result = WorkflowReplayer(APP).replay(events, workflow=workflow_name)
    return result.ok, result.error


def _parked_on(dsn: str, execution_id: str, kind: str | None) -> bool:
    """The run's decision is done and it waits: on a timer task (kind 'timer') or on nothing."""
    tasks = scalar(
        dsn,
        "SELECT coalesce(array_agg(kind ORDER BY kind), '{}') FROM harvest.tasks WHERE execution_id = %s",
        execution_id,
    )
    decided = scalar(
        dsn,
        "SELECT count(*) FROM harvest.events "
        "WHERE execution_id = %s AND event_type = 'WorkflowTaskCompleted'",
        execution_id,
    )
    return decided >= 1 and tasks == ([kind] if kind else [])


def test_a_parked_run_moves_to_shard_1_follows_its_forwarding_pointer_and_completes_there(shards) -> None:
    with _pools(shards) as pools, RunningWorker(APP, shards.dsns[0]):
        with Client(shards.dsns[0]) as client:
            on_signal = client.start_workflow(parked, "signal", workflow_id="rb-signal").execution_id
            on_timer = client.start_workflow(parked, "timer", workflow_id="rb-timer").execution_id
        wait_until(lambda: _parked_on(shards.dsns[0], on_signal, None), what="signal park")
        wait_until(lambda: _parked_on(shards.dsns[0], on_timer, "timer"), what="timer park")

        report = Rebalancer(pools, 0, 1, operator_id="ops@test", replay=_replay).run(workflow_name="parked")
        assert sorted((m.workflow_id, m.outcome, m.verification) for m in report.moves) == [
            ("rb-signal", "moved", "replay"),
            ("rb-timer", "moved", "replay"),
        ], report.as_dict()

    for execution_id in (on_signal, on_timer):
        sealed = row(shards.dsns[0], execution_id)
        assert (sealed["status"], sealed["migrated_to_shard"]) == ("MIGRATED", 1), (
            "the source is a sealed pointer"
        )
        live = row(shards.dsns[1], execution_id)
        assert (live["status"], live["migrated_from_shards"]) == ("RUNNING", [0])
        assert live["last_event_id"] == sealed["last_event_id"], "the copy holds the whole history"
        assert authoritative(shards.dsns, execution_id) == [1]
    assert scalar(shards.dsns[1], "SELECT count(*) FROM harvest.tasks WHERE kind = 'timer'") == 1, (
        "the timer moved"
    )
    assert scalar(shards.dsns[0], "SELECT count(*) FROM harvest.tasks") == 0, "the source keeps no task"
    assert (
        scalar(
            shards.dsns[0],
            "SELECT count(*) FROM harvest.audit_log WHERE operation = 'shard.rebalance.migrate'",
        )
        == 2
    )

    with _pools(shards) as pools, RunningWorker(APP, shards.dsns[1]):
        # The id still names shard 0: the router follows the pointer to shard 1.
        assert pools.resolve(on_signal) == 1
        for execution_id in (on_signal, on_timer):
            wait_until(
                lambda e=execution_id: _parked_on(shards.dsns[1], e, None), 60, what="parked on shard 1"
            )
            pools.call_routed(execution_id, lambda sql, e=execution_id: sql.signal_workflow(e, "go", 7))
        for execution_id in (on_signal, on_timer):
            wait_until(
                lambda e=execution_id: row(shards.dsns[1], e)["status"] == "COMPLETED", what="completion"
            )
        # A start that would replace the moved run on its hashed shard is refused (the guide's 503).
        with pools.api(0) as sql, pytest.raises(ExecutionMigrated) as refused:
            sql.start_workflow(
                "parked", ["signal"], "rb-signal", "default", "allow_duplicate", "terminate_existing", {}, 0
            )
        assert refused.value.reason == "replace_migrated_prior" and refused.value.shard == 1
        assert refused.value.retryable
        with pools.api(1) as sql:
            for execution_id in (on_signal, on_timer):
                history = sql.get_history(execution_id)
                assert [e["event_type"] for e in history].count("SignalReceived") == 1
                result = WorkflowReplayer(APP).replay(history)
                assert result.ok, result.error
                assert sql.get_execution(execution_id)["output"]["value"] == 7
    assert signals(shards.dsns[0], on_signal, 7) == 0, "nothing reached the seal"


def test_runs_with_work_in_flight_are_refused_with_their_blockers(shards) -> None:
    busy = park(shards.dsns[0], "busy", [{"type": "schedule_activity", "seq": 1, "name": "act"}])
    due = park(shards.dsns[0], "due", [{"type": "start_timer", "seq": 1, "duration": 0}])
    woken = park(shards.dsns[0], "woken")
    # A run whose activity failed for good into the dead-letter queue: RUNNING with no task, it
    # waits for an operator's replay or discard, and its dead letter is this shard's (moved, the
    # run would wait for ever: the replay refuses a sealed run, the discard tells nobody).
    dead = park(shards.dsns[0], "dead", [{"type": "schedule_activity", "seq": 1, "name": "act"}])
    with shards.connect(0) as conn:
        conn.execute("SELECT harvest.signal_workflow(%s, 'go')", (woken,))
        task, token = conn.execute(
            "SELECT task_id, fencing_token FROM harvest.claim_tasks('w-test', ARRAY['rbq-dead'], 1, 30)"
        ).fetchone()
        failure = {"error_type": "Boom", "message": "for good", "non_retryable": True}
        conn.execute("SELECT harvest.fail_activity(%s, %s, %s)", (task, token, json.dumps(failure)))
    assert (
        scalar(shards.dsns[0], "SELECT count(*) FROM harvest.dead_letters WHERE execution_id = %s", dead) == 1
    )
    with _pools(shards) as pools:
        report = Rebalancer(pools, 0, 1).run()
    outcomes = {m.execution_id: (m.outcome, m.blockers) for m in report.moves}
    assert outcomes == {
        busy: ("blocked", ["activity_in_flight"]),
        due: ("blocked", ["timer_due"]),
        woken: ("blocked", ["workflow_task_pending"]),
        dead: ("blocked", ["dead_letter"]),
    }
    for execution_id in (busy, due, woken, dead):
        assert row(shards.dsns[0], execution_id)["status"] == "RUNNING"
        assert row(shards.dsns[1], execution_id) is None
    assert scalar(shards.dsns[0], "SELECT count(*) FROM harvest.shard_migrations") == 0


def _footprint(shards) -> list:
    tables = ("executions", "events", "tasks", "shard_migrations", "shard_arrivals", "audit_log")
    return [scalar(shards.dsns[s], f"SELECT count(*) FROM harvest.{t}") for s in (0, 1) for t in tables]


def test_a_dry_run_reports_the_same_population_and_writes_nothing(shards) -> None:
    quiet = park(shards.dsns[0], "quiet")
    busy = park(shards.dsns[0], "busy", [{"type": "schedule_activity", "seq": 1, "name": "act"}])
    before = _footprint(shards)
    with _pools(shards) as pools:
        report = Rebalancer(pools, 0, 1).run(dry_run=True)
    assert {m.execution_id: m.outcome for m in report.moves} == {quiet: "would_move", busy: "blocked"}
    result = CliRunner().invoke(
        cli,
        ["shard", "rebalance", "--from", "0", "--to", "1", "--dry-run", "-o", "json"]
        + [f"--shard={s}={dsn}" for s, dsn in shards.dsns.items()],
    )
    assert result.exit_code == 0, result.output
    assert '"would_move": 1' in result.output and '"blocked": 1' in result.output
    assert _footprint(shards) == before, "a dry run writes nothing on either shard"
    # The real run moves exactly what the dry run reported.
    with _pools(shards) as pools:
        real = Rebalancer(pools, 0, 1).run()
    assert {m.execution_id: m.outcome for m in real.moves} == {quiet: "moved", busy: "blocked"}


def test_a_rebalance_shows_its_progress_on_stderr_and_keeps_json_clean(shards) -> None:
    """A move is several round trips on two databases, so `--limit 10000` ran for minutes with
    nothing printed: a progress bar on stderr says it goes on; JSON output has none."""
    parked = [park(shards.dsns[0], f"bar-{n}") for n in range(3)]
    urls = [f"--shard={s}={dsn}" for s, dsn in shards.dsns.items()]
    result = CliRunner().invoke(
        cli, ["shard", "rebalance", "--from", "0", "--to", "1", "--limit", "2", *urls]
    )
    assert result.exit_code == 0, result.output
    assert "moving runs from shard 0 to shard 1" in result.stderr, result.stderr
    assert result.stdout.startswith("shard 0 -> 1: 2 moved"), result.stdout
    result = CliRunner().invoke(cli, ["-o", "json", "shard", "rebalance", "--from", "0", "--to", "1", *urls])
    assert result.exit_code == 0 and result.stderr == "", result.stderr
    assert json.loads(result.stdout)["counts"]["moved"] == 1
    assert sorted(authoritative(shards.dsns, e)[0] for e in parked) == [1, 1, 1]


def test_a_rebalance_to_a_shard_whose_server_refuses_says_so_at_once_with_the_cause(shards) -> None:
    """The command's pools fail fast as every other command's: a refused connect is named with
    what it met, not after the 10 s acquire timeout as a bare 'cannot be reached now'."""
    quiet = park(shards.dsns[0], "refused")
    urls = [f"--shard={s}={dsn}" for s, dsn in shards.dsns.items()]
    shards.stop(1)
    try:
        result = CliRunner().invoke(cli, ["shard", "rebalance", "--from", "0", "--to", "1", *urls])
    finally:
        shards.start(1)
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: shard 1 is unavailable: "), result.stderr
    assert "(" in lines[0] and "retry once it is back" not in lines[0], "the connect's cause is named"
    assert "postgresql://" not in result.stderr
    assert authoritative(shards.dsns, quiet) == [0]


def _two_rebalancers(shards, execution_id: str) -> list:
    barrier = threading.Barrier(2)
    moves = []

    def drive(target: int) -> None:
        with _pools(shards) as pools:
            rebalancer = Rebalancer(pools, 0, target)
            barrier.wait()
            moves.append(rebalancer.move(execution_id))

    threads = [threading.Thread(target=drive, args=(target,)) for target in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return moves


def test_of_two_rebalancers_on_one_run_exactly_one_moves_it(shards) -> None:
    for attempt in range(6):
        execution_id = park(shards.dsns[0], f"race-{attempt}")
        moves = _two_rebalancers(shards, execution_id)
        assert sorted(m.outcome for m in moves) == ["blocked", "moved"], [m.as_dict() for m in moves]
        live = authoritative(shards.dsns, execution_id)
        assert len(live) == 1 and live[0] in (1, 2)
        loser = 3 - live[0]
        assert row(shards.dsns[loser], execution_id) is None, "the loser left no copy"


def test_a_signal_between_verification_and_cutover_makes_the_cutover_decline(shards) -> None:
    execution_id = park(shards.dsns[0], "wake-before")

    def on_phase(phase: str, record: dict) -> None:
        if phase == "verified":
            with shards.connect(0) as conn:
                conn.execute("SELECT harvest.signal_workflow(%s, 'go', '\"w1\"')", (execution_id,))

    with _pools(shards) as pools:
        move = Rebalancer(pools, 0, 1, on_phase=on_phase).move(execution_id)
    assert move.outcome == "declined" and "cutover declined" in move.error
    assert authoritative(shards.dsns, execution_id) == [0]
    assert row(shards.dsns[1], execution_id) is None, "the staged copy was discarded"
    assert signals(shards.dsns[0], execution_id, "w1") == 1


def test_a_signal_right_after_the_cutover_follows_the_pointer_and_lands_once(shards) -> None:
    execution_id = park(shards.dsns[0], "wake-after")
    outcome: dict = {}

    def send() -> None:
        with _pools(shards) as pools:
            try:
                outcome["event"] = pools.call_routed(
                    execution_id, lambda sql: sql.signal_workflow(execution_id, "go", "w2")
                )
            except Exception as exc:  # recorded, asserted below
                outcome["error"] = exc

    sender = threading.Thread(target=send)

    def on_phase(phase: str, record: dict) -> None:
        if phase == "cut_over":  # claimable nowhere until activation: the signal must wait, not fail
            sender.start()
            sender.join(0.3)

    with _pools(shards) as pools:
        move = Rebalancer(pools, 0, 1, on_phase=on_phase).move(execution_id)
    sender.join(30)
    assert move.outcome == "moved"
    assert "error" not in outcome, outcome
    assert signals(shards.dsns[1], execution_id, "w2") == 1
    assert signals(shards.dsns[0], execution_id, "w2") == 0
    assert (
        scalar(
            shards.dsns[1],
            "SELECT count(*) FROM harvest.tasks WHERE execution_id = %s AND kind = 'workflow'",
            execution_id,
        )
        == 1
    ), "the wake is a workflow task on the target"


def _signal_against_move(shards, execution_id: str, payload: str) -> list:
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def signal() -> None:
        with _pools(shards) as pools:
            barrier.wait()
            try:
                pools.call_routed(execution_id, lambda sql: sql.signal_workflow(execution_id, "go", payload))
            except BaseException as exc:
                errors.append(exc)

    def move() -> None:
        with _pools(shards) as pools:
            rebalancer = Rebalancer(pools, 0, 1)
            barrier.wait()
            rebalancer.move(execution_id)

    threads = [threading.Thread(target=signal), threading.Thread(target=move)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return errors


def test_signals_racing_moves_are_never_lost_nor_doubled(shards) -> None:
    for attempt in range(8):
        execution_id = park(shards.dsns[0], f"wake-race-{attempt}")
        payload = f"race-{attempt}-{uuid.uuid4().hex[:6]}"
        errors = _signal_against_move(shards, execution_id, payload)
        assert not errors, errors
        live = authoritative(shards.dsns, execution_id)
        assert len(live) == 1
        assert signals(shards.dsns[live[0]], execution_id, payload) == 1, (
            "delivered exactly once where it lives"
        )


def test_a_chain_of_moves_is_followed_and_collapsed(shards) -> None:
    execution_id = park(shards.dsns[0], "chain")
    with _pools(shards) as pools:
        assert Rebalancer(pools, 0, 1).move(execution_id).outcome == "moved"
        assert Rebalancer(pools, 1, 2).move(execution_id).outcome == "moved"
        # The origin was repointed straight at shard 2 by the second move.
        assert row(shards.dsns[0], execution_id)["migrated_to_shard"] == 2
        with shards.connect(0) as conn:  # undo the collapse: the chain 0 -> 1 -> 2 is followed
            conn.execute("UPDATE harvest.executions SET migrated_to_shard = 1 WHERE id = %s", (execution_id,))
        assert pools.resolve(execution_id) == 2
        assert row(shards.dsns[0], execution_id)["migrated_to_shard"] == 2, "a followed chain is collapsed"
        # Back to shard 0: the staged copy replaces the origin's seal, which keeps resolving meanwhile.
        assert Rebalancer(pools, 2, 0).move(execution_id).outcome == "moved"
        assert authoritative(shards.dsns, execution_id) == [0]
        assert row(shards.dsns[0], execution_id)["migrated_from_shards"] == [0, 1, 2]
        assert pools.resolve(execution_id) == 0


def _decide_on(dsn: str, execution_id: str, commands: list) -> None:
    """Claim the run's workflow task on one shard and decide it with ``commands``."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        queue = conn.execute(
            "SELECT queue FROM harvest.executions WHERE id = %s", (execution_id,)
        ).fetchone()[0]
        task = conn.execute(
            "SELECT task_id, fencing_token FROM harvest.claim_tasks('w-1', ARRAY[%s], 1, 30)", (queue,)
        ).fetchone()
        through = conn.execute("SELECT last_event_id FROM harvest.executions WHERE id = %s", (execution_id,))
        conn.execute(
            "SELECT * FROM harvest.complete_workflow_task(%s, %s, %s, %s, 'w-1')",
            (task[0], task[1], through.fetchone()[0], json.dumps(commands)),
        )


def test_a_moved_run_starts_children_and_continues_as_new_on_its_new_shard(shards) -> None:
    execution_id = park(shards.dsns[0], "mover")
    with _pools(shards) as pools:
        assert Rebalancer(pools, 0, 1).move(execution_id).outcome == "moved"
        pools.call_routed(execution_id, lambda sql: sql.signal_workflow(execution_id, "go", 1))
    # Its id still names shard 0; what it starts is minted for shard 1, where it lives.
    _decide_on(
        shards.dsns[1],
        execution_id,
        [
            {
                "type": "start_child_workflow",
                "seq": 1,
                "workflow_name": "kid",
                "workflow_id": "mover-kid",
                "task_queue": "kidq",
            }
        ],
    )
    child = scalar(shards.dsns[1], "SELECT id::text FROM harvest.executions WHERE workflow_id = 'mover-kid'")
    assert shard_of(child) == 1
    with shards.connect(1) as conn:
        conn.execute("SELECT harvest.signal_workflow(%s, 'again')", (execution_id,))
    _decide_on(shards.dsns[1], execution_id, [{"type": "continue_as_new", "input": [2]}])
    successor = scalar(
        shards.dsns[1],
        "SELECT id::text FROM harvest.executions WHERE continued_from = %s",
        execution_id,
    )
    assert shard_of(successor) == 1 and row(shards.dsns[1], successor)["status"] == "RUNNING"


def test_a_client_on_the_source_reads_a_moved_run_as_moved_not_as_ended(shards) -> None:
    execution_id = park(shards.dsns[0], "moved-result")
    with _pools(shards) as pools:
        assert Rebalancer(pools, 0, 1).move(execution_id).outcome == "moved"
    with Client(shards.dsns[0]) as client:
        with pytest.raises(ExecutionMigrated) as caught:
            client.get_handle(execution_id).result(timeout=5)
        assert (caught.value.reason, caught.value.shard) == ("migrated", 1)
        handle = client.get_handle(execution_id)
        for act in (
            lambda: handle.signal("go", 1),
            lambda: handle.cancel("x"),
            lambda: handle.terminate("x"),
            lambda: handle.query("state"),
            lambda: handle.update("change", 1),
        ):
            with pytest.raises(ExecutionMigrated) as refused:
                act()
            assert refused.value.shard == 1, (
                "every id-routed act on the seal is refused naming where the run lives"
            )
    with shards.connect(0) as conn, pytest.raises(psycopg.Error) as reset:
        conn.execute("SELECT harvest.reset_workflow(%s, 1, 'why')", (execution_id,))
    assert reset.value.sqlstate == "HR013"
    assert signals(shards.dsns[0], execution_id, 1) == 0
    assert row(shards.dsns[0], execution_id)["status"] == "MIGRATED", "the seal is untouched"
    assert scalar(shards.dsns[0], "SELECT count(*) FROM harvest.query_requests") == 0


def test_the_usage_reports_of_the_shards_count_a_moved_run_once(shards) -> None:
    execution_id = park(shards.dsns[0], "usage")
    with _pools(shards) as pools:
        assert Rebalancer(pools, 0, 1).move(execution_id).outcome == "moved"
        pools.call_routed(execution_id, lambda sql: sql.signal_workflow(execution_id, "go", 1))
    _decide_on(shards.dsns[1], execution_id, [{"type": "complete_workflow", "result": 1}])
    totals = {"workflow_starts": 0, "completed": 0}
    for shard in (0, 1, 2):
        with shards.connect(shard) as conn:
            for found in conn.execute(
                "SELECT workflow_starts, completed FROM harvest.count_usage(now() - interval '1 hour', "
                "now() + interval '1 hour')"
            ):
                totals["workflow_starts"] += found[0]
                totals["completed"] += found[1]
    assert totals == {"workflow_starts": 1, "completed": 1}, "one start (on shard 0), one completion (on 1)"


def _history_bytes_figure(dsn: str, key: str) -> tuple[int, int]:
    """The max_history_bytes usage of the key on the shard, and the direct sum it must equal."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT harvest.quota_usage(%s, 'max_history_bytes'),"
            " (SELECT coalesce(sum(history_bytes), 0)::bigint FROM harvest.executions WHERE quota_key = %s)",
            (key, key),
        ).fetchone()


def test_a_moved_quota_run_keeps_each_shards_history_bytes_figure(shards) -> None:
    """A move writes the run's row on both shards with statements the quota's ended-bytes triggers
    see (sql/triggers.sql): the source's seal leaves RUNNING (MIGRATED, counted as every kept row
    was), the target's staged copy is inserted MIGRATING and activated RUNNING. Each shard's
    max_history_bytes figure stays its direct sum, through the move and the run's close there."""
    execution_id = park(shards.dsns[0], "quota-move")
    with shards.connect(0) as conn:
        conn.execute("UPDATE harvest.executions SET quota_key = 'tenant' WHERE id = %s", (execution_id,))
    with _pools(shards) as pools:
        assert Rebalancer(pools, 0, 1).move(execution_id).outcome == "moved"
        pools.call_routed(execution_id, lambda sql: sql.signal_workflow(execution_id, "go", 1))
    for shard in (0, 1):
        usage, direct = _history_bytes_figure(shards.dsns[shard], "tenant")
        assert usage == direct > 0, shard
    _decide_on(shards.dsns[1], execution_id, [{"type": "complete_workflow", "result": 1}])
    assert row(shards.dsns[1], execution_id)["status"] == "COMPLETED"
    usage, direct = _history_bytes_figure(shards.dsns[1], "tenant")
    assert usage == direct > 0


def _signal_after_verification(shards, shard: int, execution_id: str, figures: dict) -> object:
    """An on_phase that, once the move is verified, records each shard's figure (the staged
    copy counted on the target) and signals the run on ``shard``: the cutover declines, the
    target's copy is discarded."""

    def on_phase(phase: str, record: dict) -> None:
        if phase == "verified":
            figures.update({s: _history_bytes_figure(shards.dsns[s], "tenant") for s in (0, 1)})
            with shards.connect(shard) as conn:
                conn.execute("SELECT harvest.signal_workflow(%s, 'go', '\"w\"')", (execution_id,))

    return on_phase


def test_each_discard_of_a_quota_runs_move_keeps_each_shards_history_bytes_figure(shards) -> None:
    """A move that ends before its cutover discards the target's copy (discard_migration_copy,
    functions/rebalance.sql) two ways: the staged copy deleted (a first move there), or, over a
    move back, the shard's seal restored in place (its bytes and status from before the copy,
    the copied events past it deleted). Each writes the row with statements the ended-bytes
    triggers see; each shard's max_history_bytes figure stays its direct sum after both."""
    execution_id = park(shards.dsns[0], "quota-discard")
    with shards.connect(0) as conn:
        conn.execute("UPDATE harvest.executions SET quota_key = 'tenant' WHERE id = %s", (execution_id,))
    # The staged copy deleted: the first move to shard 1 declines at its cutover.
    figures: dict = {}
    with _pools(shards) as pools:
        on_phase = _signal_after_verification(shards, 0, execution_id, figures)
        assert Rebalancer(pools, 0, 1, on_phase=on_phase).move(execution_id).outcome == "declined"
    assert figures[1][0] == figures[1][1] > 0, "the staged copy counted while it was there"
    assert row(shards.dsns[1], execution_id) is None, "the staged copy was deleted"
    for shard in (0, 1):
        usage, direct = _history_bytes_figure(shards.dsns[shard], "tenant")
        assert usage == direct, shard
    assert _history_bytes_figure(shards.dsns[1], "tenant") == (0, 0)
    _decide_on(shards.dsns[0], execution_id, [])  # the signal's task decided: quiescent again

    # The seal restored: moved to shard 1, grown there, then a move back declines.
    with _pools(shards) as pools:
        assert Rebalancer(pools, 0, 1).move(execution_id).outcome == "moved"
        pools.call_routed(execution_id, lambda sql: sql.signal_workflow(execution_id, "go", 1))
    _decide_on(shards.dsns[1], execution_id, [])
    seal = _history_bytes_figure(shards.dsns[0], "tenant")
    assert seal[0] == seal[1] > 0
    figures.clear()
    with _pools(shards) as pools:
        on_phase = _signal_after_verification(shards, 1, execution_id, figures)
        assert Rebalancer(pools, 1, 0, on_phase=on_phase).move(execution_id).outcome == "declined"
    assert figures[0][0] == figures[0][1] > seal[1], "the copy over the seal counted its grown bytes"
    assert row(shards.dsns[0], execution_id)["status"] == "MIGRATED", "the seal is restored"
    assert _history_bytes_figure(shards.dsns[0], "tenant") == seal
    usage, direct = _history_bytes_figure(shards.dsns[1], "tenant")
    assert usage == direct > 0


def _parked_with_a_child_on_shard_1(shards, client: Client) -> tuple[str, str]:
    """A parent started on shard 0 and its child on shard 1, both parked (the child waits for "go")."""
    parent = client.start_workflow(awaits_remote_child, 1).execution_id
    child = wait_for(
        lambda: scalar(
            shards.dsns[1],
            "SELECT max(id::text) FROM harvest.executions WHERE parent_id = %s",
            uuid.UUID(parent),
        ),
        what="the child on shard 1",
    )
    wait_until(lambda: _parked_on(shards.dsns[1], child, None), what="the child parked")
    wait_until(lambda: _parked_on(shards.dsns[0], parent, None), what="the parent parked")
    return parent, child


def test_a_run_awaiting_a_child_on_another_shard_is_not_moved(shards) -> None:
    """The child's end is pulled into the parent's row on the parent's shard (its
    cross_shard_children row stays there): a parent moved away would never hear of it."""
    enable_cross_shard_relays(shards)
    with shard_workers(APP, shards), Client(shards.dsns[0]) as client:
        parent, child = _parked_with_a_child_on_shard_1(shards, client)
        with _pools(shards) as pools:
            report = Rebalancer(pools, 0, 2).run(execution_ids=[parent])
            assert [(m.outcome, m.blockers) for m in report.moves] == [("blocked", ["open_children"])]
            pools.call_routed(child, lambda sql: sql.signal_workflow(child, "go", 9))
        assert client.get_handle(parent).result(timeout=60) == 9
    assert row(shards.dsns[2], parent) is None


def test_retiring_a_childs_shard_by_the_runbook_leaves_no_child_to_follow_a_forward_to(shards) -> None:
    """docs/runbooks/shard-decommission.md on shard 1 (into shard 2) while it holds a child of a
    parent on shard 0: the child is never moved (``has_parent``), so the shard is not empty while
    it runs and the forward of step 5 cannot go in; the child ends on shard 1, its end reaches its
    parent, and only then does shard 1 owe no end and hold no child any shard's pump drives. A
    cross-shard child therefore never lives behind a ``[shards.forwards]`` entry: there is no
    child for the pump to follow one to (docs/sharding.md, "Retiring the shard of a child")."""
    enable_cross_shard_relays(shards)
    with shard_workers(APP, shards), Client(shards.dsns[0]) as client:
        parent, child = _parked_with_a_child_on_shard_1(shards, client)
        # Step 1: shard 1 is no longer writable. Step 2: move the whole shard, 1 -> 2.
        step_1 = ShardPools(ShardRouter(ALL, [0, 2], 0), shards.dsns, max_size=4)
        with step_1 as pools:
            report = Rebalancer(pools, 1, 2, operator_id="ops@test", replay=_replay).run()
            assert [(m.execution_id, m.outcome, m.blockers) for m in report.moves] == [
                (child, "blocked", ["has_parent"])
            ], report.as_dict()
            assert row(shards.dsns[2], child) is None, "the child stays on shard 1"
            # Step 5's check, `harvest shard health --retiring-shard 1`: not yet (exit 2).
            code, check = _retire_check(shards, 1)
            assert (code, check["clear"]) == (2, False), check
            assert check["owed_ends"] == [{"parent_shard": 0, "ended": 0, "running": 1}], (
                "shard 1 owes shard 0 a running child's end"
            )
            assert check["children"] == [{"parent_shard": 0, "children": 1}], "shard 0's pump drives it"
            # Step 3's straggler ends where it is, and its end reaches its parent.
            pools.call_routed(child, lambda sql: sql.signal_workflow(child, "go", 9))
        assert client.get_handle(parent).result(timeout=60) == 9
        wait_until(lambda: _retire_check(shards, 1)[0] == 0, what="shard 1 clear of children")
    code, check = _retire_check(shards, 1)
    assert check["clear"] is True and check["unread"] == check["unread_reasons"] == [], check
    assert check["owed_ends"] == check["children"] == [], check
    assert "retiring shard 1: clear" in _run_retire_check(shards, 1, "table").output
    with ShardPools(ShardRouter(ALL, [0, 2], 0), shards.dsns, max_size=4) as pools:
        assert Rebalancer(pools, 1, 2).run(dry_run=True).moves == [], "nothing left to move"
    # Step 5: the forward goes in now, with nothing of a parent's left behind it.
    retired = ShardRouter([0, 2], [0, 2], 0, forwards={1: 2})
    assert retired.route(child) == 2
    # Nor could a child placed on shard 1 and not started yet be started behind the forward:
    # shard 2 refuses an id of shard 1.
    at_2 = ShardPools(retired, {0: shards.dsns[0], 2: shards.dsns[2]}, max_size=2)
    with at_2 as pools, pools.api(2) as sql, pytest.raises(WrongShard):
        sql.start_cross_shard_child(child, parent, 1, "waits_for_go", "late", "default", None, "terminate")


def _run_retire_check(shards, shard: int, output: str = "json"):
    """`harvest shard health --retiring-shard N` with every shard readable, shard 1 not writable."""
    env = {
        "HARVEST_DATABASE_URL": "",
        "HARVEST_SHARDS__READABLE": "0,1,2",
        "HARVEST_SHARDS__WRITABLE": "0,2",
        **{f"HARVEST_SHARDS__URLS__{s}": dsn for s, dsn in shards.dsns.items()},
    }
    args = ["--output", output, "shard", "health", "--retiring-shard", str(shard)]
    return CliRunner().invoke(cli, args, env=env, catch_exceptions=False)


def _retire_check(shards, shard: int) -> tuple[int, dict]:
    """The runbook's check of a retiring shard's children: its exit code and its answer."""
    result = _run_retire_check(shards, shard)
    return result.exit_code, json.loads(result.output)["retiring"]


def test_a_run_awaiting_the_outcome_of_a_signal_to_another_shard_is_not_moved(shards) -> None:
    """The outcome of an external signal is reported to the source run on the shard that holds
    the relay: a source moved away would wait for it forever."""
    enable_cross_shard_relays(shards)
    with shard_workers(APP, shards, pump=False), Client(shards.dsns[0]) as client:
        with Client(shards.dsns[1]) as other:
            target = other.start_workflow(waits_for_go).execution_id
        sender = client.start_workflow(signals_remote, target).execution_id
        wait_until(
            lambda: scalar(shards.dsns[0], "SELECT count(*) FROM harvest.relays WHERE remote") == 1,
            what="the relay waiting for the pump",
        )
        wait_until(lambda: _parked_on(shards.dsns[0], sender, None), what="the sender parked")
        with _pools(shards) as pools:
            report = Rebalancer(pools, 0, 2).run(execution_ids=[sender])
        assert [(m.outcome, m.blockers) for m in report.moves] == [("blocked", ["relay_pending"])]
        pump = ShardWorker(APP, shards, 0).start()
        try:
            assert client.get_handle(sender).result(timeout=60) == "sent"
        finally:
            pump.stop()
    assert row(shards.dsns[2], sender) is None


def _dead_letter_figure(dsn: str, key: str) -> tuple[int, int]:
    """The max_dead_letters usage of the key on the shard, and the old join it must equal."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT harvest.quota_usage(%s, 'max_dead_letters'),"
            " (SELECT count(*) FROM harvest.executions AS e JOIN harvest.dead_letters AS d"
            " ON d.execution_id = e.id WHERE e.quota_key = %s)",
            (key, key),
        ).fetchone()


def _park_activity(dsn: str, execution_id: str, seq: int) -> int:
    """Decide the run's workflow task with one activity, and fail it for good: its dead letter."""
    queue = f"rb-act-{execution_id}"
    _decide_on(dsn, execution_id, [{"type": "schedule_activity", "seq": seq, "name": "act", "queue": queue}])
    with psycopg.connect(dsn, autocommit=True) as conn:
        task = conn.execute(
            "SELECT task_id, fencing_token FROM harvest.claim_tasks('w-1', ARRAY[%s], 1, 30)", (queue,)
        ).fetchone()
        failure = {"error_type": "Boom", "message": "down", "non_retryable": True, "details": None}
        (outcome,) = conn.execute(
            "SELECT harvest.fail_activity(%s, %s, %s::jsonb)", (task[0], task[1], json.dumps(failure))
        ).fetchone()
        assert outcome == "dead_lettered"
        return conn.execute(
            "SELECT id FROM harvest.dead_letters WHERE execution_id = %s AND seq = %s", (execution_id, seq)
        ).fetchone()[0]


def test_a_moved_quota_run_keeps_each_shards_dead_letter_figure(shards) -> None:
    """A dead letter carries its run's quota key (migration 0106); a run with one parked cannot
    move, and a move does not carry dead letters. A run of the key parks one and has it discarded
    on shard 0, moves to shard 1 and parks another there, beside a run of the key that stays on
    shard 0 with its dead letter: each shard's max_dead_letters figure is the old join's."""
    staying, moving = park(shards.dsns[0], "dl-stays"), park(shards.dsns[0], "dl-moves")
    with shards.connect(0) as conn:
        conn.execute(
            "UPDATE harvest.executions SET quota_key = 'tenant' WHERE id IN (%s, %s)", (staying, moving)
        )
        conn.execute("SELECT harvest.signal_workflow(%s, 'go', '1')", (staying,))
        conn.execute("SELECT harvest.signal_workflow(%s, 'go', '1')", (moving,))
    _park_activity(shards.dsns[0], staying, 1)
    discarded = _park_activity(shards.dsns[0], moving, 1)
    assert _dead_letter_figure(shards.dsns[0], "tenant") == (2, 2)
    with shards.connect(0) as conn:
        conn.execute("SELECT harvest.discard_dead_letter(%s)", (discarded,))
    _decide_on(shards.dsns[0], moving, [])  # the ActivityFailed decided: the run waits again
    with _pools(shards) as pools:
        assert Rebalancer(pools, 0, 1).move(moving).outcome == "moved"
        pools.call_routed(moving, lambda sql: sql.signal_workflow(moving, "go", 2))
    _park_activity(shards.dsns[1], moving, 2)
    assert _dead_letter_figure(shards.dsns[0], "tenant") == (1, 1)
    assert _dead_letter_figure(shards.dsns[1], "tenant") == (1, 1)


def test_a_query_waiting_on_the_source_when_the_run_moves_is_answered_where_it_lives(shards) -> None:
    """The cutover answers the run's open queries failed ExecutionMigrated (naming the shard), and
    the client, routed by the id, asks again there within its timeout: no wait on the seal."""
    with RunningWorker(APP, shards.dsns[0]), Client(shards.dsns[0]) as client:
        execution_id = client.start_workflow(queried, "asked", workflow_id="rb-queried").execution_id
        wait_until(lambda: _parked_on(shards.dsns[0], execution_id, None), what="park")
    outcome: list[object] = []

    def ask(client: Client) -> None:
        try:
            outcome.append(client.get_handle(execution_id).query("mode", timeout=20))
        except Exception as exc:
            outcome.append(exc)

    pending = "SELECT count(*) FROM harvest.query_requests WHERE status = 'pending'"
    with _pools(shards) as pools, Client(shards=pools) as client:
        asker = threading.Thread(target=ask, args=(client,))
        asker.start()
        # No worker polls shard 0 any more: the query waits there while the run moves.
        wait_until(lambda: scalar(shards.dsns[0], pending) == 1, what="the query pending on shard 0")
        with _pools(shards) as mover:
            assert Rebalancer(mover, 0, 1).move(execution_id).outcome == "moved"
        with RunningWorker(APP, shards.dsns[1]):
            asker.join(30)
    assert outcome == ["asked"], outcome
    assert (
        scalar(
            shards.dsns[0],
            "SELECT error ->> 'error_type' || ' ' || (error #>> '{details,shard_id}') "
            "FROM harvest.query_requests",
        )
        == "ExecutionMigrated 1"
    ), "the source's request was answered by the move, naming the shard"
    assert (
        scalar(shards.dsns[1], "SELECT count(*) FROM harvest.query_requests WHERE status = 'completed'") == 1
    )
