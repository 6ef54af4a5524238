"""The CLI run in this process on both transports: over SQL (a DSN) and over HTTP (the
management API on the same database, in process, as the CLI's HTTP transport at BASE), for the
tests that hold a command to one answer on both."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from click.testing import CliRunner, Result
from starlette.testclient import TestClient

from harvest.cli import http as cli_http
from harvest.cli.main import main
from harvest.config import load_config
from harvest.web.app import management_app

BASE = "http://testserver"
# No setting of the environment reaches the CLI: each command names its transport.
ENV = {
    "HARVEST_DATABASE_URL": None,
    "HARVEST_URL": None,
    "HARVEST_TOKEN": None,
    "HARVEST_HTTP_TIMEOUT_SECS": None,
    "HARVEST_CONFIG": None,
}


def cli(*args: str) -> Result:
    """`harvest ARGS` in this process (the HTTP transport can then reach the served API)."""
    return CliRunner().invoke(main, list(args), env=ENV)


@contextlib.contextmanager
def served(db: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The management API on ``db``, in process, as the CLI's HTTP transport at BASE (it holds no
    App and no keys)."""
    app = management_app(dsn=db, config=load_config(env={}), profile="dev")  # type: ignore[arg-type]
    with TestClient(app, base_url=BASE) as client:
        monkeypatch.setattr(cli_http, "TRANSPORT", client._transport)
        yield


def over(how: str, db: str, *args: str) -> Result:
    """``harvest ARGS`` over SQL (``how`` "sql": the DSN) or over HTTP (the served API)."""
    return cli(*args, "--database-url", db) if how == "sql" else cli("--base-url", BASE, *args)


def transports(db: str, *args: str) -> dict[str, Result]:
    """``harvest ARGS`` over SQL and over HTTP."""
    return {how: over(how, db, *args) for how in ("sql", "http")}


def one_error_line(r: Result, starts: str, *where: object) -> str:
    """The one stderr line of a command that failed with exit 1, which starts ``error: `` +
    ``starts`` (``where`` names the case in a failure)."""
    assert r.exit_code == 1, (*where, r.output)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {starts}"), (*where, r.stderr)
    return lines[0]
