"""The LISTEN/NOTIFY channels are named once (harvest.db.channels): each is one the SQL notifies,
every channel the SQL notifies is there, and no Python module spells one elsewhere."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from parsed_source import parsed

from harvest.db import channels

ROOT = Path(__file__).resolve().parents[2]


def _notified() -> set[str]:
    text = "\n".join(p.read_text() for p in sorted((ROOT / "functions").glob("*.sql")))
    return set(re.findall(r"pg_notify\(\s*'([a-z_]+)'", text))


def test_the_python_channels_are_the_ones_the_sql_notifies() -> None:
    assert set(channels.ALL) == _notified()


def test_no_module_spells_a_channel_outside_db_channels() -> None:
    names = set(channels.ALL)
    bad = []
    for path in sorted((ROOT / "harvest_py" / "harvest").rglob("*.py")):
        if path == Path(channels.__file__):
            continue
        tree = parsed(path)
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and (node.value in names or re.search(r"\bLISTEN\s+harvest_", node.value))
            ):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert not bad, "use harvest.db.channels: " + "; ".join(bad)


def test_listen_takes_only_a_known_channel() -> None:
    assert channels.listen(channels.TASKS) == "LISTEN harvest_tasks"
    with pytest.raises(ValueError, match="unknown channel"):
        channels.listen("harvest_tasks; DROP TABLE x")
