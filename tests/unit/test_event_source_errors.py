"""Which errors of an event source a follower rides out (harvest/db/event_stream.py,
source_unreachable; `harvest events tail` on shards tries such a shard again): an outage that
may pass, never an answer that retrying would meet again."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import errors

from harvest.core.errors import ConfigError, ConnectionRejected, DatabaseUnavailable
from harvest.db.event_stream import source_unreachable


@pytest.mark.parametrize(
    "exc",
    [
        DatabaseUnavailable("cannot connect to database 127.0.0.1:1/x: Connection refused"),
        psycopg.OperationalError("server closed the connection unexpectedly"),
        errors.AdminShutdown("terminating connection due to administrator command"),
        ConnectionRefusedError(),
    ],
    ids=["connect refused", "connection lost", "server shut down", "socket"],
)
def test_an_outage_is_ridden_out(exc: BaseException) -> None:
    assert source_unreachable(exc)


@pytest.mark.parametrize(
    "exc",
    [
        ConnectionRejected("cannot connect to database h:5432/x: password authentication failed for user"),
        ConfigError("shard 1 has no url in [shards] urls"),
        errors.QueryCanceled("canceling statement due to statement timeout"),
        errors.LockNotAvailable("canceling statement due to lock timeout"),
        errors.InsufficientPrivilege("permission denied for function list_events"),
        ValueError("a bug"),
    ],
    ids=["refused login", "no url", "statement timeout", "lock timeout", "privilege", "bug"],
)
def test_an_answer_is_not(exc: BaseException) -> None:
    assert not source_unreachable(exc)
