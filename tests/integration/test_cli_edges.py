"""Issue 12 items 7, 8, 12, 18, 19: the CLI where input enters. Each bad input is refused with one
line and no traceback; every command reads the same configuration (flag > HARVEST_* > harvest.toml);
the spec's forms of the commands are accepted; exit codes are distinct and documented."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import psycopg
import pytest
from operator_helpers import HARVEST, REPO


def run(*args: str, cwd: Path | None = None, dsn: str | None = None, env: dict | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess:
    """`harvest ARGS` as a process; no HARVEST_* variable leaks in from the test run unless given."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("HARVEST_")}
    if dsn:
        base["HARVEST_DATABASE_URL"] = dsn
    base.update(env or {})
    base["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "harvest_py"), str(Path(__file__).parent),
                                                      os.environ.get("PYTHONPATH")) if p)
    return subprocess.run([*HARVEST, *args], cwd=cwd, env=base, capture_output=True, text=True,
                          timeout=timeout, check=False)


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    return lines[0]


@pytest.fixture
def conn(db: str):
    with psycopg.connect(db, autocommit=True) as c:
        yield c


# -- item 7: zero or negative numbers are refused where they enter ------------------------------------

@pytest.mark.parametrize(("toml", "needle"), [
    ("[worker]\nheartbeat_interval = 0\n", "worker.heartbeat_interval = 0.0"),
    ("[worker]\nshutdown_grace = -10\n", "worker.shutdown_grace = -10.0"),
    ("[retention]\ninterval = -1\n", "retention.interval = -1.0"),
    ("[worker]\nconcurrency = 0\n", "worker.concurrency = 0"),
])
def test_worker_refuses_a_bad_number_in_harvest_toml(tmp_path: Path, toml: str, needle: str) -> None:
    (tmp_path / "harvest.toml").write_text(toml)
    r = run("worker", "no_such_module:app", cwd=tmp_path)
    assert r.returncode != 0
    line = one_error_line(r)
    assert needle in line and "out of range: allowed" in line, line


def test_worker_refuses_a_negative_shutdown_grace_flag(tmp_path: Path) -> None:
    r = run("worker", "no_such_module:app", "--shutdown-grace", "-1", cwd=tmp_path)
    assert r.returncode != 0
    assert "worker.shutdown_grace = -1.0 (from --shutdown-grace) is out of range" in one_error_line(r)
