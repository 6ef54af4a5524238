"""What the owner runs (`harvest migrate run`, `harvest backup verify`, a children page's walk) runs
under a pinned search_path or names pg_catalog's built-ins, never under the login's path.

A lower login granted CREATE on a schema on the owner's search_path (public: every role before
PostgreSQL 15) makes a function that matches a call better than pg_catalog's built-in (format's
and jsonb_build_object's are VARIADIC "any": an exact match wins whatever the path's order). Under
the login's path the owner's session ran it with the owner's rights: in a pending Harvest
migration, in harvest._audit on a downgrade, and, bound for good into the SQL-standard body of
harvest._search_attr_ordered when the functions' step applied executions.sql, in every later
caller (the same run's index build first); in backup verify's checks of a copy pg_dump put it in;
in a children page's unnest. Each test gives the function a side effect (a table made as whoever
ran it) and requires that it never runs; a binding an earlier run left makes its file pending.
docs/security.md, "Whose search_path".
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from operator_helpers import harvest, start
from test_migration_runner import REPO, as_release, newer_patch, query, sql_copy  # noqa: F401  (fixtures)
from test_roles import login  # noqa: F401  (the fixture: a LOGIN user in one role)

from harvest import Client
from harvest.db import migrate as m
from harvest.db.backup import check_copy, drill, histories


def _hijacked(dsn: str) -> list[str]:
    """Who ran a lower role's function (the table it makes says), or []."""
    if query(dsn, "SELECT to_regclass('public.hijacked')")[0][0] is None:
        return []
    return [who for (who,) in query(dsn, "SELECT who FROM public.hijacked")]


@pytest.fixture
def lower_role(db: str, login) -> Iterator:  # noqa: F811
    """plant(name, *arg_types, returns=, args=): as a lower login (harvest_worker) granted CREATE
    on public, make public.<name>(arg_types) answering what pg_catalog's would (called with
    ``args``), after recording who called it."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("GRANT CREATE ON SCHEMA public TO PUBLIC")  # (PostgreSQL 14's default)
    lower = psycopg.connect(login("harvest_worker"), autocommit=True)
    planted: list[str] = []

    def plant(name: str, *types: str, returns: str = "text", args: str = "") -> None:
        args = args or ", ".join(f"${i}" for i in range(1, len(types) + 1))
        signature = f"public.{name}({', '.join(types)})"
        answer = "RETURN QUERY SELECT" if returns.startswith("SETOF") else "RETURN"
        lower.execute(
            f"CREATE FUNCTION {signature} RETURNS {returns} LANGUAGE plpgsql AS $$ BEGIN"
            " CREATE TABLE IF NOT EXISTS public.hijacked (who text);"
            " INSERT INTO public.hijacked VALUES (current_user);"
            f" {answer} pg_catalog.{name}({args}); END $$"
        )
        planted.append(signature)

    yield plant
    # (the login's functions go before its role; what was bound to them goes with them)
    for signature in planted:
        lower.execute(f"DROP FUNCTION {signature} CASCADE")
    lower.close()


def _bound_to_public(dsn: str) -> list[str]:
    """Harvest functions whose body depends on a function in schema public."""
    return [
        name
        for (name,) in query(
            dsn,
            "SELECT d.objid::regprocedure::text FROM pg_catalog.pg_depend AS d"
            " JOIN pg_catalog.pg_proc AS p ON p.oid = d.refobjid"
            " WHERE d.classid = 'pg_catalog.pg_proc'::regclass"
            " AND d.refclassid = 'pg_catalog.pg_proc'::regclass"
            " AND p.pronamespace = 'public'::regnamespace",
        )
    ]


def test_a_pending_harvest_migration_runs_no_lower_roles_function(
    db: str,
    sql_copy: Path,  # noqa: F811
    lower_role,
) -> None:
    """A pending migration of Harvest's own calls format() with three values: under the login's
    path the lower role's format(text, text, text, text) ran, as the owner."""
    lower_role("format", "text", "text", "text", "text")
    (sql_copy / "migrations" / "9999_probe.sql").write_text(
        "SELECT format('%s %s %s', 'a'::text, 'b'::text, 'c'::text);\n"
    )
    result = harvest(db, "migrate", "run")
    assert result.returncode == 0, result.stderr
    assert "applying harvest/9999_probe.sql" in result.stderr
    assert _hijacked(db) == []


def test_function_files_applied_again_bind_no_lower_roles_format(db: str, lower_role) -> None:
    """executions.sql pending (a release that changed it, or a run after a Harvest migration):
    harvest._search_attr_ordered's SQL-standard body is bound when it is created, and under the
    login's path it bound format(text, text, text) to the lower role's, for every later caller;
    first the same run's build of a declared search attribute index, as the owner."""
    lower_role("format", "text", "text", "text")
    query(db, "UPDATE harvest.function_files SET checksum = 'older' WHERE file_name = 'executions.sql'")
    # (a key another shard declares, not built here yet: the run builds it)
    query(
        db,
        "INSERT INTO harvest.search_attribute_indexes (name, type, index_name)"
        " VALUES ('amount', 'number', 'executions_attr_amount')",
    )
    result = harvest(db, "migrate", "run")
    assert result.returncode == 0, result.stderr
    assert "applying functions/executions.sql" in result.stderr
    assert "index harvest.executions_attr_amount built" in result.stderr
    assert _hijacked(db) == [], "the run's own index build ran it"
    assert _bound_to_public(db) == []
    query(db, "SELECT harvest._search_attr_ordered('''amount''', 'number')")
    assert _hijacked(db) == []


def test_a_downgrade_is_audited_without_a_lower_roles_jsonb_build_object(
    newer_patch: str,  # noqa: F811
    lower_role,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """harvest._audit (a helper: no search_path of its own) adds the application name with
    jsonb_build_object(text, text); the run's session called it under the login's path."""
    lower_role("jsonb_build_object", "text", "text", returns="jsonb")
    as_release(monkeypatch, "1.4.1", REPO)
    report = m.Migrator(newer_patch).run(allow_downgrade=True, operator_id="ops-ann")
    assert report.functions_downgraded == {"core.sql": "1.4.2"}
    assert query(
        newer_patch, "SELECT count(*) FROM harvest.audit_log WHERE operation = 'functions.downgrade'"
    ) == [(1,)]
    assert _hijacked(newer_patch) == []


def test_harvests_files_run_pinned_and_an_included_sets_under_its_logins_path(
    db: str,
    sql_copy: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """An application's set keeps the path its unqualified names were written for (the login's;
    docs/security.md says what that trusts); Harvest's own files before and after it are pinned."""
    (sql_copy / "migrations" / "9999_probe.sql").write_text(
        "CREATE TABLE harvest.probe_path AS"
        " SELECT 'harvest' AS set_name, current_setting('search_path') AS path;\n"
    )
    app = tmp_path / "app"
    app.mkdir()
    record = "INSERT INTO harvest.probe_path SELECT 'app', current_setting('search_path');\n"
    (app / "0001_path.sql").write_text(record)
    (app / "0002_path.sql").write_text("-- harvest:no-transaction\n" + record)
    login_path = query(db, "SELECT current_setting('search_path')")[0][0]
    result = harvest(db, "migrate", "run", "--include-dir", str(app))
    assert result.returncode == 0, result.stderr
    assert query(db, "SELECT set_name, path FROM harvest.probe_path ORDER BY 1 DESC") == [
        ("harvest", "pg_catalog, pg_temp"),
        ("app", login_path),
        ("app", login_path),
    ]


def test_backup_verify_checks_its_copy_without_a_lower_roles_function(db: str, lower_role) -> None:
    """pg_dump copies a lower role's functions in public into the scratch copy, and the checks call
    jsonb_path_query(jsonb, <a literal>) over every event (and format() on every problem): under
    the login's path the copy's public.jsonb_path_query(jsonb, text) ran as the drill's role."""
    lower_role("jsonb_path_query", "jsonb", "text", returns="SETOF jsonb", args="$1, $2::jsonpath")
    lower_role("format", "text", "text", "text")
    with psycopg.connect(db, autocommit=True) as conn:
        start(conn, "wf", "r-1")
    with drill({0: db}) as (sources, copies):
        assert check_copy(sources[0], copies[0]) == []
        assert len(list(histories(copies[0].dsn))) == 1
        assert _hijacked(copies[0].dsn) == []
    assert _hijacked(db) == []


def test_a_tree_of_children_read_by_the_owner_runs_no_lower_roles_unnest(db: str, lower_role) -> None:
    """The one statement of Python's own beside the entry points (harvest.list_children over each
    id of a level, LIST_CHILDREN_OF) unnested the ids with the polymorphic built-in: a lower
    role's unnest(uuid[]) matched better, and ran as whoever read the tree (`harvest workflow children
    --depth 2`, the API's children page, children_page() of an admin's client)."""
    lower_role("unnest", "uuid[]", returns="SETOF uuid")
    with psycopg.connect(db, autocommit=True) as conn:
        execution_id = start(conn, "wf", "r-1")
    with Client(db) as client:
        assert list(client.get_handle(execution_id).children_page(depth=2)) == []
    assert _hijacked(db) == []


def test_a_binding_an_earlier_run_left_is_pending_and_the_next_run_undoes_it(db: str, lower_role) -> None:
    """A database an earlier release migrated under a hijacked path keeps the look-alike bound
    (its ledger says executions.sql is applied): `status --check` fails naming the file, and a
    run applies it again under the pinned path."""
    lower_role("format", "text", "text", "text")
    with psycopg.connect(db) as conn:  # (what the runner did before: the file under the login's path)
        conn.execute("SET LOCAL check_function_bodies = off")
        conn.execute((REPO / "functions" / "executions.sql").read_text())
    assert sorted(_bound_to_public(db)) == [
        "harvest._search_attr_fits(text,text)",
        "harvest._search_attr_ordered(text,text,text)",
    ]
    status = harvest(db, "migrate", "status", "--check")
    assert status.returncode == 1 and "functions/executions.sql" in status.stdout, status.stdout
    result = harvest(db, "migrate", "run")
    assert result.returncode == 0, result.stderr
    assert "applying functions/executions.sql" in result.stderr
    assert _bound_to_public(db) == []
    query(db, "SELECT harvest._search_attr_ordered('''amount''', 'number')")
    assert _hijacked(db) == []
    assert harvest(db, "migrate", "status", "--check").returncode == 0
