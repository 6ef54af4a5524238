"""The metrics sampler: the database's gauges, read by one process per database.

Queue depth and age, dead letters, workers, concurrency keys, stranded work, relay backlogs and
retention lag are facts of the database, not of a process: if every replica sampled them, each
gauge would be emitted once per replica and the database would answer the same question N
times. So the sampler runs where the scanner runs (``WorkerOptions.run_scanner``; a web process
can run one too: :meth:`MetricsSampler.run`), and on each database only the process whose
session holds the sampler's advisory lock (``harvest.db.sqlapi.try_lead_sampler``) samples;
the others try again every interval and take over when the leader's session ends (a crash, a
stop, a lost connection). Each sample is one read-only round trip
(``harvest.get_metric_samples()``) published through :meth:`Metrics.apply_samples`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

from harvest.db import SCHEMA_VERSION
from harvest.db.connection import connect_async, redact
from harvest.db.sqlapi import AsyncSqlApi
from harvest.telemetry.metrics import Metrics, NullMetrics

__all__ = ["MetricsSampler"]

log = logging.getLogger("harvest.telemetry.sampler")


class MetricsSampler:
    """Samples each database it is run on every ``interval`` seconds while it leads there."""

    def __init__(self, metrics: Metrics | NullMetrics, *, interval: float = 15.0, max_keys: int = 50):
        self.metrics = metrics
        self.interval = interval
        self.max_keys = max_keys
        self.leading: set[int] = set()  # the shards this process samples now
        self.samples = 0  # samples taken (tests, logs)

    async def run(self, dsn: str, shard: int) -> None:
        """Lead (or wait to lead) the sampler of one database, until cancelled."""
        failed = False
        while True:
            try:
                conn = await connect_async(dsn, autocommit=True)
                async with conn:
                    sql = AsyncSqlApi.on_connection(conn)
                    while not await sql.try_lead_sampler():
                        await asyncio.sleep(self.interval)  # another process samples this database
                    self.leading.add(shard)
                    log.info(
                        "metrics sampler: this process samples shard %s every %.0fs", shard, self.interval
                    )
                    while True:
                        await self.sample(sql)
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
                    log.warning("metrics sampler of shard %s: %s", shard, redact(str(exc), dsn))
                failed = True
                await asyncio.sleep(self.interval)
            finally:
                self.leading.discard(shard)

    async def sample(self, sql: AsyncSqlApi) -> dict[str, Any]:
        samples = await sql.get_metric_samples(self.max_keys)
        behind = (samples.get("schema_version") or "") < SCHEMA_VERSION
        self.metrics.apply_samples(samples, schema_behind=behind)
        self.samples += 1
        return cast("dict[str, Any]", samples)
