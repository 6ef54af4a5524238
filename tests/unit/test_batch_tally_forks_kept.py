"""A reset's forks_kept (of unchanged, the forks left at their own fork boundary: SQL
reset_workflows) in the batch summary every face answers: summed over the steps and the shards
as the other counts, carried by a summary absorbed again (the dashboard's Continue), and absent
for the other actions, as the SQL answers it (docs/operations.md, "Resetting many runs")."""

from __future__ import annotations

from harvest.client.batch import BatchTally


def _step(forks_kept: int | None, unchanged: int) -> dict:
    answer = {"matched": unchanged, "unchanged": unchanged, "execution_ids": [], "batch_id": "b"}
    return answer if forks_kept is None else {**answer, "forks_kept": forks_kept}


def test_forks_kept_is_summed_over_steps_and_shards_and_absorbed() -> None:
    tally = BatchTally("reset")
    tally.add(0, _step(2, 3))
    tally.add(0, _step(1, 1))
    tally.add(1, _step(4, 4))
    tally.add_followed(1, _step(1, 1))  # (a moved run reset where it lives)
    summary = tally.as_dict()
    assert (summary["forks_kept"], summary["unchanged"]) == (8, 9)
    assert [r["forks_kept"] for r in summary["shards"]] == [3, 5]
    again = BatchTally("reset")
    again.absorb(summary)
    again.add(0, _step(1, 1))
    assert again.as_dict()["forks_kept"] == 9


def test_forks_kept_is_absent_for_the_other_actions_and_zero_in_a_dry_reset() -> None:
    for action in ("cancel", "terminate", "signal", "pause", "resume"):
        tally = BatchTally(action)
        tally.add(0, _step(None, 1))
        summary = tally.as_dict()
        assert "forks_kept" not in summary and "forks_kept" not in summary["shards"][0], action
    dry = BatchTally("reset", True)
    dry.add(0, {"matched": 2, "dry_run": True, "execution_ids": ["a", "b"]})
    assert dry.as_dict()["forks_kept"] == 0
