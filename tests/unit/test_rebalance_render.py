"""What `harvest shard rebalance` and `rebalance-resume` print when there is nothing to do:
rebalance-resume with no open move has no target, and said `shard 2 -> -: nothing to move`."""

from __future__ import annotations

from harvest.cli.rebalance import _render

COUNTS = {"moved": 0, "declined": 0, "failed": 0}


def test_a_resume_with_no_open_move_says_so_without_a_target() -> None:
    assert _render({"from": 2, "to": "-", "counts": COUNTS, "moves": []}) == "shard 2: no open move to settle"
    assert (
        _render({"from": 2, "to": 0, "counts": COUNTS, "moves": []}) == "shard 2 -> 0: no open move to settle"
    )


def test_a_rebalance_with_no_candidate_says_nothing_to_move() -> None:
    report = {"from": 0, "to": 2, "dry_run": True, "counts": {"would_move": 0}, "moves": []}
    assert _render(report) == "dry run: shard 0 -> 2: nothing to move"
    assert _render({**report, "dry_run": False}) == "shard 0 -> 2: nothing to move"
