"""The worker's owner-mode bookkeeping (harvest/worker/owners.py), without a database."""

from __future__ import annotations

from harvest.core.ids import partition_of
from harvest.worker.owners import Owners


def _task(execution_id: str, workflow_id: str, epoch: int | None) -> dict:
    return {"execution_id": execution_id, "workflow_id": workflow_id, "owner_epoch": epoch}


def _other_partition(workflow_id: str) -> str:
    return next(f"w{n}" for n in range(1000) if partition_of(f"w{n}") != partition_of(workflow_id))


def test_with_owner_mode_off_nothing_is_kept() -> None:
    owners = Owners()
    owners.note(_task("e1", "a", None))
    assert owners.epochs == {} and owners.epoch_for("a") is None
    assert owners.to_renew(set(), 20.0) == []


def test_the_epoch_of_a_partition_is_the_last_one_handed_out() -> None:
    owners = Owners()
    owners.note(_task("e1", "a", 3))
    assert owners.epoch_for("a") == 3
    owners.note(_task("e2", "a", 5))
    assert owners.epochs == {partition_of("a"): 5}
    assert owners.epoch_for(_other_partition("a")) is None


def test_renewals_keep_the_partitions_of_cached_or_recent_runs_and_drop_the_lost() -> None:
    owners = Owners()
    b = _other_partition("a")
    owners.note(_task("e1", "a", 1))
    owners.note(_task("e2", b, 4))
    asked = owners.to_renew({"e1"}, 20.0)
    assert asked == sorted({partition_of("a"), partition_of(b)})
    # Another worker acquired a's partition: e1's cached state must go; b's is renewed.
    gone = owners.renewed(asked, [{"partition_id": partition_of(b), "epoch": 4}])
    assert gone == ["e1"] and owners.lost == 1
    assert owners.epochs == {partition_of(b): 4}
    # Long after it was noted, a partition without a cached run is no longer renewed.
    assert owners.to_renew(set(), 0.0) == []


def test_a_refused_run_is_no_longer_renewed_for() -> None:
    owners = Owners()
    owners.note(_task("e1", "a", 2))
    owners.forget_run("e1")
    assert owners.refused == 1
    assert owners.to_renew({"e1"}, 0.0) == []
