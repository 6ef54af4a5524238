"""Decorators, retry policies, durations and the App registry."""

from __future__ import annotations

import datetime as dt
import functools

import pytest

from harvest.core.errors import ActivityFailure, ConfigError, InvalidArgument, NotFound
from harvest.declare.dags import Dag
from harvest.declare.definitions import (
    ActivityDefinition,
    App,
    RetryPolicy,
    WorkflowDefinition,
    activity,
    parse_duration,
    workflow,
)
from harvest.declare.messages import query


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30),
        ("5m", 300),
        ("1h", 3600),
        ("1d", 86400),
        ("250ms", 0.25),
        (12, 12),
        (1.5, 1.5),
        ("1h30m", 5400),
        ("90", 90),
        (" 2 m ", 120),
        (dt.timedelta(minutes=2), 120),
    ],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["soon", "5x", "", "-1s", -3, True, None, "1h garbage"])
def test_parse_duration_names_the_bad_text(bad):
    with pytest.raises(InvalidArgument) as err:
        parse_duration(bad)
    assert repr(bad) in str(err.value)


@pytest.mark.parametrize("text", ["-5s", "-1h30m", " -250ms"])
def test_a_negative_duration_string_is_refused_as_negative(text):
    # "-5s" was "cannot parse '-5s'; use ... '30s'", as if its form were wrong, not its sign.
    with pytest.raises(InvalidArgument, match=r"is not a positive finite duration"):
        parse_duration(text, "start_to_close", positive=True)
    with pytest.raises(InvalidArgument, match=r"is not a non-negative finite duration"):
        parse_duration(text)


def test_retry_policy_defaults_and_json():
    policy = RetryPolicy()
    assert policy.to_json() == {
        "max_attempts": 3,
        "initial_interval": 1,
        "backoff": 2.0,
        "max_interval": 100,
        "non_retryable_errors": [],
    }
    exp = RetryPolicy.exponential(
        max_attempts=5, initial="500ms", maximum="1m", non_retryable_errors=("InvalidInput",)
    )
    assert exp.to_json() == {
        "max_attempts": 5,
        "initial_interval": 0.5,
        "backoff": 2.0,
        "max_interval": 60,
        "non_retryable_errors": ["InvalidInput"],
    }
    assert RetryPolicy.from_json(exp.to_json()) == exp
    assert RetryPolicy.none().max_attempts == 1
    assert [exp.delay(a) for a in (1, 2, 3, 9)] == [0.5, 1.0, 2.0, 60]
    with pytest.raises(InvalidArgument, match="max_attempts"):
        RetryPolicy(max_attempts=0)


def test_the_default_retry_cap_never_undercuts_the_first_interval_and_a_shorter_one_is_refused():
    # RetryPolicy.exponential(initial="1h") kept the default 100 s cap, so every retry waited
    # 100 s, not the hour asked for (docs/testing.md's first test did exactly this). With no cap
    # given, the cap is the first interval when that is longer than 100 s; a cap given shorter
    # than the first interval is refused, naming both.
    assert [RetryPolicy.exponential(initial="1h").delay(n) for n in (1, 2, 3)] == [3600, 3600, 3600]
    assert RetryPolicy(initial_interval=7200).max_interval == 7200
    assert RetryPolicy().max_interval == 100 and RetryPolicy.exponential().max_interval == 100
    assert RetryPolicy(initial_interval=5).max_interval == 100
    shorter = r"max_interval \(5s\) is shorter than initial_interval \(10s\)"
    with pytest.raises(InvalidArgument, match=shorter):
        RetryPolicy(initial_interval=10, max_interval=5)
    assert RetryPolicy.exponential(initial="1h", maximum="1d").delay(1) == 3600
    assert RetryPolicy(initial_interval=5, max_interval=5).delay(3) == 5  # equal: a fixed interval


def test_retry_resolution_order():
    policy = RetryPolicy(max_attempts=5, non_retryable_errors=["InvalidInput", "exact text"])
    assert policy.should_retry(ActivityFailure("Timeout", "slow"), 1)
    assert not policy.should_retry(ActivityFailure("Timeout", "slow", non_retryable=True), 1)
    assert not policy.should_retry(ActivityFailure("InvalidInput", "x"), 1)
    assert not policy.should_retry(ActivityFailure("Error", "exact text"), 1)
    assert not policy.should_retry(ActivityFailure("Timeout", "slow"), 5)
    # the full text "ErrorType: message", as functions/activities.sql reads it
    typed = RetryPolicy(max_attempts=5, non_retryable_errors=["ValueError: bad sku"])
    assert not typed.should_retry(ActivityFailure("ValueError", "bad sku"), 1)
    assert typed.should_retry(ActivityFailure("ValueError", "other"), 1)
    assert typed.should_retry(ActivityFailure("KeyError", "bad sku"), 1)


@pytest.mark.parametrize("entry", [ValueError, 404, None])
def test_non_retryable_errors_takes_names_only(entry):
    # A class was kept as "<class 'ValueError'>", which no failure's error_type ever equals:
    # the policy silently retried what the user listed as final.
    with pytest.raises(InvalidArgument, match="non_retryable_errors") as err:
        RetryPolicy(non_retryable_errors=["InvalidInput", entry])
    if entry is ValueError:
        assert "'ValueError'" in str(err.value)
    with pytest.raises(InvalidArgument, match="non_retryable_errors"):
        RetryPolicy.exponential(non_retryable_errors=[entry])


def test_workflow_decorator_bare_and_with_arguments():
    @workflow
    async def plain(ctx, x: int) -> int:
        return x

    @workflow(name="renamed", queue="billing")
    async def named(ctx) -> None:
        pass

    assert plain.__harvest_workflow__ == WorkflowDefinition("plain", plain, "default")
    assert named.__harvest_workflow__.name == "renamed"
    assert named.__harvest_workflow__.queue == "billing"


def test_workflow_must_be_async():
    with pytest.raises(TypeError, match="must be an `async def`"):

        @workflow
        def sync_wf(ctx):
            pass

    # The example is what the decorator takes: a workflow's said `def no_ctx(ctx, ...)`, which
    # the check above then refuses (journey68a).
    with pytest.raises(
        TypeError, match=r"first parameter must be the context \(e\.g\. `async def no_ctx\(ctx, \.\.\.\)`\)"
    ):

        @workflow
        async def no_ctx():
            pass

    with pytest.raises(TypeError, match=r"\(e\.g\. `def no_ctx_activity\(ctx, \.\.\.\)`\)"):

        @activity
        def no_ctx_activity():
            pass


def test_activity_decorator_records_options():
    @activity
    async def bare(ctx) -> None:
        pass

    @activity(
        start_to_close="30s",
        heartbeat_timeout="10s",
        retry=RetryPolicy.none(),
        queue="io",
        local=True,
        name="fetch",
        priority=5,
        dead_letter=False,
    )
    def fetch(ctx, url: str) -> str:
        return url

    d = bare.__harvest_activity__
    assert isinstance(d, ActivityDefinition)
    assert (d.name, d.start_to_close, d.queue, d.local, d.is_async) == ("bare", 300.0, None, False, True)
    f = fetch.__harvest_activity__
    assert (
        f.name,
        f.start_to_close,
        f.heartbeat_timeout,
        f.queue,
        f.local,
        f.priority,
        f.dead_letter,
        f.is_async,
    ) == ("fetch", 30.0, 10.0, "io", True, 5, False, False)
    assert fetch(None, "u") == "u"  # still the user's own function
    assert f.options_json() == {
        "start_to_close": 30,
        "schedule_to_close": None,
        "heartbeat_timeout": 10,
        "retry": RetryPolicy.none().to_json(),
        "priority": 5,
        "dead_letter": False,
    }
    g = f.with_options(start_to_close="1m", queue="other")
    assert (g.start_to_close, g.queue, f.start_to_close) == (60.0, "other", 30.0)
    with pytest.raises(TypeError, match="unknown activity option"):
        f.with_options(colour="red")
    with pytest.raises(InvalidArgument, match="start_to_close"):
        activity(start_to_close="whenever")


def test_app_registry():
    @workflow(queue="wfq")
    async def wf(ctx) -> None:
        pass

    @activity(queue="actq")
    async def act(ctx) -> None:
        pass

    @activity(local=True, queue="ignored")
    async def loc(ctx) -> None:
        pass

    app = App(workflows=[wf], activities=[act, loc])
    assert app.workflow("wf") is wf.__harvest_workflow__
    assert app.workflow(wf).name == "wf"
    assert app.activity("act").fn is act
    assert app.queues == {"wfq", "actq"}
    with pytest.raises(NotFound, match=r"no activity named 'nope'.*act"):
        app.activity("nope")
    with pytest.raises(NotFound, match="no workflow named 'nope'"):
        app.workflow("nope")


def test_an_activity_in_workflows_or_a_workflow_in_activities_is_told_where_it_goes():
    """The error said "is not decorated with @workflow" of a function that is, with @activity."""

    @activity
    async def an_activity(ctx) -> None:
        pass

    @workflow
    async def a_workflow(ctx) -> None:
        pass

    with pytest.raises(
        TypeError, match=r"an_activity is an @activity, not a @workflow: pass it in App\(activities"
    ):
        App(workflows=[an_activity])
    with pytest.raises(
        TypeError, match=r"a_workflow is a @workflow, not an @activity: pass it in App\(workflows"
    ):
        App(activities=[a_workflow])


def test_app_takes_lists_and_says_so_when_given_one_function():
    # App(workflows=checkout) failed with "'function' object is not iterable".
    @workflow
    async def checkout(ctx) -> None:
        pass

    one = r"App\(workflows=\.\.\.\) takes a list: App\(workflows=\[checkout\]\)"
    with pytest.raises(TypeError, match=one):
        App(workflows=checkout)
    with pytest.raises(TypeError, match=r"App\(activities=\.\.\.\) takes a list"):
        App(activities=checkout)
    with pytest.raises(TypeError, match=r"App\(workflows=\.\.\.\) takes a list"):
        App(workflows="checkout")  # a string is iterable, one letter at a time


class Payments:
    """Activities as methods, for what they share (a client, a gateway): Temporal's idiom."""

    def __init__(self, gateway: str):
        self.gateway = gateway

    @activity
    def charge(self, ctx, amount: int) -> str:
        return f"{self.gateway}:{amount}"


def test_an_instance_s_activity_method_is_registered_bound():
    # Registered as the plain function, its `self` took the ctx and the ctx the first argument:
    # "bad arguments for charge: missing a required argument: 'amount'" for a call that gave it.
    payments = Payments("stripe")
    app = App(activities=[payments.charge, payments.charge])  # the same method twice: harmless
    assert app.activities["charge"].fn(None, 5) == "stripe:5"
    with pytest.raises(
        TypeError, match=r"Payments\.charge takes `self`.*App\(activities=\[instance\.charge\]\)"
    ):
        App(activities=[Payments.charge])


def test_app_rejects_undecorated_functions_and_duplicates():
    async def naked(ctx) -> None:
        pass

    with pytest.raises(TypeError, match="naked is not decorated with @workflow"):
        App(workflows=[naked])
    with pytest.raises(TypeError, match="naked is not decorated with @activity"):
        App(activities=[naked])

    @activity(name="dup")
    async def one(ctx) -> None:
        pass

    @activity(name="dup")
    async def two(ctx) -> None:
        pass

    with pytest.raises(ConfigError, match=r"duplicate activity name 'dup'.*one.*two"):
        App(activities=[one, two])
    assert list(App(activities=[one, one]).activities) == ["dup"]


def test_an_unknown_activity_option_names_the_slip():
    """execute_activity's keywords are options: `amount=5` for a parameter of the activity, or a
    misspelt option, were both "unknown activity option(s) [...]; accepted: [...]", which said
    neither that the keyword was the activity's own argument nor which option was meant."""

    @activity
    def charge(ctx, amount: int) -> str:
        return "charged"

    defn = charge.__harvest_activity__
    with pytest.raises(
        TypeError, match=r"'amount' is a parameter of charge: pass the activity's arguments positionally"
    ):
        defn.with_options(amount=5)
    with pytest.raises(TypeError, match=r"'start_to_clsoe' \(did you mean start_to_close\?\)"):
        defn.with_options(start_to_clsoe="1m")


def test_declared_dependencies_take_a_list_and_become_names_however_the_workflow_is_built() -> None:
    """Spec 002 (declared dependencies): the declaration lists names (or the functions they
    name), in @workflow(...) or on a workflow registered by hand. `activities="send_email"` was
    read one letter at a time (preflight then failed on 's', 'e', ...), `activities=send_email`
    failed with "'function' object is not iterable", and a hand-built WorkflowDefinition given
    functions crashed preflight with an AttributeError (a 500 over HTTP) instead of checking."""
    from harvest.config.preflight import _catalog_consistency

    @activity
    async def send_email(ctx) -> None:
        pass

    @workflow
    async def report(ctx) -> None:
        pass

    for slip in ("send_email", send_email):
        with pytest.raises(TypeError, match=r"@workflow\(activities=\.\.\.\) takes a list"):

            @workflow(activities=slip)
            async def onboarding(ctx) -> None:
                pass

    with pytest.raises(TypeError, match=r"@workflow\(children=\.\.\.\) takes a list"):
        workflow(children="report")(report.__harvest_workflow__.fn)

    async def by_hand(ctx) -> None:
        pass

    definition = WorkflowDefinition(
        name="by_hand",
        fn=by_hand,
        declared_activities=[send_email, "charge_card"],
        declared_children=[report],
    )
    assert definition.declared_activities == ("send_email", "charge_card")
    assert definition.declared_children == ("report",)
    check = _catalog_consistency(App(workflows=[definition, report], activities=[send_email]))
    assert check.status == "fail"
    assert check.details["failures"] == ["workflow 'by_hand' references unregistered activity 'charge_card'"]
    with pytest.raises(TypeError, match=r"children=\.\.\.\) takes a list"):
        WorkflowDefinition(name="x", fn=by_hand, declared_children="report")
    # An empty list is a declaration ("calls nothing"), checked; None is none, skipped.
    assert WorkflowDefinition(name="x", fn=by_hand, declared_activities=[]).declared_activities == ()
    assert WorkflowDefinition(name="x", fn=by_hand).declared_activities is None


@pytest.mark.parametrize(
    "given",
    [
        lambda: RetryPolicy.exponential(non_retryable_errors="InvalidInput"),
        lambda: RetryPolicy(non_retryable_errors=ValueError),  # type: ignore[arg-type]
        lambda: RetryPolicy(non_retryable_errors=None),  # type: ignore[arg-type]
        lambda: RetryPolicy.exponential(non_retryable_errors=None),  # type: ignore[arg-type]
    ],
    ids=["exponential's string", "a class", "None", "exponential's None"],
)
def test_non_retryable_errors_that_is_not_a_list_is_refused_naming_the_option(given) -> None:
    """RetryPolicy.exponential(non_retryable_errors="InvalidInput") listed each letter ('I',
    'n', ...), matching no failure, silently; a class or None raised "'type' object is not
    iterable" from inside the policy."""
    with pytest.raises(InvalidArgument, match=r"non_retryable_errors: expected a list of error types"):
        given()


@pytest.mark.parametrize("option", ["queries", "updates", "schedules", "dags"])
def test_an_app_registry_that_is_not_a_list_is_refused_saying_the_list_it_takes(option: str) -> None:
    """App(queries=status) raised "'function' object is not iterable" (App(schedules=...):
    "Value after * must be an iterable"), as App(workflows=...) no longer did."""

    def status(ctx) -> str:
        return "ok"

    with pytest.raises(TypeError, match=rf"App\({option}=\.\.\.\) takes a list: App\({option}=\[status\]\)"):
        App(**{option: status})


def test_a_generator_function_is_refused_as_an_activity() -> None:
    """A generator (or an async generator) was registered and ran: its result was the generator
    object, refused as 'cannot encode object of type generator' at each call, in a worker."""

    def rows(ctx):
        yield 1

    async def arows(ctx):
        yield 1

    for fn in (rows, arows):
        with pytest.raises(TypeError, match=r"@activity .*rows is a generator function: .*return"):
            activity(fn)


def test_a_callable_without_a_name_or_attributes_is_refused_saying_what_to_do() -> None:
    """@activity on a functools.partial without name= raised AttributeError ('partial' object has
    no attribute '__name__'), and on a builtin (even with name=) AttributeError on
    __harvest_activity__; @workflow on a partial of an async def, the same."""

    def charge(ctx, amount: int, currency: str) -> int:
        return amount

    async def flow(ctx, n: int) -> int:
        return n

    for decorate, fn in (
        (activity, functools.partial(charge, currency="EUR")),
        (workflow, functools.partial(flow)),
    ):
        with pytest.raises(TypeError, match=r"has no __name__: pass name=, as in @.*\(name="):
            decorate(fn)
        assert decorate(fn, name="named") is fn
    with pytest.raises(TypeError, match=r"@activity cannot mark the builtin len.*: wrap it in a def"):
        activity(len, name="length")
    with pytest.raises(TypeError, match=r"@activity functools\.partial\(.*\): the first parameter must be"):
        activity(functools.partial(charge, ctx=None))


def test_an_empty_name_is_refused_not_replaced_by_the_function_s_own() -> None:
    """``name=""`` was falsy, so the function's ``__name__`` was registered instead, silently."""

    async def charge(ctx: object) -> None: ...

    for decorate in (activity(name=""), workflow(name="")):
        with pytest.raises(InvalidArgument, match=r"name: expected a non-empty string, got ''"):
            decorate(charge)
    with pytest.raises(InvalidArgument, match=r"query name: expected a non-empty string, got ''"):
        query(workflow="orders", name="")(lambda ctx: None)


@pytest.mark.parametrize("option", ["local", "dead_letter"])
@pytest.mark.parametrize("value", ["no", "false", 0, None])
def test_a_flag_is_true_or_false_not_anything_truthy(option: str, value: object) -> None:
    """``local="no"`` ran the activity locally (``bool("no")`` is True); ``dead_letter=0`` was a
    quiet False. Both are refused naming the option, in the decorator, in a call's override and
    in a DAG task's options."""
    with pytest.raises(InvalidArgument, match=rf"{option}: expected True or False, got"):
        activity(**{option: value})(lambda ctx: None)
    if option == "dead_letter":

        @activity
        async def ship(ctx: object) -> None: ...

        with pytest.raises(InvalidArgument, match="dead_letter: expected True or False"):
            ship.__harvest_activity__.with_options(dead_letter=value)
        if value is None:  # a DAG task's None option means "not set": the activity's own
            return
        dag = Dag("nightly")
        with pytest.raises(InvalidArgument, match="dead_letter"):
            dag.task("ship", ship, dead_letter=value)
