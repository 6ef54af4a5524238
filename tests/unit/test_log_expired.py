"""The scanner's line for a workflow task it took back says why: its lease ran out, or its worker
was lost (harvest.expire_lost_workers' row has error_type WorkerLost), which no activity
failure counts (worker.py log_expired, metrics attempts_expired)."""

from __future__ import annotations

import logging

from harvest.worker.worker import log_expired

ROW = {
    "task_id": 7,
    "kind": "workflow",
    "outcome": "released",
    "workflow_type": "wf",
    "activity": None,
    "execution_id": "e1",
    "attempt": 1,
}


def test_a_workflow_task_of_a_lost_worker_is_logged_as_lost(caplog):
    with caplog.at_level(logging.INFO, logger="harvest"):
        log_expired([ROW | {"error_type": "WorkerLost"}, ROW | {"error_type": None}])
    lines = [r.getMessage() for r in caplog.records]
    assert "its worker was lost (WorkerLost)" in lines[0], lines
    assert "its lease ran out" in lines[1], lines


def test_a_released_workflow_task_counts_no_activity_failure():
    from harvest.telemetry.metrics import Metrics

    counted = []

    class Counter:
        def inc(self) -> None:
            counted.append(1)

    class Fake:
        def activity_failed(self, *labels):
            return Counter()

    rows = [
        ROW | {"error_type": "WorkerLost"},
        ROW | {"kind": "activity", "activity": "a", "error_type": "WorkerLost"},
    ]
    Metrics.attempts_expired(Fake(), rows)  # type: ignore[arg-type]
    assert counted == [1]
