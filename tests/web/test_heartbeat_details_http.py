"""A running activity's last heartbeat on the run's stack over HTTP (GET /workflows/{id}/stack)
and on the dashboard's run page: its details are a payload, so a token made with payloads: false
sees when it heartbeat and the details' size, never the details; the dashboard shows them only
in full (?payloads=full), as it shows the timeline's."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from web_helpers import api_client, authorizer_for

from harvest import App, activity, workflow

SECRET = "ZqHeartbeat5521Secret"
GO = threading.Event()


@activity(start_to_close="5m")
async def pg_crawl(ctx) -> None:
    await ctx.aheartbeat({"page": 3, "note": SECRET})
    await asyncio.to_thread(GO.wait, 60)


@workflow
async def pg_crawler(ctx) -> None:
    await ctx.execute_activity(pg_crawl)


APP = App([pg_crawler], [pg_crawl])


def _token(db: str, name: str, scope: str, payloads: bool) -> str:
    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute(
            "SELECT secret FROM harvest.create_api_token(%s, %s, p_payloads => %s)", (name, scope, payloads)
        ).fetchone()[0]


@pytest.fixture
def crawling(db: str, start_worker) -> Iterator[str]:
    """A run whose activity has heartbeat its details and runs on; its execution id."""
    GO.clear()
    start_worker(APP)
    with api_client(db) as api:
        eid = api.post("/workflows/pg_crawler/start", json={}).json()["execution_id"]
        deadline = time.monotonic() + 30
        while not _heartbeat(api.get(f"/workflows/{eid}/stack").json()):
            assert time.monotonic() < deadline, "the activity never heartbeat"
            time.sleep(0.05)
    yield eid
    GO.set()  # (before the worker stops: it waits for the activity)


def _heartbeat(stack: dict[str, Any]) -> dict[str, Any] | None:
    found = [a for a in stack.get("pending_activities", []) if a.get("heartbeat_at")]
    return found[0] if found else None


def test_a_payload_token_sees_the_details_and_a_token_without_payloads_their_size(db: str, crawling) -> None:
    full, bare = _token(db, "full", "read", True), _token(db, "bare", "read", False)
    with api_client(db, authorizer=authorizer_for(db), profile="production") as api:
        seen = api.get(f"/workflows/{crawling}/stack", headers={"Authorization": f"Bearer {full}"})
        assert seen.status_code == 200, seen.text
        shown = _heartbeat(seen.json())
        assert shown["heartbeat_details"] == {"page": 3, "note": SECRET}, shown
        assert shown["status"] == "running" and shown["heartbeat_details_clipped"] is False, shown
        hidden = api.get(f"/workflows/{crawling}/stack", headers={"Authorization": f"Bearer {bare}"})
        assert hidden.status_code == 200, hidden.text
        assert SECRET not in hidden.text, hidden.text
        shown = _heartbeat(hidden.json())
        assert shown["heartbeat_at"] is not None, shown
        assert shown["heartbeat_details"] == {"redacted": True, "bytes": shown["heartbeat_details_bytes"]}, (
            shown
        )
        assert hidden.json()["redacted"] is True


def test_the_run_page_shows_the_last_heartbeat_redacted_unless_full(db: str, crawling) -> None:
    bare, operator = _token(db, "bare-ui", "admin", False), _token(db, "op-ui", "operate", True)
    with api_client(db, authorizer=authorizer_for(db), profile="production") as api:
        page = api.get(f"/ui/workflows/{crawling}", headers={"Authorization": f"Bearer {operator}"})
        assert page.status_code == 200, page.text
        assert "Last heartbeat" in page.text and 'class="heartbeat"' in page.text
        assert SECRET not in page.text and "redacted (" in page.text
        page = api.get(
            f"/ui/workflows/{crawling}?payloads=full", headers={"Authorization": f"Bearer {operator}"}
        )
        assert page.status_code == 200, page.text
        assert SECRET in page.text
        for query in ("", "?payloads=full"):
            page = api.get(f"/ui/workflows/{crawling}{query}", headers={"Authorization": f"Bearer {bare}"})
            assert page.status_code == 200, (query, page.text)
            assert SECRET not in page.text and "Last heartbeat" in page.text, query
