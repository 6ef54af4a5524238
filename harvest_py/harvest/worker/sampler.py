"""The metrics sampler: the database's gauges, read by one process per database.

Queue depth and age, dead letters, workers, concurrency keys, stranded work, relay backlogs and
retention lag are facts of the database, not of a process: if every replica sampled them, each
gauge would be emitted once per replica and the database would answer the same question N
times. So the sampler runs where the scanner runs (``WorkerOptions.run_scanner``; a web process
can run one too: :meth:`MetricsSampler.run`), and on each database only the process whose
session holds the sampler's advisory lock (``harvest.db.sqlapi.claim_sampler_lead``) samples;
the others try again every interval and take over when the leader's session ends (a crash, a
stop, a lost connection). Each sample is one read-only round trip
(``harvest.get_metric_samples()``) published through :meth:`Metrics.apply_samples`.

The runs closed outside any worker's decision (terminated, timed out, superseded by a newer run
of their concurrency key) are counted here too, into the same terminal-run counter and history
size histogram a decision feeds (and ``harvest_concurrency_superseded``): each sample reads the
ones closed since the last (``harvest.list_forced_closes``, a keyset cursor over
``completed_at``) up to ``close_lag`` seconds ago, the margin that lets a slow transaction's
close commit before its time is passed. The leader counts from its first sample on: closes
while no process led (or before a new leader's first sample) are not counted.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta
from typing import Any

from harvest.db import SCHEMA_VERSION, pooler
from harvest.db.connection import connect_async, failure_reason
from harvest.db.sqlapi import AsyncSqlApi
from harvest.telemetry.metrics import Metrics, NullMetrics

__all__ = ["MetricsSampler"]

log = logging.getLogger("harvest.telemetry.sampler")


class MetricsSampler:
    """Samples each database it is run on every ``interval`` seconds while it leads there."""

    def __init__(
        self,
        metrics: Metrics | NullMetrics,
        *,
        interval: float = 15.0,
        max_keys: int = 50,
        close_lag: float = 5.0,
    ) -> None:
        self.metrics = metrics
        self.interval = interval
        self.max_keys = max_keys
        self.close_lag = close_lag
        # Per shard: the (completed_at, id) of the last forced close counted.
        self._closes: dict[int, tuple[datetime, Any]] = {}
        self.leading: set[int] = set()  # the shards this process samples now
        self.samples = 0  # samples taken (tests, logs)

    async def run(self, dsn: str, shard: int) -> None:
        """Lead (or wait to lead) the sampler of one database, until cancelled. Not behind a
        transaction-mode pooler with no session URL (harvest.db.pooler): the lead is a session's
        advisory lock, which such a pooler leaves on a server connection other clients are lent
        (every worker of the fleet could lead, or none could ever again)."""
        if pooler.needs_session(dsn):
            log.warning(
                "metrics sampler of shard %s: off, as its lead is a session's lock and the database URL "
                "goes through a transaction-mode pooler: set its session URL, %s, to sample",
                shard,
                pooler.session_setting(shard),
            )
            return
        failed = False
        while True:
            try:
                conn = await connect_async(dsn, autocommit=True)
                async with conn:
                    sql = AsyncSqlApi.on_connection(conn)
                    while not await sql.claim_sampler_lead():
                        await asyncio.sleep(self.interval)  # another process samples this database
                    self.leading.add(shard)
                    log.info(
                        "metrics sampler: this process samples shard %s every %.0fs", shard, self.interval
                    )
                    self._closes.pop(shard, None)  # a new lead counts from its first sample
                    while True:
                        await self.sample(sql, shard)
                        failed = False
                        await asyncio.sleep(self.interval)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.metrics.sample_failed(shard)
                if shard in self.leading:
                    self.metrics.forget_samples(shard)  # a stale gauge is worse than none
                    self.leading.discard(shard)
                if not failed:  # once per outage, not once per interval
                    log.warning("metrics sampler of shard %s: %s", shard, failure_reason(exc, dsn))
                failed = True
                await asyncio.sleep(self.interval)
            finally:
                self.leading.discard(shard)

    async def sample(self, sql: AsyncSqlApi, shard: int = 0) -> dict[str, Any]:
        samples: dict[str, Any] = await sql.get_metric_samples(self.max_keys)
        behind = (samples.get("schema_version") or "") < SCHEMA_VERSION
        self.metrics.apply_samples(samples, schema_behind=behind)
        if not behind:
            await self._count_closes(sql, shard, datetime.fromisoformat(samples["observed_at"]))
        self.samples += 1
        return samples

    async def _count_closes(self, sql: AsyncSqlApi, shard: int, now: datetime) -> None:
        """Count the runs closed outside a decision since the last sample of this shard."""
        until = now - timedelta(seconds=self.close_lag)
        after = self._closes.get(shard)
        if after is None:  # the first sample: count from here on
            self._closes[shard] = (until, _LAST_ID)
            return
        for _ in range(_MAX_PAGES):
            rows = await sql.list_forced_closes(after[0], after[1], until, _PAGE)
            for row in rows:
                self.metrics.forced_close(
                    row["workflow_name"], row["status"], row["history_size"], row["superseded"]
                )
            if len(rows) < _PAGE:
                break
            after = (rows[-1]["completed_at"], rows[-1]["execution_id"])
        # Everything closed by ``until`` was read (or, past _MAX_PAGES pages, skipped).
        self._closes[shard] = (max(until, after[0]), _LAST_ID)


_PAGE = 1000
_MAX_PAGES = 10
_LAST_ID = "ffffffff-ffff-ffff-ffff-ffffffffffff"
