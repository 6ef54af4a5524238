"""DAG declarations (declare/dags.py) and the trigger rules of the interpreter (runtime/dags.py),
with no database: every mistake is refused where it is made, in one line."""

from __future__ import annotations

import pytest

from harvest import App, RetryPolicy, activity, workflow
from harvest.core.errors import ConfigError, InvalidArgument
from harvest.declare.dags import TRIGGER_RULES, Dag, SkipTask
from harvest.runtime.dags import decide


@activity
async def work(ctx, conf: dict) -> str:
    return "ok"


@activity(local=True)
async def inline(ctx, conf: dict) -> str:
    return "ok"


@activity(name="work")
async def impostor(ctx, conf: dict) -> str:
    return "not the same function"


@workflow
async def child(ctx, conf: dict) -> str:
    return "child"


def one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_a_dag_declares_tasks_with_after_and_orders_them() -> None:
    dag = Dag("etl", default_args={"retry": RetryPolicy.none(), "start_to_close": "10s"}, max_active_runs=2)
    a = dag.task("a", work)
    c = dag.task("c", child)
    b = dag.task("b", "work", trigger_rule="all_done", start_to_close="1m").after(a)
    c.after(b, "a")  # a task of this DAG or its name
    assert dag.order == ["a", "b", "c"]
    assert c.upstream == ["b", "a"] and b.upstream == ["a"]
    assert a.options == {"retry": RetryPolicy.none(), "start_to_close": 10.0, "dead_letter": False}
    assert b.options["start_to_close"] == 60.0 and b.trigger_rule == "all_done"
    assert c.kind == "workflow" and c.options == {"retry": RetryPolicy.none()}  # timeouts are not a child's
    assert dag.definition.name == "etl" and dag.definition.dag is dag and dag.definition.queue == "default"
    catalog = dag.catalog()
    assert [t["task"] for t in catalog["tasks"]] == ["a", "b", "c"]
    assert catalog["tasks"][2] == {
        "task": "c",
        "kind": "workflow",
        "target": "child",
        "upstream": ["b", "a"],
        "trigger_rule": "all_success",
        "retry": RetryPolicy.none().to_json(),
    }
    assert catalog["max_active_runs"] == 2


def test_task_arguments_default_to_the_conf() -> None:
    dag = Dag("args")
    plain = dag.task("plain", work)
    fixed = dag.task("fixed", work, args=[{"x": 1}])
    made = dag.task("made", work, args=lambda conf, upstream: [conf["d"], upstream])
    assert plain.arguments({"d": 1}, {}) == [{"d": 1}]
    assert fixed.arguments({"d": 1}, {}) == [{"x": 1}]
    assert made.arguments({"d": 1}, {"plain": "ok"}) == [1, {"plain": "ok"}]
    bad = dag.task("bad", work, args=lambda conf, upstream: "not a list")
    with pytest.raises(InvalidArgument, match="must return a list"):
        bad.arguments({}, {})


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda d: d.task("a", work).after("a"), "would make a cycle (a -> a)"),
        (
            lambda d: (
                (d.task("a", work), d.task("b", work).after("a"), d.task("a2", work).after("b"))
                and d.tasks["a"].after("a2")
            ),
            "a.after(a2) would make a cycle (a -> a2 -> b -> a)",
        ),
        (lambda d: d.task("a", work).after("nope"), "names unknown task 'nope'"),
        (lambda d: d.task("a", work).after(Dag("other").task("x", work)), "of dag 'other'"),
        (lambda d: d.task("a", work, trigger_rule="sometimes"), "trigger_rule 'sometimes' is not one of"),
        (lambda d: (d.task("a", work), d.task("a", work)), "task 'a' is declared twice"),
        (lambda d: d.task("a/b", work), "'a/b' is not a valid name"),
        (lambda d: d.task("a", inline), "activity 'inline' is local"),
        (lambda d: d.task("a", child, start_to_close="1s"), "option 'start_to_close' does not apply"),
        (lambda d: d.task("a", work, colour="red"), "option 'colour' does not apply"),
        (lambda d: d.task("a", work, retry=3), "expected a RetryPolicy"),
        (lambda d: d.task("a", work, args="conf"), "args must be a list"),
        (lambda d: d.task("a", print), "is neither an @activity nor an @workflow"),
    ],
)
def test_declaration_mistakes_are_refused_at_once(build, message: str) -> None:
    dag = Dag("bad")
    with pytest.raises(InvalidArgument) as exc:
        build(dag)
    assert message in one_line(exc)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"default_args": {"retries": 3}}, "default_args ['retries'] are not task options"),
        ({"default_args": {"trigger_rule": "never"}}, "trigger_rule 'never'"),
        ({"max_active_runs": 0}, "max_active_runs must be an int >= 1"),
        ({"queue": ""}, "queue must be a non-empty string"),
    ],
)
def test_bad_dag_options_are_refused(kwargs, message: str) -> None:
    with pytest.raises(InvalidArgument) as exc:
        Dag("bad", **kwargs)
    assert message in one_line(exc)


def test_the_app_refuses_a_dag_whose_activities_or_children_it_does_not_register() -> None:
    dag = Dag("etl")
    dag.task("a", work)
    dag.task("c", child).after("a")
    with pytest.raises(ConfigError) as exc:
        App(activities=[work], dags=[dag])
    assert one_line(exc).startswith(
        "dag 'etl' task 'c' runs child workflow 'child', which the App does not register"
    )
    with pytest.raises(ConfigError, match="runs activity 'work', which the App does not register"):
        App(workflows=[child], dags=[dag])
    with pytest.raises(ConfigError, match="registers another function under that name"):
        App(workflows=[child], activities=[impostor], dags=[dag])
    by_name = Dag("by_name")
    by_name.task("x", "unknown_activity")
    with pytest.raises(ConfigError, match="'unknown_activity', which the App does not register"):
        App(activities=[work], dags=[by_name])
    with pytest.raises(TypeError, match=r"is not a harvest\.Dag"):
        App(dags=["etl"])
    with pytest.raises(ConfigError, match="has no task"):
        App(dags=[Dag("empty")])
    app = App(workflows=[child], activities=[work], dags=[dag])
    assert app.dags == {"etl": dag} and app.workflows["etl"] is dag.definition
    with pytest.raises(InvalidArgument, match="once an App registered the DAG"):
        dag.tasks["c"].after("a")
    with pytest.raises(InvalidArgument, match="cannot be added once an App registered the DAG"):
        dag.task("late", work)
    clash = Dag("child")
    clash.task("a", work)
    with pytest.raises(ConfigError, match="duplicate workflow name 'child'"):
        App(workflows=[child], activities=[work], dags=[clash])


def test_a_task_queue_is_polled_and_dead_letter_defaults_off() -> None:
    dag = Dag("q", queue="etl", default_args={"queue": "heavy"})
    dag.task("a", work)
    dag.task("b", work, dead_letter=True)
    app = App(activities=[work], dags=[dag])
    assert app.queues == {"etl", "heavy"}
    assert dag.tasks["a"].options["dead_letter"] is False and dag.tasks["b"].options["dead_letter"] is True


def test_skip_task_is_a_non_retryable_failure_typed_skip_task() -> None:
    failure = SkipTask("no data today")
    assert failure.to_json() == {
        "error_type": "SkipTask",
        "message": "no data today",
        "non_retryable": True,
        "details": None,
    }


# Upstream states -> the verdict of each rule (None: wait for more upstream tasks to end).
S, F, K, U, R = "success", "failed", "skipped", "upstream_failed", "running"
CASES = {
    "all_success": [
        ((S, S), "run"),
        ((S, F), "upstream_failed"),
        ((S, K), "skipped"),
        ((K, U), "upstream_failed"),
        ((S, R), None),
    ],
    "all_failed": [((F, U), "run"), ((F, S), "skipped"), ((F, R), None), ((K, F), "skipped")],
    "all_done": [((S, F), "run"), ((K, U), "run"), ((S, R), None)],
    "one_success": [((S, R), "run"), ((F, R), None), ((F, K), "upstream_failed"), ((K, K), "skipped")],
    "one_failed": [((F, R), "run"), ((U, R), "run"), ((S, R), None), ((S, K), "skipped")],
    "none_failed": [((S, K), "run"), ((S, F), "upstream_failed"), ((K, R), None)],
    "none_skipped": [((S, F), "run"), ((S, K), "skipped"), ((S, R), None)],
    "always": [((R, R), "run"), ((F, K), "run")],
}


def test_every_trigger_rule_is_covered() -> None:
    assert set(CASES) == set(TRIGGER_RULES)


@pytest.mark.parametrize("rule", sorted(CASES))
def test_trigger_rule_verdicts(rule: str) -> None:
    for upstream, verdict in CASES[rule]:
        assert decide(rule, list(upstream)) == verdict, (rule, upstream)
    assert decide(rule, []) == "run"  # a task with no upstream runs at once, whatever its rule


def test_a_dags_schedule_becomes_a_dag_schedule_of_the_app() -> None:
    from harvest import Schedule

    nightly = Dag("nightly", schedule=Schedule.cron("0 2 * * *", tz="Europe/Paris"), max_active_runs=2)
    nightly.task("extract", work)
    unbounded = Dag("hourly", schedule=Schedule.every("1h"), queue="etl")
    unbounded.task("extract", work)
    manual = Dag("manual")
    manual.task("extract", work)
    app = App(activities=[work], dags=[nightly, unbounded, manual])
    assert sorted(app.schedules) == ["hourly", "nightly"]
    bounded = app.schedules["nightly"]
    assert (bounded.kind, bounded.workflow_name, bounded.max_active_runs, bounded.overlap) == (
        "dag",
        "nightly",
        2,
        "skip",
    )
    free = app.schedules["hourly"]
    assert (free.kind, free.queue, free.overlap) == ("dag", "etl", "allow_all")


def test_a_dag_schedule_that_is_not_a_schedule_is_refused_in_one_line() -> None:
    dag = Dag("odd", schedule="0 2 * * *")
    dag.task("extract", work)
    with pytest.raises(InvalidArgument) as exc:
        App(activities=[work], dags=[dag])
    assert "Schedule.cron" in one_line(exc)
