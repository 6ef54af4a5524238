"""A worker's report that failed because its connection failed is sent again.

The one rule for what a worker reports of a task it holds (an activity's result or failure, a
workflow task's decision, a heartbeat): when the call fails because the connection failed (a
server restart or failover, pg_terminate_backend, a network blip, no connection to be had) and
not because the database answered, it is sent again after a short pause, and again, until the
database answers. The answer ends it: the report committed, or it was refused (StaleTask when
the attempt's lease passed meanwhile and another attempt may own it; the server's clock is the
one that counts, the worker keeps none of its lease). A stop ends it too: the worker's shutdown
grace cancels the report's caller (and a batch whose callers are all gone is not sent again).

Sending a report again is safe only because of its fencing token: a failed connection may have
taken the first send's commit with it, and then the repeat is refused as stale (the task is not
``running`` under that token any more). A repeat refused so is done, not a lost lease
(:class:`RefusedOnResend`). What the lost answer carried cannot be recovered (tasks handed back
or claimed with it): their leases expire and they run again (docs/failures.md).

An error the database raised (a refusal, a constraint, a Harvest SQLSTATE, a deadlock) is an
answer and is never sent again here; nor is an error of a closed pool (the worker is stopping).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import psycopg_pool

from harvest.core.errors import HarvestError, StaleTask
from harvest.db.connection import one_line
from harvest.db.pools import database_unreachable

log = logging.getLogger("harvest.worker")

T = TypeVar("T")

# The pause before the second send, doubled for each later one up to RESEND_PAUSE_MAX (jittered).
RESEND_PAUSE = 0.05
RESEND_PAUSE_MAX = 2.0


class RefusedOnResend(StaleTask):
    """A report sent again after its connection failed was refused as stale: its first send
    had committed (its answer was lost with the connection), or the attempt's lease passed
    meanwhile. Either way the report has nothing left to do; not a lost lease to warn of."""

    @classmethod
    def of(cls, stale: StaleTask) -> RefusedOnResend:
        """``stale``, the refusal of a report sent again, as this (the message says so)."""
        return cls(f"{stale} (sent again after its connection failed)")


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` is a failed connection (the statement may or may not have run) rather
    than the database's answer: only such a failure is sent again. That is
    harvest.db.pools.database_unreachable, less a closed pool (the worker is stopping)."""
    if isinstance(exc, (HarvestError, psycopg_pool.PoolClosed)):
        return False
    return database_unreachable(exc)


def resend_pause(sends: int) -> float:
    """Seconds to wait before send ``sends + 1`` (``sends`` >= 1): 50 ms, doubling, at most 2 s,
    each with up to a quarter more at random (workers that lost one server do not all return at
    once)."""
    pause = min(RESEND_PAUSE_MAX, RESEND_PAUSE * (1 << min(sends - 1, 8)))
    return pause * random.uniform(1.0, 1.25)


def warn_lost(what: str, exc: BaseException) -> None:
    """The one warning of a report whose connection failed (its first line only: no DSN)."""
    log.warning(
        "the connection failed while sending %s (%s: %s); sending it again until the database answers",
        what,
        type(exc).__name__,
        one_line(exc),
    )


async def resend_lost(call: Callable[[], Awaitable[T]], what: str) -> T:
    """``await call()``, made again while it fails with a lost connection (see the module's
    note). A StaleTask of a repeat is raised as :class:`RefusedOnResend`."""
    sends = 0
    while True:
        try:
            return await call()
        except StaleTask as stale:
            if sends == 0 or isinstance(stale, RefusedOnResend):
                raise
            raise RefusedOnResend.of(stale) from stale
        except Exception as exc:
            if not connection_lost(exc):
                raise
            sends += 1
            if sends == 1:
                warn_lost(what, exc)
        await asyncio.sleep(resend_pause(sends))
