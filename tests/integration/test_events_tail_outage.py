"""`harvest events tail` over one database follows it again when it is back: a server restart
while the tail follows costs no event and prints none twice (on shards:
tests/shard/test_events_tail_shards.py)."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Iterator

import pytest
from click.testing import CliRunner, Result
from outage_helpers import wait_until

from harvest.cli import events as events_cli
from harvest.cli.main import main
from harvest.db.connection import connect
from harvest.db.embedded import EmbeddedPostgres
from harvest.web import streams

CLEAN = {"HARVEST_URL": None, "HARVEST_TOKEN": None, "HARVEST_CONFIG": None}


def _last(dsn: str) -> int:
    with connect(dsn) as conn:
        return int(conn.execute("SELECT coalesce(max(global_id), 0) FROM harvest.events").fetchone()[0])


def _start(dsn: str, workflow_id: str) -> None:
    with connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT harvest.start_workflow('greet', '[]', %s, 'default')", (workflow_id,))


def _listening(dsn: str) -> int:
    with connect(dsn) as conn:
        return int(
            conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
                " AND query ILIKE 'LISTEN%%' AND state = 'idle'"
            ).fetchone()[0]
        )


def _tail_across_a_restart(pg: EmbeddedPostgres, transport: list[str], env: dict) -> tuple[Result, str]:
    """Run `events tail` (``transport``: its options before the command) while ``pg`` restarts,
    with runs started before, during and after; check it printed every event once, in order,
    and said after which one it lost the stream. Returns its result and that position."""
    dsn = pg.dsn
    tag = "-".join(transport[:1]) or "sql"  # each test's own runs (a workflow id starts one run)
    before = _last(dsn)
    _start(dsn, f"{tag}-before-the-restart")
    per_start = _last(dsn) - before
    outcome: dict[str, Result] = {}
    args = [*transport, "events", "tail", "--after", str(before), "--limit", str(3 * per_start), "-o", "json"]
    runner = CliRunner()
    tail = threading.Thread(
        target=lambda: outcome.update(result=runner.invoke(main, args, env=env, catch_exceptions=False)),
        daemon=True,
    )
    tail.start()
    try:
        wait_until(lambda: _listening(dsn) > 0, "the tail's stream listens")
        pg.pause()  # its sessions are cut while the tail follows
        time.sleep(0.5)
        pg.resume()
        _start(dsn, f"{tag}-after-the-restart")
        wait_until(lambda: _listening(dsn) > 0, "the tail's stream listens again")
        _start(dsn, f"{tag}-once-back")
        tail.join(60)
    finally:
        pg.resume()  # (nothing when it is up)
    assert not tail.is_alive(), "the tail did not print every event"
    result = outcome["result"]
    assert result.exit_code == 0, result.stderr
    got = [json.loads(line)["global_id"] for line in result.stdout.splitlines()]
    assert got == list(range(before + 1, before + 3 * per_start + 1))  # each once, none missed
    # Gone after the events it printed (those of the first start, unless the restart came first).
    lost = re.search(r"its events after (\d+) follow when it is back", result.stderr)
    assert lost is not None, result.stderr
    assert int(lost[1]) in (before, before + per_start)
    return result, lost[1]


def test_a_tail_follows_the_database_again_after_a_restart(
    own_server: EmbeddedPostgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events_cli, "RETRY_SECS", 0.1)
    env = {**CLEAN, "HARVEST_DATABASE_URL": own_server.dsn}
    result, lost = _tail_across_a_restart(own_server, [], env)
    assert "warning: the database cannot be read (" in result.stderr
    assert f"warning: the database is back: following its events after {lost}\n" in result.stderr


class _Horizon:
    """An event source whose events end at ``last`` (harvest.get_event_horizon's answer)."""

    def __init__(self, last: int):
        self.last = last

    async def horizon(self) -> dict[str, int]:
        return {"last_global_id": self.last, "xmin": 1, "xmax": 1}


def test_a_database_back_with_fewer_events_is_followed_from_its_last(capsys: pytest.CaptureFixture) -> None:
    """After a failover to a replica that lacked the last events, the ids written from then on
    start below the tail's position: it goes on after the database's last, saying so."""
    assert asyncio.run(events_cli._not_past_its_end(_Horizon(9), None, 7)) == 7
    assert asyncio.run(events_cli._not_past_its_end(_Horizon(5), None, 9)) == 5
    assert "the database's events now end at 5, before 9: going on after 5\n" in capsys.readouterr().err
    assert asyncio.run(events_cli._not_past_its_end(_Horizon(5), 1, 9)) == 5
    assert "shard 1's events now end at 1:5, before 1:9: going on after 1:5\n" in capsys.readouterr().err


@pytest.fixture
def api_on_own_server(own_server: EmbeddedPostgres) -> Iterator[str]:
    """The management API (dev profile) over ``own_server`` on a real uvicorn on loopback, in a
    thread: its base URL."""
    import socket

    import uvicorn

    from harvest.config import load_config
    from harvest.web.app import management_app

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    app = management_app(dsn=own_server.dsn, config=load_config(env={}), profile="dev")
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_until(lambda: server.started, "the API serves")
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(5)
    sock.close()


def test_a_tail_over_http_follows_the_database_again_after_a_restart(
    own_server: EmbeddedPostgres, api_on_own_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's stream rides its database's restart: it says so in comments, which the tail
    prints, and goes on after the last event it sent: none missed, none twice."""
    monkeypatch.setattr(events_cli, "RETRY_SECS", 0.1)
    monkeypatch.setattr(streams, "RETRY_SECS", 0.1)
    result, lost = _tail_across_a_restart(own_server, ["--base-url", api_on_own_server], CLEAN)
    assert f"warning: the database is unavailable: its events after {lost} follow when it is back\n" in (
        result.stderr
    )
    assert f"warning: the database is back: following its events after {lost}\n" in result.stderr
    assert "the event stream ended" not in result.stderr  # (the stream did not end)
