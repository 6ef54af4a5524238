"""The retention janitor's pass over MIGRATED seals (docs/sharding.md, "Seals and retention").

A run a rebalance moved leaves a seal on its old shard that forwards by-id calls to where it
lives, so the seal's own shard cannot tell when it may go: ``run_retention`` never deletes one.
This pass takes a page of the shard's seals moved before the retention window
(``list_expired_seals``), asks the shard each points to whether the run would have been
collected there (``list_moved_runs``: gone, or ended past that shard's window with nothing
keeping it; a seal there is followed, at most ``MAX_FORWARD_HOPS``), and drops the seals whose
run would have (``delete_seals``). A shard that does not answer keeps its seals for a later pass.
The page moves on by keyset, so seals of live runs at the head of the order do not hide the
ones behind them; the caller keeps the cursor and starts over once a page comes back short.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

from harvest.db.connection import failure_reason
from harvest.shard.router import MAX_FORWARD_HOPS

log = logging.getLogger("harvest.worker")

SEAL_PAGE = 500


async def collect_seals(
    pools: Any,
    shard: int,
    max_age: str | None = None,
    after: tuple[Any, str] | None = None,
    limit: int = SEAL_PAGE,
) -> dict[str, Any]:
    """One page of ``shard``'s expired seals judged and the collectable ones dropped:
    ``{"checked", "deleted", "kept", "unreachable", "next"}``, ``next`` the keyset to pass as
    ``after`` (None once the page was the last)."""
    async with pools.api(shard) as sql:
        page = await sql.list_expired_seals(
            max_age, after[0] if after else None, after[1] if after else None, limit
        )
    if not page:
        return {"checked": 0, "deleted": 0, "kept": 0, "unreachable": [], "next": None}
    pending: dict[str, int] = {str(r["execution_id"]): r["migrated_to_shard"] for r in page}
    collectable: list[str] = []
    unreachable: set[int] = set()
    for _hop in range(MAX_FORWARD_HOPS):
        by_shard: dict[int, list[str]] = defaultdict(list)
        for execution_id, target in pending.items():
            by_shard[target].append(execution_id)
        pending = {}
        for target, ids in by_shard.items():
            try:
                async with pools.api(target) as sql:
                    judged = await sql.list_moved_runs(ids, max_age)
            except Exception as exc:  # (a shard away, or not configured here: its seals stay)
                log.debug("retention: seals pointing to shard %s not judged: %s", target, failure_reason(exc))
                unreachable.add(target)
                continue
            for verdict in judged:
                if verdict["collectable"]:
                    collectable.append(str(verdict["execution_id"]))
                elif verdict["forwarded_to"] is not None:
                    pending[str(verdict["execution_id"])] = verdict["forwarded_to"]
        if not pending:
            break
    deleted = 0
    if collectable:
        async with pools.api(shard) as sql:
            deleted = await sql.delete_seals(collectable)
    last = page[-1]
    return {
        "checked": len(page),
        "deleted": deleted,
        "kept": len(page) - deleted,
        "unreachable": sorted(unreachable),
        "next": (last["moved_at"], str(last["execution_id"])) if len(page) == limit else None,
    }
