"""What every example's ``python -m examples.<name>`` shares: a database (the embedded
PostgreSQL, or ``HARVEST_DATABASE_URL``), a worker for the example's App in the same process,
and a client for its scenario.

A real deployment runs the worker as its own process (``harvest worker module:app``, see
examples/standalone_worker); the examples run one beside the scenario so that one command
shows the whole thing.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from harvest import App, AsyncClient, QueryFailed
from harvest.db.embedded import EmbeddedPostgres
from harvest.db.migrate import Migrator
from harvest.worker import Worker

Scenario = Callable[[AsyncClient], Awaitable[Any]]


def say(line: str) -> None:
    """The examples' narration, on stdout."""
    print(line, flush=True)  # noqa: T201


@contextmanager
def database() -> Iterator[str]:
    """``HARVEST_DATABASE_URL`` (migrated here if it needs it), else an embedded PostgreSQL,
    started, migrated, and removed at the end."""
    dsn = os.environ.get("HARVEST_DATABASE_URL")
    if dsn:
        Migrator(dsn).run()
        yield dsn
        return
    say("starting an embedded PostgreSQL ...")
    server = EmbeddedPostgres()
    try:
        dsn = server.start()
        Migrator(dsn).run()
        yield dsn
    finally:
        server.stop()


async def run_with_worker(app: App, dsn: str, scenario: Scenario, **worker_options: Any) -> Any:
    """Run a worker for ``app`` while ``scenario(client)`` runs; stop it (draining) after."""
    worker = Worker(app, dsn, **{"poll_interval": 1.0, **worker_options})
    running = asyncio.create_task(worker.run())
    try:
        async with await AsyncClient.connect(dsn) as client:
            return await scenario(client)
    finally:
        worker.request_stop()
        await running


async def query_until(
    client: AsyncClient,
    workflow: Any,
    workflow_id: str,
    name: str,
    done: Callable[[Any], bool],
    timeout: float = 30.0,
) -> Any:
    """Ask query ``name`` of the current run of ``workflow_id`` until ``done(answer)``. A query
    answers from the run's last completed step, so what was just sent may not show yet, and a
    run that has not taken its first step has no state to read (its handler raises)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            answer = await client.get_handle(workflow=workflow, workflow_id=workflow_id).query(name)
        except QueryFailed:
            if loop.time() > deadline:
                raise
        else:
            if done(answer) or loop.time() > deadline:
                return answer
        await asyncio.sleep(0.05)


def main(app: App, scenario: Scenario, **worker_options: Any) -> int:
    """The body of an example's ``__main__``: a database, a worker, the scenario."""
    with database() as dsn:
        asyncio.run(run_with_worker(app, dsn, scenario, **worker_options))
    return 0


if __name__ == "__main__":
    sys.exit("run an example instead: python -m examples.<name> (examples/README.md)")
