"""A key-holding CLI: `--app module:app` on the commands that show payloads decodes them with that
App's codecs and payload store, over SQL and over HTTP (the API holds no keys: the CLI decodes
what the route answers), and a key the App lacks, or an App that cannot be imported, is one line
and exit 1 (docs/payloads.md, "A key-holding CLI")."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from outage_helpers import wait_until
from served_cli import BASE, cli, one_error_line, transports
from served_cli import served as served_api

from harvest import ActivityFailure, App, Client, activity, query, update, workflow
from harvest.core.codecs import AesGcmCodec, Payloads, ZlibCodec
from harvest.testing import WorkflowReplayer

K1, K2 = hashlib.sha256(b"cli-app-k1").digest(), hashlib.sha256(b"cli-app-k2").digest()
SECRET = "PLAINTEXT-CARD-4111-1111"
HERE = __name__  # the module `--app` names (tests/integration is on sys.path)
KEYED = ("--app", f"{HERE}:WITH_K1")


@activity
async def stamp(ctx, record: dict) -> dict:
    return {"stamped": record["card"]}


@activity
async def blob(ctx, size: int) -> str:
    return SECRET + os.urandom(size).hex()  # random: over the offload threshold once encrypted


@workflow
async def locker(ctx, record: dict) -> dict:
    ctx.state["record"] = record
    stamped = await ctx.execute_activity(stamp, record)
    note = await ctx.wait_for_signal("note")
    return {"stamped": stamped, "note": note, "extra": ctx.state.get("extra")}


@query(workflow="locker")
def card(ctx, prefix: str) -> str:
    return prefix + ctx.state["record"]["card"]


@update(workflow="locker")
async def annotate(ctx, extra: str) -> str:
    ctx.state["extra"] = extra
    return "noted " + extra


@workflow
async def large(ctx, size: int) -> dict:
    return {"blob": await ctx.execute_activity(blob, size)}


@activity
async def refuse(ctx, record: dict) -> None:
    raise ActivityFailure("Declined", "card declined", non_retryable=True, details={"seen": record["card"]})


@workflow
async def declined(ctx, record: dict) -> None:
    await ctx.execute_activity(refuse, record)


@workflow
async def refused(ctx, record: dict) -> None:
    raise ActivityFailure("Refused", "card refused", details={"seen": record["card"]})


@workflow
async def crashing(ctx, record: dict) -> int:
    return "a bug"  # type: ignore[return-value]  # not its hint: the workflow task fails, retried


def _payloads(**keys: bytes) -> Payloads:
    return Payloads([ZlibCodec(), AesGcmCodec(keys)], offload_bytes=1024)


# The Apps `--app` names: one holding the key the runs are written with, one holding another.
WORKFLOWS, ACTIVITIES = [locker, large, declined, refused, crashing], [stamp, blob, refuse]
WITH_K1 = App(WORKFLOWS, ACTIVITIES, queries=[card], updates=[annotate], codecs=_payloads(k1=K1))
ONLY_K2 = App(WORKFLOWS, ACTIVITIES, queries=[card], updates=[annotate], codecs=_payloads(k2=K2))


@pytest.fixture
def served(db: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with served_api(db, monkeypatch):
        yield


@pytest.fixture
def runs(db: str, start_worker) -> dict[str, str]:
    """An ended `locker` run (queried and updated while it ran: the answers are encrypted too)
    and an ended `large` run whose result is offloaded, both written under key k1."""
    start_worker(WITH_K1)
    with Client(db, codecs=_payloads(k1=K1)) as client:
        handle = client.start_workflow(locker, {"card": SECRET}, workflow_id="locker-1")
        assert handle.query("card", "card=", timeout=20) == "card=" + SECRET  # (the worker is up)
        big = client.start_workflow(large, 2000, workflow_id="large-1")
        big.result(timeout=30)
    return {"locker": handle.execution_id, "large": big.execution_id}


def test_result_get_history_query_and_update_are_decoded_with_the_apps_keys(db, served, runs) -> None:
    eid = runs["locker"]
    asked = transports(db, "workflow", "query", eid, "card", "--input-json", '"c="', *KEYED, "-o", "json")
    for how, r in asked.items():
        assert r.exit_code == 0, (how, r.output)
        assert json.loads(r.stdout)["result"] == "c=" + SECRET, how
    # Without --app: the answer is not shown, and the line says how to see it. (Over HTTP the API,
    # which holds no keys, answers the envelope as stored; it refused the answer, 400.)
    for how, r in transports(db, "workflow", "query", eid, "card", "--input-json", '"c="').items():
        assert r.exit_code == 1 and SECRET not in r.output, (how, r.output)
        assert "key 'k1'" in r.stderr and "give --app module:app" in r.stderr, (how, r.stderr)
    r = transports(db, "workflow", "update", eid, "annotate", "--input-json", '"x"', *KEYED, "-o", "json")
    assert [json.loads(v.stdout)["result"] for v in r.values()] == ["noted x", "noted x"], r
    with Client(db, codecs=_payloads(k1=K1)) as client:
        client.get_handle(eid).signal("note", SECRET + "-note")
        expected = client.get_handle(eid).result(timeout=30)

    for how, r in transports(db, "workflow", "result", eid, *KEYED).items():
        assert r.exit_code == 0, (how, r.output)
        assert json.loads(r.stdout) == expected and "encrypted" not in r.stderr, (how, r.output)
    for how, r in transports(db, "workflow", "result", runs["large"], *KEYED).items():
        assert r.exit_code == 0 and json.loads(r.stdout)["blob"].startswith(SECRET), (how, r.output)

    for how, r in transports(db, "workflow", "get", eid, *KEYED, "-o", "json").items():
        assert r.exit_code == 0, (how, r.output)
        row = json.loads(r.stdout)
        assert row["input"] == [{"card": SECRET}] and row["output"] == expected, how
    for how, r in transports(db, "workflow", "history", eid, "--full", *KEYED, "-o", "json").items():
        assert r.exit_code == 0, (how, r.output)
        assert SECRET + "-note" in r.stdout and "<encrypted" not in r.stdout, how
    # Without --app the CLI still shows what a payload is, never its plaintext (over HTTP too,
    # where it printed the result's envelope).
    for how, r in transports(db, "workflow", "result", eid).items():
        assert r.exit_code == 0 and json.loads(r.stdout) == "<encrypted (key k1)>", (how, r.output)
        assert "key 'k1'" in r.stderr and "--app" in r.stderr, (how, r.stderr)
    r = cli("workflow", "get", eid, "-o", "json", "--database-url", db)
    assert "<encrypted (key k1)>" in r.stdout and SECRET not in r.stdout

    # The tail decodes each event's payloads (its first event: the run's encrypted input).
    r = cli("events", "tail", "--after", "0", "--workflow", eid, "--limit", "1", *KEYED, "--database-url", db)
    assert r.exit_code == 0 and SECRET in r.stdout and "WorkflowStarted" in r.stdout, r.output


def test_a_full_export_and_batch_with_app_hold_the_decoded_payloads(db, served, runs, tmp_path) -> None:
    with Client(db, codecs=_payloads(k1=K1)) as client:
        client.get_handle(runs["locker"]).signal("note", "n")
        client.get_handle(runs["locker"]).result(timeout=30)
    plain = App([locker, large], [stamp, blob], queries=[card], updates=[annotate])  # no codecs
    for name in ("sql", "http"):
        out = tmp_path / f"{name}.json"
        args = [
            "history",
            "export",
            runs["large"],
            "--payload-policy",
            "full",
            "--output-file",
            str(out),
            *KEYED,
        ]
        r = cli(*args, "--database-url", db) if name == "sql" else cli("--base-url", BASE, *args)
        assert r.exit_code == 0, (name, r.output)
        text = out.read_text()
        # Offloaded payloads read back through the App's store and decoded: the file stands
        # alone, and the replayer replays it with an App that holds no key.
        assert SECRET in text and "aesgcm" not in text and "_harvest_ref" not in text, name
        assert oct(out.stat().st_mode & 0o777) == "0o600", name
        assert WorkflowReplayer(plain).replay(str(out)).ok, name

    for name in ("sql", "http"):
        out = tmp_path / f"batch-{name}.json"
        args = ["history", "export-batch", "--state-group", "all", "--payload-policy", "full", *KEYED]
        args += ["--output-file", str(out)]
        r = cli(*args, "--database-url", db) if name == "sql" else cli("--base-url", BASE, *args)
        assert r.exit_code == 0, (name, r.output)
        batch = json.loads(out.read_text())
        assert batch["status"] == "complete" and len(batch["exports"]) == 2, name
        assert SECRET in out.read_text() and "aesgcm" not in out.read_text(), name
        assert all(result.ok for result in WorkflowReplayer(plain).replay_batch(batch).values()), name
    assert (tmp_path / "batch-sql.json").read_text() == (tmp_path / "batch-http.json").read_text()


def test_an_app_without_the_key_is_one_line_naming_it_and_writes_nothing(db, served, runs, tmp_path) -> None:
    eid = runs["large"]
    out = tmp_path / "export.json"
    commands = [
        ["workflow", "result", eid],
        ["workflow", "get", eid, "-o", "json"],
        ["workflow", "history", eid, "--full"],
        ["history", "export", eid, "--payload-policy", "full", "--output-file", str(out)],
        ["history", "export-batch", "--payload-policy", "full", "--output-file", str(out)],
    ]
    for args in commands:
        for how, r in transports(db, *args, "--app", f"{HERE}:ONLY_K2").items():
            line = one_error_line(r, f"--app {HERE}:ONLY_K2: ", args, how)
            assert "key 'k1'" in line and "it holds k2" in line, (args, how, r.stderr)
            assert SECRET not in r.output and K2.hex() not in r.output, (args, how)
            assert not out.exists(), (args, how)


def test_an_app_that_cannot_be_imported_is_one_line(db, served, runs) -> None:
    eid = runs["large"]
    for target, said in [
        ("no_such_module_here:app", "cannot import 'no_such_module_here'"),
        (f"{HERE}:NOT_THERE", f"module {HERE!r} has no attribute 'NOT_THERE'"),
    ]:
        for args in (["workflow", "result", eid], ["workflow", "get", eid], ["dlq", "get", "1"]):
            for how, r in transports(db, *args, "--app", target).items():
                assert r.exit_code == 1, (args, how, r.output)
                lines = r.stderr.strip().splitlines()
                assert len(lines) == 1 and said in lines[0], (args, how, r.stderr)


def test_dlq_get_decodes_the_dead_letters_input_and_failure_details(db, served, start_worker) -> None:
    start_worker(WITH_K1)
    with Client(db, codecs=_payloads(k1=K1)) as client:
        client.start_workflow(declined, {"card": SECRET}, workflow_id="declined-1")

    def letters() -> list:  # (the non-retryable failure dead-letters its activity; the run waits)
        return json.loads(cli("dlq", "list", "-o", "json", "--database-url", db).stdout)["dead_letters"]

    [letter] = wait_until(letters, "the activity is dead-lettered")
    for how, r in transports(db, "dlq", "get", str(letter["id"]), *KEYED, "-o", "json").items():
        assert r.exit_code == 0, (how, r.output)
        row = json.loads(r.stdout)
        assert row["input"] == [{"card": SECRET}] and row["failure"]["details"] == {"seen": SECRET}, how
    r = cli("dlq", "get", str(letter["id"]), "-o", "json", "--database-url", db)
    assert r.exit_code == 0 and SECRET not in r.stdout and "<encrypted (key k1)>" in r.stdout, r.output
    # The list too: each row's details decoded on its shard, or shown by what they are.
    for how, r in transports(db, "dlq", "list", *KEYED, "-o", "json").items():
        assert r.exit_code == 0, (how, r.output)
        [row] = json.loads(r.stdout)["dead_letters"]
        assert row["failure"]["details"] == {"seen": SECRET}, (how, row)
    for how, r in transports(db, "dlq", "list", "-o", "json").items():
        [row] = json.loads(r.stdout)["dead_letters"]
        assert row["failure"]["details"] == "<encrypted (key k1)>", (how, row)


def test_workflow_stack_decodes_a_workflow_tasks_failure_details(db, served, start_worker) -> None:
    """`workflow stack`: the failed workflow task's traceback (encrypted, as details are) decoded
    with --app, shown by what they are without it, over SQL and HTTP."""
    start_worker(WITH_K1)
    with Client(db, codecs=_payloads(k1=K1)) as client:
        eid = client.start_workflow(crashing, {"card": SECRET}, workflow_id="crashing-1").execution_id

    def failure() -> dict | None:
        r = cli("workflow", "stack", eid, "-o", "json", "--database-url", db)
        return (json.loads(r.stdout).get("workflow_task") or {}).get("last_failure")

    wait_until(failure, "the workflow task failed")
    for how, r in transports(db, "workflow", "stack", eid, *KEYED, "-o", "json").items():
        assert r.exit_code == 0, (how, r.output)
        stack = json.loads(r.stdout)["workflow_task"]["last_failure"]["traceback"]
        assert stack.startswith("Traceback"), (how, stack)
    for how, r in transports(db, "workflow", "stack", eid, "-o", "json").items():
        stack = json.loads(r.stdout)["workflow_task"]["last_failure"]["traceback"]
        assert stack == "<encrypted (key k1)>", (how, stack)


def test_events_tail_reads_offloaded_payloads_back_with_app(db, runs) -> None:
    """`events tail --app` over SQL: an event whose payload was offloaded (the `large` run's
    result, encrypted then stored aside) is read back through the App's store and decoded."""
    eid = runs["large"]
    with Client(db) as client:
        count = len(client.get_handle(eid).history())
    args = ["events", "tail", "--after", "0", "--workflow", eid, "--limit", str(count), "-o", "json"]
    r = cli(*args, *KEYED, "--database-url", db)
    assert r.exit_code == 0, r.output
    assert SECRET in r.stdout and "_harvest_ref" not in r.stdout, r.stdout
    r = cli(*args, "--database-url", db)  # without --app: the reference as stored
    assert r.exit_code == 0 and SECRET not in r.stdout and "_harvest_ref" in r.stdout, r.output


def test_a_failed_run_whose_details_are_encrypted_exits_1_without_app(db, served, start_worker) -> None:
    """The failure's details are encrypted: without --app the CLI cannot decode them, and it says
    the run failed (exit 1) rather than printing the failed run's empty result with exit 0."""
    start_worker(WITH_K1)
    with Client(db, codecs=_payloads(k1=K1)) as client:
        handle = client.start_workflow(refused, {"card": SECRET}, workflow_id="refused-1")
    for how, r in transports(db, "workflow", "result", handle.execution_id).items():
        assert r.exit_code == 1, (how, r.output)
        assert "failed: Refused: card refused" in r.stderr and SECRET not in r.output, (how, r.output)
    for how, r in transports(db, "workflow", "result", handle.execution_id, *KEYED).items():
        assert r.exit_code == 1 and "card refused" in r.stderr, (how, r.output)


def test_events_tail_decodes_each_event_once_whatever_its_payload_holds(db, served) -> None:
    """`events tail --app` decodes an event's payloads once, over SQL and over HTTP: a payload
    that holds an envelope-shaped value of its own (another system's, stored by the workflow)
    is shown as the workflow wrote it, not decoded again (here it would need a key no one has)."""
    foreign = {"_harvest_codec": ["aesgcm:k9"], "data": "AAAA"}
    with Client(db, codecs=_payloads(k1=K1)) as client:
        handle = client.start_workflow(locker, {"card": SECRET, "foreign": foreign}, workflow_id="nested-1")
    args = ["events", "tail", "--after", "0", "--workflow", handle.execution_id, "--limit", "1", "-o", "json"]
    for how, r in transports(db, *args, *KEYED).items():
        assert r.exit_code == 0, (how, r.output)
        event = json.loads(r.stdout)
        assert event["event_type"] == "WorkflowStarted", (how, event)
        assert event["event_data"]["input"] == [{"card": SECRET, "foreign": foreign}], (how, event)


@pytest.fixture
def offloaded(db: str, start_worker) -> dict[str, Any]:
    """Payloads encrypted then offloaded: a `locker` run's start input and signal (the client's),
    its result (the worker's); a dead letter's activity input (the worker's) and failure details
    (the activity's)."""
    start_worker(WITH_K1)
    card = SECRET + os.urandom(800).hex()  # random: over the offload threshold once encrypted
    note = SECRET + "-note-" + os.urandom(800).hex()
    with Client(db, codecs=_payloads(k1=K1)) as client:
        handle = client.start_workflow(locker, {"card": card}, workflow_id="locker-big")
        handle.signal("note", note)
        expected = handle.result(timeout=30)
        client.start_workflow(declined, {"card": card}, workflow_id="declined-big")
    eid = handle.execution_id
    raw = cli("workflow", "history", eid, "--full", "-o", "json", "--database-url", db)
    assert raw.stdout.count("<offloaded") >= 3, raw.stdout  # input, signal, result: stored aside

    def letters() -> list:  # (the non-retryable failure dead-letters its activity)
        return json.loads(cli("dlq", "list", "-o", "json", "--database-url", db).stdout)["dead_letters"]

    [letter] = wait_until(letters, "the activity is dead-lettered")
    return {"eid": eid, "card": card, "note": note, "result": expected, "letter": str(letter["id"])}


# `workflow get`, `history --full` and `dlq get` with --app over HTTP: the route answers an
# offloaded payload resolved and the CLI decodes it, as over SQL (over HTTP it showed
# `<offloaded (n bytes, ref ...)>`).


def test_workflow_get_over_http_decodes_an_offloaded_encrypted_payload(db, served, offloaded) -> None:
    both = transports(db, "workflow", "get", offloaded["eid"], *KEYED, "-o", "json")
    assert both["http"].stdout == both["sql"].stdout  # the same bytes on both transports
    for how, r in both.items():
        assert r.exit_code == 0, (how, r.output)
        row = json.loads(r.stdout)
        assert row["input"] == [{"card": offloaded["card"]}], (how, r.stdout[:400])
        assert row["output"] == offloaded["result"], (how, r.stdout[:400])


def test_history_full_over_http_decodes_offloaded_encrypted_payloads(db, served, offloaded) -> None:
    both = transports(db, "workflow", "history", offloaded["eid"], "--full", *KEYED, "-o", "json")
    assert both["http"].stdout == both["sql"].stdout
    for how, r in both.items():
        assert r.exit_code == 0, (how, r.output)
        assert offloaded["note"] in r.stdout and offloaded["card"] in r.stdout, (how, r.stdout[:400])
        assert "<offloaded" not in r.stdout, (how, r.stdout[:400])


def test_dlq_get_over_http_decodes_an_offloaded_encrypted_payload(db, served, offloaded) -> None:
    both = transports(db, "dlq", "get", offloaded["letter"], *KEYED, "-o", "json")
    assert both["http"].stdout == both["sql"].stdout
    for how, r in both.items():
        assert r.exit_code == 0, (how, r.output)
        row, card = json.loads(r.stdout), offloaded["card"]
        assert row["input"] == [{"card": card}] and row["failure"]["details"] == {"seen": card}, (how, row)
