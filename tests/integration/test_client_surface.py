"""The client surface a developer holds, the same on Client and AsyncClient: a closed client
opens nothing more, a malformed id or timeout is an InvalidArgument, a run that does not
exist is NotFound for its history as for describe(), and signal() answers the same on both."""

from __future__ import annotations

import asyncio
import threading
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from harvest import App, AsyncClient, Client, workflow
from harvest.core.errors import InvalidArgument, NotFound


@workflow
async def waiter(ctx) -> str:
    return await ctx.wait_for_signal("go")


APP = App(workflows=[waiter])
MISSING = "00001a24-0000-4000-8000-000000000000"


def _listen_backends(db: str) -> int:
    with psycopg.connect(db, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND query ILIKE 'LISTEN%'"
        ).fetchone()
    assert row is not None
    return int(row[0])


def _listen_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("harvest-listen"))


def test_a_closed_client_opens_no_listener(db: str) -> None:
    """A wait after close() opened a LISTEN connection (and a Client its thread) that nothing
    closed any more, then failed on the closed pool with the pool's own error."""
    client = Client(db)
    client.close()
    threads, backends = _listen_threads(), _listen_backends(db)
    with pytest.raises(InvalidArgument, match="this Client is closed"):
        client.execute_workflow(waiter, result_timeout=1)
    assert (_listen_threads(), _listen_backends(db)) == (threads, backends)

    async def closed_async() -> int:
        aclient = await AsyncClient.connect(db)
        await aclient.close()
        with pytest.raises(InvalidArgument, match="this AsyncClient is closed"):
            await aclient.execute_workflow(waiter, result_timeout=1)
        return len(aclient._hubs)

    assert asyncio.run(closed_async()) == 0
    assert _listen_backends(db) == backends


def test_every_call_of_a_closed_client_says_it_is_closed(db: str) -> None:
    """Only the waits said so: a start, a signal or a describe on a closed client raised the
    connection pool's own error (psycopg_pool.PoolClosed: "the pool 'pool-3' is already closed")."""
    with Client(db) as open_client:
        run = open_client.start_workflow(waiter).execution_id
    client = Client(db)
    client.close()
    for call in (
        lambda: client.start_workflow(waiter),
        lambda: client.get_handle(run).signal("go", 1),
        lambda: client.get_handle(run).describe(),
    ):
        with pytest.raises(InvalidArgument, match="this Client is closed: make a new one"):
            call()

    async def closed_async() -> None:
        aclient = await AsyncClient.connect(db)
        await aclient.close()
        for call in (
            lambda: aclient.start_workflow(waiter),
            lambda: aclient.get_handle(run).signal("go", 1),
            lambda: aclient.get_handle(run).describe(),
        ):
            with pytest.raises(InvalidArgument, match="this AsyncClient is closed: make a new one"):
                await call()

    asyncio.run(closed_async())


def test_a_malformed_execution_id_or_timeout_is_an_invalid_argument(db: str) -> None:
    with Client(db) as client:
        for bad in ("not-a-uuid", ""):
            with pytest.raises(InvalidArgument, match="is not a UUID") as refused:
                client.get_handle(bad)
            assert f"get_handle(workflow_id={bad!r})" in str(refused.value)  # (a workflow id, most likely)
        handle = client.start_workflow(waiter)
        for timeout in (float("nan"), -5, "soon"):  # (NaN waited for good)
            with pytest.raises(InvalidArgument, match="timeout"):
                handle.result(timeout=timeout)

    async def on_async() -> None:
        async with await AsyncClient.connect(db) as aclient:
            with pytest.raises(InvalidArgument, match="is not a UUID"):
                aclient.get_handle("not-a-uuid")
            with pytest.raises(InvalidArgument, match="timeout"):
                await aclient.get_handle(handle.execution_id).result(timeout=float("nan"))

    asyncio.run(on_async())


def test_the_history_of_a_run_that_does_not_exist_is_not_found(db: str) -> None:
    with Client(db) as client:
        handle = client.get_handle(MISSING)
        with pytest.raises(NotFound):
            handle.describe()
        with pytest.raises(NotFound):
            handle.history()


def test_an_execution_id_in_any_uuid_spelling_is_the_run(db: str) -> None:
    """get_handle takes the spellings Python's UUID does; the database reads only some of them
    (urn:uuid: and braces were refused in its words), so the handle carries the canonical form.
    The hint for an id that may be a workflow id quotes it as given."""
    with Client(db) as client:
        run = client.start_workflow(waiter, workflow_id="spelled")
        canonical = run.execution_id
        for spelling in (f"urn:uuid:{canonical}", "{" + canonical + "}", canonical.upper().replace("-", "")):
            handle = client.get_handle(spelling)
            assert handle.execution_id == canonical
            assert handle.describe()["workflow_id"] == "spelled"
        upper = str(uuid.uuid4()).upper()
        with pytest.raises(NotFound) as missing:
            client.get_handle(upper).describe()
        assert f"get_handle(workflow_id={upper!r})" in str(missing.value)


def test_a_workflow_id_shaped_like_a_uuid_passed_as_the_execution_id_is_told_how_to_look_it_up(
    db: str,
) -> None:
    """A workflow id that is not a UUID, passed where the execution id goes, is told at once to
    pass it as workflow_id=; one shaped like a UUID (a common choice of business key) passes
    that check and got a plain NotFound. Telling the two apart would need a lookup by workflow
    id alone, which no index serves (the executions' lead with workflow_name), so the NotFound
    of a handle given an execution id always says it."""
    key = str(uuid.uuid4())
    with Client(db) as client:
        client.start_workflow(waiter, workflow_id=key)
        handle = client.get_handle(key)
        hint = f"if {key!r} is a workflow id, not an execution id: get_handle(workflow_id={key!r})"
        for call in (handle.describe, lambda: handle.signal("noise", 1), lambda: handle.result(timeout=1)):
            with pytest.raises(NotFound) as missing:
                call()
            assert hint in str(missing.value)
        assert client.get_handle(workflow_id=key).describe()["workflow_id"] == key  # (what the hint says)
        with pytest.raises(NotFound) as gone:  # any id given: the lookup that would tell is not made
            client.get_handle(MISSING).describe()
        assert f"get_handle(workflow_id={MISSING!r})" in str(gone.value)

    async def on_async() -> None:
        async with await AsyncClient.connect(db) as aclient:
            with pytest.raises(NotFound) as missing:
                await aclient.get_handle(key).describe()
            assert hint in str(missing.value)

    asyncio.run(on_async())


def test_a_run_retention_deleted_is_said_to_be_one_naming_the_setting(db: str) -> None:
    """The NotFound of a run retention deleted says retention may have deleted it and names its
    max_age (the id is one the shard minted before the last sweep's cutoff), with no hint that
    it is a workflow id; an id the database cannot judge so lists both possibilities."""
    with Client(db) as client:
        run = client.start_workflow(waiter, workflow_id="kept-a-day")
        run.terminate("done")
        with psycopg.connect(db, autocommit=True) as conn:
            later = (datetime.now(UTC) + timedelta(days=3)).isoformat()
            conn.execute("SELECT set_config('harvest.fake_now', %s, false)", (later,))
            conn.execute("SELECT harvest.set_retention('1 day')")
            assert conn.execute("SELECT harvest.run_retention()").fetchone()[0]["deleted"] >= 1
        handle = client.get_handle(run.execution_id)
        for call in (handle.describe, lambda: handle.signal("noise", 1), lambda: handle.result(timeout=1)):
            with pytest.raises(NotFound) as gone:
                call()
            said = str(gone.value)
            assert f"execution {run.execution_id} does not exist: retention may have deleted it" in said
            assert "retention max_age is 1 day" in said and "harvest retention status" in said
            assert "workflow id" not in said, (
                "the id is one the shard minted: no hint that it is a workflow id"
            )
        key = str(uuid.uuid4())  # another shard's id as far as this one can tell: both are said
        with pytest.raises(NotFound) as unknown:
            client.get_handle(key).describe()
        said = str(unknown.value)
        assert "or the id of a run retention deleted (harvest retention status shows its max_age)" in said
        assert f"get_handle(workflow_id={key!r})" in said


def test_signal_answers_its_event_id_on_both_clients(db: str) -> None:
    with Client(db) as client:
        handle = client.start_workflow(waiter)
        first = handle.signal("noise", 1)

        async def on_async() -> int:
            async with await AsyncClient.connect(db) as aclient:
                return await aclient.get_handle(handle.execution_id).signal("noise", 2)

        second = asyncio.run(on_async())
        history = handle.history()
    assert (first, second) == (2, 3)
    assert [e["event_type"] for e in history if e["event_id"] in (first, second)] == ["SignalReceived"] * 2
