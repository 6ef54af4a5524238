"""Shared setup for the operator tests: runs and dead letters made through the SQL API alone."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import cli_forks
import psycopg
from psycopg.types.json import Jsonb

REPO = Path(__file__).resolve().parents[2]
HARVEST = [sys.executable, "-c", "from harvest.cli import main; main()"]


def harvest(
    dsn: str | None, *args: str, timeout: float = 120, stdin: str | None = None
) -> subprocess.CompletedProcess:
    env = os.environ.copy()
    env.pop("HARVEST_DATABASE_URL", None)
    if dsn:
        env["HARVEST_DATABASE_URL"] = dsn
    else:
        # Given no database the CLI tries HTTP at localhost:web.port (3000 by default), where a
        # developer's own `harvest dev` may be answering: point it at a port nothing listens on.
        env["HARVEST_WEB__PORT"] = str(closed_port())
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO / "harvest_py"), str(Path(__file__).parent), env.get("PYTHONPATH")) if p
    )
    return cli_forks.run(args, env, input=stdin, timeout=timeout)


def closed_port() -> int:
    """A port nothing listens on: bound for a moment, then let go."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(
    conn: psycopg.Connection,
    name: str,
    workflow_id: str,
    queue: str = "default",
    search_attributes: dict | None = None,
    input: list | None = None,
) -> str:
    row = conn.execute(
        "SELECT execution_id FROM harvest.start_workflow(p_workflow_name => %s, p_input => %s,"
        " p_workflow_id => %s, p_queue => %s, p_search_attributes => %s)",
        (name, Jsonb(input or []), workflow_id, queue, Jsonb(search_attributes or {})),
    ).fetchone()
    return str(row[0])


def park(
    conn: psycopg.Connection,
    key: str,
    workflow: str = "wf",
    activity: str = "act",
    error_type: str = "Boom",
    continued_as_new: bool = False,
) -> tuple[str, int]:
    """Start wf/<key> whose activity fails non-retryably into the DLQ: (execution id, dead letter id).
    ``continued_as_new``: the run first continues as new, and its successor's activity fails (the
    id returned is still the first run's)."""
    first = execution_id = start(conn, workflow, key, queue=f"wq_{key}")
    if continued_as_new:
        task = conn.execute(
            "SELECT task_id, fencing_token FROM harvest.claim_tasks('decider', %s, 1)", ([f"wq_{key}"],)
        ).fetchone()
        conn.execute(
            "SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, %s)",
            (task[0], task[1], Jsonb([{"type": "continue_as_new", "input": []}])),
        )
        execution_id = conn.execute(
            "SELECT output ->> 'continued_as_new' FROM harvest.executions WHERE id = %s", (first,)
        ).fetchone()[0]
    task = conn.execute(
        "SELECT task_id, fencing_token FROM harvest.claim_tasks('decider', %s, 1)", ([f"wq_{key}"],)
    ).fetchone()
    conn.execute(
        "SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, %s)",
        (
            task[0],
            task[1],
            Jsonb(
                [
                    {
                        "type": "schedule_activity",
                        "seq": 1,
                        "name": activity,
                        "input": ["secret-input"],
                        "queue": f"aq_{key}",
                        "options": {},
                    }
                ]
            ),
        ),
    )
    task = conn.execute(
        "SELECT task_id, fencing_token FROM harvest.claim_tasks('w', %s, 1)", ([f"aq_{key}"],)
    ).fetchone()
    outcome = conn.execute(
        "SELECT harvest.fail_activity(%s, %s, %s)",
        (
            task[0],
            task[1],
            Jsonb(
                {"error_type": error_type, "message": f"failed {key}", "non_retryable": True, "details": None}
            ),
        ),
    ).fetchone()[0]
    assert outcome == "dead_lettered", outcome
    dead_id = conn.execute(
        "SELECT id FROM harvest.dead_letters WHERE execution_id = %s", (execution_id,)
    ).fetchone()[0]
    return first, dead_id


def _decide(conn: psycopg.Connection, run: str, queue: str, commands: list) -> None:
    """Claim the workflow task of ``queue`` (the run's alone) and complete it with ``commands``."""
    task = conn.execute(
        "SELECT task_id, fencing_token FROM harvest.claim_tasks('decider', ARRAY[%s], 1)", (queue,)
    ).fetchone()
    last = conn.execute("SELECT last_event_id FROM harvest.executions WHERE id = %s", (run,)).fetchone()[0]
    conn.execute(
        "SELECT * FROM harvest.complete_workflow_task(%s, %s, %s, %s)",
        (task[0], task[1], last, Jsonb(commands)),
    )


def _activity(seq: int, name: str, queue: str, options: dict | None = None) -> dict:
    return {"type": "schedule_activity", "seq": seq, "name": name, "queue": queue, "options": options or {}}


def _claimed_activity(conn: psycopg.Connection, queue: str) -> tuple:
    return conn.execute(
        "SELECT task_id, fencing_token FROM harvest.claim_tasks('acts', ARRAY[%s], 1)", (queue,)
    ).fetchone()


def failed_run(conn: psycopg.Connection, name: str, workflow_id: str) -> str:
    """A run of ``name`` FAILED as a dead_letter=False activity leaves one: its activity ``ship``
    (one attempt) failed, and its workflow failed with it. Returns its id."""
    queue = f"q-{workflow_id}"
    run = start(conn, name, workflow_id, queue)
    options = {"dead_letter": False, "retry": {"max_attempts": 1}}
    _decide(conn, run, queue, [_activity(1, "ship", f"{queue}-acts", options)])
    task = _claimed_activity(conn, f"{queue}-acts")
    conn.execute(
        "SELECT harvest.fail_activity(%s, %s, %s)",
        (task[0], task[1], Jsonb({"error_type": "Bug", "message": "the bad deploy"})),
    )
    _decide(conn, run, queue, [{"type": "fail_workflow", "failure": {"error_type": "ActivityFailure"}}])
    return run


def runs_across_a_deploy(
    conn: psycopg.Connection, name: str, workflow_ids: list[str]
) -> tuple[list[str], datetime]:
    """RUNNING runs of ``name`` the good code took through its activity ``charge`` (scheduled and
    completed) before a deploy, and the bad code after it (it scheduled ``ship_v2``, a step no
    gate marks: the fixed code cannot replay it). Returns the runs and the deploy's time (the
    database's clock between the two: each statement here is its own transaction)."""
    runs = []
    for workflow_id in workflow_ids:
        queue = f"q-{workflow_id}"
        run = start(conn, name, workflow_id, queue)
        _decide(conn, run, queue, [_activity(1, "charge", f"{queue}-acts")])
        task = _claimed_activity(conn, f"{queue}-acts")
        conn.execute("SELECT harvest.complete_activity(%s, %s, %s)", (task[0], task[1], Jsonb("charged")))
        runs.append(run)
    deploy = conn.execute("SELECT clock_timestamp()").fetchone()[0]
    for run, workflow_id in zip(runs, workflow_ids, strict=True):
        _decide(conn, run, f"q-{workflow_id}", [_activity(2, "ship_v2", f"q-{workflow_id}-acts")])
    return runs, deploy
