"""`harvest audit prune`'s loop on one shard (cli/audit.py prune_on_shard) and its totals over
the shards (shard/fanout.py audit_prune_totals), with a counting fake of the SQL calls."""

from __future__ import annotations

from typing import Any

from harvest.cli.audit import prune_on_shard
from harvest.shard.fanout import audit_prune_totals


class _Sql:
    """prune_audit_log answers ``answers`` in turn; count_audit_log counts them."""

    def __init__(self, older: int, answers: list[tuple[int, int]]) -> None:
        self.older, self.answers, self.batches = older, answers, 0

    def count_audit_log(self, older_than: str) -> dict[str, Any]:
        return {"older": self.older, "cutoff": "2025-01-01T00:00:00+00:00"}

    def prune_audit_log(self, older_than: str, batch_size: int, operator: str | None) -> dict[str, Any]:
        deleted, remaining = self.answers[self.batches]
        self.batches += 1
        return {"deleted": deleted, "remaining": remaining, "cutoff": "2025-01-01T00:00:00+00:00"}


def test_batches_go_on_until_none_older_remains() -> None:
    sql = _Sql(5, [(2, 3), (2, 1), (1, 0)])
    done = prune_on_shard(sql, 0, "400 days", 2, False, "ops")
    assert (done["deleted"], done["batches"], done["remaining"], sql.batches) == (5, 3, 0, 3)


def test_a_batch_that_deletes_nothing_while_rows_remain_ends_the_shard_saying_so() -> None:
    """Another prune holds the rows (FOR UPDATE SKIP LOCKED): no spinning on them."""
    sql = _Sql(4, [(2, 2), (0, 2), (9, 0)])
    done = prune_on_shard(sql, 0, "400 days", 2, False, None)
    assert (done["deleted"], done["batches"], done["remaining"], sql.batches) == (2, 2, 2, 2)


def test_nothing_older_is_still_one_batch_and_a_dry_run_none() -> None:
    """One call at least: a prune that names an operator is audited even when it deletes none."""
    sql = _Sql(0, [(0, 0)])
    assert prune_on_shard(sql, 0, "400 days", 2, False, "ops")["batches"] == 1
    dry = _Sql(7, [])
    assert prune_on_shard(dry, 0, "400 days", 2, True, "ops")["older"] == 7 and dry.batches == 0


def test_the_totals_sum_the_shards_and_name_the_ones_missed() -> None:
    results = {
        2: {"deleted": 3, "batches": 1, "remaining": 0, "cutoff": "2025-01-02T00:00:00+00:00"},
        0: {"deleted": 4, "batches": 2, "remaining": 1, "cutoff": "2025-01-01T00:00:00+00:00"},
    }
    totals = audit_prune_totals("400 days", False, results, [1])
    assert (totals["deleted"], totals["batches"], totals["remaining"]) == (7, 3, 1)
    assert totals["cutoff"] == "2025-01-01T00:00:00+00:00"
    assert [r["shard_id"] for r in totals["shards"]] == [0, 2] and totals["unavailable_shards"] == [1]
    dry = audit_prune_totals("400 days", True, {0: {"older": 5, "cutoff": None}, 1: {"older": 2}}, [])
    assert (dry["older"], dry["dry_run"], "deleted" in dry) == (7, True, False)
