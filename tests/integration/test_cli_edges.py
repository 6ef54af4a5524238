"""Issue 12 items 7, 8, 12, 18, 19: the CLI where input enters. Each bad input is refused with one
line and no traceback; every command reads the same configuration (flag > HARVEST_* > harvest.toml);
the spec's forms of the commands are accepted; exit codes are distinct and documented."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import cli_forks
import psycopg
import pytest
from operator_helpers import REPO, closed_port, start
from served_cli import BASE as HTTP_BASE
from served_cli import cli as invoke
from served_cli import served as served_api


def run(
    *args: str, cwd: Path | None = None, dsn: str | None = None, env: dict | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    """`harvest ARGS` as a process; no HARVEST_* variable leaks in from the test run unless given."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("HARVEST_")}
    if dsn:
        base["HARVEST_DATABASE_URL"] = dsn
    else:
        # Given no database the CLI tries HTTP at localhost:web.port (3000 by default), where a
        # developer's own `harvest dev` may be answering: point it at a port nothing listens on.
        base["HARVEST_WEB__PORT"] = str(closed_port())
    base.update(env or {})
    base["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO / "harvest_py"), str(Path(__file__).parent), os.environ.get("PYTHONPATH")) if p
    )
    return cli_forks.run(args, base, cwd=cwd, timeout=timeout)


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    return lines[0]


@pytest.fixture
def conn(db: str):
    with psycopg.connect(db, autocommit=True) as c:
        yield c


# -- item 7: zero or negative numbers are refused where they enter ------------------------------------


@pytest.mark.parametrize(
    ("toml", "needle"),
    [
        ("[worker]\nheartbeat_interval = 0\n", "worker.heartbeat_interval = 0.0"),
        ("[worker]\nshutdown_grace = -10\n", "worker.shutdown_grace = -10.0"),
        ("[retention]\ninterval = -1\n", "retention.interval = -1.0"),
        ("[worker]\nconcurrency = 0\n", "worker.concurrency = 0"),
    ],
)
def test_worker_refuses_a_bad_number_in_harvest_toml(tmp_path: Path, toml: str, needle: str) -> None:
    (tmp_path / "harvest.toml").write_text(toml)
    r = run("worker", "no_such_module:app", cwd=tmp_path)
    assert r.returncode != 0
    line = one_error_line(r)
    assert needle in line and "out of range: allowed" in line, line


def test_worker_refuses_a_negative_shutdown_grace_flag(tmp_path: Path) -> None:
    r = run("worker", "no_such_module:app", "--shutdown-grace", "-1", cwd=tmp_path)
    assert r.returncode != 0
    assert "worker.shutdown_grace = -1.0 (from --shutdown-grace) is out of range" in one_error_line(r)


# -- item 8: one line, never a traceback ---------------------------------------------------------------


def test_workflow_start_with_an_empty_name_is_one_line(db: str) -> None:
    r = run("workflow", "start", "", dsn=db)
    assert r.returncode == 2 and "workflow name is empty" in one_error_line(r)


def test_worker_with_an_unknown_log_level_is_one_line(tmp_path: Path) -> None:
    r = run("worker", "no_such_module:app", "--log-level", "verbose", cwd=tmp_path)
    assert r.returncode == 2
    line = one_error_line(r)
    assert "'verbose' is not one of" in line and "info" in line


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--log-level", "verbose", "workflow", "list"], "'verbose' is not one of"),
        (["--output", "yaml", "workflow", "list"], "'yaml' is not one of"),
        (["--http-timeout-secs", "0", "workflow", "list"], "is not in the range"),
        (["--bogus", "workflow", "list"], "No such option '--bogus'"),
    ],
)
def test_a_bad_root_option_is_one_line(tmp_path: Path, args: list[str], needle: str) -> None:
    """docs/operations.md: `--log-level verbose` is refused in one `error:` line, exit 2. The root
    group's own options were parsed before HarvestGroup.invoke caught anything: click printed its
    usage, a blank line and `Error: ...` instead."""
    r = run(*args, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    line = one_error_line(r)
    assert needle in line and line.endswith(" --help)"), line


@pytest.mark.parametrize("content", ["42", '{"a": 1}', "[1, 2]", "[]", '{"events": [{"event_id": "x"}]}'])
def test_replay_of_a_file_that_is_not_a_history_is_one_line(tmp_path: Path, content: str) -> None:
    (tmp_path / "replay_app.py").write_text("from harvest import App\napp = App()\n")
    path = tmp_path / "not_history.json"
    path.write_text(content)
    r = run("replay", "--app", "replay_app:app", "--json-path", str(path), cwd=tmp_path)
    assert r.returncode == 2
    line = one_error_line(r)
    assert "not a Harvest history" in line and "a JSON list of events" in line


def test_replay_of_a_path_with_no_writer_is_one_line_not_a_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`harvest replay` read its file with Path.read_text(): a FIFO nobody writes to blocked its
    open for ever (and /dev/zero would be read into memory until the process died). Opened
    non-blocking as the --*-file options are, it waits FIFO_WRITER_WAIT_SECS for a writer (none
    here) and says so: one line, exit 2."""
    from harvest.cli import output as cli_output

    (tmp_path / "replay_fifo_app.py").write_text("from harvest import App\napp = App()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(cli_output, "FIFO_WRITER_WAIT_SECS", 0)
    fifo = tmp_path / "history.pipe"
    os.mkfifo(fifo)
    r = invoke("replay", "--app", "replay_fifo_app:app", "--json-path", str(fifo))
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr)
    assert (
        r.stderr.strip() == f"error: {fifo}: no writer, nothing written within 0 s (start its writer first)"
    ), r.stderr


def test_replay_of_a_file_past_its_bound_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A history file larger than MAX_HISTORY_FILE_BYTES is refused by its size, before any
    read: one line naming the bound, exit 2 (here with the bound lowered to 1,000 bytes; the
    real one is 1 GiB: docs/versioning.md says why not the 64 MiB of a --*-file option)."""
    from harvest.cli import replay as replay_cli

    (tmp_path / "replay_bound_app.py").write_text("from harvest import App\napp = App()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(replay_cli, "MAX_HISTORY_FILE_BYTES", 1_000, raising=False)
    started = {"workflow_name": "flow", "workflow_id": "f", "input": ["x" * 2_000], "task_queue": "default"}
    path = tmp_path / "history.json"
    path.write_text(json.dumps([{"event_id": 1, "event_type": "WorkflowStarted", "event_data": started}]))
    r = invoke("replay", "--app", "replay_bound_app:app", "--json-path", str(path))
    assert isinstance(r.exception, SystemExit | None), repr(r.exception)
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr)
    assert r.stderr.strip().startswith(f"error: {path}: larger than 1000 bytes"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_replay_of_a_device_is_refused_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`harvest replay --json-path /dev/zero` read 1 GiB into memory before its size refused
    it: a character device is refused by its kind, before any read (here with the bound at
    1,000 bytes, which the old code answered "larger than 1000 bytes" after reading them)."""
    from harvest.cli import replay as replay_cli

    (tmp_path / "replay_dev_app.py").write_text("from harvest import App\napp = App()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(replay_cli, "MAX_HISTORY_FILE_BYTES", 1_000, raising=False)
    r = invoke("replay", "--app", "replay_dev_app:app", "--json-path", "/dev/zero")
    assert isinstance(r.exception, SystemExit | None), repr(r.exception)
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr)
    assert r.stderr.strip().startswith("error: /dev/zero: a character device"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_replay_of_a_batch_for_a_workflow_the_app_does_not_have_fails(tmp_path: Path) -> None:
    """`harvest replay --workflow NAME` of an export batch kept the exports of NAME and replayed
    them: a NAME the App does not register (a typo) kept none, and the gate passed, exit 0,
    "0 of 0 replayed". It fails as for a single history: exit 1, one line naming it."""
    from harvest.client.export_batch import BATCH_SCHEMA

    (tmp_path / "replay_app.py").write_text(
        "from harvest import App, workflow\n\n@workflow\nasync def flow(ctx) -> int:\n    return 1\n\n"
        "app = App(workflows=[flow])\n"
    )
    started = {"workflow_name": "flow", "workflow_id": "f", "input": [], "task_queue": "default"}
    events = [
        {"event_id": 1, "event_type": "WorkflowStarted", "event_data": started},
        {"event_id": 2, "event_type": "WorkflowTaskCompleted", "event_data": {"through": 1}},
        {"event_id": 3, "event_type": "WorkflowCompleted", "event_data": {"result": 1}},
    ]
    export = {"execution_id": "e1", "workflow_name": "flow", "events": events, "redacted": False}
    path = tmp_path / "batch.json"
    path.write_text(json.dumps({"schema": BATCH_SCHEMA, "status": "complete", "exports": [export]}))
    ok = run(
        "replay", "--app", "replay_app:app", "--json-path", str(path), "--workflow", "flow", cwd=tmp_path
    )
    assert ok.returncode == 0 and "1 of 1 replayed" in ok.stdout, ok.stdout + ok.stderr
    r = run("replay", "--app", "replay_app:app", "--json-path", str(path), "--workflow", "flwo", cwd=tmp_path)
    assert r.returncode == 1, r.stdout
    assert "flwo" in one_error_line(r)


def test_versioning_doc_says_what_replay_does_with_a_file_that_is_not_a_history() -> None:
    """docs/versioning.md holds the behaviour above (one line, exit 2) and the batch export
    beside it (`harvest history export-batch`, WorkflowReplayer.replay_batch): it said such a
    file ended in a traceback and exit 1, and that there was no batch export."""
    doc = " ".join((REPO / "docs" / "versioning.md").read_text().split())
    assert "traceback and exit code 1" not in doc.lower() and "There is no batch export" not in doc
    assert (
        "valid JSON but not a history (say, a number): one line, `error: <file>: not a Harvest history" in doc
    )
    assert "harvest history export-batch" in doc and "replay_batch" in doc


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["workflow", "list", "--page-size", "99999999999"], "page size 99999999999 is out of range 1..1000"),
        (
            ["workflow", "list", "--state", "BOGUS"],
            (
                'unknown state "BOGUS": use RUNNING, PAUSED, COMPLETED, FAILED, CANCELLED, TERMINATED,'
                " TIMED_OUT, CONTINUED_AS_NEW, MIGRATING or MIGRATED"
            ),
        ),
        (
            ["workflow", "children", "00000000-0000-0000-0000-000000000000", "--status", "nope"],
            'unknown status "nope": use RUNNING',
        ),
        (["dlq", "get", "99999999999999999999"], "is not in the range"),
        (["dlq", "list", "--limit", "0"], "is not in the range 1<=x<=1000"),
        (["workflow", "query", "00000000-0000-0000-0000-000000000000", "q", "--timeout", "0"], "--timeout"),
    ],
)
def test_bad_values_are_refused_in_one_line(db: str, args: list[str], needle: str) -> None:
    r = run(*args, dsn=db)
    assert r.returncode == 2
    assert needle in one_error_line(r)


@pytest.mark.parametrize(
    "args",
    [
        ["workflow", "list", "--state", "BOGUS"],
        ["workflow", "count", "--state", "BOGUS"],
        ["workflow", "children", "00000000-0000-0000-0000-000000000000", "--status", "BOGUS"],
    ],
)
def test_an_unknown_state_names_the_states_once(db: str, args: list[str]) -> None:
    """The SQL puts the advice in the HINT only: the error line (message, then hint) said it twice."""
    r = run(*args, dsn=db)
    line = one_error_line(r)
    assert r.returncode == 2 and line.count("use RUNNING") == 1, line


def test_a_string_priority_is_refused_before_the_database(db: str) -> None:
    from harvest.client import Client
    from harvest.core.errors import InvalidArgument

    with Client(db) as client, pytest.raises(InvalidArgument, match="priority: expected an int"):
        client.start_workflow("wf", priority="high")
    with psycopg.connect(db) as c:
        assert c.execute("SELECT count(*) FROM harvest.executions").fetchone()[0] == 0


# -- item 12: one configuration for every command ------------------------------------------------------


def test_workflow_list_reads_the_database_url_from_harvest_toml(db: str, tmp_path: Path, conn) -> None:
    execution_id = start(conn, "from_file", "f1")
    (tmp_path / "harvest.toml").write_text(f'database_url = "{db}"\n')
    r = run("workflow", "list", "-o", "json", cwd=tmp_path)  # no HARVEST_DATABASE_URL, no flag
    assert r.returncode == 0, r.stderr
    assert [e["execution_id"] for e in json.loads(r.stdout)["executions"]] == [execution_id]
    # Precedence is the worker's: the flag, then HARVEST_DATABASE_URL, then the file.
    bad = "postgresql://nobody@127.0.0.1:1/none"
    r = run("workflow", "list", "--database-url", bad, cwd=tmp_path)
    assert r.returncode != 0 and "127.0.0.1:1" in one_error_line(r)
    r = run("workflow", "list", cwd=tmp_path, env={"HARVEST_DATABASE_URL": bad})
    assert r.returncode != 0 and "127.0.0.1:1" in one_error_line(r)
    # `harvest --config PATH` names the file for any command.
    other = tmp_path / "sub"
    other.mkdir()
    r = run(
        "--config", str(tmp_path / "harvest.toml"), "workflow", "get", execution_id, "-o", "json", cwd=other
    )
    assert r.returncode == 0 and json.loads(r.stdout)["workflow_id"] == "f1"


def test_no_database_anywhere_names_every_place_to_give_one(tmp_path: Path) -> None:
    r = run("workflow", "list", cwd=tmp_path)
    assert r.returncode == 1
    line = one_error_line(r)
    assert (
        "HARVEST_DATABASE_URL" in line and "database_url in harvest.toml" in line and "--database-url" in line
    )


@pytest.mark.parametrize("args", [["workflow", "list"], ["dlq", "list"], ["worker", "list"]])
def test_a_database_never_migrated_says_to_run_migrate(fresh_db: str, args: list[str]) -> None:
    """The SQL-only commands printed the server's line alone ('schema "harvest" does not
    exist'), where `harvest workflow start` and the worker say what to do."""
    r = run(*args, dsn=fresh_db)
    assert r.returncode == 1
    line = one_error_line(r)
    assert 'schema "harvest" does not exist' in line and "harvest migrate run" in line, line


def test_install_doc_quotes_the_no_database_error_a_sql_only_command_prints(tmp_path: Path) -> None:
    """docs/install.md ("Which database") quotes the line word for word and names the three
    places (it quoted an older line and left out database_url in harvest.toml)."""
    r = run("migrate", "status", cwd=tmp_path)
    assert r.returncode == 1
    line = one_error_line(r)
    doc = (REPO / "docs" / "install.md").read_text()
    assert f"\n{line}\n" in doc, line
    assert "`database_url` in the\nconfig file" in doc and "http://localhost:3000/api/harvest" in doc


@pytest.mark.parametrize(
    "args",
    [
        ["workflow", "list"],
        ["dlq", "list"],
        ["preflight"],
        ["migrate", "status"],
        ["worker", "list"],
        ["queue", "coverage"],
    ],
)
def test_a_misspelled_variable_stops_every_command(db: str, tmp_path: Path, args: list[str]) -> None:
    r = run(*args, dsn=db, cwd=tmp_path, env={"HARVEST_WORKER_QUEUES": "a"})
    assert r.returncode == 1
    assert "unknown setting HARVEST_WORKER_QUEUES; did you mean HARVEST_WORKER__QUEUES?" in one_error_line(r)


def test_a_bad_key_in_harvest_toml_stops_workflow_list(db: str, tmp_path: Path) -> None:
    (tmp_path / "harvest.toml").write_text("[worker]\nconcurency = 4\n")
    r = run("workflow", "list", dsn=db, cwd=tmp_path)
    assert r.returncode == 1 and "unknown config key 'worker.concurency'" in one_error_line(r)


# -- item 18: the spec's forms ----------------------------------------------------------------------


def test_a_global_output_option_before_the_command(db: str) -> None:
    for args in (
        ["--output", "json", "preflight"],
        ["-o", "json", "preflight"],
        ["preflight", "--output", "json"],
    ):
        r = run(*args, dsn=db)
        assert r.returncode in (0, 2), r.stderr  # pass or warn (no retention configured)
        assert json.loads(r.stdout)["overall_status"] in ("pass", "warn")
    # The command's own option wins over the global one.
    r = run("--output", "json", "worker", "list", "--output", "table", dsn=db)
    assert r.returncode == 0 and r.stdout.startswith("WORKER_ID")


def _claim_and_decide(conn, queue: str, commands: list) -> None:
    from psycopg.types.json import Jsonb

    task = conn.execute(
        "SELECT task_id, fencing_token FROM harvest.claim_tasks('decider', %s, 1)", ([queue],)
    ).fetchone()
    conn.execute(
        "SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, %s)", (task[0], task[1], Jsonb(commands))
    )


def _fail(conn, name: str, workflow_id: str) -> str:
    execution_id = start(conn, name, workflow_id, queue=f"q_{workflow_id}")
    _claim_and_decide(
        conn,
        f"q_{workflow_id}",
        [
            {
                "type": "fail_workflow",
                "failure": {
                    "error_type": "Boom",
                    "message": "it broke",
                    "non_retryable": True,
                    "details": None,
                },
            }
        ],
    )
    return execution_id


def test_workflow_children_status_and_start_output(db: str, conn) -> None:
    r = run("workflow", "start", "spec_form", "--workflow-id", "s1", "-o", "json", dsn=db)
    assert r.returncode == 0, r.stderr
    parent = json.loads(r.stdout)["execution_id"]
    r = run("workflow", "children", parent, "--status", "Failed", "-o", "json", dsn=db)
    assert r.returncode == 0 and json.loads(r.stdout) == {
        "items": [],
        "status": "complete",
        "unavailable_shards": [],
        "next_cursor": None,
        "truncated": False,
    }
    r = run("workflow", "children", parent, "--state", "RUNNING", "-o", "json", dsn=db)
    assert r.returncode == 0 and json.loads(r.stdout)["items"] == []


def test_history_export_payload_policy_and_output_file(db: str, conn, tmp_path: Path) -> None:
    from psycopg.types.json import Jsonb

    execution_id = conn.execute(
        "SELECT execution_id FROM harvest.start_workflow('exp', %s)", (Jsonb(["secret-input"]),)
    ).fetchone()[0]
    out = tmp_path / "fixtures" / "h.json"
    out.parent.mkdir()
    r = run(
        "history", "export", str(execution_id), "--payload-policy", "full", "--output-file", str(out), dsn=db
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["redacted"] is False and doc["events"][0]["event_data"]["input"] == ["secret-input"]
    r = run("history", "export", str(execution_id), "--payload-policy", "redacted", dsn=db)
    assert json.loads(r.stdout)["events"][0]["event_data"]["input"]["redacted"] is True
    r = run("history", "export", str(execution_id), "--full", "--payload-policy", "redacted", dsn=db)
    assert r.returncode == 2 and "contradict" in one_error_line(r)


def test_worker_list_shard_id(db: str, conn) -> None:
    conn.execute("SELECT harvest.register_worker('w-s0', ARRAY['email'], 'h', 1, 5)")
    r = run("worker", "list", "--queue", "email", "--shard-id", "0", "-o", "json", dsn=db)
    assert r.returncode == 0 and [w["worker_id"] for w in json.loads(r.stdout)["workers"]] == ["w-s0"]
    r = run("worker", "list", "--shard-id", "3", dsn=db)
    assert r.returncode == 2 and "--shard-id 3: no such shard; the shards here are 0" in one_error_line(r)


def test_queue_coverage_without_an_app_is_unknown(db: str, conn, tmp_path: Path) -> None:
    """Without --app the queues the fleet registered stood in for the declared ones: a queue no
    worker ever registered was missed and --strict passed. No App declares the queues, so the
    list is null (unknown) and the gate fails closed; the registered queues are still shown."""
    r = run("queue", "coverage", "--strict", "-o", "json", dsn=db)
    assert r.returncode == 2  # nothing registered: unknown
    assert json.loads(r.stdout)["unpolled_declared_queues"] is None
    conn.execute("SELECT harvest.register_worker('w-a', ARRAY['alpha'], 'h', 1, 5)")
    r = run("queue", "coverage", "--strict", "-o", "json", dsn=db)
    assert r.returncode == 2, r.stdout + r.stderr  # alpha is polled, but is alpha all there is?
    data = json.loads(r.stdout)
    assert (data["unpolled_declared_queues"], data["declared_queues"]) == (None, None)
    assert data["registered_queues"] == ["alpha"] and data["live_workers"] == {"alpha": 1}
    assert data["declared_source"] == "none"
    r = run("queue", "coverage", dsn=db)
    assert r.returncode == 0 and "coverage unknown: no App declares the queues" in r.stdout
    # With the App, its declared queues: beta and default, which no worker ever registered.
    (tmp_path / "cov_app.py").write_text(
        "from harvest import App, activity, workflow\n"
        "@activity(queue='beta')\nasync def send(ctx): return 1\n"
        "@workflow\nasync def flow(ctx): return 1\n"
        "app = App(workflows=[flow], activities=[send])\n"
    )
    r = run("queue", "coverage", "--app", "cov_app:app", "--strict", dsn=db, cwd=tmp_path)
    assert r.returncode == 2 and "unpolled declared queues: beta, default" in r.stdout, r.stdout + r.stderr


def test_workflow_result_exit_codes_differ_for_a_failed_run_and_a_timeout(db: str, conn) -> None:
    failed = _fail(conn, "res_wf", "r-failed")
    r = run("workflow", "result", failed, dsn=db)
    assert r.returncode == 1 and "it broke" in one_error_line(r)
    running = start(conn, "res_wf", "r-running")
    r = run("workflow", "result", running, "--timeout", "0.5", dsn=db)
    assert r.returncode == 3
    one_error_line(r)
    done = start(conn, "res_wf", "r-done", queue="q_done")
    _claim_and_decide(conn, "q_done", [{"type": "complete_workflow", "result": {"ok": 1}}])
    r = run("workflow", "result", done, dsn=db)
    assert r.returncode == 0 and json.loads(r.stdout) == {"ok": 1}


# -- item 19 ----------------------------------------------------------------------------------------


def test_version_usage_keeps_version_zero_in_its_message(db: str) -> None:
    r = run("version-usage", "--change-id", "gate-x", "--version", "0", dsn=db)
    assert r.returncode == 0 and "no active run recorded gate-x version 0" in r.stdout
    r = run("version-usage", "--change-id", "gate-x", "--version", "0", "--guard", dsn=db)
    assert r.returncode == 0 and "version 0" in r.stdout
    # --state-group all read "no all run recorded gate-x".
    r = run("version-usage", "--change-id", "gate-x", "--state-group", "all", dsn=db)
    assert r.returncode == 0 and r.stdout.strip() == "no run recorded gate-x", r.stdout
    r = run("version-usage", "--change-id", "gate-x", "--state-group", "terminal", dsn=db)
    assert r.stdout.strip() == "no terminal run recorded gate-x", r.stdout


def test_concurrency_status_omits_an_empty_workflows_field(db: str, conn) -> None:
    start(conn, "cap_wf", "c1", queue="cq")
    _claim_and_decide(
        conn,
        "cq",
        [
            {
                "type": "schedule_activity",
                "seq": 1,
                "name": "act",
                "input": [],
                "queue": "caq",
                "options": {"max_concurrent": 1, "concurrency_key": "k1"},
            }
        ],
    )
    r = run("concurrency", "status", "-o", "json", dsn=db)
    assert r.returncode == 0, r.stderr
    [row] = json.loads(r.stdout)["keys"]
    assert row["key"] == "k1" and row["task_type"] == "activity" and "workflows" not in row


def test_worker_health_counts_every_live_worker_per_queue(db: str, conn) -> None:
    conn.execute("SELECT harvest.register_worker('h-live', ARRAY['default'], 'h', 1, 5)")
    conn.execute("SELECT harvest.register_worker('h-stale', ARRAY['default'], 'h', 2, 5)")
    conn.execute(
        "UPDATE harvest.workers SET last_heartbeat_at = now() - interval '1 minute' WHERE id = 'h-stale'"
    )
    data = json.loads(run("worker", "health", "-o", "json", dsn=db).stdout)
    assert data["by_queue"] == {"default": 2} and data["by_shard"] == {"0": 2}
    assert data["by_queue_health"] == {"default": {"healthy": 1, "draining": 0, "stale": 1}}
    table = run("worker", "health", dsn=db).stdout
    assert table.splitlines()[-1].split() == ["default", "2", "1", "0", "1"]


# -- the same refusal, the same exit code, on both transports -----------------------------------------


@pytest.fixture
def served(db: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The management API on ``db`` as the CLI's HTTP transport at HTTP_BASE."""
    with served_api(db, monkeypatch):
        yield


@pytest.mark.parametrize(
    "args",
    [
        ["retention", "set", "--max-age", "bogus"],  # invalid input syntax for type interval (22007)
        ["workflow", "get", "not-a-uuid"],  # refused by its argument type (EXECUTION_ID) before either
        ["workflow", "start", "edge_wf", "--input-json", '"\\u0000"'],  # 22P05 over SQL
    ],
)
def test_a_value_the_database_refuses_exits_2_over_sql_as_over_http(
    db: str, served: None, args: list[str]
) -> None:
    web = invoke("--base-url", HTTP_BASE, *args)
    sql = invoke(*args, "--database-url", db)
    for r in (web, sql):
        assert isinstance(r.exception, SystemExit | None), repr(r.exception)
        assert r.exit_code == 2 and r.stderr.startswith("error: "), (r.exit_code, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["retention", "set", "--max-age", "100000 years"],
        ["retention", "set", "--worker-max-age", "100000 years"],
        ["retention", "run-now", "--max-age", "100000 years"],
    ],
)
def test_a_retention_age_past_the_first_storable_time_says_so_on_both_transports(
    db: str, served: None, args: list[str]
) -> None:
    """An age whose cutoff falls before 4713 BC failed with PostgreSQL's own words, "timestamp
    out of range", naming neither the setting nor what to do."""
    for r in (invoke("--base-url", HTTP_BASE, *args), invoke(*args, "--database-url", db)):
        assert r.exit_code == 2, (r.exit_code, r.stderr)
        assert "max age 100000 years is too long" in r.stderr, r.stderr


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["retention", "set", "--max-age", "bogus"], "--max-age"),
        (["retention", "set", "--max-age", "30 days", "--worker-max-age", "30 dayz"], "--worker-max-age"),
        (["retention", "run-now", "--max-age", "bogus"], "--max-age"),
        (["audit", "prune", "--older-than", "bogus"], "--older-than"),
    ],
)
def test_an_age_that_is_no_interval_is_refused_naming_its_option(
    db: str, served: None, args: list[str], option: str
) -> None:
    """Every option the database reads as an interval: 'bogus' exited 2 with PostgreSQL's "invalid
    input syntax for type interval", naming no option."""
    for r in (invoke("--base-url", HTTP_BASE, *args), invoke(*args, "--database-url", db)):
        assert r.exit_code == 2, (r.exit_code, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert f"'{option}'" in r.stderr and "is not a PostgreSQL interval" in r.stderr, r.stderr


def test_the_interval_check_refuses_no_word_postgresql_takes(conn) -> None:
    """harvest.core.durations.interval_problem refuses a word that is no unit of time before the
    database sees it: each word it takes is one PostgreSQL takes, and the forms it lets through
    are PostgreSQL's."""
    from harvest.core.durations import _INTERVAL_WORDS, interval_problem

    for word in sorted(_INTERVAL_WORDS):
        text = word if word in ("ago", "infinity") else f"1 {word}"
        if word == "ago":
            text = "1 day ago"
        assert interval_problem(text) is None, text
        conn.execute("SELECT %s::interval", (text,))
    for text in (
        "1 day 06:00",
        "P1D",
        "P0001-02-03T04:05:06",
        "@ 3 days",
        "90 microseconds",
        "1h30m",
        "-1 day",
    ):
        assert interval_problem(text) is None, text
        conn.execute("SELECT %s::interval", (text,))
    for text in ("bogus", "30 dayz", "", "!!!", "1 fortnight"):
        assert interval_problem(text) is not None, text
        with pytest.raises(psycopg.errors.InvalidDatetimeFormat):
            conn.execute("SELECT %s::interval", (text,))


def test_an_infinite_retention_age_is_refused_naming_off(db: str, served: None) -> None:
    """'infinity' (an interval since PostgreSQL 17) was kept: retention "configured" that kept
    everything, its max_age_secs the string "Infinity" where every other answer has a number."""
    args = ["retention", "set", "--max-age", "infinity"]
    for r in (invoke("--base-url", HTTP_BASE, *args), invoke(*args, "--database-url", db)):
        assert r.exit_code == 2, (r.exit_code, r.stderr)
        assert "retention max age infinity is not a length of time" in r.stderr, r.stderr


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["workflow", "start", "edge_wf"], "--input-file"),
        (["workflow", "signal", "00000000-0000-0000-0000-000000000000", "s"], "--input-file"),
        (["activity", "complete", "hv_task_token"], "--result-file"),
        (["dag", "trigger", "edge_dag"], "--conf-file"),
    ],
)
def test_a_json_file_that_is_not_utf8_is_one_line_naming_the_file(
    db: str, tmp_path: Path, args: list[str], option: str
) -> None:
    bad = tmp_path / "value.json"
    bad.write_bytes(b"\xff\xfe{}")
    r = invoke(*args, option, str(bad), "--database-url", db)
    assert isinstance(r.exception, SystemExit | None), repr(r.exception)
    assert r.exit_code == 2, (r.exit_code, r.stderr)
    assert (
        r.stderr.strip()
        == f"error: {option} {bad}: not UTF-8 text (byte 0: invalid start byte); JSON is UTF-8"
    )


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "[1e999]"])
def test_a_non_finite_number_in_a_json_option_is_refused_on_both_transports(
    db: str, served: None, value: str
) -> None:
    args = ["workflow", "start", "edge_wf", "--input-json", value]
    for r in (invoke("--base-url", HTTP_BASE, *args), invoke(*args, "--database-url", db)):
        assert isinstance(r.exception, SystemExit | None), repr(r.exception)
        assert r.exit_code == 2 and r.stderr.startswith("error: --input-json: not valid JSON ("), (
            r.exit_code,
            r.stderr,
        )
    r = invoke(
        "schedule",
        "create-workflow",
        "--name",
        "edge",
        "--every",
        "1m",
        "--input-json",
        value,
        "--database-url",
        db,
    )
    # (Read as every --*-json / --*-file pair is, read_json_option: the error names the option given.)
    assert r.exit_code == 2 and r.stderr.startswith("error: --input-json: not valid JSON ("), r.stderr


# -- stderr holds the CLI's own lines: a library's log records only when asked ------------------------


# cli_timeout = 600 in these configurations: a shard whose server refuses is named at once
# (harvest.db.pools, fail_fast), never after the timeout; a command that waited it out would
# outlast run()'s 120 s.
def _one_shard_down(db: str, tmp_path: Path) -> None:
    (tmp_path / "harvest.toml").write_text(
        "[shards]\nreadable = [0, 1]\nwritable = [0]\ncli_timeout = 600\n"
        f'[shards.urls]\n0 = {json.dumps(db)}\n1 = "postgresql://alice@127.0.0.1:1/x"\n'
    )


def test_a_partial_read_prints_one_warning_line_and_no_library_log(db: str, tmp_path: Path) -> None:
    """The pool's reconnect attempts to the shard that is down (psycopg_pool's warnings, two
    lines each) reached stderr through logging's last resort before the CLI's one warning."""
    _one_shard_down(db, tmp_path)
    r = run("workflow", "list", "-o", "json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert (data["status"], data["unavailable_shards"]) == ("partial", [1])
    assert [line for line in r.stderr.splitlines() if line.strip()] == [
        (
            "warning: partial: shard(s) 1 could not be read (shard 1: its database cannot be reached now "
            "(Connection refused)); the output holds the other shards only"
        )
    ], r.stderr
    # --log-level asks for every record at that level, the libraries' included.
    verbose = run("--log-level", "warning", "workflow", "list", "-o", "json", cwd=tmp_path)
    assert verbose.returncode == 0 and "psycopg.pool" in verbose.stderr, verbose.stderr
    assert verbose.stderr.rstrip().endswith("the output holds the other shards only"), verbose.stderr


# -- every shard down: unavailable (exit 1), never "not found" ----------------------------------------


def _every_shard_down(tmp_path: Path) -> None:
    """A sharded configuration whose shards all point at a closed port: no server needed."""
    (tmp_path / "harvest.toml").write_text(
        "[shards]\nreadable = [0, 1]\nwritable = [0, 1]\ncli_timeout = 600\n"
        '[shards.urls]\n0 = "postgresql://alice@127.0.0.1:1/x"\n1 = "postgresql://alice@127.0.0.1:1/y"\n'
    )


def test_worker_get_with_every_shard_down_is_unavailable_not_not_found(tmp_path: Path) -> None:
    _every_shard_down(tmp_path)
    r = run("worker", "get", "w-anywhere", cwd=tmp_path)
    line = one_error_line(r)
    assert r.returncode == 1, r.stderr
    assert "no shard could be read" in line and "not found" not in line, line


# -- a count a person waits on: at most N runs a status ---------------------------------------------


def test_workflow_count_limit_counts_each_status_up_to_it_and_says_so(db: str, conn) -> None:
    """`harvest workflow count --limit N` counts at most N runs of each status (what the HTTP
    route's `limit` and the dashboard's chips do): a status that reaches it prints N+ and the
    total is "at least"; without it the count is exact (it reads every matching run)."""
    for i in range(3):
        start(conn, "counted", f"c{i}")
    conn.execute(
        "SELECT harvest.terminate_workflow((SELECT id FROM harvest.executions WHERE workflow_id = 'c0'), 'x')"
    )
    capped = run("workflow", "count", "--limit", "2", dsn=db)
    assert capped.returncode == 0, capped.stderr
    lines = capped.stdout.splitlines()
    assert lines[1].split() == ["RUNNING", "2+"] and lines[2].split() == ["TERMINATED", "1"], capped.stdout
    assert lines[-1] == "at least 3 execution(s)", capped.stdout
    as_json = json.loads(run("workflow", "count", "--limit", "2", "--output", "json", dsn=db).stdout)
    assert [(r["status"], r["executions"], r["capped"]) for r in as_json["counts"]] == [
        ("RUNNING", 2, True),
        ("TERMINATED", 1, False),
    ], as_json
    exact = run("workflow", "count", dsn=db)
    assert exact.stdout.splitlines()[-1] == "3 execution(s)" and "+" not in exact.stdout, exact.stdout
    refused = run("workflow", "count", "--by", "all", "--limit", "2", dsn=db)
    assert refused.returncode == 2 and "--limit counts by status only" in one_error_line(refused)
