"""The dashboard's page shapes (harvest/web/ui/views.py), with no server and no browser."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from harvest.shard.fanout import COMPLETE, PARTIAL, UNAVAILABLE
from harvest.web.ui.views import ago, execution_page, fleet_banner, when

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def test_relative_times() -> None:
    assert ago(NOW, NOW) == "just now"
    assert ago(NOW - timedelta(seconds=3), NOW) == "3s ago"
    assert ago(NOW - timedelta(minutes=4, seconds=30), NOW) == "4m ago"
    assert ago(NOW - timedelta(days=2), NOW) == "2d ago"
    assert ago(NOW + timedelta(minutes=59), NOW) == "in 59m"
    assert ago(None) == "never"
    assert when("2026-05-01T14:00:00+02:00") == "2026-05-01 12:00:00Z"
    assert when(None) == "-"


def test_fleet_banner_levels() -> None:
    fleet = {"healthy": 4, "stale": 0, "draining": 1, "stopped": 2, "total": 7}
    assert fleet_banner(fleet, COMPLETE) == {
        "level": "Healthy",
        "total": 7,
        "active": 4,
        "draining": 1,
        "stopped": 2,
        "stale": 0,
    }
    assert fleet_banner({**fleet, "stale": 1, "healthy": 3}, COMPLETE)["level"] == "Degraded"
    assert fleet_banner(fleet, PARTIAL)["level"] == "Degraded"  # a shard could not be read
    assert fleet_banner({**fleet, "healthy": 0}, COMPLETE)["level"] == "Unhealthy"  # nobody claims
    assert fleet_banner({}, UNAVAILABLE)["level"] == "Unhealthy"


def _event(event_id: int, event_type: str, **data) -> dict:
    return {"event_id": event_id, "event_type": event_type, "event_data": data, "created_at": NOW}


def test_execution_page_redacts_and_finds_signals_and_pending_updates() -> None:
    history = [
        _event(1, "WorkflowStarted", workflow_name="w", input=["secret"]),
        _event(2, "WorkflowTaskCompleted", through=1),
        _event(3, "SignalReceived", name="approved", payload={"card": "4111"}, signal_id="s1"),
        _event(4, "UpdateAccepted", update_id="u1", name="spend", input=[5]),
        _event(5, "UpdateAccepted", update_id="u2", name="spend", input=[6]),
        _event(6, "WorkflowTaskCompleted", through=5),
        _event(7, "UpdateCompleted", seq=1, update_id="u1", result=5, failure=None),
    ]
    row = {"id": "x", "input": ["secret"], "output": None}
    page = execution_page(row, {}, history, full=False)
    assert page["payloads"]["input"] == {"redacted": True, "bytes": 10}
    assert "secret" not in repr(page["events"]) and "4111" not in repr(page["signals"])
    assert [s["name"] for s in page["signals"]] == ["approved"]
    assert [u["update_id"] for u in page["pending_updates"]] == ["u2"]
    assert page["resettable"] == [1, 5]  # the last event before each workflow task
    shown = execution_page(row, {}, history, full=True)
    assert shown["payloads"]["input"] == ["secret"] and shown["signals"][0]["payload"] == {"card": "4111"}
