"""`harvest shard health` and `harvest preflight` across shards, on three real servers: one row
per configured shard with its roles, reachability, schema, live workers, coverage, pressure,
stranded work and reason codes; exit 0 when every writable shard and the candidate are ready,
2 when the worst is degraded (no live worker, a candidate not migrated), 1 when one is
unavailable (stopped, another shard's database, no url). The stranded-work gauge counts
claimable work on a queue no live worker of that shard polls."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from rebalance_helpers import park

from harvest.cli.main import main
from harvest.shard.health import stranded_work

pytestmark = pytest.mark.shard


def _env(shards, readable=(0, 1), writable=(0, 1), urls=None, **extra) -> dict[str, str]:
    urls = urls if urls is not None else {s: shards.dsns[s] for s in readable}
    env = {
        "HARVEST_DATABASE_URL": "",
        "HARVEST_SHARDS__READABLE": ",".join(map(str, readable)),
        "HARVEST_SHARDS__WRITABLE": ",".join(map(str, writable)),
        **{f"HARVEST_SHARDS__URLS__{s}": dsn for s, dsn in urls.items()},
    }
    env.update(extra)
    return env


def _run(env: dict[str, str], *args: str):
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def _health(env: dict[str, str], *args: str) -> tuple[int, dict]:
    result = _run(env, "--output", "json", "shard", "health", *args)
    return result.exit_code, json.loads(result.output)


def _live_worker(shards, shard: int, queue: str = "default", worker_id: str | None = None) -> None:
    with shards.connect(shard) as conn:
        conn.execute(
            "SELECT harvest.register_worker(%s, ARRAY[%s], 'host', 1, 60, '{}')",
            (worker_id or f"w{shard}", queue),
        )


def _row(data: dict, shard: int) -> dict:
    return next(r for r in data["shards"] if r["shard_id"] == shard)


def test_every_writable_shard_ready_exits_0_with_one_row_per_shard(shards) -> None:
    for shard in (0, 1):
        _live_worker(shards, shard)
    code, data = _health(_env(shards))
    assert code == 0, data
    assert data["readiness"] == "ready"
    assert [r["shard_id"] for r in data["shards"]] == [0, 1]
    zero, one = _row(data, 0), _row(data, 1)
    assert zero["roles"] == ["readable", "writable", "default"] and one["roles"] == ["readable", "writable"]
    for row in (zero, one):
        assert row["reachable"] and row["schema"]["ready"] and row["schema"]["identity_matches"]
        assert row["workers"] == {"live": 1, "stale": 0, "draining": 0}
        assert row["reason_codes"] == [] and row["readiness"] == "ready"
        assert row["stranded_pending"] == 0
        assert row["scheduler"]["status"] == "not_applicable"  # no schedule
    table = _run(_env(shards), "shard", "health")
    assert table.exit_code == 0 and "readiness: ready" in table.output


def test_a_schedule_no_scheduler_fires_is_scheduler_stale_and_degrades_its_shard(shards) -> None:
    """Scheduler freshness was reported as "not applicable (this Harvest has no schedules)" on
    every shard, whatever its schedules: a shard whose due schedules nobody fired read ready."""
    for shard in (0, 1):
        _live_worker(shards, shard)
    with shards.connect(0) as conn:
        conn.execute("SELECT harvest.create_schedule('hourly', 'report', p_interval_secs => 3600)")
        conn.execute(
            "UPDATE harvest.schedules SET next_fire_at = now() + interval '1 hour', "
            "next_due_at = now() + interval '1 hour'"
        )
    code, data = _health(_env(shards))
    assert code == 0, data
    fresh = _row(data, 0)["scheduler"]
    assert (fresh["status"], fresh["active"]) == ("fresh", 1)
    assert _row(data, 1)["scheduler"]["status"] == "not_applicable"

    with shards.connect(0) as conn:  # its slot came due five minutes ago and nothing fired it
        conn.execute("UPDATE harvest.schedules SET next_due_at = now() - interval '5 minutes'")
    code, data = _health(_env(shards))
    assert code == 2 and data["readiness"] == "degraded"
    zero = _row(data, 0)
    assert zero["reason_codes"] == ["scheduler_stale"] and zero["readiness"] == "degraded"
    assert (zero["scheduler"]["status"], zero["scheduler"]["active"]) == ("stale", 1)
    assert zero["scheduler"]["overdue_secs"] >= 300
    assert _row(data, 1)["readiness"] == "ready"
    table = _run(_env(shards), "shard", "health")
    assert table.exit_code == 2 and "shard 0: stale, 1 unpaused schedule(s)" in table.output

    with shards.connect(0) as conn:  # a paused schedule is not the scheduler's to fire
        conn.execute("SELECT harvest.pause_schedule('hourly')")
    code, data = _health(_env(shards))
    assert code == 0 and _row(data, 0)["scheduler"]["status"] == "not_applicable"


def test_a_shard_whose_functions_predate_scheduler_freshness_is_still_inspected(shards, monkeypatch) -> None:
    """get_shard_health's ``schedules`` came with no migration (the schema version stayed): a
    shard migrated by a release before it answers without the key, and its row raised KeyError
    out of shard_health, so `harvest shard health` (and preflight) answered no shard at all.
    Its scheduler freshness is now unknown, with what to run, and its readiness stands."""
    from harvest.db.sqlapi import SqlApi

    for shard in (0, 1):
        _live_worker(shards, shard)
    answer = SqlApi.get_shard_health

    def older(self, *args, **kwargs):
        facts = dict(answer(self, *args, **kwargs))
        if facts["shard_id"] == 1:
            facts.pop("schedules")
        return facts

    monkeypatch.setattr(SqlApi, "get_shard_health", older)
    code, data = _health(_env(shards))
    assert code == 0 and data["readiness"] == "ready", data
    scheduler = _row(data, 1)["scheduler"]
    assert scheduler["status"] == "unknown" and "harvest migrate run" in scheduler["reason"], scheduler
    assert _row(data, 1)["reason_codes"] == [] and _row(data, 0)["scheduler"]["status"] == "not_applicable"
    table = _run(_env(shards), "shard", "health")
    assert table.exit_code == 0 and "readiness: ready" in table.output


def test_a_writable_shard_with_no_live_worker_is_degraded_exit_2_and_its_work_is_stranded(shards) -> None:
    _live_worker(shards, 0)
    with shards.connect(1) as conn:
        conn.execute("SELECT harvest.start_workflow('stuck', p_workflow_id => 'x')")
    code, data = _health(_env(shards))
    assert code == 2
    assert data["readiness"] == "degraded"
    one = _row(data, 1)
    assert one["readiness"] == "degraded"
    assert one["reason_codes"] == ["no_live_worker", "stranded_work"]
    assert one["stranded"] == [{"queue": "default", "pending": 1}] and one["stranded_pending"] == 1
    assert one["pressure"]["pending"] == 1
    assert _row(data, 0)["readiness"] == "ready"
    # The gauge alone, per shard and queue (what a metrics exporter reads).
    assert stranded_work({0: shards.dsns[0], 1: shards.dsns[1]}) == {0: {}, 1: {"default": 1}}
    # A live worker on the queue drains it: nothing stranded, ready.
    _live_worker(shards, 1)
    code, data = _health(_env(shards))
    assert code == 0 and _row(data, 1)["stranded_pending"] == 0


def test_a_declared_queue_with_no_live_worker_is_reported(shards) -> None:
    _live_worker(shards, 0)
    _live_worker(shards, 1, queue="reports")
    _live_worker(shards, 1, queue="default", worker_id="gone")
    with shards.connect(1) as conn:
        conn.execute("SELECT harvest.stop_worker('gone')")
    code, data = _health(_env(shards))
    assert code == 2
    one = _row(data, 1)
    assert one["reason_codes"] == ["queue_uncovered"]
    assert one["queue_coverage"]["unpolled"] == ["default"]


def test_a_stopped_shard_is_unreachable_exit_1_and_the_others_still_answer(shards) -> None:
    for shard in (0, 1):
        _live_worker(shards, shard)
    shards.stop(1)
    try:
        code, data = _health(_env(shards))
    finally:
        shards.start(1)
    assert code == 1
    assert data["readiness"] == "unavailable"
    one = _row(data, 1)
    assert (
        not one["reachable"] and one["reason_codes"] == ["unreachable"] and one["readiness"] == "unavailable"
    )
    assert "password" not in json.dumps(data)
    assert _row(data, 0)["readiness"] == "ready"


def _aim_a_child(shards, parent_shard: int, target: int, workflow_id: str) -> None:
    """A cross-shard child row on the parent's shard, as its pump drives it (no run needed)."""
    with shards.connect(parent_shard) as conn:
        conn.execute(
            "INSERT INTO harvest.cross_shard_children (child_execution_id, parent_execution_id, parent_seq,"
            " target_shard, workflow_name, workflow_id, queue, input, parent_close_policy, created_at)"
            " VALUES (harvest._new_execution_id(%s), harvest._new_execution_id(%s), 1, %s, 'child', %s,"
            " 'default', '[]', 'abandon', now())",
            (target, parent_shard, target, workflow_id),
        )


def test_the_retire_check_of_a_shard_reads_the_children_aimed_at_it_and_the_ends_it_owes(shards) -> None:
    """docs/runbooks/shard-decommission.md step 5: `harvest shard health --retiring-shard N` is
    the check, each shard's children both ways in its row; its exit code is the check's (0 clear,
    2 not yet, 1 cannot tell), whatever the writable shards' readiness (no worker here)."""
    env = _env(shards, readable=(0, 1, 2), writable=(0, 2))
    code, data = _health(env, "--retiring-shard", "1")
    assert code == 0, data
    clear = data["retiring"]
    assert (clear["shard"], clear["clear"]) == (1, True), clear
    assert clear["owed_ends"] == clear["children"] == clear["unread"] == clear["unread_reasons"] == [], clear
    assert data["readiness"] == "degraded", "no live worker: the report's readiness is not the exit code"
    _aim_a_child(shards, 2, 1, "on-1")
    _aim_a_child(shards, 2, 0, "on-0")  # (aimed at another shard: not the retiring one's)
    with shards.connect(1) as conn:  # a child on 1 of a parent on shard 0, still running
        conn.execute(
            "UPDATE harvest.executions SET end_owed_to_shard = 0 WHERE id = %s",
            (park(shards.dsns[1], "owes"),),
        )
    code, data = _health(env, "--retiring-shard", "1")
    assert code == 2, data
    assert data["retiring"]["clear"] is False
    assert data["retiring"]["children"] == [{"parent_shard": 2, "children": 1}]
    assert data["retiring"]["owed_ends"] == [{"parent_shard": 0, "ended": 0, "running": 1}]
    assert _row(data, 2)["children"] == {
        "driving": [{"target_shard": 0, "children": 1}, {"target_shard": 1, "children": 1}],
        "owed_ends": [],
    }
    assert _row(data, 1)["children"]["owed_ends"] == [{"parent_shard": 0, "ended": 0, "running": 1}]
    table = _run(env, "shard", "health", "--retiring-shard", "1")
    assert table.exit_code == 2
    assert "retiring shard 1: NOT clear: shard 2 drives 1 cross-shard child(ren) on it" in table.output
    assert "it owes 1 child end(s) to parents on shard 0 (1 still running)" in table.output
    # Without --retiring-shard the exit code is the readiness again.
    assert _run(env, "shard", "health").exit_code == 2
    with shards.connect(1) as conn:
        conn.execute("UPDATE harvest.executions SET end_owed_to_shard = NULL")
    with shards.connect(2) as conn:
        conn.execute("DELETE FROM harvest.cross_shard_children WHERE target_shard = 1")
    assert _health(env, "--retiring-shard", "1")[0] == 0
    # A shard it cannot read may drive a child on it: it cannot tell (exit 1), never "clear".
    shards.stop(2)
    try:
        code, data = _health(env, "--retiring-shard", "1")
        table = _run(env, "shard", "health", "--retiring-shard", "1")
    finally:
        shards.start(2)
    assert code == 1 and data["retiring"]["clear"] is None and data["retiring"]["unread"] == [2], data
    assert data["retiring"]["unread_reasons"] == [{"shard_id": 2, "reason": "unreachable"}]
    assert table.exit_code == 1
    said = "retiring shard 1: cannot tell: shard 2 not read (unreachable: its database did not answer; "
    assert said in table.output, table.output
    code, data = _health(_env(shards, readable=(0, 2), writable=(0, 2)), "--retiring-shard", "1")
    assert code == 1 and data["retiring"]["unread"] == [1], "the retiring shard itself is not configured"


def test_a_readable_only_shard_does_not_gate_unless_it_is_the_candidate(shards) -> None:
    _live_worker(shards, 0)
    env = _env(shards, readable=(0, 2), writable=(0,))
    code, data = _health(env)
    assert code == 0, "shard 2 is readable only and not the candidate"
    assert _row(data, 2)["reason_codes"] == ["no_live_worker"]
    code, data = _health(env, "--candidate-shard", "2")
    assert code == 2
    assert data["candidate_shard"] == 2
    assert _row(data, 2)["roles"] == ["readable", "candidate"]
    _live_worker(shards, 2)
    code, data = _health(env, "--candidate-shard", "2")
    assert code == 0 and _row(data, 2)["readiness"] == "ready"


def test_a_candidate_that_is_not_migrated_reports_schema_migration_missing(shards, empty_db) -> None:
    _live_worker(shards, 0)
    _, empty = empty_db
    env = _env(shards, readable=(0, 2), writable=(0,), urls={0: shards.dsns[0], 2: empty})
    code, data = _health(env, "--candidate-shard", "2")
    assert code == 2
    two = _row(data, 2)
    assert two["reachable"] and "schema_migration_missing" in two["reason_codes"]
    assert two["readiness"] == "degraded"
    # Migrated by an older Harvest: the version it has is named.
    with shards.connect(2) as conn:
        conn.execute(
            "DELETE FROM harvest.schema_migrations WHERE set_name = 'harvest' "
            "AND version = (SELECT max(version) FROM harvest.schema_migrations WHERE set_name = 'harvest')"
        )
    _live_worker(shards, 2)
    code, data = _health(_env(shards, readable=(0, 2), writable=(0,)), "--candidate-shard", "2")
    assert code == 2
    two = _row(data, 2)
    assert two["reason_codes"] == ["schema_migration_missing"]
    assert two["schema"]["version"] < two["schema"]["expected"]


def test_a_shard_whose_migrate_run_stopped_before_the_functions_is_not_ready(shards) -> None:
    """Its schema version is this release's, its functions an older release's (they answer an
    older harvest.functions_version()): a migrate run stopped after its migrations."""
    _live_worker(shards, 2)
    with shards.connect(2) as conn:
        conn.execute(
            "CREATE OR REPLACE FUNCTION harvest.functions_version() RETURNS text"
            " LANGUAGE sql IMMUTABLE AS $$ SELECT '0001'::text $$"
        )
    code, data = _health(_env(shards, readable=(0, 2), writable=(0,)), "--candidate-shard", "2")
    assert code == 2
    two = _row(data, 2)
    assert two["reason_codes"] == ["schema_migration_missing"] and two["readiness"] == "degraded"
    assert "did not finish" in two["error"]


def test_a_shard_whose_functions_are_not_this_releases_is_functions_stale_exit_2(shards) -> None:
    """Its schema version is this release's and its functions are not (releases change
    functions/ without a migration): one function replaced by hand on shard 1, then a file an
    older release's run applied. It read ready; it is degraded, naming what and what to run,
    and `harvest migrate run` makes it fresh."""
    from harvest.db.migrate import Migrator

    for shard in (0, 1):
        _live_worker(shards, shard)
    code, data = _health(_env(shards))
    assert code == 0 and _row(data, 1)["schema"]["functions"] == {"status": "fresh"}, data
    with shards.connect(1) as conn:
        conn.execute(
            "CREATE OR REPLACE FUNCTION harvest.payload_limit() RETURNS integer LANGUAGE sql STABLE"
            " AS $$ SELECT 1 $$"
        )
    code, data = _health(_env(shards))
    assert code == 2 and data["readiness"] == "degraded", data
    one = _row(data, 1)
    assert one["reason_codes"] == ["functions_stale"] and one["readiness"] == "degraded"
    assert not one["schema"]["ready"] and one["schema"]["functions"]["functions"] == ["payload_limit"]
    assert _row(data, 0)["reason_codes"] == []
    table = _run(_env(shards), "shard", "health")
    assert table.exit_code == 2 and "shard 1: its SQL functions are not those of" in table.output
    assert "harvest.payload_limit" in table.output and "harvest migrate run" in table.output
    preflight = json.loads(_run(_env(shards), "preflight", "--output", "json").output)
    migrations = next(c for c in preflight["checks"] if c["name"] == "migrations" and c["scope"] == "shard 1")
    assert migrations["status"] == "fail" and migrations["details"]["changed_functions"] == ["payload_limit"]
    assert next(c for c in preflight["checks"] if c["name"] == "shards")["details"]["not_ready"] == [1]

    Migrator(shards.dsns[1]).run()
    with shards.connect(1) as conn:
        conn.execute(
            "UPDATE harvest.function_files SET checksum = 'older', package_version = '0.0.1'"
            " WHERE file_name = 'claim.sql'"
        )
    code, data = _health(_env(shards))
    assert code == 2 and _row(data, 1)["reason_codes"] == ["functions_stale"]
    assert _row(data, 1)["schema"]["functions"]["files"] == ["claim.sql"]
    Migrator(shards.dsns[1]).run()
    code, data = _health(_env(shards))
    assert code == 0 and _row(data, 1)["schema"]["functions"] == {"status": "fresh"}, data


def test_another_shards_database_is_an_identity_mismatch_and_an_unknown_candidate_is_not_configured(
    shards,
) -> None:
    _live_worker(shards, 0)
    env = _env(shards, urls={0: shards.dsns[0], 1: shards.dsns[0]})
    code, data = _health(env)
    assert code == 1
    assert _row(data, 1)["reason_codes"] == ["identity_mismatch"]
    code, data = _health(_env(shards, readable=(0,), writable=(0,)), "--candidate-shard", "5")
    assert code == 1
    assert _row(data, 5)["reason_codes"] == ["not_configured"]
    assert "shards.urls.5" in _row(data, 5)["error"]


def test_preflight_checks_every_configured_shard(shards) -> None:
    for shard in (0, 1):
        _live_worker(shards, shard)
    env = _env(shards)
    result = _run(env, "preflight", "--output", "json")
    data = json.loads(result.output)
    scopes = {c["scope"] for c in data["checks"]}
    assert {"shard 0", "shard 1"} <= scopes
    for shard in (0, 1):
        names = {c["name"]: c["status"] for c in data["checks"] if c["scope"] == f"shard {shard}"}
        assert names["database"] == names["migrations"] == names["schema_version"] == "pass"
        assert names["identity"] == "pass"
    shards_check = next(c for c in data["checks"] if c["name"] == "shards")
    assert shards_check["status"] == "pass"
    # Shard 1 pointed at shard 0's database: the identity check fails, and so does the gate.
    result = _run(_env(shards, urls={0: shards.dsns[0], 1: shards.dsns[0]}), "preflight", "--output", "json")
    assert result.exit_code == 1
    data = json.loads(result.output)
    identity = next(c for c in data["checks"] if c["name"] == "identity" and c["scope"] == "shard 1")
    assert identity["status"] == "fail" and "shard 0" in identity["summary"]
    # A stopped shard fails the gate, naming it.
    shards.stop(1)
    try:
        result = _run(env, "preflight", "--output", "json")
        text = _run(env, "preflight")
    finally:
        shards.start(1)
    # The table's block under the rows names the shard of each check (each shard's reads alike).
    assert text.exit_code == 1 and "\ndatabase (fail, shard 1)\n" in text.output, text.output
    assert result.exit_code == 1
    data = json.loads(result.output)
    database = next(c for c in data["checks"] if c["name"] == "database" and c["scope"] == "shard 1")
    assert database["status"] == "fail"
    assert next(c for c in data["checks"] if c["name"] == "shards")["details"]["not_ready"] == [1]


def test_preflight_does_not_count_a_drained_shards_coverage(shards) -> None:
    """A drained shard (not in shards.writable) takes no new run: `harvest queue coverage` and
    GET /admin/queue-coverage leave its gaps out (merge_coverage), but preflight's queue_coverage
    still warned that its queues had no live worker. Preflight now applies the same rule."""
    _live_worker(shards, 0)
    with shards.connect(1) as conn:  # shard 1's worker of default has stopped: no live worker there
        _live_worker(shards, 1, worker_id="w-gone")
        conn.execute("SELECT harvest.stop_worker('w-gone')")

    def coverage(env: dict[str, str]) -> dict[int, dict]:
        data = json.loads(_run(env, "preflight", "--output", "json").output)
        return {
            int(c["scope"].split()[1]): c
            for c in data["checks"]
            if c["name"] == "queue_coverage" and c["scope"].startswith("shard ")
        }

    writable = coverage(_env(shards))  # both shards writable: shard 1's gap counts
    assert writable[1]["status"] == "warn" and writable[1]["details"]["uncovered"] == ["default"]
    drained = coverage(_env(shards, writable=(0,)))
    assert drained[1]["status"] == "skip" and "drained" in drained[1]["summary"], drained[1]
    assert drained[1]["details"]["uncovered"] == []
    assert drained[0]["details"]["uncovered"] == []  # shard 0 is polled
