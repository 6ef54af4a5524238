"""failure_traceback: what a failure records of where its exception was raised (bounded, a
database error by its first line), and the readers' one read of it (stored_traceback, raised_at)."""

from __future__ import annotations

import psycopg.errors

import harvest.db.connection  # noqa: F401  (it says how a database error is written: its one line)
from harvest.core.codecs import AesGcmCodec, CodecChain
from harvest.core.errors import (
    TRACEBACK_CHARS,
    ActivityFailure,
    WorkflowFailed,
    failure_traceback,
    raised_at,
    stored_traceback,
)


def _raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


def _inner() -> None:
    raise ValueError("the inner one")


def test_the_raising_frame_and_the_chain_s_lines() -> None:
    try:
        try:
            _inner()
        except ValueError as exc:
            raise RuntimeError("wrapped") from exc
    except RuntimeError as exc:
        text = failure_traceback(exc)
    assert text is not None and text.startswith("Traceback (most recent call last):\n")
    assert "RuntimeError: wrapped\ncaused by: ValueError: the inner one" in text


def test_never_raised_records_none() -> None:
    assert failure_traceback(ValueError("built, not raised")) is None
    assert ActivityFailure.from_exception(ValueError("x")).to_json().get("traceback") is None


def test_a_database_error_is_its_first_line() -> None:
    secret = 'DETAIL:  Key (card)=(4111-1111) already exists.\nCONTEXT:  SQL statement "INSERT"'
    database = _raised(psycopg.errors.UniqueViolation(f"duplicate key value\n{secret}"))
    try:
        raise KeyError("lookup") from database
    except KeyError as exc:
        chained = failure_traceback(exc)
    alone = failure_traceback(database)
    for text in (chained, alone):
        assert text is not None and "duplicate key value (SQLSTATE 23505)" in text
        assert "4111" not in text and "CONTEXT" not in text


def test_a_long_message_is_cut_with_a_marker() -> None:
    text = failure_traceback(_raised(ValueError("x" * 50_000)))
    assert text is not None and len(text) < TRACEBACK_CHARS + 100 and "characters cut ...]" in text


def test_a_user_s_details_stay_as_given() -> None:
    failure = ActivityFailure.from_exception(_raised(ActivityFailure("Declined", "no", True, details=[1, 2])))
    report = failure.to_json()
    assert report["details"] == [1, 2] and "in _raised" in report["traceback"]
    assert ActivityFailure.from_json(report).traceback == report["traceback"]


def test_every_reader_reads_it_one_way() -> None:
    stack = 'Traceback (most recent call last):\n  File "/app/billing.py", line 12, in charge\nE: x'
    legacy = {"error_type": "E", "details": {"traceback": stack}}  # a task crash recorded before
    for failure in ({"error_type": "E", "traceback": stack}, legacy):
        assert stored_traceback(failure) == stack
        assert raised_at(failure) == "in charge (billing.py:12)"
        assert WorkflowFailed("x", failure).traceback == stack
    assert stored_traceback({"traceback": {"_harvest_codec": ["aesgcm:k1"], "data": "..."}}) is None


def test_a_codec_encodes_the_traceback_as_the_details() -> None:
    chain = CodecChain([AesGcmCodec({"k1": bytes(32)})])
    failure = {"error_type": "E", "message": "m", "non_retryable": False, "details": None, "traceback": "T"}
    encoded = chain.encode_failure(failure)
    assert encoded["traceback"] != "T" and encoded["message"] == "m" and encoded["details"] is None
    assert chain.decode_tree(encoded) == failure


def test_where_a_replay_diverged_is_the_workflow_s_line_not_the_engine_s() -> None:
    """A NonDeterminismError (or a refused ctx call) is raised inside Harvest on behalf of the
    workflow line that called it: `harvest workflow stack` said `in _raise_fatal (commands.py:300)`."""
    lib = "/srv/venv/lib/python3.11/site-packages/harvest/runtime"
    stack = (
        "Traceback (most recent call last):\n"
        f'  File "{lib}/run.py", line 621, in _run_main\n'
        '  File "/app/orders.py", line 73, in order\n'
        f'  File "{lib}/context.py", line 297, in execute_activity\n'
        f'  File "{lib}/commands.py", line 300, in _raise_fatal\n'
        "harvest.core.errors.NonDeterminismError: non-determinism at seq 3"
    )
    assert raised_at({"traceback": stack}) == "in order (orders.py:73)"
    engine_only = 'Traceback (most recent call last):\n  File "/x/harvest/worker/w.py", line 9, in claim\nE'
    assert raised_at({"traceback": engine_only}) == "in claim (w.py:9)"


def test_a_project_in_a_directory_named_harvest_is_still_the_workflows_line() -> None:
    """Harvest's frames are its own subpackages' (harvest/runtime/..., harvest/worker/...): a
    user's checkout in a directory named harvest (/home/ann/harvest/orders.py) is not one of
    them, or its line was dropped and the engine's named instead."""
    lib = "/srv/venv/lib/python3.11/site-packages/harvest/runtime"
    stack = (
        "Traceback (most recent call last):\n"
        f'  File "{lib}/run.py", line 621, in _run_main\n'
        '  File "/home/ann/harvest/orders.py", line 73, in order\n'
        f'  File "{lib}/commands.py", line 300, in _raise_fatal\n'
        "harvest.core.errors.NonDeterminismError: non-determinism at seq 3"
    )
    assert raised_at({"traceback": stack}) == "in order (orders.py:73)"
    ui = "/srv/venv/lib/python3.11/site-packages/harvest/web/ui/app.py"  # (deeper than one level)
    nested = (
        'Traceback (most recent call last):\n  File "/app/x.py", line 2, in f\n'
        f'  File "{ui}", line 5, in g\nE'
    )
    assert raised_at({"traceback": nested}) == "in f (x.py:2)"


def test_the_frames_subpackages_are_harvests() -> None:
    from pathlib import Path

    import harvest
    from harvest.core.errors import _HARVEST_SUBPACKAGES

    root = Path(harvest.__file__).parent
    found = sorted(p.name for p in root.iterdir() if (p / "__init__.py").is_file())
    assert found == sorted(_HARVEST_SUBPACKAGES)
