"""WorkerOptions (harvest/worker/options.py): one definition of each Worker tunable (name, default,
bounds) shared by the constructor, harvest.toml / HARVEST_* and `harvest worker`'s flags."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from click.testing import CliRunner

from harvest import App, Worker
from harvest.cli.main import main
from harvest.config import load_config, worker_options
from harvest.config.config import BOUNDS, SCHEMA
from harvest.core.errors import ConfigError, InvalidArgument
from harvest.worker import WorkerOptions
from harvest.worker.options import retention_placed, tunables

DSN = "postgresql://nobody@localhost:1/none"  # never connected: the constructor does not connect


def test_the_constructor_takes_an_options_object_and_keywords_override_it() -> None:
    options = WorkerOptions(concurrency=4, claim_batch=2, heartbeat_interval=0.5, cache_size=0)
    worker = Worker(App(), DSN, options=options)
    assert (worker.concurrency, worker.claim_batch, worker.heartbeat_interval) == (4, 2, 0.5)
    assert worker.options is options
    worker = Worker(App(), DSN, options=options, concurrency=8, hand_off=False)
    assert worker.concurrency == 8 and worker.claim_batch == 2 and worker.hand_off is False
    assert options.concurrency == 4  # frozen: the caller's object is not changed


def test_defaults_come_from_the_options() -> None:
    worker = Worker(App(), DSN)
    defaults = WorkerOptions()
    assert worker.options == defaults
    assert (worker.concurrency, worker.poll_interval, worker.shutdown_grace, worker.retention_interval) == (
        defaults.concurrency,
        defaults.poll_interval,
        defaults.shutdown_grace,
        defaults.retention_interval,
    )


def test_the_history_guardrail_defaults_and_the_warning_below_the_advisory(caplog) -> None:
    """The spec's defaults: advise continue-as-new past 10,000 events, fail at 50,000 events or
    50 MiB, warn of bloat at 20.48% of the event cap (10,240, above the advisory: no warning at
    construction). A warning point at or below the advisory is logged when the worker is made;
    with no event cap there is no bloat warning at all."""
    caplog.set_level("WARNING", logger="harvest.worker")
    worker = Worker(App(), DSN)
    assert (worker.continue_as_new_threshold, worker.history_event_hard_cap) == (10_000, 50_000)
    assert (worker.history_byte_hard_cap, worker.history_bloat_warn_at) == (50 * 1024 * 1024, 10_240)
    assert "history-bloat warning" not in caplog.text
    Worker(App(), DSN, continue_as_new_threshold=10, history_event_hard_cap=40)
    assert "history-bloat warning (8 events) is at or below the continue-as-new threshold (10)" in caplog.text
    caplog.clear()
    uncapped = Worker(App(), DSN, continue_as_new_threshold=10, history_event_hard_cap=None)
    assert uncapped.history_bloat_warn_at is None and "history-bloat" not in caplog.text


def test_an_unknown_keyword_is_refused_naming_it() -> None:
    with pytest.raises(TypeError, match="conccurrency"):
        Worker(App(), DSN, conccurrency=4)


@pytest.mark.parametrize("tunable", list(tunables()), ids=lambda t: t.name)
def test_every_bound_is_enforced_by_the_options(tunable) -> None:
    # (lost_after is also at least 3 x heartbeat_interval: the shortest interval lets its low bound)
    base = {"heartbeat_interval": 0.1} if tunable.name == "lost_after" else {}
    WorkerOptions(**base, **{tunable.name: tunable.low})
    WorkerOptions(**base, **{tunable.name: tunable.high})
    for bad in (tunable.low - 1, tunable.high + 1, float("nan")):
        with pytest.raises(InvalidArgument, match=rf"Worker\({tunable.name}="):
            WorkerOptions(**base, **{tunable.name: bad})
    with pytest.raises(InvalidArgument):
        dataclasses.replace(WorkerOptions(), **{tunable.name: True})  # a bool is not a number


def test_lost_after_is_at_least_three_heartbeats() -> None:
    """A worker is lost only after several missed heartbeats: one slow heartbeat must not cost a
    live worker its work (harvest.register_worker refuses the same, HR001)."""
    assert WorkerOptions(heartbeat_interval=1, lost_after=3).lost_after == 3
    assert WorkerOptions().lost_after is None  # 6 x heartbeat_interval, set by register_worker
    with pytest.raises(
        InvalidArgument, match=r"Worker\(lost_after=14.9\): allowed at least 3 x heartbeat_interval"
    ):
        WorkerOptions(lost_after=14.9)


def test_the_config_file_keys_take_their_type_and_bounds_from_the_options() -> None:
    keyed = {t.config: t for t in tunables() if t.config}
    assert set(keyed) == {
        ("worker", "concurrency"),
        ("worker", "activity_threads"),
        ("worker", "activity_processes"),
        ("worker", "shutdown_grace"),
        ("worker", "heartbeat_interval"),
        ("worker", "lost_after"),
        ("worker", "max_payload_bytes"),
        ("worker", "cache_size"),
        ("worker", "cache_max_bytes"),
        ("worker", "rebalance_resume_interval"),
        ("worker", "rebalance_stall_after"),
        ("worker", "liveness_stall_after"),
        ("retention", "interval"),
    }
    for key, t in keyed.items():
        assert BOUNDS[key] == (t.low, t.high) and SCHEMA[key] is (int if t.integer else float)


def test_the_cache_size_is_read_from_the_file_and_the_environment(tmp_path: Path) -> None:
    # `harvest worker` could bound its sticky cache in bytes but not in runs: only Worker() took it.
    path = tmp_path / "harvest.toml"
    path.write_text("[worker]\ncache_size = 0\n")
    assert worker_options(load_config(path, env={})).cache_size == 0
    env = {"HARVEST_WORKER__CACHE_SIZE": "50"}
    assert worker_options(load_config(path, env=env)).cache_size == 50


def test_max_payload_bytes_in_the_file_is_read_and_bounded(tmp_path: Path) -> None:
    # It had a type but no bounds: setting it in harvest.toml raised a KeyError (a traceback).
    path = tmp_path / "harvest.toml"
    path.write_text("[worker]\nmax_payload_bytes = 1000\n")
    assert worker_options(load_config(path, env={})).max_payload_bytes == 1000
    path.write_text("[worker]\nmax_payload_bytes = 0\n")
    with pytest.raises(
        ConfigError, match=r"worker.max_payload_bytes = 0 .* out of range: allowed 1 to 2147483647"
    ):
        load_config(path, env={})


def test_one_options_object_from_flags_over_variables_over_the_file(tmp_path: Path) -> None:
    path = tmp_path / "harvest.toml"
    path.write_text(
        "[worker]\nconcurrency = 5\nshutdown_grace = 12\nheartbeat_interval = 2\n[retention]\ninterval = 7\n"
    )
    config = load_config(
        path, env={"HARVEST_WORKER__CONCURRENCY": "6", "HARVEST_WORKER__HEARTBEAT_INTERVAL": "3"}
    )
    config = config.with_overrides({"worker.concurrency": (9, "--concurrency")})
    options = worker_options(config, queues=["a"], run_retention=True)
    assert (
        options.concurrency,
        options.heartbeat_interval,
        options.shutdown_grace,
        options.retention_interval,
        options.queues,
        options.run_retention,
    ) == (9, 3.0, 12.0, 7.0, ["a"], True)
    assert worker_options(load_config(None, env={"HARVEST_CONFIG": ""})) == WorkerOptions()


def test_the_concurrency_flag_is_bounded_by_the_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARVEST_CONFIG", raising=False)
    result = CliRunner().invoke(main, ["worker", "no_such_module:app", "--concurrency", "0"])
    assert result.exit_code != 0
    assert "worker.concurrency = 0 (from --concurrency) is out of range: allowed 1 to 10000" in result.output


@pytest.mark.parametrize(
    ("flag", "key", "allowed"),
    [
        ("--activity-threads", "worker.activity_threads", "1 to 10000"),
        ("--activity-processes", "worker.activity_processes", "1 to 1024"),
    ],
)
def test_the_activity_pool_flags_are_bounded_by_the_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: str, key: str, allowed: str
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARVEST_CONFIG", raising=False)
    result = CliRunner().invoke(main, ["worker", "no_such_module:app", flag, "0"])
    assert result.exit_code != 0
    assert f"{key} = 0 (from {flag}) is out of range: allowed {allowed}" in result.output


def test_the_activity_thread_pool_defaults_to_the_concurrency() -> None:
    from harvest import App
    from harvest.worker import Worker

    worker = Worker(App(), "postgresql://nobody@127.0.0.1:1/none", concurrency=17)
    assert worker.executors.thread_count == 17
    worker = Worker(App(), "postgresql://nobody@127.0.0.1:1/none", concurrency=17, activity_threads=3)
    assert worker.executors.thread_count == 3


def test_a_worker_built_in_code_runs_the_janitor_where_it_runs_the_scheduler(caplog) -> None:
    """A Worker with no config has no role: both switches stay on, and retention follows the
    scheduler (run_on = "scheduler"). It ran no janitor by default, so `harvest dev` and an
    embedded worker never applied a retention the user had configured."""
    assert Worker(App(), DSN).run_retention is True
    assert Worker(App(), DSN, run_retention=False).run_retention is False  # an explicit value wins
    assert Worker(App(), DSN, run_scanner=False, run_retention=True).run_retention is True
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    # No role and the scheduler off: no janitor here, and a warning that it may run nowhere.
    assert Worker(App(), DSN, run_scanner=False).run_retention is False
    [warning] = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "run_scanner=False" in warning and "run_retention=True" in warning
    # Asking where the janitor runs says nothing itself (HarvestLifespan asks, then builds the
    # Worker: the warning came twice).
    caplog.clear()
    assert retention_placed(WorkerOptions(run_scanner=False)) is False
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


@pytest.mark.parametrize("not_an_app", [[], None, "app:app"], ids=["list", "None", "str"])
def test_a_worker_refuses_what_is_not_an_app_saying_how_to_make_one(not_an_app) -> None:
    # A list of workflows (or the "module:attr" string the CLI takes) failed with
    # AttributeError: 'list' object has no attribute 'activities'.
    with pytest.raises(TypeError, match=r"Worker\(\) takes an App, got .*App\(workflows=\[\.\.\.\]"):
        Worker(not_an_app, DSN)


def test_the_rebalance_resume_scanner_follows_the_options_and_the_configuration() -> None:
    """The sharding guide's automatic resume (docs/sharding.md): the worker's rebalance-resume
    scanner can be turned off (then only `harvest shard rebalance-resume` settles a stalled
    move) and its pace set, default 5 s between passes and 30 s before a cut-over move counts
    as stalled, each floored at 5 s; the worker used to build it with the defaults, always on."""
    import asyncio

    default = Worker(App(), DSN).rebalance_resume
    assert (default.enabled, default.interval, default.stall_after) == (True, 5.0, 30.0)
    off = Worker(
        App(), DSN, rebalance_resume_enabled=False, rebalance_resume_interval=10, rebalance_stall_after=60
    ).rebalance_resume
    assert (off.enabled, off.interval, off.stall_after) == (False, 10.0, 60.0)

    class TwoShards:
        shards = (0, 1)

    assert asyncio.run(off.tick(TwoShards(), 0)) == 0, "off: no pass, no database touched"  # type: ignore[arg-type]
    for name in ("rebalance_resume_interval", "rebalance_stall_after"):
        with pytest.raises(InvalidArgument, match=rf"Worker\({name}=4\): allowed a number from 5 "):
            WorkerOptions(**{name: 4})
    config = load_config(
        env={
            "HARVEST_WORKER__REBALANCE_RESUME_ENABLED": "false",
            "HARVEST_WORKER__REBALANCE_RESUME_INTERVAL": "20",
            "HARVEST_WORKER__REBALANCE_STALL_AFTER": "45",
        }
    )
    o = worker_options(config)
    assert (o.rebalance_resume_enabled, o.rebalance_resume_interval) == (False, 20)
    assert o.rebalance_stall_after == 45
    assert worker_options(load_config(env={})).rebalance_resume_enabled is True
    with pytest.raises(ConfigError, match=r"worker\.rebalance_stall_after"):
        load_config(env={"HARVEST_WORKER__REBALANCE_STALL_AFTER": "1"})


def test_the_janitors_audit_log_age_comes_from_retention_audit_max_age_and_is_unset_by_default() -> None:
    """retention.audit_max_age (docs/operations.md, "The audit log"): the janitor prunes the
    audit log by that age; unset, never (as before the key)."""
    assert worker_options(load_config(env={})).audit_max_age is None
    assert WorkerOptions().audit_max_age is None
    config = load_config(env={"HARVEST_RETENTION__AUDIT_MAX_AGE": "400 days"})
    assert worker_options(config).audit_max_age == "400 days"
    assert worker_options(config, audit_max_age="30 days").audit_max_age == "30 days"  # fixed wins
    for bad in ("", "  ", 400):
        with pytest.raises(InvalidArgument, match=r"Worker\(audit_max_age="):
            WorkerOptions(audit_max_age=bad)  # type: ignore[arg-type]


def test_a_scheduler_turned_off_by_the_callers_options_takes_the_janitor_along() -> None:
    """HarvestLifespan(worker_options={"run_scanner": False}) ran the retention janitor without
    the scheduler (the role's retention switch, computed before the override, was passed on as
    explicit), where `harvest worker --no-scheduler` runs neither: under run_on = "scheduler"
    the janitor follows the scheduler, whoever turns it off."""
    from harvest.config.process import configured_options

    config = load_config(None, env={"HARVEST_CONFIG": ""})
    assert retention_placed(configured_options(App(), config, run_scanner=False)) is False
    assert retention_placed(configured_options(App(), config)) is True
    # An explicit switch of the caller's, or run_on = "all", still wins.
    assert configured_options(App(), config, run_scanner=False, run_retention=True).run_retention is True
    everywhere = config.with_overrides({"retention.run_on": ("all", "harvest.toml")})
    assert retention_placed(configured_options(App(), everywhere, run_scanner=False)) is True
    off = config.with_overrides({"retention.enabled": (False, "harvest.toml")})
    assert retention_placed(configured_options(App(), off, run_scanner=True)) is False


@pytest.mark.parametrize(
    ("queues", "says"),
    [
        ("orders", r"Worker\(queues='orders'\): expected a list of queue names, queues=\['orders'\]"),
        ([5], r"5 is not a queue name"),
        ([""], r"'' is not a queue name"),
        (["a\x00"], r"is not a queue name"),
    ],
)
def test_queues_must_be_a_list_of_queue_names(queues: object, says: str) -> None:
    """Worker(queues="orders") polled the queues d, e, o, r, r, s (sorted of a string)."""
    with pytest.raises(InvalidArgument, match=says):
        Worker(App(), DSN, queues=queues)
    assert Worker(App(), DSN, queues=("orders", "emails")).queues == ["emails", "orders"]


def test_options_and_dsn_of_the_wrong_type_are_refused_at_the_constructor() -> None:
    """Worker(app, dsn, options={...}) raised "'dict' object has no attribute 'replace'";
    Worker(app, 5) was taken, to fail at run(); Client(5) raised psycopg's AttributeError."""
    from harvest import Client

    with pytest.raises(TypeError, match=r"Worker\(options=\.\.\.\) takes a WorkerOptions, got dict"):
        Worker(App(), DSN, options={"concurrency": 4})  # type: ignore[arg-type]
    for make in (lambda: Worker(App(), 5), lambda: Client(5)):  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match=r"the database URL must be a string .*got int 5"):
            make()
