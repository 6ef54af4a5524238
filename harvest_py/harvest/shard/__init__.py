"""Sharding: the router (pure), a pool per shard (over ``harvest.db``), fan-out reads.

Layer: beside ``db/``; it imports ``core/`` and ``db/`` only, never the client or the worker
(tests/unit/test_layers.py). docs/sharding.md is the user's page.

``harvest.shard.router`` needs no database driver; ``harvest.shard.pools`` opens pools through
``harvest.db``, so it is imported on first use of its names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from harvest.core.ids import shard_of
from harvest.shard.router import ShardRouter, rendezvous

if TYPE_CHECKING:
    from harvest.shard.pools import AsyncShardPools, ShardPools

__all__ = ["AsyncShardPools", "ShardPools", "ShardRouter", "rendezvous", "shard_of"]


def __getattr__(name: str) -> Any:
    if name in ("ShardPools", "AsyncShardPools"):
        from harvest.shard import pools

        return getattr(pools, name)
    raise AttributeError(f"module 'harvest.shard' has no attribute {name!r}")
