"""The worker: joins the database and the runtime (claim loop, dispatch, heartbeats, scanners).

Names resolve lazily (PEP 562): importing a submodule (``harvest.worker.options``, which the
config reads for its tunables) does not load the claim loop, the database driver or the runtime.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value  # resolved once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
