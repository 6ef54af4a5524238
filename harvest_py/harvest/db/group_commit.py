"""Group commit: many callers' writes, one transaction.

A caller hands its item to a batcher and waits. One flush is in flight at a
time (or ``max_flushes``); items that arrive while it runs wait for the next one,
so a lone caller commits at once and busy ones share a transaction, one WAL flush
and one round trip for the lot. Where a commit's WAL flush costs CPU (it cost this
project's benchmark machine about 0.35 ms of server CPU), that is most of the saving.

With ``max_flushes`` 2 (the worker's results and decisions) a second flush may run
beside the first, on a second connection: what piles up behind one flush goes at
once instead of waiting for it, and a flush that finds SPLIT_MIN * 2 items or more
waiting takes half and leaves the rest to a second flush that starts with it. One
flush at a time keeps one backend busy and the server's other core idle while the
worker's slots wait on it (docs/performance.md, "Two result flushes in flight").

A worker's batch (``resends_lost``) whose connection failed under it (a server restart, a
terminated backend, a network blip) is sent again, with a short pause, until the database
answers (db/resend.py); the items' fencing tokens make a repeat of a batch that had committed
a refusal, answered as :class:`harvest.db.resend.RefusedOnResend`.

Used by the worker for activity results and decisions (worker/completions.py)
and by ``AsyncClient`` for starts (client/client.py).
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any

from harvest.db.connection import failure_reason
from harvest.db.resend import connection_lost, resend_pause, warn_lost

log = logging.getLogger("harvest")

# The most items one transaction carries (a bound on its lock set and duration).
MAX_BATCH = 100
# With a second flush free, a flush takes half of what waits once each half has this many.
# Each half is a commit and a call with their fixed costs: from 16 (32 waiting) the canonical
# drain's result commits carry 17-20 results where they carried about 15 from 8 (its decisions'
# 14-18 where 10), for 6-7% less backend CPU and 5-8% less worker CPU per workflow; from 32 its
# 50 slots never split a flush and its cores sat idle (docs/performance.md, "canon9 row").
SPLIT_MIN = 16
# A deadlock (40P01) or serialization failure (40001) rolled the batch's whole transaction back:
# nothing was done. A batch of one is sent again, CONFLICT_SENDS times in all after a short
# jittered pause, before its caller hears of it: a worker's lone decision or result that lost a
# deadlock crashed its handler, and its task waited for its lease (30 s) to be claimed again. (A
# larger batch goes item by item first, below, and each item is then a batch of one.) The pause
# holds that item only: the flush goes on with what waits, and the item is sent again, alone, by
# the next flush once its pause ends (it held its flusher, and up to about 150 ms every item
# queued behind it).
CONFLICT_SENDS = 3
CONFLICTS = frozenset({"40P01", "40001"})


class GroupCommit:
    """Up to ``max_flushes`` flushes in flight; the items that arrive meanwhile go in the next one.

    An item is a tuple whose last element is the future its caller awaits.
    Subclasses send a batch (``_send``) and hand each caller its answer
    (``_settle``); a batch that fails as a whole may be sent again item by item.
    Items go in the order they came, a batch of them per flush; a lone item sent again after a
    conflict (``resends_conflicts``) goes alone in the first flush after its pause, before
    the items that wait then.
    """

    what = "items"
    # Whether a batch of one rolled back by a conflict is sent again (CONFLICT_SENDS): the worker's
    # batches. (The client's starts retry their conflicts in harvest/db/sqlapi.py already.)
    resends_conflicts = False

    def __init__(self, max_batch: int = MAX_BATCH, max_flushes: int = 1):
        self._max_batch = max_batch
        self._max_flushes = max(1, max_flushes)
        self._waiting: list[tuple[Any, ...]] = []
        # Lone items rolled back by a conflict whose pause has ended, each with its resent flag
        # and its sends so far: the next flush sends each again alone, before what waits.
        self._again: list[tuple[tuple[Any, ...], bool, int]] = []
        self._flushers: set[asyncio.Task[Any]] = set()  # (a reference, so none is collected)
        self._flushing = 0  # flushers started and not ended (counted down as one ends, not after)
        # A flusher started has not taken its batch yet: every item waiting now goes with it.
        self._starting = False
        self.batches = 0  # flushes sent (a measure of the batching, for benchmarks)
        self.items = 0

    def _submit(self, *item: Any) -> asyncio.Future[Any]:
        """Queue ``item`` now; the future of its answer, for the caller to await.

        (The future itself, not a coroutine awaiting it: a caller's ``await`` waits on it
        directly, with no coroutine and frame per item, for each of its callers' layers.)"""
        future = asyncio.get_running_loop().create_future()
        self._waiting.append((*item, future))
        if not self._starting and self._flushing < self._max_flushes:
            self._start_flusher()
        # A cancelled caller cancels only its own future, never the flush other callers wait on
        # (a task of its own): the item still goes with its batch, and _settle skips a done
        # future. (Not asyncio.shield: its relay cost a future and two loop callbacks per item.)
        return future

    def _start_flusher(self) -> None:
        self._flushing += 1
        self._starting = True
        task = asyncio.create_task(self._flush_all())
        self._flushers.add(task)
        task.add_done_callback(self._flushers.discard)

    async def _flush_all(self) -> None:
        self._starting = False
        try:
            while self._waiting or self._again:
                if self._again:
                    item, resent, sends = self._again.pop(0)
                    if not item[-1].done():  # (its caller may have gone during the pause)
                        await self._flush_guarded([item], resent, sends)
                    continue
                take, waiting = self._max_batch, len(self._waiting)
                if self._flushing < self._max_flushes and waiting >= 2 * SPLIT_MIN:
                    take = min(take, (waiting + 1) // 2)  # the other half goes beside it
                take = self._take(take)
                batch, self._waiting = self._waiting[:take], self._waiting[take:]
                if self._waiting and not self._starting and self._flushing < self._max_flushes:
                    self._start_flusher()
                await self._flush_guarded(batch)
        finally:
            self._flushing -= 1

    async def _flush_guarded(
        self, batch: list[tuple[Any, ...]], resent: bool = False, sends: int = 1
    ) -> None:
        """:meth:`_flush`, its error each waiting caller's answer."""
        try:
            await self._flush(batch, resent, sends)
        except Exception as exc:
            for *_, future in batch:
                if not future.done():
                    future.set_exception(exc)

    def _send_again(self, item: tuple[Any, ...], resent: bool, sends: int) -> None:
        """A conflicted lone item's pause has ended: the next flush sends it again (one is
        started when none is running or starting)."""
        self._again.append((item, resent, sends))
        if not self._starting and self._flushing < self._max_flushes:
            self._start_flusher()

    async def _flush(self, batch: list[tuple[Any, ...]], resent: bool = False, sends: int = 1) -> None:
        try:
            try:
                rows = await self._send([item[:-1] for item in batch])
            except Exception as exc:
                if not (self.resends_lost and connection_lost(exc)):
                    raise
                resent = True
                answered = await self._resend(batch, exc)
                if answered is None:
                    return  # every caller has gone (a stop): nothing is left to send
                rows = answered
        except Exception as exc:
            if (
                self.resends_conflicts
                and len(batch) == 1
                and sends < CONFLICT_SENDS
                and getattr(exc, "sqlstate", None) in CONFLICTS
            ):
                self._retried(exc)
                log.warning(
                    "a batch of 1 %s was rolled back (%s); sending it again", self.what, failure_reason(exc)
                )
                # The pause holds this item only, not the flush (its caller still waits on it).
                pause = random.uniform(0.01, 0.05) * sends
                asyncio.get_running_loop().call_later(pause, self._send_again, batch[0], resent, sends + 1)
                return
            if not self._retry_alone(batch, exc):
                raise
            self._retried(exc)
            # A whole batch failed (a deadlock with another transaction, or an item the
            # database refused outright): commit the items one by one, so that one bad
            # item cannot sink the others.
            log.warning(
                "a batch of %d %s failed (%s); committing them one by one",
                len(batch),
                self.what,
                failure_reason(exc),
            )
            for item in batch:
                try:
                    await self._flush([self._alone(item)], resent)
                except Exception as item_exc:
                    if not item[-1].done():
                        item[-1].set_exception(item_exc)
            return
        self.batches += 1
        self.items += len(batch)
        self._settle(batch, rows, resent)

    async def _resend(self, batch: list[tuple[Any, ...]], exc: Exception) -> list[dict[str, Any]] | None:
        """Send a batch whose connection failed again (harvest/db/resend.py) until the database
        answers: its rows, or None once every caller has gone (cancelled by a stop). A repeat's
        error that is not a lost connection is raised (the database's answer)."""
        warn_lost(f"a batch of {len(batch)} {self.what}", exc)
        sends = 1
        while True:
            self._retried(exc)
            await asyncio.sleep(resend_pause(sends))
            pending = [item for item in batch if not item[-1].done()]
            if not pending:
                return None
            batch[:] = pending
            try:
                rows = await self._send([item[:-1] for item in batch])
            except Exception as again:
                if not connection_lost(again):
                    raise
                exc, sends = again, sends + 1
                continue
            log.info("the database answered a batch of %d %s at send %d", len(batch), self.what, sends + 1)
            return rows

    async def _send(self, items: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
        """Commit the items (each without its future); one row per item."""
        raise NotImplementedError

    def _take(self, take: int) -> int:
        """How many of the first ``take`` waiting items the next flush carries (at least one)."""
        return take

    # Whether a batch whose connection failed is sent again until the database answers
    # (harvest/db/resend.py): a worker's reports of the tasks it holds, made safe to repeat by
    # their fencing tokens. Off for a batch a repeat could apply twice.
    resends_lost = False

    def _settle(self, batch: list[tuple[Any, ...]], rows: list[dict[str, Any]], resent: bool = False) -> None:
        """Resolve each item's future from the rows, skipping a done one (a cancelled caller's);
        ``resent``: the rows answer a batch sent again after its connection failed."""
        raise NotImplementedError

    def _retry_alone(self, batch: list[tuple[Any, ...]], exc: Exception) -> bool:
        """Whether a failed batch is worth committing item by item."""
        return len(batch) > 1

    def _retried(self, exc: Exception) -> None:
        """A failed batch is being committed again item by item (a metrics hook)."""

    def _alone(self, item: tuple[Any, ...]) -> tuple[Any, ...]:
        """The item as it is sent on its own after its batch failed."""
        return item
