"""session_url (HARVEST_SESSION_URL) declares the database URL a transaction-mode pool
(harvest/db/pooler.py, docs/operations.md, "Behind a connection pooler"): no database here."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harvest.config.config import config_from_mapping, database_url
from harvest.core.errors import ConfigError
from harvest.db import pooler
from harvest.db.connection import resolve_dsn

POOLED = "postgresql://app@pgbouncer.internal:6432/harvest"
DIRECT = "postgresql://app@db.internal:5432/harvest"


@pytest.fixture(autouse=True)
def forgotten() -> Iterator[None]:
    pooler.forget(POOLED)
    yield
    pooler.forget(POOLED)


def test_the_config_files_session_url_pairs_with_the_database_url() -> None:
    config = config_from_mapping({"database_url": POOLED, "session_url": DIRECT}, "harvest.toml", env={})
    assert database_url(None, config, env={}) == POOLED
    assert pooler.is_pooled(POOLED) and pooler.session_dsn(POOLED) == DIRECT
    assert not pooler.needs_session(POOLED)
    assert pooler.session_dsn(DIRECT) == DIRECT  # (the session URL itself is not pooled)


def test_the_python_apis_url_pairs_with_the_environments_session_url(monkeypatch) -> None:
    monkeypatch.setenv(pooler.SESSION_URL_ENV, DIRECT)
    assert resolve_dsn(POOLED) == POOLED
    assert pooler.session_dsn(POOLED) == DIRECT


def test_without_a_session_url_nothing_is_pooled(monkeypatch) -> None:
    monkeypatch.delenv(pooler.SESSION_URL_ENV, raising=False)
    config = config_from_mapping({"database_url": POOLED}, "harvest.toml", env={})
    assert database_url(None, config, env={}) == POOLED
    assert resolve_dsn(POOLED) == POOLED
    assert not pooler.is_pooled(POOLED) and pooler.session_dsn(POOLED) == POOLED


def test_a_session_url_that_is_the_pooled_url_itself_is_refused() -> None:
    with pytest.raises(ConfigError, match="the database URL itself"):
        pooler.declare(POOLED, POOLED)
    with pytest.raises(ConfigError, match="session_url is empty"):
        pooler.declare(POOLED, " ")
    assert not pooler.is_pooled(POOLED)
