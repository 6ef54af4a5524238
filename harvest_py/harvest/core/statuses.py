"""Execution statuses the Python side reasons about (the SQL's executions_status_check).

A *live* run has not ended: ``RUNNING``, or ``PAUSED`` (docs/lifecycle.md: it takes
signals and keeps its business key, but none of its work starts until it is resumed).
A client waiting for a result keeps waiting through a pause.
"""

from __future__ import annotations

RUNNING = "RUNNING"
PAUSED = "PAUSED"
LIVE_STATUSES = frozenset({RUNNING, PAUSED})
