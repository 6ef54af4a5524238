"""`harvest events tail` on shards: over SQL with [shards] it follows every shard, merged as the
management API's /stream merges them (harvest.shard.event_merge), and prints what the same
command prints over HTTP against a sharded server; a position it printed resumes on each shard."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from click.testing import CliRunner, Result
from psycopg.conninfo import make_conninfo

from harvest.cli import events as events_cli
from harvest.cli.main import main
from harvest.config import load_config
from harvest.web import streams
from harvest.web.app import management_app

pytestmark = pytest.mark.shard

CLEAN = {"HARVEST_DATABASE_URL": None, "HARVEST_URL": None, "HARVEST_TOKEN": None, "HARVEST_CONFIG": None}


def _env(shards) -> dict[str, str]:
    return {
        "HARVEST_SHARDS__READABLE": "0,1",
        "HARVEST_SHARDS__WRITABLE": "0,1",
        "HARVEST_SHARDS__CLI_TIMEOUT": "1",
        **{f"HARVEST_SHARDS__URLS__{s}": shards.dsns[s] for s in (0, 1)},
    }


def _run(args: list[str], env: dict[str, str | None]) -> Result:
    return CliRunner().invoke(main, args, env={**CLEAN, **env}, catch_exceptions=False)


@pytest.fixture
def live_url(shards) -> Iterator[str]:
    """The sharded management API on a real uvicorn on loopback (a stream needs one)."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    app = management_app(config=load_config(env=_env(shards)), profile="dev")
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(5)
    sock.close()


def _last(shards, shard: int) -> int:
    with shards.connect(shard) as conn:
        return int(conn.execute("SELECT coalesce(max(global_id), 0) FROM harvest.events").fetchone()[0])


def _start(env: dict[str, str], shard: int, workflow_id: str) -> None:
    started = _run(
        ["workflow", "start", "greet", "--shard-id", str(shard), "--workflow-id", workflow_id], env
    )
    assert started.exit_code == 0, started.stderr


def test_events_tail_follows_every_shard_over_sql_as_over_http(shards, live_url: str) -> None:
    env = _env(shards)
    before = {s: _last(shards, s) for s in (0, 1)}
    _start(env, 0, "t0")
    _start(env, 1, "t1")
    after_0 = {s: _last(shards, s) for s in (0, 1)}
    new = (after_0[0] - before[0]) + (after_0[1] - before[1])
    assert after_0[0] > before[0] and after_0[1] > before[1]

    # Past shard 0's new events: only shard 1's remain, in its order, the same bytes both ways.
    for o in ("table", "json"):
        args = ["events", "tail", "--after", f"0:{after_0[0]},1:{before[1]}"]
        args += ["--limit", str(after_0[1] - before[1]), "--output", o]
        sql = _run(args, env)
        web = _run(["--base-url", live_url, *args], {})
        assert sql.exit_code == 0, sql.stderr
        assert (web.stdout, web.stderr, web.exit_code) == (sql.stdout, sql.stderr, sql.exit_code)
        assert sql.stdout.startswith(f"0:{after_0[0]},1:{before[1] + 1}  shard 1  ") or o == "json"

    # Both shards' new events, merged as they arrive: the same events either way, each line's
    # position naming its own event on its shard.
    args = ["events", "tail", "--after", f"0:{before[0]},1:{before[1]}", "--limit", str(new), "-o", "json"]
    seen = {}
    for name, result in (("sql", _run(args, env)), ("http", _run(["--base-url", live_url, *args], {}))):
        assert result.exit_code == 0, result.stderr
        lines = [json.loads(line) for line in result.stdout.splitlines()]
        for line in lines:
            mine = dict(p.split(":") for p in line["position"].split(","))
            assert int(mine[str(line["shard_id"])]) == line["global_id"]
        seen[name] = sorted((e["shard_id"], e["global_id"], e["event_type"]) for e in lines)
        last = lines[-1]["position"]
        assert last == f"0:{after_0[0]},1:{after_0[1]}"
    assert seen["sql"] == seen["http"] and len(seen["sql"]) == new

    # A printed position resumes on each shard: only what was written since.
    _start(env, 0, "t2")
    resumed = _run(["events", "tail", "--after", last, "--limit", "1", "-o", "json"], env)
    event = json.loads(resumed.stdout)
    assert (event["shard_id"], event["global_id"]) == (0, after_0[0] + 1), resumed.stderr
    # A plain global id is no position of a sharded stream: the same error both ways, naming --after.
    sql = _run(["events", "tail", "--after", "5"], env)
    web = _run(["--base-url", live_url, "events", "tail", "--after", "5"], {})
    assert sql.exit_code == web.exit_code != 0 and "shard:global_id" in sql.stderr and "--after" in sql.stderr
    assert web.stderr == sql.stderr


def _sessions_listening(shards, shard: int) -> int:
    """Sessions of shard ``shard``'s database (other than this one) whose last statement, a
    LISTEN, has been answered: an event stream's listener that has opened (harvest.db.event_stream)."""
    with shards.connect(shard) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND query ILIKE 'LISTEN%%' AND state = 'idle'"
        ).fetchone()[0]


def _until(condition, what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


def _start_sql(shards, shard: int, workflow_id: str) -> None:
    """A start on one shard's database directly (no CLI: a tail runs in another thread)."""
    with shards.connect(shard) as conn:
        conn.execute("SELECT harvest.start_workflow('greet', '[]', %s, 'default')", (workflow_id,))


def _tail_through_shard_outages(
    shards, transport: list[str], env: dict[str, str | None], monkeypatch
) -> Result:
    """Run `events tail` (``transport``: its options before the command) from a position on both
    shards while shard 1 is down when it starts, comes back, goes again while followed and
    comes back; check it printed each event of both shards once, none missed."""
    # The tail says when it follows shard 1 again (over HTTP, the stream's note): the moment the
    # second outage must come after, or it would cut shard 1 before the tail is back on it (a
    # listening session alone is not that: the stream may still be reading its position).
    # Shard 1 may only come back once the tail has said it could not read it: until then the
    # tail (or the server's stream) may still be opening shard 1, and would find it up (CI on
    # 15fc639f: the stream opened shard 0's listener, the test started shard 1 while the stream
    # was connecting to it, and the stream followed it from the start with no note to wait on).
    said_unavailable = threading.Event()
    followed_again = threading.Event()
    warn = events_cli._warn

    def noted(text: str) -> None:
        if text.startswith("shard 1 unavailable"):
            said_unavailable.set()
        if text.startswith("shard 1 is back"):
            followed_again.set()
        warn(text)

    monkeypatch.setattr(events_cli, "_warn", noted)
    before = {s: _last(shards, s) for s in (0, 1)}
    _start_sql(shards, 1, "while-up")  # written before shard 1 goes: read once it is back
    per_start = _last(shards, 1) - before[1]
    shards.stop(1)
    _start_sql(shards, 0, "on-zero")
    after_0 = _last(shards, 0)
    expected = (after_0 - before[0]) + 2 * per_start
    outcome: dict = {}
    args = [*transport, "events", "tail", "--after", f"0:{before[0]},1:{before[1]}"]
    args += ["--limit", str(expected), "-o", "json"]
    tail = threading.Thread(target=lambda: outcome.update(result=_run(args, env)), daemon=True)
    tail.start()
    try:
        _until(lambda: _sessions_listening(shards, 0) > 0, "the tail listens on shard 0")
        assert said_unavailable.wait(30), "the tail never said shard 1 was unavailable"
        shards.start(1)
        assert followed_again.wait(30), "the tail never followed shard 1 once it was back"
        shards.stop(1)  # its sessions are cut while the tail follows it
        shards.start(1)
        _start_sql(shards, 1, "after-the-loss")
        tail.join(60)
    finally:
        if not shards.is_up(1):
            shards.start(1)
    assert not tail.is_alive(), "the tail did not print every event"  # (one passed over: stop 53)
    result = outcome["result"]
    assert result.exit_code == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    got = sorted((e["shard_id"], e["global_id"]) for e in lines)
    want = [(0, g) for g in range(before[0] + 1, after_0 + 1)]
    want += [(1, g) for g in range(before[1] + 1, before[1] + 2 * per_start + 1)]
    assert got == want  # each once, none missed
    assert f"shard 1 is back: following its events after 1:{before[1]}" in result.stderr
    return result


def test_events_tail_follows_a_shard_again_when_it_is_back(shards, monkeypatch) -> None:
    """Over SQL a tail goes on when a shard cannot be read: one down when it starts is followed
    from its given position once it is back, one lost while followed is followed again after its
    last event printed. Each event once, none missed, and stderr says what happened."""
    monkeypatch.setattr(events_cli, "RETRY_SECS", 0.1)
    env: dict[str, str | None] = {**_env(shards)}
    # (A password in shard 1's url, which the test servers' trust login ignores: no warning may
    # carry it.)
    env["HARVEST_SHARDS__URLS__1"] = make_conninfo(shards.dsns[1], password="tail-secret-7")
    result = _tail_through_shard_outages(shards, [], env, monkeypatch)
    assert "warning: shard 1 unavailable (" in result.stderr
    assert "trying again every 0.1 s, its events follow when back" in result.stderr
    assert "warning: shard 1 cannot be read (" in result.stderr
    assert "tail-secret-7" not in result.stderr


def test_the_stream_over_http_follows_a_shard_again_when_it_is_back(
    shards, live_url: str, monkeypatch
) -> None:
    """The sharded server's /stream does the same without ending: a shard down when it opens,
    or lost while followed, is named in a comment, tried again, and followed after its position
    once back, while the other shard's events go on; the tail over HTTP prints the same events
    as over SQL and never has to open the stream again."""
    monkeypatch.setattr(streams, "RETRY_SECS", 0.1)
    result = _tail_through_shard_outages(shards, ["--base-url", live_url], {}, monkeypatch)
    assert "warning: shard 1 unavailable: its events after 1:" in result.stderr
    assert result.stderr.count("follow when it is back") == 2, result.stderr  # at the open, and lost
    assert result.stderr.count("warning: shard 1 is back: following its events after 1:") == 2
    assert "the event stream ended" not in result.stderr
