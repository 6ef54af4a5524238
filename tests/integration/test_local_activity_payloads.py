"""A local activity's outcome is a payload as a queued activity's is (docs/payloads.md): its result
and its failure's details (and traceback) are encoded by the codecs, offloaded over
``offload_bytes``, erased by ``erase_payloads`` and decoded on replay; a history recorded before,
its outcome in plain text, still replays. They were written into its MarkerRecorded event as
returned, in plain text under an AesGcmCodec, and erasure left them there."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess

import psycopg
import pytest
from operator_helpers import harvest
from worker_helpers import wait_until, worker_process

from harvest import App, Client, RetryPolicy, activity, workflow
from harvest.core.codecs import AesGcmCodec, Payloads, ZlibCodec
from harvest.core.errors import ActivityError, ActivityFailure
from harvest.db.sqlapi import SqlApi
from harvest.testing import WorkflowReplayer

KEY = hashlib.sha256(b"harvest-test-local-k1").digest()
SECRET = "LOCAL-PLAINTEXT-SSN-078-05-1120"  # the local activity's result carries it
DETAIL = "LOCAL-FAILURE-DETAIL-4417"  # its failure's details carry it
ERASED = {"_harvest_erased": True}
CALLS: list[str] = []  # the local activities run in this process


@activity(local=True)
async def look_up(ctx, ssn: str) -> dict:
    CALLS.append("look_up")
    # (random: no codec compresses it under offload_bytes)
    return {"ssn": ssn, "pid": os.getpid(), "pad": os.urandom(1000).hex() if ssn.endswith("big") else ""}


@activity(local=True, retry=RetryPolicy.none())
async def refuse(ctx, ssn: str) -> str:
    CALLS.append("refuse")
    failure = ActivityFailure("Denied", "the lookup was refused", non_retryable=True, details={"why": DETAIL})
    raise failure  # LOCAL-RAISING-FRAME: the traceback quotes this line


@workflow
async def local_vault(ctx, ssn: str) -> dict:
    got = await ctx.execute_activity(look_up, ssn)
    try:
        await ctx.execute_activity(refuse, ssn)
        denied = None
    except ActivityError as exc:
        denied = {"type": exc.failure.error_type, "details": exc.failure.details}
    go = await ctx.wait_for_signal("go")
    return {"got": got, "denied": denied, "go": go}


def _codecs() -> list:
    return [ZlibCodec(), AesGcmCodec({"k1": KEY})]


# The App of the killed worker process (below) and of the one that finishes its run.
APP = ENCRYPTED = App([local_vault], [look_up, refuse], codecs=_codecs())


def _stored_text(db: str) -> str:
    """Every payload-bearing row of the database, as text."""
    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute(
            """
            SELECT coalesce(string_agg(t, ' '), '') FROM (
                SELECT input::text || coalesce(output::text, '') || coalesce(failure::text, '') AS t
                FROM harvest.executions
                UNION ALL SELECT event_data::text FROM harvest.events
                UNION ALL SELECT coalesce(input::text, '') || coalesce(last_failure::text, '')
                    FROM harvest.tasks
                UNION ALL SELECT data::text FROM harvest.payloads
            ) AS s
            """
        ).fetchone()[0]


def _markers(db: str, execution_id: str) -> list[dict]:
    """The stored values of the run's local activity markers, in order."""
    with psycopg.connect(db, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT event_data -> 'value' FROM harvest.events WHERE execution_id = %s"
            " AND event_type = 'MarkerRecorded' AND event_data ->> 'kind' = 'local_activity'"
            " ORDER BY event_id",
            (execution_id,),
        ).fetchall()
    return [r[0] for r in rows]


def _worker_process(db: str) -> subprocess.Popen:
    """A worker process running ENCRYPTED, to be killed."""
    return worker_process(
        db, "test_local_activity_payloads", "poll_interval=0.2, scan_interval=0.2, run_retention=False"
    )


@pytest.mark.chaos
def test_a_local_activitys_outcome_is_encrypted_and_replays_after_its_worker_is_killed(db, start_worker):
    proc = _worker_process(db)
    try:
        with Client(db, codecs=_codecs()) as client:
            handle = client.start_workflow(local_vault, SECRET, workflow_id="local-vault-1")
            wait_until(lambda: len(_markers(db, handle.execution_id)) == 2, "the two markers")
            os.kill(proc.pid, signal.SIGKILL)  # the outcomes are recorded; the run waits for "go"
            proc.wait(timeout=10)
            markers = _markers(db, handle.execution_id)
            stored = _stored_text(db)
            assert SECRET not in stored and DETAIL not in stored and "LOCAL-RAISING-FRAME" not in stored
            result, failure = markers[0]["result"], markers[1]["failure"]
            assert markers[0]["name"] == "look_up" and result["_harvest_codec"] == ["zlib", "aesgcm:k1"]
            # As a queued activity's failure: its type and message plain, its payloads encoded.
            assert (failure["error_type"], failure["message"]) == ("Denied", "the lookup was refused")
            assert failure["details"]["_harvest_codec"] == ["zlib", "aesgcm:k1"]
            assert failure["traceback"]["_harvest_codec"] == ["zlib", "aesgcm:k1"]  # where it was raised

            # A new worker (no cache: it replays the history) reads the outcomes back, decoded,
            # and runs neither activity again.
            CALLS.clear()
            start_worker(ENCRYPTED, cache_size=0)
            handle.signal("go", "now")
            assert handle.result(timeout=30) == {
                "got": {"ssn": SECRET, "pid": proc.pid, "pad": ""},  # the killed process's outcome
                "denied": {"type": "Denied", "details": {"why": DETAIL}},
                "go": "now",
            }
            assert CALLS == []
        stored = _stored_text(db)
        assert SECRET not in stored and DETAIL not in stored and "LOCAL-RAISING-FRAME" not in stored
        # The key-holding CLI shows them decoded; without the key, what they are.
        app = "test_local_activity_payloads:ENCRYPTED"
        full = harvest(db, "workflow", "history", handle.execution_id, "--full", "-o", "json", "--app", app)
        assert full.returncode == 0, full.stderr
        assert SECRET in full.stdout and DETAIL in full.stdout and "LOCAL-RAISING-FRAME" in full.stdout
        keyless = harvest(db, "workflow", "history", handle.execution_id, "--full", "-o", "json")
        assert keyless.returncode == 0, keyless.stderr
        assert SECRET not in keyless.stdout and "encrypted (key k1)" in keyless.stdout
        redacted = harvest(db, "workflow", "history", handle.execution_id, "-o", "json", "--app", app)
        assert redacted.returncode == 0, redacted.stderr
        assert SECRET not in redacted.stdout and DETAIL not in redacted.stdout
        with psycopg.connect(db, autocommit=True) as conn:
            events = SqlApi(conn).get_history(handle.execution_id)
        assert WorkflowReplayer(ENCRYPTED).replay(events).ok  # the test kit decodes them too
        keyless = WorkflowReplayer(App([local_vault], [look_up, refuse])).replay(events)
        assert not keyless.ok and "'k1'" in keyless.error, keyless
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_a_local_activitys_large_result_is_offloaded_and_erasure_erases_its_outcome(db, start_worker):
    # No codecs: erasure is the guarantee of a plain deployment too.
    start_worker(App([local_vault], [look_up, refuse], codecs=Payloads(offload_bytes=1024)), cache_size=0)
    with Client(db) as client:
        handle = client.start_workflow(local_vault, SECRET + "-big", workflow_id="local-erase-1")
        wait_until(lambda: len(_markers(db, handle.execution_id)) == 2, "the two markers")
        handle.signal("go", "now")
        result = handle.result(timeout=30)  # the next task replayed the reference, resolved
    assert result["got"]["ssn"] == SECRET + "-big" and len(result["got"]["pad"]) == 2000
    assert result["denied"] == {"type": "Denied", "details": {"why": DETAIL}}
    markers = _markers(db, handle.execution_id)
    assert set(markers[0]["result"]) == {"_harvest_ref", "bytes"}  # offloaded, as a queued result
    with psycopg.connect(db, autocommit=True) as conn:
        owner = conn.execute(
            "SELECT execution_id FROM harvest.payloads WHERE id = %s", (markers[0]["result"]["_harvest_ref"],)
        ).fetchone()[0]
        assert str(owner) == handle.execution_id  # the run's row: erased and deleted with it
        assert SECRET in _stored_text(db) and DETAIL in _stored_text(db)
        summary = SqlApi(conn).erase_payloads(handle.execution_id, "ops")
    assert summary["offloaded"] >= 1
    stored = _stored_text(db)
    assert SECRET not in stored and DETAIL not in stored and "LOCAL-RAISING-FRAME" not in stored
    erased = _markers(db, handle.execution_id)
    assert erased[0] == {"name": "look_up", "result": ERASED}  # its name stays, as an activity's
    failure = erased[1]["failure"]
    assert (failure["error_type"], failure["message"], failure["details"], failure["traceback"]) == (
        "Denied",
        "the lookup was refused",
        ERASED,
        ERASED,
    )


def test_a_history_with_a_plain_local_outcome_replays_on_a_worker_with_codecs(db, start_worker):
    """A run recorded before (or without codecs) holds its outcomes in plain text: a worker with
    codecs reads them as they are, runs neither activity again and finishes the run."""
    CALLS.clear()
    plain = start_worker(App([local_vault], [look_up, refuse]))
    with Client(db) as client:
        handle = client.start_workflow(local_vault, "plain", workflow_id="local-plain-1")
        wait_until(lambda: len(_markers(db, handle.execution_id)) == 2, "the two markers")
        markers = _markers(db, handle.execution_id)
        assert markers[0]["result"]["ssn"] == "plain" and markers[1]["failure"]["details"] == {"why": DETAIL}
        plain.stop()
        assert CALLS == ["look_up", "refuse"]
        with psycopg.connect(db, autocommit=True) as conn:
            events = SqlApi(conn).get_history(handle.execution_id)
        assert WorkflowReplayer(ENCRYPTED).replay(events).ok
        start_worker(ENCRYPTED, cache_size=0)
        handle.signal("go", "now")
    with Client(db, codecs=_codecs()) as keyed:  # (the run's result is encrypted)
        result = keyed.get_handle(handle.execution_id).result(timeout=30)
    assert result["got"]["ssn"] == "plain"
    assert result["denied"] == {"type": "Denied", "details": {"why": DETAIL}}
    assert CALLS == ["look_up", "refuse"]  # replayed, not run again


def test_the_encoding_of_a_local_outcome_leaves_its_name_and_an_old_plain_one_decodes():
    """The command's shape (unit): only the result and the failure's payloads become envelopes."""
    chain = Payloads(_codecs()).chain
    marker = {"type": "record_marker", "kind": "local_activity"}
    done = {**marker, "seq": 1, "value": {"name": "a", "result": [1]}}
    failure = {"error_type": "E", "message": "m", "non_retryable": True, "details": 5}
    failed = {**marker, "seq": 2, "value": {"name": "b", "failure": failure}}
    encoded = chain.encode_commands([done, failed])
    assert encoded[0]["value"]["name"] == "a" and "_harvest_codec" in encoded[0]["value"]["result"]
    assert (
        encoded[1]["value"]["failure"]["error_type"] == "E"
        and "_harvest_codec" in (encoded[1]["value"]["failure"]["details"])
    )
    assert chain.decode_tree(encoded) == [done, failed]
    assert chain.decode_tree([done, failed]) == [done, failed]  # a plain one reads as it is
    none = {**marker, "seq": 3, "value": {"name": "c", "result": None}}
    assert chain.encode_command(none) == none


@workflow
async def local_hoard(ctx, ssn: str) -> dict:
    got = await ctx.execute_activity(look_up, ssn)
    go = await ctx.wait_for_signal("go")
    return {"ssn": got["ssn"], "pad": len(got["pad"]), "go": go}


def test_a_reset_fork_carries_a_local_activitys_offloaded_encrypted_outcome(db, start_worker):
    """A fork's history carries the source's local marker, encrypted as it was, and its own copy of
    the offloaded result, so erasing (and deleting) the source leaves the fork replayable."""
    policy = Payloads(_codecs(), offload_bytes=1024)
    start_worker(App([local_hoard], [look_up], codecs=policy), cache_size=0)
    with Client(db, codecs=policy) as client:
        source = client.start_workflow(local_hoard, SECRET + "-big", workflow_id="local-hoard-1")
        wait_until(lambda: _markers(db, source.execution_id), "the marker")
        plan = wait_until(
            lambda: (
                (p := source.reset(source.history()[-1]["event_id"], "new code", dry_run=True))["valid"] and p
            ),
            "a reset point after the marker",
        )
        fork_id = source.reset(plan["to_event"], "new code")["new_execution_id"]
        ref = _markers(db, fork_id)[0]["result"]["_harvest_ref"]
        assert ref != _markers(db, source.execution_id)[0]["result"]["_harvest_ref"]  # its own copy
        with psycopg.connect(db, autocommit=True) as conn:
            SqlApi(conn).erase_payloads(source.execution_id, "ops")
            conn.execute("DELETE FROM harvest.executions WHERE id = %s", (source.execution_id,))  # retention
            owner = conn.execute("SELECT execution_id FROM harvest.payloads WHERE id = %s", (ref,)).fetchone()
        assert str(owner[0]) == fork_id
        assert SECRET not in _stored_text(db)
        CALLS.clear()
        fork = client.get_handle(fork_id, local_hoard)
        fork.signal("go", "now")
        assert fork.result(timeout=30) == {"ssn": SECRET + "-big", "pad": 2000, "go": "now"}
    assert CALLS == []  # the fork replayed the carried outcome
