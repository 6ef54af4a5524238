"""A range test on a search attribute few runs pass, with an operator's index on the key.

No index orders runs by an attribute's value: `amount > 1000` (a filter expression, or
`--search-attr amount>1000`) found the runs carrying the key through their GIN entries and
compared each (a count), or walked the list's order through every run until a page matched (a
list page: every run when none passes; 1.2 s over 2M runs). A range test is now written on
harvest._search_attr_ordered's expression (a number NULL for a value of another JSON type; a
text the value's text), so an operator's index on that expression, partial on the key's
existence (with statistics on it), answers it: the runs in the range, not every run carrying
the key nor every run (docs/performance.md, "Range tests on a search attribute").

The list and the count run their statements with EXECUTE (a one-shot plan with the filter's
values), so no generic plan is ever kept for them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from stats_helpers import rows_read

RUNS = 20_000  # every fourth carries amount and tenant
RARE = 12  # runs whose amount is over 1000 (and whose tenant sorts after "t-a")


def _fill(conn: psycopg.Connection) -> None:
    conn.execute(
        "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, created_at,"
        " search_attributes)"
        " SELECT gen_random_uuid(), 'w', 'r-' || g, 'COMPLETED',"
        " '2030-01-01 00:00:00+00'::timestamptz + g * interval '1 second',"
        " CASE WHEN g %% 4 <> 0 THEN '{}'::jsonb"
        "      WHEN g <= %(rare)s * 4 THEN jsonb_build_object('amount', 5000 + g, 'tenant', 't-zz' || g)"
        "      WHEN g %% 40 = 0 THEN jsonb_build_object('amount', '9999', 'tenant', 42)"
        "      ELSE jsonb_build_object('amount', g %% 1000, 'tenant', 't-' || (g %% 900)) END"
        " FROM generate_series(1, %(n)s) AS g",
        {"n": RUNS, "rare": RARE},
    )
    for key, kind in (("amount", "number"), ("tenant", "text")):
        (expression,) = conn.execute(
            "SELECT harvest._search_attr_ordered(quote_literal(%s), %s, 'search_attributes')", (key, kind)
        ).fetchone()
        conn.execute(
            f"CREATE INDEX CONCURRENTLY executions_attr_{key} ON harvest.executions ({expression})"
            f" WHERE search_attributes ? '{key}'"
        )
        # The planner keeps no statistics of a partial index's expression: these are its
        # estimate of how few runs a range holds.
        conn.execute(
            f"CREATE STATISTICS harvest.executions_attr_{key} ON ({expression}) FROM harvest.executions"
        )
    conn.execute("VACUUM ANALYZE harvest.executions")


@pytest.fixture(scope="module")
def ranges_db(module_db: str) -> str:
    with psycopg.connect(module_db, autocommit=True) as conn:
        _fill(conn)
    return module_db


@pytest.fixture
def ranges(ranges_db: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(ranges_db, autocommit=True) as conn:
        yield conn


# (what the list is given, the runs' amounts it must answer): a number over 1000 is one of the
# RARE runs (the string "9999" is not a number), a tenant after "t-a" one of theirs (the number
# 42 is not a string).
CASES = [
    ({"p_search_attributes": ["amount>1000"]}, "amount"),
    ({"p_filter": "amount > 1000"}, "amount"),
    ({"p_filter": "amount >= 1001 AND workflow_name = w"}, "amount"),
    ({"p_search_attributes": ["tenant>t-a"]}, "tenant"),
    ({"p_filter": 'tenant > "t-a"'}, "tenant"),
]
EXPECTED = sorted(5000 + g for g in range(4, RARE * 4 + 1, 4))


def _args(given: dict[str, Any]) -> str:
    return ", ".join(f"{name} => %({name})s" for name in given)


@pytest.mark.parametrize(("given", "key"), CASES)
def test_a_list_page_of_a_rare_range_reads_the_runs_in_it(
    ranges: psycopg.Connection, given: dict[str, Any], key: str
) -> None:
    """The page holds exactly the runs in the range, and reads them from the key's index: about
    RARE index entries, where the old predicate walked executions_created through all RUNS."""
    sql = f"SELECT search_attributes FROM harvest.list_executions({_args(given)}, p_page_size => 50)"
    ranges.execute(sql, given).fetchall()  # a warm-up: the statistics count the next call
    before = rows_read(ranges, "executions")
    rows = ranges.execute(sql, given).fetchall()
    read = rows_read(ranges, "executions") - before
    assert sorted(int(r[0]["amount"]) for r in rows) == EXPECTED
    assert read <= 4 * RARE, f"{read} index entries and rows read for {len(rows)} runs ({key})"


@pytest.mark.parametrize(("given", "key"), CASES)
def test_a_count_of_a_rare_range_reads_the_runs_in_it(
    ranges: psycopg.Connection, given: dict[str, Any], key: str
) -> None:
    """The count is of the runs in the range, read from the key's index, not every run carrying
    the key (RUNS / 4 GIN entries and rows before)."""
    sql = f"SELECT sum(executions) FROM harvest.count_executions('all', {_args(given)})"
    before = rows_read(ranges, "executions")
    (count,) = ranges.execute(sql, given).fetchone()
    read = rows_read(ranges, "executions") - before
    assert count == RARE
    assert read <= 4 * RARE, f"{read} index entries and rows read to count {count} runs ({key})"
