"""Payload codecs, offload, erasure and legal holds with a real worker on a real Postgres
(docs/payloads.md)."""

from __future__ import annotations

import hashlib
import os
import time

import psycopg
import pytest
from psycopg.types.json import Jsonb

from harvest import App, Client, activity, query, update, workflow
from harvest.core.codecs import AesGcmCodec, Payloads, ZlibCodec
from harvest.core.errors import (
    ExecutionNotTerminal,
    LegalHoldActive,
    NotFound,
    PayloadKeyMissing,
    WorkflowCancelled,
)
from harvest.db.sqlapi import SqlApi

# Fixed test keys: a `harvest replay` subprocess must hold the same bytes.
K1, K2 = hashlib.sha256(b"harvest-test-k1").digest(), hashlib.sha256(b"harvest-test-k2").digest()
# Every payload of the run carries this text; the stored rows must not.
SECRET = "PLAINTEXT-SSN-078-05-1120"


@activity
async def seal(ctx, record: dict) -> dict:
    return {"sealed": record["ssn"], "by": "seal"}


@activity
async def bulky(ctx, size: int) -> str:
    return SECRET + os.urandom(size).hex()  # random: no codec compresses it under the threshold


@workflow
async def vault(ctx, record: dict) -> dict:
    ctx.state["record"] = record
    sealed = await ctx.execute_activity(seal, record)
    noise = ctx.side_effect(lambda: {"noise": SECRET})
    note = await ctx.wait_for_signal("note")
    return {"sealed": sealed, "note": note, "noise": noise, "extra": ctx.state.get("extra")}


@query(workflow="vault")
def peek(ctx, prefix: str) -> str:
    return prefix + ctx.state["record"]["ssn"]


@update(workflow="vault")
async def add(ctx, extra: str) -> str:
    ctx.state["extra"] = extra
    return "added " + extra


@workflow
async def big_result(ctx, size: int) -> dict:
    blob = await ctx.execute_activity(bulky, size)
    await ctx.sleep(0.05)  # one more task: the next replays a history holding the reference
    return {"blob": blob, "length": len(blob)}


def _stored_text(db: str) -> str:
    """Every payload-bearing row of the database, as text."""
    with psycopg.connect(db, autocommit=True) as conn:
        rows = conn.execute(
            """
            SELECT coalesce(string_agg(t, ' '), '') FROM (
                SELECT input::text || output::text || coalesce(failure::text, '') AS t FROM harvest.executions
                UNION ALL SELECT event_data::text FROM harvest.events
                UNION ALL SELECT coalesce(input::text, '') || coalesce(heartbeat_details::text, '')
                    || coalesce(last_failure::text, '') FROM harvest.tasks
                UNION ALL SELECT arg::text || coalesce(answer::text, '') || coalesce(error::text, '')
                    FROM harvest.query_requests
                UNION ALL SELECT data::text FROM harvest.payloads
            ) AS s
            """
        ).fetchone()
    return rows[0]


def _codecs(**keys: bytes) -> list:
    return [ZlibCodec(), AesGcmCodec(keys)]


def test_a_worker_with_codecs_runs_a_workflow_and_the_database_holds_no_plaintext(db, start_worker):
    start_worker(App([vault], [seal], queries=[peek], updates=[add]), codecs=_codecs(k1=K1))
    with Client(db, codecs=_codecs(k1=K1)) as client:
        handle = client.start_workflow(vault, {"ssn": SECRET}, workflow_id="v-1")
        assert handle.update("add", SECRET + "-extra", timeout=20) == "added " + SECRET + "-extra"
        assert handle.query("peek", "ssn=", timeout=20) == "ssn=" + SECRET
        handle.signal("note", {"text": SECRET})
        result = handle.result(timeout=30)
    assert result == {
        "sealed": {"sealed": SECRET, "by": "seal"},
        "note": {"text": SECRET},
        "noise": {"noise": SECRET},
        "extra": SECRET + "-extra",
    }
    stored = _stored_text(db)
    assert "_harvest_codec" in stored and "aesgcm:k1" in stored
    assert SECRET not in stored

    # Rotation: a client holding k1 and k2 writes with k2 and still reads the k1 result; one
    # holding k2 alone is told which key it lacks.
    with Client(db, codecs=_codecs(k1=K1, k2=K2)) as rotated:
        assert rotated.get_handle(handle.execution_id).result(timeout=5) == result
    with Client(db, codecs=_codecs(k2=K2)) as without_k1, pytest.raises(PayloadKeyMissing, match="'k1'"):
        without_k1.get_handle(handle.execution_id).result(timeout=5)
    with Client(db) as plain, pytest.raises(PayloadKeyMissing, match="'k1'"):
        plain.get_handle(handle.execution_id).result(timeout=5)


def test_an_offloaded_payload_round_trips_through_a_workflow_and_its_replay(db, start_worker):
    policy = Payloads([ZlibCodec()], offload_bytes=1024)
    # cache_size=0: every workflow task replays the whole history, references included.
    start_worker(App([big_result], [bulky], codecs=policy), cache_size=0)
    with Client(db) as client:
        handle = client.start_workflow(big_result, 4000, workflow_id="big-1")
        result = handle.result(timeout=30)
    assert result["length"] == len(SECRET) + 8000 and result["blob"].startswith(SECRET)
    with psycopg.connect(db, autocommit=True) as conn:
        refs = conn.execute(
            "SELECT count(*) FROM harvest.events WHERE event_data::text LIKE '%_harvest_ref%'"
        ).fetchone()[0]
        offloaded = conn.execute("SELECT count(*), min(bytes) FROM harvest.payloads").fetchone()
        largest = conn.execute("SELECT max(octet_length(event_data::text)) FROM harvest.events").fetchone()[0]
    assert refs >= 2  # the activity's result and the workflow's result
    assert offloaded[0] >= 2 and offloaded[1] > 1024
    assert largest < 1024  # the history stays small


def _erasable(db: str, start_worker) -> str:
    start_worker(
        App(
            [vault, big_result],
            [seal, bulky],
            queries=[peek],
            updates=[add],
            codecs=Payloads(offload_bytes=1024),
        ),
        cache_size=0,
    )
    with Client(db) as client:
        handle = client.start_workflow(vault, {"ssn": SECRET}, workflow_id="erase-1")
        handle.signal("note", {"text": SECRET})
        handle.result(timeout=30)
        big = client.start_workflow(big_result, 4000, workflow_id="erase-big")
        big.result(timeout=30)
    return handle.execution_id, big.execution_id


def test_erasure_leaves_no_payload_and_a_legal_hold_blocks_it(db, start_worker):
    small, big = _erasable(db, start_worker)
    assert SECRET in _stored_text(db)
    with psycopg.connect(db, autocommit=True) as conn:
        sql = SqlApi(conn)
        with pytest.raises(NotFound):
            sql.erase_payloads("00000000-0000-0000-0000-000000000000")
        sql.set_legal_hold(small, "case 42", "legal")
        with pytest.raises(LegalHoldActive):
            sql.erase_payloads(small, "ops")
        assert SECRET in _stored_text(db)  # refused: nothing changed
        assert sql.release_legal_hold(small, "legal")["released"] is True
        summary = sql.erase_payloads(small, "ops")
        assert summary["events"] > 0 and summary["residences"]["migrated_from_shards"] == []
        summary = sql.erase_payloads(big, "ops")
        assert summary["offloaded"] >= 2
        history = sql.get_history(small)
        execution = sql.get_execution(small)
        ops = [r["operation"] for r in sql.list_audit_log(20)]
    assert SECRET not in _stored_text(db)
    assert SECRET not in str(history) and SECRET not in str(execution)
    assert execution["output"] == {"_harvest_erased": True}
    assert {"workflow.erase_payloads", "workflow.legal_hold.set", "workflow.legal_hold.release"} <= set(ops)
    with Client(db) as client:  # the result reads as erased, with no payload
        assert client.get_handle(big).result(timeout=5) == {"_harvest_erased": True}


def test_an_erased_run_answers_a_query_and_replays_as_erased_never_on_the_markers(db, start_worker):
    """An erased run's state cannot be rebuilt: its inputs and results are markers. A query made
    the worker replay the workflow code on them (the handler failed with KeyError: 'ssn'), and
    the replayer ran the code on them too; both now say the payloads were erased."""
    from harvest.core.errors import QueryFailed
    from harvest.testing import WorkflowReplayer

    small, _ = _erasable(db, start_worker)
    with psycopg.connect(db, autocommit=True) as conn:
        sql = SqlApi(conn)
        sql.erase_payloads(small, "ops")
        events = sql.get_history(small)
    with Client(db) as client, pytest.raises(QueryFailed, match="were erased"):
        client.get_handle(small).query("peek", "x", timeout=10)
    result = WorkflowReplayer(App([vault], [seal], queries=[peek], updates=[add])).replay(events)
    assert not result.ok and "were erased" in result.error, result


def test_retention_keeps_a_held_run_until_its_hold_is_released(db, client):
    """A legal hold preserves its run: past the retention window the janitor keeps it (its
    history and payloads), and takes it once the hold is released."""
    handle = client.start_workflow("nobody_runs_this", {"ssn": SECRET}, workflow_id="held-1")
    handle.terminate("done")
    with psycopg.connect(db, autocommit=True) as conn:
        sql = SqlApi(conn)
        sql.set_legal_hold(handle.execution_id, "case 42", "legal")
        conn.execute(
            "UPDATE harvest.executions SET completed_at = completed_at - interval '40 days' WHERE id = %s",
            (handle.execution_id,),
        )
        assert sql.run_retention("30 days")["deleted"] == 0
        assert sql.get_execution(handle.execution_id)["input"] == [{"ssn": SECRET}]
        sql.release_legal_hold(handle.execution_id, "legal")
        assert sql.run_retention("30 days")["deleted"] == 1
        with pytest.raises(NotFound):
            sql.get_execution(handle.execution_id)


def test_an_open_run_cannot_be_erased(db, client):
    handle = client.start_workflow("nobody_runs_this", workflow_id="open-1")
    with psycopg.connect(db, autocommit=True) as conn, pytest.raises(ExecutionNotTerminal):
        SqlApi(conn).erase_payloads(handle.execution_id)


def test_a_paused_run_is_live_and_keeps_its_payloads(db, client):
    handle = client.start_workflow("nobody_runs_this", {"ssn": SECRET}, workflow_id="paused-1")
    assert handle.pause("provider down", operator_id="ops") is True
    with psycopg.connect(db, autocommit=True) as conn:
        sql = SqlApi(conn)
        with pytest.raises(ExecutionNotTerminal):
            sql.erase_payloads(handle.execution_id, "ops")
        assert sql.get_execution(handle.execution_id)["input"] == [{"ssn": SECRET}]  # what it resumes with


def test_the_cli_shows_encrypted_payloads_exports_them_for_the_replayer_and_erases_under_holds(
    db, start_worker, tmp_path
):
    import json

    from operator_helpers import harvest

    from harvest.testing import WorkflowReplayer

    codecs = Payloads(_codecs(k1=K1), offload_bytes=1024)
    app = App([vault, big_result], [seal, bulky], queries=[peek], updates=[add], codecs=codecs)
    start_worker(app)
    with Client(db, codecs=_codecs(k1=K1)) as client:
        handle = client.start_workflow(vault, {"ssn": SECRET}, workflow_id="cli-1")
        handle.signal("note", {"text": SECRET})
        handle.result(timeout=30)
        big = client.start_workflow(big_result, 4000, workflow_id="cli-big")
        big.result(timeout=30)
    eid = handle.execution_id

    shown = harvest(db, "workflow", "result", eid)
    assert shown.returncode == 0 and json.loads(shown.stdout) == "<encrypted (key k1)>", shown.stderr
    assert "'k1'" in shown.stderr and SECRET not in shown.stdout
    # The CLI holds no keys and takes none: its note says where the value can be read, not to
    # add the key to an AesGcmCodec it does not have.
    assert "Client(codecs=...)" in shown.stderr and "add key" not in shown.stderr, shown.stderr
    shown = harvest(db, "workflow", "history", eid, "--full", "--output", "json")
    assert shown.returncode == 0, shown.stderr
    assert "<encrypted (key k1)>" in shown.stdout and SECRET not in shown.stdout

    # A full export resolves offloaded payloads and keeps envelopes; the replayer, given the
    # App (and its codecs), replays it.
    out = tmp_path / "big.json"
    r = harvest(
        db, "history", "export", big.execution_id, "--payload-policy", "full", "--output-file", str(out)
    )
    assert r.returncode == 0, r.stderr
    exported = out.read_text()
    assert "_harvest_ref" not in exported and "aesgcm:k1" in exported and SECRET not in exported
    assert WorkflowReplayer(app).replay(str(out)).ok
    assert not WorkflowReplayer(App([big_result], [bulky])).replay(str(out)).ok  # no key: refused

    r = harvest(db, "workflow", "legal-hold", "set", eid, "--reason", "case 7", "--operator-id", "legal")
    assert r.returncode == 0 and "legal hold set" in r.stdout, r.stderr
    r = harvest(db, "workflow", "erase-payloads", eid)
    assert r.returncode == 2 and "legal hold" in r.stderr and "Traceback" not in r.stderr
    r = harvest(db, "workflow", "legal-hold", "release", eid, "--operator-id", "legal")
    assert r.returncode == 0 and "released" in r.stdout, r.stderr
    for target in (eid, big.execution_id):
        r = harvest(db, "workflow", "erase-payloads", target, "--operator-id", "ops", "--output", "json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["prior_residences"] == []
    r = harvest(
        db, "history", "export", big.execution_id, "--payload-policy", "full", "--output-file", str(out)
    )
    assert r.returncode == 0 and "aesgcm" not in out.read_text() and "_harvest_erased" in out.read_text()
    r = harvest(db, "workflow", "get", eid, "--output", "json")
    assert r.returncode == 0 and "aesgcm" not in r.stdout


def test_export_batch_writes_the_spec_response_and_the_replayer_reads_it(db, start_worker, tmp_path):
    import json

    from operator_helpers import harvest

    from harvest.testing import WorkflowReplayer

    app = App([big_result], [bulky], codecs=Payloads(_codecs(k1=K1), offload_bytes=1024))
    start_worker(app)
    with Client(db, codecs=_codecs(k1=K1)) as client:
        ids = [
            client.start_workflow(big_result, 100 * (n + 1), workflow_id=f"batch-{n}").execution_id
            for n in range(3)
        ]
        for execution_id in ids:
            client.get_handle(execution_id).result(timeout=30)
        client.start_workflow("nobody_runs_this", workflow_id="batch-open", queue="nobody")

    out = tmp_path / "batch.json"
    r = harvest(
        db, "history", "export-batch", "--workflow-name", "big_result", "--state-group", "terminal",
        "--updated-after", "2000-01-01T00:00:00Z", "--limit", "2", "--payload-policy", "full",
        "--output-file", str(out),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    batch = json.loads(out.read_text())
    assert set(batch) >= {"schema", "version", "status", "exports", "failures", "shard_coverage"}
    assert (batch["schema"], batch["version"], batch["status"]) == (
        "harvest.history_export_batch",
        1,
        "complete",
    )
    assert batch["shard_coverage"] == {"read": [0], "unavailable": []} and batch["failures"] == []
    assert len(batch["exports"]) == 2 and {e["execution_id"] for e in batch["exports"]} <= set(ids)
    assert "_harvest_ref" not in out.read_text()  # full: offloaded payloads resolved
    results = WorkflowReplayer(app).replay_batch(str(out))
    assert len(results) == 2 and all(r.ok for r in results.values())
    r = harvest(db, "replay", "--app", "test_payloads:BATCH_APP", "--json-path", str(out))
    assert r.returncode == 0 and "2 of 2 replayed" in r.stdout, r.stdout + r.stderr

    # redacted (the default): no payload in the file, and the replayer says it cannot replay it
    r = harvest(db, "history", "export-batch", "--state-group", "all", "--output-file", str(out))
    batch = json.loads(out.read_text())
    assert r.returncode == 0 and len(batch["exports"]) == 4 and SECRET not in out.read_text()
    assert not any(r.ok for r in WorkflowReplayer(app).replay_batch(batch).values())
    r = harvest(db, "history", "export-batch", "--updated-after", "2999-01-01", "--output-file", str(out))
    assert r.returncode == 0 and json.loads(out.read_text())["exports"] == []


def test_export_batch_counts_a_paused_run_as_running_and_in_all(db, client, tmp_path):
    import json

    from operator_helpers import harvest

    running = client.start_workflow("nobody_runs_this", 1, workflow_id="batch-running")
    paused = client.start_workflow("nobody_runs_this", 2, workflow_id="batch-paused")
    assert paused.pause("hold", operator_id="ops") is True
    out = tmp_path / "batch.json"
    for group in ("running", "all"):
        r = harvest(db, "history", "export-batch", "--state-group", group, "--output-file", str(out))
        assert r.returncode == 0, r.stderr
        batch = json.loads(out.read_text())
        assert batch["status"] == "complete"
        exported = {e["execution_id"] for e in batch["exports"]}
        assert exported == {running.execution_id, paused.execution_id}, group


BIG_CHILD_RESULT = "child-result-" + "z" * 4000


@workflow
async def big_child(ctx) -> str:
    return BIG_CHILD_RESULT


@workflow
async def waiting_parent(ctx) -> dict:
    try:
        got = await ctx.execute_child_workflow(big_child)
    except Exception as exc:
        return {"child_failed": str(exc)}
    await ctx.wait_for_signal("go")
    return {"ok": got == BIG_CHILD_RESULT}


def _child_done(db, start_worker, **worker_options):
    """A parent whose child finished with a result over the offload threshold, still waiting."""
    policy = Payloads(offload_bytes=1024)
    # cache_size=0: the parent's next task replays its history, the child's result included.
    start_worker(App([waiting_parent, big_child], [], codecs=policy), cache_size=0, **worker_options)
    client = Client(db, codecs=policy)
    parent = client.start_workflow(waiting_parent, workflow_id="parent-1")
    deadline = time.monotonic() + 30
    while not any(e["event_type"] == "ChildWorkflowCompleted" for e in parent.history()):
        assert time.monotonic() < deadline, "the child did not complete"
        time.sleep(0.05)
    with psycopg.connect(db, autocommit=True) as conn:
        child_id, result = conn.execute(
            "SELECT id::text, output::text FROM harvest.executions WHERE parent_id = %s",
            (parent.execution_id,),
        ).fetchone()
    assert BIG_CHILD_RESULT in result  # inline: the parent's history holds it, not a reference
    return client, parent, child_id


@pytest.mark.parametrize("gone", ["retention", "erasure"])
def test_a_childs_result_outlives_the_child_for_its_running_parent(db, start_worker, gone):
    client, parent, child_id = _child_done(db, start_worker)
    with psycopg.connect(db, autocommit=True) as conn:
        sql = SqlApi(conn)
        if gone == "retention":
            time.sleep(0.2)
            assert sql.run_retention("100 milliseconds", 100, "ops")["deleted"] == 1  # the child
        else:
            sql.erase_payloads(child_id, "ops")
    parent.signal("go", None)
    try:
        assert parent.result(timeout=30) == {"ok": True}
    finally:
        client.close()


def test_a_childs_result_over_the_payload_limit_fails_the_child_saying_why(db, start_worker):
    start_worker(
        App([waiting_parent, big_child], [], codecs=Payloads(offload_bytes=1024)), max_payload_bytes=2048
    )
    with Client(db) as client:
        result = client.start_workflow(waiting_parent, workflow_id="parent-big").result(timeout=30)
    assert "PayloadTooLarge" in result["child_failed"] or "payload limit" in result["child_failed"], result
    with psycopg.connect(db, autocommit=True) as conn:
        failure = conn.execute(
            "SELECT failure FROM harvest.executions WHERE workflow_name = 'big_child'"
        ).fetchone()[0]
    assert failure["error_type"] == "PayloadTooLarge"
    assert "a child's end is never offloaded" in failure["message"], failure


@workflow
async def rotating(ctx, generation: int) -> dict:
    if generation == 0:
        await ctx.wait_for_signal("go")  # "secret" arrived before "go": it is still buffered
        ctx.continue_as_new(1)
    return await ctx.wait_for_signal("secret")


def test_signals_carried_over_by_continue_as_new_stay_encoded(db, start_worker):
    with Client(db, codecs=_codecs(k1=K1)) as client:
        handle = client.start_workflow(rotating, 0, workflow_id="can-1")
        handle.signal("secret", {"ssn": SECRET})
        handle.signal("go", None)
        start_worker(App([rotating], [], codecs=_codecs(k1=K1)))
        assert handle.result(timeout=30) == {"ssn": SECRET}  # the successor read it
    with psycopg.connect(db, autocommit=True) as conn:
        carried = conn.execute(
            "SELECT count(*) FROM harvest.events AS ev JOIN harvest.executions AS e ON e.id = ev.execution_id"
            " WHERE e.continued_from IS NOT NULL AND ev.event_type = 'SignalReceived'"
        ).fetchone()[0]
    assert carried == 1 and SECRET not in _stored_text(db)


tokens: list[str] = []


@activity(start_to_close="60s")
async def approval(ctx, tag: str) -> str:
    tokens.append(ctx.task_token)
    raise ctx.complete_async()


@workflow
async def approve(ctx, tag: str) -> str:
    try:
        return await ctx.execute_activity(approval, tag)
    except Exception as exc:
        return type(exc).__name__


def _token(db, start_worker, client, workflow_id):
    tokens.clear()
    start_worker(App([approve], [approval], codecs=_codecs(k1=K1)))
    client.start_workflow(approve, "x", workflow_id=workflow_id)
    deadline = time.monotonic() + 20
    while not tokens:
        assert time.monotonic() < deadline, "the activity did not start"
        time.sleep(0.05)
    return tokens[0]


def test_a_client_with_codecs_encodes_heartbeat_details_sent_by_task_token(db, start_worker):
    import asyncio

    from harvest import AsyncClient

    async def async_heartbeat(token):
        async with await AsyncClient.connect(db, codecs=_codecs(k1=K1)) as client:
            return await client.heartbeat_activity(token, {"async_ssn": SECRET})

    with Client(db, codecs=_codecs(k1=K1)) as client:
        token = _token(db, start_worker, client, "tok-hb")
        assert client.heartbeat_activity(token, {"ssn": SECRET}) is False
        assert asyncio.run(async_heartbeat(token)) is False
    stored = _stored_text(db)
    assert "aesgcm:k1" in stored and SECRET not in stored


def test_a_client_with_codecs_encodes_failure_details_sent_by_task_token(db, start_worker):
    from harvest.errors import ActivityFailure

    with Client(db, codecs=_codecs(k1=K1)) as client:
        token = _token(db, start_worker, client, "tok-fail")
        failure = ActivityFailure("Declined", "manager said no", non_retryable=True, details={"ssn": SECRET})
        assert client.fail_activity(token, failure) == "dead_lettered"
    with psycopg.connect(db, autocommit=True) as conn:
        dead = conn.execute("SELECT failure::text FROM harvest.dead_letters").fetchone()[0]
    assert "manager said no" in dead and "aesgcm:k1" in dead
    assert SECRET not in _stored_text(db) + dead


@workflow
async def draws(ctx) -> str:
    token = ctx.side_effect(lambda: {"otp": SECRET})
    return "ok" if token["otp"] else "no"


def test_a_redacted_history_hides_a_side_effects_value(db, start_worker, tmp_path):
    from operator_helpers import harvest

    start_worker(App([draws], []))
    with Client(db) as client:
        handle = client.start_workflow(draws, workflow_id="se-1")
        assert handle.result(timeout=30) == "ok"
    out = tmp_path / "redacted.json"
    r = harvest(db, "history", "export", handle.execution_id, "--output-file", str(out))
    assert r.returncode == 0, r.stderr
    assert '"redacted": true' in out.read_text() and SECRET not in out.read_text()
    r = harvest(db, "workflow", "history", handle.execution_id, "--output", "json")
    assert r.returncode == 0, r.stderr
    assert '"kind": "side_effect"' in r.stdout and SECRET not in r.stdout


# One of each shape of payload-bearing data: an event's, a task's, a query request's.
_PAYLOAD_SHAPES = [
    {"workflow_name": "w", "task_queue": "q", "input": [{"ssn": SECRET}]},
    {"seq": 1, "activity_name": "a", "input": [1, 2], "options": {"retry": {"max_attempts": 3}}},
    {"seq": 1, "result": {"ssn": SECRET}},
    {"seq": 1, "failure": {"error_type": "E", "message": "m", "non_retryable": False, "details": {"s": 1}}},
    {"name": "note", "payload": {"text": SECRET}, "signal_id": "s-1"},
    {"seq": 2, "kind": "side_effect", "value": {"otp": SECRET}},
    {"seq": 3, "kind": "version", "change_id": "c", "value": 2},
    {"seq": 4, "kind": "dag_node", "value": {"task": "t", "state": "failed", "failure": {"error_type": "E"}}},
    {
        "seq": 8,
        "kind": "dag_node",
        "value": {
            "task": "t",
            "state": "failed",
            "failure": {"error_type": "E", "details": [1], "traceback": "T"},
        },
    },
    {"seq": 6, "kind": "local_activity", "value": {"name": "a", "result": {"ssn": SECRET}}},
    {"seq": 7, "kind": "local_activity", "value": {"name": "a", "failure": {"message": "m", "details": [1]}}},
    {"update_id": "u", "name": "add", "arg": SECRET},
    {"update_id": "u", "answer": SECRET, "error": {"error_type": "E", "message": "m", "details": [1]}},
    {"reason": "r", "details": {"why": SECRET}},
    {"heartbeat_details": {"at": 3}, "last_failure": {"error_type": "E", "message": "m", "details": "d"}},
    {"seq": 5, "child_execution_id": "c", "status": "FAILED", "failure": {"error_type": "E", "details": 7}},
]


def _changed(before, after, path=()):
    """The paths where ``after`` replaced a value of ``before``."""
    if before == after:
        return set()
    if isinstance(before, dict) and isinstance(after, dict) and before.keys() == after.keys():
        return set().union(*(_changed(before[k], after[k], (*path, k)) for k in before))
    return {path}


def test_redaction_hides_exactly_the_fields_erasure_erases(db):
    from harvest.core.payload import redact

    with psycopg.connect(db, autocommit=True) as conn:
        for shape in _PAYLOAD_SHAPES:
            erased = conn.execute("SELECT harvest._erase_payload_fields(%s)", (Jsonb(shape),)).fetchone()[0]
            assert _changed(shape, redact(shape)) == _changed(shape, erased), shape


# `harvest replay --app test_payloads:BATCH_APP` (the batch test): the App with the key.
BATCH_APP = App([big_result], [bulky], codecs=Payloads(_codecs(k1=K1), offload_bytes=1024))


def test_the_async_client_encodes_signal_with_start_and_update_with_start_and_decodes(db, start_worker):
    import asyncio

    from harvest import AsyncClient

    start_worker(App([vault], [seal], queries=[peek], updates=[add], codecs=_codecs(k1=K1)))

    async def go():
        async with await AsyncClient.connect(db, codecs=_codecs(k1=K1)) as client:
            _, answer = await client.update_with_start(
                vault, {"ssn": SECRET}, workflow_id="async-1", update="add", update_arg=SECRET
            )
            handle = await client.signal_with_start(
                vault, {"ssn": "other"}, workflow_id="async-1", signal="note", signal_payload={"text": SECRET}
            )
            return answer, await handle.result(timeout=30)

    answer, result = asyncio.run(go())
    assert answer == "added " + SECRET
    assert result["note"] == {"text": SECRET} and result["sealed"]["sealed"] == SECRET
    assert SECRET not in _stored_text(db)


@activity
async def doubled(ctx, value: int) -> dict:
    return {"doubled": value * 2}


@workflow
async def doubling(ctx, value: int) -> dict:
    return await ctx.execute_activity(doubled, value)


def test_a_plain_activity_input_and_result_skip_the_payload_codecs(db, start_worker, monkeypatch):
    """Without codecs or offload, an activity's unmarked input and its result pass through as
    they are: the activity path awaits no Payloads.decode or encode for them (a coroutine each,
    per activity, on the fan-out's hot path). The history still goes through decode."""
    seen: list[tuple[str, object]] = []
    decode, encode = Payloads.decode, Payloads.encode

    async def spy_decode(self, sql, value):
        seen.append(("decode", value))
        return await decode(self, sql, value)

    async def spy_encode(self, sql, execution_id, value):
        seen.append(("encode", value))
        return await encode(self, sql, execution_id, value)

    monkeypatch.setattr(Payloads, "decode", spy_decode)
    monkeypatch.setattr(Payloads, "encode", spy_encode)
    start_worker(App([doubling], [doubled]))
    with Client(db) as client:
        assert client.start_workflow(doubling, 21, workflow_id="plain-1").result(timeout=30) == {
            "doubled": 42
        }
    assert ("decode", [21]) not in seen  # the activity's input, not decoded
    assert ("encode", {"doubled": 42}) not in seen  # its result, not encoded
    assert any(
        kind == "decode" and isinstance(value, list) and value and "event_type" in value[0]
        for kind, value in seen
    )  # (the spy saw the history's decode: it was in place)


@workflow
async def hoard(ctx, blob: str) -> dict:
    got = await ctx.execute_activity(bulky, 3000)
    go = await ctx.wait_for_signal("go")
    await ctx.wait_for_signal("finish")  # sent once the source is gone: the fork replays all of it
    return {
        "input": blob[:5],
        "input_len": len(blob),
        "got": got[: len(SECRET)],
        "got_len": len(got),
        "go": go,
    }


def test_a_reset_fork_owns_copies_of_the_offloaded_payloads_it_carries(db, start_worker):
    """A fork's history carries the source's offload references: it gets its own copies of those
    rows, so erasing the source (or retention deleting it) leaves the fork replayable."""
    policy = Payloads(offload_bytes=1024)
    # cache_size=0: each of the fork's workflow tasks replays its history, references resolved.
    start_worker(App([hoard], [bulky], codecs=policy), cache_size=0)
    with Client(db, codecs=policy) as client:
        source = client.start_workflow(hoard, "input" + "x" * 3000, workflow_id="hoard-1")
        deadline = time.monotonic() + 20
        plan: dict = {}
        while not plan.get("valid"):  # the first point after the activity's result is decided
            assert time.monotonic() < deadline, plan
            history = source.history()
            if any(e["event_type"] == "ActivityCompleted" for e in history):
                plan = source.reset(history[-1]["event_id"], "new code", dry_run=True)
            time.sleep(0.05)
        source.signal("go", "late " + "y" * 2000)  # after the point: taken over with buffer
        plan = source.reset(plan["to_event"], "new code", signal_reapply="buffer")
        fork_id = plan["new_execution_id"]
        with psycopg.connect(db, autocommit=True) as conn:
            assert SqlApi(conn).erase_payloads(source.execution_id, "ops")["offloaded"] >= 3
            conn.execute("DELETE FROM harvest.executions WHERE id = %s", (source.execution_id,))  # retention
            refs = conn.execute(
                """
                SELECT array_agg(DISTINCT r ORDER BY r) FROM (
                    SELECT harvest._payload_refs(input) AS r FROM harvest.executions WHERE id = %(fork)s
                    UNION ALL SELECT harvest._payload_refs(event_data) FROM harvest.events
                    WHERE execution_id = %(fork)s
                ) AS s
                """,
                {"fork": fork_id},
            ).fetchone()[0]
            owned = conn.execute(
                "SELECT array_agg(id ORDER BY id) FROM harvest.payloads"
                " WHERE execution_id = %s AND erased_at IS NULL",
                (fork_id,),
            ).fetchone()[0]
        assert len(refs) >= 3 and refs == owned  # the input, the result, the signal ...: the fork's own
        fork = client.get_handle(fork_id, hoard)
        fork.signal("finish", None)
        assert fork.result(timeout=30) == {
            "input": "input",
            "input_len": 3005,
            "got": SECRET,
            "got_len": len(SECRET) + 6000,
            "go": "late " + "y" * 2000,
        }
        # Erasing the fork reaches every row its history references: each is its own copy
        # (erase_payloads takes only a run's own rows, sec69).
        with psycopg.connect(db, autocommit=True) as conn:
            assert SqlApi(conn).erase_payloads(fork_id, "ops")["offloaded"] >= 3
            left = conn.execute(
                "SELECT count(*) FROM harvest.payloads WHERE id = ANY(%s::uuid[]) AND erased_at IS NULL",
                (refs,),
            ).fetchone()[0]
        assert left == 0


def test_a_large_query_answer_is_the_runs_own_and_erased_with_it(db, start_worker):
    """A worker offloads a large query answer as the run's row: erasing the run erases it even
    after its query request has expired (it used to be stored with no run, found only through
    the request), and retention deleting the run deletes it."""
    start_worker(App([vault], [seal], queries=[peek], codecs=Payloads(offload_bytes=1024)))
    with Client(db) as client:
        handle = client.start_workflow(vault, {"ssn": SECRET}, workflow_id="query-big")
        deadline = time.monotonic() + 20
        while not any(e["event_type"] == "WorkflowTaskCompleted" for e in handle.history()):
            assert time.monotonic() < deadline, "the run's first workflow task did not complete"
            time.sleep(0.05)
        assert handle.query("peek", "p" * 2000) == "p" * 2000 + SECRET
        handle.signal("note", {"text": "done"})
        handle.result(timeout=30)
    with psycopg.connect(db, autocommit=True) as conn:
        holding = "SELECT execution_id::text FROM harvest.payloads WHERE data::text LIKE %s"
        assert conn.execute(holding, (f"%{SECRET}%",)).fetchall() == [(handle.execution_id,)]
        conn.execute("DELETE FROM harvest.query_requests")  # the request is gone
        assert SqlApi(conn).erase_payloads(handle.execution_id, "ops")["offloaded"] == 1
        assert conn.execute(holding, (f"%{SECRET}%",)).fetchall() == []


def test_a_large_query_answer_goes_when_its_request_expires(db, start_worker):
    """The run's rows of a query's answer are deleted with the expired request (a run queried
    all day does not pile them up); the rows of the run's own history stay."""
    start_worker(App([vault], [seal], queries=[peek], codecs=Payloads(offload_bytes=1024)))
    with Client(db) as client:
        handle = client.start_workflow(vault, {"ssn": "small"}, workflow_id="query-expiry")
        deadline = time.monotonic() + 20
        while not any(e["event_type"] == "WorkflowTaskCompleted" for e in handle.history()):
            assert time.monotonic() < deadline, "the run's first workflow task did not complete"
            time.sleep(0.05)
        assert handle.query("peek", "q" * 2000) == "q" * 2000 + "small"
    with psycopg.connect(db, autocommit=True) as conn:
        rows = "SELECT count(*) FROM harvest.payloads WHERE execution_id = %s"
        assert conn.execute(rows, (handle.execution_id,)).fetchone()[0] == 1  # the answer
        conn.execute("SELECT set_config('harvest.fake_now', '2100-01-01T00:00:00Z', false)")
        assert conn.execute("SELECT harvest.expire_query_requests()").fetchone()[0] == 1
        assert conn.execute(rows, (handle.execution_id,)).fetchone()[0] == 0


def test_expired_answers_rows_are_found_by_id_not_by_a_scan_for_each_request(db):
    """expire_query_requests deletes each expired answer's rows (its run's own) through
    the primary key: it listed them with an IN over a subquery naming the request, a subplan
    that read all of harvest.payloads once for each request (1000 a call, the scanner's batch,
    on a table of every run's large payloads). Counted in rows read, not in time."""
    requests, unrelated = 20, 2000
    with psycopg.connect(db, autocommit=True) as conn:
        runs = [
            conn.execute(
                "SELECT (harvest.start_workflow('w', p_workflow_id => %s)).execution_id", (f"x-{i}",)
            ).fetchone()[0]
            for i in range(requests + 1)
        ]
        other = runs.pop()  # its row an answer names (a forged reference): it stays
        conn.execute(
            "INSERT INTO harvest.payloads (id, execution_id, created_at, bytes, data)"
            " SELECT gen_random_uuid(), NULL, now(), 1, '1' FROM generate_series(1, %s)",
            (unrelated,),
        )
        theirs = conn.execute(
            "SELECT (harvest.put_payloads(%s, ARRAY['\"theirs\"'::jsonb]))[1]", (other,)
        ).fetchone()[0]
        answers = []
        for run in runs:
            (own,) = conn.execute(
                "SELECT (harvest.put_payloads(%s, ARRAY['\"own\"'::jsonb]))[1]", (run,)
            ).fetchone()
            answers.append(own)
            refs = [{"_harvest_ref": str(own), "bytes": 5}, {"_harvest_ref": str(theirs), "bytes": 8}]
            conn.execute(
                "INSERT INTO harvest.query_requests (execution_id, kind, name, queue, status, answer,"
                " created_at, expires_at) VALUES (%s, 'query', 'q', 'q', 'completed', %s, now(), now())",
                (run, Jsonb(refs)),
            )
        conn.execute("ANALYZE harvest.payloads")
        with conn.transaction():
            assert conn.execute("SELECT harvest.expire_query_requests()").fetchone()[0] == requests
            read = conn.execute(
                "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables"
                " WHERE relid = 'harvest.payloads'::regclass"
            ).fetchone()[0]
        left = conn.execute(
            "SELECT count(*) FROM harvest.payloads WHERE id = ANY(%s)", (answers,)
        ).fetchone()[0]
        kept = conn.execute("SELECT data FROM harvest.payloads WHERE id = %s", (theirs,)).fetchone()
    assert left == 0 and kept == ("theirs",)
    assert read < 2 * unrelated, read  # one scan at most (the old plan: one for each request, 20 x 2000)


@workflow
async def waits_for_the_user(ctx) -> str:
    return await ctx.wait_for_signal("reply")


def test_a_cancelled_run_s_error_names_its_reason_decoded_not_the_envelope(db, start_worker):
    """The reason is the run's cancellation details, which the worker's codecs encode: the
    client's WorkflowCancelled said 'was cancelled: {"data": "eJx...", "_harvest_codec": ...}'."""
    start_worker(App([waits_for_the_user]), codecs=_codecs(k1=K1))
    with Client(db, codecs=_codecs(k1=K1)) as client:
        handle = client.start_workflow(waits_for_the_user)
        handle.cancel("the user closed the tab")
        with pytest.raises(WorkflowCancelled) as raised:
            handle.result(timeout=30)
    assert str(raised.value) == f"workflow {handle.execution_id} was cancelled: the user closed the tab"


@pytest.mark.parametrize("codecs", [None, [ZlibCodec()]], ids=["no codecs", "no key"])
def test_a_client_without_the_key_still_gets_workflow_cancelled(db, start_worker, codecs):
    """A client that does not hold the worker's key (no codecs, or not that key) reading a
    cancelled run: WorkflowCancelled, the reason left as stored (it cannot decode it), as before
    the reason was decoded; not PayloadKeyMissing, which says nothing of the cancel."""
    start_worker(App([waits_for_the_user]), codecs=_codecs(k1=K1))
    with Client(db, codecs=_codecs(k1=K1)) as writer:
        handle = writer.start_workflow(waits_for_the_user)
        handle.cancel("the user closed the tab")
    with Client(db, codecs=codecs) as client, pytest.raises(WorkflowCancelled) as raised:
        client.get_handle(handle.execution_id).result(timeout=30)
    said = str(raised.value)
    assert said.startswith(f"workflow {handle.execution_id} was cancelled: ")
    assert "the user closed the tab" not in said
