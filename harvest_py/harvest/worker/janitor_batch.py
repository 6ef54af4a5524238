"""The retention janitor's batch size under a statement_timeout (docs/operations.md, "Retention").

A managed PostgreSQL often sets a ``statement_timeout`` on the database (30 s is common). A
``run_retention`` batch that runs past it is cancelled (SQLSTATE 57014) and rolled back whole:
nothing of it is kept. Retried at the same size it is cancelled again, every round, and the
janitor deletes nothing for ever. So a batch the timeout ended halves the size the janitor asks
for (down to :data:`FLOOR`), and the round goes on at once with the smaller batch; one WARNING
says each new size and the remedy, never one a round. After :data:`GROW_AFTER` batches in a row
succeed at a reduced size, it doubles again, up to the configured size (``retention.batch_size``
as ``harvest retention set --batch-size`` stored it). A grown size that the timeout ends again
doubles the successes the next growth needs (up to :data:`GROW_AFTER_MAX`), so a size on the
edge is retried ever more rarely rather than every few batches. Counting successes is simpler
and steadier than timing the batches against the timeout (which the janitor would have to read
and which a busy machine's timing would blur); its cost is one cancelled batch per growth tried.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FLOOR = 10  # the smallest batch the janitor shrinks to (a configured size below it is kept)
GROW_AFTER = 8  # successful batches in a row at a reduced size before it doubles
GROW_AFTER_MAX = 512
DEFAULT_BATCH = 500  # run_retention's size when none is configured


@dataclass
class JanitorBatch:
    """One shard's janitor batch size: ``size`` None asks for the configured one."""

    size: int | None = None
    configured: int | None = None  # the configured size, as the last batch at it reported
    grow_after: int = GROW_AFTER
    successes: int = 0
    at_floor: bool = False  # a batch at the floor ran past the timeout (warned once)
    grown: bool = False  # the current size came from a growth

    def succeeded(self, result: dict[str, Any]) -> int | None:
        """A batch committed (``result``: run_retention's answer): the new size when it grew
        (back to the configured one: that size, and ``size`` None), else None."""
        self.at_floor = False
        self.successes += 1
        if self.size is None:
            self.configured = result.get("batch_size", self.configured)
            if self.successes >= self.grow_after:  # the configured size holds: a growth no more
                self.grown = False
            return None
        if self.successes < self.grow_after:
            return None
        self.successes, self.grown = 0, True
        grown = self.size * 2
        if self.configured is None or grown < self.configured:
            self.size = grown
            return grown
        self.size = None
        return self.configured

    def timed_out(self, configured: int | None) -> int | None:
        """A batch the statement_timeout ended (``configured``: the configured size, when the
        batch asked for it and it was not known yet): the new, smaller size; None when the
        batch was at the floor already (the same size is tried next round)."""
        if configured is not None:
            self.configured = configured
        current = self.size if self.size is not None else (self.configured or DEFAULT_BATCH)
        self.successes = 0
        if self.grown:  # a growth the timeout refused: try the next one less often
            self.grow_after = min(self.grow_after * 2, GROW_AFTER_MAX)
        self.grown = False
        smaller = max(FLOOR, current // 2)
        if smaller >= current:
            self.size = current
            return None
        self.size = smaller
        return smaller
