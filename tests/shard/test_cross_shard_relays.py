"""External signal and cancel across three real PostgreSQL servers, carried by the relay pump
(harvest/shard/relay_pump.py): by execution id and by business key, a business key found on the
one shard that holds it after every shard was asked, a target shard stopped mid-test (the relay
waits, then delivers once), and the sender's history replayed."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from cross_shard_helpers import (
    clients,
    enable_cross_shard_relays,
    remote_relays,
    router,
    shard_workers,
    wait_for,
)
from psycopg.types.json import Jsonb

from harvest import App, Client, ExternalWorkflow, ExternalWorkflowError, workflow
from harvest.core.errors import WorkflowCancelled
from harvest.shard import AsyncShardPools, ShardRouter
from harvest.shard.relay_pump import RelayPump, merge_outcomes
from harvest.telemetry.metrics import Metrics
from harvest.testing import WorkflowReplayer

pytestmark = pytest.mark.shard


@workflow
async def collector(ctx, expected: int) -> list:
    return [await ctx.wait_for_signal("item") for _ in range(expected)]


@workflow
async def stubborn(ctx) -> None:
    """Stays running after a cancel request until signal ``release``, then ends CANCELLED."""
    try:
        await ctx.wait_for_signal("never")
    except asyncio.CancelledError:
        await ctx.wait_for_signal("release")
        raise


@workflow
async def sender(ctx, target: dict, items: list) -> str:
    where = ExternalWorkflow(**target)
    for item in items:
        await ctx.signal_external_workflow(where, "item", item)
    return "sent"


@workflow
async def canceller(ctx, target: dict) -> list:
    first = await ctx.cancel_external_workflow(ExternalWorkflow(**target), "not needed")
    second = await ctx.cancel_external_workflow(ExternalWorkflow(**target))
    return [first, second]


@workflow
async def prober(ctx, target: dict) -> list:
    try:
        await ctx.signal_external_workflow(ExternalWorkflow(**target), "item", 1)
    except ExternalWorkflowError as err:
        return [type(err).__name__, err.reason, err.execution_id]
    return ["delivered"]


app = App(workflows=[collector, stubborn, sender, canceller, prober])


def events(client, execution_id: str, event_type: str | None = None) -> list[dict]:
    found = client.get_handle(execution_id).history()
    return [e for e in found if event_type is None or e["event_type"] == event_type]


def test_signal_by_id_and_by_business_key_across_shards(shards) -> None:
    enable_cross_shard_relays(shards)
    with shard_workers(app, shards), clients(shards) as c:
        by_id = c[1].start_workflow(collector, 2)
        key = f"collect-{uuid.uuid4().hex[:8]}"
        by_key = c[2].start_workflow(collector, 1, workflow_id=key)
        source = c[0].start_workflow(sender, {"execution_id": by_id.execution_id}, ["a", {"b": 2}])
        keyed = c[0].start_workflow(sender, {"workflow_id": key, "workflow_name": "collector"}, ["k"])
        assert source.result(timeout=60) == "sent" and keyed.result(timeout=60) == "sent"
        assert by_id.result(timeout=60) == ["a", {"b": 2}], "delivered once each, in the order sent"
        assert by_key.result(timeout=60) == ["k"]
        received = events(c[1], by_id.execution_id, "SignalReceived")
        assert [e["event_data"]["sender_execution_id"] for e in received] == [source.execution_id] * 2
        assert all(e["event_data"]["signal_id"].startswith("0:") for e in received)
        delivered = events(c[0], keyed.execution_id, "ExternalSignalDelivered")
        assert [e["event_data"]["execution_id"] for e in delivered] == [by_key.execution_id]
        for run in (source, keyed):
            WorkflowReplayer(app).replay_or_raise(events(c[0], run.execution_id))
    assert remote_relays(shards, 0) == []


def test_cancel_by_id_and_by_business_key_across_shards(shards) -> None:
    enable_cross_shard_relays(shards)
    with shard_workers(app, shards), clients(shards) as c:
        target = c[2].start_workflow(stubborn)
        key = f"stub-{uuid.uuid4().hex[:8]}"
        keyed_target = c[1].start_workflow(stubborn, workflow_id=key)
        by_id = c[0].start_workflow(canceller, {"execution_id": target.execution_id})
        by_key = c[0].start_workflow(canceller, {"workflow_id": key})
        assert by_id.result(timeout=60) == [True, False], "the second request finds one already made"
        assert by_key.result(timeout=60) == [True, False]
        for client, run in ((c[2], target), (c[1], keyed_target)):
            run.signal("release")
            with pytest.raises(WorkflowCancelled):
                run.result(timeout=60)
            requested = events(client, run.execution_id, "WorkflowCancelRequested")
            assert [e["event_data"] for e in requested] == [{"reason": "not needed"}]
        WorkflowReplayer(app).replay_or_raise(events(c[0], by_key.execution_id))


def test_a_business_key_no_shard_holds_is_not_found_only_after_every_shard_answered(shards) -> None:
    enable_cross_shard_relays(shards)
    with shard_workers(app, shards), clients(shards) as c:
        missing = c[0].start_workflow(prober, {"workflow_id": "nobody-has-this"})
        assert missing.result(timeout=60) == ["ExternalWorkflowNotFound", "not_found", None]
        ended = c[2].start_workflow(collector, 0, workflow_id="ended-key")
        assert ended.result(timeout=60) == []
        late = c[0].start_workflow(prober, {"workflow_id": "ended-key"})
        assert late.result(timeout=60) == ["ExternalWorkflowNotRunning", "not_running", ended.execution_id]


def _broken_chain(cluster, shard: int, key: str) -> tuple[str, str, str]:
    """A run of ``collector`` on ``shard`` continued as new twice, by SQL, and its current run
    erased by hand: (its first run, the chain's last run, the erased run)."""
    with cluster.connect(shard) as conn:
        runs = [
            str(
                conn.execute(
                    "SELECT execution_id FROM harvest.start_workflow('collector', '[0]', %s)", (key,)
                ).fetchone()[0]
            )
        ]
        for _ in range(2):
            task_id, token, run = conn.execute(
                "SELECT task_id, fencing_token, execution_id"
                " FROM harvest.claim_tasks('w', ARRAY['default'], 1)"
            ).fetchone()
            through = conn.execute(
                "SELECT last_event_id FROM harvest.executions WHERE id = %s", (run,)
            ).fetchone()[0]
            conn.execute(
                "SELECT harvest.complete_workflow_task(%s, %s, %s, %s)",
                (task_id, token, through, Jsonb([{"type": "continue_as_new", "input": [0]}])),
            )
            runs.append(
                str(
                    conn.execute(
                        "SELECT output ->> 'continued_as_new' FROM harvest.executions WHERE id = %s", (run,)
                    ).fetchone()[0]
                )
            )
        conn.execute("DELETE FROM harvest.executions WHERE id = %s", (runs[2],))
    return runs[0], runs[1], runs[2]


def test_a_target_whose_chain_lost_its_current_run_is_not_found_naming_its_last_run(shards) -> None:
    """A signal by execution id to a run on another shard whose continue-as-new chain is broken
    (its last run continued as new, the successor erased by hand or purged): the pump settles it
    in one delivery, the sender gets ExternalWorkflowNotFound naming the chain's last run and why
    (it was ExternalWorkflowNotRunning naming the erased run), and no relay row is left."""
    enable_cross_shard_relays(shards)
    first, last, erased = _broken_chain(shards, 1, f"broken-{uuid.uuid4().hex[:8]}")
    with shard_workers(app, shards, (0,)), clients(shards) as c:
        probe = c[0].start_workflow(prober, {"execution_id": first})
        assert probe.result(timeout=60) == ["ExternalWorkflowNotFound", "not_found", last]
        [failed] = events(c[0], probe.execution_id, "ExternalSignalFailed")
        message = failed["event_data"]["message"]
        assert f"chain ends at run {last}, which continued as new as run {erased}" in message, message
        assert "(erased or purged)" in message, message
        WorkflowReplayer(app).replay_or_raise(events(c[0], probe.execution_id))
    assert remote_relays(shards, 0) == []


def test_a_stopped_target_shard_stalls_the_relay_which_delivers_once_after_it_returns(shards) -> None:
    enable_cross_shard_relays(shards)
    with shard_workers(app, shards, (0, 1)), clients(shards) as c:
        with shard_workers(app, shards, (2,)):
            target = c[2].start_workflow(collector, 1)
            key = f"key-{uuid.uuid4().hex[:8]}"
            keyed_target = c[1].start_workflow(collector, 1, workflow_id=key)
        shards.stop(2)
        try:
            by_id = c[0].start_workflow(sender, {"execution_id": target.execution_id}, ["held"])
            by_key = c[0].start_workflow(sender, {"workflow_id": key}, ["held by key"])
            # Both wait: the id's shard is down, and the key's live run is on shard 1 but a
            # terminal answer is not needed to deliver there: the keyed one may go through.
            stalled = wait_for(
                lambda: [r for r in remote_relays(shards, 0) if r[4] and "shard 2" in r[4]],
                what="a relay released with shard 2's error",
            )
            assert stalled[0][2] == 2 and stalled[0][3] >= 1
            assert by_key.result(timeout=60) == "sent", "a live run found on shard 1 wins over shard 2 down"
            assert by_id.describe()["status"] == "RUNNING"
        finally:
            shards.start(2)
        with shard_workers(app, shards, (2,)):
            assert by_id.result(timeout=60) == "sent"
            assert target.result(timeout=60) == ["held"]
            assert keyed_target.result(timeout=60) == ["held by key"]
    with clients(shards) as c:  # shard 2's restart cut the old clients' connections
        assert len(events(c[2], target.execution_id, "SignalReceived")) == 1, "delivered once"
        assert len(events(c[0], by_id.execution_id, "ExternalSignalDelivered")) == 1
        WorkflowReplayer(app).replay_or_raise(events(c[0], by_id.execution_id))
    assert remote_relays(shards, 0) == []


def test_a_business_key_with_a_shard_down_and_no_live_run_waits_instead_of_not_found(shards) -> None:
    """The pump alone (no worker): a miss on shards 0 and 1 with shard 2 down is indeterminate."""
    enable_cross_shard_relays(shards)
    with shard_workers(app, shards, (2,)), clients(shards) as c:
        target = c[2].start_workflow(collector, 1, workflow_id="only-on-2")
    with shard_workers(app, shards, (0,)), clients(shards) as c:
        shards.stop(2)
        try:
            source = c[0].start_workflow(sender, {"workflow_id": "only-on-2"}, ["x"])
            wait_for(lambda: [r for r in remote_relays(shards, 0) if r[4]], what="a released relay")
            assert source.describe()["status"] == "RUNNING", "never not_found while shard 2 is unread"
        finally:
            shards.start(2)
    with shard_workers(app, shards), clients(shards) as c:  # the earlier clients are closed
        assert c[0].get_handle(source.execution_id).result(timeout=60) == "sent"
        assert c[2].get_handle(target.execution_id).result(timeout=60) == ["x"]


def test_delivery_is_idempotent_on_source_shard_and_relay_id(shards) -> None:
    """A pump that delivered but lost its answer delivers again: the target applies it once, and
    a second report changes nothing. A released row waits out its backoff."""
    enable_cross_shard_relays(shards)

    async def pump_by_hand() -> tuple[list, list, int]:
        pools = AsyncShardPools(router(), shards.dsns, max_size=2, acquire_timeout=2.0)
        try:
            async with pools.api(0) as sql:
                (relay,) = await sql.claim_remote_relays(10, 5.0)
            answers = []
            for _ in range(2):
                async with pools.api(2) as sql:
                    answers.append(
                        await sql.deliver_external_relay(
                            relay["source_shard"],
                            relay["relay_id"],
                            relay["kind"],
                            relay["target_execution_id"],
                            relay["target_workflow_name"],
                            relay["target_workflow_id"],
                            relay["payload"],
                            relay["source_execution_id"],
                        )
                    )
            async with pools.api(0) as sql:
                assert await sql.release_relay(relay["relay_id"], "the answer was lost")
            again = (await RelayPump(pools, sources=(0,), children=False).tick()).claimed
            settled = []
            async with pools.api(0) as sql:
                for _ in range(2):
                    target_id = answers[0]["execution_id"]
                    done = await sql.complete_relay(relay["relay_id"], "delivered", target_id)
                    settled.append(done)
            return answers, settled, again
        finally:
            await pools.close()

    with shard_workers(app, shards, (0, 2), pump=False), clients(shards) as c:
        target = c[2].start_workflow(collector, 1)
        source = c[0].start_workflow(sender, {"execution_id": target.execution_id}, ["once"])
        wait_for(lambda: remote_relays(shards, 0), what="the sender's remote relay")
        answers, settled, claimed_again = asyncio.run(pump_by_hand())
        assert [a["outcome"] for a in answers] == ["delivered", "delivered"]
        assert answers[0]["execution_id"] == answers[1]["execution_id"] == uuid.UUID(target.execution_id)
        assert claimed_again == 0, "a released relay waits out min(attempts, 6) x 5 s"
        assert settled == [True, False], "reporting twice is harmless"
        assert source.result(timeout=60) == "sent"
        assert target.result(timeout=60) == ["once"]
        assert len(events(c[2], target.execution_id, "SignalReceived")) == 1


def test_merge_outcomes() -> None:
    a = {"outcome": "not_found", "execution_id": None, "message": "m0"}
    live = {"outcome": "delivered", "execution_id": "x", "message": None}
    ended = {"outcome": "not_running", "execution_id": "y", "message": "ended"}
    assert merge_outcomes({0: a, 1: live}, (0, 1, 2)) == live, "a live run wins over an unread shard"
    assert merge_outcomes({0: a, 1: ended}, (0, 1, 2)) is None, "a terminal answer needs every shard"
    assert merge_outcomes({0: a, 1: ended, 2: a}, (0, 1, 2)) == ended
    assert merge_outcomes({0: a, 1: a, 2: a}, (0, 1, 2))["outcome"] == "not_found"


def test_a_target_shards_database_error_is_kept_as_its_first_line_not_its_detail(shards) -> None:
    """A relay the target shard failed with a database error of no Harvest code was released
    with ``TypeName: str(exc)``: psycopg's whole text, its DETAIL included (the values a
    constraint or a JSON parse quotes: a payload's), into the source shard's relays.last_error
    (every reader's to SELECT) and the pump's log line. It is now the server's first line and
    its SQLSTATE (harvest.db.connection.error_line), redacted, as every other database error
    a log line carries."""
    enable_cross_shard_relays(shards)
    with shards.connect(1) as conn:
        for args, returns in conn.execute(
            "SELECT pg_get_function_arguments(p.oid), pg_get_function_result(p.oid) FROM pg_proc p"
            " WHERE p.proname = 'deliver_external_relay' AND p.pronamespace = 'harvest'::regnamespace"
        ).fetchall():
            conn.execute(
                f"CREATE OR REPLACE FUNCTION harvest.deliver_external_relay({args}) RETURNS {returns}"
                " LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'delivery failed for the test'"
                " USING ERRCODE = '22023', DETAIL = 'card 4111-1111-1111-1111'; END $$"
            )
    with shard_workers(app, shards, (0,)), clients(shards) as c:
        target = c[1].start_workflow(collector, 1)
        c[0].start_workflow(sender, {"execution_id": target.execution_id}, ["x"])
        [released] = wait_for(
            lambda: [r for r in remote_relays(shards, 0) if r[4]], what="the relay released with its error"
        )
    assert "4111" not in released[4], released[4]
    assert "delivery failed for the test" in released[4] and "22023" in released[4], released[4]


def test_a_business_key_fan_out_missing_a_shard_is_counted_and_its_age_published(shards) -> None:
    """The guide's by-id metrics are about the business-key fan-out ("by-id": by workflow_id): a
    shard the fan-out could not inspect is counted per shard and why whether the row then waits
    (no live run found) or a live run found elsewhere took the delivery (the found over an
    incomplete fan-out counter), and a row left waiting shows in the age gauge."""
    enable_cross_shard_relays(shards)
    with clients(shards) as c:
        live = c[1].start_workflow(collector, 1, workflow_id="live-key")
        with shard_workers(app, shards, (0,), pump=False):
            c[0].start_workflow(sender, {"workflow_id": "live-key"}, ["x"])
            c[0].start_workflow(sender, {"workflow_id": "nobody-key"}, ["y"])
            wait_for(lambda: len(remote_relays(shards, 0)) == 2, what="two remote relays")

    async def tick():
        # Shard 3 is readable in the router, and this process has no pool for it.
        wide = ShardRouter((0, 1, 2, 3), (0, 1, 2), 0)
        async with AsyncShardPools(wide, shards.dsns, max_size=2, acquire_timeout=1.0) as pools:
            return await RelayPump(pools, sources=[0], children=False).tick()

    report = asyncio.run(tick())
    assert report.by_id_indeterminate == {(3, "no_pool"): 1}, report
    assert report.found_over_incomplete_fanout == 1, report
    assert (report.settled, report.released) == (1, 1)
    with Client(shards.dsns[1]) as on_one:  # the live run got it
        assert events(on_one, live.execution_id, "SignalReceived")
    with shards.connect(0) as conn:
        conn.execute("UPDATE harvest.relays SET created_at = created_at - interval '90 seconds'")
        relays = conn.execute("SELECT harvest.get_metric_samples() -> 'relays'").fetchone()[0]
    assert relays["by_id_indeterminate_signal_oldest_secs"] >= 90, relays

    metrics = Metrics()
    metrics.by_id_found_over_incomplete_fanout(report.found_over_incomplete_fanout)
    text = metrics.render().decode()
    assert "harvest_external_signal_by_id_found_over_incomplete_fanout_total 1.0" in text
