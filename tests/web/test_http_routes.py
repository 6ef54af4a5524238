"""The second wave of management routes through the ASGI app on a real Postgres: schedules,
DAGs, pause/resume, completion by task token, payload erasure and legal holds, the start-throttle
override and API tokens (docs/http-api.md). Every status each route answers, and the scopes."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from web_helpers import api_client

from harvest import App, Throttle, activity, workflow
from harvest.db.sqlapi import SqlApi
from harvest.declare.dags import Dag

HANDED: list[str] = []


@activity(start_to_close="60s")
async def elsewhere(ctx, tag: str) -> str:
    HANDED.append(ctx.task_token)
    raise ctx.complete_async()


@workflow
async def external(ctx, tag: str) -> str:
    return await ctx.execute_activity(elsewhere, tag)


@workflow
async def idle(ctx) -> None:
    await ctx.wait_for_signal("go")


@workflow(throttle=Throttle(rps=0.01, burst=1))
async def paced(ctx, n: int) -> int:
    return n


@workflow(throttle=Throttle(rps=1, key="input.tenant"))
async def per_tenant(ctx, job: dict) -> dict:
    return job


@activity
async def noop(ctx, conf: dict) -> None:
    return None


NIGHTLY = Dag("nightly", max_active_runs=1)
NIGHTLY.task("only", noop)
WIDE = Dag("wide", max_active_runs=5)
WIDE.task("only", noop)
APP = App(workflows=[external, idle, paced, per_tenant], activities=[elsewhere, noop], dags=[NIGHTLY, WIDE])


def error_of(response) -> dict:
    body = response.json()
    assert set(body["error"]) >= {"code", "message"}, body
    return body["error"]


@pytest.fixture
def api(db: str):
    with api_client(db, app=APP) as client:
        yield client


def wait_for(predicate, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


# -- schedules ------------------------------------------------------------------------------------
def test_a_stored_schedule_the_scheduler_cannot_compute_is_shown_with_its_problem(api, db: str) -> None:
    """A cron stored through psql that does not parse (SQL cannot parse cron): GET shows the
    schedule, no next fire times and what is wrong, so it can be fixed with a PATCH; it
    answered 400 invalid_argument, as if the request were wrong."""
    with psycopg.connect(db, autocommit=True) as conn:
        SqlApi(conn).create_schedule("typo", "idle", cron="0 25 * * *")
    got = api.get("/admin/schedules/typo")
    assert got.status_code == 200, got.text
    assert got.json()["next_fire_times"] == [] and "the hour field '25'" in got.json()["problem"]
    fixed = api.patch("/admin/schedules/typo", json={"cron": "0 23 * * *"})
    assert (
        fixed.status_code == 200
        and "problem" not in fixed.json()
        and len(fixed.json()["next_fire_times"]) == 5
    )


def test_a_schedule_whose_name_holds_a_slash_is_reached_by_every_route(api, db: str) -> None:
    """A schedule named ``billing/monthly`` (the SQL, the CLI and an App take such a name, and
    the dashboard's pages reach it): each /admin/schedules/{name} route reaches it with the "/"
    sent as %2F. They answered 404 "no route" (the name cut at the "/"), so it could be made
    over the API but never read, paused or deleted there."""
    made = api.post("/admin/schedules/workflow", json={"name": "billing/monthly", "every": "1h"})
    assert made.status_code == 201, made.text
    one = "/admin/schedules/billing%2Fmonthly"
    got = api.get(one)
    assert got.status_code == 200 and got.json()["name"] == "billing/monthly", got.text
    assert api.patch(one, json={"every": "2h"}).json()["interval_secs"] == 7200
    assert api.post(f"{one}/pause", json={"note": "n"}).json()["paused"] is True
    assert api.post(f"{one}/resume").json()["paused"] is False
    fired = api.post(f"{one}/trigger", json={})
    assert fired.status_code == 200 and fired.json()["workflow_id"].startswith("sched:billing/monthly:")
    filled = api.post(f"{one}/backfill", json={"from": "2020-01-01T00:00:00Z", "to": "2020-01-01T00:00:00Z"})
    assert filled.status_code == 200 and filled.json()["slots"] == 1, filled.text
    # A schedule named like a route's last word is still that schedule, and the list's address
    # with a trailing / names the list's (not a schedule named "").
    assert api.post("/admin/schedules/workflow", json={"name": "x/pause", "every": "1h"}).status_code == 201
    assert api.post("/admin/schedules/x%2Fpause/pause", json={}).json()["name"] == "x/pause"
    assert api.get("/admin/schedules/x%2Fpause").json()["paused"] is True
    assert api.get("/admin/schedules/billing").status_code == 404
    listed = api.get("/admin/schedules/", follow_redirects=False)  # no redirect: the route named
    assert listed.status_code == 404 and "the route is /admin/schedules, without" in listed.text
    assert api.delete(one).json() == {"name": "billing/monthly", "deleted": True}
    assert api.get(one).status_code == 404


def test_a_backfill_refused_for_its_range_names_the_field(api) -> None:
    """A backfill whose range ends before it starts, or holds more than 10000 slots: a 400 that
    names the field (``to``), as every refusal of a bad field does; it named none."""
    assert api.post("/admin/schedules/workflow", json={"name": "bf", "every": "1m"}).status_code == 201
    backwards = api.post(
        "/admin/schedules/bf/backfill", json={"from": "2020-01-02T00:00:00Z", "to": "2020-01-01T00:00:00Z"}
    )
    assert backwards.status_code == 400 and error_of(backwards)["field"] == "to", backwards.text
    too_long = api.post(
        "/admin/schedules/bf/backfill", json={"from": "2019-01-01T00:00:00Z", "to": "2020-01-01T00:00:00Z"}
    )
    assert too_long.status_code == 400 and error_of(too_long)["field"] == "to", too_long.text
    assert "more than 10000 slots" in error_of(too_long)["message"]


def test_a_patch_of_the_cron_alone_keeps_the_zone(api) -> None:
    """PATCH {"cron": ...} changes the expression in the zone the schedule has (it reset the
    zone to UTC); {"cron", "tz"} changes both."""
    made = api.post(
        "/admin/schedules/workflow",
        json={"name": "paris", "workflow_name": "idle", "cron": "0 3 * * *", "tz": "Europe/Paris"},
    )
    assert made.status_code == 201, made.text
    kept = api.patch("/admin/schedules/paris", json={"cron": "0 4 * * *"})
    assert kept.status_code == 200, kept.text
    assert (kept.json()["cron"], kept.json()["timezone"]) == ("0 4 * * *", "Europe/Paris")
    moved = api.patch("/admin/schedules/paris", json={"cron": "0 5 * * *", "tz": "Asia/Tokyo"})
    assert (moved.json()["cron"], moved.json()["timezone"]) == ("0 5 * * *", "Asia/Tokyo")


def test_a_patch_clears_the_args_a_queue_or_max_active_runs_given_as_null(api) -> None:
    """PATCH {"queue": null} (or args, max_active_runs) was "nothing to change" (a null was as
    absent): a schedule kept an input or a queue once given. Null clears each, to what a create
    without it takes (no arguments; the served App's queue of the workflow, else the registered
    one; one run), as the dashboard's emptied field and `harvest schedule update --clear` do. A
    null of a field that cannot be cleared is still as absent (an input of null is one null
    argument: tests/web/test_schedule_arguments.py)."""
    made = api.post(
        "/admin/schedules/workflow",
        # (a workflow the served App does not declare: idle takes no argument)
        json={"name": "clr", "workflow_name": "idle_elsewhere", "every": "1h", "input": {"a": 1},
              "queue": "reports", "max_active_runs": 3},
    )  # fmt: skip
    assert made.status_code == 201, made.text
    patched = api.patch("/admin/schedules/clr", json={"args": None, "queue": None, "max_active_runs": None})
    assert patched.status_code == 200, patched.text
    row = patched.json()
    assert (row["args"], row["queue"], row["max_active_runs"]) == ([], "default", 1)
    assert row["interval_secs"] == 3600  # the rest as it was
    alone = api.patch("/admin/schedules/clr", json={"cron": None})
    assert alone.status_code == 400 and "nothing to change" in alone.text


def test_an_unknown_zone_is_named_tz_and_a_window_with_catchup_false_is_refused(api) -> None:
    """A zone no IANA name is a 400 naming tz (it named cron), on a create and a PATCH; a
    catch-up window with catchup false is refused as the CLI's --no-catchup --catchup-window is
    (the window won: catch-up silently on). One check for the API and the dashboard's forms
    (harvest.web.schedule_spec)."""
    zone = {"name": "z", "cron": "0 3 * * *", "tz": "Mars/Olympus"}
    refused = api.post("/admin/schedules/workflow", json=zone)
    assert refused.status_code == 400 and error_of(refused)["field"] == "tz", refused.text
    window = {"name": "w", "every": "1h", "catchup": False, "catchup_window": "2h"}
    refused = api.post("/admin/schedules/workflow", json=window)
    assert refused.status_code == 400 and error_of(refused)["field"] == "catchup_window", refused.text
    assert api.post("/admin/schedules/workflow", json={"name": "w", "every": "1h"}).status_code == 201
    patched = api.patch("/admin/schedules/w", json={"cron": "0 3 * * *", "tz": "Nowhere/Else"})
    assert patched.status_code == 400 and error_of(patched)["field"] == "tz"
    patched = api.patch("/admin/schedules/w", json={"catchup": False, "catchup_window": "1h"})
    assert patched.status_code == 400 and error_of(patched)["field"] == "catchup_window"
    assert api.get("/admin/schedules/w").json()["catchup"] is False


def test_a_bad_duration_names_its_field_once(api) -> None:
    """A refused jitter or catch-up window says its field once ("jitter: jitter: ..." it was)."""
    for field, value in (("jitter", "-5s"), ("catchup_window", "soon")):
        refused = api.post("/admin/schedules/workflow", json={"name": "d", "every": "1h", field: value})
        assert refused.status_code == 400 and error_of(refused)["field"] == field, refused.text
        message = error_of(refused)["message"]
        assert message.startswith(f"{field}: ") and f"{field}: {field}" not in message, message


def test_schedule_routes_answer_every_status(api) -> None:
    made = api.post(
        "/admin/schedules/workflow",
        json={"name": "nightly-report", "workflow_name": "idle", "cron": "0 3 * * *", "tz": "Europe/Paris"},
    )
    assert made.status_code == 201, made.text
    row = made.json()
    assert row["when"] == "cron 0 3 * * * Europe/Paris" and len(row["next_fire_times"]) == 5
    again = api.post("/admin/schedules/workflow", json={"name": "nightly-report", "every": "15m"})
    assert again.status_code == 409 and error_of(again)["code"] == "schedule_already_exists"
    assert api.post("/admin/schedules/workflow", json={"name": "x"}).status_code == 400  # no timing
    both = api.post("/admin/schedules/workflow", json={"name": "x", "cron": "* * * * *", "every": "1m"})
    assert both.status_code == 400 and error_of(both)["field"] == "every"
    bad_cron = api.post("/admin/schedules/workflow", json={"name": "x", "cron": "61 * * * *"})
    assert bad_cron.status_code == 400 and error_of(bad_cron)["field"] == "cron"
    assert (
        api.post("/admin/schedules/workflow", json={"name": "x", "every": "1m", "tz": "UTC"}).status_code
        == 400
    )
    no_dag = {"name": "dag-sched", "every": "1h", "kind": "dag", "paused": True}  # (no DAG registered)
    refused = api.post("/admin/schedules/workflow", json=no_dag)
    assert refused.status_code == 400 and error_of(refused)["code"] == "unknown_workflow"
    dag_kind = api.post("/admin/schedules/workflow", json={**no_dag, "allow_unregistered": True})
    assert dag_kind.status_code == 201 and dag_kind.json()["paused"] is True

    listed = api.get("/admin/schedules").json()
    assert [r["name"] for r in listed["schedules"]] == ["dag-sched", "nightly-report"]
    assert listed["status"] == "complete" and listed["schedules"][0]["shard_id"] == 0
    only_dags = api.get("/admin/schedules", params={"kind": "dag"}).json()["schedules"]
    assert [r["name"] for r in only_dags] == ["dag-sched"]
    assert api.get("/admin/schedules", params={"kind": "cron"}).status_code == 400

    got = api.get("/admin/schedules/nightly-report")
    assert got.status_code == 200 and got.json()["workflow_name"] == "idle"
    missing = api.get("/admin/schedules/nope")
    assert missing.status_code == 404 and error_of(missing)["code"] == "not_found"
    elsewhere = api.get("/admin/schedules/nightly-report", params={"shard_id": 3})
    assert elsewhere.status_code == 400 and error_of(elsewhere)["field"] == "shard_id"

    updated = api.patch("/admin/schedules/nightly-report", json={"every": "30m", "max_active_runs": 2})
    assert updated.status_code == 200, updated.text
    assert updated.json()["when"] == "every 1800s" and updated.json()["max_active_runs"] == 2
    assert api.patch("/admin/schedules/nightly-report", json={}).status_code == 400
    assert api.patch("/admin/schedules/nope", json={"every": "1h"}).status_code == 404

    paused = api.post("/admin/schedules/nightly-report/pause", json={"note": "maintenance"})
    assert paused.status_code == 200 and paused.json()["paused"] is True
    assert paused.json()["next_fire_times"] == []
    resumed = api.post("/admin/schedules/nightly-report/resume")
    assert resumed.status_code == 200 and resumed.json()["paused"] is False
    assert api.post("/admin/schedules/nope/pause", json={}).status_code == 404

    fired = api.post("/admin/schedules/nightly-report/trigger", json={"overlap": "allow_all"})
    assert fired.status_code == 200, fired.text
    assert fired.json()["execution_id"]
    assert (
        api.post("/admin/schedules/nightly-report/trigger", json={"overlap": "sometimes"}).status_code == 400
    )

    backfilled = api.post(
        "/admin/schedules/nightly-report/backfill",
        json={"from": "2026-01-01T00:00:00Z", "to": "2026-01-01T01:00:00Z"},
    )
    assert backfilled.status_code == 200, backfilled.text
    assert backfilled.json()["slots"] == 3  # 00:00, 00:30, 01:00
    backwards = api.post(
        "/admin/schedules/nightly-report/backfill",
        json={"from": "2026-01-02T00:00:00Z", "to": "2026-01-01T00:00:00Z"},
    )
    assert backwards.status_code == 400
    assert (
        api.post("/admin/schedules/nightly-report/backfill", json={"from": "2026-01-01"}).status_code == 400
    )
    # the slot after 9999-12-31T23:30 is past datetime's range: a 400 (it was a 500)
    at_the_end = api.post(
        "/admin/schedules/nightly-report/backfill",
        json={"from": "9999-12-31T00:00:00Z", "to": "9999-12-31T23:59:59Z"},
    )
    assert at_the_end.status_code == 400 and "years 1 to 9999" in at_the_end.text

    assert api.delete("/admin/schedules/nightly-report").json() == {"name": "nightly-report", "deleted": True}
    assert api.delete("/admin/schedules/nightly-report").status_code == 404
    audit = api.get("/admin/audit", params={"operation": "schedule.create"}).json()["entries"]
    assert audit and audit[0]["source"] == "api"


# -- DAGs -----------------------------------------------------------------------------------------
def test_dag_routes_trigger_pause_runs_and_retry(api, conn) -> None:
    SqlApi(conn).register_dags([NIGHTLY.catalog(), WIDE.catalog()])
    dags = api.get("/dags").json()
    assert [d["dag_name"] for d in dags["dags"]] == ["nightly", "wide"] and dags["status"] == "complete"

    started = api.post("/dags/nightly/trigger", json={"conf": {"date": "2026-04-21"}, "workflow_id": "n-1"})
    assert started.status_code == 201, started.text
    run_id = started.json()["execution_id"]
    # max_active_runs = 1: a second run while the first runs is a 429 (HR018).
    limited = api.post("/dags/nightly/trigger", json={})
    assert limited.status_code == 429 and error_of(limited)["code"] == "dag_run_limit"
    assert api.post("/dags/nope/trigger", json={}).status_code == 404

    run = api.get(f"/dag-runs/{run_id}")
    assert run.status_code == 200 and run.json()["conf"] == {"date": "2026-04-21"}
    assert {t["task"]: t["state"] for t in run.json()["tasks"]} == {"only": "pending"}
    assert api.get(f"/dag-runs/{uuid.uuid4()}").status_code == 404
    runs = api.get("/dags/nightly/runs", params={"limit": 10}).json()
    assert [str(r["execution_id"]) for r in runs["runs"]] == [run_id]

    # A running run cannot be retried (HR019); once it ended, a retry is a new run, then the same.
    not_yet = api.post(f"/dag-runs/{run_id}/retry")
    assert not_yet.status_code == 409 and error_of(not_yet)["code"] == "dag_run_not_retryable"
    assert api.post(f"/workflows/{run_id}/terminate", json={"reason": "test"}).status_code == 200
    retried = api.post(f"/dag-runs/{run_id}/retry")
    assert retried.status_code == 201, retried.text
    assert retried.json()["started_fresh"] is True and retried.json()["workflow_id"] == "n-1"
    same = api.post(f"/dag-runs/{run_id}/retry")
    assert same.status_code == 200 and same.json()["execution_id"] == retried.json()["execution_id"]

    paused = api.post("/dags/nightly/pause")
    assert paused.status_code == 200 and paused.json()["changed"] is True
    assert api.post("/dags/nightly/pause").json()["changed"] is False
    refused = api.post("/dags/nightly/trigger", json={})
    assert refused.status_code == 409 and error_of(refused)["code"] == "dag_paused"
    assert api.post("/dags/nightly/unpause").json() == {
        "dag_name": "nightly",
        "paused": False,
        "changed": True,
        "shards": {"0": {"changed": True}},
        "shard_errors": [],
        "unavailable_shards": [],
        "status": "complete",
    }
    assert api.post("/dags/nope/pause").status_code == 404
    # The workflow_id of a running run attaches to it: 200 (below max_active_runs).
    first = api.post("/dags/wide/trigger", json={"workflow_id": "w-1"})
    attached = api.post("/dags/wide/trigger", json={"workflow_id": "w-1"})
    assert (first.status_code, attached.status_code) == (201, 200)
    assert attached.json()["execution_id"] == first.json()["execution_id"]
    # A retry is admitted like a trigger: at max_active_runs it is a 429.
    ended = retried.json()["execution_id"]
    assert api.post(f"/workflows/{ended}/terminate", json={}).status_code == 200
    assert api.post("/dags/nightly/trigger", json={}).status_code == 201  # the one run it may have
    full = api.post(f"/dag-runs/{ended}/retry")
    assert full.status_code == 429 and error_of(full)["code"] == "dag_run_limit"
    assert api.post("/dags/wide/trigger", json={"shard_id": 7}).status_code == 400


# -- pause / resume, completion by task token ----------------------------------------------------
def test_pause_resume_and_their_refusals(api) -> None:
    run = api.post("/workflows/idle/start", json={}).json()["execution_id"]
    paused = api.post(f"/workflows/{run}/pause", json={"reason": "maintenance"})
    assert paused.json() == {"execution_id": run, "status": "PAUSED", "changed": True}
    assert api.post(f"/workflows/{run}/pause", json={}).json()["changed"] is False
    assert api.get(f"/workflows/{run}").json()["execution"]["status"] == "PAUSED"
    # A call that needs the run running is refused while it is paused (HR023).
    update = api.post(f"/workflows/{run}/update", json={"update_name": "anything", "timeout_secs": 1})
    assert update.status_code == 409 and error_of(update)["code"] == "workflow_paused"
    resumed = api.post(f"/workflows/{run}/resume", json={})
    assert resumed.json() == {"execution_id": run, "status": "RUNNING", "changed": True}
    assert api.post(f"/workflows/{run}/resume", json={}).json()["changed"] is False
    api.post(f"/workflows/{run}/terminate", json={})
    ended = api.post(f"/workflows/{run}/pause", json={})
    assert ended.status_code == 409 and error_of(ended)["code"] == "workflow_not_running"
    assert api.post(f"/workflows/{uuid.uuid4()}/pause", json={}).status_code == 404
    assert api.post("/workflows/not-a-uuid/resume", json={}).status_code == 400


def test_activities_complete_fail_and_heartbeat_by_task_token(api, start_worker) -> None:
    HANDED.clear()
    start_worker(APP)
    first = api.post("/workflows/external/start", json={"input": "one"}).json()["execution_id"]
    token = wait_for(lambda: HANDED[:1], what="the activity's task token")[0]
    beat = api.post("/activities/heartbeat", json={"task_token": token, "details": {"pct": 50}})
    assert beat.json() == {"task_token": token, "cancel_requested": False}
    done = api.post("/activities/complete", json={"task_token": token, "result": "from outside"})
    assert done.json() == {"task_token": token, "outcome": "completed"}
    result = api.get(f"/workflows/{first}/result", params={"wait": "30s"})
    assert result.status_code == 200 and result.json()["output"] == "from outside"
    repeat = api.post("/activities/complete", json={"task_token": token, "result": "from outside"})
    assert repeat.json()["outcome"] == "already_completed"
    other = api.post("/activities/complete", json={"task_token": token, "result": "another"})
    assert other.status_code == 409 and error_of(other)["code"] == "stale_task"
    assert api.post("/activities/heartbeat", json={"task_token": token}).status_code == 409

    second = api.post("/workflows/external/start", json={"input": "two"}).json()["execution_id"]
    token2 = wait_for(lambda: HANDED[1:2], what="the second task token")[0]
    failed = api.post(
        "/activities/fail",
        json={"task_token": token2, "error_type": "Declined", "message": "no", "non_retryable": True},
    )
    # A non-retryable failure goes to the dead letters (the run waits for a replay).
    assert failed.status_code == 200 and failed.json()["outcome"] == "dead_lettered", failed.text
    letters = api.get("/dead-letters").json()["dead_letters"]
    assert [str(d["execution_id"]) for d in letters] == [second]

    malformed = api.post("/activities/complete", json={"task_token": "v1:nope"})
    assert malformed.status_code == 400 and error_of(malformed)["field"] == "task_token"
    assert api.post("/activities/fail", json={}).status_code == 400


# -- payload erasure and legal holds ------------------------------------------------------------
def test_erasure_and_legal_hold(api) -> None:
    run = api.post("/workflows/idle/start", json={"input": {"secret": "s3cr3t"}}).json()["execution_id"]
    open_run = api.post(f"/workflows/{run}/erase-payloads", json={})
    assert open_run.status_code == 409 and error_of(open_run)["code"] == "execution_not_terminal"
    api.post(f"/workflows/{run}/terminate", json={})
    held = api.post(f"/workflows/{run}/legal-hold", json={"reason": "case 42"})
    assert held.status_code == 200 and held.json()["legal_hold"] is True
    refused = api.post(f"/workflows/{run}/erase-payloads", json={})
    assert refused.status_code == 409 and error_of(refused)["code"] == "legal_hold_active"
    assert api.post(f"/workflows/{run}/legal-hold", json={}).status_code == 400  # reason required
    released = api.delete(f"/workflows/{run}/legal-hold")
    assert released.json()["released"] is True
    assert api.delete(f"/workflows/{run}/legal-hold").json()["released"] is False
    erased = api.post(f"/workflows/{run}/erase-payloads", json={"operator_id": "dpo"})
    assert erased.status_code == 200, erased.text
    assert erased.json()["prior_residences"] == []
    history = api.get(f"/workflows/{run}/history", params={"payload_policy": "full"}).text
    assert "s3cr3t" not in history
    missing = uuid.uuid4()
    assert api.post(f"/workflows/{missing}/erase-payloads", json={}).status_code == 404
    assert api.post(f"/workflows/{missing}/legal-hold", json={"reason": "x"}).status_code == 404


def test_releasing_the_hold_of_an_unknown_run_is_a_404_and_names_the_operator(api, conn) -> None:
    """DELETE /workflows/{id}/legal-hold answers 404 for a run that does not exist (as the docs
    and /openapi.json say), not 200 `released: false` with an audit row about nothing; a hold
    that outlived its run (retention deleted it) is still released. `operator_id` (the CLI's
    --operator-id) is the operator the audit log records."""
    missing = uuid.uuid4()
    unknown = api.delete(f"/workflows/{missing}/legal-hold")
    assert unknown.status_code == 404, unknown.text
    assert error_of(unknown)["code"] == "not_found"
    audited = conn.execute("SELECT count(*) FROM harvest.audit_log WHERE target = %s", (str(missing),))
    assert audited.fetchone() == (0,)
    orphan = uuid.uuid4()  # a hold whose run retention deleted
    conn.execute(
        "INSERT INTO harvest.legal_holds (execution_id, reason, set_at, set_by)"
        " VALUES (%s, 'x', now(), 'ops')",
        (orphan,),
    )
    assert api.delete(f"/workflows/{orphan}/legal-hold").json()["released"] is True
    run = api.post("/workflows/idle/start", json={}).json()["execution_id"]
    api.post(f"/workflows/{run}/legal-hold", json={"reason": "case 9"})
    released = api.delete(f"/workflows/{run}/legal-hold", params={"operator_id": "dpo"})
    assert released.status_code == 200 and released.json()["released"] is True
    who = conn.execute(
        "SELECT operator_id FROM harvest.audit_log"
        " WHERE target = %s AND operation = 'workflow.legal_hold.release'",
        (run,),
    )
    assert who.fetchall() == [("dpo",)]


# -- start-throttle override --------------------------------------------------------------------
def test_start_throttle_override_routes(api, conn) -> None:
    from psycopg.types.json import Jsonb

    conn.execute("SELECT harvest.declare_flow_policies(%s)", (Jsonb(APP.flow_policies()),))
    applied = api.post("/admin/start-throttles/paced/override", json={"rps": 50, "ttl_secs": 60})
    assert applied.status_code == 200, applied.text
    assert applied.json()["shard_errors"] == [] and set(applied.json()["shards"]) == {"0"}
    shown = api.get("/admin/start-throttles/paced").json()["shards"]["0"]
    assert shown["override_rps"] == 50
    audit = api.get("/admin/audit").json()["entries"]
    assert any(e["operation"].startswith("start_throttle") and e["source"] == "api" for e in audit)
    cleared = api.delete("/admin/start-throttles/paced/override")
    assert cleared.status_code == 200 and cleared.json()["shards"]["0"] is True
    assert api.get("/admin/start-throttles/paced").json()["shards"]["0"]["override_rps"] is None
    undeclared = api.post("/admin/start-throttles/idle/override", json={"rps": 5})
    assert undeclared.status_code == 404, undeclared.text
    assert api.post("/admin/start-throttles/paced/override", json={"rps": 0}).status_code == 400
    assert api.post("/admin/start-throttles/paced/override", json={}).status_code == 400
    keyed = api.post("/admin/start-throttles/per_tenant/override", json={"rps": 5})
    assert keyed.status_code == 409 and error_of(keyed)["code"] == "policy_conflict"


OURS = "/admin/start-throttles/{workflow_name}/override"
SPEC = "/admin/start-throttle/{workflow_name}/override"  # the sharding guide's spelling (singular)


def test_the_specs_singular_override_path_is_the_same_route(db: str, tokens: dict[str, str], conn) -> None:
    """The spec names `POST/DELETE /admin/start-throttle/{workflow_name}/override`; ours is
    plural, like /admin/rate-limits. Both are served by one route: the same answers (a set, a
    clear, each refusal: 400, 404, 409), the same admin scope (401 without a token, 403 with an
    operate one), one audit route (the plural's). /openapi.json documents the plural and names
    the singular as its alias, not as an operation of its own (was: a 404)."""
    from psycopg.types.json import Jsonb

    conn.execute("SELECT harvest.declare_flow_policies(%s)", (Jsonb(APP.flow_policies()),))
    admin = {"Authorization": f"Bearer {tokens['admin']}"}
    operate = {"Authorization": f"Bearer {tokens['operate']}"}

    def both(method: str, name: str, **options) -> list:
        return [
            api.request(method, template.replace("{workflow_name}", name), **options)
            for template in (OURS, SPEC)
        ]

    below = ((None, 401, "unauthenticated"), (operate, 403, "permission_denied"))
    with api_client(db, profile="production", app=APP) as api:
        for method, payload in (("POST", {"rps": 50, "ttl_secs": 60}), ("DELETE", None)):
            for headers, status, code in below:
                ours, spec = both(method, "paced", json=payload, headers=headers)
                assert ours.status_code == spec.status_code == status, (method, spec.text)
                assert error_of(spec)["code"] == code and spec.json() == ours.json()
        refusals = [
            ("POST", "paced", {"rps": 0}, 400),  # out of bounds
            ("POST", "paced", {}, 400),  # no rps
            ("POST", "idle", {"rps": 5}, 404),  # no throttle declared
            ("POST", "per_tenant", {"rps": 5}, 409),  # a keyed throttle
        ]
        for method, name, payload, status in refusals:
            ours, spec = both(method, name, json=payload, headers=admin)
            assert ours.status_code == spec.status_code == status, (name, payload, spec.text)
            assert spec.json() == ours.json()

        def shown() -> float | None:
            read = api.get("/admin/start-throttles/paced", headers=admin)
            return read.json()["shards"]["0"]["override_rps"]

        # Set by the spec's spelling, read and cleared by ours; then the other way round.
        for setter, clearer in ((SPEC, OURS), (OURS, SPEC)):
            path = setter.replace("{workflow_name}", "paced")
            applied = api.post(path, json={"rps": 40, "ttl_secs": 60}, headers=admin)
            assert applied.status_code == 200 and applied.json()["workflow_name"] == "paced", applied.text
            assert applied.json()["shard_errors"] == [] and set(applied.json()["shards"]) == {"0"}
            assert shown() == 40
            cleared = api.delete(clearer.replace("{workflow_name}", "paced"), headers=admin)
            assert cleared.status_code == 200 and cleared.json() == {
                **cleared.json(),
                "workflow_name": "paced",
                "shards": {"0": True},  # there was one live to clear
            }, cleared.text
            assert shown() is None
        again = both("DELETE", "paced", headers=admin)  # nothing left to clear: was_live false
        assert [a.json()["shards"] for a in again] == [{"0": False}] * 2

        audit = api.get("/admin/audit", headers=admin).json()["entries"]
        routes = {e["route"] for e in audit if e["operation"].startswith("start_throttle")}
        assert routes == {f"POST {OURS}", f"DELETE {OURS}"}, routes

        doc = api.get("/openapi.json").json()
        assert SPEC not in doc["paths"]
        for method in ("post", "delete"):
            assert doc["paths"][OURS][method]["x-harvest-aliases"] == [SPEC]
        assert "x-harvest-aliases" not in doc["paths"]["/admin/start-throttles/{workflow_name}"]["get"]
        # The read is plural only: the spec names no read of a throttle.
        read = api.get("/admin/start-throttle/paced", headers=admin)
        assert read.status_code == 404 and error_of(read)["code"] == "not_found"


# -- tokens and scopes ----------------------------------------------------------------------------
def test_token_routes_show_the_secret_once(db: str, tokens: dict[str, str]) -> None:
    admin = {"Authorization": f"Bearer {tokens['admin']}"}
    with api_client(db, profile="production") as api:
        made = api.post("/admin/tokens", headers=admin, json={"name": "ci-deploy", "scope": "operate"})
        assert made.status_code == 201 and made.headers["Cache-Control"] == "no-store"
        secret = made.json()["secret"]
        assert secret.startswith("hvt_") and made.json()["scope"] == "operate"
        listed = api.get("/admin/tokens", headers=admin)
        assert listed.status_code == 200 and secret not in listed.text
        assert "secret" not in listed.json()["tokens"][0]
        assert {t["name"] for t in listed.json()["tokens"]} >= {"ci-deploy", "t-read"}
        dup = api.post("/admin/tokens", headers=admin, json={"name": "ci-deploy", "scope": "read"})
        assert dup.status_code == 409 and error_of(dup)["code"] == "api_token_exists"
        bad = api.post("/admin/tokens", headers=admin, json={"name": "x", "scope": "root"})
        assert bad.status_code == 400 and error_of(bad)["field"] == "scope"
        new = {"Authorization": f"Bearer {secret}"}
        assert api.get("/workflows", headers=new).status_code == 200
        revoked = api.delete("/admin/tokens/ci-deploy", headers=admin)
        assert revoked.status_code == 200 and revoked.json()["revoked"] is True
        assert api.get("/workflows", headers=new).status_code == 401
        assert api.delete("/admin/tokens/ci-deploy", headers=admin).status_code == 404
        everyone = api.get("/admin/tokens", headers=admin, params={"include_revoked": "true"}).json()
        assert any(t["name"] == "ci-deploy" and t["revoked_at"] for t in everyone["tokens"])


def test_a_token_made_with_a_lifetime_over_http_expires(db: str, tokens: dict[str, str]) -> None:
    admin = {"Authorization": f"Bearer {tokens['admin']}"}
    with api_client(db, profile="production") as api:
        made = api.post(
            "/admin/tokens", headers=admin, json={"name": "nightly", "scope": "read", "expires_in_secs": 3600}
        )
        assert made.status_code == 201, made.text
        expires_at = datetime.fromisoformat(made.json()["expires_at"])
        assert timedelta(minutes=59) < expires_at - datetime.now(UTC) <= timedelta(hours=1)
        listed = api.get("/admin/tokens", headers=admin).json()["tokens"]
        assert [t["expires_at"] for t in listed if t["name"] == "nightly"] == [made.json()["expires_at"]]
        for lifetime in (0, -5, 3_155_760_001, "1h"):
            asked = {"name": "x", "scope": "read", "expires_in_secs": lifetime}
            bad = api.post("/admin/tokens", headers=admin, json=asked)
            assert bad.status_code == 400, (lifetime, bad.text)
            assert error_of(bad)["field"] == "expires_in_secs"
        new = {"Authorization": f"Bearer {made.json()['secret']}"}
        assert api.get("/workflows", headers=new).status_code == 200
        with psycopg.connect(db, autocommit=True) as conn:  # its hour has passed
            conn.execute(
                "UPDATE harvest.api_tokens SET expires_at = now() - interval '1 second' WHERE name = %s",
                ("nightly",),
            )
        expired = api.get("/workflows", headers=new)
        assert expired.status_code == 401 and "expired" in error_of(expired)["message"], expired.text
        assert made.json()["secret"] not in expired.text


def test_each_new_route_refuses_a_scope_below_its_own(db: str, tokens: dict[str, str]) -> None:
    run = str(uuid.uuid4())
    token = f"v1:{run}:1:1:1:1"
    routes = [
        ("GET", "/admin/schedules", None, "read"),
        ("GET", "/admin/schedules/x", None, "read"),
        ("POST", "/admin/schedules/workflow", {"name": "s", "every": "1h"}, "operate"),
        ("PATCH", "/admin/schedules/x", {"every": "1h"}, "operate"),
        ("DELETE", "/admin/schedules/x", None, "operate"),
        ("POST", "/admin/schedules/x/pause", {}, "operate"),
        ("POST", "/admin/schedules/x/resume", None, "operate"),
        ("POST", "/admin/schedules/x/trigger", {}, "operate"),
        (
            "POST",
            "/admin/schedules/x/backfill",
            {"from": "2026-01-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"},
            "operate",
        ),
        ("GET", "/dags", None, "read"),
        ("POST", "/dags/x/trigger", {}, "operate"),
        ("POST", "/dags/x/pause", None, "operate"),
        ("POST", "/dags/x/unpause", None, "operate"),
        ("GET", "/dags/x/runs", None, "read"),
        ("GET", f"/dag-runs/{run}", None, "read"),
        ("GET", f"/workflows/{run}/result", None, "read"),
        ("POST", f"/dag-runs/{run}/retry", None, "operate"),
        ("POST", f"/workflows/{run}/pause", {}, "operate"),
        ("POST", f"/workflows/{run}/resume", {}, "operate"),
        ("POST", "/activities/complete", {"task_token": token}, "operate"),
        ("POST", "/activities/fail", {"task_token": token}, "operate"),
        ("POST", "/activities/heartbeat", {"task_token": token}, "operate"),
        ("POST", f"/workflows/{run}/erase-payloads", {}, "admin"),
        ("POST", f"/workflows/{run}/legal-hold", {"reason": "r"}, "admin"),
        ("DELETE", f"/workflows/{run}/legal-hold", None, "admin"),
        ("GET", "/admin/start-throttles/x", None, "admin"),
        ("POST", "/admin/start-throttles/x/override", {"rps": 1}, "admin"),
        ("DELETE", "/admin/start-throttles/x/override", None, "admin"),
        ("GET", "/admin/tokens", None, "admin"),
        ("POST", "/admin/tokens", {"name": "n", "scope": "read"}, "admin"),
        ("DELETE", "/admin/tokens/nobody", None, "admin"),
        ("GET", "/history/export-batch", None, "read"),
        ("GET", f"/workflows/{run}/history/export", None, "read"),
        ("GET", "/admin/preflight", None, "read"),
        ("GET", "/admin/queue-coverage", None, "read"),
        ("GET", "/admin/retention/settings", None, "admin"),
        ("POST", "/admin/retention/settings", {"max_age": "off"}, "admin"),
        ("GET", "/admin/queues/scaling", None, "admin"),
        ("POST", "/admin/shards/3/release-owed-ends", {"dry_run": True}, "admin"),
        # (Stop 57: the activity rate limits over HTTP, and the writes on every shard that now
        # answer each shard's refusal apart: an admin's, as the throttles' and the sweep's.)
        ("GET", "/admin/rate-limits/x", None, "admin"),
        ("POST", "/admin/rate-limits/x/override", {"rps": 1}, "admin"),
        ("DELETE", "/admin/rate-limits/x/override", None, "admin"),
        ("POST", "/workers/nobody/drain", {}, "admin"),
        ("POST", "/admin/retention/run-now", {"dry_run": True}, "admin"),
        ("POST", "/admin/audit/prune", {"older_than": "400 days", "dry_run": True}, "admin"),
    ]
    below = {"operate": "read", "admin": "operate"}
    with api_client(db, profile="production") as api:
        declared = {(e.method, e.path): e.scope for e in api.app.state.endpoints}
        for method, path, payload, scope in routes:
            assert api.request(method, path, json=payload).status_code == 401, path
            template = next(p for (m, p) in declared if m == method and _matches(p, path))
            assert declared[(method, template)] == scope, (method, path)
            if scope in below:
                bearer = {"Authorization": f"Bearer {tokens[below[scope]]}"}
                refused = api.request(method, path, json=payload, headers=bearer)
                assert refused.status_code == 403, (method, path, refused.text)
                assert error_of(refused)["code"] == "permission_denied"
            # The route's own scope gets past the authorizer (whatever the database says next).
            allowed = api.request(
                method, path, json=payload, headers={"Authorization": f"Bearer {tokens[scope]}"}
            )
            assert allowed.status_code not in (401, 403), (method, path, allowed.text)
    # Creating a schedule is granted to harvest_operator: an operate token made one above.
    with psycopg.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM harvest.schedules WHERE name = 's'").fetchone()[0] == 1


def _matches(template: str, path: str) -> bool:
    parts, given = template.strip("/").split("/"), path.strip("/").split("/")
    return len(parts) == len(given) and all(
        p.startswith("{") or p == g for p, g in zip(parts, given, strict=True)
    )


# -- on shards -------------------------------------------------------------------------------------
def test_on_shards_a_schedule_lives_on_its_home_and_the_lists_read_every_shard(two_shards) -> None:
    from harvest.shard.router import ShardRouter

    env = {
        "HARVEST_SHARDS__READABLE": "0,1",
        "HARVEST_SHARDS__WRITABLE": "0,1",
        "HARVEST_SHARDS__URLS__0": two_shards[0],
        "HARVEST_SHARDS__URLS__1": two_shards[1],
    }
    router = ShardRouter(readable=[0, 1], writable=[0, 1], default=0)
    names = [f"sched-{i}" for i in range(8)]
    homes = {name: router.schedule_home(name) for name in names}
    assert set(homes.values()) == {0, 1}  # eight names reach both shards
    for dsn in two_shards.values():
        with psycopg.connect(dsn, autocommit=True) as conn:
            SqlApi(conn).register_dags([NIGHTLY.catalog()])
    with api_client(None, env=env) as api:
        for name in names:
            assert (
                api.post("/admin/schedules/workflow", json={"name": name, "every": "1h"}).status_code == 201
            )
        listed = api.get("/admin/schedules").json()
        assert {r["name"]: r["shard_id"] for r in listed["schedules"]} == homes
        for name in names:  # by name: its home shard
            assert api.get(f"/admin/schedules/{name}").status_code == 200
        other = {name: 1 - shard for name, shard in homes.items()}
        name = names[0]
        assert api.get(f"/admin/schedules/{name}", params={"shard_id": other[name]}).status_code == 404
        assert api.delete(f"/admin/schedules/{name}").status_code == 200
        dags = api.get("/dags").json()["dags"]
        assert sorted((d["dag_name"], d["shard_id"]) for d in dags) == [("nightly", 0), ("nightly", 1)]
        paused = api.post("/dags/nightly/pause").json()
        assert paused["shards"] == {"0": {"changed": True}, "1": {"changed": True}}
    for shard, dsn in two_shards.items():
        with psycopg.connect(dsn) as conn:
            rows = conn.execute("SELECT name FROM harvest.schedules ORDER BY name").fetchall()
            assert [r[0] for r in rows] == sorted(n for n in names[1:] if homes[n] == shard)


def test_a_shard_down_makes_the_lists_partial_and_a_write_to_it_a_503(db: str) -> None:
    from harvest.shard.router import ShardRouter

    env = {
        "HARVEST_SHARDS__READABLE": "0,1",
        "HARVEST_SHARDS__WRITABLE": "0,1",
        "HARVEST_SHARDS__URLS__0": db,  # shard 1 has no pool here
    }
    router = ShardRouter(readable=[0, 1], writable=[0, 1], default=0)
    on_one = next(f"s-{i}" for i in range(100) if router.schedule_home(f"s-{i}") == 1)
    on_zero = next(f"s-{i}" for i in range(100) if router.schedule_home(f"s-{i}") == 0)
    with api_client(None, env=env) as api:
        assert api.post("/admin/schedules/workflow", json={"name": on_zero, "every": "1h"}).status_code == 201
        down = api.post("/admin/schedules/workflow", json={"name": on_one, "every": "1h"})
        assert down.status_code == 503 and down.headers["Retry-After"], down.text
        listed = api.get("/admin/schedules").json()
        assert listed["status"] == "partial" and listed["unavailable_shards"] == [1]
        assert [r["name"] for r in listed["schedules"]] == [on_zero]
        dags = api.get("/dags").json()
        assert dags["status"] == "partial" and dags["unavailable_shards"] == [1]
        assert api.get("/dags/x/runs").status_code == 404  # not registered on the shard that answered
        with psycopg.connect(db, autocommit=True) as conn:
            SqlApi(conn).register_dags([NIGHTLY.catalog()])
        runs = api.get("/dags/nightly/runs").json()
        assert runs["status"] == "partial" and runs["unavailable_shards"] == [1] and runs["runs"] == []
        paused = api.post("/dags/nightly/pause").json()
        assert paused["shard_errors"] == [{"shard_id": 1, "error": "unreachable"}]
