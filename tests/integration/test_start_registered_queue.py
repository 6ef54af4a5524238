"""A start that names no queue goes where the fleet registered its workflow
(harvest.registered_workflows): the one queue its workers registered it on, a refusal naming the
queues when they registered it on several, and ``default`` when nobody registered it yet. Over
SQL there is no served App to read the workflow's declared queue from (the HTTP route's
``declared_queue``), so without this a workflow declared ``@workflow(queue="billing")`` was sent
to ``default``: refused with HR010 there when ``default`` had other registrations, or left
waiting for a worker that never polls it."""

from __future__ import annotations

import asyncio
import json

import psycopg
import pytest
from operator_helpers import harvest

from harvest import AsyncClient, Client
from harvest.core.errors import InvalidArgument


def register(conn: psycopg.Connection, queue: str, *names: str) -> None:
    conn.execute("SELECT harvest.register_workflows(%s, %s)", ([queue], list(names)))


def queue_of(conn: psycopg.Connection, execution_id: str) -> tuple[str, str]:
    """The run's queue and its first workflow task's."""
    return conn.execute(
        "SELECT e.queue, t.queue FROM harvest.executions AS e "
        "JOIN harvest.tasks AS t ON t.execution_id = e.id AND t.kind = 'workflow' WHERE e.id = %s",
        (execution_id,),
    ).fetchone()


def runs(conn: psycopg.Connection) -> int:
    return conn.execute("SELECT count(*) FROM harvest.executions").fetchone()[0]


def test_the_cli_start_without_queue_goes_to_the_one_queue_the_workflow_is_registered_on(
    db: str, conn: psycopg.Connection
) -> None:
    register(conn, "default", "greet")  # default has registrations: the old start was HR010
    register(conn, "billing", "invoice")
    done = harvest(db, "workflow", "start", "invoice", "--input-json", "[1]", "-o", "json")
    assert done.returncode == 0, done.stderr
    assert queue_of(conn, json.loads(done.stdout)["execution_id"]) == ("billing", "billing")
    # A queue given is taken as given (and checked against the registrations as before).
    done = harvest(db, "workflow", "start", "greet", "--queue", "default", "-o", "json")
    assert done.returncode == 0, done.stderr
    assert queue_of(conn, json.loads(done.stdout)["execution_id"]) == ("default", "default")


def test_a_workflow_registered_on_several_queues_needs_the_queue_named(
    db: str, conn: psycopg.Connection
) -> None:
    register(conn, "eu", "invoice")
    register(conn, "us", "invoice")
    done = harvest(db, "workflow", "start", "invoice")
    lines = [x for x in done.stderr.splitlines() if x.strip()]
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0] == (
        'error: workflow "invoice" is registered on 2 queues (eu, us): say which: '
        "--queue on the CLI, queue= in Python, p_queue in SQL"
    )
    assert runs(conn) == 0  # nothing written
    done = harvest(db, "workflow", "start", "invoice", "--queue", "us", "-o", "json")
    assert done.returncode == 0, done.stderr
    assert queue_of(conn, json.loads(done.stdout)["execution_id"]) == ("us", "us")


def test_a_worker_polling_default_and_another_queue_keeps_starts_on_default(
    db: str, conn: psycopg.Connection
) -> None:
    # A worker registers every workflow of its App on every queue it polls (worker.py), so a
    # fleet polling default and billing has each name on both: its by-name starts went to default
    # and ran there, and still do (refusing them would break every multi-queue fleet).
    register(conn, "default", "greet", "invoice")
    register(conn, "billing", "greet", "invoice")
    done = harvest(db, "workflow", "start", "invoice", "-o", "json")
    assert done.returncode == 0, done.stderr
    assert queue_of(conn, json.loads(done.stdout)["execution_id"]) == ("default", "default")


def test_a_workflow_nobody_registered_goes_to_default(db: str, conn: psycopg.Connection) -> None:
    register(conn, "billing", "invoice")  # another workflow's registration changes nothing
    done = harvest(db, "workflow", "start", "not_yet_deployed", "-o", "json")
    assert done.returncode == 0, done.stderr
    assert queue_of(conn, json.loads(done.stdout)["execution_id"]) == ("default", "default")


def test_every_start_path_by_name_without_a_queue_resolves_it(
    db: str, conn: psycopg.Connection, client: Client
) -> None:
    register(conn, "default", "greet")
    register(conn, "billing", "invoice")
    # The client by name (no definition to read a declared queue from).
    assert queue_of(conn, client.start_workflow("invoice", 1).execution_id)[0] == "billing"
    handle = client.signal_with_start("invoice", 2, workflow_id="sws-1", signal="go")
    assert queue_of(conn, handle.execution_id)[0] == "billing"

    async def batch() -> list[str]:  # the async client's group commit: harvest.start_workflows
        async with await AsyncClient.connect(db) as aclient:
            handles = await asyncio.gather(*(aclient.start_workflow("invoice", n) for n in range(3)))
        return [h.execution_id for h in handles]

    assert {queue_of(conn, e)[0] for e in asyncio.run(batch())} == {"billing"}
    # psql: the queue omitted, a batch's element without one (the plain batch, and one with a policy).
    row = conn.execute("SELECT execution_id FROM harvest.start_workflow('invoice', '[3]')").fetchone()
    assert queue_of(conn, row[0])[0] == "billing"
    rows = conn.execute(
        "SELECT execution_id FROM harvest.start_workflows(%s) ORDER BY n",
        (
            json.dumps(
                [
                    {"workflow_name": "invoice"},
                    {"workflow_name": "greet"},
                    {"workflow_name": "invoice", "workflow_id": "k-1", "reuse_policy": "reject_duplicate"},
                ]
            ),
        ),
    ).fetchall()
    assert [queue_of(conn, r[0])[0] for r in rows] == ["billing", "default", "billing"]
    register(conn, "us", "invoice")
    with pytest.raises(InvalidArgument, match=r"registered on 2 queues \(billing, us\)"):
        client.start_workflow("invoice", 4)


def test_a_schedule_created_over_sql_without_queue_fires_on_the_registered_queue(
    db: str, conn: psycopg.Connection
) -> None:
    register(conn, "default", "greet")
    register(conn, "billing", "invoice")
    made = harvest(db, "schedule", "create-workflow", "--name", "nightly", "--workflow", "invoice",
                   "--every", "1h", "-o", "json")  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["queue"] == "billing"
    register(conn, "us", "invoice")
    done = harvest(db, "schedule", "create-workflow", "--name", "nightly2", "--workflow", "invoice",
                   "--every", "1h")  # fmt: skip
    assert done.returncode == 2 and "registered on 2 queues (billing, us)" in done.stderr, done.stderr


def test_a_batch_start_without_queue_resolves_it_once_per_name(conn: psycopg.Connection) -> None:
    """A plain start that named no queue ran _start_queue twice: once in _starts_plain's check
    and again for its row in _start_plain_batch (a batch of N starts of one name: N + 1 calls).
    Now once per distinct name of the batch (the check reads the registrations by name itself),
    counted by the server (track_functions). The runs still go to the registered queue, and an
    ambiguous name is still refused, the batch writing nothing."""
    register(conn, "billing", "invoice")
    register(conn, "default", "greet")
    conn.execute("SET track_functions = 'all'")

    def counted() -> int:
        # (The backend's counts not yet flushed: this transaction's and maybe the last ones'.)
        return conn.execute(
            "SELECT coalesce(sum(calls), 0) FROM pg_catalog.pg_stat_xact_user_functions"
            " WHERE schemaname = 'harvest' AND funcname = '_start_queue'"
        ).fetchone()[0]

    def calls(starts: list[dict]) -> int:
        with conn.transaction():
            before = counted()
            conn.execute("SELECT * FROM harvest.start_workflows(%s)", (json.dumps(starts),))
            return counted() - before

    assert calls([{"workflow_name": "invoice"}]) == 1
    assert calls([{"workflow_name": "invoice"}] * 3 + [{"workflow_name": "greet"}] * 2) == 2
    assert calls([{"workflow_name": "invoice", "queue": "billing"}] * 2) == 0
    queues = conn.execute(
        "SELECT workflow_name, queue, count(*) FROM harvest.executions GROUP BY 1, 2 ORDER BY 1, 2"
    ).fetchall()
    assert queues == [("greet", "default", 2), ("invoice", "billing", 6)]
    register(conn, "eu", "split")
    register(conn, "us", "split")
    with pytest.raises(psycopg.Error, match="registered on 2 queues"):
        conn.execute(
            "SELECT * FROM harvest.start_workflows(%s)", (json.dumps([{"workflow_name": "split"}] * 2),)
        )
    assert runs(conn) == 8


@pytest.mark.parametrize(
    "default_registered",
    [True, False],
    ids=["default-has-registrations", "default-has-none"],
)
def test_a_batch_mixing_named_and_unnamed_queues_starts_as_its_starts_one_by_one(
    conn: psycopg.Connection, default_registered: bool
) -> None:
    """_starts_plain's check no longer resolves an unnamed queue (the name registered anywhere, or
    no registration on default): a batch of starts with and without a queue, of names registered
    on default, on another queue, on several, or nowhere, starts each run on the queue
    start_workflow gives it alone, or is refused as one of its starts alone is (same SQLSTATE;
    which one, when two are refused, is the path's order)."""
    register(conn, "billing", "invoice")
    register(conn, "eu", "split")
    register(conn, "us", "split")
    if default_registered:
        register(conn, "default", "greet")
    starts = [
        {"workflow_name": "invoice"},
        {"workflow_name": "invoice", "queue": "billing"},
        {"workflow_name": "greet"},
        {"workflow_name": "split", "queue": "eu"},
        {"workflow_name": "nobody"},
        {"workflow_name": "nobody", "queue": "billing"},
        {"workflow_name": "split"},
    ]

    def alone(start: dict) -> str:
        """The run's queue, or the SQLSTATE of the refusal, of the start alone (rolled back)."""
        try:
            with conn.transaction(force_rollback=True):
                (execution_id,) = conn.execute(
                    "SELECT execution_id FROM harvest.start_workflow(%s, '[]', NULL, %s)",
                    (start["workflow_name"], start.get("queue")),
                ).fetchone()
                return queue_of(conn, execution_id)[0]
        except psycopg.Error as exc:
            return f"refused {exc.sqlstate}"

    def batch(of: list[dict]) -> list[str] | str:
        try:
            with conn.transaction(force_rollback=True):
                rows = conn.execute(
                    "SELECT execution_id FROM harvest.start_workflows(%s) ORDER BY n", (json.dumps(of),)
                ).fetchall()
                return [queue_of(conn, row[0])[0] for row in rows]
        except psycopg.Error as exc:
            return f"refused {exc.sqlstate}"

    # Every prefix of the batch (so each kind of start meets the plain path and the other).
    for end in range(1, len(starts) + 1):
        of = starts[:end]
        each = [alone(start) for start in of]
        refused = [answer for answer in each if answer.startswith("refused")]
        for order, expected in ((of, each), (of[::-1], each[::-1])):
            answer = batch(order)
            if refused:
                assert answer in refused, (order, each, answer)
            else:
                assert answer == expected, (order, each)
