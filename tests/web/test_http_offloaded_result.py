"""The management API's reads of a run give offloaded payloads' values (docs/payloads.md, "Large
payloads"; docs/http-api.md, "Payloads in answers"), read back from the run's database as
`harvest workflow result` and the clients do: the result, and the run with its first history
page, a history page under ``payload_policy=full``, the stack, a dead letter and the dead-letter
list (they answered the reference, ``{"_harvest_ref": ..., "bytes": n}``, instead). A reference
the store no longer holds stays as it is, with 200."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from operator_helpers import harvest
from outage_helpers import wait_until
from web_helpers import api_client, authorizer_for, rows_read

from harvest import ActivityFailure, App, Client, activity, workflow
from harvest.core.codecs import Payloads


@workflow
async def long_text(ctx, n: int) -> str:
    return "x" * n


BIG_IN, BIG_NOTE = "in-" + "i" * 400, "note-" + "n" * 400  # each over offload_bytes


@workflow
async def parcel(ctx, text: str) -> str:
    note = await ctx.wait_for_signal("note")
    return text + "|" + note


@activity
async def refuse_big(ctx, text: str) -> None:
    raise ActivityFailure("Declined", "declined", non_retryable=True, details={"seen": text})


@workflow
async def dead_lettered(ctx, text: str) -> None:
    await ctx.execute_activity(refuse_big, text)  # its input offloaded by the worker


@workflow
async def broken(ctx, text: str) -> int:
    return "a bug"  # type: ignore[return-value]  # not its hint: the workflow task fails (traceback)


OFFLOAD = Payloads(offload_bytes=100)
APP = App(workflows=[long_text, parcel, dead_lettered, broken], activities=[refuse_big], codecs=OFFLOAD)


def test_an_offloaded_result_is_read_back(db: str, start_worker) -> None:
    start_worker(APP)
    with Client(db) as client:
        handle = client.start_workflow(long_text, 500)
        assert handle.result(timeout=30) == "x" * 500
    with api_client(db, app=APP) as api:
        answer = api.get(f"/workflows/{handle.execution_id}/result", params={"wait": "5s"})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["state"] == "COMPLETED" and body["output"] == "x" * 500
    cli = harvest(db, "workflow", "result", handle.execution_id)
    assert cli.returncode == 0 and cli.stdout.strip() == '"' + "x" * 500 + '"'


def _sql(db: str, query: str, *args: Any) -> Any:
    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute(query, args).fetchone()[0]


def _read_token(db: str) -> dict[str, str]:
    secret = _sql(db, "SELECT secret FROM harvest.create_api_token('refs-reader', 'read')")
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def world(db: str, start_worker) -> dict[str, Any]:
    """A `parcel` run whose input (a client's start), signal payload (a client's signal) and
    result (the worker's) are offloaded; a dead letter whose input (the worker's schedule) and
    failure details (the activity's) are; a run whose workflow task's failure details are."""
    start_worker(APP)
    with Client(db, codecs=OFFLOAD) as client:
        run = client.start_workflow(parcel, BIG_IN)
        run.signal("note", BIG_NOTE)
        assert run.result(timeout=30) == BIG_IN + "|" + BIG_NOTE
        client.start_workflow(dead_lettered, BIG_IN)
        crashed = client.start_workflow(broken, BIG_IN).execution_id

    def letter() -> Any:
        return _sql(db, "SELECT max(id) FROM harvest.dead_letters")

    def failed() -> Any:
        stack = _sql(db, "SELECT harvest.get_execution_stack(%s)", crashed)
        return (stack.get("workflow_task") or {}).get("last_failure")

    letter_id = wait_until(letter, "the activity is dead-lettered")
    wait_until(failed, "the workflow task failed")
    # What the routes read is stored as references (else the test would prove nothing).
    assert "_harvest_ref" in json.dumps(_sql(db, "SELECT harvest.get_dead_letter(%s)", letter_id))
    assert "_harvest_ref" in json.dumps(_sql(db, "SELECT harvest.get_execution_stack(%s)", crashed))
    events = "SELECT jsonb_agg(event_data) FROM harvest.events WHERE execution_id = %s"
    history = _sql(db, events, run.execution_id)
    assert json.dumps(history).count("_harvest_ref") >= 3  # input, signal, result
    return {
        "run": run.execution_id,
        "run_workflow_id": run.workflow_id,
        "letter": letter_id,
        "crashed": crashed,
    }


@pytest.fixture
def api(db: str) -> Iterator[Any]:
    """The API as a read token sees it (its role harvest_reader: a read token sees payloads)."""
    with api_client(db, app=APP, authorizer=authorizer_for(db), profile="prod") as client:
        client.headers.update(_read_token(db))
        yield client


def _ok(answer: Any) -> Any:
    assert answer.status_code == 200, answer.text
    assert "_harvest_ref" not in answer.text, answer.text
    return answer.json()


def _run(api: Any, world: dict[str, Any]) -> None:
    got = _ok(api.get(f"/workflows/{world['run']}"))
    assert got["execution"]["input"] == [BIG_IN] and got["execution"]["output"] == BIG_IN + "|" + BIG_NOTE
    said = json.dumps(got["history"])
    assert BIG_IN in said and BIG_NOTE in said


def _current(api: Any, world: dict[str, Any]) -> None:
    """The run found by its workflow id: its row as GET /workflows/{id} answers it (it answered
    the references)."""
    got = _ok(api.get("/workflows/current", params={"workflow_id": world["run_workflow_id"]}))
    assert got["execution_id"] == world["run"]
    assert got["execution"]["input"] == [BIG_IN] and got["execution"]["output"] == BIG_IN + "|" + BIG_NOTE


def _history(api: Any, world: dict[str, Any]) -> None:
    page = _ok(api.get(f"/workflows/{world['run']}/history", params={"payload_policy": "full"}))
    said = json.dumps(page["events"])
    assert BIG_IN in said and BIG_NOTE in said and page["redacted"] is False
    # Redacted (the default): each payload's size, the same either way.
    redacted = api.get(f"/workflows/{world['run']}/history").json()["events"]
    assert redacted[0]["event_data"]["input"] == {"redacted": True, "bytes": len(json.dumps([BIG_IN]))}


def _stack(api: Any, world: dict[str, Any]) -> None:
    stack = _ok(api.get(f"/workflows/{world['crashed']}/stack"))
    assert "Traceback" in json.dumps(stack["workflow_task"]["last_failure"]["traceback"])


def _dead_letter(api: Any, world: dict[str, Any]) -> None:
    letter = _ok(api.get(f"/dead-letters/{world['letter']}"))
    assert letter["input"] == [BIG_IN] and letter["failure"]["details"] == {"seen": BIG_IN}


def _dead_letters(api: Any, world: dict[str, Any]) -> None:
    [row] = _ok(api.get("/dead-letters"))["dead_letters"]
    assert row["failure"]["details"] == {"seen": BIG_IN}


@pytest.mark.parametrize("read", [_run, _current, _history, _stack, _dead_letter, _dead_letters])
def test_each_read_of_a_run_answers_offloaded_payloads_resolved(db: str, world, api, read) -> None:
    """As a read token sees it (scope read, role harvest_reader): the values, not references."""
    read(api, world)


def test_a_history_page_reads_its_references_in_one_call(db: str, world, api, monkeypatch) -> None:
    """A page's references are read in one get_payloads call, the page's own events only."""
    calls = rows_read(monkeypatch, "get_payloads")
    _ok(api.get(f"/workflows/{world['run']}/history", params={"payload_policy": "full"}))
    assert calls == [3], calls  # input, signal payload, result: one call
    calls.clear()
    page = _ok(api.get(f"/workflows/{world['run']}/history", params={"payload_policy": "full", "limit": 1}))
    assert calls == [1] and page["next_cursor"], calls  # the started event's input only
    calls.clear()
    api.get(f"/workflows/{world['run']}/history")  # redacted: nothing read back
    assert calls == []


def test_a_reference_the_store_no_longer_holds_stays_with_200(db: str, world, api) -> None:
    """The signal's payload and the dead letter's failure details pruned behind the run's back
    (as retention or an operator would): each stays its reference, the rest is resolved, 200."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("DELETE FROM harvest.payloads WHERE data = to_jsonb(%s::text)", (BIG_NOTE,))
        conn.execute("DELETE FROM harvest.payloads WHERE data = %s::jsonb", (json.dumps({"seen": BIG_IN}),))
    got = api.get(f"/workflows/{world['run']}")
    assert got.status_code == 200, got.text
    assert got.json()["execution"]["input"] == [BIG_IN] and got.text.count("_harvest_ref") == 1
    [signalled] = [e for e in got.json()["history"] if e["event_type"] == "SignalReceived"]
    assert "_harvest_ref" in signalled["event_data"]["payload"], signalled
    page = api.get(f"/workflows/{world['run']}/history", params={"payload_policy": "full"})
    assert page.status_code == 200 and page.text.count("_harvest_ref") == 1, page.text
    for path in (f"/dead-letters/{world['letter']}", "/dead-letters"):
        answer = api.get(path)
        assert answer.status_code == 200 and answer.text.count("_harvest_ref") == 1, (path, answer.text)
        assert BIG_IN in answer.text, (path, answer.text)


def _stored(conn: psycopg.Connection, value: Any) -> dict[str, Any]:
    """``value`` put in this database's store (no run owns it): its reference."""
    [ref] = conn.execute(
        "SELECT harvest.put_payloads(NULL, ARRAY[%s::jsonb])", (json.dumps(value),)
    ).fetchone()[0]
    return {"_harvest_ref": str(ref), "bytes": len(json.dumps(value))}


def test_on_shards_each_read_resolves_on_the_runs_own_shard(two_shards) -> None:
    """A run on shard 1 and the dead letters of both shards: each reference is read on the shard
    its row came from (one that only shard 0 holds, referenced from shard 1, stays)."""
    refs: dict[int, dict[str, Any]] = {}
    runs: dict[int, str] = {}
    for shard, dsn in two_shards.items():
        with psycopg.connect(dsn, autocommit=True) as conn:
            refs[shard] = _stored(conn, f"value-{shard}")
            [runs[shard]] = conn.execute(
                "SELECT execution_id FROM harvest.start_workflow('wf', %s::jsonb, %s, 'q')",
                (json.dumps([refs[shard]]), f"refs-{shard}"),
            ).fetchone()
    for shard, dsn in two_shards.items():
        with psycopg.connect(dsn, autocommit=True) as conn:
            elsewhere = refs[1 - shard]  # a reference its own shard does not hold
            conn.execute(
                "INSERT INTO harvest.dead_letters (execution_id, workflow_name, seq, activity_name, queue,"
                " input, attempts, failure, scheduled_at, failed_at)"
                " VALUES (%s, 'wf', 1, 'act', 'q', %s::jsonb, 1, %s::jsonb, now(), now())",
                (
                    runs[shard],
                    json.dumps([refs[shard], elsewhere]),
                    json.dumps({"error_type": "E", "message": "m"}),
                ),
            )
    env = {
        "HARVEST_SHARDS__READABLE": "0,1",
        "HARVEST_SHARDS__WRITABLE": "0,1",
        **{f"HARVEST_SHARDS__URLS__{s}": dsn for s, dsn in two_shards.items()},
    }
    with api_client(None, env=env) as api:
        got = api.get(f"/workflows/{runs[1]}")
        assert got.status_code == 200 and got.json()["execution"]["input"] == ["value-1"], got.text
        assert got.json()["history"][0]["event_data"]["input"] == ["value-1"], got.text
        letters = api.get("/dead-letters")
        assert letters.status_code == 200, letters.text
        inputs = {row["shard_id"]: row["input"] for row in letters.json()["dead_letters"]}
        assert inputs == {0: ["value-0", refs[1]], 1: ["value-1", refs[0]]}, inputs
        one = api.get("/dead-letters/1", params={"shard_id": 1})
        assert one.status_code == 200 and one.json()["input"] == ["value-1", refs[0]], one.text


def test_a_token_without_payloads_reads_nothing_back_and_sees_no_reference(
    db: str, world, monkeypatch
) -> None:
    """A payloads: false token (review68c): each read of a run answers each offloaded payload as
    its size, neither the value nor the reference, and reads nothing from the store."""
    secret = _sql(
        db, "SELECT secret FROM harvest.create_api_token('refs-blind', 'admin', p_payloads => false)"
    )
    calls = rows_read(monkeypatch, "get_payloads")
    paths = [
        f"/workflows/{world['run']}",
        f"/workflows/current?workflow_id={world['run_workflow_id']}",
        f"/workflows/{world['run']}/history",
        f"/workflows/{world['crashed']}/stack",
        f"/dead-letters/{world['letter']}",
        "/dead-letters",
    ]
    with api_client(db, app=APP, authorizer=authorizer_for(db), profile="prod") as api:
        api.headers.update({"Authorization": f"Bearer {secret}"})
        for path in paths:
            answer = api.get(path)
            assert answer.status_code == 200, (path, answer.text)
            assert "_harvest_ref" not in answer.text and BIG_IN not in answer.text, (path, answer.text)
            assert answer.json()["redacted"] is True, path
    assert calls == [], calls
    input_ = api_input(db, secret, world["run"])
    assert input_ == {"redacted": True, "bytes": len(json.dumps([BIG_IN]))}, input_


def api_input(db: str, secret: str, execution_id: str) -> Any:
    with api_client(db, app=APP, authorizer=authorizer_for(db), profile="prod") as api:
        api.headers.update({"Authorization": f"Bearer {secret}"})
        return api.get(f"/workflows/{execution_id}").json()["execution"]["input"]


def _many_offloaded_signals(db: str, count: int) -> tuple[str, list[str]]:
    """A run (no worker polls it) with ``count`` signals, each payload offloaded: its id and the
    payloads' values."""
    values = [f"signal-{i}-" + "s" * 100 for i in range(count)]
    with psycopg.connect(db) as conn:
        started = "SELECT execution_id FROM harvest.start_workflow('export_refs', '[]', 'export-refs')"
        run = str(conn.execute(started).fetchone()[0])
        [ids] = conn.execute(
            "SELECT harvest.put_payloads(%s, %s::jsonb[])", (run, [json.dumps(v) for v in values])
        ).fetchone()
        for ref, value in zip(ids, values, strict=True):
            payload = json.dumps({"_harvest_ref": str(ref), "bytes": len(json.dumps(value))})
            conn.execute("SELECT harvest.signal_workflow(%s, 's', %s::jsonb)", (run, payload))
    return run, values


def test_a_full_export_reads_its_references_a_page_of_events_at_a_time(db: str, api, monkeypatch) -> None:
    """A streamed full export (one run's, and the batch's) read the store once for each event
    that held a reference: 1,200 calls for 1,200 offloaded signals. It reads once a page of
    events (500), and every value is in the answer, in order."""
    run, values = _many_offloaded_signals(db, 1200)
    calls = rows_read(monkeypatch, "get_payloads")
    answers = (
        api.get(f"/workflows/{run}/history/export", params={"payload_policy": "full"}),
        api.get(
            "/history/export-batch",
            params={"workflow_name": "export_refs", "state_group": "all", "payload_policy": "full"},
        ),
    )
    assert len(calls) == 2 * 3 and sum(calls) == 2 * 1200, calls  # events 1-500, 501-1000, 1001-1201
    for answer in answers:
        assert answer.status_code == 200 and "_harvest_ref" not in answer.text, answer.text[:500]
        body = answer.json()
        events = body["events"] if "events" in body else body["exports"][0]["events"]
        assert [e["event_data"]["payload"] for e in events if e["event_type"] == "SignalReceived"] == values
