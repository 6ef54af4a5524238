"""DAGs on a real worker and database: every trigger rule, a failure in the middle, a retry
that runs only the failed branch again (counted by the activities' real executions), the run
view derived from history, pause, max_active_runs, trigger conf and the CLI."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter

import psycopg
import pytest
from click.testing import CliRunner
from dag_helpers import register_one_task_dag

from harvest import App, RetryPolicy, activity, workflow
from harvest.cli.main import main
from harvest.core.errors import DagPaused, DagRunLimit, DagRunNotRetryable, NotFound, WorkflowFailed
from harvest.db.connection import connect
from harvest.db.sqlapi import SqlApi
from harvest.declare.dags import Dag, SkipTask
from harvest.testing.replay import WorkflowReplayer

RAN: Counter[str] = Counter()
SEEN: dict[str, list] = {}
FAIL = {"transform_b": True}
GATE = threading.Event()
_lock = threading.Lock()


def _ran(name: str, *args) -> None:
    with _lock:
        RAN[name] += 1
        SEEN.setdefault(name, []).append(list(args))


@activity(retry=RetryPolicy.none())
async def step(ctx, name: str, conf: dict) -> dict:
    _ran(name, conf)
    return {"done": name, "date": conf.get("date")}


@activity(retry=RetryPolicy(max_attempts=2, initial_interval=0.1))
async def flaky(ctx, conf: dict) -> str:
    _ran("transform_b", conf)
    if FAIL["transform_b"]:
        raise RuntimeError("transform_b is broken today")
    return "b"


@activity
async def maybe(ctx, conf: dict) -> None:
    _ran("branch_skip", conf)
    raise SkipTask("nothing to branch on")


@activity
async def combine(ctx, upstream: dict) -> list:
    _ran("load", upstream)
    return sorted(upstream)


@activity
async def wait_gate(ctx, conf: dict) -> str:
    _ran("gated", conf)
    while not GATE.is_set():
        await _sleep(0.05)
    return "open"


async def _sleep(secs: float) -> None:
    import asyncio

    await asyncio.sleep(secs)


@workflow
async def sub_report(ctx, conf: dict) -> str:
    return f"report for {conf.get('date')}"


def build_rules_dag() -> Dag:
    dag = Dag("rules_dag", default_args={"retry": RetryPolicy.none()}, description="every trigger rule")

    def named(task):  # step(name, conf)
        return lambda conf, upstream: [task, conf]

    extract = dag.task("extract", step, args=named("extract"))
    ta = dag.task("transform_a", step, args=named("transform_a")).after(extract)
    tb = dag.task("transform_b", flaky, retry=RetryPolicy(max_attempts=2, initial_interval=0.1)).after(
        extract
    )
    dag.task("load", combine, args=lambda conf, upstream: [upstream]).after(ta, tb)
    dag.task("notify_failure", step, args=named("notify_failure"), trigger_rule="one_failed").after(ta, tb)
    dag.task("audit", step, args=named("audit"), trigger_rule="all_done").after(ta, tb)
    dag.task("on_all_failed", step, args=named("on_all_failed"), trigger_rule="all_failed").after(tb)
    dag.task("report", sub_report, trigger_rule="one_success").after(ta, tb)
    dag.task("quality", step, args=named("quality"), trigger_rule="none_failed").after(ta, tb)
    skip = dag.task("branch_skip", maybe).after(extract)
    dag.task("after_skip", step, args=named("after_skip"), trigger_rule="none_skipped").after(skip, extract)
    dag.task("publish", step, args=named("publish"), trigger_rule="none_failed").after(skip, ta)
    dag.task("heartbeat", step, args=named("heartbeat"), trigger_rule="always").after("load")
    dag.task("downstream_of_skip", step, args=named("downstream_of_skip")).after(skip)
    return dag


RULES_DAG = build_rules_dag()
GATED = Dag("gated_dag", max_active_runs=1)
GATED.task("gated", wait_gate)
APP = App(
    workflows=[sub_report], activities=[step, flaky, maybe, combine, wait_gate], dags=[RULES_DAG, GATED]
)


@pytest.fixture(autouse=True)
def _reset(start_worker):
    # (Asks for start_worker so that it is torn down first: the gate opens before the worker
    # drains, or a gated task still in flight holds the drain until its 30 s join timeout.)
    RAN.clear()
    SEEN.clear()
    FAIL["transform_b"] = True
    GATE.clear()
    yield
    GATE.set()


def wait_for(predicate, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def sql_api(db: str) -> SqlApi:
    return SqlApi(connect(db, autocommit=True))


def registered(db: str, name: str) -> bool:
    with psycopg.connect(db, autocommit=True) as conn:
        return bool(conn.execute("SELECT 1 FROM harvest.dags WHERE dag_name = %s", (name,)).fetchone())


def states(run: dict) -> dict[str, str]:
    return {t["task"]: t["state"] for t in run["tasks"]}


FIRST_RUN = {
    "extract": "success",
    "transform_a": "success",
    "transform_b": "failed",
    "load": "upstream_failed",
    "notify_failure": "success",
    "audit": "success",
    "on_all_failed": "success",
    "report": "success",
    "quality": "upstream_failed",
    "branch_skip": "skipped",
    "after_skip": "skipped",
    "publish": "success",
    "heartbeat": "success",
    "downstream_of_skip": "skipped",
}


def test_every_trigger_rule_a_failure_in_the_middle_and_a_retry_of_the_failed_branch(
    db: str, start_worker, client
) -> None:
    start_worker(APP)
    wait_for(lambda: registered(db, "rules_dag"), what="the worker to register the DAG")
    sql = sql_api(db)
    started = sql.trigger_dag("rules_dag", {"date": "2026-04-21"}, None, "ops")
    assert started["started_fresh"] is True
    first_id = str(started["execution_id"])
    with pytest.raises(WorkflowFailed) as failed:
        client.get_handle(started["execution_id"]).result(timeout=60)
    assert failed.value.failure["error_type"] == "DagRunFailed"
    assert "transform_b" in failed.value.failure["message"]

    run = sql.get_dag_run(started["execution_id"])
    assert run["status"] == "FAILED" and run["conf"] == {"date": "2026-04-21"}
    assert states(run) == FIRST_RUN
    by_task = {t["task"]: t for t in run["tasks"]}
    assert by_task["transform_b"]["attempts"] == 2  # its own retry policy: two attempts, both failed
    assert by_task["transform_b"]["failure"]["error_type"] == "RuntimeError"
    assert by_task["extract"]["attempts"] == 1 and by_task["extract"]["duration_secs"] is not None
    assert by_task["report"]["child_execution_id"] and by_task["report"]["result"] == "report for 2026-04-21"
    assert by_task["load"]["attempts"] == 0 and by_task["load"]["kind"] == "activity"
    assert by_task["load"]["upstream"] == ["transform_a", "transform_b"]
    assert run["counts"]["failed"] == 1 and run["counts"]["success"] == 8
    # The conf reached the tasks; the real executions of the first run:
    assert SEEN["extract"] == [[{"date": "2026-04-21"}]]
    first = dict(RAN)
    assert first == {
        "extract": 1,
        "transform_a": 1,
        "transform_b": 2,
        "notify_failure": 1,
        "audit": 1,
        "on_all_failed": 1,
        "publish": 1,
        "heartbeat": 1,
        "branch_skip": 1,
    }

    # Retry: only the failed branch runs again (transform_b, then load and quality).
    FAIL["transform_b"] = False
    retried = sql.retry_dag_run(started["execution_id"], "ops")
    assert retried["started_fresh"] is True and retried["workflow_id"] == started["workflow_id"]
    assert retried["execution_id"] != started["execution_id"]
    result = client.get_handle(retried["execution_id"]).result(timeout=60)
    assert result["states"]["transform_b"] == "success" and result["results"]["load"] == [
        "transform_a",
        "transform_b",
    ]
    again = Counter(RAN)
    again.subtract(first)
    assert {k: v for k, v in again.items() if v} == {"transform_b": 1, "load": 1, "quality": 1}

    run2 = sql.get_dag_run(retried["execution_id"])
    assert run2["status"] == "COMPLETED" and run2["retry_of"] == first_id
    expected = dict(FIRST_RUN, transform_b="success", load="success", quality="success")
    assert states(run2) == expected
    by_task2 = {t["task"]: t for t in run2["tasks"]}
    assert by_task2["extract"]["reused_from"] == first_id
    assert by_task2["extract"]["result"] == {"done": "extract", "date": "2026-04-21"}
    assert by_task2["branch_skip"]["reused_from"] == first_id
    assert by_task2["transform_b"]["reused_from"] is None and by_task2["transform_b"]["attempts"] == 1

    # Retrying again is idempotent (the newer run is returned); a completed run is not retried.
    assert sql.retry_dag_run(started["execution_id"])["execution_id"] == retried["execution_id"]
    with pytest.raises(DagRunNotRetryable):
        sql.retry_dag_run(retried["execution_id"])
    runs = sql.list_dag_runs("rules_dag", 10)
    assert [r["execution_id"] for r in runs] == [retried["execution_id"], started["execution_id"]]
    assert runs[0]["retry_of"] == started["execution_id"] and runs[1]["counts"]["failed"] == 1
    # Both histories replay through the DAG's code (the pure runtime, no database), and a
    # changed graph does not: the replay compares the commands the interpreter issues.
    replayer = WorkflowReplayer(APP)
    for execution_id in (started["execution_id"], retried["execution_id"]):
        assert replayer.replay(client.get_handle(execution_id).history()).ok
    changed = Dag("rules_dag")
    changed.task("extract", flaky)
    changed_app = App(workflows=[sub_report], activities=[step, flaky], dags=[changed])
    broken = WorkflowReplayer(changed_app).replay(client.get_handle(started["execution_id"]).history())
    assert not broken.ok and "flaky" in broken.error

    # The retry is audited.
    with psycopg.connect(db, autocommit=True) as conn:
        audit = conn.execute(
            "SELECT operator_id, details FROM harvest.audit_log WHERE operation = 'dag.retry'"
        ).fetchall()
    assert audit[0][0] == "ops" and "extract" in audit[0][1]["reused"]


def test_pause_max_active_runs_and_the_cli(db: str, start_worker, client) -> None:
    start_worker(APP)
    wait_for(lambda: registered(db, "gated_dag"), what="the worker to register the DAG")
    runner = CliRunner()
    env = {"HARVEST_DATABASE_URL": db}

    listed = runner.invoke(main, ["dag", "list", "-o", "json"], env=env)
    assert listed.exit_code == 0, listed.output
    # (the fan-out envelope, as GET /dags answers: every shard's DAGs, each with its shard_id)
    names = {d["dag_name"]: d for d in json.loads(listed.output)["dags"]}
    assert names["gated_dag"]["max_active_runs"] == 1 and names["rules_dag"]["tasks"] == 14

    out = runner.invoke(
        main, ["dag", "trigger", "gated_dag", "--conf-json", '{"n": 1}', "-o", "json"], env=env
    )
    assert out.exit_code == 0, out.output
    first = json.loads(out.output)
    wait_for(lambda: RAN["gated"] == 1, what="the gated task to start")
    # A second run while one is RUNNING: max_active_runs 1 refuses it, with one line and exit 1.
    refused = runner.invoke(main, ["dag", "trigger", "gated_dag"], env=env)
    assert refused.exit_code == 1 and "max_active_runs" in refused.output
    with pytest.raises(DagRunLimit):
        sql_api(db).trigger_dag("gated_dag")

    shown = runner.invoke(main, ["dag", "get", first["execution_id"], "-o", "json"], env=env)
    view = json.loads(shown.output)
    assert view["tasks"][0]["state"] == "running" and view["tasks"][0]["attempts"] == 1
    table = runner.invoke(main, ["dag", "get", first["execution_id"]], env=env)
    assert "gated" in table.output and "running" in table.output

    GATE.set()
    assert client.get_handle(first["execution_id"]).result(timeout=30)["states"] == {"gated": "success"}
    assert SEEN["gated"] == [[{"n": 1}]]

    # Paused: a trigger is refused until unpaused.
    assert runner.invoke(main, ["dag", "pause", "gated_dag", "--operator-id", "me"], env=env).exit_code == 0
    paused = runner.invoke(main, ["dag", "trigger", "gated_dag"], env=env)
    assert paused.exit_code == 1 and "paused" in paused.output
    with pytest.raises(DagPaused):
        sql_api(db).trigger_dag("gated_dag")
    listed = json.loads(runner.invoke(main, ["dag", "list", "-o", "json"], env=env).output)
    assert {d["dag_name"]: d["paused"] for d in listed["dags"]}["gated_dag"] is True
    assert runner.invoke(main, ["dag", "unpause", "gated_dag"], env=env).exit_code == 0
    again = runner.invoke(main, ["dag", "trigger", "gated_dag", "-o", "json"], env=env)
    assert again.exit_code == 0, again.output
    assert client.get_handle(json.loads(again.output)["execution_id"]).result(timeout=30)

    runs = json.loads(runner.invoke(main, ["dag", "runs", "gated_dag", "-o", "json"], env=env).output)["runs"]
    assert len(runs) == 2 and all(r["status"] == "COMPLETED" for r in runs)
    unknown = runner.invoke(main, ["dag", "trigger", "nope"], env=env)
    assert unknown.exit_code == 1 and "dag nope is not registered" in unknown.output
    with pytest.raises(NotFound):
        sql_api(db).get_dag_run("00000000-0000-4000-8000-000000000000")
    not_retryable = runner.invoke(main, ["dag", "retry", first["execution_id"]], env=env)
    assert not_retryable.exit_code == 1 and "COMPLETED" in not_retryable.output


def __getattr__(name: str):
    """``test_dags:BROKEN_APP``: an App whose DAG runs an activity it does not register (its
    construction raises, as `harvest preflight --app` loads it)."""
    if name == "BROKEN_APP":
        dag = Dag("broken_dag")
        dag.task("load", combine)
        return App(activities=[step], dags=[dag])
    raise AttributeError(name)


def test_preflight_checks_the_dags_of_an_app(db: str) -> None:
    runner = CliRunner()
    env = {"HARVEST_DATABASE_URL": db}
    good = runner.invoke(main, ["preflight", "--app", "test_dags:APP", "-o", "json"], env=env)
    checks = {c["name"]: c for c in json.loads(good.output)["checks"]}
    assert checks["catalog_consistency"]["status"] == "pass"
    assert "2 DAG(s) their tasks; all resolve" in checks["catalog_consistency"]["summary"]

    bad = runner.invoke(main, ["preflight", "--app", "test_dags:BROKEN_APP", "-o", "json"], env=env)
    assert bad.exit_code == 1
    checks = {c["name"]: c for c in json.loads(bad.output)["checks"]}
    assert checks["app"]["status"] == "fail"
    assert checks["app"]["summary"] == (
        "dag 'broken_dag' task 'load' runs activity 'combine', which the App does not register; "
        "add it to App(activities=[...])"
    )
    # A DAG that went wrong after the App was made (tasks added later) fails the catalog check.
    late = Dag("late_dag")
    late.task("a", step)
    app = App(activities=[step], dags=[late])
    late.tasks["b"] = late.tasks["a"].__class__(late, "b", "activity", "gone", None, None, "all_success", {})
    from harvest.config.preflight import _catalog_consistency

    check = _catalog_consistency(app)
    expected = (
        "dag 'late_dag' task 'b' runs activity 'gone', which the App does not register; "
        "add it to App(activities=[...])"
    )
    assert check.status == "fail" and check.details["failures"] == [expected]


CHILD_FAILS = {"left": 1}


@workflow
async def shaky_child(ctx, conf: dict) -> str:
    _ran("shaky_child", conf)
    with _lock:
        failing = CHILD_FAILS["left"] > 0
        CHILD_FAILS["left"] -= 1
    if failing:
        raise RuntimeError("the child fails its first run")
    return "child ok"


@workflow
async def skipping_child(ctx, conf: dict) -> str:
    raise SkipTask("nothing for the child to do")


CHILD_DAG = Dag("child_dag")
CHILD_DAG.task("shaky", shaky_child, retry=RetryPolicy(max_attempts=2, initial_interval=0.1))
CHILD_DAG.task("skips", skipping_child)
CHILD_DAG.task("after_skip", step, args=["after_skip", {}]).after("skips")
CHILD_APP = App(workflows=[shaky_child, skipping_child], activities=[step], dags=[CHILD_DAG])


def test_a_child_workflow_task_is_retried_as_a_new_child_and_can_skip(db: str, start_worker, client) -> None:
    CHILD_FAILS["left"] = 1
    start_worker(CHILD_APP)
    wait_for(lambda: registered(db, "child_dag"), what="the worker to register the DAG")
    with client.sql() as api:  # the Python way: the client's SQL API
        started = api.trigger_dag("child_dag", {"x": 1})
    sql = sql_api(db)
    result = client.get_handle(started["execution_id"]).result(timeout=60)
    assert result == {
        "states": {"shaky": "success", "skips": "skipped", "after_skip": "skipped"},
        "results": {"shaky": "child ok"},
    }
    assert RAN["shaky_child"] == 2 and "after_skip" not in RAN
    view = {t["task"]: t for t in sql.get_dag_run(started["execution_id"])["tasks"]}
    assert view["shaky"]["state"] == "success" and view["shaky"]["attempts"] == 2
    assert view["skips"]["state"] == "skipped" and view["after_skip"]["state"] == "skipped"
    run_id = str(started["execution_id"])
    with psycopg.connect(db, autocommit=True) as conn:
        children = conn.execute(
            "SELECT workflow_id, status FROM harvest.executions WHERE parent_id = %s ORDER BY created_at",
            (run_id,),
        ).fetchall()
    assert sorted(children) == sorted(
        [(f"{run_id}/shaky", "FAILED"), (f"{run_id}/skips", "FAILED"), (f"{run_id}/shaky/2", "COMPLETED")]
    )
    assert str(view["shaky"]["child_execution_id"]) != ""


def test_max_active_runs_holds_under_concurrent_triggers(db: str, start_worker) -> None:
    start_worker(APP)
    wait_for(lambda: registered(db, "gated_dag"), what="the worker to register the DAG")
    first = psycopg.connect(db)
    try:
        first.execute("SELECT * FROM harvest.trigger_dag('gated_dag')")  # not committed: holds the DAG row
        outcome: list = []

        def second() -> None:
            try:
                outcome.append(sql_api(db).trigger_dag("gated_dag"))
            except DagRunLimit as exc:
                outcome.append(exc)

        thread = threading.Thread(target=second)
        thread.start()
        with psycopg.connect(db, autocommit=True) as watch:
            wait_for(
                lambda: watch.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock' AND query LIKE '%%trigger_dag%%'"
                ).fetchone(),
                what="the second trigger to wait for the first one's lock on the DAG",
            )
        assert thread.is_alive()
        first.commit()
        thread.join(10)
    finally:
        first.close()
    assert len(outcome) == 1 and isinstance(outcome[0], DagRunLimit)
    with psycopg.connect(db, autocommit=True) as conn:
        running = conn.execute(
            "SELECT count(*) FROM harvest.executions WHERE workflow_name = 'gated_dag' AND status = 'RUNNING'"
        ).fetchone()[0]
    assert running == 1


def test_a_retried_trigger_with_a_workflow_id_returns_the_run_at_max_active_runs(db: str) -> None:
    """docs/dags.md: "with one [--workflow-id], ... an existing run of that id, running or
    finished, is returned (started_fresh false) instead of a new one, so a trigger retried by a
    script starts once." With max_active_runs=1 the retried trigger of the RUNNING run is
    refused DagRunLimit (HR018) instead: _admit_dag_run counts before start_workflow attaches."""
    with psycopg.connect(db, autocommit=True) as conn:
        api = SqlApi(conn)
        register_one_task_dag(api, "idem_dag", 1)
        first = api.trigger_dag("idem_dag", {"d": 1}, workflow_id="etl-2030-01-01")
        assert first["started_fresh"] is True
        again = api.trigger_dag("idem_dag", {"d": 1}, workflow_id="etl-2030-01-01")
        assert again["execution_id"] == first["execution_id"] and again["started_fresh"] is False
