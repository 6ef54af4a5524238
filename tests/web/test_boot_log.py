"""The web process's boot names a shard it could not read: what went wrong, in one line, no secret.

``HarvestState.open`` reads every shard's schema version at boot and logs a shard that fails,
without stopping the boot. The line carried the raw error text (a database error's DETAIL, which
can quote data; a connection error's DSN fields) and called every failure "not reachable", even a
database's answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator

import psycopg
import pytest

from harvest.config import load_config
from harvest.core.errors import ShardUnavailable
from harvest.shard.router import ShardRouter
from harvest.web import app as web_app
from harvest.web.app import HarvestState, management_app
from harvest.web.auth import DevAuthorizer

PASSWORD = "hunter2-boot-secret"
DETAIL = "DETAIL-MARKER tenant acme card 4111"


class _FailingPools:
    """Shard pools whose every shard fails its first read with the given error."""

    def __init__(self, errors: dict[int, BaseException]):
        self.errors = errors
        self.router = ShardRouter.single(0)
        self.shards = tuple(errors)

    def dsn(self, shard: int) -> str:
        return f"postgresql://harvest:{PASSWORD}@db-{shard}.internal:5432/harvest"

    @contextlib.asynccontextmanager
    async def api(self, shard: int) -> AsyncIterator[None]:
        raise self.errors[shard]
        yield  # (a generator)


def _database_error(db: str) -> psycopg.Error:
    """A real server error with a SQLSTATE, a first line quoting a DSN and a DETAIL."""
    with psycopg.connect(db, autocommit=True) as conn:
        try:
            conn.execute(
                "DO $$ BEGIN RAISE EXCEPTION 'cannot read postgresql://harvest:%@db-1.internal/harvest', "
                f"'{PASSWORD}' USING DETAIL = '{DETAIL}', ERRCODE = '42501'; END $$"
            )
        except psycopg.Error as exc:
            return exc
    raise AssertionError("the DO block raised nothing")


def test_a_shard_failing_at_boot_is_named_with_its_kind_and_first_line_redacted(
    db: str, caplog: pytest.LogCaptureFixture
) -> None:
    unreachable = psycopg.OperationalError(
        f'connection to server at "db-0.internal" (10.0.0.7), port 5432 failed: Connection refused\n'
        f"\tIs the server running on that host? password={PASSWORD}"
    )
    errors: dict[int, BaseException] = {0: unreachable, 1: _database_error(db), 2: ShardUnavailable(2)}
    state = HarvestState(
        config=load_config(env={}), profile="dev", authorizer=DevAuthorizer(), pools=_FailingPools(errors)
    )
    with caplog.at_level(logging.WARNING, logger="harvest.web"):
        asyncio.run(state.open())
    lines = {r.getMessage() for r in caplog.records if r.name == "harvest.web"}
    said = "\n".join(lines)
    assert PASSWORD not in said and "DETAIL-MARKER" not in said and "db-0.internal" not in said, said
    assert all("\n" not in line for line in lines), said
    by_shard = {s: [line for line in lines if line.startswith(f"harvest: shard {s} ")] for s in errors}
    assert by_shard[0] == ["harvest: shard 0 unreachable at startup: OperationalError: Connection refused"]
    (refused,) = by_shard[1]
    assert refused.startswith("harvest: shard 1 refused at startup: InsufficientPrivilege: cannot read"), said
    assert refused.endswith("(SQLSTATE 42501)"), said
    (down,) = by_shard[2]
    assert down.startswith("harvest: shard 2 unreachable at startup: ShardUnavailable: shard 2 is"), said
    assert state.opened  # a shard down at boot is named, not fatal


def test_one_database_failing_at_boot_is_logged_the_same_way(
    db: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one-database boot logged the raw error as well ("could not open its database at
    startup: <error>"): the same kind and one redacted line now."""
    from starlette.testclient import TestClient

    error = _database_error(db)

    async def refused(*_args: object) -> bool:
        raise error

    monkeypatch.setattr(web_app, "_warn_if_not_migrated", refused)
    app = management_app(dsn=f"{db} password={PASSWORD}", config=load_config(env={}), profile="dev")
    with caplog.at_level(logging.WARNING, logger="harvest.web"), TestClient(app):
        pass
    lines = [
        r.getMessage() for r in caplog.records if r.name == "harvest.web" and "at startup" in r.getMessage()
    ]
    said = "\n".join(lines)
    assert len(lines) == 1 and PASSWORD not in said and "DETAIL-MARKER" not in said, said
    assert lines[0].startswith(
        "harvest: the management API's database refused at startup: InsufficientPrivilege"
    )
    assert lines[0].endswith("(SQLSTATE 42501)"), said


def test_one_unreachable_database_is_said_at_once_as_a_shards_is(caplog: pytest.LogCaptureFixture) -> None:
    """A sharded server's pools fail fast: a shard whose server refuses the connect is named at
    boot and each request answers 503 at once (what the connect met in the log). One database's pool waited
    out open_timeout instead, at boot and on every request, and said only "PoolTimeout: pool
    initialization incomplete" and "could not be reached". It fails fast too now, in the shards'
    words ("cannot be reached now (...)"). (No time is compared: the old pool's wait ended in
    another message, which the test tells apart.)"""
    from starlette.testclient import TestClient

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dsn = f"postgresql://harvest:{PASSWORD}@127.0.0.1:{port}/harvest"
    app = management_app(dsn=dsn, config=load_config(env={}), profile="dev")
    app.state.harvest.open_timeout = 20.0
    with caplog.at_level(logging.WARNING, logger="harvest.web"), TestClient(app) as client:
        answer = client.get("/workflows", headers={"Accept": "application/json"})
    assert answer.status_code == 503, answer.text
    error = answer.json()["error"]
    # What the connect met is the log's, under the request id: the caller may be anyone
    # (docs/security.md, "What an outage tells a caller").
    said_to_caller = (
        "the database could not be reached; retry "
        "(request {}: the server's log has the cause under outage {})"
    )
    assert error["message"] == said_to_caller.format(error["request_id"], error["request_id"][:8]), error
    lines = [r.getMessage() for r in caplog.records if "at startup" in r.getMessage()]
    said = "harvest: the management API's database unreachable at startup: ServerUnreachable: "
    assert lines == [said + "the database cannot be reached now (Connection refused)"], lines
    (logged,) = [r.getMessage() for r in caplog.records if error["request_id"] in r.getMessage()]
    assert logged.endswith(": the database cannot be reached now (Connection refused)"), logged
    assert PASSWORD not in answer.text + "\n".join(lines) + logged
