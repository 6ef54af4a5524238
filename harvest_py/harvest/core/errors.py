"""One exception hierarchy for the whole package.

Every SQLSTATE the SQL API raises maps to exactly one class here (see
``docs/internals.md``); the CLI maps each class to one exit code and the HTTP API to one
status code (``http_status``) and one stable ``code`` (:func:`error_code`): SQLSTATE ->
exception -> exit code -> HTTP status, in this one place.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import datetime


class HarvestError(Exception):
    """Base of every error Harvest raises on purpose."""

    exit_code = 1
    http_status = 500  # a class below says what its error means over HTTP
    # What the CLI prints after the error's one line, when it has more to show (the traceback
    # of a user's module that raised as it was imported: harvest.cli.worker.load_app).
    trailer: str | None = None


class ConfigError(HarvestError):
    """Harvest was set up wrongly (a missing DSN, a bad registry, ...)."""


class DatabaseUnavailable(HarvestError):
    """The database could not be reached (it may come up: a starting worker waits for it)."""

    http_status = 503


class NoShardReached(DatabaseUnavailable):
    """A shard (or database) a call needed could not be reached. ``.said`` names the shards and
    what was not done, never what a connect met: an HTTP caller, who may not be authenticated
    yet, is told it (harvest.web.errors.outage_answer), where another outage's text is the
    server log's. ``detail``, what the connects met, ends the message (a command's own)."""

    def __init__(self, said: str, detail: str | None = None):
        super().__init__(f"{said} ({detail})" if detail else said)
        self.said = said
        self.connect_detail = detail  # (not `detail`: a handler shows an HTTPException's `detail`)


class ConnectionRejected(DatabaseUnavailable):
    """The server answered and refused the connection (a wrong password, an unknown role or
    database, pg_hba.conf, TLS setup): retrying cannot help, so nothing waits and retries."""


class TransactionConflict(HarvestError):
    """Postgres rolled back the call's transaction to break a deadlock (SQLSTATE 40P01) or a
    serialization conflict (40001), so nothing the call asked for was done. The client retries
    such a start or signal itself a few times (harvest.db.sqlapi); this is raised when those
    retries met the conflict again, or at once when the call ran inside the caller's own
    transaction (only the caller can run that again). Retryable (HTTP 503)."""

    http_status = 503

    def __init__(self, message: str, sqlstate: str | None = None, attempts: int = 1):
        super().__init__(message)
        self.sqlstate = sqlstate
        self.attempts = attempts


class RedisUnavailable(HarvestError):
    """Redis dispatch is configured (``redis.url``) and its Redis cannot be reached at start
    (docs/redis-dispatch.md): the process refuses to boot rather than run without its channel.
    Once started, a lost Redis is not an error: the Postgres claim path carries the work."""

    http_status = 503


class SchemaMismatch(HarvestError):
    """The database schema is not the one this package expects."""

    http_status = 503


class InvalidArgument(HarvestError):
    """A caller passed a value the engine does not accept (SQLSTATE HR001)."""

    exit_code = 2
    http_status = 400


class NotFound(HarvestError):
    """The named execution, task or dead letter does not exist (SQLSTATE HR002)."""

    http_status = 404


class WorkflowAlreadyExists(HarvestError):
    """A start collided with an existing run under a rejecting policy (SQLSTATE HR003)."""

    http_status = 409

    def __init__(
        self, message: str, existing_execution_id: str | None = None, existing_status: str | None = None
    ):
        super().__init__(message)
        self.existing_execution_id = existing_execution_id
        self.existing_status = existing_status

    @property
    def existing_state(self) -> str | None:
        """The old name of :attr:`existing_status` (CONTRIBUTING.md "Names"), read-only."""
        return self.existing_status


class ScheduleAlreadyExists(HarvestError):
    """A schedule of that name already exists (SQLSTATE HR014): update it, or delete it first."""

    http_status = 409

    exit_code = 2


class StaleTask(HarvestError):
    """A worker tried to commit work whose lease it no longer holds (SQLSTATE HR004)."""

    http_status = 409


class WorkflowNotRunning(HarvestError):
    """The execution has already reached a terminal state (SQLSTATE HR005)."""

    http_status = 409


class WorkflowPaused(WorkflowNotRunning):
    """The call needs the workflow to run, and the execution is PAUSED (SQLSTATE HR023):
    resume it first (``handle.resume()``, ``harvest workflow resume``). A
    :class:`WorkflowNotRunning`, so code that handles an ended run handles it too."""


class QuotaExceeded(HarvestError):
    """A start was refused by a per-key quota (SQLSTATE HR006).

    ``.quota``, ``.key``, ``.usage``, ``.limit``."""

    http_status = 429

    def __init__(
        self,
        message: str,
        quota: str | None = None,
        key: str | None = None,
        usage: int | None = None,
        limit: int | None = None,
    ):
        super().__init__(message)
        self.quota, self.key, self.usage, self.limit = quota, key, usage, limit


class PolicyConflict(HarvestError):
    """The request conflicts with a declared flow-control policy (SQLSTATE HR007)."""

    http_status = 409


class PayloadTooLarge(InvalidArgument):
    """A payload is larger than the engine accepts (SQLSTATE HR008, or the client's own check).

    ``.what`` names it ("the input of workflow x"), ``.bytes`` is its size (the bytes
    of its JSON text as the database prints it) and ``.limit`` the limit in force
    (``harvest.engine_settings.max_payload_bytes``). Nothing was written.
    """

    http_status = 413

    def __init__(
        self, message: str, what: str | None = None, bytes: int | None = None, limit: int | None = None
    ):
        super().__init__(message)
        self.what, self.bytes, self.limit = what, bytes, limit


class UnknownWorkflow(HarvestError):
    """A start named a workflow that no worker registered on its queue (SQLSTATE HR010):
    ``.workflow_name``, ``.queue``, ``.registered`` (the names that queue's workers did register).
    Nothing was written."""

    exit_code = 2
    http_status = 400

    def __init__(
        self,
        message: str,
        workflow_name: str | None = None,
        queue: str | None = None,
        registered: list[str] | None = None,
    ):
        super().__init__(message)
        self.workflow_name, self.queue, self.registered = workflow_name, queue, registered or []


class WrongShard(HarvestError):
    """A start reached a database that is not the shard it was addressed to (SQLSTATE HR011),
    or a database asked to become another shard holds executions of its current one.
    ``.requested_shard`` and ``.shard`` (this database's) when the database said them.
    Nothing was written. Over HTTP a 503: the deployment's shard map, not the caller, is wrong."""

    http_status = 503

    def __init__(self, message: str, requested_shard: int | None = None, shard: int | None = None):
        super().__init__(message)
        self.requested_shard, self.shard = requested_shard, shard


class ShardUnavailable(DatabaseUnavailable):
    """The database of shard ``.shard`` has no pool in this process or cannot be reached now.
    Retryable (``.retryable`` is True): nothing was done there. The message names the shard,
    never its DSN."""

    retryable = True
    refused = False  # its database refused the connect (a login): harvest.shard.pools.unreachable

    def __init__(self, shard: int, reason: str = "its database cannot be reached now; retry once it is back"):
        super().__init__(f"shard {shard} is unavailable: {reason}")
        self.shard = shard
        self.reason = reason


class ExecutionMigrated(HarvestError):
    """A call met an execution that is moving or has moved between shards (SQLSTATE HR013):
    a shard rebalance (docs/sharding.md, "Rebalancing"). Retryable (``.retryable``; the HTTP
    face answers 503). ``.reason`` says which case: ``migrated`` (the row is a MIGRATED seal;
    ``.shard`` is where the run lives now: route by the execution id, which follows the
    pointer), ``replace_migrated_prior`` (a start would replace a moved run: cancel or
    terminate it by id, then start again), ``not_quiescent`` / ``migration_in_progress``
    (a move was refused; ``.blockers`` names why), and the move's own phase conflicts.
    Nothing was written."""

    retryable = True
    http_status = 503

    def __init__(
        self,
        message: str,
        reason: str | None = None,
        execution_id: str | None = None,
        shard: int | None = None,
        blockers: list[str] | None = None,
    ):
        super().__init__(message)
        self.reason, self.execution_id, self.shard = reason, execution_id, shard
        self.blockers = list(blockers or [])


class DagPaused(HarvestError):
    """A trigger or retry of a paused DAG (SQLSTATE HR017): unpause it first. Nothing was started."""

    http_status = 409


class DagRunLimit(HarvestError):
    """A trigger or retry of a DAG that has ``max_active_runs`` RUNNING runs (SQLSTATE HR018).
    Nothing was started; retry once a run has ended."""

    http_status = 429

    retryable = True


class DagRunNotRetryable(HarvestError):
    """A retry of a DAG run that is RUNNING or COMPLETED, or that a newer failed run already
    retried (SQLSTATE HR019). Nothing was started."""

    http_status = 409


class NonDeterminismError(HarvestError):
    """Replaying the workflow code issued commands that differ from its history."""


class PayloadError(HarvestError, TypeError):
    """A value cannot be encoded as JSON or decoded into the declared type."""

    http_status = 400


class PayloadNotStorable(PayloadError):
    """A payload holds what PostgreSQL cannot store (U+0000, a lone surrogate): the caller must
    change the value (the CLI exits 2, as for an InvalidArgument). Nothing was written."""

    exit_code = 2


class PayloadKeyMissing(PayloadError):
    """A payload is encrypted with a key this process does not hold (docs/payloads.md).
    ``.key_id`` names the key; ``.known`` the key ids this process has."""

    def __init__(self, key_id: str, known: list[str] | None = None):
        known = list(known or [])
        held = f"it holds {', '.join(known)}" if known else "it has no encryption codec"
        super().__init__(
            f"payload is encrypted with key {key_id!r}, which this process does not hold ({held}): "
            f"add key {key_id!r} to its AesGcmCodec(keys=...)"
        )
        self.key_id, self.known = key_id, known


class PayloadTooLargeToDecode(PayloadError):
    """A ``zlib`` layer of a payload decompresses past this process's bound
    (``ZlibCodec(max_decoded_bytes=...)``, 64 MiB by default): not decoded here. A process with a
    larger bound (or None) decodes it; the management API answers it as stored (docs/payloads.md)."""


class LegalHoldActive(HarvestError):
    """A legal hold is set on the execution (SQLSTATE HR030): its payloads cannot be erased
    until an admin releases the hold. Nothing was changed."""

    http_status = 409

    exit_code = 2


class ExecutionNotTerminal(HarvestError):
    """The execution is still open (SQLSTATE HR031): only a terminal execution's payloads can be
    erased. Nothing was changed."""

    http_status = 409

    exit_code = 2


class TimeoutError_(HarvestError, TimeoutError):
    """A client-side wait ran out of time (the run itself may still finish)."""

    http_status = 504


# The longest duration accepted anywhere (100 years): beyond it PostgreSQL's timestamp
# arithmetic overflows, and the database's number fields (core.sql's _json_number) refuse it.
# Here, not in durations (which imports this module), so next_retry_delay is held to it too.
MAX_DURATION_SECS = 100 * 365.25 * 86400


def retry_delay_secs(value: Any) -> float | None:
    """``ActivityFailure``'s ``next_retry_delay`` in seconds: a number or a timedelta, from 0 to 100
    years as the database takes it (a string such as "30s" is refused: durations.parse_duration
    imports this module). Past that range fail_activity refused the worker's report (HR001), and
    the attempt hung until its lease expired. None for None."""
    if value is None:
        return None
    seconds = value.total_seconds() if hasattr(value, "total_seconds") else value
    if (
        isinstance(seconds, (int, float))
        and not isinstance(seconds, bool)
        and (seconds == 0 or 1e-300 <= seconds <= MAX_DURATION_SECS)
    ):
        return float(seconds)
    raise InvalidArgument(
        "ActivityFailure next_retry_delay: expected seconds (a number from 0 to 100 years) or a timedelta, "
        f"got {value!r}"
    )


class ActivityFailure(HarvestError):
    """A typed activity failure.

    Raise it from an activity to choose the ``error_type`` and whether retries
    stop at once; the workflow receives it (as ``ActivityError``'s cause) when
    the failure is final. ``next_retry_delay`` (a duration) replaces the retry policy's
    backoff before the next attempt (seconds or a timedelta), e.g. a 429's ``Retry-After``:
    docs/activities.md.
    """

    def __init__(
        self,
        error_type: str,
        message: str,
        non_retryable: bool = False,
        details: Any = None,
        *,
        next_retry_delay: float | datetime.timedelta | None = None,
    ):
        message = recordable(message)
        super().__init__(f"{error_type}: {message}")
        self.error_type = error_type
        self.message = message
        self.non_retryable = non_retryable
        self.details = details
        self.next_retry_delay = retry_delay_secs(next_retry_delay)
        # Where the attempt's exception was raised (failure_traceback), set by from_exception;
        # recorded beside the details, never in them (a payload as they are: docs/failures.md).
        self.traceback: str | None = None

    @classmethod
    def retryable(cls, error_type: str, message: str, details: Any = None) -> ActivityFailure:
        return cls(error_type, message, False, details)

    @classmethod
    def non_retryable_(cls, error_type: str, message: str, details: Any = None) -> ActivityFailure:
        return cls(error_type, message, True, details)

    def to_json(self) -> dict[str, Any]:
        out = {
            "error_type": self.error_type,
            "message": self.message,
            "non_retryable": self.non_retryable,
            "details": self.details,
        }
        if self.traceback is not None:
            out["traceback"] = self.traceback
        if self.next_retry_delay is not None:
            out["next_retry_delay"] = self.next_retry_delay
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ActivityFailure:
        failure = cls(
            data.get("error_type") or "Error",
            data.get("message") or "",
            bool(data.get("non_retryable")),
            data.get("details"),
        )
        text = data.get("traceback")  # (not details': a user's own key)
        failure.traceback = text if isinstance(text, str) else None
        delay = data.get("next_retry_delay")  # (what the database took: a number of seconds)
        if isinstance(delay, (int, float)) and not isinstance(delay, bool):
            failure.next_retry_delay = float(delay)
        return failure

    @classmethod
    def from_exception(cls, exc: BaseException) -> ActivityFailure:
        """A plain exception becomes ``error_type`` = its class name; the failure records where
        it was raised (``traceback``: :func:`failure_traceback`), an ActivityFailure raised
        by the activity too (its details stay as given)."""
        if isinstance(exc, ActivityFailure):
            exc.traceback = failure_traceback(exc) or exc.traceback  # (raised again: its last raise)
            return exc
        if isinstance(exc, SystemExit):  # (its str() is the bare exit code)
            message = f"SystemExit({exc.code!r}) raised in the activity (sys.exit()?)"
            failure = cls("SystemExit", message, False, None)
        else:
            failure = cls(type(exc).__name__, str(exc), False, None)
        failure.traceback = failure_traceback(exc)
        return failure

    @classmethod
    def own_cancel(cls, exc: BaseException) -> ActivityFailure | None:
        """The failure of an attempt whose activity code raised ``CancelledError`` without its
        task being cancelled (it awaited a future cancelled elsewhere: a shared task another
        caller's timeout cancelled); None when the running task itself is being cancelled (the
        worker's stop, a workflow task's end), which the caller lets through. A queued
        activity's handler and a local activity's inline attempt decide alike."""
        import asyncio

        current = asyncio.current_task()
        if current is None or current.cancelling() > 0:
            return None
        return cls(
            "CancelledError",
            str(exc)
            or "raised by the activity's code, not cancelled by the worker (it awaited something "
            "cancelled elsewhere?)",
        )


def recordable(text: Any) -> Any:
    """A failure's message as the database can store it: a NUL (U+0000) written ``\\x00`` and a
    lone surrogate ``\\udxxx``. Such a message (an exception quoting binary data) made the
    failure's report one PostgreSQL refused (22P05), so the task crashed its handler again at
    each lease."""
    if type(text) is not str:
        return text
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


# A recorded traceback's bounds: the innermost frames of the raising exception (where it was
# raised) and a cap on its text, so that a RecursionError's thousand frames or a cause's long
# message cannot bloat the history (every failed attempt is a row).
TRACEBACK_FRAMES = 20
TRACEBACK_CHARS = 6000
_TRACEBACK_CAUSES = 5  # the chained causes named, each by its class and first line
# How a database error is said in a recorded traceback: its first line and SQLSTATE, redacted,
# or None for another error. The rule is harvest.db.connection's (error_line), which sets this
# as it is imported (the core imports no driver): a process that talks to a database has it.
_database_error_line: list[Callable[[BaseException], str | None]] = []


def set_database_error_line(line: Callable[[BaseException], str | None]) -> None:
    """Set how :func:`failure_traceback` writes a database error: as ``line(exc)``, which is
    None for an error it does not answer for."""
    _database_error_line[:] = [line]


def failure_traceback(exc: BaseException) -> str | None:
    """Where ``exc`` was raised, as a failure records it (its ``traceback`` key, beside its
    ``details``): ``traceback.format_exception``'s text of its innermost ``TRACEBACK_FRAMES``
    frames and its own line, then each chained cause (``__cause__``, or ``__context__`` not
    suppressed) by its class and first line, the whole cut to ``TRACEBACK_CHARS`` with a
    marker. A database error (the exception or a cause) is its first line and SQLSTATE,
    redacted (:func:`harvest.db.connection.error_line`): never its DETAIL or CONTEXT, which
    quote values. None for an exception never raised (no frames). Failure path only."""
    import traceback

    if exc.__traceback__ is None:
        return None
    frames = traceback.extract_tb(exc.__traceback__)
    omitted = len(frames) - TRACEBACK_FRAMES
    lines = ["Traceback (most recent call last):\n"]
    if omitted > 0:
        lines.append(f"  [{omitted} outer frames omitted]\n")
        frames = traceback.StackSummary.from_list(frames[omitted:])
    lines.extend(frames.format())
    lines.append(_exception_line(exc, whole=True))
    seen, one, named = [exc], exc, 0
    while named < _TRACEBACK_CAUSES:
        cause = one.__cause__ or (None if one.__suppress_context__ else one.__context__)
        if cause is None or any(cause is known for known in seen):
            break
        word = "caused by" if one.__cause__ is not None else "while handling"
        lines.append(f"{word}: {_exception_line(cause, whole=False)}")
        seen.append(cause)
        one, named = cause, named + 1
    text: str = recordable("".join(lines).rstrip("\n"))
    if len(text) > TRACEBACK_CHARS:
        cut = len(text) - TRACEBACK_CHARS
        half = TRACEBACK_CHARS // 2
        text = f"{text[:half]}\n[... {cut} characters cut ...]\n{text[-half:]}"
    return text


def _exception_line(exc: BaseException, whole: bool) -> str:
    """``exc``'s class and message (``whole``: as format_exception_only writes it, else its
    first line), a database error's by its first line and SQLSTATE, redacted."""
    import traceback

    said = _database_error_line[0](exc) if _database_error_line else None
    if said is not None:
        return f"{type(exc).__module__}.{type(exc).__qualname__}: {said}\n"
    if whole:
        return "".join(traceback.format_exception_only(type(exc), exc))
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    name = type(exc).__qualname__
    return f"{name}: {first}\n" if first else f"{name}\n"


def stored_traceback(failure: Any) -> str | None:
    """The traceback a stored failure records (its ``traceback`` key; a workflow task's crash
    recorded before it kept it in its ``details``), or None: the one read of it, for every
    reader (the CLI, the dashboard, the test kit)."""
    if not isinstance(failure, dict):
        return None
    text = failure.get("traceback")
    if text is None and isinstance(failure.get("details"), dict):
        text = failure["details"].get("traceback")
    return text if isinstance(text, str) else None


# Harvest's subpackages (tests/unit/test_failure_traceback_text.py checks the list).
_HARVEST_SUBPACKAGES = (
    "cli",
    "client",
    "config",
    "core",
    "db",
    "declare",
    "integrations",
    "runtime",
    "shard",
    "telemetry",
    "testing",
    "web",
    "worker",
)
# A frame of Harvest's own package in a stored traceback (the worker's paths, not this process's):
# harvest/__init__.py or a module of one of its subpackages, at any depth; not any directory
# named harvest (a user's checkout, /home/ann/harvest/orders.py, is the workflow's code).
_HARVEST_FRAME = re.compile(
    r"[/\\]harvest[/\\](?:__init__\.py$|(?:" + "|".join(_HARVEST_SUBPACKAGES) + r")[/\\].*\.py$)"
)


def raised_at(failure: Any) -> str | None:
    """Where a stored failure's exception was raised, short: ``in fn (file.py:12)``, its
    innermost frame outside Harvest's own package (a ``NonDeterminismError`` or a refused ``ctx``
    call is raised inside the engine, on behalf of the workflow line that called it), else its
    innermost frame (a history's line in text); None when it records no readable traceback."""
    import os

    text = stored_traceback(failure)
    frames = re.findall(r'^  File "(.*)", line (\d+), in (.*)$', text or "", re.MULTILINE)
    if not frames:
        return None
    own = [frame for frame in frames if not _HARVEST_FRAME.search(frame[0])]
    path, line, name = (own or frames)[-1]
    return f"in {name} ({os.path.basename(path)}:{line})"


def failure_line(failure: Any) -> str:
    """A stored failure (``{error_type, message, ...}``; both stay plain under payload codecs)
    as one line, ``error_type: message``, a part it lacks left out: the one wording of a
    failure in the CLI, the dashboard and the client's hints. Not a mapping: its ``str``."""
    if not isinstance(failure, dict):
        return str(failure)
    return ": ".join(str(part) for part in (failure.get("error_type"), failure.get("message")) if part)


class ActivityError(HarvestError):
    """Raised inside a workflow when an activity failed for good."""

    def __init__(self, activity_name: str, failure: ActivityFailure):
        super().__init__(f"activity {activity_name!r} failed: {failure}")
        self.activity_name = activity_name
        self.failure = failure
        self.__cause__ = failure


class WorkflowFailed(HarvestError):
    """The run ended FAILED; ``failure`` holds the recorded error."""

    http_status = 409

    def __init__(self, execution_id: str, failure: dict[str, Any] | None):
        failure = failure or {}
        super().__init__(
            f"workflow {execution_id} failed: "
            f"{failure.get('error_type', 'Error')}: {failure.get('message', '')}"
        )
        self.execution_id = execution_id
        self.failure = failure

    @property
    def traceback(self) -> str | None:
        """Where the run's code raised what failed it (its failure's ``traceback``), or None
        (an engine's failure: a timeout, a termination; a traceback still encrypted)."""
        return stored_traceback(self.failure)


class WorkflowCancelled(HarvestError):
    """The run ended CANCELLED."""

    http_status = 409


class WorkflowTerminated(HarvestError):
    """The run ended TERMINATED."""

    http_status = 409


class WorkflowTimedOut(HarvestError):
    """The run ended TIMED_OUT."""

    http_status = 409


class PermissionDenied(HarvestError):
    """The database role may not do this (SQLSTATE 42501): see docs/security.md, "Roles".
    Over HTTP, also a token whose scope is below the route's (403), or a token made with
    ``payloads: false`` asking for a payload: then ``needs`` is ``"payloads"`` (the answer's
    ``needs``), since no higher scope would help."""

    http_status = 403
    needs: str | None = None


class Unauthenticated(HarvestError):
    """The management API was called with no API token, or one that is unknown or revoked
    (SQLSTATE HR020; HTTP 401). The message never carries the token."""

    http_status = 401


class ApiTokenExists(HarvestError):
    """A live API token already has this name (SQLSTATE HR021; HTTP 409): revoke it first."""

    http_status = 409


class NotPlacedHere(HarvestError):
    """A runtime this process does not run was asked to act here (``retention run-now`` on a web
    replica whose janitor runs where the scheduler runs): 503, retry where it runs."""

    http_status = 503


class ParentShardAlive(HarvestError):
    """`harvest shard release-owed-ends N` (and its route) found shard N reachable and alive: a
    release would let retention purge child ends its parents still wait for. Nothing was
    released (HTTP 409, exit 2): retire the shard first, or force it (a shard being restored to
    before the children's starts)."""

    http_status = 409

    exit_code = 2


# SQLSTATE -> exception class. The SQL API raises only these custom codes.
SQLSTATE_ERRORS: dict[str, type[HarvestError]] = {
    "HR001": InvalidArgument,
    "HR002": NotFound,
    "HR003": WorkflowAlreadyExists,
    "HR004": StaleTask,
    "HR005": WorkflowNotRunning,
    "HR006": QuotaExceeded,
    "HR007": PolicyConflict,
    "HR008": PayloadTooLarge,
    "HR010": UnknownWorkflow,
    "HR011": WrongShard,
    "HR013": ExecutionMigrated,
    "HR014": ScheduleAlreadyExists,
    "HR017": DagPaused,
    "HR018": DagRunLimit,
    "HR019": DagRunNotRetryable,
    "HR020": Unauthenticated,
    "HR021": ApiTokenExists,
    "HR023": WorkflowPaused,
    "HR030": LegalHoldActive,
    "HR031": ExecutionNotTerminal,
    "42501": PermissionDenied,
    # program_limit_exceeded: a value too large for the server's own limits (an index entry
    # over 2,704 bytes, ...) that no check of Harvest's named first; the caller's input.
    "54000": InvalidArgument,
}


# What a refused call's error adds: which roles grant what (a command that no harvest_* role may
# run, `harvest migrate`, says what it needs instead: harvest/cli/migrate.py).
ROLE_ADVICE = (
    "(the database role lacks this right; see the harvest_* roles in docs/security.md, section Roles)"
)


def from_database_error(exc: Exception) -> HarvestError | None:
    """Translate a psycopg error carrying a Harvest SQLSTATE, or return None."""
    sqlstate = getattr(exc, "sqlstate", None)
    cls = SQLSTATE_ERRORS.get(sqlstate or "")
    if cls is None:
        return None
    diag = getattr(exc, "diag", None)
    message = (getattr(diag, "message_primary", None) or str(exc)).strip()
    # The function's HINT says what to do about it; the message alone says only what was wrong.
    hint = getattr(diag, "message_hint", None)
    advised = f"{message}: {hint}" if hint else message
    if cls is WorkflowAlreadyExists:
        detail = getattr(diag, "message_detail", None)
        info: dict[str, Any] = {}
        if detail:
            try:
                info = json.loads(detail)
            except ValueError:
                info = {}
        return WorkflowAlreadyExists(advised, info.get("existing_execution_id"), info.get("existing_status"))
    if cls is QuotaExceeded:
        try:
            info = json.loads(getattr(diag, "message_detail", None) or "{}")
        except ValueError:
            info = {}
        return QuotaExceeded(
            advised, info.get("quota"), info.get("key"), info.get("usage"), info.get("limit")
        )
    if cls is PayloadTooLarge:
        try:
            info = json.loads(getattr(diag, "message_detail", None) or "{}")
        except ValueError:
            info = {}
        return PayloadTooLarge(advised, info.get("what"), info.get("bytes"), info.get("limit"))
    if cls is UnknownWorkflow:
        try:
            info = json.loads(getattr(diag, "message_detail", None) or "{}")
        except ValueError:
            info = {}
        return UnknownWorkflow(advised, info.get("workflow_name"), info.get("queue"), info.get("registered"))
    if cls is WrongShard:
        try:
            info = json.loads(getattr(diag, "message_detail", None) or "{}")
        except ValueError:
            info = {}
        return WrongShard(
            advised,
            info.get("requested_shard_id"),
            info.get("shard_id"),
        )
    if cls is ExecutionMigrated:
        try:
            info = json.loads(getattr(diag, "message_detail", None) or "{}")
        except ValueError:
            info = {}
        return ExecutionMigrated(
            advised,
            info.get("reason"),
            info.get("execution_id"),
            info.get("shard_id"),
            info.get("blockers"),
        )
    if cls is InvalidArgument:
        # A field of a JSON argument the SQL refused by its one rule (functions/core.sql,
        # _refuse_json_value: DETAIL {"field", "given"}): named as a 400's "field" is.
        try:
            info = json.loads(getattr(diag, "message_detail", None) or "{}")
        except ValueError:
            info = {}
        refused = cls(advised)
        if isinstance(info, dict) and isinstance(info.get("field"), str):
            refused.field = info["field"]  # type: ignore[attr-defined]
        return refused
    if cls is PermissionDenied:
        return PermissionDenied(f"{message} {ROLE_ADVICE}")
    return cls(advised)


class SignalTimeout(HarvestError, TimeoutError):
    """``ctx.wait_for_signal(name, timeout=...)``: the timer fired before the signal came."""

    def __init__(self, name: str, timeout: float, unread: dict[str, int] | None = None):
        message = f"no signal {name!r} arrived within {timeout:g}s"
        if unread:  # a signal sent under another name is buffered without a word: say so here
            names = ", ".join(f"{other!r} ({count})" for other, count in sorted(unread.items()))
            message += (
                f"; signals of other names wait unread: {names} (a misspelt name, here or by the sender?)"
            )
        super().__init__(message)
        self.name = name
        self.timeout = timeout
        self.unread = dict(unread or {})


class ConditionTimeout(HarvestError, TimeoutError):
    """``ctx.wait_condition(predicate, timeout=...)``: the timer fired and the predicate was
    still false once the step's code had run (``predicate`` names it)."""

    def __init__(self, predicate: str, timeout: float):
        super().__init__(f"the condition {predicate} did not hold within {timeout:g}s")
        self.predicate = predicate
        self.timeout = timeout


class ChildWorkflowError(HarvestError):
    """Raised in a parent when its child ended FAILED, CANCELLED, TERMINATED or TIMED_OUT.

    ``failure`` is the child's ``{error_type, message, non_retryable, details}`` as
    recorded in ``ChildWorkflowFailed`` (it may be None, e.g. for a termination).
    """

    def __init__(
        self,
        status: str,
        failure: dict[str, Any] | None,
        child_execution_id: str | None = None,
        workflow_name: str | None = None,
    ):
        failure = failure or None
        what = f"child workflow {workflow_name!r}" if workflow_name else "child workflow"
        text = f"{what} ({child_execution_id}) ended {status}"
        if failure:
            text += f": {failure.get('error_type', 'Error')}: {failure.get('message', '')}"
        super().__init__(text)
        self.status = status
        self.failure = failure
        self.child_execution_id = child_execution_id
        self.workflow_name = workflow_name

    @property
    def error_type(self) -> str | None:
        return (self.failure or {}).get("error_type")


# -- signalling and cancelling another workflow (docs/messages.md) ----------------------------


class ExternalWorkflowError(HarvestError):
    """``ctx.signal_external_workflow`` / ``ctx.cancel_external_workflow`` did not reach
    its target: ``.reason`` is the recorded outcome (``not_found``, ``not_running``,
    ``ambiguous``, ``wrong_shard``), ``.action`` ``"signal"`` or ``"cancel"``,
    ``.execution_id`` the run it found or was given (None when none), ``.message``
    the database's explanation. Nothing was delivered."""

    def __init__(self, action: str, reason: str, execution_id: str | None = None, message: str | None = None):
        super().__init__(f"could not {action} the external workflow ({reason}): {message or reason}")
        self.action, self.reason, self.execution_id, self.message = action, reason, execution_id, message


class ExternalWorkflowNotFound(ExternalWorkflowError):
    """The target does not exist: no run has that execution id, or no run ever had
    that workflow_id (and name) on any shard that was asked."""


class ExternalWorkflowNotRunning(ExternalWorkflowError):
    """The target exists but has already ended (``.execution_id`` is the ended run)."""


class ExternalWorkflowUnreachable(ExternalWorkflowError):
    """The target's execution id was minted for another shard, and this database relays
    to no other shard (``harvest.engine_settings.cross_shard_relays`` is off)."""


EXTERNAL_WORKFLOW_ERRORS: dict[str, type[ExternalWorkflowError]] = {
    "not_found": ExternalWorkflowNotFound,
    "not_running": ExternalWorkflowNotRunning,
    "wrong_shard": ExternalWorkflowUnreachable,
}


def external_workflow_error(action: str, data: dict[str, Any]) -> ExternalWorkflowError:
    """The exception for an ``ExternalSignalFailed`` / ``ExternalCancelFailed`` event's data."""
    reason = str(data.get("reason") or "failed")
    cls = EXTERNAL_WORKFLOW_ERRORS.get(reason, ExternalWorkflowError)
    execution_id = data.get("execution_id")
    return cls(action, reason, str(execution_id) if execution_id else None, data.get("message"))


# -- queries and updates (docs/messages.md) ----------------------------------------------------


class QueryFailed(HarvestError):
    """A query or update could not be answered: an unknown name, a handler that raised, a
    workflow that could not be replayed. ``error_type`` and ``details`` come from the worker."""

    http_status = 422

    def __init__(self, message: str, error_type: str | None = None, details: Any = None):
        super().__init__(message)
        self.error_type = error_type
        self.details = details


class QueryTimeout(HarvestError, TimeoutError):
    """No answer within the timeout; the message says whether any live worker polls the queue."""

    http_status = 504


class UpdateRejected(QueryFailed):
    """The update's validator (or the workflow: unknown update, run ended) refused it.
    Nothing was written to the history."""


class UpdateFailed(QueryFailed):
    """The update was accepted and recorded, but its handler raised (``error_type`` names
    the exception), or the run ended before the handler finished."""


# -- over HTTP -------------------------------------------------------------------------------


# The hint of a run not found by its execution id (harvest._execution_not_found) names the SQL's
# lookup by workflow id; each face says its own way (the API's route, the CLI's command), and the
# CLI over HTTP reads the route's. Matched either way, so the CLI prints the same over both.
_LOOKUP_HINT = re.compile(
    r"(harvest\.get_execution_by_workflow_id\(\)|GET /workflows/current\?\S+) finds a run by it"
)
_NOT_FOUND_ID = re.compile(r"execution (\S+) does not exist")


def with_lookup_hint(message: str, lookup: Callable[[str], str]) -> str:
    """``message`` with its hint's lookup by workflow id in a face's words: ``lookup(the id
    given)``, the face's route or command."""
    given = _NOT_FOUND_ID.search(message)
    wanted = given.group(1) if given else "<id>"
    return _LOOKUP_HINT.sub(lambda _: f"{lookup(wanted)} finds a run by it", message)


def error_code(exc: BaseException) -> str:
    """The stable code of an error in the HTTP API's body: its class name in snake case
    (``InvalidArgument`` -> ``invalid_argument``, ``TimeoutError_`` -> ``timeout_error``)."""
    name = type(exc).__name__.rstrip("_")
    out = []
    for i, ch in enumerate(name):
        if (
            ch.isupper()
            and i
            and (not name[i - 1].isupper() or (i + 1 < len(name) and name[i + 1].islower()))
        ):
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


def http_status(exc: BaseException) -> int:
    """The HTTP status of an error: its class's ``http_status`` (500 for anything else)."""
    status = getattr(exc, "http_status", 500) if isinstance(exc, HarvestError) else 500
    return status if isinstance(status, int) else 500
