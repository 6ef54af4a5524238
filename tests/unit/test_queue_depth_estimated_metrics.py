"""The sampler says which queue depths are estimates (docs/observability.md, "Queue depths past
the cap"): ``harvest_queue_depth_estimated{queue, kind}`` is 1 where get_metric_samples marks a
row estimated, 0 where it is exact or where an older release's functions answer without the
mark; ``harvest_concurrency_pending_estimated`` likewise for the other keys' pending sum."""

from __future__ import annotations

from typing import Any

from harvest.telemetry.metrics import Metrics


def _row(queue: str, **extra: Any) -> dict[str, Any]:
    return {
        "queue": queue,
        "kind": "activity",
        "claimable": 1_200_000,
        "scheduled": 5,
        "running": 3,
        "oldest_claimable_secs": 30.0,
        **extra,
    }


def _value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, {"shard": "0", **labels})


def test_the_estimated_rows_and_sums_are_flagged_and_the_exact_ones_are_not() -> None:
    metrics = Metrics()
    metrics.apply_samples(
        {
            "shard_id": 0,
            "queues": [_row("deep", estimated=True), _row("small", estimated=False)],
            "other_keys": {"in_flight": 1, "pending": 40_000, "pending_estimated": True},
        }
    )
    assert _value(metrics, "harvest_queue_depth_estimated", queue="deep", kind="activity") == 1
    assert _value(metrics, "harvest_queue_depth_estimated", queue="small", kind="activity") == 0
    assert _value(metrics, "harvest_queue_claimable", queue="deep", kind="activity") == 1_200_000
    assert _value(metrics, "harvest_concurrency_pending_estimated") == 1


def test_an_older_release_s_samples_read_as_exact() -> None:
    metrics = Metrics()
    metrics.apply_samples(
        {"shard_id": 0, "queues": [_row("q")], "other_keys": {"in_flight": 0, "pending": 0}}
    )
    assert _value(metrics, "harvest_queue_depth_estimated", queue="q", kind="activity") == 0
    assert _value(metrics, "harvest_concurrency_pending_estimated") == 0
