"""Sharding: the router, a pool per shard, fan-out reads (docs/sharding.md)."""
