"""A cross-shard child's end outlives its shard's retention window until its parent has it
(issue #1263, docs/sharding.md "Children on other shards"): the child's shard keeps an ended
child whose parent on another shard has not taken its end, however short the window, and lets
it go once the pump has delivered it (or the parent's close policy reached it, or an operator
released the ends owed to a shard that is gone). Two real shards, the pump's steps played by
the test, the janitor run under the test clock: no worker, no sleep."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import psycopg.rows
import pytest
from cross_shard_helpers import decide_child, enable_cross_shard_relays, park_with_remote_child, router
from rebalance_helpers import park

from harvest.shard import AsyncShardPools
from harvest.shard.relay_pump import RelayPump

pytestmark = pytest.mark.shard

LATER = "2999-01-01 00:00:00+00"  # the janitor's clock: far past every window below
ENDED = ["ChildWorkflowStarted", "ChildWorkflowCompleted"]  # the parent's history of a delivered end


def _park_with_remote_child(cluster, key: str, policy: str = "terminate") -> tuple[str, str]:
    """park_with_remote_child's parent and its child's execution id."""
    parent, row = park_with_remote_child(cluster, key, policy)
    return parent, str(row["child_execution_id"])


async def _tick(cluster) -> None:
    async with AsyncShardPools(router(), cluster.dsns, max_size=2, acquire_timeout=2.0) as pools:
        await RelayPump(pools, sources=[0]).tick()


def _janitor(cluster, shard: int, max_age: str = "1 hour") -> dict:
    """One retention batch on ``shard`` with its clock far in the future: every ended run is
    past the window."""
    with cluster.connect(shard) as conn:
        conn.execute("SELECT set_config('harvest.fake_now', %s, false)", (LATER,))
        return conn.execute("SELECT harvest.run_retention(%s::interval)", (max_age,)).fetchone()[0]


def _exists(cluster, shard: int, execution_id: str) -> bool:
    with cluster.connect(shard) as conn:
        found = conn.execute("SELECT 1 FROM harvest.executions WHERE id = %s", (execution_id,)).fetchone()
    return found is not None


def _parent_events(cluster, parent: str) -> list[tuple[str, dict]]:
    with cluster.connect(0) as conn:
        return conn.execute(
            "SELECT event_type, event_data FROM harvest.events WHERE execution_id = %s "
            "AND event_type LIKE 'ChildWorkflow%%' ORDER BY event_id",
            (parent,),
        ).fetchall()


def _children_rows(cluster) -> list[tuple]:
    with cluster.connect(0) as conn:
        return conn.execute(
            "SELECT status, cancel_requested, last_error FROM harvest.cross_shard_children"
        ).fetchall()


def test_an_ended_child_is_kept_past_its_shards_window_until_its_parent_has_its_end(shards) -> None:
    """The child completes on shard 1 while its parent's pump does not come by (shard 0 down,
    a pump stopped) for longer than shard 1's retention window: the janitor there must keep the
    child, so that the pump, back, delivers its result (and does not find it gone: the parent
    would wait for ever). Once delivered, the child goes with the next batch."""
    enable_cross_shard_relays(shards)
    parent, child = _park_with_remote_child(shards, "owed-end")
    asyncio.run(_tick(shards))  # the pump starts the child on shard 1
    decide_child(shards, [{"type": "complete_workflow", "result": "done"}])

    swept = _janitor(shards, 1)
    assert _exists(shards, 1, child), f"the janitor purged a child whose parent has not its end: {swept}"

    asyncio.run(_tick(shards))
    events = _parent_events(shards, parent)
    assert [e[0] for e in events] == ENDED, _children_rows(shards)
    assert events[1][1]["result"] == "done"
    assert _children_rows(shards) == [], "the row settled"

    _janitor(shards, 1)
    assert not _exists(shards, 1, child), "delivered: the child's shard lets it go"


def test_a_delivered_end_whose_release_was_lost_is_released_by_the_next_sweep(shards) -> None:
    """The pump delivered the end to the parent, then could not reach the child's shard to say
    so: the parent's row waits (delivered), the child is kept, and the next sweep releases it
    without a second ChildWorkflowCompleted."""
    enable_cross_shard_relays(shards)
    parent, child = _park_with_remote_child(shards, "lost-ack")
    asyncio.run(_tick(shards))
    decide_child(shards, [{"type": "complete_workflow", "result": 7}])

    class NoAck(AsyncShardPools):
        calls = 0

        def api(self, shard: int):  # the child's shard answers the read, then is gone
            if shard == 1:
                self.calls += 1
                if self.calls > 1:
                    from harvest.core.errors import ShardUnavailable

                    raise ShardUnavailable(1, "down")
            return super().api(shard)

    async def lossy_tick() -> None:
        async with NoAck(router(), shards.dsns, max_size=2, acquire_timeout=2.0) as pools:
            await RelayPump(pools, sources=[0]).tick()

    asyncio.run(lossy_tick())
    assert [e[0] for e in _parent_events(shards, parent)] == ENDED
    assert [r[0] for r in _children_rows(shards)] == ["delivered"]
    _janitor(shards, 1)
    assert _exists(shards, 1, child), "its release did not reach shard 1: kept"

    with shards.connect(0) as conn:  # past the failed step's backoff
        conn.execute("UPDATE harvest.cross_shard_children SET next_attempt_at = NULL")
    asyncio.run(_tick(shards))
    assert _children_rows(shards) == []
    assert [e[0] for e in _parent_events(shards, parent)] == ENDED
    _janitor(shards, 1)
    assert not _exists(shards, 1, child)


@pytest.mark.parametrize("policy", ["abandon", "request_cancel", "terminate"])
def test_a_parent_that_ended_first_lets_its_childs_end_go(shards, policy: str) -> None:
    """The parent is terminated while its child runs: whatever its close policy, nobody will
    take the child's end, so the pump's visit with the policy releases it, and the child (once
    ended) goes with its window like any run."""
    enable_cross_shard_relays(shards)
    parent, child = _park_with_remote_child(shards, f"gone-parent-{policy}", policy)
    asyncio.run(_tick(shards))
    with shards.connect(0) as conn:
        conn.execute("SELECT harvest.terminate_workflow(%s, 'stop the tree')", (parent,))
    asyncio.run(_tick(shards))
    assert _children_rows(shards) == []
    if policy != "terminate":  # abandon: still running; request_cancel: asked to stop
        decide_child(shards, [{"type": "complete_workflow", "result": None}])
    _janitor(shards, 1)
    assert not _exists(shards, 1, child), "the parent ended first: the child's end is owed to nobody"


def test_a_child_whose_chain_lost_its_current_run_is_said_and_let_go_when_its_parent_ends(shards) -> None:
    """The child continued as new and its successor was erased by hand (or purged): its chain
    has no current run, and no end will come. The pull read it as a run with no id and no
    status, took that for running, and read it again every second for ever, saying nothing. It
    is now kept with an error naming the chain (retried with the backoff: the parent waits on
    it), and once the parent ends its close policy finds nothing running and the row goes, in
    one visit (the clear and the policy do not retry a chain that cannot rotate on)."""
    enable_cross_shard_relays(shards)
    parent, child = _park_with_remote_child(shards, "broken-chain")
    asyncio.run(_tick(shards))  # started on shard 1
    decide_child(shards, [{"type": "continue_as_new", "input": []}])
    with shards.connect(1) as conn:
        erased = conn.execute(
            "DELETE FROM harvest.executions WHERE workflow_id = 'broken-chain-kid' AND id <> %s RETURNING id",
            (child,),
        ).fetchall()
    assert len(erased) == 1, "setup: the successor is erased by hand"

    asyncio.run(_tick(shards))
    [(status, cancel_requested, last_error)] = _children_rows(shards)
    assert (status, cancel_requested) == ("running", False)
    assert f"cross-shard child {child} has no current run" in (last_error or ""), last_error
    with shards.connect(0) as conn:
        assert conn.execute("SELECT attempts FROM harvest.cross_shard_children").fetchone()[0] == 1

    with shards.connect(0) as conn:
        conn.execute("SELECT harvest.terminate_workflow(%s, 'its child is lost')", (parent,))
    asyncio.run(_tick(shards))
    assert _children_rows(shards) == [], "the parent ended: its policy found nothing running, the row went"
    with shards.connect(1) as conn:
        left = conn.execute("SELECT status FROM harvest.executions WHERE id = %s", (child,)).fetchone()
    assert left == ("CONTINUED_AS_NEW",), "the chain's last run is left as it was"


def test_an_operator_releases_the_ends_owed_to_a_retired_shard(shards) -> None:
    """The parent's shard is gone for good (retired, restored to before the child's start): an
    admin releases, on the child's shard, the ends owed to it, and the janitor takes them."""
    enable_cross_shard_relays(shards)
    _parent, child = _park_with_remote_child(shards, "retired")
    asyncio.run(_tick(shards))
    decide_child(shards, [{"type": "complete_workflow", "result": 1}])
    with shards.connect(1) as conn:
        conn.row_factory = psycopg.rows.dict_row
        owed = conn.execute("SELECT harvest.get_retention_status() -> 'owed_child_ends' AS n").fetchone()["n"]
        assert owed == 1
        released = conn.execute(
            "SELECT harvest.release_owed_child_ends(0, p_operator_id => 'ops') AS n"
        ).fetchone()["n"]
        assert released == 1
        assert (
            conn.execute(
                "SELECT count(*) AS n FROM harvest.audit_log"
                " WHERE operation = 'retention.release_owed_child_ends'"
            ).fetchone()["n"]
            == 1
        )
    _janitor(shards, 1)
    assert not _exists(shards, 1, child)


def test_a_moved_parents_child_owes_its_end_to_the_shard_the_parent_lives_on(shards) -> None:
    """A parent born on shard 1 and moved to shard 0 (a rebalance keeps its id, minted for
    shard 1) places a child on shard 1. The child's end is owed to shard 0, where the parent
    lives and its pump delivers from: marked with the shard its id names, the child said it
    owed shard 1 (its own shard), so the operator who retires shard 0 found nothing to release
    (release_owed_child_ends(0)), and one who retired the parent's birth shard released an end
    a live parent still waits for."""
    from harvest.shard import ShardPools
    from harvest.shard.rebalance import Rebalancer

    enable_cross_shard_relays(shards)
    parent = park(shards.dsns[1], "moved-parent")  # waits for a signal, on its birth shard
    with ShardPools(router(), shards.dsns, max_size=2) as pools:
        move = Rebalancer(pools, 1, 0, operator_id="ops@test").move(parent)
    assert move.outcome == "moved", move
    with shards.connect(0) as conn:  # woken on shard 0, it places a child on shard 1
        conn.execute("SELECT * FROM harvest.signal_workflow(%s, 'go', 'null')", (parent,))
        task = conn.execute(
            "SELECT task_id, fencing_token"
            " FROM harvest.claim_tasks('w-test', ARRAY['rbq-moved-parent'], 1, 30)"
        ).fetchone()
        command = {
            "type": "start_child_workflow",
            "seq": 1,
            "workflow_name": "kid",
            "workflow_id": "moved-parent-kid",
            "task_queue": "kidq",
            "shard": 1,
        }
        conn.execute(
            "SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, %s, 'w-test')",
            (task[0], task[1], psycopg.types.json.Jsonb([command])),
        )
        child = conn.execute(
            "SELECT child_execution_id FROM harvest.cross_shard_children WHERE parent_execution_id = %s",
            (uuid.UUID(parent),),
        ).fetchone()[0]
    asyncio.run(_tick(shards))  # the pump of shard 0 starts the child on shard 1

    with shards.connect(1) as conn:
        owed = conn.execute(
            "SELECT end_owed_to_shard FROM harvest.executions WHERE id = %s", (child,)
        ).fetchone()
    assert owed == (0,), "the child's end is owed to the shard its parent lives on"


# -- the operator's release from the CLI and over HTTP -----------------------------------------


def _owed_runs(cluster, shard: int, parent_shard: int, ended: int, running: int = 0) -> None:
    """``ended`` ended runs (and ``running`` running ones) on ``shard`` whose ends are owed to
    ``parent_shard``."""
    with cluster.connect(shard) as conn:
        conn.execute(
            "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, created_at,"
            " completed_at, end_owed_to_shard)"
            " SELECT harvest._new_execution_id(harvest.get_shard_id()), 'kid', 'owed-' || n,"
            " CASE WHEN n <= %(ended)s THEN 'COMPLETED' ELSE 'RUNNING' END, now(),"
            " CASE WHEN n <= %(ended)s THEN now() END, %(parent)s"
            " FROM generate_series(1, %(total)s) AS n",
            {"ended": ended, "parent": parent_shard, "total": ended + running},
        )


def _still_owed(cluster, shard: int, parent_shard: int) -> int:
    with cluster.connect(shard) as conn:
        return conn.execute(
            "SELECT count(*) FROM harvest.executions WHERE end_owed_to_shard = %s", (parent_shard,)
        ).fetchone()[0]


def _cli_env(cluster, readable=(0, 1, 2), retired: dict[int, int] | None = None) -> dict[str, str]:
    """The shards ``readable``; each of ``retired`` behind a forward to its shard (its database
    still there and given a url, as in the decommission runbook before its step 7)."""
    retired = retired or {}
    return {
        "HARVEST_DATABASE_URL": "",
        "HARVEST_URL": "",
        "HARVEST_SHARDS__READABLE": ",".join(map(str, readable)),
        "HARVEST_SHARDS__WRITABLE": ",".join(map(str, readable)),
        "HARVEST_SHARDS__DEFAULT": str(readable[0]),
        **{f"HARVEST_SHARDS__URLS__{s}": cluster.dsns[s] for s in (*readable, *retired)},
        **{f"HARVEST_SHARDS__FORWARDS__{s}": str(to) for s, to in retired.items()},
    }


# Shard 0 retired behind a forward to shard 1: the parent's shard gone for good.
RETIRED_0 = {"readable": (1, 2), "retired": {0: 1}}


def _cli(env: dict[str, str], *args: str):
    import json

    from click.testing import CliRunner

    from harvest.cli.main import main

    result = CliRunner().invoke(main, ["--output", "json", *args], env=env, catch_exceptions=False)
    return result, (json.loads(result.stdout) if result.stdout.strip() else None)


def test_shard_release_owed_ends_dry_runs_then_releases_on_every_other_shard_batch_by_batch(shards) -> None:
    """`release_owed_child_ends` was SQL only: an operator retiring a shard had to find the
    shards holding its children's ends, and call it on each, batch after batch, by hand. `harvest
    shard release-owed-ends <shard>` does it on every readable shard but the retired one; a dry
    run first says what it would release and writes nothing; the release is audited per shard."""
    _owed_runs(shards, 1, 0, ended=3, running=1)
    _owed_runs(shards, 2, 0, ended=1)
    _owed_runs(shards, 2, 1, ended=2)  # owed to shard 1, which is not retired: kept
    env = _cli_env(shards, **RETIRED_0)

    result, plan = _cli(env, "shard", "release-owed-ends", "0", "--dry-run")
    assert result.exit_code == 0, result.output
    assert plan["dry_run"] is True and plan["parent_shard"] == 0
    assert [(r["shard_id"], r["ended"], r["running"]) for r in plan["shards"]] == [(1, 3, 1), (2, 1, 0)]
    assert (plan["ended"], plan["running"]) == (4, 1)
    assert _still_owed(shards, 1, 0) == 4, "a dry run writes nothing"

    result, done = _cli(
        env, "shard", "release-owed-ends", "0", "--batch-size", "2", "--operator-id", "ops-ticket-42"
    )
    assert result.exit_code == 0, result.output
    assert done["released"] == 4 and done["unavailable_shards"] == []
    by_shard = {r["shard_id"]: r for r in done["shards"]}
    assert sorted(by_shard) == [1, 2], "the retired shard itself is not asked"
    assert by_shard[1]["released"] == 3 and by_shard[1]["batches"] == 3  # 2 + 1, then one of 0 ends it
    assert by_shard[2]["released"] == 1
    assert _still_owed(shards, 1, 0) == 1, "the running child is kept without --include-running"
    assert _still_owed(shards, 2, 1) == 2, "ends owed to another shard are kept"
    with shards.connect(1) as conn:
        audited = conn.execute(
            "SELECT operator_id, details ->> 'released' FROM harvest.audit_log"
            " WHERE operation = 'retention.release_owed_child_ends' ORDER BY id"
        ).fetchall()
    assert audited == [("ops-ticket-42", "2"), ("ops-ticket-42", "1"), ("ops-ticket-42", "0")]

    result, done = _cli(env, "shard", "release-owed-ends", "0", "--include-running")
    assert result.exit_code == 0 and done["released"] == 1
    assert _still_owed(shards, 1, 0) == 0


def test_shard_release_owed_ends_names_a_shard_it_could_not_reach_and_exits_1(shards) -> None:
    """A shard that cannot be reached keeps its owed ends; the others are released, and the
    command says which shard to run it again for (exit 1), as `retention run-now` does."""
    _owed_runs(shards, 1, 0, ended=2)
    _owed_runs(shards, 2, 0, ended=1)
    shards.stop(2)
    try:
        result, done = _cli(_cli_env(shards, **RETIRED_0), "shard", "release-owed-ends", "0")
    finally:
        shards.start(2)
    assert result.exit_code == 1, result.output
    assert done["released"] == 2 and done["unavailable_shards"] == [2]
    assert "2" in result.stderr
    assert _still_owed(shards, 2, 0) == 1


def test_shard_release_owed_ends_goes_on_past_a_shard_that_refuses_and_names_it(shards) -> None:
    """A shard that refuses the release (not an outage: here its function raises HR001) stopped
    the command there, the shards after it never asked and nothing printed. The others are now
    released all the same; what they released is printed, the refusal is named with its shard,
    and the command exits with the refusal's code, as `retention run-now` does."""
    _owed_runs(shards, 1, 0, ended=2)
    _owed_runs(shards, 2, 0, ended=1)
    with shards.connect(1) as conn:
        conn.execute(
            "CREATE OR REPLACE FUNCTION harvest.release_owed_child_ends(p_parent_shard integer,"
            " p_batch_size integer DEFAULT 500, p_include_running boolean DEFAULT false,"
            " p_operator_id text DEFAULT NULL, p_force boolean DEFAULT false) RETURNS integer"
            " LANGUAGE plpgsql AS $$"
            " BEGIN RAISE EXCEPTION 'refused on this shard for the test' USING ERRCODE = 'HR001'; END $$"
        )
    result, done = _cli(_cli_env(shards, **RETIRED_0), "shard", "release-owed-ends", "0")
    assert result.exit_code == 2, result.output  # InvalidArgument's code, the refusal's
    assert "shard 1: refused on this shard for the test" in result.stderr
    assert done is not None and done["released"] == 1, result.output
    assert [r["shard_id"] for r in done["shards"]] == [2]
    assert _still_owed(shards, 2, 0) == 0, "the shard after the refusing one was released"
    assert _still_owed(shards, 1, 0) == 2


# -- the parent's shard still alive: refused unless forced (docs/sharding.md, "Children on other
# shards"). A release lets retention purge the children whose ends it releases: a parent on a
# shard that is still there would then wait for ever for an end its pump can no longer pull.


def _release_audit(cluster, shard: int) -> list[tuple]:
    with cluster.connect(shard) as conn:
        return conn.execute(
            "SELECT operator_id, (details ->> 'released')::int, details -> 'force' FROM harvest.audit_log"
            " WHERE operation = 'retention.release_owed_child_ends' ORDER BY id"
        ).fetchall()


def _one_line(stderr: str, needle: str) -> str:
    lines = [line for line in stderr.splitlines() if needle in line]
    assert len(lines) == 1, stderr
    return lines[0]


def test_release_owed_ends_refuses_a_live_parent_shard_and_dry_run_warns(shards) -> None:
    """Shard 0 is readable and its database answers as shard 0: `release-owed-ends 0` accepted it
    and released every end owed to it, so its parents' pumps found their children purged. Now it
    exits 2 with one line saying why and what to do, and nothing is released or audited; a dry run
    says it as a warning and still shows the counts."""
    _owed_runs(shards, 1, 0, ended=2)
    _owed_runs(shards, 2, 0, ended=1)
    env = _cli_env(shards)

    result, done = _cli(env, "shard", "release-owed-ends", "0", "--operator-id", "ops")
    assert result.exit_code == 2, result.output
    assert done is None, "nothing is printed as released"
    line = _one_line(result.stderr, "shard 0 is reachable and alive")
    for words in ("lose its runs' child ends", "retire it first", "--force", "restored to before"):
        assert words in line, line
    assert (_still_owed(shards, 1, 0), _still_owed(shards, 2, 0)) == (2, 1), "nothing released"
    assert _release_audit(shards, 1) == [] and _release_audit(shards, 2) == []

    result, plan = _cli(env, "shard", "release-owed-ends", "0", "--dry-run")
    assert result.exit_code == 0, result.output
    assert plan["ended"] == 3 and plan["parent_check"]["alive"] is True
    assert _one_line(result.stderr, "shard 0 is reachable and alive").startswith("warning: ")


def test_release_owed_ends_force_releases_a_live_parent_shard_and_is_audited(shards) -> None:
    """--force (a shard restored to before the children's starts answers as itself) skips the
    probe: the ends are released, and each batch's audit row says it was forced."""
    _owed_runs(shards, 1, 0, ended=2)
    result, done = _cli(
        _cli_env(shards), "shard", "release-owed-ends", "0", "--force", "--operator-id", "ops-restore"
    )
    assert result.exit_code == 0, result.output
    assert done["released"] == 2 and done["force"] is True and done["parent_check"] is None
    assert "not checked" in result.stderr
    assert _still_owed(shards, 1, 0) == 0
    assert _release_audit(shards, 1) == [("ops-restore", 2, True), ("ops-restore", 0, True)]


def test_release_owed_ends_refuses_a_parent_shard_whose_server_turns_the_probe_away(shards) -> None:
    """Shard 0's server is up but takes no connection now (at its connection limit, starting
    up, in recovery: libpq reports these with no SQLSTATE): the probe took it for a shard gone
    for good and released every end owed to it, though its parents still wait. Now it is
    refused as a shard that could not be checked (exit 2, nothing released; --force goes on)."""
    from psycopg import conninfo

    _owed_runs(shards, 1, 0, ended=2)
    role = f"busy_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(shards.dsns[0], autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw' CONNECTION LIMIT 0")
    try:
        env = {
            **_cli_env(shards, readable=(1, 2)),
            "HARVEST_SHARDS__URLS__0": conninfo.make_conninfo(shards.dsns[0], user=role, password="pw"),
        }
        result, done = _cli(env, "shard", "release-owed-ends", "0", "--operator-id", "ops")
    finally:
        with psycopg.connect(shards.dsns[0], autocommit=True) as conn:
            conn.execute(f"DROP ROLE {role}")
    assert result.exit_code == 2, result.output
    assert done is None, "nothing is printed as released"
    line = _one_line(
        result.stderr, "shard 0 could not be checked: its server answered but took no connection"
    )
    assert "too many connections" in line and "--force" in line, line
    assert "pw" not in line and shards.names[0] not in line, line
    assert _still_owed(shards, 1, 0) == 2 and _release_audit(shards, 1) == [], "nothing released"


def test_release_owed_ends_releases_for_a_parent_shard_it_cannot_reach_and_says_why(shards) -> None:
    """A parent's shard that does not answer (its server down, no url for it) is released for as
    before, the line saying why it could not be reached (never its url or host); the audit row
    says it was not forced. A shard retired behind a forward is released for though its database
    still answers."""
    _owed_runs(shards, 1, 0, ended=2)
    shards.stop(0)
    try:
        result, done = _cli(_cli_env(shards), "shard", "release-owed-ends", "0", "--operator-id", "ops")
    finally:
        shards.start(0)
    assert result.exit_code == 0, result.output
    assert done["released"] == 2 and done["parent_check"]["reason"] == "unreachable"
    line = _one_line(result.stderr, "shard 0 could not be reached (unreachable: ")
    assert shards.dsns[0] not in line and shards.names[0] not in line, line
    assert "127.0.0.1" not in line and "localhost" not in line, line
    assert _release_audit(shards, 1) == [("ops", 2, False), ("ops", 0, False)]

    _owed_runs(shards, 1, 0, ended=1)
    result, done = _cli(_cli_env(shards, readable=(1, 2)), "shard", "release-owed-ends", "0")
    assert result.exit_code == 0 and done["released"] == 1, result.output
    assert "shard 0 could not be reached (no url for it in this process" in result.stderr

    _owed_runs(shards, 1, 0, ended=1)
    result, done = _cli(_cli_env(shards, **RETIRED_0), "shard", "release-owed-ends", "0")
    assert result.exit_code == 0 and done["released"] == 1, result.output
    assert "shard 0 is retired (retired: shards.forwards sends its ids to shard 1)" in result.stderr


def test_release_owed_ends_over_http_refuses_a_live_parent_shard_unless_forced(shards, monkeypatch) -> None:
    """The route does what the CLI over SQL does: 409 parent_shard_alive for a live shard, nothing
    released (the CLI over HTTP exits 2 with the server's line), a dry run's warning, and force:
    true released and audited."""
    from starlette.testclient import TestClient

    from harvest.cli import http as cli_http
    from harvest.config import load_config
    from harvest.web.app import management_app

    _owed_runs(shards, 1, 0, ended=2)
    env = {k: v for k, v in _cli_env(shards).items() if k.startswith("HARVEST_SHARDS")}
    app = management_app(config=load_config(env=env), profile="dev")
    over_http = {"HARVEST_DATABASE_URL": "", "HARVEST_URL": "http://testserver"}
    with TestClient(app, base_url="http://testserver") as client:
        monkeypatch.setattr(cli_http, "TRANSPORT", client._transport)
        path = "/admin/shards/0/release-owed-ends"
        refused = client.post(path, json={"operator_id": "ops"})
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["code"] == "parent_shard_alive"
        assert "shard 0 is reachable and alive" in refused.json()["error"]["message"]

        result, done = _cli(over_http, "shard", "release-owed-ends", "0")
        assert result.exit_code == 2 and done is None, result.output
        _one_line(result.stderr, "shard 0 is reachable and alive")
        assert _still_owed(shards, 1, 0) == 2 and _release_audit(shards, 1) == []

        result, plan = _cli(over_http, "shard", "release-owed-ends", "0", "--dry-run")
        assert result.exit_code == 0 and plan["ended"] == 2, result.output
        assert _one_line(result.stderr, "shard 0 is reachable and alive").startswith("warning: ")

        forced = client.post(path, json={"force": True, "operator_id": "ops-restore"})
        assert forced.status_code == 200, forced.text
        assert forced.json()["released"] == 2 and forced.json()["force"] is True
        route = "/admin/shards/{shard_id}/release-owed-ends"
        openapi = client.get("/openapi.json").json()["paths"][route]["post"]
        assert "force" in openapi["requestBody"]["content"]["application/json"]["schema"]["properties"]
        assert "409" in openapi["responses"]
    assert _still_owed(shards, 1, 0) == 0
    assert _release_audit(shards, 1) == [("ops-restore", 2, True), ("ops-restore", 0, True)]
