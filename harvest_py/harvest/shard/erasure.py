"""Erasure across residences (docs/payloads.md, docs/sharding.md "Rebalancing").

A run a rebalance moved leaves a sealed copy on each shard it left, still holding its payloads.
Erasing its payloads therefore scrubs the live run first (where the terminal-state and
legal-hold gates are judged: a seal always reads as terminal) and then every prior residence
the live row's ``migrated_from_shards`` names. A residence retention already collected is no
error; a residence that cannot be reached fails the call (ShardUnavailable), because an
erasure that cannot be shown complete must not be reported complete. Calling it again after
the shard is back finishes the job (each step is idempotent).
"""

from __future__ import annotations

from typing import Any, cast

from harvest.shard.pools import ShardPools


def erase_payloads_everywhere(
    pools: ShardPools, execution_id: str, operator_id: str | None = None
) -> dict[str, Any]:
    """Erase ``execution_id``'s payloads on its live shard and on every prior residence.

    Returns the live shard's summary with ``prior_residences``: one entry per other shard
    (its summary, or ``{"absent": true}``)."""

    def live(shard: int) -> dict[str, Any]:
        with pools.api(shard) as sql:
            return cast("dict[str, Any]", sql.erase_payloads(execution_id, operator_id))

    summary = pools.follow(execution_id, live)
    prior = []
    for shard in summary.get("residences", {}).get("migrated_from_shards") or []:
        if shard == summary.get("shard_id"):
            continue
        with pools.api(shard) as sql:
            prior.append({"shard_id": shard, **sql.erase_payloads(execution_id, operator_id, True)})
    return {**summary, "prior_residences": prior}
