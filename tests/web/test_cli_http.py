"""The CLI's two transports: each operator command run over SQL (a DSN) and over HTTP (the
management API, in process through its ASGI app) against the same database prints the same
bytes and exits with the same code; HTTP errors become the same errors; a timeout, a bad token,
and HARVEST_URL beside a worker."""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime

import psycopg
import pytest
from click.testing import CliRunner, Result
from operator_helpers import park, start
from starlette.testclient import TestClient

from harvest.cli import http as cli_http
from harvest.cli.main import main
from harvest.config import load_config
from harvest.core.errors import Unauthenticated
from harvest.web.app import management_app

BASE = "http://testserver"
CLEAN_ENV = {
    "HARVEST_DATABASE_URL": None,
    "HARVEST_URL": None,
    "HARVEST_TOKEN": None,
    "HARVEST_HTTP_TIMEOUT_SECS": None,
    "HARVEST_CONFIG": None,
}


def run(*args: str, env: dict[str, str | None] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env={**CLEAN_ENV, **(env or {})}, catch_exceptions=False)


@pytest.fixture
def served(db: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """serve(profile=..., **options): the management API on ``db``, in process, behind BASE."""
    clients: list[TestClient] = []

    def serve(**options: object) -> None:
        options.setdefault("profile", "dev")
        app = management_app(dsn=db, config=load_config(env={}), **options)  # type: ignore[arg-type]
        client = TestClient(app, base_url="http://testserver")
        client.__enter__()  # the lifespan: pools open, as under uvicorn
        clients.append(client)
        monkeypatch.setattr(cli_http, "TRANSPORT", client._transport)

    yield serve
    for client in clients:
        client.__exit__(None, None, None)


@pytest.fixture
def both(db: str, served: Callable[..., None]) -> Callable[..., tuple[Result, Result]]:
    """both(*args) -> (over SQL, over HTTP), each checked to print the same and exit the same."""
    served()

    def twice(*args: str) -> tuple[Result, Result]:
        sql = run("--database-url", db, *args) if args[:1] == ("--output",) else run(*_with_dsn(args, db))
        web = run("--base-url", BASE, *args)
        assert web.stdout == sql.stdout, (args, sql.stdout, web.stdout, web.stderr)
        assert web.stderr == sql.stderr, (args, sql.stderr, web.stderr)
        assert web.exit_code == sql.exit_code, (args, sql.exit_code, web.exit_code)
        return sql, web

    return twice


def _with_dsn(args: tuple[str, ...], db: str) -> list[str]:
    """``args`` with --database-url given to the subcommand (the root has none)."""
    return [*args, "--database-url", db]


@pytest.fixture
def conn(db: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(db, autocommit=True) as c:
        yield c


def test_operator_commands_print_the_same_over_sql_and_http(both, conn) -> None:
    ids = [start(conn, "onboarding", f"u{i}", search_attributes={"tenant": "acme", "n": i}) for i in range(3)]
    start(conn, "billing", "b1")
    run_id, dead_letter = park(conn, "k1", activity="send_email")
    park(conn, "k2", activity="send_email")
    missing = str(uuid.uuid4())

    for output in ("table", "json"):
        o = ("--output", output)
        both("workflow", "list", *o)
        both("workflow", "list", "--state", "RUNNING", "--search-attr", "tenant=acme", "--limit", "2", *o)
        both("workflow", "list", "--search-attr", "n>=1", "--order", "asc", *o)
        both("workflow", "count", *o)
        both("workflow", "list", "--filter", "tenant = 'acme' OR workflow_name = 'billing'", *o)
        both("workflow", "count", "--filter", "n >= 1 OR workflow_name IN ('billing')", *o)
        both("workflow", "count", "--by", "all", *o)
        both("workflow", "get", ids[0], *o)
        both("workflow", "stack", ids[0], *o)
        both("workflow", "history", ids[0], *o)
        both("workflow", "history", run_id, "--full", *o)
        both("workflow", "children", ids[0], *o)
        both("dlq", "list", *o)
        both("dlq", "get", str(dead_letter), *o)
        both("dlq", "count", "--by", "activity", *o)
        both("dlq", "bulk-replay", "--activity-name", "send_email", "--dry-run", *o)
        both("worker", "list", *o)
        both("worker", "health", *o)
        both("worker", "drain-preview", *o)
        both("concurrency", "status", *o)
        both("dag", "list", *o)
        both("token", "list", *o)
        both("retention", "status", *o)
        both("audit", "list", *o)
        both("usage", "--from", "2026-01-01T00:00:00Z", "--to", "2036-01-01T00:00:00Z", *o)
        both("worker", "get", "nobody", *o)
        both("worker", "drain", "nobody", *o)
        both("dag", "pause", "no_such_dag", *o)
        both("dag", "runs", "no_such_dag", *o)
        both("token", "revoke", "no_such_token", *o)
        both("activity", "complete", "not-a-token", "--result-json", "1", *o)
        both("dlq", "replay", "999999", *o)
        both("version-usage", "--change-id", "fix-1", "--state-group", "all", *o)
        both("queue", "coverage", *o)
        both("throttle", "get", "onboarding", *o)
        # errors: the same line and exit code (NotFound, a bad argument)
        sql, _ = both("workflow", "get", missing, *o)
        assert sql.exit_code == 1 and "error:" in sql.stderr
        both("dlq", "get", "999999", *o)
        # A parameter the route itself checks: its own words, the same exit code (2).
        web = run("--base-url", BASE, "workflow", "children", ids[0], "--status", "nonsense", *o)
        assert web.exit_code == 2 and web.stderr.startswith("error: status: 'nonsense'"), web.stderr

    # export-batch writes one document (no --output): the same over the route
    both("history", "export-batch", "--state-group", "all", "--limit", "3")
    both("history", "export-batch", "--state-group", "all", "--payload-policy", "full")

    # shard health observes now: the same answer but for observed_at
    sql = run("shard", "health", "-o", "json", "--database-url", conn.info.dsn)
    web = run("--base-url", BASE, "shard", "health", "-o", "json")
    a, b = json.loads(sql.stdout), json.loads(web.stdout)
    assert a.pop("observed_at") <= b.pop("observed_at") and a == b
    assert sql.exit_code == web.exit_code


def test_an_empty_workflow_name_is_refused_the_same_over_sql_and_http(both) -> None:
    """`start-gate list --workflow-name ""`: over SQL it printed nothing and exited 0, over
    HTTP the route's 400 exited 2. Both: one line, exit 2."""
    sql, _ = both("start-gate", "list", "--workflow-name", "")
    assert sql.exit_code == 2 and sql.stdout == "", (sql.stdout, sql.stderr)
    assert sql.stderr.count("\n") == 1 and "--workflow-name" in sql.stderr and "is empty" in sql.stderr


def test_worker_list_narrowed_to_a_shard_prints_the_same_over_sql_and_http(both) -> None:
    """`harvest worker list --queue Q --shard-id 0` over HTTP asked the CLI's own (empty) list of
    shards and refused every shard id ("no such shard; the shards here are "), exit 2: the
    server knows the shards, so it answers, as over SQL, and names a shard it does not have."""
    for output in ("table", "json"):
        sql, _ = both("worker", "list", "--queue", "email-workers", "--shard-id", "0", "--output", output)
        assert sql.exit_code == 0, sql.stderr
        both("worker", "list", "--shard-id", "0", "--output", output)
    web = run("--base-url", BASE, "worker", "list", "--shard-id", "7")
    assert web.exit_code == 2 and "7" in web.stderr and "shard" in web.stderr, web.stderr


def test_a_history_longer_than_a_page_prints_the_same_over_sql_and_http(
    both, conn, monkeypatch: pytest.MonkeyPatch, history_rows: list[int]
) -> None:
    """`workflow history` over HTTP read the history from one answer of the route, the whole
    of it; the route answers a page (docs/http-api.md): the CLI follows next_cursor to the end
    and prints what it prints over SQL, and no request reads more than a page."""
    monkeypatch.setattr(cli_http, "HISTORY_PAGE", 4)
    run_id = start(conn, "onboarding", "long-cli")
    conn.execute(
        "SELECT harvest.signal_workflow(%s, 'sig-' || g, to_jsonb(g)) FROM generate_series(1, 10) AS g",
        (run_id,),
    )
    for output in ("table", "json"):
        sql, _ = both("workflow", "history", run_id, "--output", output)
        both("workflow", "history", run_id, "--full", "--output", output)
        both("workflow", "get", run_id, "--output", output)
    assert "sig-10" in sql.stdout or '"payload": 10' in sql.stdout
    assert history_rows and max(history_rows) <= 5, history_rows


def test_children_come_a_page_at_a_time_over_sql_and_http(
    both, conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`workflow children` over SQL read every child of the run (and over HTTP followed the
    route's cursor to the last page): it prints a page of --page-size and the cursor of the
    next, the same bytes over both, and each shard reads page_size + 1 rows for it."""
    from harvest.db.sqlapi import SqlApi

    fetched: list[int] = []
    real = SqlApi.list_children_page

    def counted(self, *args: object, **kwargs: object) -> object:
        rows = real(self, *args, **kwargs)
        fetched.append(len(rows))
        return rows

    monkeypatch.setattr(SqlApi, "list_children_page", counted)
    parent = start(conn, "onboarding", "many-kids")
    kids = [start(conn, "billing", f"kid-{i}") for i in range(5)]
    conn.execute("UPDATE harvest.executions SET parent_id = %s WHERE id = ANY(%s::uuid[])", (parent, kids))
    seen: list[str] = []
    cursor: list[str] = []
    for _ in range(5):
        sql, _ = both("workflow", "children", parent, "--page-size", "2", *cursor, "--output", "json")
        page = json.loads(sql.stdout)
        assert len(page["items"]) <= 2 and page["truncated"] is False
        seen += [r["execution_id"] for r in page["items"]]
        if page["next_cursor"] is None:
            break
        cursor = ["--cursor", page["next_cursor"]]
    assert sorted(seen) == sorted(kids) and len(seen) == len(set(seen))
    assert fetched and max(fetched) <= 3, fetched
    table, _ = both("workflow", "children", parent, "--page-size", "2")
    assert "2 child(ren); next page: --cursor ch2." in table.stdout
    both("workflow", "children", parent, "--status", "RUNNING", "--depth", "2", "--output", "json")


def test_tokens_come_a_page_at_a_time_over_sql_and_http(both, conn) -> None:
    """`token list` over SQL read every token (revoked ones are kept for good) and over HTTP
    followed the route's pages to the end: it prints a page of --limit and the cursor of the
    next, the same bytes over both."""
    conn.execute(
        "SELECT harvest.create_api_token('t' || lpad(g::text, 2, '0'), 'read')"
        " FROM generate_series(1, 5) AS g"
    )
    seen: list[str] = []
    cursor: list[str] = []
    for _ in range(5):
        sql, _ = both("token", "list", "--limit", "2", *cursor, "--output", "json")
        page = json.loads(sql.stdout)
        assert len(page["tokens"]) <= 2
        seen += [r["name"] for r in page["tokens"]]
        if page["next_cursor"] is None:
            break
        cursor = ["--cursor", page["next_cursor"]]
    assert [n for n in seen if n.startswith("t")][:5] == ["t01", "t02", "t03", "t04", "t05"]
    table, _ = both("token", "list", "--limit", "2")
    assert "2 token(s); next page: --cursor tk1." in table.stdout


def test_writes_print_the_same_over_sql_and_http(db: str, served, conn) -> None:
    """Each write made once per transport, on twin runs in the same state: the outputs are
    equal once each names its own run."""
    served()

    def twins(*args: str) -> None:
        if "RUN_NAME" in args:  # a workflow type each
            pairs = [("RUN_NAME", f"wa{uuid.uuid4().hex[:6]}", f"wb{uuid.uuid4().hex[:6]}")]
            for name in pairs[0][1:]:  # a start throttle declared, as a worker registers it
                conn.execute(
                    "INSERT INTO harvest.flow_policies (kind, name, policy, updated_at)"
                    ' VALUES (\'workflow\', %s, \'{"throttle": {"rps": 1, "burst": 1}}\', now())',
                    (name,),
                )
        elif "DL" in args:  # a dead letter each, the same in all but its ids
            (a, da), (b, db_) = park(conn, uuid.uuid4().hex[:6]), park(conn, uuid.uuid4().hex[:6])
            pairs = [("DL", str(da), str(db_))]
        else:
            a = start(conn, "onboarding", f"a{uuid.uuid4().hex[:6]}")
            b = start(conn, "onboarding", f"b{uuid.uuid4().hex[:6]}")
            pairs = [("RUN", a, b)]
        for step in steps(*args):
            sql = run(*[_sub(x, pairs, 1) for x in step], "--database-url", db)
            web = run("--base-url", BASE, *[_sub(x, pairs, 2) for x in step])
            # Twins written moments apart: the times they carry (with microseconds) differ.
            assert (_now(_back(web.stdout, pairs, 2)), _back(web.stderr, pairs, 2), web.exit_code) == (
                _now(_back(sql.stdout, pairs, 1)),
                _back(sql.stderr, pairs, 1),
                sql.exit_code,
            ), step

    def steps(*args: str) -> list[list[str]]:
        out, current = [], []
        for x in args:
            if x == ";":
                out.append(current)
                current = []
            else:
                current.append(x)
        return [*out, current]

    for o in ("table", "json"):
        twins("workflow", "signal", "RUN", "approved", "--payload-json", '{"ok": true}', "--output", o)
        twins(
            "workflow",
            "cancel",
            "RUN",
            "--reason",
            "op",
            "--output",
            o,
            ";",
            "workflow",
            "cancel",
            "RUN",
            "--output",
            o,
        )
        twins(
            "workflow",
            "pause",
            "RUN",
            "--reason",
            "hold",
            "--output",
            o,
            ";",
            "workflow",
            "pause",
            "RUN",
            "--output",
            o,
            ";",
            "workflow",
            "resume",
            "RUN",
            "--output",
            o,
        )
        twins(
            "workflow",
            "terminate",
            "RUN",
            "--reason",
            "done",
            "--output",
            o,
            ";",
            "workflow",
            "terminate",
            "RUN",
            "--output",
            o,
            ";",
            "workflow",
            "signal",
            "RUN",
            "x",
        )
        twins("workflow", "reset", "RUN", "--to-event", "1", "--reason", "r", "--dry-run", "--output", o)
        twins("dlq", "replay", "DL", "--output", o, ";", "dlq", "replay", "DL", "--output", o)
        twins("dlq", "discard", "DL", "--output", o)
        twins("throttle", "override", "nobody", "--rps", "2", "--output", o)  # none declared: an error
        twins(
            "throttle",
            "override",
            "RUN_NAME",
            "--rps",
            "2",
            "--ttl-secs",
            "60",
            "--output",
            o,
            ";",
            "throttle",
            "clear-override",
            "RUN_NAME",
            "--output",
            o,
            ";",
            "throttle",
            "clear-override",
            "RUN_NAME",
            "--output",
            o,
        )
        twins(
            "workflow",
            "legal-hold",
            "set",
            "RUN",
            "--reason",
            "case 7",
            "--output",
            o,
            ";",
            "workflow",
            "legal-hold",
            "release",
            "RUN",
            "--output",
            o,
        )


def _sub(arg: str, pairs: list[tuple[str, str, str]], side: int) -> str:
    for pair in pairs:
        if arg == pair[0]:
            return pair[side]
    return arg


def _back(text: str, pairs: list[tuple[str, str, str]], side: int) -> str:
    import re

    for pair in pairs:
        text = re.sub(rf"\b{re.escape(pair[side])}\b", pair[0], text)
    # A replay's new task id is the next of a sequence: the two replays take two of them.
    return re.sub(r'(task |"task_id": )\d+', r"\1N", text)


def test_settings_writes_match(both, db: str) -> None:
    # Each set writes updated_at (now): the rest of the answer is the same.
    for args in (["--max-age", "30 days"], ["--max-age", "off", "--worker-max-age", "off"]):
        sql = run("retention", "set", *args, "--output", "json", "--database-url", db)
        web = run("--base-url", BASE, "retention", "set", *args, "--output", "json")
        a, b = json.loads(sql.stdout), json.loads(web.stdout)
        assert a.pop("updated_at") <= b.pop("updated_at") and a == b, (a, b)
    both("retention", "run-now", "--output", "json")  # the served app runs its janitor (dev, combined)
    both("retention", "status")
    made = run("--base-url", BASE, "token", "create", "ci-bot", "--scope", "read", "--output", "json")
    assert made.exit_code == 0, made.stderr
    assert json.loads(made.stdout)["secret"]
    both("token", "create", "ci-bot", "--scope", "read")  # the same error twice: it exists
    revoked = run("--base-url", BASE, "--output", "json", "token", "revoke", "ci-bot")
    assert revoked.exit_code == 0, revoked.stderr


def test_bulk_writes_and_replays_match(served, conn) -> None:
    served()
    for i in range(4):
        park(conn, f"b{i}", activity="charge")
    # One write per transport on its own rows: each replays two of the four.
    first = run(
        "dlq",
        "bulk-replay",
        "--activity-name",
        "charge",
        "--limit",
        "2",
        "--output",
        "json",
        "--database-url",
        conn.info.dsn,
    )
    second = run(
        "--base-url",
        BASE,
        "dlq",
        "bulk-replay",
        "--activity-name",
        "charge",
        "--limit",
        "2",
        "--output",
        "json",
    )
    a, b = json.loads(first.stdout), json.loads(second.stdout)
    assert (first.exit_code, second.exit_code) == (0, 0), (first.stderr, second.stderr)
    assert (a["matched"], a["acted_on"], b["matched"], b["acted_on"]) == (4, 2, 2, 2)
    assert set(a["ids"]).isdisjoint(b["ids"])


def test_start_result_and_the_token_errors(db: str, served, tokens) -> None:
    from harvest.web.auth import TokenAuthorizer

    served(profile="production", authorizer=TokenAuthorizer(dsn=db))
    started = run("--base-url", BASE, "workflow", "start", "w", "--workflow-id", "x1")
    assert started.exit_code == 1 and "--token or HARVEST_TOKEN" in started.stderr, started.stderr
    assert tokens["operate"] not in started.stderr

    started = run(
        "--base-url",
        BASE,
        "workflow",
        "start",
        "w",
        "--workflow-id",
        "x1",
        "--output",
        "json",
        env={"HARVEST_TOKEN": tokens["operate"]},
    )
    assert started.exit_code == 0, started.stderr
    execution_id = json.loads(started.stdout)["execution_id"]
    sql = run("workflow", "start", "w", "--workflow-id", "x1", "--output", "json", "--database-url", db)
    assert json.loads(sql.stdout)["execution_id"] == execution_id  # attached to the same run

    # A read token cannot terminate: 403 with the scope named, exit 1, the token never printed.
    denied = run("--base-url", BASE, "--token", tokens["read"], "workflow", "terminate", execution_id)
    assert denied.exit_code == 1 and "admin scope" in denied.stderr, denied.stderr
    assert tokens["read"] not in denied.stderr + denied.stdout
    bad = run("--base-url", BASE, "--token", "hv_nonsense", "workflow", "get", execution_id)
    assert bad.exit_code == 1 and "HARVEST_TOKEN" in bad.stderr and "hv_nonsense" not in bad.stderr

    # result: exit 3 while it runs (as over SQL), 0 with its output once it completed
    admin = {"HARVEST_TOKEN": tokens["admin"]}
    waited = run("--base-url", BASE, "workflow", "result", execution_id, "--timeout", "0.2", env=admin)
    over_sql = run("workflow", "result", execution_id, "--timeout", "0.2", "--database-url", db)
    assert (waited.exit_code, waited.stderr) == (over_sql.exit_code, over_sql.stderr) == (3, over_sql.stderr)
    run("--base-url", BASE, "workflow", "terminate", execution_id, "--reason", "stop", env=admin)
    ended = run("--base-url", BASE, "workflow", "result", execution_id, env=admin)
    over_sql = run("workflow", "result", execution_id, "--database-url", db)
    assert (ended.exit_code, ended.stdout, ended.stderr) == (1, over_sql.stdout, over_sql.stderr)


def test_a_deferred_start_says_so_and_where_to_follow_it_on_both_transports(db: str, both, conn) -> None:
    """A start a throttle deferred printed `execution_id: null` and nothing else (over HTTP, the
    202's Location unread): both transports print `deferred: true` and the lookup that finds
    its run once released, the one the 202's Location names."""
    conn.execute(
        "INSERT INTO harvest.flow_policies (kind, name, policy, updated_at)"
        " VALUES ('workflow', 'paced', '{\"throttle\": {\"rps\": 0.01, \"burst\": 1}}', now())"
    )
    assert run("workflow", "start", "paced", "--input-json", "1", "--database-url", db).exit_code == 0
    for output in ("table", "json"):
        sql, _ = both(
            "workflow", "start", "paced", "--input-json", "2", "--workflow-id", "later", "-o", output
        )
        assert sql.exit_code == 0 and json.loads(sql.stdout) == {
            "execution_id": None,
            "workflow_id": "later",
            "started_fresh": False,
            "deferred": True,
        }, sql.stdout
        assert "harvest workflow current later --workflow paced finds its run" in sql.stderr, sql.stderr
    odd, _ = both("workflow", "start", "paced", "--workflow-id", "a b;c")
    assert "harvest workflow current 'a b;c' --workflow paced" in odd.stderr, odd.stderr  # (quoted)
    pending, _ = both("workflow", "current", "later", "--workflow", "paced")
    assert pending.exit_code == 1 and "a deferred start has no run until" in pending.stderr, pending.stderr


def test_a_result_timeout_says_why_the_run_is_stuck_over_http_as_over_sql(db: str, served, conn) -> None:
    """Over HTTP a result wait that ran out printed a bare "is still running after 0.2s", while
    over SQL it quotes why the run cannot go on (here a dead-lettered activity, with the
    `harvest dlq replay <id>` to run): the two transports print the same."""
    served()
    execution_id, dead_letter_id = park(conn, "stuck-result")
    args = ("workflow", "result", execution_id, "--timeout", "0.2")
    over_sql = run(*args, "--database-url", db)
    over_http = run("--base-url", BASE, *args)
    assert over_sql.exit_code == 3, over_sql.stderr
    assert f"harvest dlq replay {dead_letter_id}" in over_sql.stderr, over_sql.stderr
    assert (over_http.exit_code, over_http.stderr) == (over_sql.exit_code, over_sql.stderr)


def test_a_result_timeout_after_continue_as_new_says_why_the_last_run_is_stuck(db: str, served, conn) -> None:
    """The run asked for continued as new and its successor is the one stuck: over HTTP the
    timeout read the stack of the first run (ended, waiting on nothing) and said nothing, while
    over SQL it quotes the latest run's dead-lettered activity."""
    served()
    execution_id, dead_letter_id = park(conn, "rotated-result", continued_as_new=True)
    args = ("workflow", "result", execution_id, "--timeout", "0.2")
    over_sql = run(*args, "--database-url", db)
    over_http = run("--base-url", BASE, *args)
    assert over_sql.exit_code == 3, over_sql.stderr
    assert f"harvest dlq replay {dead_letter_id}" in over_sql.stderr, over_sql.stderr
    assert (over_http.exit_code, over_http.stderr) == (over_sql.exit_code, over_sql.stderr)


def test_health_exit_codes(served) -> None:
    served()
    ok = run("--base-url", BASE, "health", "--output", "json")
    assert ok.exit_code == 0, ok.stderr
    assert json.loads(ok.stdout)["status"] == "ready"
    assert run("--base-url", BASE, "health", "--probe", "live").exit_code == 0


def test_health_not_ready_exits_1(served, fresh_db: str, monkeypatch) -> None:
    # A database without this Harvest's schema: /health/ready answers 503.
    app = management_app(dsn=fresh_db, config=load_config(env={}), profile="dev")
    with TestClient(app, base_url="http://testserver") as client:
        monkeypatch.setattr(cli_http, "TRANSPORT", client._transport)
        answer = run("--base-url", BASE, "health")
    assert answer.exit_code == 1, answer.stdout
    assert "not_ready" in answer.stdout


def test_a_request_that_gets_no_answer_times_out() -> None:
    # A socket that accepts connections (the backlog) and never answers.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        began = time.monotonic()
        answer = run("--base-url", url, "--http-timeout-secs", "1", "workflow", "list")
        took = time.monotonic() - began
        assert answer.exit_code == 1 and "request timed out" in answer.stderr, answer.stderr
        assert took < 5
        via_env = run("dlq", "list", env={"HARVEST_URL": url, "HARVEST_HTTP_TIMEOUT_SECS": "1"})
        assert via_env.exit_code == 1 and "request timed out" in via_env.stderr
        # events tail: the timeout bounds the answer's headers
        tail = run("--base-url", url, "--http-timeout-secs", "1", "events", "tail")
        assert tail.exit_code == 1 and "request timed out: GET /stream" in tail.stderr, tail.stderr
    bad = run("dlq", "list", env={"HARVEST_URL": url, "HARVEST_HTTP_TIMEOUT_SECS": "0"})
    assert bad.exit_code == 2 and "1..3600" in bad.stderr


def test_an_update_waited_to_completion_gets_more_time_never_less(monkeypatch) -> None:
    """The spec's longer budget of `workflow update --wait completed`: its --timeout-secs plus
    10 s, which is more time than the request timeout, never less (an update's own short wait
    gave it 11 s under --http-timeout-secs 60). An update waited only to acceptance keeps the
    request timeout. A bulk dead-letter preview (its --dry-run, and the first request of a bulk
    write) reads as many rows as its batches write, and gets their budget (BULK_WRITE_SECS):
    it had the request timeout, so a large preview timed out where the batches would not. The
    margins are shrunk here; the error line names the budget each request had."""
    monkeypatch.setattr(cli_http, "UPDATE_MARGIN_SECS", 0.5)
    monkeypatch.setattr(cli_http, "BULK_WRITE_SECS", 1.5)
    run_id = "00000000-0000-4000-8000-000000000001"
    with socket.socket() as listener:  # accepts (the backlog) and never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"

        def budget(timeout: str, *args: str) -> str:
            answer = run("--base-url", url, "--http-timeout-secs", timeout, *args)
            assert answer.exit_code == 1 and "request timed out" in answer.stderr, answer.stderr
            return answer.stderr.split("no answer within ")[1].split("s ")[0]

        assert budget("1", "dlq", "bulk-replay", "--activity-name", "send_email", "--dry-run") == "1.5"
        assert budget("1", "dlq", "bulk-discard", "--activity-name", "send_email") == "1.5"  # its preview
        # (the budget is at least the request timeout)
        assert budget("2", "dlq", "bulk-replay", "--activity-name", "send_email", "--dry-run") == "2"
        assert budget("1", "workflow", "update", run_id, "decide", "--timeout-secs", "1") == "1.5"
        # its own wait plus the margin (1.5 s) is less than the request timeout (2 s): the latter
        assert budget("2", "workflow", "update", run_id, "decide", "--timeout-secs", "1") == "2"
        accepted = ("workflow", "update", run_id, "decide", "--timeout-secs", "5", "--wait", "accepted")
        assert budget("1", *accepted) == "1"


def test_a_long_sweep_or_release_that_outlasts_the_clis_wait_says_the_server_goes_on(monkeypatch) -> None:
    """retention run-now and shard release-owed-ends over HTTP run to their end in the server
    (each batch commits as it is made), but the CLI waits its budget only (BULK_WRITE_SECS or
    --http-timeout-secs, 1 s here): it said a bare "request timed out", which reads as nothing
    done. It now says the server goes on and how to see the outcome; --help says the wait."""
    monkeypatch.setattr(cli_http, "BULK_WRITE_SECS", 0.5)
    with socket.socket() as listener:  # accepts (the backlog) and never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        sweep = run("--base-url", url, "--http-timeout-secs", "1", "retention", "run-now")
        release = run("--base-url", url, "--http-timeout-secs", "1", "shard", "release-owed-ends", "3")
    assert sweep.exit_code == 1, sweep.stderr
    assert "no answer within 1s" in sweep.stderr and "the server goes on" in sweep.stderr, sweep.stderr
    assert "harvest retention status" in sweep.stderr, sweep.stderr
    assert release.exit_code == 1, release.stderr
    assert "the server goes on" in release.stderr, release.stderr
    assert "harvest shard release-owed-ends 3 --dry-run" in release.stderr, release.stderr
    for args in (("retention", "run-now"), ("shard", "release-owed-ends")):
        helped = " ".join(run(*args, "--help").stdout.split())
        assert "waits at least 300 s" in helped, helped


def test_an_unreachable_base_url_is_named_without_its_password() -> None:
    """A base URL may carry HTTP credentials (``https://user:password@proxy/...``, which httpx
    sends as basic auth); the error line that names the URL it could not reach masks the
    password whatever it holds (a space, a quote), as a DSN's is masked."""
    for password in ("Two Words77", "Quote'77x"):
        url = f"http://ops:{password}@127.0.0.1:1/api/harvest"
        for answer in (
            run("--base-url", url, "workflow", "list"),
            run("dlq", "list", env={"HARVEST_URL": url}),
        ):
            assert answer.exit_code == 1 and "could not reach" in answer.stderr, answer.stderr
            assert "77" not in answer.stderr, answer.stderr


def test_a_base_url_that_is_no_url_is_one_line() -> None:
    """httpx refuses some URLs before any request (a port out of range, an unclosed IPv6
    bracket): that was a traceback; it is now one line naming the option, exit 2, and a
    password in it masked."""
    for url in ("http://ops:Secret77@[::1/api/harvest", "http://127.0.0.1:99x/api/harvest"):
        by_env = run("dlq", "list", env={"HARVEST_URL": url})
        for answer in (run("--base-url", url, "workflow", "list"), by_env):
            assert answer.exit_code == 2, answer.stderr
            assert "is not a URL" in answer.stderr and "--base-url / HARVEST_URL" in answer.stderr
            assert "Traceback" not in answer.stderr and "77" not in answer.stderr, answer.stderr


def test_what_json_or_a_path_cannot_carry_is_refused_before_the_request() -> None:
    """Over HTTP a NaN (`--rps nan`, `--timeout nan`) was httpx's ValueError traceback (JSON has
    no NaN), and an empty name or id (`workflow get ''`) asked the collection's route
    (`/workflows/`), whose other answer was a traceback. Both are one line, exit 2, before any
    request (nothing listens at this URL)."""
    url = "http://127.0.0.1:1/api/harvest"
    nan = run("--base-url", url, "throttle", "override", "imports", "--rps", "nan")
    assert nan.exit_code == 2 and "rps: nan is not a finite number" in nan.stderr, nan.stderr
    zero = "00000000-0000-0000-0000-000000000000"
    query = run("--base-url", url, "workflow", "query", zero, "q", "--timeout", "nan")
    assert query.exit_code == 2 and "is not a finite number" in query.stderr, query.stderr
    for args in (
        ["workflow", "get", ""],
        ["schedule", "get", ""],
        ["token", "revoke", ""],
        ["worker", "get", ""],
    ):
        empty = run("--base-url", url, *args)
        assert empty.exit_code == 2 and "an empty name or id names nothing" in empty.stderr, (
            args,
            empty.stderr,
        )


def test_a_drain_over_http_that_missed_shards_names_them_and_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """Over SQL with [shards], a drain that could not reach a shard names it and exits 1; over
    HTTP the server's answer said so (`unavailable_shards`) and the CLI printed the row and
    exited 0, so a script took a partial drain for a whole one."""
    import httpx

    drained = {"worker_id": "w1", "outcome": "draining", "shard_id": 0}

    def server(request: httpx.Request) -> httpx.Response:
        assert request.url.path.endswith("/workers/w1/drain")
        return httpx.Response(200, json={**drained, "rows": [drained], "unavailable_shards": [2]})

    monkeypatch.setattr(cli_http, "TRANSPORT", httpx.MockTransport(server))
    partial = run("--base-url", BASE, "worker", "drain", "w1")
    assert partial.exit_code == 1, partial.output
    assert "shard(s) 2 could not be reached and were not drained" in partial.stderr
    assert "draining" in partial.stdout and "unavailable_shards" not in partial.stdout


@pytest.mark.parametrize(
    ("answer", "exit_code"),
    [
        # a sharded server with shard 1 down: unknown, whatever the answering shard's workers
        ({"unpolled_declared_queues": None, "status": "partial", "unavailable_shards": [1]}, 2),
        # beta polled on shard 0 only: a run on shard 1 waits
        ({"unpolled_declared_queues": ["beta"], "status": "complete", "unavailable_shards": []}, 2),
        # an older server omits the list: the gate fails closed
        ({"status": "complete", "unavailable_shards": []}, 2),
        # a server that ignored queue= answered for its own App's queues, not --app's
        (
            {
                "unpolled_declared_queues": [],
                "status": "complete",
                "unavailable_shards": [],
                "declared_source": "app",
            },
            2,
        ),
        ({"unpolled_declared_queues": [], "status": "complete", "unavailable_shards": []}, 0),
    ],
    ids=["shard-down", "one-shard-only", "older-server", "other-queues", "covered"],
)
def test_queue_coverage_over_http_gates_on_the_servers_list(
    monkeypatch: pytest.MonkeyPatch, answer: dict, exit_code: int
) -> None:
    """Over HTTP `queue coverage` rebuilt the list from GET /workers with each row's shard
    dropped and the missed shards ignored: with shard 1 down, or beta polled on shard 0 only, a
    sharded server's fleet passed `--strict`. It now gates on the server's own list, the
    declared queues of --app sent along."""
    import httpx

    asked: list[httpx.URL] = []
    worker = {"worker_id": "w0", "queues": ["alpha", "beta"], "shard_id": 0}

    def server(request: httpx.Request) -> httpx.Response:
        asked.append(request.url)
        if request.url.path.endswith("/workers"):  # every queue has a live worker on shard 0
            return httpx.Response(
                200,
                json={"workers": [worker], "sharded": True, "status": "partial", "unavailable_shards": [1]},
            )
        assert request.url.path.endswith("/admin/queue-coverage"), request.url
        return httpx.Response(
            200,
            json={
                "declared_queues": ["alpha", "beta"],
                "live_workers": {"alpha": 1, "beta": 1},
                "unpolled_by_shard": {"0": []},
                "sharded": True,
                "declared_source": "request",
                **answer,
            },
        )

    monkeypatch.setattr(cli_http, "TRANSPORT", httpx.MockTransport(server))
    result = run(
        "--base-url", BASE, "queue", "coverage", "--app", "test_config:app", "--strict", "-o", "json"
    )
    assert result.exit_code == exit_code, result.output
    assert [u.params.get_list("queue") for u in asked] == [["alpha", "beta"]]


def test_queue_coverage_with_no_app_is_unknown_over_sql_and_http(db: str, both: Callable[..., tuple]) -> None:
    """A server with no App (and a CLI with no --app) answered with the queues the fleet
    registered as the declared ones, so --strict passed while a queue no worker ever registered
    went unpolled. Over SQL and over HTTP the list is null and the gate fails closed, alike."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT harvest.register_worker('w-a', ARRAY['alpha'], 'h', 1, 5)")
    sql, _ = both("queue", "coverage", "--strict", "-o", "json")
    assert sql.exit_code == 2, sql.output
    data = json.loads(sql.stdout)
    assert data["unpolled_declared_queues"] is None and data["declared_source"] == "none"
    assert data["registered_queues"] == ["alpha"] and data["live_workers"] == {"alpha": 1}
    text, _ = both("queue", "coverage")
    assert text.exit_code == 0 and "coverage unknown: no App declares the queues" in text.stdout


def test_retention_run_now_over_http_on_a_web_replica_is_refused_naming_run_on_all(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's 503 (its janitor runs where the scheduler runs) reaches the operator as one
    line naming the fix, and a failing exit, never a sweep that did not happen."""
    api = management_app(dsn=db, config=load_config(env={"HARVEST_ROLE": "web"}), profile="dev")
    with TestClient(api, base_url=BASE) as client:
        monkeypatch.setattr(cli_http, "TRANSPORT", client._transport)
        refused = run("--base-url", BASE, "retention", "run-now")
    assert refused.exit_code == 1, refused.output
    assert refused.stderr.startswith("error: retention does not run in this process")
    assert 'set run_on = "all"' in refused.stderr and refused.stdout == ""


def test_transport_choice(db: str) -> None:
    both_given = run("--base-url", BASE, "workflow", "list", "--database-url", db)
    assert both_given.exit_code == 2 and "not both" in both_given.stderr
    no_route = run("--base-url", BASE, "migrate", "status")
    assert no_route.exit_code == 1 and "needs a database DSN" in no_route.stderr
    # HARVEST_URL beside a DSN-only command: the DSN is used, the variable does not stop it.
    env = {
        "HARVEST_URL": "http://127.0.0.1:9/nothing",
        "HARVEST_TOKEN": "secret-token",
        "HARVEST_HTTP_TIMEOUT_SECS": "5",
        "HARVEST_DATABASE_URL": db,
    }
    status = run("migrate", "status", env=env)
    assert status.exit_code == 0, status.stderr
    # An explicit --database-url wins over HARVEST_URL.
    listed = run("workflow", "list", "--database-url", db, env=env)
    assert listed.exit_code == 0, listed.stderr
    helped = run("worker", "--help", env=env)
    assert helped.exit_code == 0 and "Run a worker" in helped.stdout


def test_harvest_url_does_not_stop_a_worker_boot(db: str) -> None:
    """The worker's boot reads every HARVEST_* variable and stops on an unknown one: the CLI's
    three are known names."""
    env = {"HARVEST_URL": BASE, "HARVEST_TOKEN": "t", "HARVEST_HTTP_TIMEOUT_SECS": "10"}
    load_config(env=env)  # raises ConfigError on an unknown HARVEST_* name
    with pytest.raises(Exception, match="unknown setting HARVEST_URLS"):
        load_config(env={"HARVEST_URLS": BASE})


@pytest.fixture
def live_url(db: str) -> Iterator[str]:
    """The management API on a real uvicorn on loopback (a stream needs one), in a thread."""
    import threading

    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    app = management_app(dsn=db, config=load_config(env={}), profile="dev")
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(5)
    sock.close()


def test_events_tail_prints_the_same_over_sql_and_http(db: str, conn, live_url: str) -> None:
    first = start(conn, "onboarding", "e1")
    start(conn, "billing", "e2")
    conn.execute("SELECT harvest.signal_workflow(%s, 'go', '{}'::jsonb)", (first,))
    for o in ("table", "json"):
        args = ("events", "tail", "--after", "0", "--limit", "2", "--workflow", first, "--output", o)
        sql = run(*args, "--database-url", db)
        web = run("--base-url", live_url, *args)
        assert sql.exit_code == 0 and len(sql.stdout.splitlines()) == 2, sql.stderr
        assert (web.stdout, web.stderr, web.exit_code) == (sql.stdout, sql.stderr, sql.exit_code)


def test_events_tail_names_its_after_option_when_the_position_is_not_one(db: str, live_url: str) -> None:
    """`events tail --after abc` answered "Last-Event-ID 'abc' is not an event id: pass the id:
    of the last event seen", the HTTP stream's header and field, which the tail's user never
    wrote: it names --after and the column the position is read from, over SQL and over HTTP."""
    args = ("events", "tail", "--after", "abc", "--limit", "1")
    for result in (run(*args, "--database-url", db), run("--base-url", live_url, *args)):
        assert result.exit_code == 2, result.stderr
        assert "--after 'abc' is not a position" in result.stderr, result.stderr
        assert "Last-Event-ID" not in result.stderr, result.stderr


def test_events_tail_prints_times_in_utc_whatever_the_session_zone(db: str, conn, live_url: str) -> None:
    """Over SQL in a session at +14:00 (PGTZ) `events tail` printed its times in that zone (with
    a space in its JSON) and over HTTP as /stream sent them: one event, two texts. Both print
    the API's text of the time, in UTC."""
    run_id = start(conn, "onboarding", "zoned-tail")
    kiritimati = {"PGTZ": "Pacific/Kiritimati"}
    for o in ("table", "json"):
        args = ("events", "tail", "--after", "0", "--limit", "1", "--workflow", run_id, "--output", o)
        sql = run(*args, "--database-url", db, env=kiritimati)
        web = run("--base-url", live_url, *args)
        assert sql.exit_code == web.exit_code == 0, (sql.stderr, web.stderr)
        assert sql.stdout == web.stdout
    created = json.loads(sql.stdout)["created_at"]
    import httpx

    api = httpx.get(f"{live_url}/workflows/{run_id}", timeout=10).json()
    assert created == api["history"][0]["created_at"] and created.endswith("+00:00"), (created, api)


def test_migrate_status_prints_applied_at_in_utc(db: str) -> None:
    status = run(
        "--output", "json", "migrate", "status", "--database-url", db, env={"PGTZ": "Pacific/Kiritimati"}
    )
    assert status.exit_code == 0, status.stderr
    applied = [m["applied_at"] for m in json.loads(status.stdout)["migrations"] if m["applied_at"]]
    assert applied and all("T" in a and a.endswith("+00:00") for a in applied), applied[:3]


def _now(text: str) -> str:
    """``text`` with the times of today masked: twins written moments apart differ in them."""
    import re
    from datetime import UTC, datetime, timedelta

    days = "|".join((datetime.now(UTC) + timedelta(days=d)).strftime("%Y-%m-%d") for d in (-1, 0, 1))
    return re.sub(rf"(?:{days})[T ]\d\d:\d\d:\d\d(?:\.\d+)?(?:\+00:00|Z)", "NOW", text)


def test_schedule_commands_match(db: str, served) -> None:
    """Twin schedules made and changed once per transport: the outputs are equal once each
    names its own schedule."""
    served()
    pairs = [("S", "sched_sql", "sched_web")]
    steps = [
        [
            "schedule",
            "create-workflow",
            "--name",
            "S",
            "--workflow",
            "nightly",
            "--cron",
            "0 3 * * *",
            "--tz",
            "Europe/Paris",
            "--input-json",
            '{"a": 1}',
            "--max-active-runs",
            "2",
            "--jitter",
            "30s",
            "--catchup-window",
            "6h",
            "--paused",
        ],
        ["schedule", "get", "S"],
        ["schedule", "update", "S", "--every", "15m", "--overlap", "buffer_one"],
        ["schedule", "update", "S", "--clear", "input", "--clear", "max-active-runs", "--clear", "queue"],
        ["schedule", "get", "S"],
        ["schedule", "resume", "S"],
        ["schedule", "pause", "S", "--note", "maintenance"],
        ["schedule", "backfill", "S", "--from", "2030-01-01", "--to", "2030-01-01T01:00:00+00:00"],
        ["schedule", "get", "S", "--limit", "3"],
        ["LIST"],
        ["schedule", "delete", "S"],
        ["schedule", "delete", "S"],
        ["schedule", "get", "S"],
    ]
    for step in steps:
        for o in ("table", "json"):
            if step == ["LIST"]:  # both schedules, by either transport
                lists = [
                    run("schedule", "list", "-o", o, "--database-url", db),
                    run("--base-url", BASE, "schedule", "list", "-o", o),
                ]
                assert lists[0].stdout == lists[1].stdout and "sched_web" in lists[0].stdout
                continue
            if (
                step[1] in ("create-workflow", "delete", "update", "backfill", "pause", "resume")
                and o == "json"
            ):
                continue  # a write is made once per transport
            sql = run(*[_sub(x, pairs, 1) for x in step], "--output", o, "--database-url", db)
            web = run("--base-url", BASE, *[_sub(x, pairs, 2) for x in step], "--output", o)
            # The twins were made moments apart: their own times (with microseconds) differ.
            assert (_now(_back(web.stdout, pairs, 2)), _back(web.stderr, pairs, 2), web.exit_code) == (
                _now(_back(sql.stdout, pairs, 1)),
                _back(sql.stderr, pairs, 1),
                sql.exit_code,
            ), step


# -- with a worker: query, update, result --------------------------------------------------------

from harvest import App, query, update, workflow  # noqa: E402


@workflow
async def tally(ctx, owner: str) -> dict:
    ctx.state.update(owner=owner, total=0)
    await ctx.wait_for_signal("close")
    await ctx.drain_admitted_updates()
    return {"owner": owner, "total": ctx.state["total"]}


@query(workflow="tally")
def tally_total(ctx) -> int:
    return ctx.state["total"]


@update(workflow="tally")
def tally_add(ctx, amount: int) -> int:
    ctx.state["total"] += amount
    return ctx.state["total"]


TALLY = App(workflows=[tally], queries=[tally_total], updates=[tally_add])


def test_query_update_and_result_match(db: str, served, start_worker) -> None:
    served(app=TALLY)
    start_worker(TALLY)
    started = run(
        "--base-url", BASE, "workflow", "start", "tally", "--input-json", '"ann"', "--output", "json"
    )
    assert started.exit_code == 0, started.stderr
    run_id = json.loads(started.stdout)["execution_id"]

    def same(*args: str) -> Result:
        sql = run(*args, "--database-url", db)
        web = run("--base-url", BASE, *args)
        assert (web.stdout, web.stderr, web.exit_code) == (sql.stdout, sql.stderr, sql.exit_code), args
        return sql

    deadline = time.monotonic() + 10
    while run("workflow", "query", run_id, "tally_total", "--database-url", db).exit_code != 0:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    for o in ("table", "json"):
        same("workflow", "query", run_id, "tally_total", "--output", o)
        same("workflow", "query", run_id, "no_such_query", "--output", o)
        # The same update id is applied once: the second transport reads the first's outcome.
        same("workflow", "update", run_id, "tally_add", "--input-json", "5", "--update-id", f"u-{o}", "-o", o)
    accepted = run(
        "--base-url",
        BASE,
        "workflow",
        "update",
        run_id,
        "tally_add",
        "--input-json",
        "1",
        "--wait",
        "accepted",
        "--update-id",
        "acc",
        "--output",
        "json",
    )
    assert accepted.exit_code == 0 and json.loads(accepted.stdout)["status"] == "accepted", accepted.stderr
    same(
        "workflow",
        "update",
        run_id,
        "tally_add",
        "--input-json",
        "1",
        "--wait",
        "accepted",
        "--update-id",
        "acc",
    )
    assert run("--base-url", BASE, "workflow", "signal", run_id, "close").exit_code == 0
    result = same("workflow", "result", run_id, "--timeout", "10")
    assert result.exit_code == 0 and json.loads(result.stdout) == {"owner": "ann", "total": 11}


# -- DAGs ---------------------------------------------------------------------------------------

from harvest import activity  # noqa: E402
from harvest.db.sqlapi import SqlApi  # noqa: E402
from harvest.declare.dags import Dag  # noqa: E402


@activity
async def dag_step(ctx) -> None:
    return None


def _dag(name: str) -> Dag:
    dag = Dag(name, max_active_runs=1)
    dag.task("only", dag_step)
    return dag


def test_dag_commands_match(db: str, served, conn) -> None:
    """Twin DAGs triggered, read, retried and paused once per transport: the same outputs once
    each names its own DAG and run."""
    served()
    SqlApi(conn).register_dags([_dag("dag_sql").catalog(), _dag("dag_web").catalog()])
    ids: dict[str, str] = {}
    for side, name in ((1, "dag_sql"), (2, "dag_web")):
        args = ["dag", "trigger", name, "--conf-json", '{"date": "2026-04-21"}', "--workflow-id", f"w-{name}"]
        answer = (
            run(*args, "-o", "json", "--database-url", db)
            if side == 1
            else run("--base-url", BASE, *args, "-o", "json")
        )
        assert answer.exit_code == 0, answer.stderr
        ids[name] = json.loads(answer.stdout)["execution_id"]
    pairs = [("D", "dag_sql", "dag_web"), ("R", ids["dag_sql"], ids["dag_web"])]
    steps = [
        ["dag", "trigger", "D", "--workflow-id", "w-D"],  # the same workflow id: that run (200)
        ["dag", "trigger", "D"],  # at max_active_runs: refused
        ["dag", "get", "R"],
        ["dag", "runs", "D"],
        ["dag", "retry", "R"],  # still running: not retryable
        ["dag", "pause", "D"],
        ["dag", "pause", "D"],
        ["dag", "trigger", "D"],  # paused: refused
        ["dag", "unpause", "D"],
    ]
    for step in steps:
        for o in ("table", "json"):
            sql = run(*[_sub(x, pairs, 1) for x in step], "--output", o, "--database-url", db)
            web = run("--base-url", BASE, *[_sub(x, pairs, 2) for x in step], "--output", o)
            assert (_now(_back(web.stdout, pairs, 2)), _back(web.stderr, pairs, 2), web.exit_code) == (
                _now(_back(sql.stdout, pairs, 1)),
                _back(sql.stderr, pairs, 1),
                sql.exit_code,
            ), step


def test_every_command_that_prints_takes_the_global_output() -> None:
    """`harvest --output json CMD` reaches every command that prints a result (the rest run a
    process, print a fixed format or write a file)."""
    import click

    exempt = {
        "dev",
        "serve",
        "worker run",
        "metrics",
        "history export",
        "history export-batch",
        "replay",
        "workflow result",
    }
    missing = []

    def walk(command: click.Command, path: list[str]) -> None:
        if isinstance(command, click.Group):
            ctx = click.Context(command)
            for name in command.list_commands(ctx):  # (the root imports its commands when asked)
                walk(command.get_command(ctx, name), [*path, name])
            return
        options = [p for p in command.params if p.name == "output"]
        name = " ".join(path)
        if name not in exempt and not (options and options[0].callback is not None):
            missing.append(name)

    walk(main, [])
    assert missing == []


def test_migrate_status_and_run_follow_the_global_output(db: str) -> None:
    status = run("--output", "json", "migrate", "status", "--database-url", db)
    assert status.exit_code == 0 and "migrations" in json.loads(status.stdout)
    ran = run("--output", "json", "migrate", "run", "--dry-run", "--database-url", db)
    assert ran.exit_code == 0 and json.loads(ran.stdout)["applied"] == [], ran.stdout


def test_events_tail_fails_on_a_silent_stream_after_the_idle_limit(monkeypatch) -> None:
    """Headers within --http-timeout-secs, then the idle limit (60 s in use; 2 s here) applies."""
    import threading

    monkeypatch.setattr(cli_http, "STREAM_IDLE_SECS", 2.0)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    held: list[socket.socket] = []

    def answer_headers_only() -> None:
        peer, _ = listener.accept()
        peer.recv(65536)
        peer.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        held.append(peer)  # then nothing, not even a keepalive

    thread = threading.Thread(target=answer_headers_only, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    began = time.monotonic()
    tail = run("--base-url", url, "--http-timeout-secs", "1", "events", "tail")
    took = time.monotonic() - began
    for peer in held:
        peer.close()
    listener.close()
    assert tail.exit_code == 1 and "the event stream sent nothing for 2s" in tail.stderr, tail.stderr
    assert 1.8 < took < 5


def test_preflight_over_http_runs_the_servers_checks(db: str, served) -> None:
    """The same checks as over SQL, run by the server, plus admin_auth_boundary (a dev API serves
    everyone as admin: warn, exit 2); the table is the command's own."""
    served()
    sql = run("preflight", "-o", "json", "--database-url", db)
    web = run("--base-url", BASE, "preflight", "-o", "json")
    local = {c["name"]: c["status"] for c in json.loads(sql.stdout)["checks"]}
    remote = {c["name"]: c["status"] for c in json.loads(web.stdout)["checks"]}
    assert remote.pop("admin_auth_boundary") == "warn"
    assert remote == local
    assert web.exit_code == 2 and json.loads(web.stdout)["overall_status"] == "warn"
    table = run("--base-url", BASE, "preflight")
    assert table.stdout.startswith("overall_status: warn") and "admin_auth_boundary" in table.stdout
    refused = run("--base-url", BASE, "preflight", "--app", "x:y")
    assert refused.exit_code == 2 and "--app is not sent over HTTP" in refused.stderr


def test_history_export_writes_the_same_bytes_over_sql_and_http(db: str, served, conn, tmp_path) -> None:
    """`history export` over HTTP (GET /workflows/{id}/history/export): the same document, to
    stdout or a file, redacted or full with an offloaded payload resolved; the same error."""
    from harvest import Client
    from harvest.core.codecs import Payloads

    served()
    big = "x" * 300
    with Client(db, codecs=Payloads(offload_bytes=64)) as client:
        eid = client.start_workflow("onboarding", {"blob": big}, workflow_id="exp-1").execution_id
    conn.execute("SELECT harvest.signal_workflow(%s, 'go', '{\"n\": 1}'::jsonb)", (eid,))
    stored = conn.execute("SELECT event_data::text FROM harvest.events WHERE event_id = 1").fetchone()
    assert "_harvest_ref" in stored[0] and big not in stored[0]  # the input was offloaded
    for policy in (["--payload-policy", "full"], ["--full"], []):
        sql = run("history", "export", eid, *policy, "--database-url", db)
        web = run("--base-url", BASE, "history", "export", eid, *policy)
        assert sql.exit_code == 0, sql.stderr
        assert (web.stdout, web.stderr, web.exit_code) == (sql.stdout, sql.stderr, sql.exit_code), policy
        doc = json.loads(sql.stdout)
        assert doc["redacted"] is (not policy) and len(doc["events"]) == 2
        assert ("_harvest_ref" in sql.stdout, big in sql.stdout) == (False, bool(policy))
    files = [tmp_path / "sql.json", tmp_path / "web.json"]
    sql = run("history", "export", eid, "--file", str(files[0]), "--database-url", db)
    web = run("--base-url", BASE, "history", "export", eid, "--file", str(files[1]))
    assert (sql.exit_code, web.exit_code) == (0, 0) and files[0].read_text() == files[1].read_text()
    assert web.stderr == sql.stderr.replace("sql.json", "web.json")
    missing = str(uuid.uuid4())
    sql = run("history", "export", missing, "--file", str(tmp_path / "m.json"), "--database-url", db)
    web = run("--base-url", BASE, "history", "export", missing, "--file", str(tmp_path / "m.json"))
    assert (web.stderr, web.exit_code) == (sql.stderr, sql.exit_code) and sql.exit_code != 0
    assert not (tmp_path / "m.json").exists()


HANDED: list[str] = []


@activity(start_to_close="60s")
async def elsewhere(ctx, tag: str) -> str:
    HANDED.append(ctx.task_token)
    raise ctx.complete_async()


@workflow
async def external(ctx, tag: str) -> str:
    return await ctx.execute_activity(elsewhere, tag)


def test_activity_commands_by_a_real_task_token_match(db: str, served, start_worker, tmp_path) -> None:
    """`activity heartbeat|complete|fail` on twin tokens (activities that raised
    ctx.complete_async()), one over each transport: the same output, the same error."""
    from harvest.core.task_token import TaskToken

    HANDED.clear()
    served()
    start_worker(App(workflows=[external], activities=[elsewhere]))
    runs = [
        run("workflow", "start", "external", "--input-json", f'"t{i}"', "--database-url", db)
        for i in range(4)
    ]
    assert all(r.exit_code == 0 for r in runs), [r.stderr for r in runs]
    deadline = time.monotonic() + 30
    while len(HANDED) < 4 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(HANDED) == 4, "the activities' task tokens"

    def same(args: list[str], pair: tuple[str, str]) -> Result:
        sql = run(*[pair[0] if a == "TOKEN" else a for a in args], "--database-url", db)
        web = run("--base-url", BASE, *[pair[1] if a == "TOKEN" else a for a in args])
        ids = [str(TaskToken.parse(t).execution_id) for t in pair]

        def back(text: str) -> str:  # the twin's token and run named as this one's
            return text.replace(pair[1], pair[0]).replace(ids[1], ids[0])

        assert (back(web.stdout), back(web.stderr), web.exit_code) == (
            sql.stdout,
            sql.stderr,
            sql.exit_code,
        ), args
        return sql

    done, failing = (HANDED[0], HANDED[1]), (HANDED[2], HANDED[3])
    assert same(["activity", "heartbeat", "TOKEN", "--details-json", '{"pct": 50}'], done).stdout == "ok\n"
    # The spec: every --*-json has its --*-file PATH (- for stdin); heartbeat details had none.
    details = tmp_path / "details.json"
    details.write_text('{"pct": 75}')
    assert same(["activity", "heartbeat", "TOKEN", "--details-file", str(details)], done).stdout == "ok\n"
    beat = same(["activity", "heartbeat", "TOKEN", "--output", "json"], done)
    assert json.loads(beat.stdout)["cancel_requested"] is False
    complete = ["activity", "complete", "TOKEN", "--result-json", '"from outside"']
    assert same(complete, done).stdout == "completed\n"
    assert json.loads(same([*complete, "--output", "json"], done).stdout)["outcome"] == "already_completed"
    stale = same(["activity", "complete", "TOKEN", "--result-json", '"another"'], done)
    assert stale.exit_code != 0 and "Traceback" not in stale.stderr
    failed = same(["activity", "fail", "TOKEN", "--error-type", "Declined", "--non-retryable"], failing)
    assert failed.stdout == "dead_lettered\n", failed.stderr


def _sse_event(global_id: int, workflow_id: str) -> bytes:
    event = {
        "global_id": global_id,
        "execution_id": "00000000-0000-4000-8000-000000000001",
        "event_id": 1,
        "event_type": "WorkflowExecutionStarted",
        "event_data": {},
        "created_at": "2026-12-04T15:00:00+00:00",
        "workflow_name": "greet",
        "workflow_id": workflow_id,
    }
    return f"id: {global_id}\ndata: {json.dumps(event)}\n\n".encode()


def _answer(status: str, error: dict[str, str]) -> bytes:
    body = json.dumps({"error": error}).encode()
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


class _ScriptedStreams:
    """A stand-in for the management API's /stream: each connection gets the next of
    ``answers``: ("ended", body) a 200 event stream the server then ends, ("cut", body) one whose
    connection is closed mid-stream, ("raw", bytes) a whole answer, ("drop", b"") none (the
    connection closed). ``requests`` keeps what each connection sent."""

    def __init__(self, answers: list[tuple[str, bytes]]):
        self.answers, self.requests = answers, list[str]()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        for kind, body in self.answers:
            peer, _ = self.listener.accept()
            self.requests.append(peer.recv(65536).decode().lower())
            if kind == "raw":
                peer.sendall(body)
            elif kind == "drop":  # closed with no answer at all
                pass
            else:
                ending = b"" if kind == "cut" else b"0\r\n\r\n"
                peer.sendall(head + f"{len(body):x}\r\n".encode() + body + b"\r\n" + ending)
            peer.close()

    def tail(self, *args: str, base_url: bool = True) -> Result:
        try:
            result = run(*(["--base-url", self.url] if base_url else []), "events", "tail", *args)
            self.thread.join(5)
            return result
        finally:
            self.listener.close()


@pytest.fixture
def quick_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    from harvest.cli import events as events_cli

    monkeypatch.setattr(events_cli, "RETRY_SECS", 0.05)


@pytest.mark.usefixtures("quick_retry")
def test_events_tail_over_http_opens_the_stream_again_after_its_last_position() -> None:
    """A stream the server ends (it is stopping, or its database went) or that breaks
    off is not the end of the events: the tail says so, opens it again after the last position
    it had, rides out the server's 503s meanwhile, and says when it is back. Nothing is printed
    twice."""
    streams = _ScriptedStreams(
        [
            ("ended", b": stream open\nid: 3\n\n" + _sse_event(7, "w1")),  # the server ends it
            ("raw", _answer("503 Service Unavailable", {"code": "database_unavailable", "message": "down"})),
            ("raw", _answer("502 Bad Gateway", {})),  # a proxy whose server is restarting
            ("cut", b": stream open\nid: 7\n\n"),  # open, then the connection is cut
            ("ended", b": stream open\nid: 7\n\n" + _sse_event(8, "w2")),
        ]
    )
    tail = streams.tail("--after", "3", "--limit", "2")
    assert tail.exit_code == 0, tail.stderr
    assert [line.split()[2] for line in tail.stdout.splitlines()] == ["greet/w1", "greet/w2"]
    assert "last-event-id: 3\r\n" in streams.requests[0]
    assert all("last-event-id: 7\r\n" in r for r in streams.requests[1:]), streams.requests
    assert tail.stderr.count("warning: the event stream ended (") == 2, tail.stderr
    assert "(the server ended it: it is stopping, or its database went): trying again every 0.05 s" in (
        tail.stderr
    )
    assert "(the event stream broke off: " in tail.stderr
    assert tail.stderr.count("warning: the event stream is back: following its events after 7\n") == 2


@pytest.mark.usefixtures("quick_retry")
def test_events_tail_over_http_resumes_from_the_opening_position_before_any_event() -> None:
    """Started from now, a tail whose stream is lost before its first event resumes after the
    position the stream opened at: an event written meanwhile is printed."""
    opening = b": stream open\nid: 41\n\n"
    said = b": the database's events now end at 40, before 41: going on after 40\n\n"
    again = b": stream open\nid: 40\n\n" + said + b": keepalive\n\n" + _sse_event(41, "w1")
    streams = _ScriptedStreams([("ended", opening), ("ended", again)])
    tail = streams.tail("--limit", "1")
    assert tail.exit_code == 0 and "greet/w1" in tail.stdout, tail.stderr
    assert "last-event-id" not in streams.requests[0]
    assert "last-event-id: 41\r\n" in streams.requests[1]
    assert "its events after 41 follow when it is back" in tail.stderr
    # What the stream says in a comment is shown, but its opening and keepalives.
    assert "warning: the database's events now end at 40, before 41: going on after 40\n" in tail.stderr
    assert "keepalive" not in tail.stderr and "stream open" not in tail.stderr


@pytest.mark.usefixtures("quick_retry")
def test_events_tail_over_http_ends_on_an_error_answer_naming_where_to_resume() -> None:
    """Once followed, an answer that is not an outage (a revoked token) ends the tail with its
    own error and exit code, naming the position to go on from."""
    refused = _answer("401 Unauthorized", {"code": "unauthenticated", "message": "token revoked"})
    opened = b": stream open\nid: 3\n\n" + _sse_event(7, "w1")
    streams = _ScriptedStreams([("ended", opened), ("raw", refused)])
    tail = streams.tail()
    assert tail.stdout.startswith("7  2026-12-04T15:00:00.000+00:00  greet/w1  #1"), tail.stdout
    assert "token revoked" in tail.stderr and "resume with --after 7" in tail.stderr, tail.stderr
    assert tail.exit_code == Unauthenticated.exit_code


def test_events_tail_over_http_that_cannot_open_the_stream_fails() -> None:
    """A stream that cannot be opened at all (the server's database down) is an error, as it
    was: the tail does not wait for a server it never read."""
    down = _answer("503 Service Unavailable", {"code": "database_unavailable", "message": "down"})
    tail = _ScriptedStreams([("raw", down)]).tail("--after", "5")
    assert tail.exit_code == 1 and "down: resume with --after 5" in tail.stderr, tail.stderr


@pytest.mark.usefixtures("quick_retry")
def test_events_tail_at_the_default_url_rides_out_its_server_going(monkeypatch: pytest.MonkeyPatch) -> None:
    """With nothing configured the CLI tries the default URL; once its stream has opened, a
    server there that stops answering is an outage, not a missing configuration."""
    from harvest.cli import output

    streams = _ScriptedStreams(
        [
            ("ended", b": stream open\nid: 3\n\n" + _sse_event(7, "w1")),
            ("drop", b""),  # no answer at all
            ("ended", b": stream open\nid: 7\n\n" + _sse_event(8, "w2")),
        ]
    )
    monkeypatch.setattr(output, "default_base_url", lambda port=None: streams.url)
    tail = streams.tail("--limit", "2", base_url=False)
    assert tail.exit_code == 0, tail.stderr
    assert "no database" not in tail.stderr
    assert [line.split()[2] for line in tail.stdout.splitlines()] == ["greet/w1", "greet/w2"]


@pytest.mark.parametrize("configured_port", [None, "free"])
def test_with_nothing_given_the_cli_looks_where_serve_listens(configured_port: str | None) -> None:
    """`harvest serve` (and `harvest dev`) listened on 8080 while the CLI given nothing looked on
    3000, so the two defaults never met. Both now take web.port, else 3000."""
    from harvest.cli.serve import web_address

    port = None
    if configured_port == "free":
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]  # free once closed: nothing answers there
    env = {} if port is None else {"HARVEST_WEB__PORT": str(port)}
    listens = web_address(load_config(env={**env}), None, None)[1]
    assert listens == (3000 if port is None else port)
    if port is None:
        return  # (something on this machine may answer at 3000)
    result = run("workflow", "list", env=env)
    assert result.exit_code == 1
    tried = f"the default http://localhost:{listens}/api/harvest did not answer"
    assert tried in result.output, result.output


def test_the_clis_history_page_is_the_routes_largest() -> None:
    """The CLI over HTTP reads a history in pages of the route's largest limit: a route whose
    maximum dropped below the CLI's page would answer every `workflow history` with a 400."""
    from harvest.cli import http
    from harvest.web.routes import workflows

    assert http.HISTORY_PAGE == workflows.HISTORY_PAGE_MAX
    assert http.STACK_LIMIT_MAX == workflows.STACK_LIMIT_MAX


class _Chunked:
    """A transport around the in-process one that hands the export-batch answer over in small
    chunks, counting the bytes given, and can end it short (``cut``: after that many bytes,
    ``broken``: with a read error rather than a quiet end)."""

    def __init__(self, inner: object, cut: int | None = None, broken: bool = False) -> None:
        self.inner, self.cut, self.broken = inner, cut, broken
        self.received = 0

    def handle_request(self, request: object) -> object:
        import httpx

        answer = self.inner.handle_request(request)  # type: ignore[attr-defined]
        if not str(request.url.path).endswith("/history/export-batch"):  # type: ignore[attr-defined]
            return answer
        outer, body = self, answer.stream

        class Stream(httpx.SyncByteStream):
            def __iter__(self) -> Iterator[bytes]:
                for piece in body:
                    for i in range(0, len(piece), 64):
                        if outer.cut is not None and outer.received >= outer.cut:
                            if outer.broken:
                                raise httpx.ReadError("connection reset")
                            return
                        outer.received += len(piece[i : i + 64])
                        yield piece[i : i + 64]

            def close(self) -> None:
                body.close()

        return httpx.Response(answer.status_code, headers=answer.headers, stream=Stream())

    def close(self) -> None:
        self.inner.close()  # type: ignore[attr-defined]


def _long_runs(conn: psycopg.Connection, n: int = 3, signals: int = 30) -> None:
    for i in range(n):
        run_id = start(conn, "onboarding", f"batch-{i}", search_attributes={"tenant": "ünïcode ☃"})
        conn.execute(
            "SELECT harvest.signal_workflow(%s, 'sig-' || g, jsonb_build_object('n', g, 'x', g * 1.5, "
            "'e', '{}'::jsonb, 'l', '[]'::jsonb, 's', 'é\"\\' || g)) FROM generate_series(1, %s) AS g",
            (run_id, signals),
        )


def test_export_batch_over_http_writes_the_answer_as_it_arrives(
    db: str, served, conn, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    """`history export-batch` over HTTP read the route's whole answer (every history of the
    batch) before it wrote a byte; it now writes each piece as it arrives, re-indented to the
    bytes it wrote before (json.dumps(indent=2) of the document, as over SQL)."""
    import contextlib

    from harvest.cli import export_batch as cli_export_batch

    served()
    _long_runs(conn)
    chunked = _Chunked(cli_http.TRANSPORT)
    monkeypatch.setattr(cli_http, "TRANSPORT", chunked)
    writes: list[tuple[int, str]] = []  # (bytes received by then, what was written)

    class Recorder:
        def write(self, text: str) -> int:
            writes.append((chunked.received, text))
            return len(text)

    @contextlib.contextmanager
    def recorded(path: str, private: bool = False) -> Iterator[Recorder]:
        yield Recorder()

    with monkeypatch.context() as m:
        m.setattr(cli_export_batch, "output_file", recorded)
        web = run("--base-url", BASE, "history", "export-batch", "--state-group", "all")
    assert web.exit_code == 0, web.stderr
    total = chunked.received
    assert total > 64 * 20 and writes
    assert writes[0][0] < total, f"{writes[0][0]} of {total} bytes received before the first write"
    sql = run("history", "export-batch", "--state-group", "all", "--database-url", db)
    assert sql.exit_code == 0 and "".join(t for _, t in writes) == sql.stdout
    assert len(json.loads(sql.stdout)["exports"]) == 3
    for policy in ("redacted", "full"):  # and into a file, what it says on stderr
        files = [tmp_path / "sql.json", tmp_path / "web.json"]
        args = ("history", "export-batch", "--state-group", "all", "--payload-policy", policy, "--file")
        sql = run(*args, str(files[0]), "--database-url", db)
        web = run("--base-url", BASE, *args, str(files[1]))
        assert (sql.exit_code, web.exit_code) == (0, 0), web.stderr
        assert files[0].read_bytes() == files[1].read_bytes()
        assert web.stderr == sql.stderr.replace("sql.json", "web.json")


@pytest.mark.parametrize("broken", [False, True], ids=["ends-short", "read-error"])
def test_export_batch_over_http_cut_short_leaves_no_file(
    db: str, served, conn, monkeypatch: pytest.MonkeyPatch, tmp_path, broken: bool
) -> None:
    """An answer that breaks off (or just ends) in the middle leaves no file, and an earlier
    file of that name as it was: the command fails, naming the route."""
    served()
    _long_runs(conn)
    monkeypatch.setattr(cli_http, "TRANSPORT", _Chunked(cli_http.TRANSPORT, cut=64 * 10, broken=broken))
    target = tmp_path / "batch.json"
    target.write_text("earlier\n")
    web = run("--base-url", BASE, "history", "export-batch", "--state-group", "all", "--file", str(target))
    assert web.exit_code == 1 and "/history/export-batch" in web.stderr, (web.exit_code, web.stderr)
    assert target.read_text() == "earlier\n"
    assert [p.name for p in tmp_path.iterdir()] == ["batch.json"]


def test_export_batch_over_http_says_partial_and_exits_1_from_the_streamed_document(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    """What the command says of the batch (its status, the shards not read, how many exports)
    comes from the document as it streamed by; an error answer (503) leaves no file."""
    import httpx

    doc = {
        "schema": "harvest.history_export_batch",
        "version": 1,
        "status": "partial",
        "payload_policy": "redacted",
        "exports": [{"execution_id": "e1", "events": [{"n": 1.5, "s": "é"}], "redacted": True}, {}],
        "failures": [],
        "shard_coverage": {"read": [0, 1], "unavailable": [2]},
    }
    answers = [httpx.Response(200, content=json.dumps(doc, ensure_ascii=False, separators=(",", ":")))]
    answers.append(httpx.Response(503, json={"error": {"code": "unavailable", "message": "no shard read"}}))
    monkeypatch.setattr(cli_http, "TRANSPORT", httpx.MockTransport(lambda request: answers.pop(0)))
    target = tmp_path / "batch.json"
    web = run("--base-url", BASE, "history", "export-batch", "--file", str(target))
    assert target.read_text() == json.dumps(doc, indent=2) + "\n"
    assert web.exit_code == 1 and web.stderr.startswith(f"wrote {target}: 2 export(s), status partial\n")
    assert "shard(s) 2 could not be read" in web.stderr, web.stderr
    target.unlink()
    web = run("--base-url", BASE, "history", "export-batch", "--file", str(target))
    assert web.exit_code == 1 and web.stderr.startswith("error:") and not target.exists(), web.stderr


def test_release_owed_ends_over_http_as_over_sql(both, served, db: str, conn) -> None:
    """`harvest shard release-owed-ends` over HTTP (POST /admin/shards/{shard}/release-owed-ends,
    admin) releases in the server, batch by batch and audited, and prints what it prints over
    SQL; its dry run is the same bytes."""
    conn.execute(
        "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, created_at, completed_at,"
        " end_owed_to_shard) SELECT gen_random_uuid(), 'kid', 'owed-' || n,"
        " CASE WHEN n <= 3 THEN 'COMPLETED' ELSE 'RUNNING' END, now(), CASE WHEN n <= 3 THEN now() END, 3"
        " FROM generate_series(1, 4) AS n"
    )
    both("shard", "release-owed-ends", "3", "--dry-run")
    both("shard", "release-owed-ends", "3", "--dry-run", "--output", "json")
    # Shard 0 is this very database: alive, refused the same way over either transport.
    refused, _ = both("shard", "release-owed-ends", "0")
    assert refused.exit_code == 2 and "shard 0 is reachable and alive" in refused.stderr, refused.stderr
    web = run(
        "--base-url", BASE, "--output", "json", "shard", "release-owed-ends", "3",
        "--batch-size", "2", "--operator-id", "ops",
    )  # fmt: skip
    assert web.exit_code == 0, web.stderr
    done = json.loads(web.stdout)
    assert (done["released"], done["batches"], done["unavailable_shards"]) == (3, 3, [])
    assert done["shards"] == [{"shard_id": 0, "released": 3, "batches": 3}]
    audited = conn.execute(
        "SELECT operator_id, source FROM harvest.audit_log"
        " WHERE operation = 'retention.release_owed_child_ends'"
    ).fetchall()
    assert audited == [("ops", "api")] * 3
    sql = run(
        "--output", "json", "shard", "release-owed-ends", "3", "--include-running", "--database-url", db
    )
    assert sql.exit_code == 0, sql.stderr
    assert json.loads(sql.stdout)["shards"] == [{"shard_id": 0, "released": 1, "batches": 2}]


def _old_audit_rows(conn: psycopg.Connection, n: int) -> None:
    """``n`` audit rows written in 2020 (the test clock), older than 400 days."""
    conn.execute("SET harvest.fake_now = '2020-01-01 00:00:00+00'")
    conn.execute(
        "SELECT harvest._audit('test.old', 'old' || n, NULL, '{}') FROM generate_series(1, %s) AS n", (n,)
    )
    conn.execute("RESET harvest.fake_now")


def _no_cutoff(answer: dict[str, object]) -> dict[str, object]:
    """An answer without its cutoffs (now() less the age: a moment later on the second call)."""
    shards = [{k: v for k, v in r.items() if k != "cutoff"} for r in answer["shards"]]  # type: ignore[attr-defined]
    return {**{k: v for k, v in answer.items() if k != "cutoff"}, "shards": shards}


def test_audit_prune_over_sql_and_http(served, db: str, conn) -> None:
    """`harvest audit prune --older-than AGE` deletes the audit rows older than AGE batch by
    batch until none remain (SELECT harvest.prune_audit_log until remaining is 0), each
    deleting batch audited; --dry-run counts them and deletes nothing; over HTTP the server
    does it (POST /admin/audit/prune, admin), with the same answer."""
    served()
    _old_audit_rows(conn, 5)
    conn.execute("SELECT harvest._audit('test.new', 'new', NULL, '{}')")

    dry = run("audit", "prune", "--older-than", "400 days", "--dry-run", "--database-url", db)
    assert dry.exit_code == 0, dry.stderr
    assert dry.stdout.startswith("dry run: 5 audit row(s) older than 400 days would be deleted"), dry.stdout
    assert "  shard 0: 5" in dry.stdout
    args = ("--output", "json", "audit", "prune", "--older-than", "400 days", "--dry-run")
    dry_sql = run(*args, "--database-url", db)
    dry_web = run("--base-url", BASE, *args)
    assert dry_sql.exit_code == dry_web.exit_code == 0, (dry_sql.stderr, dry_web.stderr)
    counted = json.loads(dry_sql.stdout)
    assert _no_cutoff(counted) == _no_cutoff(json.loads(dry_web.stdout))
    assert (counted["older"], counted["dry_run"], counted["unavailable_shards"]) == (5, True, [])
    assert counted["cutoff"].startswith(str(datetime.now().year - 1)), counted  # now - 400 days

    pruned = run(
        "audit", "prune", "--older-than", "400 days", "--batch-size", "2", "--operator-id", "ops",
        "--database-url", db,
    )  # fmt: skip
    assert pruned.exit_code == 0, pruned.stderr
    assert pruned.stdout.startswith("deleted 5 audit row(s) older than 400 days in 3 batch(es); 0 remaining")
    assert "shard 0: deleting audit rows older than 400 days" in pruned.stderr  # the progress, on stderr
    left = conn.execute("SELECT operation, count(*) FROM harvest.audit_log GROUP BY 1 ORDER BY 1").fetchall()
    assert left == [("audit.prune", 3), ("test.new", 1)], left
    audited = conn.execute(
        "SELECT operator_id, source, details ->> 'deleted' FROM harvest.audit_log"
        " WHERE operation = 'audit.prune' ORDER BY id"
    ).fetchall()
    assert audited == [("ops", "cli", "2"), ("ops", "cli", "2"), ("ops", "cli", "1")]

    _old_audit_rows(conn, 3)
    web = run("--base-url", BASE, "--output", "json", "audit", "prune", "--older-than", "400 days")
    assert web.exit_code == 0, web.stderr
    done = json.loads(web.stdout)
    assert (done["deleted"], done["batches"], done["remaining"], done["dry_run"]) == (3, 1, 0, False)
    assert _no_cutoff(done)["shards"] == [{"shard_id": 0, "deleted": 3, "batches": 1, "remaining": 0}]
    assert conn.execute("SELECT count(*) FROM harvest.audit_log WHERE operation = 'test.old'").fetchone() == (
        0,
    )
    route = conn.execute(
        "SELECT source, route FROM harvest.audit_log WHERE operation = 'audit.prune' ORDER BY id DESC LIMIT 1"
    ).fetchone()
    assert route is not None and route[0] == "api" and "/admin/audit/prune" in (route[1] or ""), route


def test_audit_prune_refuses_a_bad_age_over_sql_as_over_http(both, conn) -> None:
    """An age that is not positive, or no interval, deletes nothing and exits 2, one line."""
    _old_audit_rows(conn, 2)
    for age in ("0 days", "-3 days", "soon"):
        for dry in ((), ("--dry-run",)):
            sql, _web = both("audit", "prune", "--older-than", age, *dry)
            assert sql.exit_code == 2 and sql.stderr.startswith("error: "), (age, sql.stderr)
    assert conn.execute("SELECT count(*) FROM harvest.audit_log WHERE operation = 'test.old'").fetchone() == (
        2,
    )


def test_an_execution_id_that_is_no_uuid_is_one_clear_line_over_sql_as_over_http(both) -> None:
    """The spec's `workflow get <execution-id>`: a workflow id given in its place (the usual
    slip) was refused over one database with PostgreSQL's own words ("invalid input syntax for
    type uuid"), over HTTP and over [shards] with Harvest's ("is not an execution id")."""
    for command in (
        ("workflow", "get", "order-42"),
        ("workflow", "stack", "order-42"),
        ("workflow", "children", "order-42"),
        ("workflow", "history", "order-42"),
        ("workflow", "cancel", "order-42"),
        ("workflow", "signal", "order-42", "approved"),
        ("workflow", "query", "order-42", "status"),
        ("workflow", "reset", "order-42", "--to-event", "3", "--reason", "r", "--operator-id", "o"),
    ):
        sql, _ = both(*command)
        assert sql.exit_code == 2, (command, sql.stderr)
        assert "'order-42' is not an execution id (a UUID)" in sql.stderr, (command, sql.stderr)
        assert "invalid input syntax" not in sql.stderr, (command, sql.stderr)


def test_an_execution_id_in_any_uuid_spelling_is_the_run_on_both_transports(both, conn) -> None:
    """The check at the edge takes what Python's uuid.UUID takes (no hyphens, braces, upper
    case, a urn:uuid: prefix), and the server of the HTTP routes reads the id in its canonical
    form; over one database the id went to PostgreSQL as typed, which refuses the urn: form
    ("invalid input syntax for type uuid")."""
    run_id = start(conn, "onboarding", "spelled")
    for spelled in (f"urn:uuid:{run_id}", run_id.replace("-", "").upper(), "{" + run_id + "}"):
        sql, _ = both("workflow", "get", spelled, "--output", "json")
        assert sql.exit_code == 0, (spelled, sql.stderr)
        assert json.loads(sql.stdout)["id"] == run_id, (spelled, sql.stdout)


def test_a_start_or_schedule_with_no_queue_goes_to_the_served_apps_queue_over_http(
    served, conn: psycopg.Connection
) -> None:
    """The spec's `workflow start approval_workflow --input-json ...` is the route's start: with
    no queue, the server's App's declared queue. The CLI sent its own default, "default", so a
    workflow declared on another queue was started where no worker of it polls (and a schedule
    created by the CLI or the route fired there)."""
    from harvest import App, workflow

    @workflow(name="billed", queue="billing")
    async def billed(ctx, n: int) -> int:
        return n

    served(app=App(workflows=[billed]))
    started = run("--base-url", BASE, "workflow", "start", "billed", "--input-json", "1", "--output", "json")
    assert started.exit_code == 0, started.stderr
    execution_id = json.loads(started.stdout)["execution_id"]
    queue = conn.execute("SELECT queue FROM harvest.executions WHERE id = %s", (execution_id,)).fetchone()
    assert queue == ("billing",)
    created = run(
        "--base-url", BASE, "schedule", "create-workflow", "--name", "nightly", "--workflow", "billed",
        "--cron", "0 3 * * *", "--input-json", "1", "--output", "json",
    )  # fmt: skip
    assert created.exit_code == 0, created.stderr
    assert json.loads(created.stdout)["queue"] == "billing"
    # A queue given is kept.
    given = run(
        "--base-url", BASE, "schedule", "create-workflow", "--name", "pinned", "--workflow", "billed",
        "--cron", "0 3 * * *", "--queue", "elsewhere", "--input-json", "1", "--output", "json",
    )  # fmt: skip
    assert json.loads(given.stdout)["queue"] == "elsewhere"


def test_rate_limit_commands_print_the_same_over_sql_and_http(db: str, both, conn) -> None:
    """`harvest rate-limit` (the activity's twin of `harvest throttle`): the same rows and exit
    codes over either transport; a per-key limit is refused (PolicyConflict) the same way."""
    policies = {
        "activities": {
            "charge": {"rate_limit": {"rps": 5}},
            "keyed": {"rate_limit": {"rps": 5, "key": "input.t"}},
        }
    }
    conn.execute("SELECT harvest.declare_flow_policies(%s)", (json.dumps(policies),))
    for o in (("--output", "table"), ("--output", "json")):
        both("rate-limit", "get", "charge", *o)
        both("rate-limit", "get", "nobody", *o)
        both("rate-limit", "clear-override", "charge", *o)  # none live: was_live false
    # The declared rate before any claim made a bucket, a per-key one's too (they printed "-");
    # a name that declares none is said so on stderr (it printed a row of dashes, and nothing).
    for name in ("charge", "keyed"):
        sql, _ = both("rate-limit", "get", name, "--output", "json")
        assert json.loads(sql.stdout)["shards"][0]["rps"] == 5, sql.stdout
        assert sql.stderr == ""
    sql, _ = both("rate-limit", "get", "nobody")
    assert sql.exit_code == 0 and "activity nobody declares no rate limit" in sql.stderr, sql.stderr
    sql, _ = both("throttle", "get", "nobody")
    assert sql.exit_code == 0 and "workflow nobody declares no start throttle" in sql.stderr, sql.stderr
    for o in (("--output", "table"), ("--output", "json")):
        both("rate-limit", "override", "keyed", "--rps", "2", *o)
    args = ("rate-limit", "override", "charge", "--rps", "2", "--output", "json")
    answers = [
        json.loads(run(*_with_dsn(args, db)).stdout),
        json.loads(run("--base-url", BASE, *args).stdout),
    ]
    for answer in answers:  # (the expiry differs by the moment each was made)
        assert answer["shards"][0].pop("override_expires_at")
    assert answers[0] == answers[1] and answers[0]["shards"][0]["override_rps"] == 2
    refused = run("--base-url", BASE, "rate-limit", "override", "keyed", "--rps", "2")
    assert refused.exit_code != 0 and "per-key" in refused.stderr, refused.stderr


def test_rate_limit_override_takes_the_operator_id_for_its_audit_rows(db: str, served, conn) -> None:
    """`harvest rate-limit override|clear-override` had no --operator-id where `throttle
    override`, `dlq` and `retention` take it (the one option, cli.output.operator_id_option):
    their audit rows named no operator. Over SQL and over HTTP the override names it now, and
    over SQL the clear too; over HTTP the clear, the rate limit's and the throttle's, named the
    token's actor whatever --operator-id said, and names it now."""
    served()
    conn.execute(
        "SELECT harvest.declare_flow_policies(%s)",
        (json.dumps({"activities": {"charge": {"rate_limit": {"rps": 5}}}}),),
    )
    mark = conn.execute("SELECT coalesce(max(id), 0) FROM harvest.audit_log").fetchone()[0]
    args = ("rate-limit", "override", "charge", "--rps", "2", "--operator-id")
    assert run(*_with_dsn((*args, "alice"), db)).exit_code == 0
    assert run("--base-url", BASE, *args, "bob").exit_code == 0
    clear = run(*_with_dsn(("rate-limit", "clear-override", "charge", "--operator", "carol"), db))
    assert clear.exit_code == 0, clear.stderr
    # Over HTTP a clear names its --operator-id too (the DELETE's operator_id parameter; the
    # token's actor was recorded whatever was given), the rate limit's and the throttle's.
    clear = run("--base-url", BASE, "rate-limit", "clear-override", "charge", "--operator-id", "dave")
    assert clear.exit_code == 0, clear.stderr
    conn.execute(
        "SELECT harvest.declare_flow_policies(%s)",
        (json.dumps({"workflows": {"imports": {"throttle": {"rps": 5}}}}),),
    )
    clear = run("--base-url", BASE, "throttle", "clear-override", "imports", "--operator-id", "erin")
    assert clear.exit_code == 0, clear.stderr
    rows = conn.execute(
        "SELECT operation, operator_id FROM harvest.audit_log WHERE id > %s ORDER BY id", (mark,)
    ).fetchall()
    assert rows == [
        ("rate_limit.override", "alice"),
        ("rate_limit.override", "bob"),
        ("rate_limit.clear_override", "carol"),
        ("rate_limit.clear_override", "dave"),
        ("start_throttle.clear_override", "erin"),
    ], rows


def test_a_created_after_date_lists_the_same_runs_over_sql_and_http_whatever_the_sessions_zone(
    db: str, served, conn
) -> None:
    """`workflow list --created-after 2026-01-01` is UTC midnight on both transports (cli.output
    ISO_TIME, an aware time): a naive time reached SQL as a timestamp read in the session's
    TimeZone (PGTZ here, +14), so the SQL list took runs of the afternoon before that HTTP's left
    out. The same rows over both (the times print in the session's zone over SQL: the same
    instants, compared as such)."""
    served()
    at = {
        "dec31-noon": "2025-12-31T12:00:00Z",
        "midnight": "2026-01-01T00:00:00Z",
        "jan1-six": "2026-01-01T06:00:00Z",
    }
    for workflow_id, created in at.items():
        run_id = start(conn, "zoned", workflow_id)
        conn.execute("UPDATE harvest.executions SET created_at = %s WHERE id = %s", (created, run_id))
    args = ["workflow", "list", "--workflow-name", "zoned", "--created-after", "2026-01-01", "-o", "json"]
    sql = run(*args, "--database-url", db, env={"PGTZ": "Pacific/Kiritimati"})
    web = run("--base-url", BASE, *args)
    assert sql.exit_code == web.exit_code == 0, (sql.stderr, web.stderr)

    def listed(result: Result) -> list[tuple[str, str, datetime]]:
        rows = json.loads(result.stdout)["executions"]
        return [(r["execution_id"], r["workflow_id"], datetime.fromisoformat(r["created_at"])) for r in rows]

    assert listed(sql) == listed(web)
    assert [workflow_id for _, workflow_id, _ in listed(sql)] == ["jan1-six", "midnight"]


def test_workflow_current_finds_a_run_by_its_workflow_id_over_sql_and_http(both, conn) -> None:
    """No command found a run by its workflow id (`workflow get` takes an execution id only);
    over HTTP it asks GET /workflows/current, over SQL each shard."""
    run_id = start(conn, "onboarding", "u-current")
    for output in ("table", "json"):
        sql, _ = both("workflow", "current", "u-current", "--output", output)
        assert sql.exit_code == 0 and str(run_id) in sql.stdout, sql.stderr
        both("workflow", "current", "u-current", "--workflow", "onboarding", "--output", output)
    missing, _ = both("workflow", "current", "nope")
    assert missing.exit_code == 1 and "no run has workflow_id nope" in missing.stderr, missing.stderr
    # A run not found by its execution id names this command, over SQL and over HTTP alike (the
    # SQL named its function, the route its own address).
    unknown = str(uuid.uuid4())
    got, _ = both("workflow", "get", unknown)
    assert f"harvest workflow current {unknown} finds a run by it" in got.stderr, got.stderr


def test_a_result_read_with_a_token_that_sees_no_payloads_says_it_shows_a_size(
    db: str, served, start_worker
) -> None:
    """`harvest workflow result` over HTTP with a token made with --no-payloads printed the
    redaction marker as the result, exit 0, and nothing else: a script took the size for the
    value. A note on stderr says what it is (the exit stays 0, as for an encrypted result)."""
    from harvest.web.auth import TokenAuthorizer

    served(app=TALLY, profile="production", authorizer=TokenAuthorizer(dsn=db))
    start_worker(TALLY)
    with psycopg.connect(db, autocommit=True) as conn:
        full, blind = (
            conn.execute(
                "SELECT secret FROM harvest.create_api_token(%s, 'admin', p_payloads => %s)", (name, sees)
            ).fetchone()[0]
            for name, sees in (("sees", True), ("blind", False))
        )
    started = run(
        "--base-url",
        BASE,
        "--token",
        full,
        "workflow",
        "start",
        "tally",
        "--input-json",
        '"ann"',
        "-o",
        "json",
    )
    run_id = json.loads(started.stdout)["execution_id"]
    deadline = time.monotonic() + 10
    while run("--base-url", BASE, "--token", full, "workflow", "signal", run_id, "close").exit_code != 0:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    seen = run("--base-url", BASE, "--token", full, "workflow", "result", run_id, "--timeout", "10")
    assert (seen.exit_code, json.loads(seen.stdout), seen.stderr) == (0, {"owner": "ann", "total": 0}, "")
    blinded = run("--base-url", BASE, "--token", blind, "workflow", "result", run_id)
    assert blinded.exit_code == 0 and json.loads(blinded.stdout)["redacted"] is True, blinded.stdout
    assert "this token sees no payloads (made with --no-payloads)" in blinded.stderr, blinded.stderr
