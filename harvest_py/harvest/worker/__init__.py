"""The worker: joins the database and the runtime (claim loop, dispatch, heartbeats, scanners)."""

from harvest.worker.activities import ActivityContext
from harvest.worker.options import WorkerOptions
from harvest.worker.worker import Worker

__all__ = ["ActivityContext", "Worker", "WorkerOptions"]
