"""The worker: joins the database and the runtime (claim loop, dispatch, heartbeats, scanners).

Names resolve lazily (PEP 562): importing a submodule (``harvest.worker.options``, which the
config reads for its tunables) does not load the claim loop, the database driver or the runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harvest.core.lazy import lazy_exports

if TYPE_CHECKING:
    from harvest.worker.activities import ActivityContext
    from harvest.worker.options import WorkerOptions
    from harvest.worker.worker import Worker

__all__ = ["ActivityContext", "Worker", "WorkerOptions"]

# public name -> the module that defines it (imported on first access)
_WHERE = {
    "ActivityContext": "harvest.worker.activities",
    "Worker": "harvest.worker.worker",
    "WorkerOptions": "harvest.worker.options",
}


__getattr__, __dir__ = lazy_exports(__name__, globals(), _WHERE, __all__)
