"""A database that goes silent: every connection Harvest opens gives it up in about 30 s.

A real network cut, not a stopped server (whose kernel still answers): the client runs in a
network namespace of its own (``ip netns``), joined to the host by a veth pair, and reaches a
PostgreSQL of its own on the host's end; the test then takes the host's end down, so nothing
the client sends is answered and nothing tells it so. Without the libpq settings of
``harvest.db.connection.NETWORK_DEFAULTS`` the statement in flight and the idle LISTEN wait for
the OS's keepalive (two hours) and a call sent into the silence for TCP's retransmissions
(about 15 minutes): the test fails, naming the cases still waiting after its limit.

Needs root (a network namespace and a veth pair) and iproute2's ``ip`` (``make iproute2``):
without them the test skips, except under ``CI=true``, where it fails.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from harness import wait_until

from harvest.db.embedded import EmbeddedPostgres

HERE = Path(__file__).resolve().parent
CLIENT = HERE / "run_silent_client.py"
CASES = {"statement_in_flight", "idle_listen", "sync_pool_call", "async_pool_call"}
# Each case gives up about 30 s after the cut (tcp_user_timeout, or keepalives after 10 s of
# quiet that tcp_user_timeout ends at 30 s); the limit leaves room for a loaded CI machine and
# is far below what the OS alone takes (15 minutes, two hours).
GIVE_UP_LIMIT_SECS = 120.0

IP = shutil.which("ip")
CAN_RUN = IP is not None and os.geteuid() == 0
pytestmark = [
    pytest.mark.chaos,
    pytest.mark.skipif(
        not CAN_RUN and os.environ.get("CI") != "true",
        reason="needs root and iproute2's ip (make iproute2) for a network namespace",
    ),
]


@dataclass
class Link:
    namespace: str
    host_side: str
    host_address: str


def _ip(*args: str) -> None:
    subprocess.run([IP or "ip", *args], check=True, capture_output=True, text=True)


@pytest.fixture
def link() -> Iterator[Link]:
    """A network namespace joined to the host by a veth pair (host 10.213.N.1, namespace .2)."""
    assert CAN_RUN, "needs root and iproute2's ip: CI is set, so this is a failure, not a skip"
    pid = os.getpid()
    link = Link(f"harvest-silent-{pid}", f"hvs{pid}", f"10.213.{pid % 256}.1")
    inside, peer_address = f"hvc{pid}", f"10.213.{pid % 256}.2"
    _ip("netns", "add", link.namespace)
    try:
        _ip("link", "add", link.host_side, "type", "veth", "peer", "name", inside, "netns", link.namespace)
        _ip("addr", "add", f"{link.host_address}/30", "dev", link.host_side)
        _ip("link", "set", link.host_side, "up")
        _ip("-n", link.namespace, "addr", "add", f"{peer_address}/30", "dev", inside)
        _ip("-n", link.namespace, "link", "set", inside, "up")
        yield link
    finally:
        # Deleting the host's end deletes both ends, even while a process keeps the namespace.
        subprocess.run([IP or "ip", "link", "del", link.host_side], capture_output=True)
        subprocess.run([IP or "ip", "netns", "del", link.namespace], capture_output=True)


@pytest.fixture
def server(link: Link) -> Iterator[EmbeddedPostgres]:
    """A PostgreSQL of this test, listening on loopback and on the host's end of the link."""
    pg = EmbeddedPostgres(settings={"listen_addresses": f"127.0.0.1,{link.host_address}"})
    pg.start()
    try:
        with open(pg.data_dir / "pg_hba.conf", "a") as hba:
            hba.write(f"host all all {link.host_address}/30 trust\n")
        with psycopg.connect(pg.dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_reload_conf()")
        yield pg
    finally:
        pg.stop()


class Lines:
    """The child's JSON lines, read from its stdout's pipe without a buffer that select() cannot
    see (two lines arriving together would leave the second unread until the limit)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        self.fd = proc.stdout.fileno()
        self.pending = b""

    def read(self, until: float, stop: int) -> list[dict]:
        """Lines until ``stop`` of them arrived, the child ended or the clock passed ``until``."""
        lines: list[dict] = []
        with selectors.DefaultSelector() as selector:
            selector.register(self.fd, selectors.EVENT_READ)
            while len(lines) < stop:
                while b"\n" in self.pending and len(lines) < stop:
                    line, self.pending = self.pending.split(b"\n", 1)
                    lines.append(json.loads(line))
                if len(lines) >= stop or time.monotonic() >= until:
                    break
                if selector.select(timeout=max(0.0, until - time.monotonic())):
                    chunk = os.read(self.fd, 65536)
                    if not chunk:
                        break  # the child ended
                    self.pending += chunk
        return lines


def _sleeping(dsn: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(600)' AND state = 'active'"
        ).fetchone()
    return row is not None and row[0] == 1


def test_every_connection_gives_up_a_server_that_went_silent(
    link: Link, server: EmbeddedPostgres, tmp_path: Path
) -> None:
    dsn = f"postgresql://postgres@{link.host_address}:{server.port}/postgres"
    log_path = tmp_path / "client.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [IP or "ip", "netns", "exec", link.namespace, sys.executable, str(CLIENT), dsn],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
        )
    try:
        lines = Lines(proc)
        ready = lines.read(time.monotonic() + 60, 1)
        assert ready == [{"ready": True}], log_path.read_text()
        # The statement runs on the server before the cut (the rest is set: the client is ready).
        wait_until(lambda: _sleeping(server.dsn), 30, "the client's statement on the server")
        _ip("link", "set", link.host_side, "down")
        assert proc.stdin is not None
        proc.stdin.write(b"cut\n")
        proc.stdin.flush()

        ended = lines.read(time.monotonic() + GIVE_UP_LIMIT_SECS, len(CASES))
        by_case = {line["case"]: line for line in ended}
        assert set(by_case) == CASES, (
            f"still waiting {GIVE_UP_LIMIT_SECS:.0f} s after the cut: {sorted(CASES - set(by_case))}; "
            f"ended: {ended}; client log: {log_path.read_text()}"
        )
        for line in ended:
            # Each call failed (none answered through a cut link), naming why in one line.
            assert line["error"], line
            assert line["secs"] < GIVE_UP_LIMIT_SECS, line
    finally:
        proc.kill()
        proc.wait()
