"""Process roles and configuration (harvest/config/): one harvest.toml plus HARVEST_* variables,
the runtimes each role places, worker queue narrowing, queue coverage, and `harvest worker` booting
with all of it as a real process against a real database."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import cli_forks
import psycopg
import pytest

from harvest import App, Worker, activity, workflow
from harvest.config import load_config, queue_coverage, resolve_queues, runtime_plan
from harvest.core.errors import ConfigError
from harvest.db.sqlapi import SqlApi

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
HARVEST = [sys.executable, "-c", "from harvest.cli import main; main()"]


@activity(queue="beta")
async def ping(ctx, n: int) -> int:
    return n


@workflow(queue="alpha")
async def pinger(ctx, n: int) -> int:
    return await ctx.execute_activity(ping, n)


app = App(workflows=[pinger], activities=[ping])  # declares alpha and beta


def write(tmp_path: Path, text: str, name: str = "harvest.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# -- loading: file, variables, precedence, unknown keys -----------------------------------------


def test_file_and_variables_merge_and_variables_win(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        'role = "worker"\n[worker]\nqueues = ["alpha"]\nconcurrency = 5\n'
        '[retention]\nrun_on = "all"\ninterval = 2.5\n',
    )
    config = load_config(
        path,
        env={
            "HARVEST_WORKER__CONCURRENCY": "7",
            "HARVEST_DATABASE_URL": "x",
            "HARVEST_TEST_DSN": "y",
            "PATH": "/bin",
        },
    )
    assert config.get("role") == "worker" and config.setting("role").source == str(path)
    assert config.get("worker.queues") == ["alpha"]
    assert (
        config.get("worker.concurrency") == 7
        and config.setting("worker.concurrency").source == "HARVEST_WORKER__CONCURRENCY"
    )
    assert config.get("retention.run_on") == "all" and config.get("retention.interval") == 2.5
    # An explicit flag wins over both.
    flagged = config.with_overrides({"worker.concurrency": (3, "--concurrency"), "role": (None, "--role")})
    assert (
        flagged.get("worker.concurrency") == 3
        and flagged.setting("worker.concurrency").source == "--concurrency"
    )
    assert flagged.get("role") == "worker"


def test_lists_booleans_and_an_empty_variable_clears(tmp_path: Path) -> None:
    path = write(tmp_path, '[worker]\nqueues = ["alpha", "beta"]\n')
    config = load_config(
        path, env={"HARVEST_WORKER__QUEUES": " beta , alpha ", "HARVEST_SCHEDULER__ENABLED": "off"}
    )
    assert config.get("worker.queues") == ["beta", "alpha"] and config.get("scheduler.enabled") is False
    assert load_config(path, env={"HARVEST_WORKER__QUEUES": ""}).get("worker.queues") is None
    assert (
        load_config(write(tmp_path, "[worker]\nqueues = []\n", "empty.toml"), env={}).get("worker.queues")
        is None
    )


def test_the_file_comes_from_config_then_harvest_config_then_the_working_directory(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert load_config(env={}).path is None  # no file anywhere: nothing read
    write(tmp_path, 'role = "web"\n')
    assert load_config(env={}).get("role") == "web"
    other = write(tmp_path, 'role = "worker"\n', "other.toml")
    assert load_config(env={"HARVEST_CONFIG": str(other)}).get("role") == "worker"
    assert (
        load_config(
            write(tmp_path, 'role = "combined"\n', "third.toml"), env={"HARVEST_CONFIG": str(other)}
        ).get("role")
        == "combined"
    )
    with pytest.raises(ConfigError, match=r"HARVEST_CONFIG names .*missing.toml.*not a file"):
        load_config(env={"HARVEST_CONFIG": str(tmp_path / "missing.toml")})


@pytest.mark.parametrize(
    ("text", "env", "needle"),
    [
        ('[worker]\nqueue = ["alpha"]\n', {}, "unknown config key 'worker.queue'"),
        ('colour = "red"\n', {}, "unknown config key 'colour'"),
        ("[wrker]\nqueues = []\n", {}, "unknown config key 'wrker'"),
        (
            "",
            {"HARVEST_WORKER_QUEUES": "alpha"},
            "unknown setting HARVEST_WORKER_QUEUES; did you mean HARVEST_WORKER__QUEUES?",
        ),
        ("", {"HARVEST_NOPE": "1"}, "unknown setting HARVEST_NOPE"),
        # Compared without the shared HARVEST_: this one was "close" to HARVEST_ROLE.
        ("", {"HARVEST_KEY_K1": "x"}, "unknown setting HARVEST_KEY_K1; known variables"),
        ("", {"HARVEST_WORKER__CONCURENCY": "2"}, "did you mean HARVEST_WORKER__CONCURRENCY?"),
        ("", {"HARVEST_ROLE": "api"}, "role 'api' (from HARVEST_ROLE) is not one of web, worker, combined"),
        ('[retention]\nrun_on = "sometimes"\n', {}, "retention.run_on 'sometimes'"),
        (
            "",
            {"HARVEST_RETENTION__RUN_ON": "every"},
            "retention.run_on 'every' (from HARVEST_RETENTION__RUN_ON) is unknown; use scheduler or all",
        ),
        (
            "",
            {"HARVEST_WORKER__CONCURRENCY": "lots"},
            "worker.concurrency (from HARVEST_WORKER__CONCURRENCY): expected an integer",
        ),
        ('[worker]\nenabled = "yes"\n', {}, "worker.enabled"),
        ("worker = 3\n", {}, "expected a [worker] table"),
    ],
)
def test_a_bad_key_or_value_stops_the_boot_naming_it(
    tmp_path: Path, text: str, env: dict, needle: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, env=env)
    assert needle in str(caught.value)
    if "unknown" in needle and "run_on" not in needle:
        assert "worker.queues" in str(caught.value) or "HARVEST_WORKER__QUEUES" in str(caught.value)


# -- the role places the runtimes -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "worker", "scheduler", "retention"),
    [
        ({}, True, True, True),
        ({"HARVEST_ROLE": "combined"}, True, True, True),
        ({"HARVEST_ROLE": "worker"}, True, True, True),
        ({"HARVEST_ROLE": "web"}, False, False, False),
        ({"HARVEST_ROLE": "web", "HARVEST_RETENTION__RUN_ON": "all"}, False, False, True),
        ({"HARVEST_ROLE": "worker", "HARVEST_SCHEDULER__ENABLED": "false"}, True, False, False),
        ({"HARVEST_ROLE": "web", "HARVEST_SCHEDULER__ENABLED": "true"}, False, True, True),
        ({"HARVEST_ROLE": "worker", "HARVEST_RETENTION__ENABLED": "false"}, True, True, False),
    ],
)
def test_each_role_places_each_runtime(env: dict, worker: bool, scheduler: bool, retention: bool) -> None:
    plan = runtime_plan(load_config(env={**env, "HARVEST_CONFIG": ""}))
    assert (plan.worker.value, plan.scheduler.value, plan.retention.value) == (worker, scheduler, retention)


def test_sources_and_a_warning_per_contradicting_switch() -> None:
    plan = runtime_plan(load_config(env={}))
    assert plan.role == "combined" and plan.role_source == "default"
    assert plan.worker.source == "default" and not plan.warnings

    plan = runtime_plan(load_config(env={"HARVEST_ROLE": "worker"}))
    assert plan.worker.source == "role worker" and plan.role_source == "explicit (HARVEST_ROLE)"

    plan = runtime_plan(
        load_config(
            env={
                "HARVEST_ROLE": "web",
                "HARVEST_WORKER__ENABLED": "true",
                "HARVEST_SCHEDULER__ENABLED": "true",
            }
        )
    )
    assert plan.worker.source == "explicit (HARVEST_WORKER__ENABLED)"
    assert len(plan.warnings) == 2
    assert all("overrides role web" in w for w in plan.warnings)
    assert plan.worker.line() == "worker.enabled=true (source: explicit (HARVEST_WORKER__ENABLED))"

    # An explicit value that agrees with the role is not a contradiction.
    assert not runtime_plan(
        load_config(env={"HARVEST_ROLE": "worker", "HARVEST_WORKER__ENABLED": "true"})
    ).warnings
    # Retention on but not placed here: one note naming run_on and the fix.
    plan = runtime_plan(load_config(env={"HARVEST_ROLE": "web"}))
    assert len(plan.notes) == 1 and "run_on=scheduler" in plan.notes[0] and "RUN_ON=all" in plan.notes[0]
    # No role set is combined: turning the worker off on an API replica is an override, warned
    # (the upgrade path: set HARVEST_ROLE=web and drop the variable).
    plan = runtime_plan(load_config(env={"HARVEST_WORKER__ENABLED": "false"}))
    assert plan.worker.value is False and plan.scheduler.value is True
    assert plan.warnings == [
        (
            "worker.enabled=false (from HARVEST_WORKER__ENABLED) overrides role combined, "
            "which turns the worker on"
        )
    ]


def test_no_role_and_the_scheduler_off_warns_that_retention_may_run_nowhere() -> None:
    plan = runtime_plan(load_config(env={"HARVEST_SCHEDULER__ENABLED": "false"}))
    assert plan.retention.value is False and len(plan.notes) == 1
    assert [w for w in plan.warnings if "may run nowhere" in w] == [
        (
            "the scheduler is off and no role is set: retention may run nowhere "
            "unless another process runs the scheduler"
        )
    ]
    # With a role the operator placed it on purpose: no such warning.
    plan = runtime_plan(load_config(env={"HARVEST_ROLE": "web"}))
    assert not [w for w in plan.warnings if "may run nowhere" in w]


def test_the_startup_line_names_each_value_and_its_source() -> None:
    plan = runtime_plan(
        load_config(
            env={"HARVEST_ROLE": "web", "HARVEST_WORKER__ENABLED": "true", "HARVEST_RETENTION__RUN_ON": "all"}
        )
    )
    assert plan.line() == (
        "harvest runtimes: role=web (source: explicit (HARVEST_ROLE)); "
        "worker.enabled=true (source: explicit (HARVEST_WORKER__ENABLED)); "
        "scheduler.enabled=false (source: role web); "
        "retention.enabled=true (source: explicit (run_on=all from HARVEST_RETENTION__RUN_ON)); "
        "retention.run_on=all (source: explicit (HARVEST_RETENTION__RUN_ON))"
    )
    assert runtime_plan(load_config(env={})).line() == (
        "harvest runtimes: role=combined (source: default); worker.enabled=true (source: default); "
        "scheduler.enabled=true (source: default); retention.enabled=true (source: follows "
        "scheduler.enabled (run_on=scheduler): default); retention.run_on=scheduler (source: default)"
    )


def test_every_embedding_logs_the_plan_its_overrides_and_its_queues(db: str, caplog) -> None:
    """Django's harvest_worker and HarvestLifespan(run_worker=True) start through run_worker, as
    `harvest worker` does: they logged no startup line, no override warning, no retention note
    and no queues line (only `harvest worker` did)."""
    from harvest.config.process import configured_options, run_worker

    config = load_config(
        env={"HARVEST_ROLE": "web", "HARVEST_WORKER__ENABLED": "true", "HARVEST_WORKER__QUEUES": "beta"}
    )
    options = configured_options(app, config)
    caplog.set_level(logging.INFO, logger="harvest.config")
    asyncio.run(run_worker(app, config, options, database_url=db, started=lambda w: w.request_stop()))
    records = [r for r in caplog.records if r.name == "harvest.config"]
    lines = [r.getMessage() for r in records if r.getMessage().startswith("harvest runtimes: ")]
    assert lines == [runtime_plan(config).line()]
    warnings = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    assert warnings == [
        "worker.enabled=true (from HARVEST_WORKER__ENABLED) overrides role web, which turns the worker off"
    ]
    notes = [
        r.getMessage()
        for r in records
        if r.levelno == logging.INFO and "retention runs where the scheduler runs" in r.getMessage()
    ]
    assert len(notes) == 1 and "run_on=scheduler" in notes[0]
    assert [r.getMessage() for r in records if "worker.queues" in r.getMessage()] == [
        "harvest worker.queues: declared alpha, beta; polled beta (source: explicit (HARVEST_WORKER__QUEUES))"
    ]


# -- worker queues --------------------------------------------------------------------------------


def test_queue_narrowing_keeps_code_order_and_refuses_an_undeclared_queue() -> None:
    assert resolve_queues(app, load_config(env={})) == (["alpha", "beta"], ["alpha", "beta"], "code")
    polled, _, source = resolve_queues(app, load_config(env={"HARVEST_WORKER__QUEUES": "beta,alpha"}))
    assert polled == ["alpha", "beta"] and source == "explicit (HARVEST_WORKER__QUEUES)"
    with pytest.raises(ConfigError) as caught:
        resolve_queues(app, load_config(env={"HARVEST_WORKER__QUEUES": "Alpha"}))
    assert str(caught.value) == (
        "worker.queues (from HARVEST_WORKER__QUEUES) names 'Alpha', which the App does "
        "not declare; declared queues: alpha, beta (the App declares a queue by using it: "
        "@workflow(queue=...), @activity(queue=...) or a DAG task's queue=)"
    )


def test_queue_coverage_counts_only_live_active_workers(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        sql = SqlApi(conn)
        assert queue_coverage(sql, ["alpha", "beta"])["unpolled_declared_queues"] == ["alpha", "beta"]
        conn.execute("SELECT harvest.register_worker('w1', ARRAY['alpha'], 'h', 1, 5, '{}')")
        conn.execute("SELECT harvest.register_worker('w2', ARRAY['beta'], 'h', 2, 5, '{}')")
        assert queue_coverage(sql, ["alpha", "beta"])["unpolled_declared_queues"] == []
        conn.execute("SELECT harvest.drain_worker('w2')")  # a draining worker takes no new run
        coverage = queue_coverage(sql, ["alpha", "beta"])
        assert coverage == {
            "declared_queues": ["alpha", "beta"],
            "live_workers": {"alpha": 1, "beta": 0},
            "unpolled_declared_queues": ["beta"],
        }


# -- `harvest worker` as a real process --------------------------------------------------------------


def run_env(dsn: str | None, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARVEST_")}
    if dsn:
        env["HARVEST_DATABASE_URL"] = dsn
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO / "harvest_py"), str(HERE), env.get("PYTHONPATH")) if p
    )
    env.update(extra)
    return env


def harvest_cmd(
    dsn: str | None,
    *args: str,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess:
    return cli_forks.run(args, run_env(dsn, env or {}), cwd=cwd, timeout=timeout)


def one_error_line(result: subprocess.CompletedProcess) -> str:
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert lines and lines[-1].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[-1]


@pytest.mark.parametrize(
    ("env", "toml", "needle"),
    [
        (
            {"HARVEST_WORKER__QUEUES": "gamma"},
            None,
            "names 'gamma', which the App does not declare; declared queues: alpha, beta",
        ),
        ({"HARVEST_RETENTION__RUN_ON": "sometimes"}, None, "retention.run_on 'sometimes'"),
        ({"HARVEST_WORKER_QUEUES": "alpha"}, None, "did you mean HARVEST_WORKER__QUEUES?"),
        ({}, '[worker]\nqueue = ["alpha"]\n', "unknown config key 'worker.queue'"),
        ({"HARVEST_ROLE": "web"}, None, "nothing to run: role web"),
    ],
)
def test_worker_boot_stops_on_bad_config(tmp_path: Path, env: dict, toml: str | None, needle: str) -> None:
    if toml is not None:
        write(tmp_path, toml)  # ./harvest.toml in the working directory
    r = harvest_cmd(
        "postgresql://nobody@127.0.0.1:1/none", "worker", "test_config:app", env=env, cwd=tmp_path
    )
    assert r.returncode == 1
    assert needle in one_error_line(r)


@pytest.mark.parametrize(
    "args",
    [
        ["worker", "--config", "other.toml", "test_config:app"],
        ["worker", "run", "--config", "other.toml", "test_config:app"],
        ["--config", "harvest.toml", "worker", "test_config:app", "--config", "other.toml"],
    ],
    ids=["worker", "worker-run", "root-and-worker"],
)
def test_a_subcommands_own_config_is_the_one_file_read(tmp_path: Path, args: list[str]) -> None:
    """With a broken ./harvest.toml, `harvest worker --config other.toml` reads other.toml only:
    the root's eager check used to load ./harvest.toml first and refuse the invocation."""
    write(tmp_path, '[worker]\nqueue = ["alpha"]\n')  # broken: an unknown key
    write(tmp_path, 'role = "web"\n', "other.toml")  # valid; a web role runs nothing here
    r = harvest_cmd("postgresql://nobody@127.0.0.1:1/none", *args, cwd=tmp_path)
    assert r.returncode == 1
    assert "nothing to run: role web" in one_error_line(r)  # other.toml's role: it was the one read


def test_one_config_file_is_loaded_per_invocation(tmp_path: Path, monkeypatch) -> None:
    from click.testing import CliRunner

    from harvest.cli import main
    from harvest.cli import output as cli_output

    write(tmp_path, '[worker]\nqueue = ["alpha"]\n')
    other = write(tmp_path, 'role = "web"\n', "other.toml")
    monkeypatch.chdir(tmp_path)
    for name in [k for k in os.environ if k.startswith("HARVEST_")]:
        monkeypatch.delenv(name)
    loaded: list = []

    def counting_load(path=None, env=None):
        loaded.append(path)
        return load_config(path, env)

    monkeypatch.setattr(cli_output, "load_config", counting_load)
    result = CliRunner().invoke(main, ["worker", "--config", str(other), "test_config:app"])
    assert result.exit_code == 1, result.output
    assert loaded == [str(other)]
    # Without a subcommand --config the root's (or ./harvest.toml) is the one: refused, typed.
    loaded.clear()
    result = CliRunner().invoke(main, ["worker", "test_config:app"])
    assert result.exit_code == 1 and "unknown config key 'worker.queue'" in result.output
    assert set(loaded) == {None}  # ./harvest.toml only (the error line's scrub tries it again)


def _command_paths(group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    import click

    ctx = click.Context(group)
    paths = [prefix]
    for name in group.list_commands(ctx):  # (the root imports its commands when asked for them)
        command = group.get_command(ctx, name)
        if hasattr(command, "commands"):
            paths.extend(_command_paths(command, (*prefix, name)))
        else:
            paths.append((*prefix, name))
    return paths


def test_every_help_works_with_a_broken_config_file(tmp_path: Path, monkeypatch) -> None:
    """--help reads no configuration: `harvest worker --help` in a folder whose ./harvest.toml
    is broken prints the help (the root used to load the file before the subcommand's --help
    was parsed); running a command there is still refused, naming the bad key."""
    from click.testing import CliRunner

    from harvest.cli import main

    write(tmp_path, '[worker]\nqueue = ["alpha"]\n')  # broken: an unknown key
    monkeypatch.chdir(tmp_path)
    for name in [k for k in os.environ if k.startswith("HARVEST_")]:
        monkeypatch.delenv(name)
    paths = _command_paths(main)
    assert ("worker",) in paths and ("worker", "run") in paths and ("workflow", "list") in paths
    for path in paths:
        result = CliRunner().invoke(main, [*path, "--help"])
        assert result.exit_code == 0, f"harvest {' '.join(path)} --help: {result.output}"
        assert "Usage:" in result.output and "unknown config key" not in result.output, path
    for args in (["workflow", "list"], ["worker", "test_config:app"], ["dlq", "count"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 1 and "unknown config key 'worker.queue'" in result.output, args


def test_worker_flag_queue_is_checked_too(tmp_path: Path) -> None:
    r = harvest_cmd(
        "postgresql://nobody@127.0.0.1:1/none", "worker", "test_config:app", "--queue", "nope", cwd=tmp_path
    )
    assert r.returncode == 1 and "worker.queues (from --queue) names 'nope'" in one_error_line(r)


def wait_until(predicate, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_worker_process_logs_each_switch_narrows_queues_and_coverage_lists_the_rest(
    db: str, tmp_path: Path
) -> None:
    config = write(tmp_path, 'role = "worker"\n[worker]\nqueues = ["alpha", "beta"]\n')
    env = run_env(db, {"HARVEST_SCHEDULER__ENABLED": "false", "HARVEST_WORKER__QUEUES": "alpha"})
    proc = subprocess.Popen(
        [*HARVEST, "worker", "test_config:app", "--config", str(config)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with psycopg.connect(db, autocommit=True) as conn:
            queues = wait_until(
                lambda: conn.execute("SELECT queues FROM harvest.workers WHERE status = 'active'").fetchone(),
                what="the worker to register",
            )[0]
        assert queues == ["alpha"]

        r = harvest_cmd(db, "queue", "coverage", "--app", "test_config:app", "--output", "json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["unpolled_declared_queues"] == ["beta"]
        r = harvest_cmd(db, "queue", "coverage", "--app", "test_config:app", "--strict")
        assert r.returncode == 2 and "unpolled declared queues: beta" in r.stdout
        assert "alpha" in r.stdout.splitlines()[1]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    lines = stderr.splitlines()
    runtimes = [x for x in lines if "harvest runtimes: " in x]
    assert len(runtimes) == 1, stderr  # one line with each value and its source
    assert f"role=worker (source: explicit ({config}))" in runtimes[0]
    assert "; worker.enabled=true (source: role worker);" in runtimes[0]
    assert "; scheduler.enabled=false (source: explicit (HARVEST_SCHEDULER__ENABLED));" in runtimes[0]
    assert "; retention.enabled=false (source: " in runtimes[0]
    assert (
        sum("WARNING" in x and "scheduler.enabled=false" in x and "overrides role worker" in x for x in lines)
        == 1
    )
    assert any(
        "declared alpha, beta; polled alpha (source: explicit (HARVEST_WORKER__QUEUES))" in x for x in lines
    ), stderr
    with psycopg.connect(db, autocommit=True) as conn:
        assert conn.execute("SELECT status FROM harvest.workers").fetchone()[0] == "stopped"


def test_a_scheduler_and_retention_only_process_registers_no_worker(db: str) -> None:
    """run_worker=False: no claim loop and no registry row (coverage stays honest); the janitor runs."""
    with psycopg.connect(db, autocommit=True) as conn:
        row = conn.execute("SELECT execution_id FROM harvest.start_workflow('pinger', '[1]', 'old', 'alpha')")
        execution_id = row.fetchone()[0]
        conn.execute("SELECT harvest.terminate_workflow(%s, 'done')", (execution_id,))
        conn.execute("SELECT harvest.set_retention('1 second')")
        time.sleep(1.2)

        async def main() -> None:
            worker = Worker(
                app, db, run_worker=False, run_scanner=True, run_retention=True, retention_interval=0.1
            )
            task = asyncio.create_task(worker.run())
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                await asyncio.sleep(0.1)
                if not conn.execute(
                    "SELECT 1 FROM harvest.executions WHERE id = %s", (execution_id,)
                ).fetchone():
                    break
            worker.request_stop()
            await asyncio.wait_for(task, 20)

        asyncio.run(main())
        assert conn.execute("SELECT count(*) FROM harvest.executions").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM harvest.workers").fetchone()[0] == 0
        assert (
            conn.execute(
                "SELECT claimed FROM (SELECT count(*) AS claimed FROM harvest.tasks "
                "WHERE lease_owner IS NOT NULL) AS t"
            ).fetchone()[0]
            == 0
        )
