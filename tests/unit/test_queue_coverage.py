"""Queue coverage over shards (harvest.config.merge_coverage, which `GET /admin/queue-coverage`
and `harvest queue coverage` share): only a writable shard counts, since a drained shard takes
no new run; a writable shard that gave no answer makes the list unknown (null), never covered."""

from __future__ import annotations

from harvest.config import merge_coverage


def _worker(worker_id: str, *queues: str) -> dict:
    return {"worker_id": worker_id, "queues": list(queues)}


# shard 0 polls alpha and beta; shard 1 (drained in most cases below) has no live worker
RESULTS = {0: (["alpha", "beta"], [_worker("w0", "alpha", "beta")]), 1: (["alpha"], [])}


def test_a_drained_shard_with_no_worker_leaves_no_queue_unpolled() -> None:
    every = merge_coverage(RESULTS, ["alpha", "beta"])  # writable unknown: every shard counts
    assert every["unpolled_declared_queues"] == ["alpha", "beta"]
    drained = merge_coverage(RESULTS, ["alpha", "beta"], writable=[0])
    assert drained["unpolled_declared_queues"] == []
    assert drained["unpolled_by_shard"] == {"0": []}  # a drained shard's gaps are not gaps
    assert drained["live_workers"] == {"alpha": 1, "beta": 1}


def test_a_writable_shard_that_gave_no_answer_makes_the_list_unknown() -> None:
    answered = {0: RESULTS[0]}
    assert (
        merge_coverage(answered, ["alpha"], writable=[0, 1], unavailable=[1])["unpolled_declared_queues"]
        is None
    )
    # A drained shard that did not answer takes no new run: the list stays known.
    assert (
        merge_coverage(answered, ["alpha"], writable=[0], unavailable=[1])["unpolled_declared_queues"] == []
    )
    # Nothing declared is unknown too, never "all covered".
    assert merge_coverage(answered, [], writable=[0])["unpolled_declared_queues"] is None


def test_with_no_declared_queues_the_list_is_unknown_and_the_registered_ones_are_shown() -> None:
    """No App (no runtime installed): the fleet's registered queues stood in for the declared
    ones, so a queue no worker ever registered was missed and `--strict` passed. The list is now
    null; the registered queues and their live workers are still reported."""
    merged = merge_coverage(RESULTS, None, writable=[0])
    assert merged["unpolled_declared_queues"] is None and merged["declared_queues"] is None
    assert merged["registered_queues"] == ["alpha", "beta"]
    assert merged["live_workers"] == {"alpha": 1, "beta": 1}
    assert "registered_queues" not in merge_coverage(RESULTS, ["alpha"], writable=[0])
