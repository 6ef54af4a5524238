"""/health/ready of an API whose database is at max_connections: 503 ``not_ready`` with reason
``ServerFull`` and the remedy (raise max_connections or lower the pools' sizes), not the
"unreachable, or not migrated" of a server that is down (docs/operations.md, "Database
restarts and a full server"). A real server with room for a handful of sessions: the test fills
it, then ends the API's backends so its pool must connect into the full server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from outage_helpers import full, small_server, wait_until
from web_helpers import api_client

from harvest.db.embedded import EmbeddedPostgres

pytestmark = pytest.mark.chaos


@pytest.fixture(scope="module")
def full_server() -> Iterator[EmbeddedPostgres]:
    with small_server() as pg:
        yield pg


def test_readiness_says_a_server_at_max_connections_is_full(full_server: EmbeddedPostgres) -> None:
    with api_client(full_server.dsn) as api:
        assert api.get("/health/ready").status_code == 200
        with full(full_server.dsn, "harvest-api"):
            answers = [api.get("/health/ready") for _ in range(3)]  # (the first may meet the ended one)
            # A route's call meets the pool's ServerFull too: the outage's 503, not a 500
            # (ServerFull lacked ServerUnreachable.refused, which the 503's wording reads).
            one = api.get("/workflows/00000000-0000-0000-0000-000000000001")
        # A slot free: ready again once the pool's next connect (at most RECONNECT_CAP_SECS on).
        wait_until(lambda: api.get("/health/ready").status_code == 200, "ready again", timeout=10)
    assert one.status_code == 503, one.text
    assert one.json()["error"]["message"].startswith("the database could not be reached; retry"), one.text
    last = answers[-1]
    assert last.status_code == 503, last.text
    body = last.json()
    # Before: reason ServerUnreachable, "unreachable, or not migrated: harvest migrate".
    assert body["reason"] == "ServerFull", body
    assert "max_connections" in body["error"]["message"] and "53300" in body["error"]["message"]
    assert "migrate" not in body["error"]["message"]
