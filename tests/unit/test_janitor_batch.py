"""The retention janitor's batch size under a statement_timeout (harvest/worker/janitor_batch.py):
halved on a cancelled batch down to the floor, doubled back to the configured size after
GROW_AFTER successes in a row, and a grown size refused again waits twice as long to grow."""

from __future__ import annotations

from harvest.worker.janitor_batch import FLOOR, GROW_AFTER, JanitorBatch


def test_halves_down_to_the_floor_then_holds() -> None:
    batch = JanitorBatch()
    assert batch.timed_out(100) == 50 and batch.size == 50
    assert batch.timed_out(None) == 25
    assert batch.timed_out(None) == 12
    assert batch.timed_out(None) == FLOOR
    assert batch.timed_out(None) is None and batch.size == FLOOR  # the floor: tried again as is


def test_a_configured_size_below_the_floor_is_kept() -> None:
    batch = JanitorBatch()
    assert batch.timed_out(4) is None and batch.size == 4


def test_grows_back_to_the_configured_size_after_successes() -> None:
    batch = JanitorBatch()
    batch.succeeded({"batch_size": 100})  # at the configured size: learnt, nothing changes
    assert batch.size is None and batch.configured == 100
    assert batch.timed_out(None) == 50 and batch.timed_out(None) == 25
    for _ in range(GROW_AFTER - 1):
        assert batch.succeeded({"batch_size": 25}) is None
    assert batch.succeeded({"batch_size": 25}) == 50 and batch.size == 50
    for _ in range(GROW_AFTER - 1):
        batch.succeeded({"batch_size": 50})
    assert batch.succeeded({"batch_size": 50}) == 100
    assert batch.size is None  # the configured size again (a later change to it is followed)


def test_a_grown_size_the_timeout_refuses_again_waits_twice_as_long() -> None:
    batch = JanitorBatch(configured=100)
    assert batch.timed_out(None) == 50
    for _ in range(GROW_AFTER):
        batch.succeeded({"batch_size": 50})
    assert batch.size is None  # grew back to 100, which the timeout refuses again at once
    assert batch.timed_out(None) == 50
    assert batch.grow_after == 2 * GROW_AFTER
    for _ in range(GROW_AFTER):
        assert batch.succeeded({"batch_size": 50}) is None  # not yet


def test_the_configured_size_that_held_is_no_growth_refused() -> None:
    batch = JanitorBatch(configured=100)
    assert batch.timed_out(None) == 50
    for _ in range(GROW_AFTER):
        batch.succeeded({"batch_size": 50})
    for _ in range(GROW_AFTER):  # back at 100, and it holds a while
        batch.succeeded({"batch_size": 100})
    assert batch.timed_out(None) == 50 and batch.grow_after == GROW_AFTER
