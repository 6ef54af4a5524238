"""`harvest workflow bulk-*`'s --batch-id help says what the id does for that command: only a
signal's id keeps a run from getting it twice (every command's help spoke of signals)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from harvest.cli.main import main


def _batch_id_help(command: str) -> str:
    """The option's help as --help shows it (its wrapped lines joined)."""
    out = CliRunner().invoke(main, ["workflow", command, "--help"]).output
    lines = [line.strip() for line in out.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("--batch-id"))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("-") or not lines[i])
    return " ".join(" ".join(lines[start:end]).split())


@pytest.mark.parametrize(
    ("command", "says"),
    [
        ("bulk-cancel", "A run asked already counts unchanged."),
        ("bulk-terminate", "A run it ended counts already_ended."),
        ("bulk-pause", "A run paused already counts unchanged."),
        ("bulk-resume", "A run not paused counts unchanged."),
    ],
)
def test_the_batch_id_help_says_what_the_id_does_for_the_command(command: str, says: str) -> None:
    text = _batch_id_help(command)
    assert "signal" not in text and "audit row" in text and text.endswith(says), text


def test_bulk_signal_s_batch_id_keeps_a_run_from_a_second_signal() -> None:
    assert "a run it signalled is not signalled again" in _batch_id_help("bulk-signal")
