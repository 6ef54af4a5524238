"""The spec's external-signal metrics (docs/observability.md): the relay pump counts each by-id
delivery it leaves pending because the target's shard could not be inspected, per shard and why
(``harvest_external_signal_by_id_indeterminate_shard_total``), and the sampler publishes the
age of the oldest by-id signal and cancel left pending (``..._oldest_pending_indeterminate_age``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from types import SimpleNamespace
from typing import Any

from harvest.core.errors import ShardUnavailable
from harvest.shard.relay_pump import RelayPump
from harvest.telemetry.metrics import Metrics

RELAY = {
    "relay_id": 11,
    "source_shard": 0,
    "kind": "external_signal",
    "target_execution_id": "00000007-0000-4000-8000-000000000001",
    "target_workflow_name": None,
    "target_workflow_id": None,
    "payload": {"name": "go"},
    "source_execution_id": "00000000-0000-4000-8000-000000000002",
}


class FakeSql:
    def __init__(self, log: list[tuple[Any, ...]]) -> None:
        self.log = log

    async def claim_remote_relays(self, limit: int, lease_secs: float) -> list[dict[str, Any]]:
        return [dict(RELAY)]

    async def release_relay(self, relay_id: int, why: str) -> None:
        self.log.append(("released", relay_id, why))

    async def complete_relay(self, *args: Any) -> None:
        self.log.append(("completed", *args))


class FakePools:
    """Shard 0 only (and shard 3 pooled but down): the relay targets shard 7's run."""

    def __init__(self, target: int) -> None:
        self.shards = (0, 3)
        self.router = SimpleNamespace(readable=(0, 3))
        self.target = target
        self.log: list[tuple[Any, ...]] = []

    @contextlib.asynccontextmanager
    async def api(self, shard: int) -> AsyncIterator[FakeSql]:
        if shard not in self.shards:
            raise ShardUnavailable(shard, "this process has no pool for it (give it a url in shards.urls)")
        if shard == 3:
            raise ShardUnavailable(shard)
        yield FakeSql(self.log)

    async def follow(
        self, execution_id: str, attempt: Callable[[int], Awaitable[Any]], wait_secs: float = 0.0
    ) -> Any:
        return await attempt(self.target)


def _tick(target: int) -> tuple[Any, list[tuple[Any, ...]]]:
    pools = FakePools(target)
    pump = RelayPump(pools, sources=[0], children=False)  # type: ignore[arg-type]
    return asyncio.run(pump.tick()), pools.log


def test_a_by_id_delivery_to_a_shard_without_a_pool_is_counted_and_left_pending() -> None:
    report, log = _tick(7)
    assert report.by_id_indeterminate == {(7, "no_pool"): 1}
    assert [entry[:2] for entry in log] == [("released", 11)], "pending: released for a retry, not settled"
    report, _ = _tick(3)
    assert report.by_id_indeterminate == {(3, "unreachable"): 1}

    metrics = Metrics()
    metrics.by_id_indeterminate({(7, "no_pool"): 2, (3, "unreachable"): 1})
    text = metrics.render().decode()
    assert 'harvest_external_signal_by_id_indeterminate_shard_total{kind="no_pool",shard="7"} 2.0' in text
    assert 'harvest_external_signal_by_id_indeterminate_shard_total{kind="unreachable",shard="3"} 1.0' in text


def test_the_sampler_publishes_the_oldest_pending_by_id_signal_and_cancel() -> None:
    metrics = Metrics()
    metrics.apply_samples(
        {
            "shard_id": 2,
            "relays": {
                "local": 0,
                "remote": 3,
                "remote_oldest_secs": 500,
                "by_id_indeterminate_signal_oldest_secs": 90,
                "by_id_indeterminate_cancel_oldest_secs": None,
            },
        }
    )
    text = metrics.render().decode()
    assert 'harvest_external_signal_by_id_oldest_pending_indeterminate_age_seconds{shard="2"} 90.0' in text
    assert 'harvest_external_cancel_by_id_oldest_pending_indeterminate_age_seconds{shard="2"} 0.0' in text


def test_missed_schedules_keep_a_bounded_set_of_series() -> None:
    """Runtime-made schedules (one per tenant) made a series each for the process's life: past
    SCHEDULE_LABELS_MAX (200, docs/observability.md) names, the misses of any other are counted
    under _other."""
    SCHEDULE_LABELS_MAX = 200
    from harvest.telemetry.metrics import OTHER_KEYS

    metrics = Metrics()
    for i in range(SCHEDULE_LABELS_MAX + 50):
        metrics.missed_schedule(f"tenant-{i}")
    metrics.missed_schedule("tenant-0", 2)  # (a name with a series keeps counting there)
    text = metrics.render().decode()
    series = [line for line in text.splitlines() if line.startswith("harvest_schedule_missed_total{")]
    assert len(series) == SCHEDULE_LABELS_MAX + 1, len(series)
    assert f'harvest_schedule_missed_total{{schedule="{OTHER_KEYS}"}} 50.0' in text
    assert 'harvest_schedule_missed_total{schedule="tenant-0"} 3.0' in text
