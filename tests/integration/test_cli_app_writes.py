"""A key-holding CLI writes encoded too: `--app module:app` on `workflow start`, `signal`,
`bulk-signal`, `activity complete` and `heartbeat` encodes what the command writes with that App's
codecs, as a `Client(codecs=...)` does (over SQL offloading what is over its offload_bytes to its
store; over HTTP encoded in the CLI, the API storing the envelope as sent), a worker of the App
reads it back plain, and a key the App cannot encode with is one line, exit 1, nothing written
(docs/payloads.md, "A key-holding CLI")."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from outage_helpers import wait_until
from served_cli import one_error_line, over
from served_cli import served as served_api

from harvest import App, Client, activity, workflow
from harvest.core.codecs import AesGcmCodec, Payloads, ZlibCodec, is_envelope, is_ref

K1 = hashlib.sha256(b"cli-write-k1").digest()
SECRET = "PLAINTEXT-IBAN-DE89-3704"
HERE = __name__  # the module `--app` names (tests/integration is on sys.path)
KEYED = ("--app", f"{HERE}:WITH_K1")
tokens: list[str] = []


@activity(start_to_close="60s")
async def approval(ctx, iban: str) -> str:
    tokens.append(ctx.task_token)
    raise ctx.complete_async()  # completed by `harvest activity complete`


@workflow
async def vault(ctx, record: dict) -> dict:
    approved = await ctx.execute_activity(approval, record["iban"][:8])
    note = await ctx.wait_for_signal("note")
    return {"iban": record["iban"], "approved": approved, "note": note}


@workflow
async def noted(ctx, tag: str) -> dict:
    return {"tag": tag, "note": await ctx.wait_for_signal("note")}


def _payloads(codec: AesGcmCodec) -> Payloads:
    return Payloads([ZlibCodec(), codec], offload_bytes=1024)


# The Apps `--app` names: one holding key k1, and one whose current key is k2, which it does not
# hold (its deployment named a key this process was not given): it can encode nothing.
WITH_K1 = App([vault, noted], [approval], codecs=_payloads(AesGcmCodec({"k1": K1})))
_ROTATED = AesGcmCodec({"k1": K1})
_ROTATED.active = "k2"
NO_CURRENT_KEY = App([vault, noted], [approval], codecs=_payloads(_ROTATED))


@pytest.fixture
def served(db: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with served_api(db, monkeypatch):
        yield


def _one(db: str, sql: str, *params: Any) -> Any:
    with psycopg.connect(db, autocommit=True) as conn:
        row = conn.execute(sql, params).fetchone()
    return None if row is None else row[0]


def _events(db: str, execution_id: str, event_type: str) -> list[dict[str, Any]]:
    with psycopg.connect(db, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT event_data FROM harvest.events WHERE execution_id = %s AND event_type = %s",
            (execution_id, event_type),
        ).fetchall()
    return [r[0] for r in rows]


def _decoded(value: Any) -> Any:
    return WITH_K1.payloads.chain.decode(value)


@pytest.mark.parametrize("how", ["sql", "http"])
def test_start_signal_and_activity_completion_with_app_are_stored_encrypted_and_run(
    db, served, start_worker, how
) -> None:
    """Each value the CLI writes with --app is stored as an envelope under key k1 (no plaintext in
    the database), and a worker of the App runs the workflow to its end on the plain values."""
    tokens.clear()
    start_worker(WITH_K1)
    record = {"iban": SECRET}
    r = over(how, db, "workflow", "start", "vault", "--input-json", json.dumps(record), *KEYED, "-o", "json")
    assert r.exit_code == 0, r.output
    eid = json.loads(r.stdout)["execution_id"]
    [stored] = _one(db, "SELECT input FROM harvest.executions WHERE id = %s", eid)
    assert is_envelope(stored) and stored["_harvest_codec"] == ["zlib", "aesgcm:k1"], stored
    assert _decoded(stored) == record

    token = wait_until(lambda: tokens[-1] if tokens else None, "the activity started")
    r = over(how, db, "activity", "heartbeat", token, "--details-json", json.dumps({"at": SECRET}), *KEYED)
    assert r.exit_code == 0, r.output
    details = _one(db, "SELECT heartbeat_details FROM harvest.tasks WHERE kind = 'activity'")
    assert is_envelope(details) and _decoded(details) == {"at": SECRET}, details
    r = over(how, db, "activity", "complete", token, "--result-json", json.dumps("ok-" + SECRET), *KEYED)
    assert r.exit_code == 0 and r.stdout.strip() == "completed", r.output
    # A repeat of the same result is harmless, though its ciphertext is new (judged decoded).
    r = over(how, db, "activity", "complete", token, "--result-json", json.dumps("ok-" + SECRET), *KEYED)
    assert r.exit_code == 0 and r.stdout.strip() == "already_completed", r.output
    r = over(how, db, "workflow", "signal", eid, "note", "--payload-json", json.dumps("n-" + SECRET), *KEYED)
    assert r.exit_code == 0, r.output

    with Client(db, codecs=WITH_K1.payloads) as client:
        assert client.get_handle(eid).result(timeout=30) == {
            "iban": SECRET,
            "approved": "ok-" + SECRET,
            "note": "n-" + SECRET,
        }
    [completed] = _events(db, eid, "ActivityCompleted")
    [signalled] = _events(db, eid, "SignalReceived")
    assert is_envelope(completed["result"]) and _decoded(completed["result"]) == "ok-" + SECRET
    assert is_envelope(signalled["payload"]) and _decoded(signalled["payload"]) == "n-" + SECRET
    with psycopg.connect(db, autocommit=True) as conn:
        dump = conn.execute(
            "SELECT (SELECT jsonb_agg(e) FROM harvest.events e)::text || "
            "(SELECT jsonb_agg(x) FROM harvest.executions x)::text || "
            "coalesce((SELECT jsonb_agg(t) FROM harvest.tasks t)::text, '')"
        ).fetchone()[0]
    assert SECRET not in dump


def test_a_start_input_and_a_signal_over_the_offload_threshold_go_to_the_apps_store(
    db, served, start_worker
) -> None:
    """Over SQL the CLI offloads as the client does: each argument or payload whose envelope is
    over offload_bytes (1024) is a row of the store, its reference in the history. Over HTTP (no
    route to the store) the same value is written inline, encoded; both runs end plain."""
    start_worker(WITH_K1)
    big = SECRET + "".join(hashlib.sha512(bytes([i])).hexdigest() for i in range(24))  # (no zlib shrinks it)
    runs = {}
    for how in ("sql", "http"):
        r = over(how, db, "workflow", "start", "noted", "--input-json", json.dumps(big), *KEYED, "-o", "json")
        assert r.exit_code == 0, r.output
        eid = runs[how] = json.loads(r.stdout)["execution_id"]
        r = over(how, db, "workflow", "signal", eid, "note", "--payload-json", json.dumps(big), *KEYED)
        assert r.exit_code == 0, r.output
    [at_sql] = _one(db, "SELECT input FROM harvest.executions WHERE id = %s", runs["sql"])
    [at_http] = _one(db, "SELECT input FROM harvest.executions WHERE id = %s", runs["http"])
    assert is_ref(at_sql) and is_envelope(at_http), (at_sql, at_http)
    [signal_sql] = _events(db, runs["sql"], "SignalReceived")
    assert is_ref(signal_sql["payload"]), signal_sql
    stored = _one(db, "SELECT data FROM harvest.payloads WHERE id = %s", at_sql["_harvest_ref"])
    assert is_envelope(stored) and _decoded(stored) == big
    owner = _one(db, "SELECT execution_id FROM harvest.payloads WHERE id = %s", at_sql["_harvest_ref"])
    assert str(owner) == runs["sql"]
    with Client(db, codecs=WITH_K1.payloads) as client:
        for eid in runs.values():
            assert client.get_handle(eid).result(timeout=30) == {"tag": big, "note": big}


@pytest.mark.parametrize("how", ["sql", "http"])
def test_bulk_signal_with_app_sends_one_encrypted_payload(db, served, start_worker, how) -> None:
    start_worker(WITH_K1)
    with Client(db, codecs=WITH_K1.payloads) as client:
        handle = client.start_workflow(noted, "t", workflow_id=f"noted-{how}")
    args = ["workflow", "bulk-signal", "note", "--workflow-name", "noted"]
    r = over(how, db, *args, "--payload-json", json.dumps(SECRET), *KEYED, "-o", "json")
    assert r.exit_code == 0 and json.loads(r.stdout)["acted"] == 1, r.output
    [signalled] = _events(db, handle.execution_id, "SignalReceived")
    assert is_envelope(signalled["payload"]) and _decoded(signalled["payload"]) == SECRET
    with Client(db, codecs=WITH_K1.payloads) as client:
        assert client.get_handle(handle.execution_id).result(timeout=30) == {"tag": "t", "note": SECRET}


def test_an_app_that_cannot_encode_is_one_line_and_writes_nothing(db, served, start_worker) -> None:
    """An App whose codec holds no current key (k2, not given it): every writing command stops
    with one line naming the key, exit 1, and the database holds nothing it would have written."""
    tokens.clear()
    start_worker(WITH_K1)
    with Client(db, codecs=WITH_K1.payloads) as client:
        handle = client.start_workflow(vault, {"iban": "x"}, workflow_id="vault-keyless")
    eid = handle.execution_id
    token = wait_until(lambda: tokens[-1] if tokens else None, "the activity started")
    value = json.dumps(SECRET)
    commands = [
        ["workflow", "start", "noted", "--input-json", value, "--workflow-id", "never-started"],
        ["workflow", "signal", eid, "note", "--payload-json", value],
        ["workflow", "bulk-signal", "note", "--workflow-name", "vault", "--payload-json", value],
        ["activity", "complete", token, "--result-json", value],
        ["activity", "heartbeat", token, "--details-json", value],
    ]
    for args in commands:
        for how in ("sql", "http"):
            r = over(how, db, *args, "--app", f"{HERE}:NO_CURRENT_KEY")
            line = one_error_line(r, f"--app {HERE}:NO_CURRENT_KEY: ", args, how)
            assert "cannot encode with key 'k2'" in line and "it holds k1" in line, (args, how)
            assert SECRET not in r.output and K1.hex() not in r.output, (args, how)
    assert _one(db, "SELECT count(*) FROM harvest.executions WHERE workflow_id = 'never-started'") == 0
    assert _events(db, eid, "SignalReceived") == [] and _events(db, eid, "ActivityCompleted") == []
    assert _one(db, "SELECT heartbeat_details FROM harvest.tasks WHERE kind = 'activity'") is None
