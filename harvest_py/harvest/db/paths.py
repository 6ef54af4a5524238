"""Where the SQL lives: inside the wheel (harvest/_sql) or at the top of a checkout."""

from __future__ import annotations

import os
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent
_CHECKOUT = _PACKAGE.parent.parent


def _find(name: str) -> Path:
    override = os.environ.get("HARVEST_SQL_DIR")
    candidates = [Path(override) / name] if override else []
    # An editable install or a checkout reads the repository's own files first.
    candidates += [_CHECKOUT / name, _PACKAGE / "_sql" / name]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"cannot find Harvest's {name}/ directory (looked in "
                            + ", ".join(str(c) for c in candidates) + ")")


def migrations_dir() -> Path:
    return _find("migrations")


def functions_dir() -> Path:
    return _find("functions")


def sql_dir() -> Path:
    return _find("sql")


def repo_root() -> Path:
    return _CHECKOUT
