"""The CLI over HTTP against a sharded management API prints what the CLI prints over SQL with
the same [shards]: the server's fan-out answers (complete, then partial with a shard down) come
back as the CLI's own fan-out would have merged them."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from click.testing import CliRunner, Result
from starlette.testclient import TestClient

from harvest.cli import http as cli_http
from harvest.cli.main import main
from harvest.config import load_config
from harvest.web.app import management_app

pytestmark = pytest.mark.shard

BASE = "http://testserver"
CLEAN = {"HARVEST_DATABASE_URL": None, "HARVEST_URL": None, "HARVEST_TOKEN": None, "HARVEST_CONFIG": None}


def _shard_env(shards) -> dict[str, str]:
    return {
        "HARVEST_SHARDS__READABLE": "0,1,2",
        "HARVEST_SHARDS__WRITABLE": "0,1,2",
        "HARVEST_SHARDS__CLI_TIMEOUT": "1",
        **{f"HARVEST_SHARDS__URLS__{s}": dsn for s, dsn in shards.dsns.items()},
    }


@pytest.fixture
def served(shards, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    app = management_app(config=load_config(env=_shard_env(shards)), profile="dev")
    app.state.harvest.shard_timeout = 1.0  # a stopped shard is named after 1 s, not 5
    with TestClient(app, base_url=BASE) as client:
        monkeypatch.setattr(cli_http, "TRANSPORT", client._transport)
        yield


def _run(args: list[str], env: dict[str, str | None]) -> Result:
    return CliRunner().invoke(main, args, env={**CLEAN, **env}, catch_exceptions=False)


def test_fan_out_reads_match_over_three_shards_and_a_stopped_one(shards, served) -> None:
    env = _shard_env(shards)
    for shard in (0, 1, 2):
        started = _run(
            ["workflow", "start", "greet", "--shard-id", str(shard), "--workflow-id", f"g{shard}"], env
        )
        assert started.exit_code == 0, started.stderr
    with shards.connect(1) as conn:
        conn.execute("SELECT harvest.register_worker('w1', ARRAY['default'], 'host', 1, 60, '{}')")
    for shard in (0, 2):  # an audit row on two shards
        with shards.connect(shard) as conn:
            conn.execute("SELECT harvest.set_retention('30 days', 100, 'ops')")

    def same(*args: str) -> Result:
        sql = _run(list(args), env)
        web = _run(["--base-url", BASE, *args], {})
        assert (web.stdout, web.stderr, web.exit_code) == (sql.stdout, sql.stderr, sql.exit_code), args
        return sql

    reads = [
        ("workflow", "list"),
        ("workflow", "list", "--limit", "2"),
        ("workflow", "count", "--by", "all"),
        ("dlq", "list"),
        ("dlq", "count"),
        ("worker", "list"),
        ("worker", "health"),
        # Per shard over SQL, so per shard over HTTP too (the route says the server is sharded).
        ("worker", "get", "w1"),
        ("worker", "get", "nobody"),
        ("audit", "list"),
        ("audit", "list", "--limit", "1"),
        ("retention", "status"),
    ]
    for o in ("table", "json"):
        for args in reads:
            same(*args, "--output", o)
    # A write of every shard's settings answers per shard over either transport.
    for transport in ([], ["--base-url", BASE]):
        written = _run([*transport, "retention", "set", "--max-age", "7 days", "--output", "json"], env)
        assert written.exit_code == 0, written.stderr
        shard_rows = json.loads(written.stdout)["shards"]
        assert [(r["shard_id"], r["max_age"]) for r in shard_rows] == [(s, "7 days") for s in (0, 1, 2)]
    shards.stop(1)
    try:
        for o in ("table", "json"):  # partial: the same rows and the same warning on stderr
            listed = same("workflow", "list", "--output", o)
            assert "warning: partial: shard(s) 1" in listed.stderr
            same("worker", "health", "--output", o)
            assert "shard(s) 1 could not be read" in same("worker", "get", "w1", "--output", o).stderr
            same("audit", "list", "--output", o)
            assert "shard_id" in same("retention", "status", "--output", o).stdout
    finally:
        shards.start(1)


def test_release_owed_ends_over_http_on_a_sharded_server_as_over_sql(shards, served) -> None:
    """`shard release-owed-ends` over HTTP to a sharded server releases on every shard but the
    retired one, in the server, and prints what the CLI prints over SQL with the same [shards];
    a shard the server cannot reach is named and the command exits 1 either way."""
    for shard, owed in ((1, 2), (2, 1)):
        with shards.connect(shard) as conn:
            conn.execute(
                "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, created_at,"
                " completed_at, end_owed_to_shard) SELECT harvest._new_execution_id(%s), 'kid', 'owed-' || n,"
                " 'COMPLETED', now(), now(), 0 FROM generate_series(1, %s) AS n",
                (shard, owed),
            )
    env = _shard_env(shards)
    args = ["--output", "json", "shard", "release-owed-ends", "0"]
    sql = _run([*args, "--dry-run"], env)
    web = _run(["--base-url", BASE, *args, "--dry-run"], {})
    assert (web.stdout, web.exit_code) == (sql.stdout, sql.exit_code) and sql.exit_code == 0, sql.stderr
    assert [(r["shard_id"], r["ended"]) for r in json.loads(web.stdout)["shards"]] == [(1, 2), (2, 1)]

    shards.stop(2)
    try:
        web = _run(["--base-url", BASE, *args], {})
    finally:
        shards.start(2)
    assert web.exit_code == 1 and "2" in web.stderr, web.stderr
    done = json.loads(web.stdout)
    assert (done["released"], done["unavailable_shards"]) == (2, [2])
    assert [r["shard_id"] for r in done["shards"]] == [1], "the retired shard 0 is not asked"
    with shards.connect(2) as conn:
        kept = conn.execute("SELECT count(*) FROM harvest.executions WHERE end_owed_to_shard = 0").fetchone()
    assert kept == (1,), "the shard not reached keeps its owed end"


def test_a_drain_over_http_prints_each_shards_row_as_over_sql(shards, served) -> None:
    """Spec 002: a drain's answer echoes "which shards the worker owns". Over SQL with [shards]
    `worker drain` printed the worker's row on each shard, each with its shard_id; over HTTP
    against the same sharded server it printed one row and no shard at all (the route answered
    every shard's row, the CLI kept the first)."""
    env = _shard_env(shards)
    for shard in (0, 2):  # each worker polls shards 0 and 2
        with shards.connect(shard) as conn:
            for worker in ("sqlw", "webw"):
                conn.execute(
                    "SELECT harvest.register_worker(%s, ARRAY['default'], 'host', 1, 60, '{}')", (worker,)
                )
    for o in ("table", "json"):
        sql = _run(["worker", "drain", "sqlw", "--output", o], env)
        web = _run(["--base-url", BASE, "worker", "drain", "webw", "--output", o], {})
        assert sql.exit_code == 0, sql.stderr
        assert (web.stdout.replace("webw", "sqlw"), web.stderr, web.exit_code) == (
            sql.stdout,
            sql.stderr,
            sql.exit_code,
        )
    rows = json.loads(web.stdout)["workers"]
    outcomes = [(r["shard_id"], r["outcome"]) for r in rows]
    assert outcomes == [(0, "already_draining"), (1, "not_found"), (2, "already_draining")]
