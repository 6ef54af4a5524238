"""The database server itself crashes mid-drain: every PostgreSQL process is killed outright
(SIGKILL: the OOM killer, a host that loses the container), twice, while worker processes
decide runs and run activities. The server comes back by crash recovery on the same port.
The workers ride it out without a restart (docs/failures.md, "Crash recovery": a report whose
connection failed is sent again, and a repeat of one that had committed is refused as stale),
and every run ends with the result it would have had, with no command applied twice and no
activity result recorded twice."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from apps import churn_expected, wf_churn
from harness import WorkerProcs, check_history, create_side_tables, history, query, wait_until

import harvest
from harvest.db.embedded import EmbeddedPostgres
from harvest.db.migrate import Migrator

pytestmark = pytest.mark.chaos

RUNS = 30


@pytest.fixture
def server() -> Iterator[EmbeddedPostgres]:
    # synchronous_commit on (the default): a commit a worker was told of is in the WAL the
    # server has written, which a kill of the server's processes does not take back.
    pg = EmbeddedPostgres(settings={"fsync": "off"}, in_memory=True)
    pg.start()
    try:
        Migrator(pg.dsn).run()
        create_side_tables(pg.dsn)
        yield pg
    finally:
        pg.stop()


def _server_pids(pg: EmbeddedPostgres) -> list[int]:
    """The postmaster (first line of postmaster.pid) and every process it started."""
    postmaster = int((pg.data_dir / "postmaster.pid").read_text().split()[0])
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # (gone since the listing)
            continue
        if int(fields[1]) == postmaster:
            children.append(int(stat.parent.name))
    return [postmaster, *children]


def _crash(pg: EmbeddedPostgres) -> None:
    """Kill every process of the server at once, then start it again: crash recovery."""
    pids = _server_pids(pg)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    wait_until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in pids), 15, "the server to be gone")
    pg.started = False  # (what resume() starts again: the data, the settings and the port)
    time.sleep(0.5)  # the workers find it gone: their calls fail and are sent again
    pg.resume()


def _finished_activities(dsn: str) -> int:
    return query(dsn, "SELECT count(*) AS n FROM chaos_runs WHERE finished_at IS NOT NULL")[0]["n"]


def test_a_server_killed_outright_twice_mid_drain_loses_and_repeats_nothing(
    server: EmbeddedPostgres, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    dsn = server.dsn
    workers = WorkerProcs(dsn, tmp_path)
    request.node._chaos_workers = workers  # (their logs join a failure's report: conftest.py)
    try:
        a = workers.start(concurrency=8)
        b = workers.start(concurrency=8)
        with harvest.Client(dsn) as client:
            handles = [client.start_workflow(wf_churn, n) for n in range(RUNS)]
        total = RUNS * len(churn_expected(0))
        # The first crash a third of the way in, the second once the drain has gone on after it.
        wait_until(lambda: _finished_activities(dsn) >= total // 3, 60, "a third of the activities to run")
        _crash(server)
        wait_until(lambda: _finished_activities(dsn) >= 2 * total // 3, 90, "the drain to go on after it")
        _crash(server)

        with harvest.Client(dsn) as client:
            for n, handle in enumerate(handles):
                got = client.get_handle(handle.execution_id).result(timeout=120)
                assert got == churn_expected(n), f"run {n}: {got}"
        for handle in handles:
            check_history(history(dsn, handle.execution_id))
        assert workers.alive() == [a, b], f"a worker did not ride out the crashes:\n{workers.all_logs()}"
        # Nothing is left leased or queued for the runs, and every worker is still registered.
        assert query(dsn, "SELECT count(*) AS n FROM harvest.tasks")[0]["n"] == 0
        active = query(dsn, "SELECT pid FROM harvest.workers WHERE status = 'active' ORDER BY pid")
        assert sorted(r["pid"] for r in active) == sorted([a.pid, b.pid])
    finally:
        workers.close()
