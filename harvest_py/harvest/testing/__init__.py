"""The user-facing test kit: ``WorkflowEnvironment`` (a real database, a worker in this
process, activity mocks, time skipping), ``TestServer`` (one PostgreSQL per test session,
a database cloned per test) and ``WorkflowReplayer`` (replay recorded histories against the
current code, with no database). pytest fixtures: ``harvest.testing.pytest_plugin``
(docs/testing.md). Imported on its own; not exported from ``harvest``.

Names resolve lazily, so ``from harvest.testing import WorkflowReplayer`` loads no driver.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a checker sees the real names (not the hook's Any), so tests are checked too
    from harvest.testing.environment import ActivityCall, ScheduleFiring, WorkflowEnvironment
    from harvest.testing.replay import ReplayResult, WorkflowReplayer
    from harvest.testing.server import TestServer, default_server

_HOMES = {
    "ActivityCall": "harvest.testing.environment",
    "WorkflowEnvironment": "harvest.testing.environment",
    "ScheduleFiring": "harvest.testing.environment",
    "ReplayResult": "harvest.testing.replay",
    "WorkflowReplayer": "harvest.testing.replay",
    "TestServer": "harvest.testing.server",
    "default_server": "harvest.testing.server",
}

# Spelt out (not sorted(_HOMES)) so a checker sees what the module exports.
__all__ = [
    "ActivityCall",
    "ReplayResult",
    "ScheduleFiring",
    "TestServer",
    "WorkflowEnvironment",
    "WorkflowReplayer",
    "default_server",
]


if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        home = _HOMES.get(name)
        if home is None:
            raise AttributeError(f"module 'harvest.testing' has no attribute {name!r}")
        return getattr(importlib.import_module(home), name)
