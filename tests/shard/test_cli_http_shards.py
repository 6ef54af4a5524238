"""The CLI over HTTP against a sharded management API prints what the CLI prints over SQL with
the same [shards]: the server's fan-out answers (complete, then partial with a shard down) come
back as the CLI's own fan-out would have merged them."""

from __future__ import annotations

import json
import re
import time
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
        # The default, 5 s. (1 s was too short for the shards that answer at CI's load: CI 61a
        # read all three as unreachable over SQL, as CI 58a had over HTTP, below; 3 s at load 30
        # in CI 61b. A stopped shard costs none of it: its server refuses, and it is named at
        # once, harvest.db.pools' fail_fast.)
        "HARVEST_SHARDS__CLI_TIMEOUT": "5",
        **{f"HARVEST_SHARDS__URLS__{s}": dsn for s, dsn in shards.dsns.items()},
    }


@pytest.fixture
def served(shards, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # (The default shard_timeout, 5 s: 1 s was too short for the shards that answer on a loaded
    # machine: CI 58a, at load 10-12 on two cores, read all three as unreachable. A stopped shard
    # is named at once, its server refusing.)
    app = management_app(config=load_config(env=_shard_env(shards)), profile="dev")
    with TestClient(app, base_url=BASE) as client:
        monkeypatch.setattr(cli_http, "TRANSPORT", client._transport)
        yield


def _run(args: list[str], env: dict[str, str | None]) -> Result:
    return CliRunner().invoke(main, args, env={**CLEAN, **env}, catch_exceptions=False)


def _served_reads_every_shard() -> None:
    """Wait until the served API reads every shard again, after a test started one: its pool
    names a shard unreachable until its next try, up to 2 s after the server is back
    (docs/failures.md, "A shard whose server refuses is named at once")."""
    deadline = time.monotonic() + 30
    while True:
        listed = _run(["--base-url", BASE, "--output", "json", "workflow", "list"], {})
        if listed.exit_code == 0 and json.loads(listed.stdout)["status"] != "partial":
            return
        assert time.monotonic() < deadline, listed.output
        time.sleep(0.1)


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
    # A sharded deployment's `workflow list` shows each run's shard, as `schedule list` does.
    listed = same("workflow", "list").stdout.splitlines()
    assert listed[0].split()[:2] == ["SHARD_ID", "EXECUTION_ID"], listed
    assert sorted(line.split()[0] for line in listed[1:4]) == ["0", "1", "2"], listed
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
            # Why, over either transport (the route sends unavailable_reasons, as a merged read's).
            status = same("retention", "status", "--output", o)
            assert "shard_id" in status.stdout and "could not be read (shard 1: " in status.stderr
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
    # (shard 0 is alive in this cluster and stands for a retired one: forced past the probe,
    # which test_cross_shard_child_retention.py tests)
    args = ["--output", "json", "shard", "release-owed-ends", "0", "--force"]
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


def _expired(shards, shard: int, n: int) -> None:
    """``n`` runs on ``shard`` that ended 40 days ago (past a 30-day window)."""
    with shards.connect(shard) as conn:
        conn.execute(
            "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, created_at,"
            " completed_at) SELECT harvest._new_execution_id(%s), 'old', 'old-' || n, 'COMPLETED',"
            " now() - interval '41 days', now() - interval '40 days' FROM generate_series(1, %s) AS n",
            (shard, n),
        )


def _refuse(shards, shard: int, function: str, message: str) -> None:
    """``harvest.<function>`` on ``shard`` made to refuse (HR001, InvalidArgument's) with
    ``message``: a shard that answers but says no, not an outage."""
    with shards.connect(shard) as conn:
        found = conn.execute(
            "SELECT pg_get_function_arguments(p.oid), pg_get_function_result(p.oid)"
            " FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = 'harvest' AND p.proname = %s",
            (function,),
        ).fetchall()
        assert found, function
        for args, returns in found:
            conn.execute(
                f"CREATE OR REPLACE FUNCTION harvest.{function}({args}) RETURNS {returns}"
                f" LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION '{message}' USING ERRCODE = 'HR001'; END $$"
            )


def _timeless(out: str) -> str:
    """Printed JSON without its times (a sweep's cutoff, a setting's updated_at, an override's
    expiry: each write's own now()), to compare two writes' output."""
    return re.sub(r'"\d{4}-\d\d-\d\dT[^"]*"', '""', out)


def _api(path: str, body: dict) -> tuple[int, dict]:
    """A POST on the served app (the CLI's in-process transport)."""
    import httpx

    with httpx.Client(transport=cli_http.TRANSPORT, base_url=BASE) as client:
        answer = client.post(path, json=body)
    return answer.status_code, answer.json()


def test_retention_run_now_over_http_goes_on_past_a_refusing_shard_and_names_every_outcome(
    shards, served
) -> None:
    """Retention configured on shard 0 alone: shards 1 and 2 refuse the sweep (not configured
    there). The route answered the first refusal as the whole answer (400), without shard 0's
    sweep, which was done all the same. It now answers every shard's outcome: shard 0's totals,
    the refusals in shard_errors with their error, status partial; the CLI over HTTP prints the
    totals and names every refusal, exiting with the first's code, as over SQL."""
    _expired(shards, 0, 2)
    _expired(shards, 2, 1)
    with shards.connect(0) as conn:
        conn.execute("SELECT harvest.set_retention('30 days')")
    status, answer = _api("/admin/retention/run-now", {})
    assert status == 200, answer
    assert (answer["status"], answer["deleted"], answer["unavailable_shards"]) == ("partial", 2, [])
    assert [r["shard_id"] for r in answer["shards"]] == [0]
    errors = {e["shard_id"]: e for e in answer["shard_errors"]}
    assert sorted(errors) == [1, 2] and {e["error"] for e in errors.values()} == {"refused"}
    assert errors[1]["code"] == "invalid_argument" and "not configured" in errors[1]["message"]

    _expired(shards, 0, 1)
    web = _run(["--base-url", BASE, "--output", "json", "retention", "run-now"], {})
    assert web.exit_code == 2, web.stderr  # the first refusal's code, as over SQL
    assert json.loads(web.stdout)["deleted"] == 1, web.stdout
    assert "shard 1: retention is not configured" in web.stderr and "; shard 2: " in web.stderr
    _expired(shards, 0, 1)
    sql = _run(["--output", "json", "retention", "run-now"], _shard_env(shards))
    assert (web.stderr, web.exit_code) == (sql.stderr, sql.exit_code)
    assert _timeless(web.stdout) == _timeless(sql.stdout)


def test_retention_run_now_over_http_refused_everywhere_or_refused_and_unreachable(shards, served) -> None:
    """No shard done: every refusal named in the first one's error (its status), as the CLI over
    SQL raises it; a shard not reached beside a refusal is named too, never a silent 200."""
    status, answer = _api("/admin/retention/run-now", {})
    assert status == 400, answer
    message = answer["error"]["message"]
    assert all(f"shard {s}: retention is not configured" in message for s in (0, 1, 2)), message
    with shards.connect(0) as conn:
        conn.execute("SELECT harvest.set_retention('30 days')")
    shards.stop(2)
    try:
        status, answer = _api("/admin/retention/run-now", {})
        web = _run(["--base-url", BASE, "retention", "run-now"], {})
    finally:
        shards.start(2)
    assert status == 200 and answer["status"] == "partial", answer
    assert answer["unavailable_shards"] == [2]
    assert [(e["shard_id"], e["error"]) for e in answer["shard_errors"]] == [
        (1, "refused"),
        (2, "unreachable"),
    ]
    assert web.exit_code == 2, web.stderr
    assert "shard 1: retention is not configured" in web.stderr
    assert "shard(s) 2 could not be reached" in web.stderr


def test_release_owed_ends_over_http_goes_on_past_a_refusing_shard_as_over_sql(shards, served) -> None:
    """Shard 1 refuses the release (its function raises HR001): the route's answer was that
    error alone, shard 2's release done but not reported. Now shard 2's totals, shard 1's
    refusal in shard_errors, status partial; the CLI exits 2 naming shard 1, as over SQL."""
    for shard in (1, 2):
        with shards.connect(shard) as conn:
            conn.execute(
                "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, created_at,"
                " completed_at, end_owed_to_shard) SELECT harvest._new_execution_id(%s), 'kid',"
                " 'owed-' || n, 'COMPLETED', now(), now(), 0 FROM generate_series(1, 2) AS n",
                (shard,),
            )
    with shards.connect(1) as conn:
        conn.execute(
            "CREATE OR REPLACE FUNCTION harvest.release_owed_child_ends(p_parent_shard integer,"
            " p_batch_size integer DEFAULT 500, p_include_running boolean DEFAULT false,"
            " p_operator_id text DEFAULT NULL, p_force boolean DEFAULT false) RETURNS integer"
            " LANGUAGE plpgsql AS $$"
            " BEGIN RAISE EXCEPTION 'refused on this shard for the test' USING ERRCODE = 'HR001'; END $$"
        )
    # (shard 0 is alive here and stands for a retired one: forced past the probe)
    web = _run(["--base-url", BASE, "--output", "json", "shard", "release-owed-ends", "0", "--force"], {})
    assert web.exit_code == 2, web.stderr
    assert "shard 1: refused on this shard for the test" in web.stderr
    done = json.loads(web.stdout)  # what the CLI prints over SQL: the totals of the shards done
    assert (done["released"], done["unavailable_shards"]) == (2, []), done
    assert [r["shard_id"] for r in done["shards"]] == [2]
    status, answer = _api("/admin/shards/0/release-owed-ends", {"force": True})
    assert status == 200 and answer["status"] == "partial", answer
    assert [(r["shard_id"], r["released"]) for r in answer["shards"]] == [(2, 0)]
    assert [(e["shard_id"], e["error"], e["code"]) for e in answer["shard_errors"]] == [
        (1, "refused", "invalid_argument")
    ]


def test_retention_settings_over_http_names_a_refusing_shard_and_sets_the_others(shards, served) -> None:
    """A shard that refuses the settings write (its function raises HR001) made the whole
    answer that error, the other shards set but not said. Now they are said, the refusal named,
    status partial; the CLI exits with the refusal's code."""
    _refuse(shards, 2, "set_retention", "settings refused for the test")
    status, answer = _api("/admin/retention/settings", {"max_age": "7 days"})
    assert status == 200 and answer["status"] == "partial", answer
    assert [r["shard_id"] for r in answer["shards"]] == [0, 1]
    assert [(e["shard_id"], e["error"]) for e in answer["shard_errors"]] == [(2, "refused")]
    web = _run(["--base-url", BASE, "--output", "json", "retention", "set", "--max-age", "7 days"], {})
    assert web.exit_code == 2 and "shard 2: settings refused for the test" in web.stderr, web.stderr
    assert [r["shard_id"] for r in json.loads(web.stdout)["shards"]] == [0, 1]
    # Over SQL with [shards] the command answered the first refusal alone (its message, unnamed,
    # nothing printed): now as over HTTP.
    sql = _run(["--output", "json", "retention", "set", "--max-age", "7 days"], _shard_env(shards))
    assert (sql.stderr, sql.exit_code) == (web.stderr, web.exit_code)
    assert _timeless(sql.stdout) == _timeless(web.stdout)


def test_rate_limit_override_over_http_names_a_shard_that_refuses_and_keeps_the_others(
    shards, served
) -> None:
    """The activity is declared on shards 0 and 1 only: shard 2 refuses the override. The route
    answered that refusal alone (the override laid on 0 and 1 unsaid); now it answers both
    shards' rows, shard 2's refusal in shard_errors beside the unreachable ones, status
    partial, and the CLI prints the rows, names the refusal and exits with its code. A refused
    shard was reached: it is not named as one that could not be."""
    policies = json.dumps({"activities": {"charge": {"rate_limit": {"rps": 5, "burst": 5}}}})
    for shard in (0, 1):
        with shards.connect(shard) as conn:
            conn.execute("SELECT harvest.declare_flow_policies(%s)", (policies,))
    status, answer = _api("/admin/rate-limits/charge/override", {"rps": 7})
    assert status == 200 and answer["status"] == "partial", answer
    assert sorted(answer["shards"]) == ["0", "1"]
    assert [(e["shard_id"], e["error"]) for e in answer["shard_errors"]] == [(2, "refused")]
    # The sharding guide: the audit record of a call that missed a shard is marked failed. Each
    # shard that took it has its own row, and a second one: outcome failed, the shard missed.
    for shard in (0, 1):
        with shards.connect(shard) as conn:
            rows = conn.execute(
                "SELECT details->>'outcome', details->'missed_shards', "
                "details->'shard_errors'->0->>'code', route FROM harvest.audit_log "
                "WHERE operation = 'rate_limit.override' ORDER BY id"
            ).fetchall()
        assert [r[:3] for r in rows] == [(None, None, None), ("failed", [2], "not_found")], rows
        assert rows[1][3] == rows[0][3] == "POST /admin/rate-limits/{activity_name}/override"
    with shards.connect(2) as conn:
        assert conn.execute(
            "SELECT count(*) FROM harvest.audit_log WHERE operation LIKE 'rate_limit%'"
        ).fetchone() == (0,)
    web = _run(["--base-url", BASE, "--output", "json", "rate-limit", "override", "charge", "--rps", "8"], {})
    assert web.exit_code in (1, 2) and "shard 2: " in web.stderr, web.stderr
    assert "could not be reached" not in web.stderr
    printed = json.loads(web.stdout)
    assert [(r["shard_id"], r["override_rps"]) for r in printed["shards"]] == [(0, 8), (1, 8)]
    sql = _run(["--output", "json", "rate-limit", "override", "charge", "--rps", "8"], _shard_env(shards))
    assert (sql.stderr, sql.exit_code) == (web.stderr, web.exit_code)
    assert _timeless(sql.stdout) == _timeless(web.stdout)


def test_a_drain_over_http_names_a_shard_that_refuses_and_prints_the_others(shards, served) -> None:
    """A shard that refuses the drain made the route's whole answer that refusal, the drain
    written on the other shards unsaid; now their rows, the refusal in shard_errors, and the
    CLI prints the rows, names the refusal and exits with its code."""
    for shard in (0, 1, 2):
        with shards.connect(shard) as conn:
            conn.execute("SELECT harvest.register_worker('w', ARRAY['default'], 'host', 1, 60, '{}')")
    _refuse(shards, 1, "drain_worker", "drain refused for the test")
    status, answer = _api("/workers/w/drain", {})
    assert status == 200, answer
    assert [r["shard_id"] for r in answer["rows"]] == [0, 2]
    assert [(e["shard_id"], e["error"]) for e in answer["shard_errors"]] == [(1, "refused")]
    web = _run(["--base-url", BASE, "--output", "json", "worker", "drain", "w"], {})
    assert web.exit_code == 2 and "shard 1: drain refused for the test" in web.stderr, web.stderr
    assert [r["shard_id"] for r in json.loads(web.stdout)["workers"]] == [0, 2]
    sql = _run(["--output", "json", "worker", "drain", "w"], _shard_env(shards))
    assert (sql.stderr, sql.exit_code) == (web.stderr, web.exit_code)
    assert [r["shard_id"] for r in json.loads(sql.stdout)["workers"]] == [0, 2]


def test_a_sweep_longer_than_the_servers_shard_timeout_is_not_cut_off_and_called_unreachable(
    shards, served
) -> None:
    """run-now and release-owed-ends bounded each shard's whole write by the server's
    shard_timeout (5 s; a read's bound): a sweep or release of many batches taking longer was
    cancelled part way, its shard named unreachable (it was reached and partly written) and its
    batches done left out of the totals. Here the timeout is below any sweep's time, standing
    for a long one: each shard is written to its end all the same."""
    for shard in (0, 1, 2):
        _expired(shards, shard, 1)
        with shards.connect(shard) as conn:
            conn.execute("SELECT harvest.set_retention('30 days')")
    state = cli_http.TRANSPORT.app.state.harvest
    state.shard_timeout = 1e-9
    status, answer = _api("/admin/retention/run-now", {})
    assert status == 200, answer
    assert (answer["status"], answer["deleted"], answer["shard_errors"]) == ("complete", 3, []), answer
    status, answer = _api("/admin/shards/0/release-owed-ends", {"force": True})  # (shard 0 is alive here)
    assert status == 200 and answer["status"] == "complete" and answer["unavailable_shards"] == [], answer


def _dag(shards, shard: int, name: str) -> None:
    with shards.connect(shard) as conn:
        conn.execute(
            "INSERT INTO harvest.dags (dag_name, queue, first_registered_at, last_registered_at)"
            " VALUES (%s, 'default', now(), now())",
            (name,),
        )


def test_a_dag_pause_over_http_names_a_shard_that_refuses_and_pauses_the_others(shards, served) -> None:
    """The DAG is registered on every shard; shard 1 refuses the pause (its function raises
    HR001). The route answered that refusal alone (a 400), the pause made on shards 0 and 2
    unsaid; now it answers their outcome, the refusal in shard_errors, status partial. Refused
    on every shard that has it: the first refusal, naming each."""
    for shard in (0, 1, 2):
        _dag(shards, shard, "etl")
    _refuse(shards, 1, "pause_dag", "pause refused for the test")
    status, answer = _api("/dags/etl/pause", {})
    assert status == 200, answer
    assert (answer["changed"], answer["status"], sorted(answer["shards"])) == (True, "partial", ["0", "2"])
    refused = {"shard_id": 1, "error": "refused", "code": "invalid_argument"}
    assert answer["shard_errors"] == [{**refused, "message": "pause refused for the test"}]
    for shard in (0, 2):
        with shards.connect(shard) as conn:
            paused = conn.execute("SELECT paused FROM harvest.dags WHERE dag_name = 'etl'").fetchone()
        assert paused == (True,), shard

    # The CLI over HTTP: the pause made on shards 0 and 2 is printed, shard 1's refusal named,
    # exit its code (the adapter read `changed` alone: exit 0, the refusal unsaid), as every
    # write on every shard ends (cli.shards.report_shard_write).
    web = _run(["--base-url", BASE, "--output", "json", "dag", "pause", "etl"], {})
    assert web.exit_code == 2, (web.stdout, web.stderr)
    assert web.stderr == "error: shard 1: pause refused for the test\n", web.stderr
    assert [r["shard_id"] for r in json.loads(web.stdout)["shards"]] == [0, 2], web.stdout

    _refuse(shards, 0, "unpause_dag", "unpause refused on 0")
    _refuse(shards, 2, "unpause_dag", "unpause refused on 2")
    status, answer = _api("/dags/etl/unpause", {})
    assert status == 200 and answer["status"] == "partial", answer  # shard 1 unpaused (it was not paused)
    _refuse(shards, 1, "unpause_dag", "unpause refused on 1")
    status, answer = _api("/dags/etl/unpause", {})
    assert status == 400, answer
    message = answer["error"]["message"]
    assert all(f"shard {s}: unpause refused on {s}" in message for s in (0, 1, 2)), message


def test_a_dag_pause_over_http_with_a_shard_not_reached_prints_the_others_and_exits_1(shards, served) -> None:
    """Shard 1 cannot be reached: the server pauses shards 0 and 2 and answers partial, shard 1
    in shard_errors as unreachable. The CLI read ``changed`` alone and exited 0, the pause
    missing on shard 1 unsaid, where every other write on every shard (retention run-now, worker
    drain, the overrides) prints what was done and exits 1 naming the shard. Now as they do."""
    for shard in (0, 1, 2):
        _dag(shards, shard, "etl")
    shards.stop(1)
    try:
        paused = _run(["--base-url", BASE, "--output", "json", "dag", "pause", "etl"], {})
        unpaused = _run(["--base-url", BASE, "dag", "unpause", "etl"], {})
    finally:
        shards.start(1)
    assert paused.exit_code == 1, (paused.stdout, paused.stderr)
    assert "shard(s) 1 could not be reached and were not paused" in paused.stderr, paused.stderr
    printed = json.loads(paused.stdout)
    assert (printed["changed"], printed["status"], printed["unavailable_shards"]) == (True, "partial", [1])
    assert [(r["shard_id"], r["changed"]) for r in printed["shards"]] == [(0, True), (2, True)]
    assert unpaused.exit_code == 1, (unpaused.stdout, unpaused.stderr)
    assert "shard(s) 1 could not be reached and were not unpaused" in unpaused.stderr, unpaused.stderr


def test_a_shard_whose_write_fails_in_the_databases_own_words_is_named_beside_the_others(
    shards, served
) -> None:
    """A shard behind on its schema (the settings function missing there: SQLSTATE 42883, no
    Harvest code) failed the write with a database error that is no HarvestError: the route
    answered that error alone (a 503 saying to migrate), the settings laid on shards 0 and 1
    unsaid, as before refusals were kept apart. It is that shard's outcome like any refusal:
    the others said, status partial, its error in shard_errors; the CLI names it, over HTTP as
    over SQL."""
    with shards.connect(2) as conn:
        for (signature,) in conn.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p WHERE p.proname = 'set_retention'"
            " AND p.pronamespace = 'harvest'::regnamespace"
        ).fetchall():
            conn.execute(f"DROP FUNCTION {signature}")
    status, answer = _api("/admin/retention/settings", {"max_age": "7 days"})
    assert status == 200 and answer["status"] == "partial", (status, answer)
    assert [r["shard_id"] for r in answer["shards"]] == [0, 1]
    [error] = answer["shard_errors"]
    assert (error["shard_id"], error["error"], error["code"]) == (2, "refused", "schema_mismatch"), error
    assert "harvest migrate run" in error["message"], error
    web = _run(["--base-url", BASE, "--output", "json", "retention", "set", "--max-age", "7 days"], {})
    assert web.exit_code == 1 and "shard 2: " in web.stderr, web.stderr
    assert "harvest migrate run" in web.stderr, web.stderr
    assert [r["shard_id"] for r in json.loads(web.stdout)["shards"]] == [0, 1]
    sql = _run(["--output", "json", "retention", "set", "--max-age", "7 days"], _shard_env(shards))
    assert (sql.stderr, sql.exit_code) == (web.stderr, web.exit_code)
    assert _timeless(sql.stdout) == _timeless(web.stdout)


def _both(env: dict[str, str], *args: str) -> tuple[Result, Result]:
    """``args`` over SQL with ``env``'s [shards], then over HTTP to the served sharded app."""
    return _run(list(args), env), _run(["--base-url", BASE, *args], {})


def _alike(sql: Result, web: Result) -> None:
    assert (web.stdout, web.stderr, web.exit_code) == (sql.stdout, sql.stderr, sql.exit_code), (
        sql.output,
        web.output,
    )


def _paused_on(shards, name: str, read=(0, 1, 2)) -> dict[int, bool]:
    found = {}
    for shard in read:
        with shards.connect(shard) as conn:
            row = conn.execute("SELECT paused FROM harvest.dags WHERE dag_name = %s", (name,)).fetchone()
        if row is not None:
            found[shard] = row[0]
    return found


def test_dag_pause_over_sql_with_shards_pauses_every_shard_as_over_http(shards, served) -> None:
    """`dag pause|unpause` over SQL opened one database (HARVEST_DATABASE_URL's; with [shards]
    naming every shard's url and no such DSN, 'no database given'): a DAG paused "everywhere"
    over HTTP and "on shard 0 only" over SQL. Now every shard that has the DAG, as the server
    does, and the same ending: a shard that refuses or cannot be reached named, what the others
    did printed, the same exit code."""
    env = {**_shard_env(shards), "HARVEST_DATABASE_URL": shards.dsns[0]}  # shard 0's DSN as well
    for shard in (0, 2):  # not registered on shard 1: nothing to do there, no refusal
        _dag(shards, shard, "etl")
    sql = _run(["--output", "json", "dag", "pause", "etl"], env)
    assert sql.exit_code == 0, sql.output
    assert json.loads(sql.stdout) == {"dag_name": "etl", "paused": True, "changed": True}
    assert _paused_on(shards, "etl") == {0: True, 2: True}
    sql_unpause = _run(["dag", "unpause", "etl"], env)
    assert sql_unpause.exit_code == 0 and _paused_on(shards, "etl") == {0: False, 2: False}
    _alike(sql, _run(["--base-url", BASE, "--output", "json", "dag", "pause", "etl"], {}))
    _alike(sql_unpause, _run(["--base-url", BASE, "dag", "unpause", "etl"], {}))

    missing = _both(env, "dag", "pause", "nope")
    assert missing[0].exit_code == missing[1].exit_code != 0, missing[0].output
    assert "no DAG 'nope' is registered on any shard" in missing[0].stderr, missing[0].stderr

    # A shard not reached: the others paused, it named, exit 1, over either transport.
    _dag(shards, 1, "etl")
    shards.stop(1)
    try:
        sql = _run(["--output", "json", "dag", "pause", "etl"], env)
        sql_unpause = _run(["dag", "unpause", "etl"], env)
        assert _paused_on(shards, "etl", read=(0, 2)) == {0: False, 2: False}
        web = _run(["--base-url", BASE, "--output", "json", "dag", "pause", "etl"], {})
        web_unpause = _run(["--base-url", BASE, "dag", "unpause", "etl"], {})
    finally:
        shards.start(1)
    _served_reads_every_shard()
    assert sql.exit_code == 1 and "shard(s) 1 could not be reached and were not paused" in sql.stderr
    assert [(r["shard_id"], r["changed"]) for r in json.loads(sql.stdout)["shards"]] == [(0, True), (2, True)]
    _alike(sql, web)
    _alike(sql_unpause, web_unpause)

    # A shard that refuses: the others paused, its refusal named, its exit code.
    _refuse(shards, 1, "pause_dag", "pause refused for the test")
    sql = _run(["--output", "json", "dag", "pause", "etl"], env)
    assert sql.exit_code == 2 and sql.stderr == "error: shard 1: pause refused for the test\n", sql.output
    assert _paused_on(shards, "etl") == {0: True, 1: False, 2: True}
    assert _run(["dag", "unpause", "etl"], env).exit_code == 0
    _alike(sql, _run(["--base-url", BASE, "--output", "json", "dag", "pause", "etl"], {}))


def test_the_other_dag_commands_over_sql_with_shards_act_where_the_server_does(shards, served) -> None:
    """`dag list` read one database (or none: 'no database given'), where the server lists every
    shard's DAGs; `dag get|retry` of a run on shard 1 looked for it in that one database, where
    the server routes by the run's id; `dag trigger` started it there, where the server starts
    it on the default shard. Now each over SQL as over HTTP."""
    env = _shard_env(shards)
    for shard in (0, 1, 2):
        _dag(shards, shard, f"etl{shard}")
    _dag(shards, 2, "etl0")
    for o in ("table", "json"):
        _alike(*_both(env, "dag", "list", "--output", o))
    listed = json.loads(_run(["dag", "list", "--output", "json"], env).stdout)
    assert [(r["dag_name"], r["shard_id"]) for r in listed["dags"]] == [
        ("etl0", 0),
        ("etl0", 2),
        ("etl1", 1),
        ("etl2", 2),
    ]
    shards.stop(1)
    try:
        sql, web = _both(env, "dag", "list", "--output", "json")
    finally:
        shards.start(1)
    _served_reads_every_shard()
    _alike(sql, web)
    assert json.loads(sql.stdout)["unavailable_shards"] == [1] and "shard(s) 1" in sql.stderr

    with shards.connect(1) as conn:
        (run_id,) = conn.execute(
            "SELECT execution_id FROM harvest.trigger_dag('etl1', '{}', NULL, 'ops')"
        ).fetchone()
    for o in ("table", "json"):
        got = _both(env, "dag", "get", str(run_id), "--output", o)
        assert got[0].exit_code == 0, got[0].output
        _alike(*got)
    retried = _both(env, "dag", "retry", str(run_id))  # a running run: refused by its own shard
    assert retried[0].exit_code != 0 and "no database" not in retried[0].stderr, retried[0].output
    _alike(*retried)

    started = _run(
        ["--output", "json", "dag", "trigger", "etl2", "--workflow-id", "t-2"],
        {**env, "HARVEST_SHARDS__DEFAULT": "2"},
    )
    assert started.exit_code == 0, started.output
    with shards.connect(2) as conn:
        row = conn.execute("SELECT id FROM harvest.executions WHERE workflow_id = 't-2'").fetchone()
    assert row is not None and str(row[0]) == json.loads(started.stdout)["execution_id"]


def test_dag_trigger_starts_the_run_on_the_shard_named_over_either_transport(shards, served) -> None:
    """The trigger route takes a shard (``shard_id``); `dag trigger` had no way to name one and
    always started on the default shard. `--shard-id N` starts it on shard N, over SQL with
    [shards] as over HTTP; a shard that does not have the DAG refuses it."""
    env = _shard_env(shards)
    for shard in (0, 1):
        _dag(shards, shard, "etl")
    over_sql = _run(
        ["--output", "json", "dag", "trigger", "etl", "--shard-id", "1", "--workflow-id", "s-1"], env
    )
    over_http = _run(
        [
            "--base-url",
            BASE,
            "--output",
            "json",
            "dag",
            "trigger",
            "etl",
            "--shard-id",
            "1",
            "--workflow-id",
            "h-1",
        ],
        {},
    )
    for started, workflow_id in ((over_sql, "s-1"), (over_http, "h-1")):
        assert started.exit_code == 0, started.output
        with shards.connect(1) as conn:
            row = conn.execute(
                "SELECT id FROM harvest.executions WHERE workflow_id = %s", (workflow_id,)
            ).fetchone()
        assert row is not None and str(row[0]) == json.loads(started.stdout)["execution_id"]
    refused = _both(env, "dag", "trigger", "etl", "--shard-id", "2")
    assert refused[0].exit_code != 0 and refused[0].exit_code == refused[1].exit_code, refused[0].output


def test_tokens_over_sql_with_shards_live_on_the_default_shard_as_the_server_reads_them(
    shards, served
) -> None:
    """The server keeps API tokens on the default shard (where its authorizer reads them); `token
    create|list|revoke` over SQL with [shards] opened HARVEST_DATABASE_URL's database (none
    given: 'no database given'). Now the default shard, over either transport."""
    env = {**_shard_env(shards), "HARVEST_SHARDS__DEFAULT": "2"}
    made = _run(["--output", "json", "token", "create", "ops", "--scope", "read"], env)
    assert made.exit_code == 0, made.output
    with shards.connect(2) as conn:
        assert conn.execute("SELECT count(*) FROM harvest.api_tokens WHERE name = 'ops'").fetchone() == (1,)
    listed = _run(["--output", "json", "token", "list"], env)
    assert [t["name"] for t in json.loads(listed.stdout)["tokens"]] == ["ops"], listed.output
    assert _run(["token", "revoke", "ops"], env).exit_code == 0


def test_drain_preview_over_http_tags_each_row_with_its_shard_as_over_sql(shards, served) -> None:
    """`worker drain-preview` over HTTP to a sharded server printed the server's rows with their
    shard dropped and no word of a shard it could not read; over SQL with [shards] each row
    carries its shard_id and a partial answer warns. Now the same over either transport."""
    env = _shard_env(shards)
    for shard in (1, 2):
        with shards.connect(shard) as conn:
            conn.execute("SELECT harvest.register_worker('w-pre', ARRAY['default'], 'host', 1, 60, '{}')")
    for o in ("table", "json"):
        _alike(*_both(env, "worker", "drain-preview", "--output", o))
    sql = _run(["worker", "drain-preview", "--output", "json"], env)
    assert sorted(r["shard_id"] for r in json.loads(sql.stdout)["workers"]) == [1, 2], sql.output
    shards.stop(1)
    try:
        for o in ("table", "json"):
            sql, web = _both(env, "worker", "drain-preview", "--output", o)
            _alike(sql, web)
            # Why, over either transport (the route sends unavailable_reasons, as a merged read's).
            assert "shard(s) 1 could not be read (shard 1: " in sql.stderr, sql.stderr
    finally:
        shards.start(1)


def test_schedule_list_over_http_to_a_sharded_server_shows_each_shard_as_over_sql(shards, served) -> None:
    """`schedule list` showed the shard_id column when the CLI's own config had [shards] only:
    over HTTP to a sharded server (no [shards] here) the rows of every shard printed without
    their shard. Now whether the deployment is sharded is the server's word over HTTP."""
    env = _shard_env(shards)
    for name in ("nightly", "hourly", "weekly"):
        made = _run(["schedule", "create-workflow", "--name", name, "--every", "1h"], env)
        assert made.exit_code == 0, made.output
    for o in ("table", "json"):
        sql, web = _both(env, "schedule", "list", "--output", o)
        assert sql.exit_code == 0 and "shard_id" in sql.stdout.lower(), sql.output
        _alike(sql, web)


def test_erase_payloads_with_a_base_url_speaks_http_whatever_shards_the_config_names(shards, served) -> None:
    """`workflow erase-payloads` chose SQL whenever the config had [shards], before it looked at
    --base-url or HARVEST_URL: with a [shards] section left on the host (shard urls the CLI
    cannot reach), `--base-url` still dialled the databases and failed, where every other
    command speaks HTTP. Now the transport is chosen first, as for every command."""
    with shards.connect(1) as conn:
        (run_id,) = conn.execute(
            "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, created_at,"
            " completed_at, input) VALUES (harvest._new_execution_id(1), 'old', 'erase-me', 'COMPLETED',"
            " now(), now(), '[\"secret\"]') RETURNING id"
        ).fetchone()
    unreachable = {f"HARVEST_SHARDS__URLS__{s}": "postgresql://127.0.0.1:1/none" for s in (0, 1, 2)}
    env = {**_shard_env(shards), **unreachable, "HARVEST_SHARDS__CLI_TIMEOUT": "1"}
    erased = _run(["--base-url", BASE, "--output", "json", "workflow", "erase-payloads", str(run_id)], env)
    assert erased.exit_code == 0, erased.output
    with shards.connect(1) as conn:
        (stored,) = conn.execute("SELECT input FROM harvest.executions WHERE id = %s", (run_id,)).fetchone()
    assert "secret" not in json.dumps(stored), stored


def test_version_usage_with_a_shard_down_prints_over_http_what_it_prints_over_sql(shards, served) -> None:
    """`version-usage` with a shard not read is a deploy blocker (exit 1) either way, but over
    HTTP the answer was thrown away for one error line, where over SQL the runs the other
    shards hold are printed (status partial, the shard named) before the exit 1. Now the same."""
    from tests.shard.test_cli_shards import _version_marker

    for s in (0, 2):
        _version_marker(shards, s, "tax", 1)
    env = _shard_env(shards)
    for o in ("table", "json"):
        _alike(*_both(env, "version-usage", "--change-id", "tax", "--output", o))
    shards.stop(2)
    try:
        for o in ("table", "json"):
            sql, web = _both(env, "version-usage", "--change-id", "tax", "--output", o)
            assert sql.exit_code == 1 and "shard(s) 2 could not be read" in sql.stderr, sql.output
            _alike(sql, web)
    finally:
        shards.start(2)


def test_the_web_faces_read_tokens_on_the_default_shard_where_they_are_written(shards) -> None:
    """The token routes and `harvest token` write on the default shard; the authorizer read
    HARVEST_DATABASE_URL's database (shard 0's), so with shards.default another shard a token
    made was never accepted. Now it reads the default shard's database too."""
    from harvest.web.auth import token_database

    env = {**_shard_env(shards), "HARVEST_SHARDS__DEFAULT": "2"}
    assert token_database(None, load_config(env=env)) == shards.dsns[2]
    assert token_database(shards.dsns[0], load_config(env=env)) == shards.dsns[2]
    assert token_database("postgresql://one/db", load_config(env={})) == "postgresql://one/db"


def test_dag_trigger_on_a_shard_not_configured_is_one_line_and_exit_2_over_either_transport(
    shards, served
) -> None:
    """`dag trigger --shard-id N` for an N that is no shard of the deployment: one line naming
    it, exit 2 (a bad argument), the same over SQL with [shards] and over HTTP."""
    env = _shard_env(shards)
    _dag(shards, 0, "etl")
    for result in _both(env, "dag", "trigger", "etl", "--shard-id", "9"):
        assert result.exit_code == 2, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "9" in lines[0], result.stderr
        assert "Traceback" not in result.output


def test_workflow_count_counts_a_moved_run_once_as_the_list_lists_it(shards, served) -> None:
    """A run moved from shard 0 to shard 1 has its MIGRATED seal on 0 beside its live row on 1.
    `workflow list` shows it once; `workflow count` counted the seal too (one run, two counted),
    over SQL and over HTTP. The count now counts the seals only when --state MIGRATED asks."""
    from rebalance_helpers import park

    from harvest.shard import ShardPools, ShardRouter
    from harvest.shard.rebalance import Rebalancer

    env = _shard_env(shards)
    moved = park(shards.dsns[0], "count-moved")
    park(shards.dsns[0], "count-stays")
    with ShardPools(ShardRouter([0, 1, 2], [0, 1, 2], 0), shards.dsns, max_size=2) as pools:
        report = Rebalancer(pools, 0, 1).run(execution_ids=[moved])
    assert [(m.execution_id, m.outcome) for m in report.moves] == [(moved, "moved")], report.as_dict()

    def both(*args: str) -> dict:
        sql = _run([*args, "--output", "json"], env)
        web = _run(["--base-url", BASE, *args, "--output", "json"], {})
        assert sql.exit_code == web.exit_code == 0, (sql.stderr, web.stderr)
        return {"sql": json.loads(sql.stdout), "web": json.loads(web.stdout)}

    listed = both("workflow", "list", "--workflow-name", "rb_wf")
    counted = both("workflow", "count", "--workflow-name", "rb_wf", "--by", "all")
    for transport in ("sql", "web"):
        runs = sorted(r["execution_id"] for r in listed[transport]["executions"])
        assert len(runs) == 2 and moved in runs
        counts = {(r["status"], r["workflow_name"]): r["executions"] for r in counted[transport]["counts"]}
        assert counts == {("RUNNING", "rb_wf"): 2}, (transport, counts)
    by_name = both("workflow", "count", "--workflow-name", "rb_wf", "--by", "workflow_name")
    assert [r["executions"] for t in ("sql", "web") for r in by_name[t]["counts"]] == [2, 2]
    seals = both("workflow", "count", "--state", "MIGRATED", "--by", "all")
    for transport in ("sql", "web"):
        assert [(r["status"], r["executions"]) for r in seals[transport]["counts"]] == [("MIGRATED", 1)]


def _dead_letters(shards, counts: dict[int, int]) -> None:
    """``counts[shard]`` dead letters on each shard, of a run started there (ids 1.. on each)."""
    for shard, n in counts.items():
        started = _run(
            ["workflow", "start", "greet", "--shard-id", str(shard), "--workflow-id", f"dl{shard}"],
            _shard_env(shards),
        )
        assert started.exit_code == 0, started.stderr
        with shards.connect(shard) as conn:
            conn.execute(
                "INSERT INTO harvest.dead_letters (execution_id, workflow_name, seq, activity_name, queue,"
                " attempts, failure, scheduled_at, failed_at)"
                " SELECT id, workflow_name, n, 'act', 'default', 3, '{}', now(), now()"
                " FROM harvest.executions, generate_series(1, %s) AS n WHERE workflow_id = %s",
                (n, f"dl{shard}"),
            )


def _ids(shards, shard: int) -> list[int]:
    with shards.connect(shard) as conn:
        return [r[0] for r in conn.execute("SELECT id FROM harvest.dead_letters ORDER BY id")]


def test_dlq_by_id_without_a_shard_acts_only_on_the_one_shard_holding_it(shards, served) -> None:
    """A dead letter's id is unique on its shard only. Without --shard-id, `dlq replay` and
    `dlq discard` (and `get`) search every shard, over SQL and over HTTP alike: exactly one shard
    holding the id is acted on and named; several are refused (exit 2) naming them; none is
    NotFound naming the shards searched; a shard that cannot be searched is refused, nothing done
    (it may hold the id too). It used to act on the default shard's row of that id."""
    _dead_letters(shards, {0: 1, 1: 1, 2: 4})  # id 1 on every shard; 2, 3 and 4 on shard 2 only
    env = _shard_env(shards)
    for transport, env_of in (([], env), (["--base-url", BASE], {})):
        for action in ("discard", "replay", "get"):
            refused = _run([*transport, "dlq", action, "1"], env_of)
            assert refused.exit_code == 2, (transport, refused.output)
            assert "dead letter 1 is on shards 0, 1, 2" in refused.stderr and "--shard-id" in refused.stderr
        missing = _run([*transport, "dlq", "discard", "99"], env_of)
        assert missing.exit_code != 0 and "searched shard(s) 0, 1, 2" in missing.stderr, missing.output
    assert (_ids(shards, 0), _ids(shards, 1), _ids(shards, 2)) == ([1], [1], [1, 2, 3, 4])  # nothing done

    replayed = _run(["dlq", "replay", "2"], env)
    assert replayed.exit_code == 0 and "replayed dead letter 2 on shard 2 as task" in replayed.stdout
    discarded = _run(["--base-url", BASE, "dlq", "discard", "3", "--output", "json"], {})
    assert discarded.exit_code == 0, discarded.output
    assert json.loads(discarded.stdout) == {"dead_letter_id": 3, "shard_id": 2, "discarded": True}
    got = _run(["--base-url", BASE, "dlq", "get", "4", "--output", "json"], {})
    assert got.exit_code == 0 and json.loads(got.stdout)["id"] == 4, got.output
    # --shard-id still names one shard's row, whatever the others hold.
    named = _run(["dlq", "discard", "1", "--shard-id", "1"], env)
    assert named.exit_code == 0 and "discarded dead letter 1 on shard 1" in named.stdout, named.output
    assert (_ids(shards, 0), _ids(shards, 1), _ids(shards, 2)) == ([1], [], [1, 4])

    shards.stop(1)  # shard 1 may hold id 4 too: searched incompletely, nothing is done
    try:
        for transport, env_of in (([], env), (["--base-url", BASE], {})):
            down = _run([*transport, "dlq", "discard", "4"], env_of)
            assert down.exit_code == 1, (transport, down.output)
            assert "it is on shard 2, and shard(s) 1 could not be searched and may hold" in down.stderr
            # why, over SQL; over HTTP the server's log has it (docs/security.md)
            assert ("(shard 1: " in down.stderr) is not bool(transport), (transport, down.stderr)
    finally:
        shards.start(1)
    assert _ids(shards, 2) == [1, 4]


def test_a_partial_warning_says_why_a_shard_is_missing_without_its_secret(shards, monkeypatch) -> None:
    """A fan-out read with a shard missing warns "partial" with that shard's reason (a refused
    login reads as one, not as a server down), over SQL and over HTTP alike, and never its
    password: it used to name the shard only."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(shards.dsns[1])
    host = parts.netloc.rsplit("@", 1)[-1]
    bad = urlunsplit(parts._replace(netloc=f"nosuchlogin:s3cret-pw@{host}"))
    env = {**_shard_env(shards), "HARVEST_SHARDS__URLS__1": bad}
    app = management_app(config=load_config(env=env), profile="dev")
    with TestClient(app, base_url=BASE) as client:
        monkeypatch.setattr(cli_http, "TRANSPORT", client._transport)
        for transport, env_of in (([], env), (["--base-url", BASE], {})):
            listed = _run([*transport, "workflow", "list"], env_of)
            assert listed.exit_code == 0, listed.output
            warning = listed.stderr
            assert "warning: partial: shard(s) 1 could not be read (shard 1: " in warning, (
                transport,
                warning,
            )
            reason = 'its database cannot be reached now (role "nosuchlogin" does not exist)'
            assert f"(shard 1: {reason})" in warning, warning
            assert "s3cret-pw" not in warning, warning
