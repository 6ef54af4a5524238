"""The dashboard's page shapes (harvest/web/ui/views.py), with no server and no browser."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from harvest.shard.fanout import COMPLETE, PARTIAL, UNAVAILABLE
from harvest.web.ui.views import (
    HistoryPage,
    ago,
    dag_graph,
    duration,
    execution_page,
    fleet_banner,
    merge_dags,
    upcoming,
    when,
)

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


def test_execution_page_redacts_the_signals_and_pending_updates_it_is_given() -> None:
    # The rows of harvest.get_history_page (which picks the pending updates and the tails; its
    # pgTAP test checks that): tagged by part, in no particular order.
    def part(name: str, event: dict) -> dict:
        return {"part": name, **event}

    rows = [
        part(
            "count",
            {
                "event_id": 7,
                "event_type": None,
                "event_data": {"events": 7, "signals": 1},
                "created_at": None,
            },
        ),
        part("event", _event(7, "UpdateCompleted", seq=1, update_id="u1", result=5, failure=None)),
        part("event", _event(1, "WorkflowStarted", workflow_name="w", input=["secret"])),
        part("event", _event(3, "SignalReceived", name="approved", payload={"card": "4111"}, signal_id="s1")),
        part(
            "signal", _event(3, "SignalReceived", name="approved", payload={"card": "4111"}, signal_id="s1")
        ),
        part("update", _event(5, "UpdateAccepted", update_id="u2", name="spend", input=[6])),
        part("reset", _event(6, "WorkflowTaskCompleted")),
        part("reset", _event(2, "WorkflowTaskCompleted")),
    ]
    row = {"id": "x", "input": ["secret"], "output": None}

    def read(full: bool) -> HistoryPage:
        page = HistoryPage(500, full=full)
        page.add_rows(rows)
        return page

    page = execution_page(row, {}, read(False), full=False)
    assert page["payloads"]["input"] == {"redacted": True, "bytes": 10}
    assert "secret" not in repr(page["events"]) and "4111" not in repr(page["signals"])
    assert [s["name"] for s in page["signals"]] == ["approved"]
    assert [u["update_id"] for u in page["pending_updates"]] == ["u2"]
    assert page["resettable"] == [1, 5]  # the last event before each workflow task
    assert [e["event_id"] for e in page["events"]] == [1, 3, 7]
    assert (page["total_events"], page["total_signals"], page["history_links"]) == (
        7,
        1,
        {"older": None, "newer": None},
    )
    shown = execution_page(row, {}, read(True), full=True)
    assert shown["payloads"]["input"] == ["secret"] and shown["signals"][0]["payload"] == {"card": "4111"}


def _task(name: str, *upstream: str, state: str = "success") -> dict:
    return {"task": name, "upstream": list(upstream), "state": state}


def test_dag_graph_levels_columns_and_edges() -> None:
    # a diamond with a tail, declared out of order, and an edge that skips a column
    tasks = [
        _task("d", "b", "c"),
        _task("a"),
        _task("b", "a", state="failed"),
        _task("c", "a"),
        _task("e", "a", "d", state="pending"),
    ]
    g = dag_graph(tasks)
    level = {n["task"]: n["level"] for n in g["nodes"]}
    assert level == {"a": 0, "b": 1, "c": 1, "d": 2, "e": 3}
    x = {n["task"]: n["x"] for n in g["nodes"]}
    y = {n["task"]: n["y"] for n in g["nodes"]}
    assert x["a"] < x["b"] == x["c"] < x["d"] < x["e"]
    assert y["b"] < y["c"]  # a column keeps the declared order
    edges = {(e["from"], e["to"]): e for e in g["edges"]}
    assert set(edges) == {("b", "d"), ("c", "d"), ("a", "b"), ("a", "c"), ("a", "e"), ("d", "e")}
    assert edges[("b", "d")]["state"] == "failed"
    # a -> e skips two columns: it runs along a lane below every box, inside the picture
    lowest = max(n["y"] for n in g["nodes"]) + g["h"]
    lane = float(edges[("a", "e")]["d"].split(" L")[1].split(",")[1].split()[0])
    assert lowest < lane < g["height"]
    assert " L" not in edges[("d", "e")]["d"]  # the next column: one curve
    assert g["width"] == max(x.values()) + g["w"] + 12
    assert dag_graph([])["nodes"] == []


def test_merge_dags_over_shards_and_durations() -> None:
    earlier, later = NOW - timedelta(hours=1), NOW
    rows = merge_dags(
        {
            0: [
                {
                    "dag_name": "etl",
                    "paused": False,
                    "running_runs": 1,
                    "last_run_at": earlier,
                    "last_run_status": "COMPLETED",
                }
            ],
            1: [
                {
                    "dag_name": "etl",
                    "paused": True,
                    "running_runs": 2,
                    "last_run_at": later,
                    "last_run_status": "FAILED",
                },
                {
                    "dag_name": "adhoc",
                    "paused": False,
                    "running_runs": 0,
                    "last_run_at": None,
                    "last_run_status": None,
                },
            ],
        }
    )
    assert [r["dag_name"] for r in rows] == ["adhoc", "etl"]
    etl = rows[1]
    assert etl["shards"] == [0, 1] and etl["paused"] and etl["paused_shards"] == [1]
    assert etl["running_runs"] == 3 and (etl["last_run_at"], etl["last_run_status"]) == (later, "FAILED")
    assert [duration(s) for s in (None, 0.25, 12.34, 245, 7380)] == [
        "-",
        "250ms",
        "12.3s",
        "4m 05s",
        "2h 03m",
    ]


def test_upcoming_fire_times_of_a_stored_schedule() -> None:
    row = {
        "cron": "0 3 * * *",
        "interval_secs": None,
        "timezone": "Europe/Paris",
        "paused": False,
        "next_fire_at": None,
        "anchor_at": "2026-03-28T12:00:00+00:00",
        "last_slot_at": None,
    }
    times = upcoming(row, 3)
    assert [t.isoformat() for t in times] == [  # 03:00 CEST (01:00 UTC) from the spring-forward night on
        "2026-03-29T01:00:00+00:00",
        "2026-03-30T01:00:00+00:00",
        "2026-03-31T01:00:00+00:00",
    ]
    assert upcoming({**row, "paused": True}) == []
    broken = {**row, "cron": "not a cron", "next_fire_at": NOW}
    assert upcoming(broken) == [NOW]  # what the row says, when this version cannot compute more


def test_a_json_value_on_a_page_writes_its_times_and_numbers_as_the_api_does() -> None:
    """pretty() and one_line() wrote what JSON has no type for by str(): a time in the
    reader's session zone, with a space ("2026-12-06 09:00:00+07:00"), a decimal in quotes,
    an interval as "0:01:30", where the API's answer for the same row writes
    "2026-12-06T02:00:00+00:00", 1.5 and 90.0. The page now shows the API's text."""
    import json
    from decimal import Decimal

    from harvest.web.errors import compact_json
    from harvest.web.ui.views import one_line, pretty

    value = {
        "at": datetime(2026, 12, 6, 9, 0, tzinfo=timezone(timedelta(hours=7))),
        "cost": Decimal("1.5"),
        "waited": timedelta(seconds=90),
    }
    api = json.loads(compact_json(value))
    assert api == {"at": "2026-12-06T02:00:00+00:00", "cost": 1.5, "waited": 90.0}
    assert json.loads(pretty(value)) == api
    line, whole = one_line(value)
    assert json.loads(line) == api and whole is None
    line, whole = one_line(value, width=10)
    assert whole is not None and json.loads(whole) == api
