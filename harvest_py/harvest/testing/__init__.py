"""The user-facing test kit: replay recorded histories against the current workflow code
(``WorkflowReplayer``). Imported on its own; not exported from ``harvest``."""

from harvest.testing.replay import ReplayResult, WorkflowReplayer

__all__ = ["ReplayResult", "WorkflowReplayer"]
