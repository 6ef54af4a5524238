"""A real PgBouncer in front of a test's server (Debian's, `make pgbouncer`): what the pooler
suites share (tests/integration/test_pooler.py, test_pooler_shards.py)."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
import pytest
from psycopg import conninfo

from harvest import App, activity, workflow
from harvest.db.embedded import SERVICE_USER

PGBOUNCER = shutil.which("pgbouncer", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
# A pooler suite's pytestmark: skipped where pgbouncer is not installed, except in CI.
needs_pgbouncer = pytest.mark.skipif(
    PGBOUNCER is None and os.environ.get("CI") != "true",
    reason="pgbouncer is not installed (make pgbouncer)",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgBouncer:
    """A pgbouncer of one test in front of ``dsn``'s server: its own port and directory, every
    database passed through, logins of ``dsn``'s user trusted; killed at the end. As root it
    runs as the embedded server's user (pgbouncer refuses root)."""

    def __init__(self, dsn: str, mode: str, ignored: tuple[str, ...] = ()):
        self.target = conninfo.conninfo_to_dict(dsn)
        self.dsn, self.mode = dsn, mode
        self.ignored = ("extra_float_digits", *ignored)  # startup parameters it drops unsaid
        self.port = free_port()
        self.directory = Path(tempfile.mkdtemp(prefix="harvest-pgbouncer-"))
        self.proc: subprocess.Popen | None = None

    def url(self, dsn: str | None = None) -> str:
        """``dsn`` (default: the one it stands in front of) through this pgbouncer."""
        return conninfo.make_conninfo(dsn or self.dsn, host="127.0.0.1", port=str(self.port))

    def start(self) -> PgBouncer:
        assert PGBOUNCER is not None, "pgbouncer is not installed: make pgbouncer"
        user = str(self.target.get("user") or "postgres")
        (self.directory / "users.txt").write_text(f'"{user}" ""\n')
        config = self.directory / "pgbouncer.ini"
        config.write_text(
            "[databases]\n"
            f"* = host={self.target.get('host') or '127.0.0.1'} port={self.target.get('port') or 5432}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.directory / 'users.txt'}\n"
            f"pool_mode = {self.mode}\ndefault_pool_size = 10\nmax_client_conn = 200\n"
            f"ignore_startup_parameters = {','.join(self.ignored)}\n"
        )
        command = [PGBOUNCER, str(config)]
        if os.geteuid() == 0:
            service = pwd.getpwnam(SERVICE_USER)  # (made by the embedded server, started by now)
            self.directory.chmod(0o755)
            for path in (self.directory, config, self.directory / "users.txt"):
                os.chown(path, service.pw_uid, service.pw_gid)
            command = [PGBOUNCER, "-u", SERVICE_USER, str(config)]
        self.proc = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"pgbouncer did not start: {self.proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
            try:
                with psycopg.connect(self.url(), connect_timeout=2):
                    return self
            except psycopg.OperationalError:
                time.sleep(0.05)
        self.stop()
        raise AssertionError(f"pgbouncer did not start on port {self.port}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        shutil.rmtree(self.directory, ignore_errors=True)


# What the pooler suites run: a workflow and its activity, each a few calls, on queue "pooled".
@activity(queue="pooled")
async def add(ctx, a: int, b: int) -> int:
    return a + b


@workflow(queue="pooled")
async def adds(ctx, n: int) -> int:
    return await ctx.execute_activity(add, n, 1)


app = App(workflows=[adds], activities=[add])
