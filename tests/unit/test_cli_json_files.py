"""A --*-file JSON option given a path that is no JSON file (a directory, a FIFO no one writes,
/dev/zero, a file larger than any request could carry): one `error:` line naming the option
and its path, exit 2, before any connection, never a hang, a traceback or a read without end
(cli.workflow.read_json_option)."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from harvest.cli import output as cli_output
from harvest.cli import workflow as cli_workflow
from harvest.cli.main import main
from harvest.core.errors import InvalidArgument

NOWHERE = "postgresql://127.0.0.1:1/none"  # never reached: the file is read first

# (command, option): the JSON file options the last session added, and workflow start's.
COMMANDS = [
    (["workflow", "start", "wf"], "--input-file"),
    (["schedule", "create-workflow", "--name", "s", "--every", "1h"], "--input-file"),
    (["schedule", "update", "s"], "--input-file"),
    (["activity", "heartbeat", "hv_task_token"], "--details-file"),
]


def _invoke(args: list[str], option: str, path: str) -> tuple[int, str, BaseException | None]:
    result = CliRunner().invoke(main, [*args, option, path, "--database-url", NOWHERE])
    return result.exit_code, result.output, result.exception


def _one_error_line(code: int, output: str, exc: BaseException | None, option: str, path: str) -> str:
    assert isinstance(exc, SystemExit | None), repr(exc)
    assert code == 2, (code, output)
    lines = output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {option} {path}: "), output
    return lines[0]


@pytest.mark.parametrize(("args", "option"), COMMANDS)
def test_a_directory_is_one_line(tmp_path: Path, args: list[str], option: str) -> None:
    line = _one_error_line(*_invoke(args, option, str(tmp_path)), option, str(tmp_path))
    assert "directory" in line.lower(), line


def test_a_file_over_the_bound_is_refused_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_workflow, "MAX_JSON_FILE_BYTES", 1024)
    big = tmp_path / "big.json"
    big.write_text("[" + " " * 2000 + "1]")
    answer = _invoke(["workflow", "start", "wf"], "--input-file", str(big))
    line = _one_error_line(*answer, "--input-file", str(big))
    assert "larger than 1024 bytes" in line, line


def test_stdin_is_bounded_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_workflow, "MAX_JSON_FILE_BYTES", 1024)
    args = ["workflow", "start", "wf", "--input-file", "-", "--database-url", NOWHERE]
    result = CliRunner().invoke(main, args, input="[" + " " * 2000 + "1]")
    assert result.exit_code == 2, result.output
    assert result.output.strip().startswith("error: --input-file -: larger than 1024 bytes"), result.output


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_an_unreadable_file_is_one_line(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text("{}")
    secret.chmod(0)
    line = _one_error_line(
        *_invoke(["workflow", "start", "wf"], "--input-file", str(secret)), "--input-file", str(secret)
    )
    assert "Permission denied" in line, line


def test_the_bound_is_the_http_apis_request_body_limit() -> None:
    """A value larger than the HTTP API takes in a request body could not be sent over HTTP."""
    from harvest.web.routes import MAX_BODY_BYTES

    assert cli_workflow.MAX_JSON_FILE_BYTES == MAX_BODY_BYTES


@pytest.mark.parametrize(("args", "option"), COMMANDS)
def test_a_fifo_no_one_writes_is_one_line_not_a_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], option: str
) -> None:
    """open() of a FIFO with no writer blocked for ever; its wait for a writer is bounded
    (FIFO_WRITER_WAIT_SECS, none here). A writer is released after the check (if the command
    still blocks, it unblocks it and the test fails on the answer, not a hang)."""
    monkeypatch.setattr(cli_output, "FIFO_WRITER_WAIT_SECS", 0)
    fifo = tmp_path / "in.json"
    os.mkfifo(fifo)
    answer: list[tuple[int, str, BaseException | None]] = []
    runner = threading.Thread(target=lambda: answer.append(_invoke(args, option, str(fifo))), daemon=True)
    runner.start()
    runner.join(timeout=30)
    hung = runner.is_alive()
    if hung:  # unblock the open (and its read) so the thread ends
        with open(fifo, "w") as w:
            w.write("")
        runner.join()
    assert not hung, "the command blocked opening a FIFO no one writes"
    line = _one_error_line(*answer[0], option, str(fifo))
    assert "no writer, nothing written within 0 s" in line, line


def test_a_fifo_with_a_writer_is_read(tmp_path: Path) -> None:
    """A pipe a shell hands over (`--input-file <(jq ...)`, /dev/fd/N) is still read: its
    writer is there, and what it writes is the value."""
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b'{"a": 1}')
    os.close(write_fd)
    try:
        assert cli_workflow.read_json_option(None, f"/dev/fd/{read_fd}", "input") == {"a": 1}
    finally:
        os.close(read_fd)


def _reader_has_it_open(fifo: Path, reader: threading.Thread) -> int | None:
    """A write end of ``fifo``, opened once ``reader`` has it open (a non-blocking open for
    writing fails, ENXIO, while no reader has: the only way to see the reader's open); None if
    the reader ended first."""
    while reader.is_alive():
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
    return None


def test_a_fifo_whose_writer_comes_after_the_command_opened_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`mkfifo in.json; harvest workflow start wf --input-file in.json`, and the writer started
    next (another terminal, a producer started after it): the non-blocking open read the FIFO
    at once, found no writer yet and said "empty: no JSON value in it", and the writer that
    came then blocked for ever with no reader. The command now waits for a writer (bounded:
    FIFO_WRITER_WAIT_SECS) and reads what it writes."""
    monkeypatch.setattr(cli_output, "FIFO_WRITER_WAIT_SECS", 60)  # (ended by the writer)
    fifo = tmp_path / "in.json"
    os.mkfifo(fifo)
    answer: list[object] = []

    def read() -> None:
        try:
            answer.append(cli_workflow.read_json_option(None, str(fifo), "input"))
        except Exception as exc:
            answer.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    write_fd = _reader_has_it_open(fifo, reader)
    if write_fd is not None:
        with os.fdopen(write_fd, "wb") as w:
            w.write(b'{"late": true}')
    reader.join(timeout=60)
    assert answer == [{"late": True}]


def test_a_fifo_no_writer_opens_in_the_wait_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not "empty" (its writer may only be late): the error says no writer opened it and how long
    the command waited."""
    monkeypatch.setattr(cli_output, "FIFO_WRITER_WAIT_SECS", 0)
    fifo = tmp_path / "in.json"
    os.mkfifo(fifo)
    with pytest.raises(InvalidArgument) as raised:
        cli_workflow.read_json_option(None, str(fifo), "input")
    assert str(raised.value) == (
        f"--input-file {fifo}: no writer, nothing written within 0 s (start its writer first)"
    )


def test_a_fifo_longer_than_the_bound_is_refused_while_its_writer_writes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The FIFO's first read (its writer's first bytes) counts against the bound as the rest: a
    first read past the bound left a negative count for the rest, which read to the writer's end
    (for ever for a writer that does not stop). Its writer here stays open until the check."""
    monkeypatch.setattr(cli_workflow, "MAX_JSON_FILE_BYTES", 10)
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b"[" + b" " * 100 + b"1]")
    answer: list[BaseException | None] = []

    def read() -> None:
        try:
            cli_workflow.read_json_option(None, f"/dev/fd/{read_fd}", "input")
            answer.append(None)
        except Exception as exc:
            answer.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=30)
    hung = reader.is_alive()
    os.close(write_fd)  # (ends a read that went on to the writer's end)
    reader.join()
    os.close(read_fd)
    assert not hung, "the read went on past the bound, to the writer's end"
    assert isinstance(answer[0], InvalidArgument) and "larger than 10 bytes" in str(answer[0])


@pytest.mark.parametrize(("args", "option"), COMMANDS)
def test_a_device_is_refused_at_once_not_read_to_the_bound(args: list[str], option: str) -> None:
    """/dev/zero was read up to the bound (64 MiB here, `harvest replay`'s 1 GiB) before its
    size refused it: a character device is refused by its kind, before any read, at the real
    bound (read_path_bounded)."""
    line = _one_error_line(*_invoke(args, option, "/dev/zero"), option, "/dev/zero")
    assert "character device" in line, line


def test_read_path_bounded_refuses_a_device_before_opening_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from harvest.cli import output

    opened: list[str] = []
    real_open = os.open
    monkeypatch.setattr(output.os, "open", lambda path, *a: opened.append(path) or real_open(path, *a))
    with pytest.raises(OSError, match="character device"):
        output.read_path_bounded("/dev/zero", 1 << 30)
    assert opened == [], "the device was opened before it was refused"


def test_dev_stdin_that_is_a_pipe_is_still_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """/dev/stdin links to fd 0: a pipe there (`... | harvest ... --input-file /dev/stdin`)
    resolves to a FIFO and is read; only a device it resolves to is refused."""
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b'{"b": 2}')
    os.close(write_fd)
    saved = os.dup(0)
    try:
        os.dup2(read_fd, 0)
        assert cli_workflow.read_json_option(None, "/dev/stdin", "input") == {"b": 2}
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        os.close(read_fd)
