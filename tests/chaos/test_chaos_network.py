"""A peer that goes silent: both ends of every session Harvest opens give it up in about 30 s.

A real network cut, not a stopped server (whose kernel still answers): the client runs in a
network namespace of its own (``ip netns``), joined to the host by a veth pair, and reaches a
database of its own (on the module's PostgreSQL) on the host's end; the test then takes the
host's end down, so nothing the client sends is answered and nothing tells it so. Without the
settings of ``harvest.db.connection`` the statement in flight and the idle LISTEN wait for the
OS's keepalive (two hours), a call sent into the silence for TCP's retransmissions (about 15
minutes), and the server keeps the cut client's open transaction and its lock for two hours:
the test fails, naming what was still waiting at its limit.

Needs root with CAP_NET_ADMIN (a network namespace and a veth pair) and iproute2's ``ip``
(``make iproute2``): without them the test skips, except under ``CI=true``, where it fails.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from apps import race_expected, wf_held_decision, wf_race, wf_single
from harness import (
    WorkerProcs,
    check_decided_once,
    check_history,
    count_events,
    create_side_tables,
    history,
    hold_in_an_open_claim,
    query,
    runs,
    unlocked_workflow_task,
    wait_until,
    workflow_task,
)
from psycopg import conninfo

import harvest
from harvest.db import testkit
from harvest.db.embedded import EmbeddedPostgres
from harvest.db.migrate import Migrator
from harvest.db.sqlapi import SqlApi

HERE = Path(__file__).resolve().parent
CLIENT = HERE / "run_silent_client.py"
SCHEDULER = HERE / "run_scheduler.py"
SCHEDULER_RUN_SECS = 45  # past the 30 s in which the server gives the cut scheduler up
CASES = {"statement_in_flight", "idle_listen", "sync_pool_call", "async_pool_call"}
HELD_LOCK = 4242  # run_silent_client.py's open transaction holds it
# Each end gives a silent peer up 30 s after the last word it had from it (tcp_user_timeout, or
# the keepalives it ends). That word can be up to 10 s before the cut (a connection idle 10 s is
# probed, and the answer counts), so the earliest is about 20 s after the cut: 15 leaves a margin.
# The limit leaves room for a loaded CI machine, far below what the OS alone takes (15 minutes,
# two hours).
EARLIEST_SECS = 15.0
# How long a cut lasts when the test brings the link back: past the 30 s after which each end
# has given the other up.
SILENT_PEER_GONE_SECS = 40.0
GIVE_UP_LIMIT_SECS = 120.0
# What a connection to a silent peer fails with: the kernel's timeout, or no route once the
# peer's address is forgotten; never psycopg_pool's wait for a connection.
SILENT_PEER_ERRORS = ("timed out", "No route to host")

IP = shutil.which("ip") or shutil.which("ip", path="/usr/sbin:/sbin")
NAME_PREFIX = "harvest-silent-"
pytestmark = pytest.mark.chaos


def _can_make_namespaces() -> str | None:
    """Why this machine cannot run the test, or None."""
    if IP is None:
        return "iproute2's ip is not installed (make iproute2)"
    probe = f"{NAME_PREFIX}probe-{os.getpid()}"
    made = subprocess.run([IP, "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot make a network namespace (root with CAP_NET_ADMIN): {made.stderr.strip()}"
    subprocess.run([IP, "netns", "del", probe], capture_output=True)
    return None


@dataclass
class Link:
    namespace: str
    host_side: str
    host_address: str
    peer_address: str  # the namespace's end


def _ip(*args: str) -> None:
    subprocess.run([IP or "ip", *args], check=True, capture_output=True, text=True)


def _remove_leftovers() -> None:
    """Namespaces and host ends of runs killed before their teardown (their process is gone, or
    its pid is ours again), probes included."""
    listed = subprocess.run([IP or "ip", "netns", "list"], capture_output=True, text=True).stdout
    for name in (line.split()[0] for line in listed.splitlines() if line.startswith(NAME_PREFIX)):
        pid = name.removeprefix(NAME_PREFIX).removeprefix("probe-")
        if pid.isdigit() and (int(pid) == os.getpid() or not os.path.exists(f"/proc/{pid}")):
            subprocess.run([IP or "ip", "link", "del", f"hvs{pid}"], capture_output=True)
            subprocess.run([IP or "ip", "netns", "del", name], capture_output=True)


def _link_addresses() -> Link:
    """This process' link: a /30 of 198.18.0.0/15 (the range kept for benchmarking networks,
    RFC 2544), the host's end .1, the namespace's .2. The same for every test of the process."""
    pid = os.getpid()
    base = ipaddress.IPv4Address("198.18.0.0") + (pid % 2**15) * 4  # this process' /30 of the /15
    return Link(f"{NAME_PREFIX}{pid}", f"hvs{pid}", str(base + 1), str(base + 2))


@contextmanager
def _made(link: Link) -> Iterator[Link]:
    """A new network namespace joined to the host by a veth pair, with ``link``'s addresses."""
    inside = f"hvc{os.getpid()}"
    _ip("netns", "add", link.namespace)
    try:
        _ip("link", "add", link.host_side, "type", "veth", "peer", "name", inside, "netns", link.namespace)
        _ip("addr", "add", f"{link.host_address}/30", "dev", link.host_side)
        _ip("link", "set", link.host_side, "up")
        _ip("-n", link.namespace, "addr", "add", f"{link.peer_address}/30", "dev", inside)
        _ip("-n", link.namespace, "link", "set", inside, "up")
        _ip("-n", link.namespace, "link", "set", "lo", "up")
        yield link
    finally:
        # Deleting the host's end deletes both ends, even while a process keeps the namespace.
        subprocess.run([IP or "ip", "link", "del", link.host_side], capture_output=True)
        subprocess.run([IP or "ip", "netns", "del", link.namespace], capture_output=True)


NET_TEMPLATE = "harvest_net_template"


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedPostgres]:
    """The module's PostgreSQL, listening on loopback and on the host's end of the link, with a
    migrated template (and the chaos side tables) that each test clones (``net_db``).

    One server for the module, not one per test: starting one (initdb, start, migrate) cost
    8-18 s of each test's setup on a loaded machine. What a test does to the server stays in its
    own database, dropped WITH (FORCE) after it, which ends every session the test left (a cut
    client's included); nothing else a cut leaves is the server's (the keepalive timings are
    each session's own). The server binds the host's address while a first link exists: each
    test then makes a new namespace and veth pair with the same addresses, which the listening
    socket serves again (a removed address does not close it)."""
    if IP is not None:
        _remove_leftovers()
    why_not = _can_make_namespaces()
    if why_not:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{why_not}: CI is set, so this is a failure, not a skip", pytrace=False)
        pytest.skip(why_not)
    addresses = _link_addresses()
    pg = EmbeddedPostgres(
        settings={
            "listen_addresses": f"127.0.0.1,{addresses.host_address}",
            "fsync": "off",
            "synchronous_commit": "off",
        },
        in_memory=True,
    )
    try:
        with _made(addresses):
            pg.start()
        with open(pg.data_dir / "pg_hba.conf", "a") as hba:
            hba.write(f"host all all {addresses.host_address}/30 trust\n")
        with psycopg.connect(pg.dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_reload_conf()")
        template = testkit.create_database(pg.dsn, NET_TEMPLATE)
        Migrator(template).run()
        create_side_tables(template)
        yield pg
    finally:
        pg.stop()


@pytest.fixture
def link(server: EmbeddedPostgres) -> Iterator[Link]:
    """This test's network namespace, joined to the host (and the module's server) by a veth
    pair: made for the test, deleted after it."""
    with _made(_link_addresses()) as link:
        yield link


@pytest.fixture
def net_db(server: EmbeddedPostgres) -> Iterator[str]:
    """This test's database on the module's server, a clone of the migrated template with the
    chaos side tables: its loopback DSN (``_via_link`` names it across the link)."""
    name = f"net_{uuid.uuid4().hex[:12]}"
    dsn = testkit.create_database(server.dsn, name, NET_TEMPLATE)
    yield dsn
    testkit.drop_database(server.dsn, name)


def _via_link(link: Link, server: EmbeddedPostgres, dsn: str) -> str:
    """The database of ``dsn`` (on the module's server), reached across the link."""
    name = conninfo.conninfo_to_dict(dsn)["dbname"]
    return f"postgresql://postgres@{link.host_address}:{server.port}/{name}"


class Lines:
    """The child's JSON lines, read from its stdout's pipe without a buffer that select() cannot
    see (two lines arriving together would leave the second unread until the limit)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        self.fd = proc.stdout.fileno()
        self.pending = b""

    def text(self, until: float) -> str | None:
        """The next line as text, or None if the child ended or the clock passed ``until``."""
        with selectors.DefaultSelector() as selector:
            selector.register(self.fd, selectors.EVENT_READ)
            while b"\n" not in self.pending:
                if time.monotonic() >= until or not selector.select(
                    timeout=max(0.0, until - time.monotonic())
                ):
                    return None
                chunk = os.read(self.fd, 65536)
                if not chunk:
                    return None
                self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return line.decode()

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


def _lock_free(dsn: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_try_advisory_lock(%s)", (HELD_LOCK,)).fetchone()
        return row is not None and row[0]


def test_both_ends_give_up_a_peer_that_went_silent(
    link: Link, server: EmbeddedPostgres, net_db: str, tmp_path: Path
) -> None:
    dsn = _via_link(link, server, net_db)
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
        wait_until(lambda: _sleeping(net_db), 30, "the client's statement on the server")
        assert not _lock_free(net_db), "the client's open transaction holds the lock"
        _ip("link", "set", link.host_side, "down")
        cut_at = time.monotonic()
        assert proc.stdin is not None
        proc.stdin.write(b"cut\n")
        proc.stdin.flush()

        # The server's end: the cut client's session ends and its transaction's lock is free.
        wait_until(lambda: _lock_free(net_db), GIVE_UP_LIMIT_SECS, "the server to end the cut session", 0.5)
        server_secs = time.monotonic() - cut_at
        assert server_secs >= EARLIEST_SECS, server_secs

        # This end: every call fails, naming a silent peer in one line.
        ended = lines.read(cut_at + GIVE_UP_LIMIT_SECS, len(CASES))
        by_case = {line["case"]: line for line in ended}
        assert set(by_case) == CASES, (
            f"still waiting {GIVE_UP_LIMIT_SECS:.0f} s after the cut: {sorted(CASES - set(by_case))}; "
            f"ended: {ended}; client log: {log_path.read_text()}"
        )
        for line in ended:
            assert line["error"] and any(e in line["error"] for e in SILENT_PEER_ERRORS), line
            assert EARLIEST_SECS <= line["secs"] < GIVE_UP_LIMIT_SECS, line
    finally:
        proc.kill()
        proc.wait()


# -- a worker cut off -----------------------------------------------------------------------------


def test_a_worker_cut_off_while_its_claim_decides_leaves_the_task_to_another(
    link: Link, server: EmbeddedPostgres, net_db: str, tmp_path: Path
) -> None:
    """An idle worker's claim stays open until its decision commits with it, up to 20 ms
    (docs/internals.md, "A claim that decides"); here the worker's host is cut off in between
    (its event loop held in the decision to make the window wide). Its session holds the task
    locked until the server gives the silent client up, about 30 s later, and rolls the claim
    back; then another worker decides it, and the run completes once. Without the server's
    keepalives the session, and the lock, would last two hours."""
    workers = WorkerProcs(net_db, tmp_path)
    try:
        hold = tmp_path / "hold"
        hold.write_text("")
        with harvest.Client(net_db) as client:
            _, handle = hold_in_an_open_claim(
                workers,
                hold,
                lambda: client.start_workflow(wf_held_decision, "x"),
                concurrency=2,
                database_url=_via_link(link, server, net_db),
                prefix=[IP or "ip", "netns", "exec", link.namespace],
            )
            eid = handle.execution_id
            # Worker A's open claim holds the workflow task: there, and locked.
            assert workflow_task(net_db, eid) is not None
            assert unlocked_workflow_task(net_db, eid) is None

            _ip("link", "set", link.host_side, "down")
            cut_at = time.monotonic()
            workers.start(concurrency=2)  # B, on loopback, with no decision to hold
            assert handle.result(timeout=GIVE_UP_LIMIT_SECS) == "x:ok"
            secs = time.monotonic() - cut_at
        # B could take the task only once the server had ended A's session; it ends every one of
        # A's (each 30 s after its own last word: some may still be open at this point).
        assert secs >= EARLIEST_SECS, secs
        wait_until(
            lambda: (
                not query(
                    net_db,
                    "SELECT 1 FROM pg_stat_activity WHERE client_addr = %s::inet",
                    (link.peer_address,),
                )
            ),
            GIVE_UP_LIMIT_SECS - secs,
            "the server to end every session of the cut worker",
            0.5,
        )
        check_decided_once(net_db, eid)
    finally:
        workers.close()


def test_a_worker_cut_off_mid_activity_rejoins_and_its_late_result_is_refused(
    link: Link, server: EmbeddedPostgres, net_db: str, tmp_path: Path
) -> None:
    """Split brain: worker A is cut off while its activity runs. Its lease passes, worker B
    retries the activity and completes the run. The link comes back after A's connections have
    given the database up (30 s); A's activity then finishes, and its result is refused (A's
    lease is gone) and changes nothing. A reconnects on its own and takes new work."""
    workers = WorkerProcs(net_db, tmp_path)
    try:
        a = workers.start(
            concurrency=2,
            database_url=_via_link(link, server, net_db),
            prefix=[IP or "ip", "netns", "exec", link.namespace],
        )
        with harvest.Client(net_db) as client:
            # The first run sleeps 45 s without heartbeats: its lease is 2 s (heartbeat_timeout).
            handle = client.start_workflow(wf_single, "sleep:45", 60.0, 2.0)
            eid = handle.execution_id
            wait_until(lambda: runs(net_db, eid), 15, "worker A to start the activity")
            _ip("link", "set", link.host_side, "down")
            cut_at = time.monotonic()
            b = workers.start(concurrency=2)  # on loopback
            assert handle.result(timeout=30) == "run2"

            # Back after A's connections gave up; A's first run ends at about 45 s.
            time.sleep(max(0.0, SILENT_PEER_GONE_SECS - (time.monotonic() - cut_at)))
            _ip("link", "set", link.host_side, "up")
            wait_until(
                lambda: "finished after its lease was lost" in workers.log(a),
                GIVE_UP_LIMIT_SECS,
                "worker A's late result to be refused",
            )
            done = runs(net_db, eid)
            assert [(r["attempt"], r["worker_pid"], r["result"]) for r in done] == [
                (1, a.pid, "run1"),
                (2, b.pid, "run2"),
            ]
            events = history(net_db, eid)
            check_history(events)
            assert count_events(events, "ActivityCompleted") == 1

            # A is the only worker now: a new run completes on it.
            workers.kill(b)
            again = client.start_workflow(wf_race, 7)
            assert again.result(timeout=GIVE_UP_LIMIT_SECS) == race_expected(7)
            assert {r["worker_pid"] for r in runs(net_db, again.execution_id)} == {a.pid}
    finally:
        workers.close()


def test_a_scheduler_cut_off_mid_tick_leaves_its_slots_to_another_once(
    link: Link, server: EmbeddedPostgres, net_db: str, tmp_path: Path
) -> None:
    """A scheduler's tick holds its schedule locked until it commits its firings. Cut off in the
    middle of one, it holds the schedule until the server gives it up, about 30 s later, and the
    tick rolls back; then another scheduler fires the slots it held, and the ones that came due
    meanwhile (within the schedule's 60 s catch-up window), each once. Without the server's
    keepalives the schedule would stay locked for two hours, and nothing would fire."""
    with psycopg.connect(net_db, autocommit=True) as conn:
        SqlApi(conn).create_schedule("netrace", "race_wf", cron="* * * * * *", overlap="allow_all")
    env = dict(os.environ, HARVEST_DATABASE_URL=_via_link(link, server, net_db))
    with open(tmp_path / "cut.log", "w") as log:
        cut = subprocess.Popen(
            [IP or "ip", "netns", "exec", link.namespace, sys.executable, str(SCHEDULER), "300", "300"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=log,
        )
    try:
        lines, held_slots = Lines(cut), None
        until = time.monotonic() + 30
        while held_slots is None and (line := lines.text(until)) is not None:
            if line.startswith("HOLDING "):
                held_slots = json.loads(line.split(" ", 1)[1])
        assert held_slots, (tmp_path / "cut.log").read_text()
        _ip("link", "set", link.host_side, "down")
        other = subprocess.run(
            [sys.executable, str(SCHEDULER), str(SCHEDULER_RUN_SECS), "0"],
            env=dict(os.environ, HARVEST_DATABASE_URL=net_db),
            capture_output=True,
            text=True,
            timeout=SCHEDULER_RUN_SECS + 60,
        )
        assert other.returncode == 0, other.stdout + other.stderr
    finally:
        cut.kill()
        cut.wait()

    with psycopg.connect(net_db) as conn:
        firings = conn.execute(
            "SELECT f.slot_at, f.workflow_id, f.status FROM harvest.schedule_firings AS f ORDER BY f.slot_at"
        ).fetchall()
        runs = conn.execute(
            "SELECT workflow_id, count(*) FROM harvest.executions WHERE workflow_id LIKE 'sched:netrace:%' "
            "GROUP BY workflow_id"
        ).fetchall()
    assert firings, "nothing fired: the cut scheduler's tick kept the schedule locked"
    slots = [int(f[0].timestamp()) for f in firings]
    # Each slot once, none lost, from the first the cut scheduler held to the last the other fired.
    assert all(n == 1 for _, n in runs) and len(runs) == len(firings)
    assert slots == list(range(slots[0], slots[-1] + 1)), slots
    assert {int(dt.datetime.fromisoformat(s).timestamp()) for s in held_slots} <= set(slots)
    assert all(f[2] == "started" for f in firings), firings
    assert slots[-1] - slots[0] >= SCHEDULER_RUN_SECS - 10, "the other scheduler fired to its end"


# -- an API client cut off ------------------------------------------------------------------------

SS = shutil.which("ss") or shutil.which("ss", path="/usr/sbin:/sbin")
# A client in the namespace: opens the event stream and says so, then reads it until killed.
STREAM_CLIENT = """
import sys, urllib.request
stream = urllib.request.urlopen(sys.argv[1], timeout=600)
print("open", flush=True)
while stream.readline():
    pass
"""


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False


def _connections_from(address: str, port: int) -> int:
    """The host's established TCP connections to ``port`` from ``address`` (the kernel's view)."""
    listed = subprocess.run(
        [SS or "ss", "-Htn", "state", "established", f"( sport = :{port} and dst {address} )"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return len(listed.splitlines())


def test_the_api_gives_up_an_event_stream_client_that_went_silent(
    link: Link, server: EmbeddedPostgres, net_db: str, tmp_path: Path
) -> None:
    """`harvest serve`'s connections carry the database's keepalive timings (its listening
    socket's, which they inherit): a client of `/stream` cut off is given up about 30 s after its
    last word, and its stream with it. Without them the server retransmits the stream's
    keepalive comments to the silent client for about 15 minutes (an idle long-poll waits for
    the OS's two hours)."""
    with socket.socket() as probe:
        probe.bind((link.host_address, 0))
        port = probe.getsockname()[1]
    env = dict(os.environ, HARVEST_DATABASE_URL=net_db, HARVEST_PROFILE="dev")
    serve = ["serve", "--host", link.host_address, "--port", str(port)]
    with open(tmp_path / "serve.log", "w") as log:
        api = subprocess.Popen(
            [sys.executable, "-c", "from harvest.cli import main; main()", *serve],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    base = f"http://{link.host_address}:{port}/api/harvest"
    client = None
    try:
        wait_until(lambda: _answers(f"{base}/health"), 60, "the API to serve")
        in_namespace = [IP or "ip", "netns", "exec", link.namespace]
        client = subprocess.Popen(
            [*in_namespace, sys.executable, "-c", STREAM_CLIENT, f"{base}/stream"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        opened = Lines(client).text(time.monotonic() + 30)
        assert opened == "open", (opened, (tmp_path / "serve.log").read_text())
        assert _connections_from(link.peer_address, port) == 1
        _ip("link", "set", link.host_side, "down")
        cut_at = time.monotonic()
        wait_until(
            lambda: _connections_from(link.peer_address, port) == 0,
            GIVE_UP_LIMIT_SECS,
            "the API to give the silent stream client up",
            0.5,
        )
        secs = time.monotonic() - cut_at
        assert secs >= EARLIEST_SECS, secs
        assert api.poll() is None, "the API went on serving"
    finally:
        if client is not None:
            client.kill()
            client.wait()
        api.send_signal(signal.SIGINT)
        try:
            api.wait(30)
        except subprocess.TimeoutExpired:
            api.kill()
            api.wait()
