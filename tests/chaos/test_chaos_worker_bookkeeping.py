"""A worker that re-claims a task it still runs (its stale twin) must keep tracking both handlers.

Scenario: the first attempt of an activity outlives its lease (a 1 s heartbeat_timeout,
no heartbeats) on worker A; the retry of the same task row is claimed by A again.
When the stale first attempt ends (its late result is refused), the second attempt
is still running on A, and SIGTERM must let it finish within ``shutdown_grace``.
"""

from __future__ import annotations

import signal

import pytest
from apps import wf_single
from harness import check_history, history, runs, wait_until

pytestmark = pytest.mark.chaos


def test_sigterm_drains_a_retry_reclaimed_while_its_stale_attempt_still_ran(chaos_db, workers, client):
    a = workers.start(shutdown_grace=10)
    # Attempt 1 sleeps 2.5 s (its lease is 1 s), attempt 2 heartbeats through 3 s, both on A.
    handle = client.start_workflow(wf_single, "stale_then:2.5,3", 20.0, 1.0)
    wait_until(
        lambda: "finished after its lease was lost" in workers.log(a),
        15,
        "the stale first attempt to end and be refused",
    )
    in_flight = runs(chaos_db, handle.execution_id)
    assert [(r["attempt"], r["worker_pid"], r["finished_at"] is not None) for r in in_flight] == [
        (1, a.pid, True),
        (2, a.pid, False),
    ], "the retry should be running on A now"

    workers.kill(a, signal.SIGTERM)  # 10 s of grace: attempt 2 needs ~2 s more
    assert a.wait(timeout=15) == 0, workers.log(a)
    after = runs(chaos_db, handle.execution_id)
    assert after[1]["finished_at"] is not None, (
        "worker A exited without letting its in-flight attempt 2 finish within shutdown_grace: "
        "the stale attempt 1 (same task id) removed attempt 2 from Worker._inflight"
    )

    workers.start()  # finishes the run whatever happened above
    assert handle.result(timeout=20) in ("run2", "run3")
    check_history(history(chaos_db, handle.execution_id))
