"""`harvest history export` streams (issue 12, item 11): events go from a server-side
cursor, a page at a time, to the output, in the document format of before."""

from __future__ import annotations

import json
import os
import stat
import threading
import tracemalloc

import psycopg
import pytest
from click.testing import CliRunner

from harvest.cli import workflow as workflow_cli
from harvest.cli.main import main
from harvest.core.json_values import json_default
from harvest.db.sqlapi import SqlApi


def _run_with_signals(db: str, count: int, size: int) -> str:
    """A run whose history is its start and `count` signals of `size` characters each."""
    with psycopg.connect(db, autocommit=True) as conn:
        [execution_id] = conn.execute(
            "SELECT execution_id FROM harvest.start_workflow('export_wf', '[\"in\"]', 'export-1')"
        ).fetchone()
        conn.execute(
            "SELECT harvest.signal_workflow(%s, 'note', jsonb_build_object('n', n, 'blob', "
            "repeat('x', %s))) FROM generate_series(1, %s) AS n",
            (execution_id, size, count),
        )
    return str(execution_id)


def _old_document(db: str, execution_id: str, full: bool) -> str:
    """What export wrote before it streamed: the whole document, json.dumps(indent=2) (its times
    in ISO 8601 and UTC, json_default, since they no longer read as str() wrote them)."""
    with psycopg.connect(db, autocommit=True) as conn:
        sql = SqlApi(conn)
        doc = {
            "execution": sql.get_execution(execution_id),
            "events": sql.get_history(execution_id),
            "redacted": not full,
        }
    return json.dumps(doc if full else workflow_cli.redact(doc), default=json_default, indent=2) + "\n"


@pytest.mark.parametrize("full", [False, True], ids=["redacted", "full"])
def test_a_history_of_many_pages_is_exported_whole_in_order_in_the_old_format(
    db, tmp_path, monkeypatch, full
) -> None:
    monkeypatch.setattr(workflow_cli, "EXPORT_PAGE_SIZE", 7)  # 46 events: 7 pages
    execution_id = _run_with_signals(db, 45, 10)
    pages = []
    real = SqlApi.iter_history

    def spy(self, execution_id, page_size=500):
        pages.append(page_size)
        return real(self, execution_id, page_size)

    monkeypatch.setattr(SqlApi, "iter_history", spy)
    out = tmp_path / "h.json"
    args = ["history", "export", execution_id, "--file", str(out)] + (["--full"] if full else [])
    result = CliRunner().invoke(main, args, env={"HARVEST_DATABASE_URL": db})
    assert result.exit_code == 0, result.output
    assert pages == [7]  # the export read the history through the paged cursor
    expected = _old_document(db, execution_id, full)
    assert out.read_text() == expected
    events = json.loads(out.read_text())["events"]
    assert [e["event_id"] for e in events] == list(range(1, 47))
    # stdout gets the same document
    stdout = CliRunner().invoke(
        main, args[:3] + (["--full"] if full else []), env={"HARVEST_DATABASE_URL": db}
    )
    assert stdout.exit_code == 0 and stdout.output == expected


def test_an_export_with_no_events_matches_the_old_format(db, tmp_path) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        [execution_id] = conn.execute(
            "SELECT execution_id FROM harvest.start_workflow('export_wf')"
        ).fetchone()
        conn.execute("DELETE FROM harvest.events WHERE execution_id = %s", (execution_id,))
    out = tmp_path / "h.json"
    result = CliRunner().invoke(
        main, ["history", "export", str(execution_id), "--file", str(out)], env={"HARVEST_DATABASE_URL": db}
    )
    assert result.exit_code == 0, result.output
    assert out.read_text() == _old_document(db, str(execution_id), False)


def test_export_memory_stays_bounded_by_a_page_not_the_history(db, tmp_path, monkeypatch) -> None:
    """A 12 MB history exported in pages of 5 events: the peak of Python allocations stays
    far below the history's size (the whole-document export held it several times over)."""
    monkeypatch.setattr(workflow_cli, "EXPORT_PAGE_SIZE", 5)
    execution_id = _run_with_signals(db, 60, 200_000)
    out = tmp_path / "h.json"
    tracemalloc.start()
    try:
        result = CliRunner().invoke(
            main,
            ["history", "export", execution_id, "--full", "--file", str(out)],
            env={"HARVEST_DATABASE_URL": db},
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.exit_code == 0, result.output
    size = out.stat().st_size
    assert size > 12_000_000
    assert peak < size / 4, f"exported {size} bytes with a peak of {peak} bytes of Python allocations"


def test_an_export_that_fails_midway_leaves_no_truncated_file(db, tmp_path, monkeypatch) -> None:
    """The history read fails after the first page is written (the database gone): the
    command fails, and the file given is neither created truncated nor, when one was there,
    overwritten; no partial file is left beside it."""
    monkeypatch.setattr(workflow_cli, "EXPORT_PAGE_SIZE", 5)
    execution_id = _run_with_signals(db, 20, 10)
    real = SqlApi.iter_history

    def failing(self, execution_id, page_size=500):
        for n, event in enumerate(real(self, execution_id, page_size)):
            if n == 7:
                raise psycopg.OperationalError("the connection was lost")
            yield event

    monkeypatch.setattr(SqlApi, "iter_history", failing)
    fresh, kept = tmp_path / "fresh.json", tmp_path / "kept.json"
    kept.write_text("an earlier export\n")
    for out in (fresh, kept):
        args = ["history", "export", execution_id, "--file", str(out)]
        result = CliRunner().invoke(main, args, env={"HARVEST_DATABASE_URL": db})
        assert result.exit_code != 0, result.output
    assert not fresh.exists()
    assert kept.read_text() == "an earlier export\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.json"]


def _export(db: str, execution_id: str, path: object) -> None:
    result = CliRunner().invoke(
        main, ["history", "export", execution_id, "--file", str(path)], env={"HARVEST_DATABASE_URL": db}
    )
    assert result.exit_code == 0, result.output


def test_an_export_over_a_file_keeps_its_mode_and_writes_through_a_symlink(db, tmp_path) -> None:
    """The file is put in place whole, as the file it replaces was: an operator's 0600 stays
    0600 (a --full export holds payloads), and a symlink's target is written, the link kept."""
    execution_id = _run_with_signals(db, 2, 10)
    private = tmp_path / "private.json"
    private.write_text("")
    private.chmod(0o600)
    _export(db, execution_id, private)
    assert stat.S_IMODE(private.stat().st_mode) == 0o600 and json.loads(private.read_text())["events"]
    target, link = tmp_path / "dated.json", tmp_path / "latest.json"
    target.write_text("")
    link.symlink_to(target)
    _export(db, execution_id, link)
    assert link.is_symlink() and json.loads(target.read_text())["events"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dated.json", "latest.json", "private.json"]


def test_a_new_file_holding_payloads_in_full_is_the_owners_alone(db, tmp_path) -> None:
    """A new --full export (what the runs were given and answered) was created with the umask's
    mode, readable by every user of the host; it is 0600 now. A redacted one keeps open()'s mode."""
    execution_id = _run_with_signals(db, 2, 10)
    umask = os.umask(0o022)
    try:
        for args, mode in ((["--full"], 0o600), ([], 0o644)):
            path = tmp_path / f"new{len(args)}.json"
            result = CliRunner().invoke(
                main,
                ["history", "export", execution_id, *args, "--file", str(path)],
                env={"HARVEST_DATABASE_URL": db},
            )
            assert result.exit_code == 0, result.output
            assert stat.S_IMODE(path.stat().st_mode) == mode, (args, oct(path.stat().st_mode))
    finally:
        os.umask(umask)


def test_an_export_to_a_pipe_is_written_into_it(db, tmp_path) -> None:
    """What is not a regular file (a FIFO, a shell's /dev/fd/N) is written as it is, not
    replaced by a file."""
    execution_id = _run_with_signals(db, 2, 10)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    _export(db, execution_id, fifo)
    reader.join(20)
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert json.loads(b"".join(got))["execution"]["id"] == execution_id
