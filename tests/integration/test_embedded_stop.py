"""The embedded PostgreSQL's stop (`harvest dev`'s Ctrl-C): what it waits for.

An idle `harvest dev` took about 5 s to end after Ctrl-C, nearly all of it after the worker and
the API had stopped: the server's shutdown checkpoint (writing and syncing every buffer the
migration dirtied, 1 to 2 s) for a data directory removed the next moment, then the removal of
its thousands of files (3 s on a disk mounted with online discard). A directory about to be
removed is now stopped without a checkpoint, and `harvest dev` leaves its removal to the
watchdog; a kept one is still stopped cleanly."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psycopg
import pytest

import harvest.db.embedded as embedded
from harvest.db.embedded import EmbeddedPostgres


def _log_after_each_call(server: EmbeddedPostgres, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The server's log as each pg_ctl call of ``server`` returns (read before a removal)."""
    logs: list[str] = []
    run = server._run

    def spied(args: list[str], **kwargs: Any) -> Any:
        done = run(args, **kwargs)
        logs.append(server.log_file.read_text() if server.log_file.exists() else "")
        return done

    monkeypatch.setattr(server, "_run", spied)
    return logs


def _postmaster(server: EmbeddedPostgres) -> int:
    return int((server.data_dir / "postmaster.pid").read_text().split()[0])


def _alive(pid: int) -> bool:
    """(A postmaster that exited may wait as a zombie for whoever adopted it to reap it.)"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    with contextlib.suppress(FileNotFoundError):  # (no /proc: a zombie counts as alive)
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return not stat.parent.parent.joinpath("self").exists()


def _wait_until_gone(path: Path) -> None:
    """(The bound only tells a removal that happens from one that never does.)"""
    deadline = time.monotonic() + 60
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not path.exists(), f"{path} was never removed"


def test_a_server_whose_files_are_removed_stops_without_a_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    server = EmbeddedPostgres(in_memory=True)
    server.start()
    try:
        with psycopg.connect(server.dsn, autocommit=True) as conn:  # buffers to write at a checkpoint
            conn.execute("CREATE TABLE dirty AS SELECT g FROM generate_series(1, 10000) AS g")
        postmaster = _postmaster(server)
        logs = _log_after_each_call(server, monkeypatch)
        server.stop()
        (log,) = logs
        assert "received immediate shutdown request" in log, log
        assert "checkpoint starting: shutdown" not in log, log
        assert not _alive(postmaster)
        assert not server.base_dir.exists()  # without remove_in_background: removed before it returns
    finally:
        server.stop()


def test_dev_s_stop_leaves_the_removal_to_the_watchdog(monkeypatch: pytest.MonkeyPatch) -> None:
    """`harvest dev` returns once the server is down: the files go in the background."""
    server = EmbeddedPostgres(in_memory=True)
    server.start()
    postmaster = _postmaster(server)

    def waited(*_: Any, **__: Any) -> None:
        raise AssertionError("the stop waited for the files' removal")

    monkeypatch.setattr(embedded, "shutil", SimpleNamespace(rmtree=waited))
    try:
        server.stop(remove_in_background=True)
        assert not _alive(postmaster)
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(server.dsn, connect_timeout=5).close()
        monkeypatch.undo()
        _wait_until_gone(server.base_dir)  # the watchdog's rm -rf
    finally:
        if (server.data_dir / "postmaster.pid").exists():
            os.kill(_postmaster(server), signal.SIGQUIT)
        shutil.rmtree(server.base_dir, ignore_errors=True)


def test_a_kept_data_dir_is_stopped_cleanly_for_the_next_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """A --data-dir outlives the process: its stop checkpoints (and background removal, asked
    for by `harvest dev` whatever the directory, removes nothing of it)."""
    # (not tmp_path: root's server user; in memory where there is room, as the test servers)
    scratch = Path(tempfile.mkdtemp(prefix="harvest-embedded-test-", dir=embedded._memory_dir()))
    scratch.chmod(0o755)
    kept = scratch / "kept"
    server = EmbeddedPostgres(base_dir=kept)
    try:
        server.start()
        logs = _log_after_each_call(server, monkeypatch)
        server.stop(remove_in_background=True)
        assert "received fast shutdown request" in logs[-1] and "checkpoint starting: shutdown" in logs[-1]
        assert (kept / "data" / "PG_VERSION").exists()
        server = EmbeddedPostgres(base_dir=kept)
        server.start()
        # (a server stopped without its checkpoint would say it "was interrupted" and recover)
        assert "database system was shut down at" in server.log_file.read_text().split("fast shutdown")[-1]
        server.stop()
    finally:
        server.stop()
        pid_file = kept / "data" / "postmaster.pid"
        if pid_file.exists() and _alive(int(pid_file.read_text().split()[0])):
            os.kill(int(pid_file.read_text().split()[0]), signal.SIGQUIT)
        shutil.rmtree(scratch, ignore_errors=True)


def test_an_in_memory_server_keeps_its_files_in_memory_where_there_is_room(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The test servers' files go to a tmpfs (creating and dropping a database per test spent
    the server's CPU in the disk's inode allocation); a tmpfs without the room, or none, leaves
    them in the temporary directory, and a named base directory is never moved."""
    # Not under tmp_path: as root the server runs as its own user, which must traverse every
    # parent, and a pytest starting beside this one (the CI runs its parts in parallel) puts
    # pytest's own root back to 0700 (a PANIC on pg_control, once).
    memory = Path(tempfile.mkdtemp(prefix="harvest-test-shm-"))
    request.addfinalizer(lambda: shutil.rmtree(memory, ignore_errors=True))
    monkeypatch.setattr(embedded, "MEMORY_DIR", memory)
    monkeypatch.setattr(embedded, "MEMORY_MIN_FREE", 0)
    kept = EmbeddedPostgres(base_dir=tmp_path / "kept", in_memory=True)
    assert kept.base_dir == tmp_path / "kept" and not kept.in_memory
    server = EmbeddedPostgres(settings={"fsync": "off"}, in_memory=True)
    assert server.in_memory and server.base_dir.parent == memory
    assert server.settings == {"fsync": "off", "max_wal_size": embedded.MEMORY_MAX_WAL_SIZE}
    own = EmbeddedPostgres(settings={"max_wal_size": "64MB"}, in_memory=True)
    assert own.settings == {"max_wal_size": "64MB"}
    server.start()
    try:
        with psycopg.connect(server.dsn) as conn:
            assert conn.execute("SHOW max_wal_size").fetchone() == ("256MB",)
            assert conn.execute("SHOW data_directory").fetchone() == (str(server.data_dir),)
    finally:
        server.stop()
        own.stop()
    assert not server.base_dir.exists() and not own.base_dir.exists()

    monkeypatch.setattr(embedded, "MEMORY_MIN_FREE", shutil.disk_usage(memory).free + (1 << 40))
    no_room = EmbeddedPostgres(in_memory=True)
    monkeypatch.setattr(embedded, "MEMORY_DIR", tmp_path / "absent")
    no_tmpfs = EmbeddedPostgres(in_memory=True)
    for server in (no_room, no_tmpfs):
        assert not server.in_memory and server.base_dir.parent == Path(tempfile.gettempdir()).absolute()
        assert "max_wal_size" not in server.settings
        server.stop()
