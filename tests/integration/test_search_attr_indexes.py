"""`harvest search-attr index|unindex|indexes`: the schema owner's index on a search attribute
for range tests, made by a command instead of three statements by hand (docs/operations.md,
"Indexing a search attribute for range tests").

On one database and on two shards: the index is built CONCURRENTLY with its statistics, the
filters' plan reads it, it is recorded (harvest.search_attribute_indexes), a second run says it
is already there, the list says per shard valid / missing, unindex drops it. An INVALID index an
interrupted build left is dropped and built again (by the command, and by `harvest migrate
run`); a hostile key is refused before any database is touched and an odd one gets a quoted,
hashed name; a login that is not the owner is refused in one line naming the role; a shard
migrated later gets the index the other shards declare.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

import cli_forks
import psycopg
import pytest
from operator_helpers import REPO, closed_port, harvest
from outage_helpers import wait_until
from psycopg import sql
from test_roles import login  # noqa: F401  (the fixture: a LOGIN user in one role)

RUNS = 4_000  # every fourth carries amount (and the odd key); RARE of them over 1000
RARE = 10


def _fill(dsn: str, key: str = "amount") -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, created_at,"
            " search_attributes)"
            " SELECT gen_random_uuid(), 'w', 'r-' || g, 'COMPLETED',"
            " '2030-01-01 00:00:00+00'::timestamptz + g * interval '1 second',"
            " CASE WHEN g %% 4 <> 0 THEN '{}'::jsonb"
            "      WHEN g <= %(rare)s * 4 THEN jsonb_build_object(%(key)s::text, 5000 + g)"
            "      ELSE jsonb_build_object(%(key)s::text, g %% 1000) END"
            " FROM generate_series(1, %(n)s) AS g",
            {"n": RUNS, "rare": RARE, "key": key},
        )
        conn.execute("VACUUM ANALYZE harvest.executions")


def _plan(dsn: str, search_attr: str) -> str:
    """The plans of a count of `--search-attr <search_attr>`'s predicate and of the same test as
    a filter expression's (what list_executions and count_executions run with EXECUTE:
    harvest._search_predicate, harvest._compile_filter with its parameters, a one-shot plan)."""
    key, value = search_attr.split(">")
    plans = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        (predicate,) = conn.execute(
            "SELECT harvest._search_predicate(harvest._parse_search_filter(%s))", (search_attr,)
        ).fetchone()
        plans += conn.execute(
            f"EXPLAIN SELECT count(*) FROM harvest.executions AS e WHERE {predicate}"
        ).fetchall()
        where, params = conn.execute(
            "SELECT * FROM harvest._compile_filter(%s)", (f"{key} > {value}",)
        ).fetchone()
        conn.execute(
            f"PREPARE filtered(text[]) AS SELECT count(*) FROM harvest.executions AS e WHERE {where}"
        )
        plans += conn.execute(sql.SQL("EXPLAIN EXECUTE filtered({})").format(sql.Literal(params))).fetchall()
    return "\n".join(r[0] for r in plans)


def _count(dsn: str, search_attr: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT sum(executions)::int FROM harvest.count_executions('all', p_search_attributes => %s)",
            ([search_attr],),
        ).fetchone()[0]


def _index(dsn: str, name: str) -> tuple[bool, bool, bool] | None:
    """(valid, unique, statistics) of harvest.<name>, or None."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT i.indisvalid, i.indisunique, EXISTS (SELECT 1 FROM pg_statistic_ext AS s"
            " WHERE s.stxname = c.relname AND s.stxnamespace = 'harvest'::regnamespace)"
            " FROM pg_class AS c JOIN pg_index AS i ON i.indexrelid = c.oid"
            " WHERE c.relname = %s AND c.relnamespace = 'harvest'::regnamespace",
            (name,),
        ).fetchone()


def _declared(dsn: str) -> list[tuple[str, str, str]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT name, type, index_name FROM harvest.search_attribute_indexes ORDER BY name"
        ).fetchall()


def _sharded(shards: Mapping[int, str], *args: str, database_url: str = "", **extra: str):
    env = os.environ.copy()
    env.update(
        {
            **extra,
            "HARVEST_DATABASE_URL": database_url,
            "HARVEST_SHARDS__READABLE": ",".join(map(str, shards)),
            "HARVEST_SHARDS__WRITABLE": ",".join(map(str, shards)),
            **{f"HARVEST_SHARDS__URLS__{s}": dsn for s, dsn in shards.items()},
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO / "harvest_py"), env.get("PYTHONPATH")) if p),
        }
    )
    return cli_forks.run(args, env, timeout=120)


def test_index_list_and_unindex_on_one_database(db: str) -> None:
    _fill(db)
    assert "executions_attr_amount" not in _plan(db, "amount>1000")

    r = harvest(db, "search-attr", "index", "amount", "--type", "number", "--output", "json")
    assert r.returncode == 0, r.stderr
    [row] = json.loads(r.stdout)["shards"]
    assert (row["shard_id"], row["outcome"], row["index_name"]) == (0, "built", "executions_attr_amount")
    assert "shard 0: building harvest.executions_attr_amount on search attribute amount (number)" in r.stderr
    assert "shard 0: built (executions_attr_amount) in " in r.stderr
    assert _index(db, "executions_attr_amount") == (True, False, True)
    assert _declared(db) == [("amount", "number", "executions_attr_amount")]
    # The filters' plan reads the runs in the range from it, and answers the same.
    assert _plan(db, "amount>1000").count("executions_attr_amount") == 2
    assert _count(db, "amount>1000") == RARE

    again = harvest(db, "search-attr", "index", "amount", "--type", "number")
    assert again.returncode == 0, again.stderr
    assert "already indexed" in again.stdout and "building" not in again.stderr
    other_type = harvest(db, "search-attr", "index", "amount", "--type", "text")
    assert other_type.returncode == 1
    assert "indexed as number here: harvest search-attr unindex amount first" in other_type.stderr

    listed = harvest(db, "search-attr", "indexes", "--output", "json")
    assert listed.returncode == 0, listed.stderr
    [entry] = json.loads(listed.stdout)["indexes"]
    assert [entry[k] for k in ("name", "type", "shard_id", "state")] == ["amount", "number", 0, "valid"]
    assert entry["size_bytes"] > 0

    gone = harvest(db, "search-attr", "unindex", "amount", "--output", "json")
    assert gone.returncode == 0, gone.stderr
    assert json.loads(gone.stdout)["shards"][0]["outcome"] == "dropped"
    assert _index(db, "executions_attr_amount") is None and _declared(db) == []
    assert "executions_attr_amount" not in _plan(db, "amount>1000")
    assert _count(db, "amount>1000") == RARE
    twice = harvest(db, "search-attr", "unindex", "amount")
    assert twice.returncode == 0 and "not indexed" in twice.stdout
    empty = harvest(db, "search-attr", "indexes")
    assert empty.returncode == 0 and "no search attribute is indexed" in empty.stdout


def test_index_list_and_unindex_on_two_shards(two_shards: dict[int, str]) -> None:
    for dsn in two_shards.values():
        _fill(dsn)
    r = _sharded(two_shards, "search-attr", "index", "amount", "--type", "number", "-o", "json")
    assert r.returncode == 0, r.stderr
    outcomes = [(s["shard_id"], s["outcome"]) for s in json.loads(r.stdout)["shards"]]
    assert outcomes == [(0, "built"), (1, "built")]
    for shard in (0, 1):
        assert f"shard {shard}: building harvest.executions_attr_amount" in r.stderr
    for dsn in two_shards.values():
        assert _index(dsn, "executions_attr_amount") == (True, False, True)
        assert "executions_attr_amount" in _plan(dsn, "amount>1000")

    # An index dropped by hand on shard 1 is missing there; the command builds it again there only.
    with psycopg.connect(two_shards[1], autocommit=True) as conn:
        conn.execute("DROP INDEX harvest.executions_attr_amount")
    listed = _sharded(two_shards, "search-attr", "indexes", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    states = [(e["shard_id"], e["state"]) for e in json.loads(listed.stdout)["indexes"]]
    assert states == [(0, "valid"), (1, "missing")]
    again = _sharded(two_shards, "search-attr", "index", "amount", "--type", "number", "-o", "json")
    assert again.returncode == 0, again.stderr
    outcomes = [(s["shard_id"], s["outcome"]) for s in json.loads(again.stdout)["shards"]]
    assert outcomes == [(0, "already indexed"), (1, "built")]

    gone = _sharded(two_shards, "search-attr", "unindex", "amount", "-o", "json")
    assert gone.returncode == 0, gone.stderr
    assert [s["outcome"] for s in json.loads(gone.stdout)["shards"]] == ["dropped", "dropped"]
    for dsn in two_shards.values():
        assert _index(dsn, "executions_attr_amount") is None and _declared(dsn) == []


def test_the_list_gives_each_shard_its_own_type(two_shards: dict[int, str]) -> None:
    """A key recorded as number on shard 0 and as text on shard 1 (`harvest migrate run` keeps
    each shard's own): one row a shard, each with its own type and state. The list made a group
    per (key, type) and filled it from each shard's row of the key whatever its type: four rows,
    two of them a shard's index under the other type."""
    r = _sharded(two_shards, "search-attr", "index", "amount", "--type", "number")
    assert r.returncode == 0, r.stderr
    with psycopg.connect(two_shards[1], autocommit=True) as conn:
        conn.execute("DROP INDEX harvest.executions_attr_amount")
        conn.execute("UPDATE harvest.search_attribute_indexes SET type = 'text' WHERE name = 'amount'")
    listed = _sharded(two_shards, "search-attr", "indexes", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    rows = [(e["name"], e["type"], e["shard_id"], e["state"]) for e in json.loads(listed.stdout)["indexes"]]
    assert rows == [("amount", "number", 0, "valid"), ("amount", "text", 1, "missing")]


def _invalid_leftover(dsn: str) -> None:
    """What an interrupted build leaves: an INVALID index of the key's name (a unique build over
    duplicate amounts fails after its catalog entry is made)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        (expression,) = conn.execute(
            "SELECT harvest._search_attr_ordered(quote_literal('amount'), 'number', 'search_attributes')"
        ).fetchone()
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute(
                "CREATE UNIQUE INDEX CONCURRENTLY executions_attr_amount ON harvest.executions"
                f" ({expression}) WHERE search_attributes ? 'amount'"
            )
    assert _index(dsn, "executions_attr_amount")[:2] == (False, True)


def test_an_invalid_leftover_is_dropped_and_built_again(db: str) -> None:
    _fill(db)
    _invalid_leftover(db)
    listed = harvest(db, "search-attr", "indexes")
    assert "no search attribute is indexed" in listed.stdout  # (not recorded: made by hand)

    r = harvest(db, "search-attr", "index", "amount", "--type", "number", "-o", "json")
    assert r.returncode == 0, r.stderr
    assert "dropping the INVALID index harvest.executions_attr_amount an interrupted build left" in r.stderr
    assert json.loads(r.stdout)["shards"][0]["outcome"] == "rebuilt"
    assert _index(db, "executions_attr_amount") == (True, False, True)
    assert "executions_attr_amount" in _plan(db, "amount>1000")

    # Recorded, then left INVALID again: `harvest migrate run` builds it again too.
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("DROP INDEX harvest.executions_attr_amount")
    _invalid_leftover(db)
    listed = harvest(db, "search-attr", "indexes", "-o", "json")
    assert [e["state"] for e in json.loads(listed.stdout)["indexes"]] == ["invalid"]
    migrated = harvest(db, "migrate", "run", "-o", "json")
    assert migrated.returncode == 0, migrated.stderr
    assert "dropping the INVALID index harvest.executions_attr_amount" in migrated.stderr
    # (its time as the command's progress lines and the docs say it: "in 0.6 s")
    assert re.search(
        r"^search attribute amount: index harvest.executions_attr_amount rebuilt in \d+\.\d s$",
        migrated.stderr,
        re.M,
    ), migrated.stderr
    assert json.loads(migrated.stdout)["search_attr_indexes"] == {"amount": "rebuilt"}
    assert _index(db, "executions_attr_amount") == (True, False, True)


HOSTILE = "amount') WHERE true; DROP TABLE harvest.executions; --"
ODD = "Order.Total-2"


def test_a_hostile_key_is_refused_before_any_database_and_an_odd_one_is_quoted(db: str) -> None:
    nowhere = f"postgresql://nobody@127.0.0.1:{closed_port()}/none"
    for args in (("index", HOSTILE, "--type", "number"), ("unindex", HOSTILE)):
        r = harvest(nowhere, "search-attr", *args)
        assert r.returncode == 2, r.stderr
        assert r.stderr.count("\n") == 1 and "cannot be indexed" in r.stderr and "letters, digits" in r.stderr
    bad_type = harvest(nowhere, "search-attr", "index", "amount", "--type", "date")
    assert bad_type.returncode == 2 and "--type" in bad_type.stderr
    # The server refuses it too (the statements are written there, never from the key's text).
    refused = pytest.raises(psycopg.Error, match="cannot be indexed")
    with psycopg.connect(db, autocommit=True) as conn, refused:
        conn.execute("SELECT * FROM harvest._search_attr_index_sql(%s, 'number')", (HOSTILE,))

    _fill(db, key=ODD)
    r = harvest(db, "search-attr", "index", ODD, "--type", "number", "-o", "json")
    assert r.returncode == 0, r.stderr
    [row] = json.loads(r.stdout)["shards"]
    name = row["index_name"]
    assert name.startswith("executions_attr_order_total_2_") and len(name) <= 63, name
    assert _index(db, name) == (True, False, True)
    assert name in _plan(db, f"{ODD}>1000")
    assert _count(db, f"{ODD}>1000") == RARE
    gone = harvest(db, "search-attr", "unindex", ODD)
    assert gone.returncode == 0, gone.stderr
    assert _index(db, name) is None
    with psycopg.connect(db, autocommit=True) as conn:
        assert conn.execute("SELECT to_regclass('harvest.executions') IS NOT NULL").fetchone()[0]


def test_the_python_and_the_sql_key_rules_agree(db: str) -> None:
    """One rule, two languages: harvest.core.search_attrs (the CLI's, the dashboard's checks)
    answers as harvest._search_attr_key_ok (the filters', the index statements')."""
    from harvest.core.search_attrs import is_search_attr_key

    keys = ["amount", "order.total-2", "A_9", ODD, HOSTILE, "", "a b", "a:b", "a=b", "été", "a\n", "x'y", "*"]
    with psycopg.connect(db, autocommit=True) as conn:
        sql_says = [conn.execute("SELECT harvest._search_attr_key_ok(%s)", (k,)).fetchone()[0] for k in keys]
    assert [is_search_attr_key(k) for k in keys] == sql_says
    assert sql_says[:4] == [True] * 4 and not any(sql_says[4:])


def test_a_login_that_is_not_the_owner_is_refused_in_one_line(db: str, login) -> None:  # noqa: F811
    admin = login("harvest_admin")
    r = harvest(admin, "search-attr", "index", "amount", "--type", "number")
    assert r.returncode == 1, r.stderr
    [line] = r.stderr.splitlines()
    assert "needs the owner of Harvest's schema, role" in line and "nothing was changed" in line
    assert "harvest migrate run" in line
    assert harvest(admin, "search-attr", "unindex", "amount").returncode == 1
    assert _declared(db) == [] and _index(db, "executions_attr_amount") is None
    # Listing needs no owner: any login that reads Harvest.
    reader = login("harvest_reader")
    assert harvest(reader, "search-attr", "indexes").returncode == 0


def test_a_shard_where_the_login_is_not_the_owner_is_named_and_the_others_are_done(
    two_shards: dict[int, str],
    login,  # noqa: F811
) -> None:
    """A login that is not the owner on one shard is refused there, as a shard down is: the
    shards before it are reported done, the ones after it go on, exit 1 naming it. It stopped
    the command at once, saying nothing of the shards it had built."""
    from psycopg import conninfo

    user = conninfo.conninfo_to_dict(login("harvest_admin"))["user"]
    admin = {s: conninfo.make_conninfo(dsn, user=user, password="") for s, dsn in two_shards.items()}
    r = _sharded(
        {0: two_shards[0], 1: admin[1]}, "search-attr", "index", "amount", "--type", "number", "-o", "json"
    )
    assert r.returncode == 1, r.stderr
    answer = json.loads(r.stdout)
    assert [(s["shard_id"], s["outcome"]) for s in answer["shards"]] == [(0, "built")]
    assert [f.split(":")[0] for f in answer["failed"]] == ["shard 1"]
    assert "error: shard 1: indexing a search attribute needs the owner of Harvest's schema" in r.stderr
    assert "error: 1 shard(s) not done (shard 1: " in r.stderr and "Traceback" not in r.stderr
    assert _index(two_shards[1], "executions_attr_amount") is None and _declared(two_shards[1]) == []
    # Refused on the first shard, the next one is still done.
    r = _sharded(
        {0: admin[0], 1: two_shards[1]}, "search-attr", "index", "amount", "--type", "number", "-o", "json"
    )
    assert r.returncode == 1, r.stderr
    answer = json.loads(r.stdout)
    assert [(s["shard_id"], s["outcome"]) for s in answer["shards"]] == [(1, "built")]
    assert [f.split(":")[0] for f in answer["failed"]] == ["shard 0"]
    assert _index(two_shards[1], "executions_attr_amount") is not None


def test_a_non_owner_shards_failed_entry_is_scrubbed_as_its_stderr_line(
    two_shards: dict[int, str],
    login,  # noqa: F811
) -> None:
    """The answer's ``failed`` entry for a shard where the login is not the owner is the line
    stderr gives, scrubbed alike: the JSON had the error as raised, stderr scrubbed (here a
    token that happens to be in it, the login's name, stands for any secret scrub knows)."""
    from psycopg import conninfo

    user = conninfo.conninfo_to_dict(login("harvest_admin"))["user"]
    admin = conninfo.make_conninfo(two_shards[1], user=user, password="")
    r = _sharded(
        {0: two_shards[0], 1: admin},
        *("search-attr", "index", "amount", "--type", "number", "-o", "json"),
        HARVEST_TOKEN=user,
    )
    assert r.returncode == 1, r.stderr
    [failed] = json.loads(r.stdout)["failed"]
    assert f"error: {failed}\n" in r.stderr and "needs the owner" in failed
    assert user not in r.stdout + r.stderr


def test_a_shard_migrated_later_gets_the_declared_index(two_shards: dict[int, str], fresh_db: str) -> None:
    r = _sharded(two_shards, "search-attr", "index", "amount", "--type", "number")
    assert r.returncode == 0, r.stderr
    # Shard 2: an empty database, migrated with the configuration that names shards 0 and 1.
    plan = _sharded(two_shards, "migrate", "run", "--dry-run", "--shard-id", "2", database_url=fresh_db)
    assert plan.returncode == 0, plan.stderr
    assert "would build the index of search attribute amount (number)" in plan.stdout
    # (and a shard 3 that cannot be reached: a note, not a failed run)
    down = {**two_shards, 3: f"postgresql://nobody@127.0.0.1:{closed_port()}/none"}
    migrated = _sharded(down, "migrate", "run", "--shard-id", "2", database_url=fresh_db)
    assert migrated.returncode == 0, migrated.stderr
    assert "note: shard 3 could not be read for the search attributes it indexes" in migrated.stderr
    assert "building harvest.executions_attr_amount on search attribute amount (number)" in migrated.stderr
    assert "search attribute amount: index harvest.executions_attr_amount built in" in migrated.stderr
    assert _declared(fresh_db) == [("amount", "number", "executions_attr_amount")]
    assert _index(fresh_db, "executions_attr_amount") == (True, False, True)
    # A run again has nothing to build.
    again = _sharded(two_shards, "migrate", "run", "--shard-id", "2", database_url=fresh_db)
    assert again.returncode == 0, again.stderr
    assert "executions_attr_amount" not in again.stderr


def _building(dsn: str) -> bool:
    """Whether an index of the key's name is in the catalog, INVALID: a build under way."""
    found = _index(dsn, "executions_attr_amount")
    return found is not None and not found[0]


def _started(dsn: str, *args: str) -> subprocess.Popen:
    """`harvest ARGS` running (a process started cold), its stderr to read line by line."""
    env = {**os.environ, "HARVEST_DATABASE_URL": dsn}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "harvest_py"), env.get("PYTHONPATH")) if p)
    return subprocess.Popen(
        [*cli_forks.COLD, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.parametrize("second", ["index", "migrate"])
def test_a_build_under_way_is_waited_for_not_dropped_as_interrupted(db: str, second: str) -> None:
    """Two `search-attr index` of one key at once, or a `migrate run` while one builds: the
    build's index is INVALID until it ends, and the second took it for an interrupted build's,
    dropping it under the first (its DROP then waited for the build to end, or the two ended as
    a deadlock). The second waits for the first instead, then finds the index valid."""
    _fill(db)
    with psycopg.connect(db, autocommit=True) as conn:  # (recorded, so that migrate run builds it)
        conn.execute(
            "INSERT INTO harvest.search_attribute_indexes (name, type, index_name)"
            " VALUES ('amount', 'number', 'executions_attr_amount')"
        )
    # A writer's open transaction: the first build waits for it with its INVALID index in the catalog.
    with psycopg.connect(db) as writer, ThreadPoolExecutor(2) as pool:
        writer.execute("LOCK TABLE harvest.executions IN ROW EXCLUSIVE MODE")
        first = pool.submit(harvest, db, "search-attr", "index", "amount", "--type", "number", "-o", "json")
        wait_until(lambda: _building(db), "the first build's INVALID index")
        command = (
            ("search-attr", "index", "amount", "--type", "number")
            if second == "index"
            else ("migrate", "run")
        )
        other = _started(db, *command, "-o", "json")
        said = other.stderr.readline()  # (what it decided: to drop the index, or to wait)
        writer.rollback()
        one = first.result()
        out, err = other.communicate(timeout=120)
    two = subprocess.CompletedProcess(other.args, other.returncode, out, said + err)
    assert one.returncode == 0, one.stderr
    assert json.loads(one.stdout)["shards"][0]["outcome"] == "built"
    assert two.returncode == 0, two.stderr
    assert (
        "dropping the INVALID index" not in two.stderr
        and "waiting for another harvest search-attr" in two.stderr
    )
    if second == "index":
        assert json.loads(two.stdout)["shards"][0]["outcome"] == "already indexed"
    else:
        assert json.loads(two.stdout)["search_attr_indexes"] == {"amount": "already indexed"}
    assert _index(db, "executions_attr_amount") == (True, False, True)


def _hijacked(dsn: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT to_regclass('public.hijacked') IS NOT NULL").fetchone()[0]


def test_a_function_a_lower_role_puts_on_the_search_path_writes_no_statement(db: str, login) -> None:  # noqa: F811
    """The statements are written by helpers with no search_path of their own, called straight
    from the owner's session: a format() of a lower role's in public (where every role may
    create before PostgreSQL 15, as granted here) was chosen over pg_catalog's, and the owner ran
    what it returned, by `search-attr index` and by `migrate run` building a recorded index."""
    _fill(db)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("GRANT CREATE ON SCHEMA public TO PUBLIC")  # (PostgreSQL 14's default)
    with psycopg.connect(login("harvest_worker"), autocommit=True) as lower:
        for arity in (2, 3, 4):
            lower.execute(
                f"CREATE FUNCTION public.format({', '.join(['text'] * arity)}) RETURNS text LANGUAGE sql"
                " AS $$ SELECT 'CREATE TABLE public.hijacked AS SELECT current_user AS who' $$"
            )
    try:
        r = harvest(db, "search-attr", "index", "amount", "--type", "number")
        assert r.returncode == 0, r.stderr
        assert not _hijacked(db) and _index(db, "executions_attr_amount") == (True, False, True)
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute("DROP INDEX harvest.executions_attr_amount")
        migrated = harvest(db, "migrate", "run")
        assert migrated.returncode == 0, migrated.stderr
        assert not _hijacked(db) and _index(db, "executions_attr_amount") == (True, False, True)
        gone = harvest(db, "search-attr", "unindex", "amount")
        assert gone.returncode == 0, gone.stderr
        assert not _hijacked(db) and _index(db, "executions_attr_amount") is None
    finally:  # (the login's functions, or its role could not be dropped)
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute(
                "DROP FUNCTION public.format(text, text), public.format(text, text, text),"
                " public.format(text, text, text, text)"
            )


def test_a_shard_down_is_named_without_its_password_and_the_others_are_done(
    two_shards: dict[int, str],
) -> None:
    """A shard that cannot be reached is one line naming it, with no password (the URL's, in
    the JSON's failed list too), exit 1; the other shards are done."""
    secret = "pw-never-said-4711"
    down = {0: two_shards[0], 1: f"postgresql://owner:{secret}@127.0.0.1:{closed_port()}/none"}
    r = _sharded(down, "search-attr", "index", "amount", "--type", "number", "-o", "json")
    assert r.returncode == 1, r.stderr
    assert secret not in r.stdout + r.stderr
    answer = json.loads(r.stdout)
    assert [(s["shard_id"], s["outcome"]) for s in answer["shards"]] == [(0, "built")]
    assert [f.split(":")[0] for f in answer["failed"]] == ["shard 1"]
    assert "error: 1 shard(s) not done (shard 1: " in r.stderr
    listed = _sharded(down, "search-attr", "indexes", "-o", "json")
    assert listed.returncode == 1 and secret not in listed.stdout + listed.stderr


def test_a_value_past_a_btree_entry_is_started_and_an_earlier_releases_index_is_built_again(db: str) -> None:
    """A key indexed as text, a start carrying a value of it past what a btree entry holds (2704
    bytes: 6000 random letters): the index is partial on a value that fits (2000 bytes), so the
    start is not refused (54000) and the build over such a run does not fail; a range test never
    matches the long value, indexed or not. An index of an earlier release (partial on the key
    alone), recorded, is built again by `search-attr index`."""
    import random
    import string

    rng = random.Random(3)
    long_value = "".join(rng.choice(string.ascii_letters) for _ in range(6000))
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO harvest.search_attribute_indexes (name, type, index_name)"
            " VALUES ('note', 'text', 'executions_attr_note')"
        )
        conn.execute(
            "CREATE INDEX executions_attr_note ON harvest.executions ((search_attributes ->> 'note'))"
            " WHERE search_attributes ? 'note'"
        )
        with pytest.raises(psycopg.errors.ProgramLimitExceeded):
            conn.execute(
                "SELECT harvest.start_workflow('w', p_search_attributes => %s::jsonb)",
                (json.dumps({"note": long_value}),),
            )
    r = harvest(db, "search-attr", "index", "note", "--type", "text", "-o", "json")
    assert r.returncode == 0, r.stderr
    assert "dropping harvest.executions_attr_note, built by an earlier release" in r.stderr
    assert json.loads(r.stdout)["shards"][0]["outcome"] == "rebuilt"
    assert _index(db, "executions_attr_note") == (True, False, True)
    with psycopg.connect(db, autocommit=True) as conn:
        for value in (long_value, "b", "c"):
            conn.execute(
                "SELECT harvest.start_workflow('w', p_search_attributes => %s::jsonb)",
                (json.dumps({"note": value}),),
            )
        listed = conn.execute(
            "SELECT count(*) FROM harvest.list_executions(p_filter => 'note > a')"
        ).fetchone()[0]
        searched = conn.execute(
            "SELECT sum(executions)::int FROM harvest.count_executions('all', p_search_attributes => %s)",
            (["note>a"],),
        ).fetchone()[0]
    assert (listed, searched) == (2, 2)  # (the plans on the partial index: the tests above, amount)
    # Built afresh over the long value: no failure, valid.
    assert harvest(db, "search-attr", "unindex", "note").returncode == 0
    r = harvest(db, "search-attr", "index", "note", "--type", "text", "-o", "json")
    assert r.returncode == 0, r.stderr
    assert _index(db, "executions_attr_note") == (True, False, True)
