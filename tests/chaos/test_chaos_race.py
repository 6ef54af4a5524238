"""Several worker processes racing on one queue, with and without random SIGKILLs."""

from __future__ import annotations

import random
import time

import pytest
from apps import churn_expected, race_expected, wf_churn, wf_race
from harness import check_all_histories, overlapping_runs, query, wait_until

pytestmark = pytest.mark.chaos


def _wait_all_done(dsn: str, timeout: float) -> None:
    def done() -> bool:
        return (
            query(dsn, "SELECT count(*) AS n FROM harvest.executions WHERE status = 'RUNNING'")[0]["n"] == 0
        )

    wait_until(done, timeout, "every workflow to finish", interval=0.2)


def _outputs(dsn: str) -> dict[str, tuple[str, object]]:
    rows = query(dsn, "SELECT id::text AS id, status, output FROM harvest.executions")
    return {r["id"]: (r["status"], r["output"]) for r in rows}


def test_racing_workers_run_each_invocation_once(chaos_db, workers, client):
    for _ in range(4):
        workers.start(concurrency=8, wait=False)
    for proc in workers.procs:
        workers.wait_registered(proc)

    handles = {client.start_workflow(wf_race, n).execution_id: n for n in range(200)}
    _wait_all_done(chaos_db, 60)

    outputs = _outputs(chaos_db)
    wrong = {e: outputs[e] for e, n in handles.items() if outputs[e] != ("COMPLETED", race_expected(n))}
    assert not wrong, f"{len(wrong)} workflows ended wrongly, e.g. {list(wrong.items())[:3]}"
    assert check_all_histories(chaos_db) == 200

    # Every invocation ran exactly once (no kills here, so no retries either) ...
    per_invocation = query(chaos_db, "SELECT execution_id, seq, count(*) AS n FROM chaos_runs GROUP BY 1, 2")
    assert len(per_invocation) == 200 * 6
    assert {r["n"] for r in per_invocation} == {1}
    assert query(chaos_db, "SELECT count(*) AS n FROM chaos_runs WHERE finished_at IS NULL")[0]["n"] == 0
    # ... so no two runs of one invocation overlapped; and the work was really shared.
    assert overlapping_runs(chaos_db) == []
    pids = {r["worker_pid"] for r in query(chaos_db, "SELECT DISTINCT worker_pid FROM chaos_runs")}
    assert len(pids) >= 2, f"only {pids} did any work"
    for proc in workers.procs:
        assert proc.poll() is None, workers.log(proc)
    assert "refused" not in workers.all_logs() and "Traceback" not in workers.all_logs()


def test_random_sigkills_lose_nothing_and_duplicate_nothing(chaos_db, workers, client):
    rng = random.Random(1234)
    for _ in range(3):
        workers.start(concurrency=6, wait=False)
    for proc in workers.procs:
        workers.wait_registered(proc)

    handles: dict[str, int] = {}
    kills = kills_holding_work = 0
    # Six seconds of kills, and on until one of them killed a worker holding work: at CI's load
    # (30 in CI 61b) freshly started workers may claim nothing before their turn comes, and six
    # seconds passed with five kills of idle workers. (Bounded: a minute.)
    deadline, limit = time.monotonic() + 6, time.monotonic() + 60
    while time.monotonic() < deadline or (kills_holding_work == 0 and time.monotonic() < limit):
        # Keep work in flight while the kills go on.
        for _ in range(6):
            n = len(handles)
            handles[client.start_workflow(wf_churn, n).execution_id] = n
        time.sleep(rng.uniform(0.4, 0.8))
        victim = rng.choice(workers.alive())
        held = query(
            chaos_db,
            "SELECT count(*) AS n FROM harvest.tasks WHERE status = 'running' AND lease_owner LIKE %s",
            (f"%-{victim.pid}-%",),
        )[0]["n"]
        workers.kill(victim)
        kills += 1
        kills_holding_work += held > 0
        workers.start(concurrency=6, wait=False)
    assert kills >= 5 and kills_holding_work >= 1, (kills, kills_holding_work)
    _wait_all_done(chaos_db, 40)

    outputs = _outputs(chaos_db)
    wrong = {e: outputs[e] for e, n in handles.items() if outputs[e] != ("COMPLETED", churn_expected(n))}
    assert not wrong, f"{len(wrong)} workflows ended wrongly, e.g. {list(wrong.items())[:3]}"
    assert check_all_histories(chaos_db) == len(handles)
    # At least once: every invocation finished a run; a rerun only follows a killed holder,
    # so the finished runs of one invocation never overlap.
    assert (
        query(
            chaos_db,
            """
        SELECT execution_id, seq FROM chaos_runs GROUP BY 1, 2
        HAVING count(*) FILTER (WHERE finished_at IS NOT NULL) = 0""",
        )
        == []
    )
    assert overlapping_runs(chaos_db) == []
