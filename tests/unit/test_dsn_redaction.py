"""No password in any connection error or log line, whatever the DSN's form (issue 12, item 3),
and the TLS warning's decision (item 6). No database: every DSN here fails to parse or points
at a closed port."""

from __future__ import annotations

import asyncio
import logging
import re
import traceback

import psycopg
import pytest
from dsn_forms import FORMS, IDS
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from harvest.core.errors import ConfigError, DatabaseUnavailable, HarvestError
from harvest.db import connection
from harvest.db.connection import (
    RedactingAsyncConnection,
    RedactingConnection,
    connect,
    connect_async,
    parse_dsn,
    redact,
    tls_warning,
)


def leaks(text: str, secrets: list[str]) -> list[str]:
    return [s for s in secrets if s in text]


def full_text(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))


@pytest.mark.parametrize(("name", "dsn", "secrets"), FORMS, ids=IDS)
def test_redact_removes_the_password_from_libpq_own_message(name: str, dsn: str, secrets: list[str]) -> None:
    try:
        psycopg.connect(dsn, connect_timeout=2).close()
    except psycopg.Error as exc:
        raw = str(exc)
    else:
        pytest.fail("the DSN connected")
    assert not leaks(redact(raw, dsn), secrets), redact(raw, dsn)


@pytest.mark.parametrize(("name", "dsn", "secrets"), FORMS, ids=IDS)
def test_connect_raises_one_redacted_line(
    name: str, dsn: str, secrets: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with pytest.raises(HarvestError) as info:
        connect(dsn, connect_timeout=2)
    assert isinstance(info.value, ConfigError | DatabaseUnavailable)
    assert len(str(info.value).splitlines()) == 1
    assert not leaks(full_text(info.value), secrets), full_text(info.value)
    assert not leaks(caplog.text, secrets)


@pytest.mark.parametrize(("name", "dsn", "secrets"), FORMS, ids=IDS)
def test_connect_async_raises_redacted(name: str, dsn: str, secrets: list[str]) -> None:
    with pytest.raises(HarvestError) as info:
        asyncio.run(connect_async(dsn, connect_timeout=2))
    assert not leaks(full_text(info.value), secrets), full_text(info.value)


@pytest.mark.parametrize(("name", "dsn", "secrets"), FORMS, ids=IDS)
def test_pool_retry_warnings_are_redacted(
    name: str, dsn: str, secrets: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    """psycopg_pool logs every failed attempt with the error's text."""
    caplog.set_level(logging.DEBUG)
    pool = ConnectionPool(
        dsn, min_size=1, open=False, connection_class=RedactingConnection, kwargs={"connect_timeout": 2}
    )
    with pytest.raises(psycopg.Error):
        pool.open(wait=True, timeout=0.5)
    pool.close()
    assert "error connecting" in caplog.text
    assert not leaks(caplog.text, secrets), caplog.text


def test_async_pool_retry_warnings_are_redacted(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    dsn = "postgresql://u:Pw1234Secret@[::1/db"

    async def go() -> None:
        pool = AsyncConnectionPool(dsn, min_size=1, open=False, connection_class=RedactingAsyncConnection)
        with pytest.raises(psycopg.Error):
            await pool.open(wait=True, timeout=0.5)
        await pool.close()

    asyncio.run(go())
    assert "error connecting" in caplog.text and "Pw1234Secret" not in caplog.text


@pytest.mark.parametrize(
    ("name", "dsn", "secrets"),
    [f for f in FORMS if f[0].startswith(("uri-unclosed", "kv-space", "uri-bad-percent"))],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_parse_dsn_refuses_without_the_password(name: str, dsn: str, secrets: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        parse_dsn(dsn, "HARVEST_DEV_DATABASE_URL")
    assert "HARVEST_DEV_DATABASE_URL" in str(info.value)
    assert not leaks(full_text(info.value), secrets)


def test_a_parse_error_is_a_config_error_naming_the_cause() -> None:
    with pytest.raises(ConfigError, match="invalid percent-encoded token"):
        connect("postgresql://u:S3cret%zzPW@127.0.0.1:1/db")


def test_redact_leaves_text_without_a_password_alone() -> None:
    dsn = "postgresql://harvest@db.internal:5432/app"
    text = 'connection to server at "10.0.0.1", port 5432 failed: password authentication failed'
    assert redact(text, dsn) == text
    assert redact("postgresql://a:b@h/d and password='x y' and ?password=z&a=1") == (
        "postgresql://a:****@h/d and password=**** and ?password=****&a=1"
    )


# The URI userinfo shape as it was until it was made linear: what redact masks must not change.
_OLD_URI_USERINFO = re.compile(r"([a-z][a-z0-9+.-]*://[^\s:/@\"']*:)[^\s\"']*@", re.IGNORECASE)


@settings(max_examples=300, database=None, deadline=None)
@given(st.text(alphabet="aZ1+.-:/@ \"'x", max_size=40))
def test_redact_masks_uri_userinfo_as_the_plain_pattern_does(text: str) -> None:
    """The token-wise masking of user:password@ (linear) masks what the one pattern did."""
    assert connection._mask_uri_userinfo(text) == _OLD_URI_USERINFO.sub(f"\\1{connection.MASK}@", text)


LONG = 1_000_000


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("text", "masked"),
    [
        # a long name echoed in an error
        ("workflow " + "x" * LONG + " not found", "workflow " + "x" * LONG + " not found"),
        # a scheme-shaped run, no userinfo: the pattern, tried at each letter, scanned to its end
        ("x" * LONG + "://a@h", "x" * LONG + "://a@h"),
        # userinfo-shaped with no "@" after it: each "://" scanned the rest of the text
        ("@ " + "a://b:" * (LONG // 6), "@ " + "a://b:" * (LONG // 6)),
    ],
    ids=["word", "scheme", "userinfo"],
)
def test_redact_takes_linear_time_on_long_text(text: str, masked: str) -> None:
    """redact runs on every error a web handler answers and every failure a worker records,
    whose text may echo a caller's input: on a megabyte the URI pattern took hours (7 s for
    30 kB, quadratic); token-wise it takes milliseconds. The timeout is the guard (a margin of
    thousands either way), not a measure."""
    assert redact(text) == masked


# -- fail fast: which connection errors are answers rather than outages (item 13) --------------


@pytest.mark.parametrize(
    ("message", "permanent"),
    [
        (
            (
                'connection to server at "h", port 5432 failed: '
                'FATAL:  password authentication failed for user "u"'
            ),
            True,
        ),
        ('connection to server at "h", port 5432 failed: fe_sendauth: no password supplied', True),
        ('connection to server at "h", port 5432 failed: FATAL:  database "nodb" does not exist', True),
        ('connection to server at "h", port 5432 failed: FATAL:  role "nobody" does not exist', True),
        ('FATAL:  no pg_hba.conf entry for host "10.0.0.2", user "u", database "d", no encryption', True),
        ('connection to server at "h", port 5432 failed: Connection refused', False),
        ('connection to server at "h", port 5432 failed: FATAL:  the database system is starting up', False),
        ('connection to server at "h", port 5432 failed: FATAL:  sorry, too many clients already', False),
        ("failed to resolve host 'db': [Errno -3] Temporary failure in name resolution", False),
        # a TLS setup one side refuses (sslmode=verify-full against a server it cannot verify)
        (
            (
                'connection to server at "h", port 5432 failed: '
                "server does not support SSL, but SSL was required"
            ),
            True,
        ),
        ('connection to server at "h", port 5432 failed: SSL error: certificate verify failed', True),
        (
            (
                'connection to server at "h", port 5432 failed: '
                'server certificate for "a" does not match host name "b"'
            ),
            True,
        ),
    ],
)
def test_is_permanent(message: str, permanent: bool) -> None:
    assert connection.is_permanent(psycopg.OperationalError(message)) is permanent


def test_a_parse_error_is_permanent() -> None:
    assert connection.is_permanent(psycopg.ProgrammingError("invalid percent-encoded token"))


# -- TLS (item 6) ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dsn", "env", "warns"),
    [
        # local: never
        ("postgresql://u:pw@localhost/app", {}, False),
        ("postgresql://u@127.0.0.1:5432/app", {}, False),
        ("postgresql://u@127.8.9.10/app", {}, False),
        ("postgresql://u@[::1]:5432/app", {}, False),
        ("host=/var/run/postgresql dbname=app", {}, False),
        ("dbname=app", {}, False),  # no host: the default unix socket
        ("postgresql:///app?host=/tmp", {}, False),
        ("postgresql://u@localhost/app?sslmode=disable", {}, False),
        # remote, below verify-full
        ("postgresql://u@db.internal/app", {}, True),
        ("postgresql://u@10.0.0.5/app", {}, True),
        ("postgresql://u@db.internal/app?sslmode=disable", {}, True),
        ("postgresql://u@db.internal/app?sslmode=allow", {}, True),
        ("postgresql://u@db.internal/app?sslmode=prefer", {}, True),
        ("postgresql://u@db.internal/app?sslmode=require", {}, True),
        ("postgresql://u@db.internal/app?sslmode=verify-ca&sslrootcert=/ca.pem", {}, True),
        ("host=localhost,db.internal dbname=app", {}, True),  # any remote host of a list
        ("host=db.internal hostaddr=10.1.1.1 dbname=app sslmode=require", {}, True),
        ("dbname=app", {"PGHOST": "db.internal"}, True),
        ("postgresql://u@db.internal/app", {"PGSSLMODE": "require"}, True),
        # remote, verified
        ("postgresql://u@db.internal/app?sslmode=verify-full&sslrootcert=/etc/ssl/ca.pem", {}, False),
        ("host=db.internal sslmode=verify-full", {}, False),
        ("postgresql://u@db.internal/app", {"PGSSLMODE": "verify-full"}, False),
        ("postgresql://u@db.internal/app?sslrootcert=system", {}, False),  # libpq: implies verify-full
        ("host=db.internal hostaddr=127.0.0.1 dbname=app", {}, False),  # connects to loopback
        # unparseable: connecting reports it
        ("postgresql://u:pw@[::1/db", {}, False),
    ],
)
def test_tls_warning_decision(dsn: str, env: dict[str, str], warns: bool) -> None:
    assert (tls_warning(dsn, env) is not None) is warns


def test_tls_warning_names_the_mode_and_the_fix_without_the_password() -> None:
    message = tls_warning("postgresql://u:TopSecret9@db.internal:6432/app?sslmode=require", {})
    assert message is not None
    assert "sslmode=require" in message and "verify-full" in message and "sslrootcert" in message
    assert "db.internal:6432/app" in message and "TopSecret9" not in message
    unset = tls_warning("postgresql://u@db.internal/app", {})
    assert "prefer" in unset


def test_the_tls_warning_is_logged_once_per_dsn(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connection, "_tls_warned", set())
    monkeypatch.delenv("PGSSLMODE", raising=False)
    caplog.set_level(logging.WARNING, logger="harvest.db")
    # A remote name that cannot resolve: the connect fails fast, after the warning.
    dsn = "postgresql://u:TopSecret9@harvest-tls-test.invalid:5432/app?sslmode=require&connect_timeout=2"
    for _ in range(3):
        with pytest.raises(DatabaseUnavailable):
            connect(dsn, connect_timeout=2)
    warnings = [r for r in caplog.records if r.name == "harvest.db" and "verify-full" in r.getMessage()]
    assert len(warnings) == 1
    assert "TopSecret9" not in caplog.text
    caplog.clear()
    connection.warn_if_unverified_tls("postgresql://u@127.0.0.1/app")  # local: silent
    assert not caplog.records


def test_no_database_given_tells_a_python_caller_how_to_give_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Client(), AsyncClient.connect() and Worker(app) with no DSN and no HARVEST_DATABASE_URL:
    the message named `--database-url`, a flag of the CLI, which a Python caller has not got."""
    from harvest import App, AsyncClient, Client, Worker

    monkeypatch.delenv(connection.DSN_ENV, raising=False)
    for make in (Client, lambda: asyncio.run(AsyncClient.connect()), lambda: Worker(App())):
        with pytest.raises(ConfigError) as err:
            make()
        text = str(err.value)
        assert "HARVEST_DATABASE_URL" in text
        assert "--database-url" not in text
        assert 'Client("postgresql://' in text
