"""A reader of the CLI's stdout that goes away early (`harvest preflight | head -1`): the
command stops quietly with exit 141 (128 + SIGPIPE, what a shell reports for any tool a closed
pipe ended), no traceback and no "Exception ignored ... BrokenPipeError" line. It exited 1
(click's own handling, which reads as the command's failure), or 120 with that line when the
output was still buffered at the interpreter's exit (`harvest metrics`)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harvest.cli.main import EXIT_STDOUT_CLOSED

HARVEST = [sys.executable, "-c", "from harvest.cli import main; main()"]


def _closed_early(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run the CLI with its stdout a pipe whose reader is gone before it writes."""
    process = subprocess.Popen([*HARVEST, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()
    stderr = process.stderr.read().decode()
    process.stderr.close()
    return process.wait(timeout=60), stderr


@pytest.mark.parametrize(
    "args",
    [["--help"], ["--version"], ["worker", "--help"], ["preflight"], ["metrics"], ["workflow", "list"]],
    ids=lambda a: " ".join(a),
)
def test_a_closed_stdout_ends_any_command_quietly_with_141(db: str, args: list[str]) -> None:
    env = {**os.environ, "HARVEST_DATABASE_URL": db}
    status, stderr = _closed_early(args, env)
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    assert "BrokenPipe" not in stderr, stderr
    assert status == EXIT_STDOUT_CLOSED == 141, stderr


@pytest.mark.parametrize("args", [["workflow", "list"], ["metrics"]], ids=lambda a: " ".join(a))
def test_a_command_run_with_no_stdout_at_all_ends_as_it_would_with_one(db: str, args: list[str]) -> None:
    """A command started with stdout closed (`harvest workflow list >&-`, a daemon's closed
    descriptors: Python's sys.stdout is None then) writes nothing and ends as it would have: exit
    0. The last flush added for a closed pipe raised AttributeError on it (a traceback, exit 1)."""
    env = {**os.environ, "HARVEST_DATABASE_URL": db}
    done = subprocess.run(
        [*HARVEST, *args],
        env=env,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: os.close(1),
        timeout=60,
        check=False,
    )
    stderr = done.stderr.decode()
    assert "Traceback" not in stderr, stderr
    assert done.returncode == 0, stderr
