"""Harvest's own SQL files never change the session's search_path or RESET ALL at the top level.

The migrator runs Harvest's migrations and function files under a search_path pinned to
pg_catalog, pg_temp (harvest.db.migrate, connection.pin_search_path); it pins the path again
only between files (Migrator._reset_session). A file that set the path or reset everything
would run the rest of itself under the login's path, where a lower role's look-alike of a
built-in is chosen over it with the owner's rights (docs/security.md, "Whose search_path").
A function's own ``SET search_path`` option is not a statement of the session's and is fine.
(review68c)"""

from __future__ import annotations

import json
from pathlib import Path

import pglast.parser
import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted([*ROOT.glob("migrations/*.sql"), *ROOT.glob("functions/*.sql")])


def _offences(sql: str) -> list[str]:
    found = []
    for raw in json.loads(pglast.parser.parse_sql_json(sql)).get("stmts", ()):
        stmt = raw["stmt"]
        var = stmt.get("VariableSetStmt")
        if var is not None and (var.get("kind") == "VAR_RESET_ALL" or var.get("name") == "search_path"):
            found.append(json.dumps(var)[:120])
        if (
            "SelectStmt" in stmt
            and '"set_config"' in json.dumps(stmt)
            and '"search_path"' in json.dumps(stmt)
        ):
            found.append("set_config('search_path', ...)")
    return found


def test_the_check_sees_each_way_of_changing_the_path() -> None:
    assert len(_offences("RESET ALL; SET search_path = public; RESET search_path;")) == 3
    assert _offences("SELECT pg_catalog.set_config('search_path', 'public', false)")
    assert not _offences(
        "CREATE FUNCTION f() RETURNS int LANGUAGE sql SET search_path = pg_catalog AS 'SELECT 1'"
    )


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_harvest_file_leaves_the_pinned_search_path(path: Path) -> None:
    assert _offences(path.read_text()) == [], path
