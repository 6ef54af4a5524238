"""Process configuration (``harvest.toml`` plus ``HARVEST_*`` variables, the process role), beside
the faces: only ``harvest.cli`` (and a process embedding a worker) reads it; no lower layer does.
See :mod:`harvest.config.config` for precedence and the role table."""

from harvest.config.config import (
    Config,
    async_shard_pools,
    config_from_mapping,
    coverage_facts,
    database_url,
    declared_queues,
    fleet_queues,
    load_config,
    merge_coverage,
    queue_coverage,
    resolve_queues,
    runtime_plan,
    shard_pools,
    shard_urls,
    shards_configured,
    worker_options,
)

__all__ = [
    "Config",
    "async_shard_pools",
    "config_from_mapping",
    "coverage_facts",
    "database_url",
    "declared_queues",
    "fleet_queues",
    "load_config",
    "merge_coverage",
    "queue_coverage",
    "resolve_queues",
    "runtime_plan",
    "shard_pools",
    "shard_urls",
    "shards_configured",
    "worker_options",
]
