"""The pools' connections read json/jsonb with harvest.db.jsoncodec.loads and the SQL API writes
jsonb parameters with jsoncodec.dumps: against the real server, every value reads back as a
plain psycopg connection (json.loads) reads it, and is stored as json.dumps' text is stored."""

from __future__ import annotations

import asyncio
import random

import psycopg
import pytest
from psycopg.types.json import Jsonb
from tests.integration.test_jsonb_text_matches_server import EDGE_CASES, random_value

from harvest.db import jsoncodec
from harvest.db.connection import RedactingAsyncConnection, RedactingConnection
from harvest.db.sqlapi import _jsonb

SELECT_BOTH = "SELECT %s::jsonb AS b, %s::json AS j, %s::jsonb::text AS t"


def _values() -> list:
    rng = random.Random(20)
    finite = [v for v in EDGE_CASES if not (isinstance(v, float) and v != v)]  # jsonb has no NaN
    return finite + [random_value(rng) for _ in range(300)]


def test_pool_connections_read_as_json_loads(db: str, conn: psycopg.Connection) -> None:
    values = _values()
    with RedactingConnection.connect(db, autocommit=True) as ours:
        jsonb_oid = ours.adapters.types["jsonb"].oid
        for fmt in (psycopg.pq.Format.TEXT, psycopg.pq.Format.BINARY):
            assert ours.adapters.get_loader(jsonb_oid, fmt)._loads is jsoncodec.loads  # type: ignore[union-attr]
        for value in values:
            text = jsoncodec.dumps(value)
            plain = conn.execute(SELECT_BOTH, (text, text, text)).fetchone()
            read = ours.execute(SELECT_BOTH, (text, text, text)).fetchone()
            assert repr(read) == repr(plain), value
            # what the SQL API sends for a jsonb parameter is stored as json.dumps' text is
            stored = conn.execute("SELECT %s::text", (_jsonb(value),)).fetchone()[0]
            assert stored == conn.execute("SELECT %s::jsonb::text", (Jsonb(value),)).fetchone()[0]


@pytest.mark.parametrize("fmt", ["text", "binary"])
def test_async_pool_connections_read_as_json_loads(db: str, conn: psycopg.Connection, fmt: str) -> None:
    values = _values()[:80]
    binary = fmt == "binary"

    async def read_all() -> list:
        async with await RedactingAsyncConnection.connect(db, autocommit=True) as ours:
            out = []
            for value in values:
                text = jsoncodec.dumps(value)
                cur = ours.cursor(binary=binary)
                out.append(await (await cur.execute(SELECT_BOTH, (text, text, text))).fetchone())
            return out

    read = asyncio.run(read_all())
    for value, row in zip(values, read, strict=True):
        text = jsoncodec.dumps(value)
        plain = conn.cursor(binary=binary).execute(SELECT_BOTH, (text, text, text)).fetchone()
        assert repr(row) == repr(plain), value
