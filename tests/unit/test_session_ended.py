"""One classification of "the session ended or its connection failed under the call"
(harvest/core/sqlstates.py), read by the report resends (harvest/db/resend.py) and by the
transaction-retry metric's ``connection`` reason (harvest/telemetry/metrics.py)."""

from __future__ import annotations

import psycopg
import pytest

from harvest.core.sqlstates import session_ended
from harvest.db.pools import database_unreachable
from harvest.db.resend import connection_lost
from harvest.telemetry.metrics import retry_reason

ENDED = ["08000", "08001", "08003", "08004", "08006", "08007", "08P01"]  # class 08
ENDED += ["57P01", "57P02", "57P03", "57P05", "25P03"]  # the server ended the session
ANSWERS = ["40001", "40P01", "55P03", "55000", "55006", "57014", "57P04", "53300", "53200", "53100"]
ANSWERS += ["58030", "F0000", "HV000", "23505", "P0001", "HR002", "25P02"]


@pytest.mark.parametrize("sqlstate", ENDED)
def test_a_session_that_ended_is_a_lost_connection_to_the_resends_and_the_metric(sqlstate: str) -> None:
    exc = psycopg.errors.lookup(sqlstate)("ended")
    assert session_ended(sqlstate)
    assert connection_lost(exc)
    assert database_unreachable(exc)  # a shard down, a 503, an unavailable shard of a fan-out
    assert retry_reason(exc) == "connection"


@pytest.mark.parametrize("sqlstate", ANSWERS)
def test_the_databases_answers_are_not(sqlstate: str) -> None:
    assert not session_ended(sqlstate)
    try:
        exc = psycopg.errors.lookup(sqlstate)("an answer")
    except KeyError:  # a Harvest SQLSTATE: psycopg has no class for it
        exc = psycopg.DatabaseError("an answer")
    assert not connection_lost(exc)
    assert not database_unreachable(exc)  # the database answered: not a shard down, nor a 503
    assert retry_reason(exc) != "connection"


def test_no_sqlstate_is_not_a_session_that_ended() -> None:
    # (A failure with no SQLSTATE is the client's own: each caller says what it is.)
    assert not session_ended(None)


def test_a_client_error_with_no_sqlstate_is_lost_only_when_it_is_a_connection_failure() -> None:
    assert connection_lost(psycopg.OperationalError("server closed the connection unexpectedly"))
    assert not connection_lost(psycopg.InterfaceError("the connection is closed"))
    assert not connection_lost(psycopg.ProgrammingError("query parameter missing"))


def test_a_pool_with_no_connection_is_unreachable_but_a_closed_pool_is_not_resent() -> None:
    import psycopg_pool

    assert database_unreachable(psycopg_pool.PoolTimeout("couldn't get a connection after 5.00 sec"))
    assert database_unreachable(psycopg_pool.PoolClosed("the pool is closed"))
    assert not connection_lost(psycopg_pool.PoolClosed("the pool is closed"))  # the worker is stopping
