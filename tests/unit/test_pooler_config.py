"""session_url (HARVEST_SESSION_URL) declares the database URL a transaction-mode pool
(harvest/db/pooler.py, docs/operations.md, "Behind a connection pooler"): no database here."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest

from harvest.config.config import config_from_mapping, database_url, shard_urls
from harvest.core.errors import ConfigError
from harvest.db import pooler
from harvest.db.connection import resolve_dsn
from harvest.telemetry.metrics import NullMetrics
from harvest.worker.sampler import MetricsSampler

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


# -- a sharded deployment: shards.session_urls, under the keys of shards.urls -------------------------
POOLED_1 = "postgresql://app@pgbouncer.internal:6432/harvest_1"
DIRECT_1 = "postgresql://app@db-1.internal:5432/harvest_1"


@pytest.fixture
def forgotten_shard() -> Iterator[None]:
    pooler.forget(POOLED_1)
    yield
    pooler.forget(POOLED_1)


def test_shard_urls_pair_each_shard_with_its_session_url(forgotten_shard) -> None:
    config = config_from_mapping(
        {
            "database_url": POOLED,
            "session_url": DIRECT,
            "shards": {"urls": {"1": POOLED_1}, "session_urls": {"1": DIRECT_1}},
        },
        "harvest.toml",
        env={},
    )
    assert shard_urls(config, database_url(None, config, env={})) == {0: POOLED, 1: POOLED_1}
    assert pooler.session_dsn(POOLED) == DIRECT and pooler.session_dsn(POOLED_1) == DIRECT_1


def test_a_shards_session_url_from_the_environment(forgotten_shard) -> None:
    env = {"HARVEST_SHARDS__URLS__1": POOLED_1, "HARVEST_SHARDS__SESSION_URLS__1": DIRECT_1}
    config = config_from_mapping({"database_url": DIRECT}, "harvest.toml", env=env)
    assert config.setting("shards.session_urls").source == "HARVEST_SHARDS__SESSION_URLS__1"  # type: ignore[union-attr]
    assert shard_urls(config, DIRECT) == {0: DIRECT, 1: POOLED_1}
    assert pooler.session_dsn(POOLED_1) == DIRECT_1 and not pooler.is_pooled(DIRECT)


def test_migrating_a_shard_uses_its_session_url_never_shard_0s(forgotten_shard) -> None:
    """Before: session_url paired with whatever database URL a command was given, so
    `HARVEST_DATABASE_URL=<shard 1's pooled url> harvest migrate run --shard-id 1` migrated shard
    0 through its session URL (and made it shard 1 when it held no execution yet)."""
    shards = {"urls": {"1": POOLED_1}}
    config = config_from_mapping(
        {"database_url": POOLED, "session_url": DIRECT, "shards": shards}, "f", env={}
    )
    assert database_url(None, config, env={"HARVEST_DATABASE_URL": POOLED_1}) == POOLED_1
    assert pooler.session_dsn(POOLED_1) == POOLED_1  # not shard 0's DIRECT: migrate refuses the pooler
    shards["session_urls"] = {"1": DIRECT_1}
    config = config_from_mapping(
        {"database_url": POOLED, "session_url": DIRECT, "shards": shards}, "f", env={}
    )
    assert database_url(None, config, env={"HARVEST_DATABASE_URL": POOLED_1}) == POOLED_1
    assert pooler.session_dsn(POOLED_1) == DIRECT_1


def test_a_session_url_for_a_shard_without_a_url_is_refused() -> None:
    shards = {"urls": {"1": POOLED_1}, "session_urls": {"2": DIRECT_1}}
    with pytest.raises(
        ConfigError, match=r"shards.session_urls.2 \(from harvest.toml\).*shard 2, which has no url"
    ):
        config_from_mapping({"database_url": POOLED, "shards": shards}, "harvest.toml", env={})
    with pytest.raises(ConfigError, match=r"HARVEST_SHARDS__SESSION_URLS__7.*shard 7, which has no url"):
        config_from_mapping({"database_url": POOLED}, "f", env={"HARVEST_SHARDS__SESSION_URLS__7": DIRECT_1})
    with pytest.raises(ConfigError, match=r"shards.session_urls.x .*not a shard number"):
        config_from_mapping({"shards": {"session_urls": {"x": DIRECT_1}}}, "f", env={})


def test_shard_0s_session_url_given_twice_and_differing_is_refused() -> None:
    data = {"database_url": POOLED, "session_url": DIRECT, "shards": {"session_urls": {"0": DIRECT_1}}}
    config = config_from_mapping(data, "harvest.toml", env={})
    with pytest.raises(ConfigError, match="both give shard 0's session URL, and they differ"):
        database_url(None, config, env={})
    assert not pooler.is_pooled(POOLED)
    data["shards"] = {"session_urls": {"0": DIRECT}}  # the same twice: fine
    assert database_url(None, config_from_mapping(data, "f", env={}), env={}) == POOLED
    assert pooler.session_dsn(POOLED) == DIRECT


def test_a_shards_session_url_that_is_its_url_is_refused(forgotten_shard) -> None:
    shards = {"urls": {"1": POOLED_1}, "session_urls": {"1": POOLED_1}}
    config = config_from_mapping({"database_url": DIRECT, "shards": shards}, "f", env={})
    with pytest.raises(ConfigError, match="the database URL itself"):
        shard_urls(config, DIRECT)


def test_a_second_session_url_for_one_pooled_url_is_refused(forgotten_shard, monkeypatch) -> None:
    """Before: the last one won: HARVEST_SESSION_URL (shard 0's) paired with shard 1's url given
    to Client() replaced shards.session_urls.1, and its LISTEN went to shard 0's database."""
    config = config_from_mapping(
        {"shards": {"urls": {"1": POOLED_1}, "session_urls": {"1": DIRECT_1}}}, "f", env={}
    )
    shard_urls(config)
    monkeypatch.setenv(pooler.SESSION_URL_ENV, DIRECT)
    with pytest.raises(ConfigError, match="two session URLs for one pooled database URL"):
        resolve_dsn(POOLED_1)
    assert pooler.session_dsn(POOLED_1) == DIRECT_1
    pooler.declare(POOLED_1, DIRECT_1)  # the same again, or none: fine
    pooler.declare(POOLED_1)
    assert pooler.session_dsn(POOLED_1) == DIRECT_1


def test_a_shards_sampler_off_behind_a_pooler_names_that_shards_setting(forgotten_shard, caplog) -> None:
    """Before: shard 1's warning said to set session_url, which is shard 0's."""
    pooler.declare(POOLED_1)
    sampler = MetricsSampler(NullMetrics(), interval=0.05)
    with caplog.at_level(logging.WARNING, logger="harvest"):
        asyncio.run(sampler.run(POOLED_1, 1))
    assert sampler.samples == 0
    assert "set its session URL, shards.session_urls.1 (HARVEST_SHARDS__SESSION_URLS__1), to" in caplog.text
    assert "session_url (" not in caplog.text


STAGING = "postgresql://app@pgbouncer.internal:6432/staging"


def test_an_explicit_url_naming_another_database_keeps_its_sessions(monkeypatch) -> None:
    """Before: the configured session URL paired with whatever URL a command was given, so
    `--database-url <staging>` ran migrations and LISTEN on the configured (production) database."""
    pooler.forget(STAGING)
    monkeypatch.setenv(pooler.SESSION_URL_ENV, DIRECT)
    monkeypatch.setenv("HARVEST_DATABASE_URL", POOLED)
    config = config_from_mapping({"database_url": POOLED, "session_url": DIRECT}, "harvest.toml", env={})
    try:
        assert database_url(STAGING, config, env={}) == STAGING
        assert resolve_dsn(STAGING) == STAGING
        assert not pooler.is_pooled(STAGING) and pooler.session_dsn(STAGING) == STAGING
        # The configured URL still pairs; the session URL given as --database-url is a direct
        # connection (before: refused as "the database URL itself").
        assert database_url(None, config, env={}) == POOLED and pooler.session_dsn(POOLED) == DIRECT
        assert database_url(DIRECT, config, env={}) == DIRECT and not pooler.is_pooled(DIRECT)
    finally:
        pooler.forget(STAGING)


# -- session_urls given in Python: ShardPools, AsyncShardPools, Client, AsyncClient (as the Worker's) --
def test_shard_pools_take_each_shards_session_url_as_the_worker_does(forgotten, forgotten_shard) -> None:
    """Before: only ``Worker(session_urls=...)`` and the config declared a shard's session URL, so
    pools (and the clients built on them) made in Python held their LISTEN through the pooler."""
    from harvest.shard.pools import AsyncShardPools, ShardPools
    from harvest.shard.router import ShardRouter

    router = ShardRouter([0, 1], [0, 1], 0)
    for kind in (ShardPools, AsyncShardPools):
        pooler.forget(POOLED)
        pooler.forget(POOLED_1)
        arg = rf"{kind.__name__}\(session_urls=\.\.\.\)"
        with pytest.raises(ConfigError, match=rf"{arg}\[2\]: no database URL of shard 2"):
            kind(router, {0: POOLED, 1: POOLED_1}, session_urls={2: DIRECT_1})
        with pytest.raises(ConfigError, match=rf"{arg}\[1\] must be a database URL string"):
            kind(router, {0: POOLED, 1: POOLED_1}, session_urls={1: 5})  # type: ignore[dict-item]
        with pytest.raises(ConfigError, match=rf"{arg} maps a shard number"):
            kind(router, {0: POOLED, 1: POOLED_1}, session_urls=[DIRECT])  # type: ignore[arg-type]
        assert not pooler.is_pooled(POOLED_1)
        kind(router, {0: POOLED, 1: POOLED_1}, session_urls={1: DIRECT_1})
        assert pooler.session_dsn(POOLED_1) == DIRECT_1 and not pooler.is_pooled(POOLED)


CLOSED = "postgresql://app@127.0.0.1:1/harvest?connect_timeout=2"  # (port 1: refused at once)


@pytest.fixture
def forgotten_closed() -> Iterator[None]:
    pooler.forget(CLOSED)
    yield
    pooler.forget(CLOSED)


def test_clients_take_a_session_url_before_their_first_connection(forgotten_closed, monkeypatch) -> None:
    """``Client(dsn, session_urls={0: ...})`` and ``AsyncClient.connect`` pair the URL with its
    session URL before the first connection (its LISTEN goes there); a shard it has no URL for
    is refused, naming the argument, before any connection is tried."""
    from harvest import AsyncClient, Client

    monkeypatch.delenv(pooler.SESSION_URL_ENV, raising=False)
    with pytest.raises(ConfigError, match=r"Client\(session_urls=\.\.\.\)\[1\]: no database URL of shard 1"):
        Client(CLOSED, session_urls={1: DIRECT})
    with pytest.raises(ConfigError, match=r"AsyncClient.connect\(session_urls=\.\.\.\)\[1\]: no database"):
        asyncio.run(AsyncClient.connect(CLOSED, session_urls={1: DIRECT}))
    assert not pooler.is_pooled(CLOSED)
    with pytest.raises(Exception) as caught:  # (declared, then the connection refused)
        Client(CLOSED, session_urls={0: DIRECT})
    assert not isinstance(caught.value, ConfigError) and pooler.session_dsn(CLOSED) == DIRECT
    pooler.forget(CLOSED)
    with pytest.raises(Exception) as caught:
        asyncio.run(AsyncClient.connect(CLOSED, session_urls={0: DIRECT}))
    assert not isinstance(caught.value, ConfigError) and pooler.session_dsn(CLOSED) == DIRECT


def test_a_sharded_client_takes_its_pools_shards_session_urls(forgotten, forgotten_shard) -> None:
    """``Client(shards=pools, session_urls=...)``: the keys are the pools' shards."""
    from harvest import Client
    from harvest.shard.pools import ShardPools
    from harvest.shard.router import ShardRouter

    pools = ShardPools(ShardRouter([0, 1], [0, 1], 0), {0: POOLED, 1: POOLED_1}, acquire_timeout=0.1)
    with pytest.raises(ConfigError, match=r"Client\(session_urls=\.\.\.\)\[3\]: no database URL of shard 3"):
        Client(shards=pools, session_urls={3: DIRECT_1})
    assert not pooler.is_pooled(POOLED_1)
