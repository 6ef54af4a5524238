"""The user-facing test kit: ``WorkflowEnvironment`` (a real database, a worker in this
process, activity mocks, time skipping), ``TestServer`` (one PostgreSQL per test session,
a database cloned per test) and ``WorkflowReplayer`` (replay recorded histories against the
current code, with no database). pytest fixtures: ``harvest.testing.pytest_plugin``
(docs/testing.md). Imported on its own; not exported from ``harvest``.

Names resolve lazily, so ``from harvest.testing import WorkflowReplayer`` loads no driver.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "ActivityCall": "harvest.testing.environment",
    "WorkflowEnvironment": "harvest.testing.environment",
    "ReplayResult": "harvest.testing.replay",
    "WorkflowReplayer": "harvest.testing.replay",
    "TestServer": "harvest.testing.server",
    "default_server": "harvest.testing.server",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'harvest.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
