"""harvest.db.arrays on a real server: the group commits' array parameters read back as the
values psycopg's own list dumpers send, on a connection made before the arrays module is used
and on a pool's connection alike."""

from __future__ import annotations

import psycopg
from psycopg.types.json import Jsonb

from harvest.core.jsonb import dumps
from harvest.db.arrays import BigintArray, JsonbArray

VALUES = [[5], {"seq": 2, "options": {"start_to_close": 300}}, 'ünï "q" \\', 1e20, None, True, []]


def test_arrays_read_back_as_psycopgs_lists(conn: psycopg.Connection) -> None:
    query = (
        "SELECT %(a)b::text, %(j)b::jsonb[]::text, %(n)b::jsonb[]::text, %(e)b::jsonb[]::text, %(z)b::text"
    )
    ours = conn.execute(
        query,
        {
            "a": BigintArray([1, 2**40, None]),
            "j": JsonbArray(VALUES),
            "n": JsonbArray(VALUES, none_is_null=True),
            "e": JsonbArray([]),
            "z": BigintArray([]),
        },
    ).fetchone()
    theirs = conn.execute(
        "SELECT %(a)s::bigint[]::text, %(j)b::jsonb[]::text, %(n)b::jsonb[]::text,"
        " ARRAY[]::jsonb[]::text, ARRAY[]::bigint[]::text",
        {
            "a": [1, 2**40, None],
            "j": [Jsonb(v, dumps) for v in VALUES],
            "n": [None if v is None else Jsonb(v, dumps) for v in VALUES],
        },
    ).fetchone()
    assert ours == theirs
    assert ours[0] == "{1,1099511627776,NULL}"
    # The element types are bigint and jsonb themselves (no cast needed to call a function).
    types = conn.execute(
        "SELECT pg_typeof(%(a)b)::text, pg_typeof(%(j)b)::text",
        {"a": BigintArray([1]), "j": JsonbArray([1])},
    ).fetchone()
    assert types == ("bigint[]", "jsonb[]")
