"""Where the SQL lives: inside the wheel (harvest/_sql) or at the top of a checkout."""

from __future__ import annotations

import os
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent
_CHECKOUT = _PACKAGE.parent.parent
# A checkout keeps the package in harvest_py/ beside its pyproject.toml. An installed package
# (site-packages, or `pip install --target vendor` in an application) is not in one, and the
# folders two levels above it are someone else's: an application's Alembic `migrations/`
# beside vendor/ was read as Harvest's migrations.
_IN_CHECKOUT = _PACKAGE.parent.name == "harvest_py" and (_CHECKOUT / "pyproject.toml").is_file()


def _find(name: str) -> Path:
    override = os.environ.get("HARVEST_SQL_DIR")
    candidates = [Path(override) / name] if override else []
    # An editable install or a checkout reads the repository's own files first.
    candidates += [_CHECKOUT / name] if _IN_CHECKOUT else []
    candidates.append(_PACKAGE / "_sql" / name)
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"cannot find Harvest's {name}/ directory (looked in " + ", ".join(str(c) for c in candidates) + ")"
    )


def migrations_dir() -> Path:
    return _find("migrations")


def functions_dir() -> Path:
    return _find("functions")


def sql_dir() -> Path:
    return _find("sql")


# The fresh-install order of sql/ (one file per entity), the only place it is written:
# the ledgers and the schema first, executions before the tables whose foreign keys
# reference it, the triggers after every table they watch. functions/ follows in any
# order (bodies are checked when first called), then harvest._secure_functions().
SCHEMA_FILES = (
    "ledger",
    "executions",
    "events",
    "tasks",
    "dead_letters",
    "relays",
    "cross_shard_children",
    "messages",
    "result_waiters",
    "flow",
    "workers",
    "audit",
    "api_tokens",
    "event_streams",
    "retention",
    "settings",
    "shards",
    "owners",
    "schedules",
    "dags",
    "payloads",
    "llm_calls",
    "triggers",
)


def schema_files(directory: Path | None = None) -> list[Path]:
    """sql/'s files in install order; a file missing from SCHEMA_FILES, or listed and
    absent, is an error (a fresh install would silently lack or fail on it)."""
    directory = directory or sql_dir()
    present = {p.stem for p in directory.glob("*.sql")}
    unlisted, missing = sorted(present - set(SCHEMA_FILES)), sorted(set(SCHEMA_FILES) - present)
    if unlisted or missing:
        raise FileNotFoundError(
            f"{directory} does not match harvest.db.paths.SCHEMA_FILES: "
            + (f"not listed: {', '.join(unlisted)}; " if unlisted else "")
            + (f"missing: {', '.join(missing)}; " if missing else "")
            + "list each sql/ file once, in install order"
        )
    return [directory / f"{name}.sql" for name in SCHEMA_FILES]


def ledger_file() -> Path:
    """The one definition of the schema and its two ledgers, which the migrator creates
    before the first migration and a fresh install creates first."""
    return sql_dir() / "ledger.sql"


def repo_root() -> Path:
    return _CHECKOUT
