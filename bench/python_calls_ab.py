"""The library's Python calls per canonical workflow, two checkouts side by side: a cProfile of
``bench/harvest_bench.py --mode workflows --n N`` (8 starters and one in-process Worker) of each
side, on one embedded server, each drain on a fresh clone of its side's template database
(migrated by its own code), the sides in turn for ``--rounds`` rounds. Counts every call of a
function defined under the side's ``harvest_py/harvest`` and divides by N; ``--names`` adds the
calls per workflow of the functions so named. A count, not a time: it does not move with the
machine's load, only with the drain's batching (a few calls per workflow from run to run).

    python bench/python_calls_ab.py --base /work/wt/base --candidate . --n 1500 --names dumps,options_json
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import psycopg
from run import SERVER_SETTINGS
from sql_path_ab import fresh, migrate_templates, side_env

from harvest.db.embedded import EmbeddedPostgres

BENCH = Path(__file__).resolve().parent


def library_calls(profile: str, root: Path, n: int, names: list[str]) -> dict[str, float]:
    """Calls per workflow of the side's library, and of each function in ``names``."""
    library = str(root / "harvest_py" / "harvest") + os.sep
    counts = {"library": 0.0, **dict.fromkeys(names, 0.0)}
    for (path, _line, name), row in pstats.Stats(profile).stats.items():  # type: ignore[attr-defined]
        if path.startswith(library):
            counts["library"] += row[1]  # every call, recursive ones included
            if name in counts and name != "library":
                counts[name] += row[1]
    return {key: round(value / n, 2) for key, value in counts.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", required=True, type=Path)
    parser.add_argument("--candidate", default=Path("."), type=Path)
    parser.add_argument("--n", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--names", default="", help="comma-separated function names to count besides")
    args = parser.parse_args()
    sides = {"base": args.base.resolve(), "cand": args.candidate.resolve()}
    names = [name for name in args.names.split(",") if name]
    rows: list[dict[str, object]] = []
    with (
        EmbeddedPostgres(settings=SERVER_SETTINGS) as server,
        psycopg.connect(server.dsn, autocommit=True) as admin,
        tempfile.TemporaryDirectory() as folder,
    ):
        migrate_templates(admin, server, sides)
        for round_ in range(args.rounds):
            for key, root in sides.items():
                dsn = fresh(admin, server, f"run_{key}", f"tmpl_{key}")
                profile = os.path.join(folder, f"{key}_{round_}.prof")
                drain = [
                    str(BENCH / "harvest_bench.py"),
                    "--dsn",
                    dsn,
                    "--mode",
                    "workflows",
                    "--n",
                    f"{args.n}",
                ]
                subprocess.run(
                    [sys.executable, "-m", "cProfile", "-o", profile, *drain],
                    env=side_env(root, BENCH),
                    check=True,
                    capture_output=True,
                )
                admin.execute(f'DROP DATABASE "run_{key}"')
                row = {"round": round_ + 1, "side": key, **library_calls(profile, root, args.n, names)}
                print(json.dumps(row), flush=True)
                rows.append(row)
    summary = {
        key: round(sum(float(r["library"]) for r in rows if r["side"] == key) / args.rounds, 1)  # type: ignore[arg-type]
        for key in sides
    }
    print(json.dumps({"library_calls_per_workflow": summary}))


if __name__ == "__main__":
    main()
