"""WorkflowReplayer.replay_with_reset: replay what a reset would carry (the history through the
reset point plus the WorkflowResetFork marker) against the current code, after checking the point
is one a reset accepts."""

from __future__ import annotations

from test_replayer import app, flow_v1, recorded_history, reordered, timer_removed

from harvest.testing.replay import WorkflowReplayer, reset_problems

# recorded_history() of flow_v1, by event id:
#  1 WorkflowStarted  2 WorkflowTaskCompleted  3 ActivityScheduled(1 send_email)  4 ActivityCompleted(1)
#  5 WorkflowTaskCompleted  6 ActivityScheduled(2 render)  7 TimerStarted(3)  8 ActivityCompleted(2)
#  9 TimerFired(3) ...


def test_the_history_is_as_the_comment_says():
    events = recorded_history()
    assert [e["event_type"] for e in events[:9]] == [
        "WorkflowStarted",
        "WorkflowTaskCompleted",
        "ActivityScheduled",
        "ActivityCompleted",
        "WorkflowTaskCompleted",
        "ActivityScheduled",
        "TimerStarted",
        "ActivityCompleted",
        "TimerFired",
    ]


def test_a_reset_before_the_change_replays_under_the_new_code():
    history = recorded_history()
    replayer = WorkflowReplayer(app)
    assert not replayer.replay(history, workflow=timer_removed).ok  # the whole history does not
    result = replayer.replay_with_reset(history, 4, workflow=timer_removed)
    assert result.ok, result.error  # the fork carries events 1..4: the timer is not among them


def test_a_reset_after_the_change_is_still_caught():
    result = WorkflowReplayer(app).replay_with_reset(recorded_history(), 9, workflow=timer_removed)
    assert not result.ok
    assert (result.seq, result.expected) == (3, "start_timer")


def test_the_unchanged_code_replays_from_every_valid_point():
    history = recorded_history()
    valid = [e["event_id"] for e in history if not reset_problems(history, e["event_id"])]
    assert 4 in valid and 9 in valid and 3 not in valid and 6 not in valid
    for point in valid:
        assert WorkflowReplayer(app).replay_with_reset(history, point, workflow=flow_v1).ok, point


def test_a_reordered_first_activity_fails_from_any_point_after_it():
    result = WorkflowReplayer(app).replay_with_reset(recorded_history(), 4, workflow=reordered)
    assert not result.ok and result.seq == 1


def test_invalid_points_are_reported_not_replayed():
    history = recorded_history()
    replayer = WorkflowReplayer(app)
    open_activity = replayer.replay_with_reset(history, 3, workflow=flow_v1)
    assert not open_activity.ok
    assert "ActivityScheduled (seq 1, event 3) is unresolved at event 3" in open_activity.error
    inside = replayer.replay_with_reset(history, 6, workflow=flow_v1)
    assert "inside a workflow task's commands (TimerStarted follows)" in inside.error
    assert "ActivityScheduled (seq 2, event 6) is unresolved" in inside.error
    ended = replayer.replay_with_reset(history, len(history), workflow=flow_v1)
    assert f"the run ended at event {len(history)} (WorkflowCompleted)" in ended.error
    outside = replayer.replay_with_reset(history, 999, workflow=flow_v1)
    assert not outside.ok and "outside the history" in outside.error


def test_reset_problems_of_a_timer_cancelled_before_the_point():
    events = [
        {"event_id": 1, "event_type": "WorkflowStarted", "event_data": {"workflow_name": "flow"}},
        {"event_id": 2, "event_type": "WorkflowTaskCompleted", "event_data": {"through": 1}},
        {"event_id": 3, "event_type": "TimerStarted", "event_data": {"seq": 1, "fire_at": "x"}},
        {"event_id": 4, "event_type": "SignalReceived", "event_data": {"name": "s", "payload": 1}},
        {"event_id": 5, "event_type": "WorkflowTaskCompleted", "event_data": {"through": 4}},
        {"event_id": 6, "event_type": "TimerCancelled", "event_data": {"seq": 2, "timer_seq": 1}},
    ]
    assert reset_problems(events, 4) == ["TimerStarted (seq 1, event 3) is unresolved at event 4"]
    assert reset_problems(events, 6) == []


def test_reset_problems_of_a_mutex_held_at_the_point():
    """As harvest._reset_problems: a fork cannot take over a mutex its history holds or awaits."""
    acquire = {"seq": 1, "kind": "mutex_acquire", "value": {"key": "k"}}
    release = {"seq": 2, "kind": "mutex_release", "value": {"key": "k"}}
    events = [
        {"event_id": 1, "event_type": "WorkflowStarted", "event_data": {"workflow_name": "flow"}},
        {"event_id": 2, "event_type": "WorkflowTaskCompleted", "event_data": {"through": 1}},
        {"event_id": 3, "event_type": "MarkerRecorded", "event_data": acquire},
        {"event_id": 4, "event_type": "MutexAcquired", "event_data": {"seq": 1, "key": "k"}},
        {"event_id": 5, "event_type": "WorkflowTaskCompleted", "event_data": {"through": 4}},
        {"event_id": 6, "event_type": "MarkerRecorded", "event_data": release},
    ]
    problem = (
        "mutex 'k' (asked for at event 3) is held or awaited at event 4; a fork cannot take a mutex "
        "over: reset to before event 3 or to after the block released it"
    )
    assert reset_problems(events, 4) == [problem]
    assert reset_problems(events, 6) == []


def test_a_history_with_no_workflow_task_yet_leaves_no_coroutine_unawaited():
    """A reset to event 1 (or a running run exported before its first workflow task) replays
    WorkflowStarted alone: the run's main coroutine was made and never stepped, and its
    RuntimeWarning ("coroutine ... was never awaited") came out when it was collected."""
    import gc
    import warnings

    history = recorded_history()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert WorkflowReplayer(app).replay_with_reset(history, 1, workflow=flow_v1).ok
        assert WorkflowReplayer(app).replay(history[:1], workflow=flow_v1).ok
        gc.collect()
    assert [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)] == []
