"""An error the database answered with is not "the database cannot be reached", over HTTP.

psycopg calls a SQL function's 55000, a lock timeout's 55P03 and a statement timeout's 57014 an
OperationalError, as it calls a lost connection; the management API and the dashboard answered
every OperationalError 503 "the database could not be reached; retry", and on shards a fan-out
listed the shard in ``unavailable_shards`` (a ``partial`` answer, 200). Now only a failed or
lost connection is a 503 (harvest.db.pools.database_unreachable): the SQL error is a 500 with
the server's line (a bug to report, not a network to check), a statement timeout a 504. Each
kind is raised by ``harvest.list_executions`` (the workflow list's function) replaced in the
test's own clone, on the real connection of the request.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from starlette.testclient import TestClient
from web_helpers import api_client

from harvest.config import load_config
from harvest.web.ui import dashboard_app

BUG = "a bug in a new function"
BODIES = {
    "raised_55000": f"RAISE EXCEPTION '{BUG}' USING ERRCODE = '55000';",
    "lock_not_available": "PERFORM count(*) FROM public.held;",  # (the table held: 55P03 in 0.1 s)
    "statement_timeout": "PERFORM pg_sleep(60);",  # (the database's statement_timeout: 57014)
    "lost_connection": "PERFORM pg_sleep(60);",  # (the backend terminated while it sleeps)
}
# What the management API answers for each: status, code, and a word of the message.
API = {
    "raised_55000": (500, "database_error", BUG),
    "lock_not_available": (500, "database_error", "lock timeout"),
    "statement_timeout": (504, "query_canceled", "was rolled back"),
    "lost_connection": (503, "database_unavailable", "no shard could be read"),
}


def _sabotage(dsn: str, kind: str) -> None:
    """``harvest.list_executions`` (same arguments and result) replaced by one that meets ``kind``."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        args, result = conn.execute(
            "SELECT pg_get_function_arguments(oid), pg_get_function_result(oid) FROM pg_proc "
            "WHERE pronamespace = 'harvest'::regnamespace AND proname = 'list_executions'"
        ).fetchone()
        setting = "SET lock_timeout = '100ms'" if kind == "lock_not_available" else ""
        conn.execute(
            f"CREATE OR REPLACE FUNCTION harvest.list_executions({args}) RETURNS {result} "
            f"LANGUAGE plpgsql {setting} AS $$ BEGIN {BODIES[kind]} END $$"
        )
        if kind == "lock_not_available":
            conn.execute("CREATE TABLE public.held (id int)")
            conn.execute("GRANT SELECT ON public.held TO PUBLIC")
        if kind == "statement_timeout":  # (this clone only: its connections from now on)
            (name,) = conn.execute("SELECT current_database()").fetchone()
            conn.execute(f"ALTER DATABASE \"{name}\" SET statement_timeout = '2s'")


@pytest.fixture
def meet(request: pytest.FixtureRequest) -> Iterator:
    """``meet(dsn, kind)``: sabotage ``dsn`` for ``kind``, and for the duration of the test hold
    what it needs (the table locked; a thread ending the backend that sleeps in the function)."""
    stops: list = []

    def meet(dsn: str, kind: str) -> None:
        _sabotage(dsn, kind)
        if kind == "lock_not_available":
            holder = psycopg.connect(dsn)
            holder.execute("LOCK TABLE public.held IN ACCESS EXCLUSIVE MODE")
            stops.append(holder.close)
        elif kind == "lost_connection":
            done = threading.Event()
            thread = threading.Thread(target=_terminate_sleepers, args=(dsn, done), daemon=True)
            thread.start()
            stops.append(lambda: (done.set(), thread.join(10)))

    yield meet
    for stop in stops:
        stop()


def _terminate_sleepers(dsn: str, done: threading.Event) -> None:
    """End every backend of ``dsn``'s database that sleeps in the replaced function, until done."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        while not done.is_set():
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event = 'PgSleep' AND pid <> pg_backend_pid()"
            )
            time.sleep(0.02)


def _shards_env(two_shards: dict[int, str]) -> dict[str, str]:
    return {
        "HARVEST_SHARDS__READABLE": "0,1",
        "HARVEST_SHARDS__WRITABLE": "0,1",
        "HARVEST_SHARDS__URLS__0": two_shards[0],
        "HARVEST_SHARDS__URLS__1": two_shards[1],
    }


@pytest.mark.parametrize("kind", API)
def test_the_management_api_answers_a_sql_error_as_itself_and_only_a_lost_connection_503(
    db: str, meet, kind: str
) -> None:
    meet(db, kind)
    with api_client(db) as api:
        answer = api.get("/workflows")
    status, code, said = API[kind]
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["code"] == code and said in answer.json()["error"]["message"]
    assert ("Retry-After" in answer.headers) is (status == 503)


@pytest.mark.parametrize("kind", ["raised_55000", "statement_timeout", "lost_connection"])
def test_on_shards_a_sql_error_is_the_lists_answer_not_a_partial_one(
    two_shards: dict[int, str], meet, kind: str
) -> None:
    """Shard 1's function fails: its SQL error (a bug every retry meets) is the answer, not a
    ``partial`` list naming shard 1 unavailable; its lost connection still is partial."""
    meet(two_shards[1], kind)
    with api_client(None, env=_shards_env(two_shards)) as api:
        answer = api.get("/workflows")
    if kind == "lost_connection":
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "partial" and answer.json()["unavailable_shards"] == [1]
    else:
        status, code, said = API[kind]
        assert answer.status_code == status, answer.text
        assert answer.json()["error"]["code"] == code and said in answer.json()["error"]["message"]


# The dashboard's page for each: status and a word of the page.
PAGE = {
    "raised_55000": (500, BUG),
    "lock_not_available": (500, "lock timeout"),
    "statement_timeout": (504, "statement timeout"),
    "lost_connection": (503, "no shard could be read"),
}


@pytest.mark.parametrize("kind", PAGE)
def test_the_dashboard_shows_a_sql_error_as_itself_and_only_a_lost_connection_as_a_503(
    db: str, meet, kind: str
) -> None:
    meet(db, kind)
    with TestClient(dashboard_app(dsn=db, profile="dev", timeout=10.0)) as ui:
        page = ui.get("/workflows")
    status, said = PAGE[kind]
    assert page.status_code == status, page.text
    assert said in page.text


@pytest.mark.parametrize("kind", ["raised_55000", "statement_timeout", "lost_connection"])
def test_the_dashboard_on_shards_shows_a_shards_sql_error_not_a_partial_page(
    two_shards: dict[int, str], meet, kind: str
) -> None:
    meet(two_shards[1], kind)
    config = load_config(env=_shards_env(two_shards))
    with TestClient(dashboard_app(config=config, profile="dev", timeout=10.0)) as ui:
        page = ui.get("/workflows")
    if kind == "lost_connection":
        assert page.status_code == 200, page.text
        assert "could not be read" in page.text  # the partial page names shard 1
    else:
        status, said = PAGE[kind]
        assert page.status_code == status, page.text
        assert said in page.text
