"""A call on a shard through a face's role view (``AsyncShardPools.with_role``: the management
API's request, the CLI over HTTP) is one round trip, the role's settings and the call in one
pipeline with one Sync, as on one database (harvest.db.pools.RoledPool.one_call), and keeps what
the transaction begun for the role did: a serialization failure in it is run again, and a
connection lost in it is ShardUnavailable naming the shard (harvest.db.pools.database_unreachable).

Before, each call was BEGIN, the settings, the call and COMMIT: four round trips."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from tests.integration.round_trip_helpers import LibpqTrace

from harvest.core.errors import ShardUnavailable
from harvest.shard.pools import AsyncShardPools
from harvest.shard.router import ShardRouter

# On shard 1: a start's insert raises the server's 40001 the first time (a conflict), and a start
# of a workflow id "lost-..." ends its own connection (as a server restart would, mid-call).
TRIGGERS = """
CREATE SEQUENCE public.conflict_calls;
CREATE FUNCTION public.conflict_once() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    IF NEW.workflow_id LIKE 'lost-%' THEN
        PERFORM pg_terminate_backend(pg_backend_pid());
        PERFORM pg_sleep(5);
    ELSIF nextval('public.conflict_calls') = 1 THEN
        RAISE EXCEPTION 'forced' USING ERRCODE = 'serialization_failure';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER conflict_once BEFORE INSERT ON harvest.executions
FOR EACH ROW EXECUTE FUNCTION public.conflict_once();
"""


def test_a_roled_shard_call_is_one_round_trip_run_again_on_a_conflict_and_unavailable_when_lost(
    two_shards, monkeypatch, tmp_path
) -> None:
    with psycopg.connect(two_shards[1], autocommit=True) as admin:
        admin.execute(TRIGGERS)
    trace = LibpqTrace(monkeypatch, tmp_path)

    async def go() -> dict[str, object]:
        pools = AsyncShardPools(
            ShardRouter(readable=[0, 1], writable=[0, 1], default=0), two_shards, max_size=2
        )
        try:
            sql = await pools.with_role("harvest_operator", "cli", actor="ann").sql(1)  # (identity checked)
            trace.sent()
            seen: dict[str, object] = {}
            started = await sql.signal_with_start("rotor", "conflict-1", "tick", None, [0], "default", {})
            seen["conflict"] = (started["started_fresh"], trace.round_trips())
            await sql.cancel_workflow(started["execution_id"], "done")
            seen["cancel"] = trace.round_trips()
            with pytest.raises(ShardUnavailable, match="shard 1") as lost:
                await sql.signal_with_start("rotor", "lost-1", "tick", None, [0], "default", {})
            seen["lost"] = type(lost.value).__name__
            seen["after"] = await sql.get_shard_id()  # the next call: a new connection
            return seen
        finally:
            await pools.close()

    # A conflict: two attempts of one round trip each (before: BEGIN, settings, call, COMMIT each).
    assert asyncio.run(go()) == {"conflict": (True, 2), "cancel": 1, "lost": "ShardUnavailable", "after": 1}
    with psycopg.connect(two_shards[1], autocommit=True) as admin:
        assert admin.execute("SELECT last_value FROM public.conflict_calls").fetchone() == (2,)
        audited = admin.execute(
            "SELECT operation, actor, acting_role, source FROM harvest.audit_log"
            " WHERE actor = 'ann' ORDER BY id"
        ).fetchall()
        assert audited == [
            (operation, "ann", "harvest_operator", "cli")
            for operation in ("workflow.start", "workflow.signal", "workflow.cancel")
        ]
        lost = admin.execute(
            "SELECT count(*) FROM harvest.executions WHERE workflow_id = 'lost-1'"
        ).fetchone()
        assert lost == (0,)  # the lost call's transaction rolled back with its connection


def test_a_lenders_connection_waits_the_callers_timeout_not_the_pools(two_shards) -> None:
    """``lender(shard).connection(timeout)`` (a pool's shape for AsyncSqlApi, and under a role
    view's RoledPool) bounds its wait by the caller's ``timeout``: with the shard's one
    connection held, it is ShardUnavailable after it, not after the pools' acquire_timeout (an
    hour here; before, the wait ignored ``timeout``). The guard below only stops a hang."""

    async def go() -> list[str]:
        pools = AsyncShardPools(
            ShardRouter(readable=[0, 1], writable=[0, 1], default=0),
            two_shards,
            max_size=1,
            acquire_timeout=3600,
        )
        seen: list[str] = []
        try:
            await pools.sql(1)  # (the pool open, its identity checked)
            async with pools.connection(1):  # the shard's only connection, held
                for lender in (pools.lender(1), pools.with_role("harvest_reader", "cli").lender(1)):
                    with pytest.raises(ShardUnavailable, match="shard 1") as waited:
                        async with lender.connection(timeout=0.05):
                            pass
                    seen.append(type(waited.value).__name__)
            async with pools.lender(1).connection(timeout=0.05) as conn:  # free again: lent
                seen.append(str((await (await conn.execute("SELECT 1")).fetchone())[0]))
        finally:
            await pools.close()
        return seen

    async def guarded() -> list[str]:
        return await asyncio.wait_for(go(), 120)  # (not a timing: the old code hangs an hour)

    assert asyncio.run(guarded()) == ["ShardUnavailable", "ShardUnavailable", "1"]
