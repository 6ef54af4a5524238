"""A client wait's reads while the database cannot be read (a restart, a failover, a network
cut): a result wait's and a query's or an update's answer wait's (docs/failures.md, "A result
wait rides out an outage"). Each such read is idempotent (it reads, or marks a waiter), so a
failed one is made again after a pause until the database answers or the wait's deadline
passes; the read waits for a pooled connection until that deadline only (``Sql.by``)."""

from __future__ import annotations

import logging
import time

from harvest.core.errors import ConnectionRejected, DatabaseUnavailable
from harvest.db.connection import one_line
from harvest.db.resend import connection_lost, resend_pause

log = logging.getLogger("harvest.client")

# A read made again pauses as the worker's resends do (harvest.db.resend: 50 ms doubling to
# 2 s) times this: 0.25 s doubling to 10 s (sooner when the client's LISTEN connection, back,
# wakes the wait).
PAUSE_SCALE = 5.0
# One warning a process in this long, however many waits meet the same outage.
WARN_EVERY_SECS = 60.0
_warned_at: float | None = None


def is_outage(exc: BaseException) -> bool:
    """Whether a read failed because the database could not be read: a lost connection or no
    pooled connection in time (harvest.db.resend.connection_lost), or a DatabaseUnavailable
    caused by one (a shard's pool: ShardUnavailable). Not a refused login, a closed pool (the
    client is closing), a statement timeout or a shard this process has no pool for."""
    if isinstance(exc, ConnectionRejected):
        return False
    if isinstance(exc, DatabaseUnavailable):
        return exc.__context__ is not None and connection_lost(exc.__context__)
    return connection_lost(exc)


class Outage:
    """One wait's failed reads: counted, warned of when they start (at most one warning a
    minute in a process) and, once warned, one line when a read succeeds again. ``waiting``
    names the wait in those lines ("the result wait for workflow ...")."""

    __slots__ = ("cause", "failed", "since", "waiting", "warned")

    def __init__(self, waiting: str):
        self.waiting = waiting
        self.failed = 0
        self.since = 0.0
        self.warned = False
        self.cause = ""

    def began(self, exc: BaseException) -> bool:
        """Whether ``exc`` is an outage to wait out (counted, warned of)."""
        global _warned_at
        if not is_outage(exc):
            return False
        self.failed += 1
        self.cause = one_line(exc)
        if self.failed == 1:
            self.since = now = time.monotonic()
            if _warned_at is None or now - _warned_at >= WARN_EVERY_SECS:
                _warned_at, self.warned = now, True
                log.warning(
                    "%s could not read the database (%s); reading again until it answers or the "
                    "wait's timeout passes",
                    self.waiting,
                    self.cause,
                )
        return True

    def pause_until(self, deadline: float | None) -> float | None:
        """After a failed read: how long to pause before reading again (less when the deadline
        comes sooner), or None when the deadline has passed (the wait's timeout is raised)."""
        pause = resend_pause(self.failed) * PAUSE_SCALE
        if deadline is None:
            return pause
        remaining = deadline - time.monotonic()
        return None if remaining <= 0 else min(remaining, pause)

    def ended(self) -> None:
        if self.warned:
            log.info("%s reads the database again after %.1fs", self.waiting, time.monotonic() - self.since)
        self.failed, self.warned = 0, False

    def reason(self) -> str:
        """What a timeout in the outage says of it (the cause: a lost connection, or none lent
        in time, the database down or every connection busy)."""
        return f"its last read of the database failed: {self.cause}"
