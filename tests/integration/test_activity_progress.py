"""A long activity's progress, visible while it runs (docs/activities.md, "Progress"): a real
worker's activity heartbeats details (``ctx.aheartbeat``), and the run's stack answers each
running activity's last heartbeat, when and its details, in every face: the SQL function,
`harvest workflow stack` over SQL and over HTTP, as the payloads are shown elsewhere (encrypted
ones decoded by --app, described without it) and clipped over 4096 bytes."""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from outage_helpers import wait_until
from served_cli import served as served_api
from served_cli import transports

from harvest import App, Client, activity, workflow
from harvest.core.codecs import AesGcmCodec, Payloads, ZlibCodec

SECRET = "PROGRESS-SECRET-7731"
KEY = hashlib.sha256(b"progress-k1").digest()
HERE = __name__  # the module `--app` names (tests/integration is on sys.path)

# The test lets the activity on step by step: each step's heartbeat is read while it waits.
STEPS: dict[int, threading.Event] = {}


async def _step(n: int) -> None:
    await asyncio.to_thread(STEPS.setdefault(n, threading.Event()).wait, 60)


@activity(start_to_close="5m")
async def crawl(ctx, pages: int) -> int:
    for page in range(1, pages + 1):
        await ctx.aheartbeat({"page": page, "of": pages, "note": SECRET})
        await _step(page)
    await ctx.aheartbeat({"blob": "x" * 6000})  # over the stack's 4096 bytes
    await _step(pages + 1)
    return pages


@workflow
async def crawler(ctx, pages: int) -> int:
    return await ctx.execute_activity(crawl, pages)


PLAIN = App([crawler], [crawl])
KEYED = App([crawler], [crawl], codecs=Payloads([ZlibCodec(), AesGcmCodec({"k1": KEY})]))


@pytest.fixture(autouse=True)
def fresh_steps(start_worker) -> Iterator[None]:
    """No step taken yet; after the test every step let go, before its worker stops (which
    waits for the activity)."""
    STEPS.clear()
    yield
    for event in STEPS.values():  # (a failed test lets the activity end)
        event.set()
    for n in range(1, 10):
        STEPS.setdefault(n, threading.Event()).set()


@pytest.fixture
def served(db: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with served_api(db, monkeypatch):
        yield


def _stack(db: str, execution_id: str) -> dict[str, Any]:
    with psycopg.connect(db) as conn:
        return conn.execute("SELECT harvest.get_execution_stack(%s)", (execution_id,)).fetchone()[0]


def _activity(db: str, execution_id: str) -> dict[str, Any] | None:
    found = _stack(db, execution_id)["pending_activities"]
    return found[0] if found else None


def _on_page(db: str, execution_id: str, page: int) -> dict[str, Any] | None:
    found = _activity(db, execution_id)
    details = (found or {}).get("heartbeat_details") or {}
    return found if isinstance(details, dict) and details.get("page") == page else None


def test_the_stack_shows_a_running_activitys_last_heartbeat_in_every_face(
    db, served, start_worker, client
) -> None:
    start_worker(PLAIN)
    handle = client.start_workflow(crawler, 2, workflow_id="crawl-plain")
    eid = handle.execution_id
    first = wait_until(lambda: _on_page(db, eid, 1), "the first heartbeat on the stack")
    assert first["status"] == "running" and first["heartbeat_at"] is not None, first
    assert first["heartbeat_details"] == {"page": 1, "of": 2, "note": SECRET}, first
    assert first["heartbeat_details_clipped"] is False and first["heartbeat_details_bytes"] > 0, first
    for how, r in transports(db, "workflow", "stack", eid, "-o", "json").items():
        assert r.exit_code == 0, (how, r.output)
        [shown] = json.loads(r.stdout)["pending_activities"]
        assert shown["heartbeat_details"] == {"page": 1, "of": 2, "note": SECRET}, (how, shown)
        assert shown["heartbeat_at"], (how, shown)
    # The activity goes on: the stack follows its latest heartbeat while it runs.
    STEPS.setdefault(1, threading.Event()).set()
    wait_until(lambda: _on_page(db, eid, 2), "the second heartbeat on the stack")
    for how, r in transports(db, "workflow", "stack", eid).items():
        assert r.exit_code == 0, (how, r.output)
        [line] = [ln for ln in r.stdout.splitlines() if "last heartbeat" in ln]
        assert line.startswith("  seq 1 last heartbeat "), (how, line)
        assert json.loads(line.split(": ", 1)[1]) == {"page": 2, "of": 2, "note": SECRET}, (how, line)
    # Large details are clipped: their first 200 characters and their size, said so.
    STEPS.setdefault(2, threading.Event()).set()
    big = wait_until(
        lambda: (a := _activity(db, eid)) and a.get("heartbeat_details_clipped") and a, "the large heartbeat"
    )
    assert big["heartbeat_details_bytes"] == len(json.dumps({"blob": "x" * 6000})), big
    assert (
        big["heartbeat_details"] == '{"blob": "' + "x" * 190 + f"... ({big['heartbeat_details_bytes']} bytes)"
    )
    for how, r in transports(db, "workflow", "stack", eid).items():
        [line] = [ln for ln in r.stdout.splitlines() if "last heartbeat" in ln]
        assert line.endswith(f"... ({big['heartbeat_details_bytes']} bytes)") and len(line) < 300, (how, line)
    STEPS.setdefault(3, threading.Event()).set()
    assert handle.result(timeout=30) == 2
    assert _stack(db, eid)["pending_activities"] == []
    # A heartbeat is no event of the history.
    with psycopg.connect(db) as conn:
        types = {
            r[0]
            for r in conn.execute("SELECT event_type FROM harvest.events WHERE execution_id = %s", (eid,))
        }
    assert not any("eartbeat" in t for t in types), types


def test_encrypted_heartbeat_details_are_decoded_by_app_and_described_without(
    db, served, start_worker
) -> None:
    start_worker(KEYED)
    with Client(db, codecs=KEYED.payloads) as client:
        eid = client.start_workflow(crawler, 1, workflow_id="crawl-keyed").execution_id
    wait_until(lambda: (a := _activity(db, eid)) and a.get("heartbeat_at"), "the first heartbeat")
    for how, r in transports(db, "workflow", "stack", eid, "--app", f"{HERE}:KEYED", "-o", "json").items():
        assert r.exit_code == 0, (how, r.output)
        [shown] = json.loads(r.stdout)["pending_activities"]
        assert shown["heartbeat_details"] == {"page": 1, "of": 1, "note": SECRET}, (how, shown)
    for how, r in transports(db, "workflow", "stack", eid, "-o", "json").items():
        assert r.exit_code == 0, (how, r.output)
        [shown] = json.loads(r.stdout)["pending_activities"]
        assert shown["heartbeat_details"] == "<encrypted (key k1)>", (how, shown)
        assert SECRET not in r.output, how
