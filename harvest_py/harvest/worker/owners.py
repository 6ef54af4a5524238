"""Owner mode on the worker side (functions/owners.sql; docs/sharding.md "Owner mode").

With owner mode on, a claim (or a hand-off) of a workflow task gives the worker
its decision partition's owner epoch, and the decision commit sends that epoch
back: the database refuses it when the partition has moved on (another worker
acquired it), and the worker drops the run it decided with. This module keeps
the epochs the worker holds, which a decision sent ahead with an activity result
carries too, and renews, on the worker's heartbeat, the leases of the partitions
it holds state for (a cached run, or a workflow task noted within the last
heartbeats); the others run out, for any worker to acquire.

With owner mode off no task carries an epoch: nothing is kept, nothing renewed.
"""

from __future__ import annotations

import time
from typing import Any

from harvest.core.ids import partition_of

# A partition noted this recently is renewed even without a cached run (a task in
# flight, or a run that just finished), in heartbeat intervals.
RECENT_HEARTBEATS = 2


class Owners:
    """The decision partitions this worker holds, with their epochs."""

    def __init__(self) -> None:
        self.epochs: dict[int, int] = {}
        self._noted_at: dict[int, float] = {}
        self._partition_of_run: dict[str, int] = {}
        self.refused = 0  # decisions the database refused as a stale owner's
        self.lost = 0  # partitions found taken by another worker at a renewal

    def note(self, task: dict[str, Any]) -> None:
        """Remember the epoch a claimed or handed workflow task carries (none when owner mode is off)."""
        epoch = task.get("owner_epoch")
        if epoch is None:
            return
        partition = partition_of(task["workflow_id"])
        self.epochs[partition] = epoch
        self._noted_at[partition] = time.monotonic()
        self._partition_of_run[str(task["execution_id"])] = partition

    def epoch_for(self, workflow_id: str) -> int | None:
        """The epoch this worker holds the partition of ``workflow_id`` at, if it holds it."""
        if not self.epochs:
            return None
        return self.epochs.get(partition_of(workflow_id))

    def forget_run(self, execution_id: str) -> None:
        """A decision for this run was refused: stop renewing on its account."""
        self.refused += 1
        self._partition_of_run.pop(execution_id, None)

    def to_renew(self, cached: set[str], recent_secs: float) -> list[int]:
        """The partitions to renew: those of cached runs, and those noted within ``recent_secs``."""
        now = time.monotonic()
        for execution_id in [e for e in self._partition_of_run if e not in cached]:
            partition = self._partition_of_run[execution_id]
            if now - self._noted_at.get(partition, 0.0) > recent_secs:
                del self._partition_of_run[execution_id]
        wanted = set(self._partition_of_run.values())
        wanted.update(p for p, at in self._noted_at.items() if now - at <= recent_secs)
        return sorted(p for p in wanted if p in self.epochs)

    def renewed(self, asked: list[int], rows: list[dict[str, Any]]) -> list[str]:
        """Take a renewal's answer; returns the runs noted in partitions asked for and no
        longer held (another worker acquired them: the cached state of those runs goes)."""
        held = {row["partition_id"]: row["epoch"] for row in rows}
        lost = {p for p in asked if p not in held}
        self.lost += len(lost)
        for partition in list(self.epochs):
            if partition not in held:  # lost, or no longer wanted: let it run out
                del self.epochs[partition]
                self._noted_at.pop(partition, None)
        self.epochs.update(held)
        gone = [e for e, p in self._partition_of_run.items() if p in lost]
        self._partition_of_run = {e: p for e, p in self._partition_of_run.items() if p in held}
        return gone
