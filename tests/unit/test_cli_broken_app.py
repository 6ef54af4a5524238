"""`harvest worker module:app` (and `serve --app`) when the user's module raises as it is
imported: one `error:` line naming the module and the exception, then the traceback of the
module's own frames (Harvest's and importlib's left out), exit 1 as the CLI's other config
errors. It printed Harvest's whole traceback, the cause at its bottom."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HARVEST = [sys.executable, "-c", "from harvest.cli import main; main()"]


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    env.pop("HARVEST_DATABASE_URL", None)
    return subprocess.run(
        [*HARVEST, *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize("command", [["worker"], ["serve", "--port", "0", "--app"]], ids=["worker", "serve"])
def test_a_module_that_raises_on_import_is_one_line_then_its_own_traceback(
    tmp_path: Path, command: list[str]
) -> None:
    (tmp_path / "broken_at_import.py").write_text(
        'def setup():\n    raise RuntimeError("the config is missing")\n\n\nsetup()\n'
    )
    done = _run(tmp_path, *command, "broken_at_import:app")
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == (
        "error: cannot import 'broken_at_import' for 'broken_at_import:app': "
        "RuntimeError: the config is missing"
    ), done.stderr
    assert lines[1] == "Traceback (most recent call last):", done.stderr
    assert lines[-1] == "RuntimeError: the config is missing", done.stderr
    frames = [x for x in lines if x.startswith("  File ")]
    assert [f.split(", in ")[-1] for f in frames] == ["<module>", "setup"], done.stderr
    assert all("broken_at_import.py" in f for f in frames), done.stderr


def test_a_missing_dependency_of_the_module_shows_where_it_is_imported(tmp_path: Path) -> None:
    (tmp_path / "needs_a_dependency.py").write_text("import no_such_dependency_left59\n")
    done = _run(tmp_path, "worker", "needs_a_dependency:app")
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith("error: cannot import 'needs_a_dependency' for 'needs_a_dependency:app': "), (
        lines
    )
    assert "ModuleNotFoundError: No module named 'no_such_dependency_left59'" in lines[0]
    assert any('needs_a_dependency.py", line 1, in <module>' in x for x in lines), done.stderr


def test_a_module_that_is_not_there_is_one_line(tmp_path: Path) -> None:
    done = _run(tmp_path, "worker", "no_such_module_left59:app")
    assert done.returncode == 1
    one = "error: cannot import 'no_such_module_left59' for 'no_such_module_left59:app': "
    assert done.stderr.splitlines() == [one + "No module named 'no_such_module_left59'"]


def test_the_traceback_after_the_line_hides_the_dsn_password_as_the_line_does(tmp_path: Path) -> None:
    """The error line goes through the CLI's scrub (a known DSN's password, the API token); the
    module's traceback printed after it repeats the exception's text, and showed the password the
    line had hidden."""
    (tmp_path / "names_its_dsn.py").write_text(
        'import os\n\nraise RuntimeError("cannot reach " + os.environ["HARVEST_DATABASE_URL"])\n'
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
        "HARVEST_DATABASE_URL": "postgresql://someone:pw-left59-secret@127.0.0.1:1/nowhere",
    }
    done = subprocess.run(
        [*HARVEST, "worker", "names_its_dsn:app"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert "cannot reach postgresql://someone:" in done.stderr.splitlines()[-1], done.stderr
    assert "pw-left59-secret" not in done.stderr, done.stderr
