"""Snapshot a database's catalog for one schema, in a form two databases can be compared by.

Everything is keyed by name, never by OID, and rendered with PostgreSQL's own
``pg_get_*def`` functions, so two databases built different ways compare equal
exactly when they hold the same definitions. Column order (attnum) is part of a
table's definition and is kept. Row contents are not looked at.
"""

from __future__ import annotations

import difflib
import json
from typing import Any

import psycopg

QUERIES: dict[str, str] = {
    "tables": """
        SELECT c.relname, c.relkind::text, c.relpersistence::text,
               pg_get_partkeydef(c.oid), c.relrowsecurity, c.reloptions
        FROM pg_class c
        WHERE c.relnamespace = %(ns)s AND c.relkind IN ('r', 'p', 'f')
        ORDER BY 1""",
    "columns": """
        SELECT c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod),
               a.attnotnull, pg_get_expr(d.adbin, d.adrelid), a.attidentity::text,
               a.attgenerated::text, co.collname
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        LEFT JOIN pg_collation co ON co.oid = a.attcollation AND a.attcollation <> 0
             AND co.collname <> 'default'
        WHERE c.relnamespace = %(ns)s AND c.relkind IN ('r', 'p', 'f', 'v', 'm')
          AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY 1, 2""",
    "constraints": """
        SELECT c.relname, k.conname, k.contype::text, pg_get_constraintdef(k.oid, true),
               k.condeferrable, k.condeferred, k.convalidated
        FROM pg_constraint k
        JOIN pg_class c ON c.oid = k.conrelid
        WHERE k.connamespace = %(ns)s
        ORDER BY 1, 2""",
    # A domain's CHECK (sql/events.sql, executions.sql, tasks.sql: the closed lists the
    # tables' CHECKs cast to) has no table, so the query above does not see it.
    "domain_constraints": """
        SELECT t.typname, k.conname, pg_get_constraintdef(k.oid, true), k.convalidated
        FROM pg_constraint k
        JOIN pg_type t ON t.oid = k.contypid
        WHERE k.connamespace = %(ns)s
        ORDER BY 1, 2""",
    "indexes": """
        SELECT t.relname, i.relname, pg_get_indexdef(x.indexrelid), x.indisvalid, x.indisprimary
        FROM pg_index x
        JOIN pg_class i ON i.oid = x.indexrelid
        JOIN pg_class t ON t.oid = x.indrelid
        WHERE i.relnamespace = %(ns)s
        ORDER BY 1, 2""",
    "sequences": """
        SELECT c.relname, format_type(s.seqtypid, NULL), s.seqstart, s.seqincrement, s.seqmax,
               s.seqmin, s.seqcache, s.seqcycle,
               (SELECT t.relname || '.' || a.attname
                  FROM pg_depend d
                  JOIN pg_class t ON t.oid = d.refobjid
                  JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
                 WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                   AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i'))
        FROM pg_sequence s
        JOIN pg_class c ON c.oid = s.seqrelid
        WHERE c.relnamespace = %(ns)s
        ORDER BY 1""",
    "views": """
        SELECT c.relname, c.relkind::text, pg_get_viewdef(c.oid, true)
        FROM pg_class c
        WHERE c.relnamespace = %(ns)s AND c.relkind IN ('v', 'm')
        ORDER BY 1""",
    "functions": """
        SELECT p.proname, pg_get_function_identity_arguments(p.oid), p.prokind::text,
               pg_get_functiondef(p.oid)
        FROM pg_proc p
        WHERE p.pronamespace = %(ns)s AND p.prokind IN ('f', 'p', 'w')
        ORDER BY 1, 2""",
    "aggregates": """
        SELECT p.proname, pg_get_function_identity_arguments(p.oid)
        FROM pg_proc p
        WHERE p.pronamespace = %(ns)s AND p.prokind = 'a'
        ORDER BY 1, 2""",
    "triggers": """
        SELECT c.relname, t.tgname, pg_get_triggerdef(t.oid, true), t.tgenabled::text
        FROM pg_trigger t
        JOIN pg_class c ON c.oid = t.tgrelid
        WHERE c.relnamespace = %(ns)s AND NOT t.tgisinternal
        ORDER BY 1, 2""",
    "types": """
        SELECT t.typname, t.typtype::text,
               (SELECT array_agg(e.enumlabel::text ORDER BY e.enumsortorder)
                  FROM pg_enum e WHERE e.enumtypid = t.oid),
               format_type(t.typbasetype, t.typtypmod)
        FROM pg_type t
        LEFT JOIN pg_class c ON c.oid = t.typrelid
        WHERE t.typnamespace = %(ns)s AND t.typtype IN ('e', 'd', 'c', 'r')
          AND (c.oid IS NULL OR c.relkind = 'c')
        ORDER BY 1""",
    "policies": """
        SELECT c.relname, p.polname, p.polcmd::text, p.polpermissive,
               pg_get_expr(p.polqual, p.polrelid), pg_get_expr(p.polwithcheck, p.polrelid)
        FROM pg_policy p
        JOIN pg_class c ON c.oid = p.polrelid
        WHERE c.relnamespace = %(ns)s
        ORDER BY 1, 2""",
    "comments": """
        SELECT CASE d.classoid
                   WHEN 'pg_class'::regclass THEN 'relation ' || c.relname
                   WHEN 'pg_proc'::regclass THEN 'function ' || p.proname || '('
                        || pg_get_function_identity_arguments(p.oid) || ')'
                   WHEN 'pg_namespace'::regclass THEN 'schema'
                   ELSE d.classoid::regclass::text
               END,
               d.objsubid, d.description
        FROM pg_description d
        LEFT JOIN pg_class c ON d.classoid = 'pg_class'::regclass AND c.oid = d.objoid
        LEFT JOIN pg_proc p ON d.classoid = 'pg_proc'::regclass AND p.oid = d.objoid
        WHERE (c.relnamespace = %(ns)s OR p.pronamespace = %(ns)s
               OR (d.classoid = 'pg_namespace'::regclass AND d.objoid = %(ns)s))
        ORDER BY 1, 2""",
}


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (int, float, bool, str)) or value is None:
        return value
    return str(value)


def snapshot(dsn_or_conn: str | psycopg.Connection, schema: str = "harvest") -> dict[str, list]:
    """The catalog of ``schema``: every section of QUERIES, as sorted lists of plain values."""
    if isinstance(dsn_or_conn, str):
        with psycopg.connect(dsn_or_conn, autocommit=True) as conn:
            return snapshot(conn, schema)
    conn = dsn_or_conn
    row = conn.execute("SELECT oid FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
    if row is None:
        return {"schema": []}
    result: dict[str, list] = {"schema": [schema]}
    for section, query in QUERIES.items():
        rows = conn.execute(query, {"ns": row[0]}).fetchall()
        result[section] = sorted((_plain(r) for r in rows), key=lambda r: json.dumps(r, default=str))
    return result


def render(snap: dict[str, list]) -> list[str]:
    """One line per catalog entry, for readable diffs."""
    lines = []
    for section in sorted(snap):
        for entry in snap[section]:
            lines.append(f"{section}: {json.dumps(entry, default=str)}")
    return lines


def diff(a: dict[str, list], b: dict[str, list], a_name: str = "a", b_name: str = "b") -> str:
    """A unified diff of two snapshots; empty when they are equal."""
    return "\n".join(difflib.unified_diff(render(a), render(b), a_name, b_name, lineterm=""))


def assert_same(a: dict[str, list], b: dict[str, list], a_name: str = "a", b_name: str = "b") -> None:
    delta = diff(a, b, a_name, b_name)
    assert not delta, f"catalogs differ:\n{delta}"
    assert a == b
