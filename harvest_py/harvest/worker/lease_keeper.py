"""A workflow task's lease, kept while its worker still works on it.

A workflow task is claimed with ``workflow_lease`` (30 s by default) and nothing renewed it:
a local activity or a replay that ran longer let the scanner hand the task to another worker,
which ran the local activity again. A :class:`LeaseKeeper` arms a timer for a third of the
lease; a task decided before it fires (nearly all of them) costs a timer and nothing else. One
that is still running then gets a background loop that extends the lease
(``harvest.heartbeat_workflow_task``, under the claim's fencing token) every third of it
until the task ends. A worker that dies stops extending, so the lease runs out as before.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from harvest.db.connection import failure_reason

log = logging.getLogger("harvest.worker")


class LeaseKeeper:
    """Keeps one claimed workflow task's lease until :meth:`stop` (see the module docstring)."""

    __slots__ = (
        "_calling",
        "_every",
        "_lease",
        "_loop_task",
        "_sql",
        "_stopped",
        "_task_id",
        "_timer",
        "_token",
    )

    def __init__(self, sql: Any, task_id: int, fencing_token: int, lease_secs: float):
        self._sql, self._task_id, self._token, self._lease = sql, task_id, fencing_token, lease_secs
        self._every = lease_secs / 3
        self._stopped = False
        self._calling = False
        self._loop_task: asyncio.Task[None] | None = None
        self._timer = asyncio.get_running_loop().call_later(self._every, self._start)

    def _start(self) -> None:
        if not self._stopped:
            self._loop_task = asyncio.create_task(self._keep(), name=f"lease-keeper-{self._task_id}")

    async def _keep(self) -> None:
        while not self._stopped:
            self._calling = True
            try:
                extended = await self._sql.heartbeat_workflow_task(self._task_id, self._token, self._lease)
            except Exception as exc:  # the next round tries again; the lease may still hold
                log.warning(
                    "workflow task %s: its lease could not be extended: %s",
                    self._task_id,
                    failure_reason(exc),
                )
                extended = True
            finally:
                self._calling = False
            if not extended:
                log.warning(
                    "workflow task %s lost its lease while this worker still ran it; its decision "
                    "will be refused and the task redone",
                    self._task_id,
                )
                return
            if self._stopped:
                return
            await asyncio.sleep(self._every)

    def stop(self) -> None:
        """The task ended: no more extensions. A call in flight finishes (a cancelled query
        would leave its pooled connection to be reset); a sleeping loop is cancelled."""
        self._stopped = True
        self._timer.cancel()
        if self._loop_task is not None and not self._calling:
            self._loop_task.cancel()
