"""SIGTERM ends the worker's process after its shutdown grace even while a ``def`` activity
blocks its thread or process, a local one too (harvest/core/threads.py, harvest/worker/
executors.py). The task is released to another worker at the grace; the process used to wait
at its exit for the activity's code to end (a ThreadPoolExecutor's threads, the loop's default
executor's too, are joined at exit; a ProcessPoolExecutor waits for its calls), so a worker
stopped during a ten-minute call took ten minutes to go, whatever the grace."""

from __future__ import annotations

import signal
import subprocess

import pytest
from apps import wf_blocked
from harness import query, wait_until

pytestmark = pytest.mark.chaos


@pytest.mark.parametrize("executor", ["thread", "process", "local"])
def test_a_stopped_worker_exits_though_a_def_activity_still_blocks(
    chaos_db, workers, client, executor, tmp_path
):
    mark = tmp_path / "blocked"
    a = workers.start(shutdown_grace=0.5, env={"CHAOS_BLOCKED_MARK": str(mark)})
    handle = client.start_workflow(wf_blocked, executor)

    def leased() -> bool:
        return bool(
            query(
                chaos_db,
                "SELECT 1 FROM harvest.tasks WHERE execution_id = %s AND kind = %s"
                " AND lease_owner IS NOT NULL",
                (handle.execution_id, "workflow" if executor == "local" else "activity"),
            )
        )

    wait_until(mark.exists, 20, "the activity to block")
    # (A local activity runs inside its workflow task, which an idle worker claims in a
    # transaction it keeps open for the decision, committed a moment later when the decision
    # takes longer: the lease is seen once that commit is in.)
    wait_until(leased, 20, "the task's lease to be committed")
    workers.kill(a, signal.SIGTERM)
    try:  # the grace is 0.5 s: this bound only tells a stop from a hang (the call blocks 600 s)
        code = a.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the worker did not exit after SIGTERM:\n{workers.log(a)}")
    assert code == 0, workers.log(a)
    assert not leased()  # released for another worker at once
