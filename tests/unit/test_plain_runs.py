"""The memory of runs whose activity results go the plain way (harvest/worker/plain_runs.py)."""

from __future__ import annotations

from harvest.worker.plain_runs import BASE_SPAN, TOP_LEVEL, PlainRuns, span


def _event(kind: str) -> dict:
    return {"event_id": 1, "event_type": kind, "event_data": {}}


RESULT, SIGNAL = _event("ActivityCompleted"), _event("SignalReceived")


def test_a_refusal_sends_the_next_results_plain_until_enough_are_clean():
    runs = PlainRuns()
    assert "r" not in runs
    runs.interleaved("r")
    assert "r" in runs and runs.level("r") == 1
    for _ in range(BASE_SPAN - 1):
        runs.clean("r")
        assert "r" in runs
    runs.clean("r")
    assert "r" not in runs and len(runs) == 0  # forgotten: it decides ahead again


def test_interleaving_raises_the_level_and_restarts_the_count():
    runs = PlainRuns()
    runs.interleaved("r")
    runs.clean("r")
    runs.interleaved("r")
    assert runs.level("r") == 2
    for _ in range(span(2) - 1):
        runs.clean("r")
    runs.interleaved("r")  # one more interleaving: the count starts over, one level up
    assert runs.level("r") == 3
    for _ in range(TOP_LEVEL + 3):
        runs.interleaved("r")
    assert runs.level("r") == TOP_LEVEL  # bounded


def test_it_decays_a_level_at_a_time():
    runs = PlainRuns()
    for _ in range(TOP_LEVEL):
        runs.interleaved("r")
    cleans = 0
    while "r" in runs:
        level = runs.level("r")
        runs.clean("r")
        cleans += 1
        assert runs.level("r") in (level, level - 1)
    assert cleans == sum(span(level) for level in range(1, TOP_LEVEL + 1))


def test_observed_tasks():
    runs = PlainRuns()
    runs.observe("r", [RESULT])  # not remembered: nothing to say
    assert "r" not in runs
    runs.interleaved("r")
    runs.observe("r", [SIGNAL])  # no result: says nothing
    runs.observe("r", [SIGNAL, SIGNAL])
    assert runs.level("r") == 1
    runs.observe("r", [SIGNAL, RESULT])  # a decision ahead on it would have been refused
    assert runs.level("r") == 2
    runs.observe("r", [RESULT, SIGNAL])  # signals at the pace of its activities
    assert runs.level("r") == 3
    runs.observe("r", [RESULT, RESULT])
    assert runs.level("r") == 4
    runs.observe("r", [])
    for _ in range(span(4) + span(3)):
        runs.observe("r", [RESULT])  # the result alone: a decision ahead on it would have stood
    assert runs.level("r") == 2


def test_bounded_least_recently_marked_first():
    runs = PlainRuns(capacity=3)
    for name in "abc":
        runs.interleaved(name)
    runs.interleaved("a")  # marked again: now the most recent
    runs.interleaved("d")
    assert len(runs) == 3
    assert "b" not in runs and {"a", "c", "d"} <= {n for n in "abcd" if n in runs}
    runs.forget("a")
    runs.clean("a")  # (forgotten: nothing)
    assert "a" not in runs and len(runs) == 2
