"""Issue 12 item 7: every duration, interval, limit and count is checked where it enters (config
file, HARVEST_* variables, decorators, RetryPolicy, flow-control values, Worker(...), the client's
start arguments), and a bad one is refused with one line naming the field. Zero intervals made
busy loops (a 0 s heartbeat committed ~2,400 times a second)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harvest import RetryPolicy, activity
from harvest.client.client import _start_call
from harvest.config import load_config
from harvest.core.errors import ConfigError, InvalidArgument
from harvest.declare.flow_control import Batch, Concurrency, Debounce, Quota, RateLimit, Throttle


async def _noop(ctx) -> None:
    return None


# -- the config file and the HARVEST_* variables -------------------------------------------------

BAD_CONFIG = [
    ("worker", "heartbeat_interval", "0"),
    ("worker", "heartbeat_interval", "-1"),
    ("worker", "heartbeat_interval", "nan"),
    ("worker", "heartbeat_interval", "inf"),
    ("worker", "concurrency", "0"),
    ("worker", "concurrency", "-3"),
    ("worker", "concurrency", "10001"),
    ("worker", "shutdown_grace", "-10"),
    ("retention", "interval", "0"),
    ("retention", "interval", "-1"),
]


@pytest.mark.parametrize(("section", "key", "value"), BAD_CONFIG)
def test_a_bad_number_in_the_file_is_refused_naming_the_key(tmp_path: Path, section, key, value) -> None:
    path = tmp_path / "harvest.toml"
    path.write_text(f"[{section}]\n{key} = {value}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    message = str(caught.value)
    assert f"{section}.{key}" in message and "out of range: allowed" in message and str(path) in message
    assert "\n" not in message


@pytest.mark.parametrize(("section", "key", "value"), BAD_CONFIG)
def test_a_bad_number_in_a_variable_is_refused_naming_it(section, key, value) -> None:
    name = f"HARVEST_{section.upper()}__{key.upper()}"
    with pytest.raises(ConfigError, match=rf"{section}\.{key} = .* \(from {name}\) is out of range"):
        load_config(None, env={name: value, "HARVEST_CONFIG": ""})


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("worker.heartbeat_interval", 0.1),
        ("worker.heartbeat_interval", 3600),
        ("worker.concurrency", 1),
        ("worker.shutdown_grace", 0),
        ("retention.interval", 2.5),
    ],
)
def test_values_on_the_bounds_are_accepted(tmp_path: Path, key, value) -> None:
    section, name = key.split(".")
    path = tmp_path / "harvest.toml"
    path.write_text(f"[{section}]\n{name} = {value}\n")
    assert load_config(path, env={}).get(key) == value


def test_a_flag_is_checked_like_the_file() -> None:
    config = load_config(None, env={"HARVEST_CONFIG": ""})
    with pytest.raises(
        ConfigError, match=r"worker.shutdown_grace = -1.0 \(from --shutdown-grace\) is out of range"
    ):
        config.with_overrides({"worker.shutdown_grace": (-1.0, "--shutdown-grace")})


# -- decorators, RetryPolicy, flow-control values -------------------------------------------------


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"start_to_close": 0}, "start_to_close"),
        ({"start_to_close": "0s"}, "start_to_close"),
        ({"start_to_close": -5}, "start_to_close"),
        ({"start_to_close": float("nan")}, "start_to_close"),
        ({"start_to_close": 1e300}, "start_to_close"),
        ({"schedule_to_close": 0}, "schedule_to_close"),
        ({"heartbeat_timeout": "0ms"}, "heartbeat_timeout"),
        ({"priority": "high"}, "priority"),
        ({"priority": True}, "priority"),
        ({"priority": 10**7}, "priority"),
        ({"priority_aging_secs": 0}, "priority_aging_secs"),
        ({"max_concurrent": 0}, "max_concurrent"),
        ({"max_concurrent": 2**31}, "max_concurrent"),
    ],
)
def test_activity_decorator_refuses_bad_numbers(options, field) -> None:
    with pytest.raises(InvalidArgument, match=field):
        activity(**options)(_noop)


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
        ({"initial_interval": 0}, "initial_interval"),
        ({"max_interval": 0}, "max_interval"),
        ({"initial_interval": -1}, "initial_interval"),
        ({"backoff": float("inf")}, "backoff"),
        ({"backoff": 0.5}, "backoff"),
    ],
)
def test_retry_policy_refuses_bad_numbers(options, field) -> None:
    with pytest.raises(InvalidArgument, match=field):
        RetryPolicy(**options)


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: RateLimit(rps=0), "RateLimit.rps"),
        (lambda: RateLimit(rps=float("inf")), "RateLimit.rps"),
        (lambda: RateLimit(rps=1, burst=float("nan")), "RateLimit.burst"),
        (lambda: Throttle(rps=float("nan")), "Throttle.rps"),
        (lambda: Debounce(quiet=0), "Debounce.quiet"),
        (lambda: Batch(max_size=0, window="1s"), "Batch.max_size"),
        (lambda: Batch(max_size=2, window=0), "Batch.window"),
        (lambda: Concurrency(key="input", limit=0), "Concurrency.limit"),
        (lambda: Quota(key="input", max_active_executions=-1), "Quota.max_active_executions"),
    ],
)
def test_flow_control_values_refuse_bad_numbers(make, field) -> None:
    with pytest.raises(InvalidArgument, match=field):
        make()


# -- the client's start arguments and Worker(...) ---------------------------------------------


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"priority": "high"}, "priority"),
        ({"priority": 1.5}, "priority"),
        ({"priority": -(10**7)}, "priority"),
        ({"execution_timeout": 0}, "execution_timeout"),
        ({"run_timeout": "0s"}, "run_timeout"),
        ({"run_timeout": -1}, "run_timeout"),
    ],
)
def test_start_arguments_are_checked_before_the_database(options, field) -> None:
    call = {"priority": 0, "execution_timeout": None, "run_timeout": None} | options
    with pytest.raises(InvalidArgument, match=field):
        _start_call(
            "wf",
            [],
            None,
            "default",
            "allow_duplicate",
            "unspecified",
            None,
            call["priority"],
            call["execution_timeout"],
            call["run_timeout"],
        )


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"heartbeat_interval": 0}, "heartbeat_interval"),
        ({"poll_interval": 0}, "poll_interval"),
        ({"scan_interval": -1}, "scan_interval"),
        ({"shutdown_grace": -10}, "shutdown_grace"),
        ({"retention_interval": 0}, "retention_interval"),
        ({"concurrency": 0}, "concurrency"),
        ({"workflow_lease": 0}, "workflow_lease"),
        ({"claim_batch": 0}, "claim_batch"),
        ({"heartbeat_interval": float("nan")}, "heartbeat_interval"),
        ({"history_event_hard_cap": 0}, "history_event_hard_cap"),
    ],
)
def test_worker_refuses_bad_numbers_before_connecting(options, field) -> None:
    from harvest import App, Worker

    with pytest.raises(InvalidArgument, match=rf"Worker\({field}="):
        Worker(App(), "postgresql://nobody@localhost:1/none", **options)


def test_the_typed_activity_options_are_the_overridable_ones():
    """ctx.execute_activity's keywords are typed by ActivityOptions (a checker refuses a misspelt
    option); the runtime accepts ActivityDefinition.OVERRIDABLE: the two name the same options."""
    from harvest.declare.definitions import ActivityDefinition, ActivityOptions

    assert set(ActivityOptions.__annotations__) == set(ActivityDefinition.OVERRIDABLE)
