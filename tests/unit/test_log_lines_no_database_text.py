"""No log line of Harvest's carries a database error's whole text (docs/security.md, "What a log
line carries"; docs/observability.md, "Logs").

psycopg's ``str(exc)`` is the server's message and then its DETAIL and CONTEXT: a unique
violation's ``Key (email)=(ann@example.com) already exists``, a row's values, a function's
arguments; libpq's own adds ``connection to server at "<host>"`` and can echo a DSN's password.
A log line names such an error by :func:`harvest.db.connection.failure_reason` (Harvest's own
message, else the first line and SQLSTATE, redacted). The worker's, the stream's and the web
boot's lines passed the exception itself (``"...: %s", exc``), and three handlers logged its
traceback at ERROR, whose last line is the whole text.

The source check below holds every logging call in an ``except ... as exc`` block to that: the
bare exception (or ``str(exc)``, ``repr(exc)``, an f-string of it) goes into a log line only
when every class the block catches is Harvest's own (a HarvestError: its message is ours), or
the block is one listed in ``THEIRS`` (the user's own code raised it). A traceback
(``log.exception``, ``exc_info=True``) only where listed in ``TRACEBACK_OK``, on a logger that
prints a database error of it by its first line (``TRACEBACK_LOGGERS``).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import importlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from parsed_source import parsed

import harvest
from harvest.core.errors import HarvestError
from harvest.web import streams

PASSWORD = "hunter2-log-secret"
DETAIL = "Key (email)=(ann@example.com) already exists. DETAIL-MARKER"

_LOG_METHODS = {"debug", "info", "warning", "error", "exception", "critical", "log"}

# Blocks whose exception is the user's own code's, logged whole on purpose (file, function).
THEIRS = {
    # run.advance: the workflow's own code replayed for a decision ahead (DEBUG; the workflow
    # task that follows reports it, theirs, in the run's history).
    ("worker/decide_ahead.py", "_decide"),
    # plan_tick: Harvest's own computation of a schedule's slots, no database call in the block.
    ("worker/scheduler.py", "_tick_page"),
}

# Tracebacks logged where the error cannot be a database error's (file, function).
TRACEBACK_OK = {
    # The management API's last resort: psycopg's errors took the branches above it.
    ("web/errors.py", "error_response"),
    # A task handler's crash and a query's or update's failed answer: on harvest.worker, whose
    # filter prints a database error of the traceback by its first line (TRACEBACK_LOGGERS).
    ("worker/worker.py", "_guard"),
    ("worker/queries.py", "_respond"),
}

# Harvest's exceptions that are not HarvestErrors, whose message is already one redacted line.
ONE_LINE = {"ClaimRolledBack"}  # (harvest.worker.workflows: a database error's error_line, redacted)


def _is_logger(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id in {"log", "logger", "_log"}
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "getLogger"
    )


def _is_log_call(call: ast.Call) -> bool:
    func = call.func
    return isinstance(func, ast.Attribute) and func.attr in _LOG_METHODS and _is_logger(func.value)


def _given(value: ast.expr) -> bool:
    """An ``exc_info`` that is always given: a name (the exception) or a true constant."""
    return isinstance(value, ast.Name) or (isinstance(value, ast.Constant) and bool(value.value))


def _raw_uses(arg: ast.expr, name: str) -> bool:
    """Whether ``arg`` is the exception itself, or its text whole."""
    if isinstance(arg, ast.Name):
        return arg.id == name
    if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id in {"str", "repr"}:
        return any(_raw_uses(a, name) for a in arg.args)
    if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id == "redact":
        return bool(arg.args) and _raw_uses(arg.args[0], name)  # (no password; the DETAIL stays)
    if isinstance(arg, ast.JoinedStr):
        return any(isinstance(v, ast.FormattedValue) and _raw_uses(v.value, name) for v in arg.values)
    return False


def _caught(handler: ast.ExceptHandler) -> list[str]:
    if handler.type is None:
        return ["BaseException"]
    nodes = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return [ast.unparse(n) for n in nodes]


def _harvest_own(module: Any, names: list[str]) -> bool:
    """Whether every class the block catches is a HarvestError (its message is Harvest's)."""
    for name in names:
        value: Any = module
        for part in name.split("."):
            value = getattr(value, part, None)
        if name in ONE_LINE:
            continue
        if not (isinstance(value, type) and issubclass(value, HarvestError)):
            return False
    return True


def _functions(tree: ast.AST) -> dict[ast.AST, str]:
    """The name of the function each node is in (the innermost)."""
    owner: dict[ast.AST, str] = {}

    def visit(node: ast.AST, name: str) -> None:
        for child in ast.iter_child_nodes(node):
            here = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else name
            owner[child] = here
            visit(child, here)

    visit(tree, "<module>")
    return owner


def offending_log_calls(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        tree = parsed(path)
        owner = _functions(tree)
        module = None
        # A traceback, anywhere (a helper an except block calls logs the one being handled):
        # its last line is the error's whole text. (A computed exc_info decides for itself.)
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call) and _is_log_call(n)):
            traceback = call.func.attr == "exception" or any(  # type: ignore[attr-defined]
                k.arg == "exc_info"
                and (
                    isinstance(k.value, ast.Name)
                    or (isinstance(k.value, ast.Constant) and bool(k.value.value))
                )
                for k in call.keywords
            )
            if traceback and (rel, owner.get(call, "")) not in TRACEBACK_OK:
                found.append(f"{rel}:{call.lineno}: {ast.unparse(call)[:120]}")
        for handler in (n for n in ast.walk(tree) if isinstance(n, ast.ExceptHandler)):
            for call in (n for n in ast.walk(handler) if isinstance(n, ast.Call) and _is_log_call(n)):
                raw = handler.name is not None and any(
                    _raw_uses(a, handler.name) for a in [*call.args, *(k.value for k in call.keywords)]
                )
                if not raw or (rel, owner.get(handler, "")) in THEIRS:
                    continue
                if module is None:
                    module = importlib.import_module("harvest." + rel.removesuffix(".py").replace("/", "."))
                if _harvest_own(module, _caught(handler)):
                    continue
                found.append(f"{rel}:{call.lineno}: {ast.unparse(call)[:120]}")
    return found


def test_no_log_line_carries_a_database_errors_whole_text() -> None:
    root = Path(harvest.__file__).parent
    assert offending_log_calls(root) == []


def test_the_check_finds_a_raw_exception_and_a_traceback(tmp_path: Path) -> None:
    """(The check can fail: a line of each kind it refuses, in a module it imports.)"""
    package = tmp_path / "harvest_probe_pkg"
    package.mkdir()
    (package / "probe.py").write_text(
        "import logging\nlog = logging.getLogger('x')\n"
        "def f():\n"
        "    try:\n        pass\n    except Exception as exc:\n        log.warning('failed: %s', exc)\n"
        "    try:\n        pass\n    except OSError:\n        log.exception('failed')\n"
        "    try:\n        pass\n    except Exception as exc:\n        log.warning(f'failed: {exc}')\n"
    )
    found = offending_log_calls_in(package)
    assert len(found) == 3, found


def offending_log_calls_in(package: Path) -> list[str]:
    import sys

    sys.path.insert(0, str(package.parent))
    try:
        # the probe is imported as harvest.<rel>: alias its package under that name
        probe = importlib.import_module(f"{package.name}.probe")
        sys.modules["harvest.probe"] = probe
        return offending_log_calls(package)
    finally:
        sys.path.remove(str(package.parent))
        sys.modules.pop("harvest.probe", None)


# -- the lines themselves ------------------------------------------------------------------------


def database_error(db: str) -> psycopg.Error:
    """A real server error: a first line quoting a DSN with its password, and a DETAIL that
    quotes a row's value (as a unique violation's does)."""
    with psycopg.connect(db, autocommit=True) as conn:
        try:
            conn.execute(
                "DO $$ BEGIN RAISE EXCEPTION 'cannot write postgresql://harvest:%@db-1.internal/harvest', "
                f"'{PASSWORD}' USING DETAIL = '{DETAIL}', ERRCODE = '23505'; END $$"
            )
        except psycopg.Error as exc:
            error = exc
        else:
            raise AssertionError("the DO block raised nothing")
    assert "DETAIL-MARKER" in str(error) and PASSWORD in str(error)  # (what a raw line would say)
    return error


def assert_clean(lines: list[str]) -> None:
    said = "\n".join(lines)
    assert lines, "nothing was logged"
    assert PASSWORD not in said and "DETAIL-MARKER" not in said and "ann@example.com" not in said, said
    assert "(SQLSTATE 23505)" in said, said


class _FailingHub:
    """A stream hub that is up and whose every read fails with ``error``."""

    next_try = 0.0
    cursor = 0
    listening = up = True

    def __init__(self, error: BaseException):
        self.error = error

    def subscribe(self, execution_id: str | None = None) -> Any:
        raise self.error


def test_a_stream_that_cannot_read_a_shard_logs_the_errors_first_line_only(
    db: str, caplog: pytest.LogCaptureFixture
) -> None:
    hub = _FailingHub(database_error(db))

    async def first_note() -> Any:
        follower = streams._followed(hub, 1, 0, True)  # type: ignore[arg-type]
        try:
            return await follower.__anext__()
        finally:
            await follower.aclose()

    with caplog.at_level(logging.WARNING, logger="harvest.web"):
        asyncio.run(first_note())
    assert_clean([r.getMessage() for r in caplog.records if "cannot be read" in r.getMessage()])


def _chained(error: psycopg.Error, how: str) -> RuntimeError:
    """A non-database error whose chain holds ``error``: raised ``from`` it, or while handling it."""
    try:
        try:
            raise error
        except psycopg.Error as exc:
            if how == "cause":
                raise RuntimeError("Harvest's own bug") from exc
            raise RuntimeError("Harvest's own bug")  # noqa: B904 (the implicit __context__ is the case)
    except RuntimeError as outer:
        return outer


@pytest.mark.parametrize("how", ["cause", "context"])
def test_a_traceback_names_a_chained_database_error_by_its_first_line(db: str, caplog, how: str) -> None:
    """A traceback Harvest logs for a non-database error (the management API's last resort) used
    to print a database error chained under it whole (its DETAIL, its DSN's password): it now
    names it by its class, first line and SQLSTATE, and keeps every stack."""
    from harvest.web.errors import error_response

    outer = _chained(database_error(db), how)
    with caplog.at_level(logging.ERROR, logger="harvest"):
        error_response(outer)
    assert_clean([caplog.text])
    assert "RuntimeError: Harvest's own bug" in caplog.text and caplog.text.count("Traceback") == 2, (
        caplog.text
    )


@contextlib.contextmanager
def _root_logger() -> Iterator[logging.Logger]:
    """The root logger, its handlers and level put back as they were after the block."""
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    try:
        yield root
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved:
            root.addHandler(handler)
        root.setLevel(level)


def test_a_process_log_names_a_chained_database_error_by_its_first_line(db: str) -> None:
    """The handler ``harvest worker``/``serve`` log through does the same for any logger's
    traceback (asyncio's "exception was never retrieved", a library's), in text and JSON."""
    import io

    from harvest.telemetry.logs import configure_logging

    outer = _chained(database_error(db), "cause")
    with _root_logger():
        for fmt in ("text", "json"):
            stream = io.StringIO()
            configure_logging("INFO", fmt, stream)
            logging.getLogger("asyncio").error("Task exception was never retrieved", exc_info=outer)
            assert_clean([stream.getvalue()])


# The loggers Harvest logs a traceback on, or lends to workflow and activity code (ctx.logger).
TRACEBACK_LOGGER_NAMES = (
    "harvest.worker",
    "harvest.web",
    "harvest.runtime",
    "harvest.workflow",
    "harvest.activity",
)


@pytest.mark.parametrize("setup", ["basicConfig", "own handler"])
def test_a_program_logging_through_its_own_handler_gets_the_same_lines(db: str, setup: str) -> None:
    """A program that runs a Worker and sets up its own logging after it (logging.basicConfig,
    a framework's handler) gets no handler of configure_logging's. The worker's and the API's
    loggers carried the filter themselves, but not the workflow loop's (harvest.runtime) nor
    ctx.logger's (harvest.workflow, harvest.activity): a chained database error printed whole
    there, DETAIL and password, where `harvest worker` printed one line."""
    import io

    from harvest import App, Worker, activity

    @activity
    async def noop(ctx: Any) -> None:
        return None

    Worker(App(activities=[noop]), db)  # (created: what a program has imported and set up)
    stream = io.StringIO()
    outer = _chained(database_error(db), "cause")
    with _root_logger() as root:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        if setup == "basicConfig":
            logging.basicConfig(stream=stream, level=logging.DEBUG)
        else:
            handler = logging.StreamHandler(stream)
            handler.setFormatter(logging.Formatter("%(name)s %(message)s"))
            root.addHandler(handler)
            root.setLevel(logging.DEBUG)
        for name in TRACEBACK_LOGGER_NAMES:
            logging.getLogger(name).debug("a traceback on %s", name, exc_info=outer)
    said = stream.getvalue()
    assert all(f"a traceback on {name}" in said for name in TRACEBACK_LOGGER_NAMES), said
    assert_clean([said])


def traceback_loggers_outside(root: Path, allowed: tuple[str, ...]) -> list[str]:
    """The log calls that may log a traceback (``log.exception``, any ``exc_info``) on a module
    logger (``log = logging.getLogger(name)``) whose name is not in ``allowed``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = parsed(path)
        names: dict[str, str] = {}
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and _is_logger(node.value)
                and node.value.args
                and isinstance(node.value.args[0], ast.Constant)
            ):
                names.update(
                    {t.id: node.value.args[0].value for t in node.targets if isinstance(t, ast.Name)}
                )
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call) and _is_log_call(n)):
            traceback = call.func.attr == "exception" or any(k.arg == "exc_info" for k in call.keywords)  # type: ignore[attr-defined]
            logger = call.func.value  # type: ignore[attr-defined]
            if isinstance(logger, ast.Call):  # logging.getLogger("...").error(...)
                name = (
                    logger.args[0].value if logger.args and isinstance(logger.args[0], ast.Constant) else None
                )
            else:
                name = names.get(logger.id)
            if traceback and name not in allowed:
                found.append(f"{path.relative_to(root).as_posix()}:{call.lineno}: logger {name!r}")
    return found


def test_every_traceback_is_logged_on_a_logger_that_carries_the_filter(tmp_path: Path) -> None:
    """The logger-level filter is named logger by logger (a child's records pass no parent's
    filter): a traceback on any other logger would reach a program's own handler whole."""
    from harvest.db.connection import TRACEBACK_LOGGERS

    assert set(TRACEBACK_LOGGER_NAMES) <= set(TRACEBACK_LOGGERS)
    assert traceback_loggers_outside(Path(harvest.__file__).parent, TRACEBACK_LOGGERS) == []
    (tmp_path / "probe.py").write_text(  # (the check can fail)
        "import logging\nlog = logging.getLogger('harvest.db.notify')\n"
        "def f(exc):\n    log.debug('x', exc_info=exc)\n"
        "    logging.getLogger('harvest.shard').exception('y')\n"
    )
    assert len(traceback_loggers_outside(tmp_path, TRACEBACK_LOGGERS)) == 2


def test_a_handler_crashed_by_a_database_error_logs_its_traceback_with_the_error_in_one_line(
    db: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A task handler that a database error crashed logged no traceback (its whole text would
    have been the last line), so an operator saw what failed but not where. The worker's logger
    prints a database error of a traceback by its first line (DatabaseTextFilter): the traceback
    is logged now, with no more of the error's text than the line's own message."""
    from types import SimpleNamespace

    from harvest import App, Worker, activity

    @activity
    async def noop(ctx: Any) -> None:
        return None

    worker = Worker(App(activities=[noop]), db)
    error = database_error(db)

    async def crashed(_worker: Any, _task: Any) -> None:
        raise error

    task = {"task_id": 7, "kind": "activity", "fencing_token": 1, "_lane": SimpleNamespace(shard=0)}
    with caplog.at_level(logging.ERROR, logger="harvest.worker"):
        asyncio.run(worker._guard(crashed, task))
    (record,) = [r for r in caplog.records if "crashed the handler" in r.getMessage()]
    assert record.exc_info, "no traceback"
    assert "Traceback" in caplog.text and "in crashed" in caplog.text, caplog.text
    assert_clean([caplog.text])
