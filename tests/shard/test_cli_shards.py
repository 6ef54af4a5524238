"""The CLI commands that used to read shard 0 only, across three real servers: `worker get`,
`worker drain`, `worker drain-preview`, `queue coverage`, `retention status`, `audit list` and
`version-usage` read (or, for `drain`, write) every configured shard, tag what they show with
its shard, and with one shard stopped say which shard they could not reach (partial, the warning
on stderr; `drain` and `version-usage` exit 1, a partial gate being a deploy blocker). A shard
that accepts connections and never answers is partial within shards.cli_timeout."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest
from click.testing import CliRunner

from harvest.cli.main import main

pytestmark = pytest.mark.shard


def _env(shards, readable=(0, 1, 2), urls=None, **extra) -> dict[str, str]:
    urls = urls if urls is not None else {s: shards.dsns[s] for s in readable}
    env = {
        "HARVEST_DATABASE_URL": "",
        "HARVEST_SHARDS__READABLE": ",".join(map(str, readable)),
        "HARVEST_SHARDS__WRITABLE": ",".join(map(str, readable)),
        **{f"HARVEST_SHARDS__URLS__{s}": dsn for s, dsn in urls.items()},
    }
    env.update(extra)
    return env


def _run(env: dict[str, str], *args: str):
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def _json(env: dict[str, str], *args: str):
    result = _run(env, "--output", "json", *args)
    return result, json.loads(result.stdout)


def _worker(shards, shard: int, worker_id: str, queue: str = "default") -> None:
    with shards.connect(shard) as conn:
        conn.execute("SELECT harvest.register_worker(%s, ARRAY[%s], 'host', 1, 60, '{}')", (worker_id, queue))


def _stopped(shards, shard: int, *args: str):
    shards.stop(shard)
    try:
        return _json(_env(shards), *args)
    finally:
        shards.start(shard)


def test_worker_get_shows_the_workers_row_on_every_shard_it_polls(shards) -> None:
    for s in (0, 2):
        _worker(shards, s, "w-multi")
    result, data = _json(_env(shards), "worker", "get", "w-multi")
    assert result.exit_code == 0
    assert [r["shard_id"] for r in data["workers"]] == [0, 2]
    assert data["status"] == "complete" and data["unavailable_shards"] == []
    assert _run(_env(shards), "worker", "get", "nobody").exit_code != 0

    result, data = _stopped(shards, 2, "worker", "get", "w-multi")
    assert result.exit_code == 0
    assert [r["shard_id"] for r in data["workers"]] == [0]
    assert data["status"] == "partial" and data["unavailable_shards"] == [2]
    assert "partial" in result.stderr


def test_worker_drain_drains_every_shards_row_audited_once_per_shard(shards) -> None:
    for s in (0, 1, 2):
        _worker(shards, s, "w-drain")
    result, data = _json(_env(shards), "worker", "drain", "w-drain", "--operator-id", "ops")
    assert result.exit_code == 0, result.output
    assert sorted(r["shard_id"] for r in data["workers"]) == [0, 1, 2]
    assert {r["status"] for r in data["workers"]} == {"draining"}
    for s in (0, 1, 2):
        with shards.connect(s) as conn:
            audits = conn.execute(
                "SELECT count(*) FROM harvest.audit_log WHERE operation = 'worker.drain'"
            ).fetchone()[0]
        assert audits == 1

    result, data = _json(_env(shards), "audit", "list", "--operation", "worker.drain")
    assert result.exit_code == 0
    assert sorted(r["shard_id"] for r in data["audit_log"]) == [0, 1, 2]
    ats = [r["at"] for r in data["audit_log"]]
    assert ats == sorted(ats, reverse=True)

    assert _run(_env(shards), "worker", "drain", "nobody").exit_code == 1


def test_worker_drain_with_a_shard_down_names_it_and_exits_1(shards) -> None:
    for s in (0, 1):
        _worker(shards, s, "w-half")
    result, data = _stopped(shards, 1, "worker", "drain", "w-half")
    assert result.exit_code == 1
    assert data["unavailable_shards"] == [1]
    assert [r["shard_id"] for r in data["workers"] if r["outcome"] != "not_found"] == [0]
    assert "shard(s) 1 could not be reached and were not drained" in result.stderr


def test_drain_preview_lists_every_shards_workers(shards) -> None:
    _worker(shards, 0, "w0")
    _worker(shards, 1, "w1")
    result, data = _json(_env(shards), "worker", "drain-preview", "--worker-id", "w1")
    assert result.exit_code == 0
    assert [(r["worker_id"], r["shard_id"]) for r in data["workers"]] == [("w1", 1)]
    result, data = _stopped(shards, 0, "worker", "drain-preview")
    assert result.exit_code == 0 and data["status"] == "partial" and data["unavailable_shards"] == [0]
    assert [r["worker_id"] for r in data["workers"]] == ["w1"]


def test_queue_coverage_needs_a_live_worker_on_every_shard(shards, tmp_path, monkeypatch) -> None:
    (tmp_path / "shard_cov_app.py").write_text(
        "from harvest import App, activity, workflow\n"
        "@activity(queue='billing')\nasync def charge(ctx): return 1\n"
        "@workflow\nasync def flow(ctx): return 1\n"
        "app = App(workflows=[flow], activities=[charge])\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    app = ("--app", "shard_cov_app:app")
    for s in (0, 1, 2):
        _worker(shards, s, f"w{s}", "default")
    _worker(shards, 0, "w-bill", "billing")
    # No App: the declared queues are unknown (the registered ones are shown), and --strict fails.
    result, data = _json(_env(shards), "queue", "coverage", "--strict")
    assert result.exit_code == 2 and data["unpolled_declared_queues"] is None
    assert data["registered_queues"] == ["billing", "default"]
    result, data = _json(_env(shards), "queue", "coverage", "--strict", *app)
    assert result.exit_code == 2  # billing is polled on shard 0 only
    assert data["declared_queues"] == ["billing", "default"]
    assert data["unpolled_declared_queues"] == ["billing"]
    assert data["unpolled_by_shard"] == {"0": [], "1": ["billing"], "2": ["billing"]}
    assert data["live_workers"] == {"billing": 1, "default": 3}
    # Shards 1 and 2 drained: they take no new run, so their gaps are none.
    result, data = _json(_env(shards, HARVEST_SHARDS__WRITABLE="0"), "queue", "coverage", "--strict", *app)
    assert result.exit_code == 0 and data["unpolled_declared_queues"] == []
    assert data["unpolled_by_shard"] == {"0": []}

    for s in (1, 2):
        _worker(shards, s, f"w-bill{s}", "billing")
    result, data = _json(_env(shards), "queue", "coverage", "--strict", *app)
    assert result.exit_code == 0 and data["unpolled_declared_queues"] == []

    result, data = _stopped(shards, 2, "queue", "coverage", "--strict", *app)
    assert result.exit_code == 2  # a shard not read: coverage unknown, fail closed
    assert data["status"] == "partial" and data["unavailable_shards"] == [2]


def test_retention_status_is_per_shard(shards) -> None:
    with shards.connect(1) as conn:
        conn.execute("SELECT harvest.set_retention('30 days', 500, 'tests')")
    result, data = _json(_env(shards), "retention", "status")
    assert result.exit_code == 0
    by = {r["shard_id"]: r for r in data["shards"]}
    assert sorted(by) == [0, 1, 2]
    assert by[1]["configured"] and not by[0]["configured"]
    result, data = _stopped(shards, 1, "retention", "status")
    assert result.exit_code == 0
    assert [r["shard_id"] for r in data["shards"]] == [0, 2] and data["unavailable_shards"] == [1]
    # The warning says why, as every other fan-out read's does (it named the shard alone).
    assert "warning: partial: shard(s) 1 could not be read (shard 1: " in result.stderr, result.stderr


def test_retention_set_writes_every_shard(shards) -> None:
    """`retention set` over SQL with [shards] sets every shard, as the HTTP route does (it set
    the database of --database-url only); a shard it cannot reach is named and it exits 1."""
    result, data = _json(_env(shards), "retention", "set", "--max-age", "30 days", "--batch-size", "200")
    assert result.exit_code == 0, result.stderr
    assert [(r["shard_id"], r["max_age"], r["batch_size"]) for r in data["shards"]] == [
        (s, "30 days", 200) for s in (0, 1, 2)
    ]
    configured = "SELECT harvest.get_retention_status() ->> 'configured' = 'true'"
    for s in (0, 1, 2):
        with shards.connect(s) as conn:
            assert conn.execute(configured).fetchone()[0]
    result, data = _stopped(shards, 2, "retention", "set", "--max-age", "off")
    assert result.exit_code == 1
    assert "shard(s) 2 could not be reached and keep their retention settings" in result.stderr
    # A write: the error names the shard it did not write, with no read's "could not be read".
    assert "could not be read" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, (
        result.stderr
    )
    assert [(r["shard_id"], r["configured"]) for r in data["shards"]] == [(0, False), (1, False)]
    with shards.connect(2) as conn:  # the stopped shard kept its settings
        assert conn.execute(configured).fetchone()[0]


def _version_marker(shards, shard: int, change_id: str, version: int) -> None:
    with shards.connect(shard) as conn:
        conn.execute("SELECT harvest.start_workflow('gated', p_workflow_id => %s)", (f"{change_id}-{shard}",))
        (execution_id,) = conn.execute(
            "SELECT id FROM harvest.executions WHERE workflow_id = %s", (f"{change_id}-{shard}",)
        ).fetchone()
        conn.execute(
            "INSERT INTO harvest.events (execution_id, event_id, event_type, event_data, created_at) "
            "VALUES (%s, 1000, 'MarkerRecorded', %s, now())",
            (
                execution_id,
                json.dumps({"kind": "version", "value": {"change_id": change_id, "version": version}}),
            ),
        )


def test_version_usage_sums_every_shard_and_a_missing_shard_blocks(shards) -> None:
    for s in (0, 2):
        _version_marker(shards, s, "tax", 1)
    result, data = _json(_env(shards), "version-usage", "--change-id", "tax")
    assert result.exit_code == 0
    assert data["status"] == "complete"
    assert [(r["version"], r["executions"]) for r in data["usage"]] == [(1, 2)]
    assert len(data["usage"][0]["sample_execution_ids"]) == 2

    result, data = _json(_env(shards), "version-usage", "--change-id", "other")
    assert result.exit_code == 0 and data["status"] == "no_matches" and data["usage"] == []

    result, data = _stopped(shards, 2, "version-usage", "--change-id", "tax")
    assert result.exit_code == 1  # partial is a deploy blocker: a false zero is worse
    assert data["status"] == "partial" and data["unavailable_shards"] == [2]
    assert [(r["version"], r["executions"]) for r in data["usage"]] == [(1, 1)]

    shards.stop(0), shards.stop(1), shards.stop(2)
    try:
        result, data = _json(_env(shards), "version-usage", "--change-id", "tax")
    finally:
        for s in (0, 1, 2):
            shards.start(s)
    assert result.exit_code == 1 and data["status"] == "unavailable" and data["usage"] == []


@pytest.fixture
def silent_server():
    """A TCP port that accepts connections and never says a word (a hung database)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"postgresql://u@127.0.0.1:{listener.getsockname()[1]}/harvest?connect_timeout=60"
    stop.set()
    thread.join(2)
    for conn in held:
        conn.close()
    listener.close()


def test_a_shard_that_hangs_is_partial_within_the_cli_timeout(shards, silent_server) -> None:
    _worker(shards, 0, "w0")
    env = _env(shards, urls={0: shards.dsns[0], 1: shards.dsns[1], 2: silent_server})
    env["HARVEST_SHARDS__CLI_TIMEOUT"] = "1.5"
    began = time.monotonic()
    result, data = _json(env, "worker", "list")
    took = time.monotonic() - began
    assert result.exit_code == 0
    assert data["status"] == "partial" and data["unavailable_shards"] == [2]
    assert [r["worker_id"] for r in data["workers"]] == ["w0"]
    assert took < 5, f"the hung shard held the read {took:.1f} s"


def _expired(shards, shard: int, name: str) -> None:
    """A run on ``shard`` that ended 40 days ago."""
    with shards.connect(shard) as conn:
        conn.execute("SELECT harvest.start_workflow('wf', p_workflow_id => %s)", (name,))
        ended = "SELECT harvest.terminate_workflow(id, 'x') FROM harvest.executions WHERE workflow_id = %s"
        conn.execute(ended, (name,))
        conn.execute(
            "UPDATE harvest.executions SET completed_at = now() - interval '40 days' WHERE workflow_id = %s",
            (name,),
        )


def test_retention_run_now_sweeps_every_shard(shards) -> None:
    """`retention run-now` over SQL with [shards] sweeps every shard in turn, as the HTTP route
    does (it swept the database of --database-url only), and prints the totals with each
    shard's; a shard it cannot reach is named and it exits 1; a shard that refuses is named and
    the others are swept all the same."""
    for s, n in ((0, 2), (1, 0), (2, 1)):
        for i in range(n):
            _expired(shards, s, f"old-{s}-{i}")
    result = _run(_env(shards), "retention", "run-now")
    assert result.exit_code == 2 and "shard 0: retention is not configured" in result.stderr
    with shards.connect(0) as conn:  # configured on one shard: it is swept, the others named
        conn.execute("SELECT harvest.set_retention('30 days')")
    result = _run(_env(shards), "--output", "json", "retention", "run-now")
    assert result.exit_code == 2 and json.loads(result.stdout)["deleted"] == 2
    assert "shard 1: retention is not configured" in result.stderr and "; shard 2: " in result.stderr
    assert _json(_env(shards), "retention", "set", "--max-age", "30 days")[0].exit_code == 0
    _expired(shards, 1, "old-1-late")
    result, data = _stopped(shards, 1, "retention", "run-now")
    assert result.exit_code == 1
    assert "shard(s) 1 could not be reached and were not swept" in result.stderr
    assert (data["deleted"], data["unavailable_shards"]) == (1, [1])
    assert [(r["shard_id"], r["deleted"]) for r in data["shards"]] == [(0, 0), (2, 1)]
    result, data = _json(_env(shards), "retention", "run-now")
    assert result.exit_code == 0 and data["deleted"] == 1 and data["unavailable_shards"] == []
    swept = [(r["shard_id"], r["deleted"], r["remaining"]) for r in data["shards"]]
    assert swept == [(0, 0, 0), (1, 1, 0), (2, 0, 0)]
    text = _run(_env(shards), "retention", "run-now").stdout
    assert text.startswith("deleted 0 execution(s)") and "\n  shard 2: deleted 0, 0 remaining" in text


def test_rate_limit_override_is_one_cli_call_on_every_shard_and_names_a_stopped_one(shards) -> None:
    """The sharding guide: an activity's pacing override fans out to every shard's bucket, "one
    CLI call, effective everywhere"; only the start throttle had a command (the activity's rate
    limit was SQL and HTTP only). A shard that cannot be reached is named and the command exits
    1; the others have the override."""
    policies = json.dumps({"activities": {"charge": {"rate_limit": {"rps": 5, "burst": 5}}}})
    for shard in (0, 1, 2):
        with shards.connect(shard) as conn:
            conn.execute("SELECT harvest.declare_flow_policies(%s)", (policies,))
    env = _env(shards)
    result, data = _json(env, "rate-limit", "override", "charge", "--rps", "50", "--ttl-secs", "600")
    assert result.exit_code == 0, result.stderr
    assert [(r["shard_id"], r["rps"], r["override_rps"]) for r in data["shards"]] == [
        (s, 5, 50) for s in (0, 1, 2)
    ]
    result, data = _json(env, "rate-limit", "get", "charge")
    assert result.exit_code == 0 and [r["override_rps"] for r in data["shards"]] == [50, 50, 50]
    result, data = _json(env, "rate-limit", "clear-override", "charge")
    assert [r["was_live"] for r in data["shards"]] == [True, True, True]
    result, data = _stopped(shards, 1, "rate-limit", "override", "charge", "--rps", "7")
    assert result.exit_code == 1 and data["unavailable_shards"] == [1], result.stderr
    assert [(r["shard_id"], r["override_rps"]) for r in data["shards"]] == [(0, 7), (2, 7)]
    assert "shard(s) 1" in result.stderr
    # The call that missed shard 1 is audited as failed on the shards that took it (the
    # sharding guide: "the audit record for that call is marked failed"); the call that
    # reached every shard is not.
    for shard in (0, 2):
        with shards.connect(shard) as conn:
            rows = conn.execute(
                "SELECT details->>'outcome', details->'shard_errors' FROM harvest.audit_log "
                "WHERE operation = 'rate_limit.override' ORDER BY id"
            ).fetchall()
        assert rows == [(None, None), (None, None), ("failed", [{"shard_id": 1, "error": "unreachable"}])]
    with shards.connect(1) as conn:
        assert conn.execute(
            "SELECT count(*) FROM harvest.audit_log WHERE details->>'outcome' = 'failed'"
        ).fetchone() == (0,)
