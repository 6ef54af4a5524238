"""The CLI's progress bar: on stderr (JSON on stdout stays clean), without deprecated click calls."""

from __future__ import annotations

import warnings

import pytest

from harvest.cli.output import progress


def test_progress_writes_to_stderr_and_warns_of_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # click 8.2+ deprecates get_text_stream
        with progress(3, "deleting executions") as bar:
            bar.update(3)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "deleting executions" in captured.err


def test_progress_disabled_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    with progress(3, "deleting executions", enabled=False) as bar:
        bar.update(3)
    assert capsys.readouterr() == ("", "")
