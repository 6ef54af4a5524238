"""What a process imports before it does its work (docs/performance.md, "Process start").

A command's --help needs its options, not the database driver: every root command's --help and
every subcommand's (`harvest workflow list --help`, `harvest migrate run --help`, ...) load
neither psycopg, the SQL API, the client, asyncio nor pydantic (they were ~0.5 s of CPU on each
call). A worker process imports pydantic only if the application does.
Names are checked, not times: each case runs in a fresh interpreter (tests/unit/test_cli_lazy.py
holds `harvest --help` itself).
"""

from __future__ import annotations

import json
import subprocess
import sys

# What a command's --help must not load: the driver and everything over it.
HEAVY = [
    "psycopg",
    "psycopg_pool",
    "pydantic",
    "asyncio",
    "harvest.db.",  # (harvest.db itself is one constant, SCHEMA_VERSION)
    "harvest.client.client",
    "harvest.client.messages",
    "harvest.shard.pools",
    "harvest.worker.worker",
]

# One interpreter runs every root command's --help in turn, each followed by its subcommands'
# (read from the group its --help resolved, so a new subcommand is checked too), then ARGS, and
# notes what each one had loaded by then into sys.modules: the first that loads too much fails.
_HELPS = """
import click, contextlib, io, json, sys
from harvest.cli.main import COMMANDS, main
out = {}
ctx = click.Context(main)

def show(args):
    text = io.StringIO()
    with contextlib.redirect_stdout(text), contextlib.suppress(SystemExit):
        main.main(args, prog_name="harvest")
    out[" ".join(args)] = {"help": text.getvalue(), "imported": sorted(sys.modules)}

def walk(path, group):
    show([*path, "--help"])
    command = group.get_command(ctx, path[-1])
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            walk([*path, name], command)

for name in sorted(COMMANDS):
    walk([name], main)
for args in ARGS:
    show(args)
print(json.dumps(out))
"""


def _fresh(code: str) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120
    )
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def _loaded(modules: object) -> list[str]:
    assert isinstance(modules, list)
    return [
        m for m in modules if any(m == h or m.startswith(h if h.endswith(".") else h + ".") for h in HEAVY)
    ]


def test_the_check_can_fail() -> None:
    modules = ["psycopg.pq", "harvest.db", "harvest.db.sqlapi", "asyncio", "harvest.client.history_export"]
    assert _loaded(modules) == ["psycopg.pq", "harvest.db.sqlapi", "asyncio"]


def test_a_commands_help_loads_no_database_driver() -> None:
    from harvest.cli.main import COMMANDS

    out = _fresh(_HELPS.replace("ARGS", repr([["workflow", "get", "X", "--help"]])))  # (after an argument)
    # the walk reached every root command and the subcommands below it
    assert {f"{name} --help" for name in COMMANDS} <= set(out)
    for args in ["workflow list", "worker run", "schedule list", "dlq list", "shard rebalance"]:
        assert f"{args} --help" in out
    for args in ["backup verify", "events tail", "history export", "history export-batch"]:
        assert f"{args} --help" in out
    assert {"migrate run --help", "migrate status --help", "workflow get X --help"} <= set(out)
    for args, seen in out.items():
        assert isinstance(seen, dict)
        assert "Usage: harvest" in seen["help"], args  # the help was printed, not an error
        assert (args, _loaded(seen["imported"])) == (args, [])


def test_a_worker_imports_pydantic_only_when_the_application_does() -> None:
    code = """
import json, sys
from harvest import Worker, App, workflow, activity, Client
import harvest.worker.worker
from harvest.core.payload import decode, encode
before = "pydantic" in sys.modules
import pydantic  # the application's, after Harvest's

class Order(pydantic.BaseModel):
    id: int
    note: str = pydantic.Field(alias="Note")

wire = encode(Order(id=7, Note="x"))
back = decode(wire, Order)
print(json.dumps({"before": before, "wire": wire, "back": [type(back).__name__, back.id, back.note]}))
"""
    out = _fresh(code)
    assert out["before"] is False
    assert out["wire"] == {"id": 7, "note": "x"}  # by field name (model_dump)
    assert out["back"] == ["Order", 7, "x"]  # read back by field name too (by_name)


def test_the_lazy_lookups_still_see_the_drivers_errors() -> None:
    import psycopg
    from psycopg_pool import PoolTimeout

    from harvest.cli.shards import _refusals
    from harvest.db.connection import DatabaseError
    from harvest.shard.fanout import is_shard_failure

    assert is_shard_failure(psycopg.OperationalError("gone"))
    assert is_shard_failure(PoolTimeout("no connection"))
    assert not is_shard_failure(psycopg.errors.UndefinedFunction("missing"))
    assert DatabaseError in _refusals()
