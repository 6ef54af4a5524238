"""The dashboard: server-rendered pages over the SQL API and the shard fan-out (docs/dashboard.md).

A face like the CLI: each page reads through :class:`~harvest.web.ui.source.Source` (the SQL
API on a connection lent as the caller's role) and ``harvest.shard.fanout`` (the CLI's merges),
and holds no engine logic. Every page asks the ``Authorizer`` for ``read``; an action's form is
drawn only when the principal allows its scope (``operate`` or ``admin``), and its POST handler
asks the authorizer for that scope again. No page needs JavaScript.

``dashboard_app(...)`` is a Starlette app of its own: served alone (the tests), or mounted by
the management app at ``/ui``.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import random
import re
import secrets
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast, overload

import jinja2
from starlette.applications import Starlette
from starlette.convertors import PathConvertor, register_url_convertor
from starlette.datastructures import QueryParams
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from harvest.client.batch import (
    BATCH_STEP,
    BATCH_STEP_MAX,
    RESET_POINTS,
    BatchTally,
    astep_request,
    decode_cursor,
    encode_cursor,
    reset_point_problem,
    step_arguments,
)
from harvest.client.history_export import aexport_chunks, aresolved_in_batches
from harvest.client.routing import resident
from harvest.client.schedules import abackfill, schedule_refusal_for
from harvest.config import Config
from harvest.core import jsonb
from harvest.core.durations import plain_number
from harvest.core.errors import (
    ConfigError,
    DatabaseUnavailable,
    ExecutionMigrated,
    HarvestError,
    InvalidArgument,
    NoShardReached,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    ScheduleAlreadyExists,
    UnknownWorkflow,
    WorkflowNotRunning,
)
from harvest.core.ids import MAX_SHARD, ROW_ID_MAX
from harvest.core.json_values import json_default
from harvest.core.search_attrs import GROUP_BY_PREFIX, is_search_attr_key
from harvest.core.statuses import LIVE_STATUSES
from harvest.db.connection import DatabaseError, database_error_message, failure_reason
from harvest.db.pools import outage
from harvest.declare.schedules import BACKFILL_MAX_SLOTS, OVERLAP_POLICIES, backfill_slots, describe_row
from harvest.shard.fanout import (
    EXECUTION_STATUSES,
    UNAVAILABLE,
    WORKER_LIMIT_MAX,
    Merged,
    fan_out_async,
)
from harvest.shard.health import shard_health
from harvest.web import schedule_spec
from harvest.web.auth import default_authorizer, token_database
from harvest.web.errors import (
    RETRY_AFTER_SECS,
    app_outages,
    database_error_status,
    outage_answer,
    outages_of,
    sees_connection_detail,
)
from harvest.web.guards import cross_site, declared_too_large, parse_json, read_body
from harvest.web.principal import Authorizer, Principal, Scope, refusal_status
from harvest.web.routes import Param, ShardWrites, app_queue, invalid, refusals_apart, refuse_undeclared
from harvest.web.routes.history import history_events, streamed_json
from harvest.web.ui import views
from harvest.web.ui.source import DEFAULT_TIMEOUT, Source

log = logging.getLogger("harvest.web.ui")


class _NameConvertor(PathConvertor):
    """A schedule's, a DAG's or a worker's name in a route: one character or more, a "/"
    included (``billing/monthly``; the server decodes %2F before routing). Not empty, so
    ``/dags/`` is still the list's address (a redirect), not the page of a DAG named ""."""

    regex = ".+"


register_url_convertor("name", _NameConvertor())


class _WorkflowIdConvertor(PathConvertor):
    """A workflow ID holding a "/" in a run's address (a child's default ID is its parent's,
    "/" and its seq: ``order-parent-3/1``, ``<uuid>/1``): two segments or more. An execution ID
    never holds one, so the only addresses it could be read as are a run's own pages and actions
    (``<uuid>/history/export``, ``<uuid>/signal``, ...): those keep their meaning."""

    regex = (
        r"(?![0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}"
        r"/(?:history/export|signal|cancel|terminate|reset|pause|resume)$)[^/]+/.+"
    )


register_url_convertor("workflow_id", _WorkflowIdConvertor())

HERE = Path(__file__).parent
TOKEN_COOKIE = "harvest_ui_token"  # a token signed in through /login, sent on as a Bearer header
MAX_PAGE = 200  # the spec's bound for the workers list; the workflow and dead-letter lists too
USAGE_SHOWN = 200  # the concurrency page's usage groups drawn (harvest usage, /admin/usage: all)
DEFAULT_PAGE = 50
# The workflows page's status chips count at most this many runs of each status (count_executions'
# p_limit): an exact count read every matching run on each view of the page.
STATUS_COUNT_CAP = 10_000
HISTORY_SHOWN = 500  # the timeline's events a page (the last by default; history_from/_before page)
TREE_DEPTH = 10  # levels of a run's tree drawn on its page; a node at the last one links deeper
TREE_NODES = 200  # descendants drawn at most, breadth first (a fan-out of 100,000 was drawn whole)
STACK_SHOWN = 50  # entries of each of a run's waiting-on lists drawn (its totals say the rest)
MAX_FORM_BYTES = 1 << 20  # a signal's payload is the largest field; the database bounds payloads too
BULK_ACTIONS = ("replay", "discard")
START_GATE_KINDS = ("throttle", "debounce", "batch")  # what holds a start back (list_pending_starts' kind)
# The runs list's bulk actions (POST /workflows/bulk) and the scope each needs, as their per-run
# actions and the API's POST /workflows/cancel|terminate|signal|pause|resume|reset.
RUN_BULK_SCOPES: dict[str, Scope] = {
    "cancel": "operate",
    "terminate": "admin",
    "signal": "operate",
    "pause": "operate",
    "resume": "operate",
    "reset": "admin",
}
# The statuses a bulk action selects when the list names none (the SQL's defaults: _act_on_workflows).
RUN_BULK_DEFAULT_STATUS = {"pause": "RUNNING", "resume": "PAUSED", "reset": "RUNNING"}
# The statuses a bulk action can take (the others': the live ones): of the list's, the action
# selects these alone (a reset: RUNNING, a terminal or paused run it refuses).
RUN_BULK_STATUSES = {"reset": frozenset({"RUNNING"})}
# A reset's signal reapply (reset_workflows' p_signal_reapply; its points: batch.RESET_POINTS).
SIGNAL_REAPPLY = ("drop", "buffer")
RUN_BULK_SAMPLE = 20  # ids a dry run shows (the first of each shard, oldest first)
# Steps on each shard one POST makes (each a transaction of at most its limit of runs), then the
# page says how far it got and offers Continue: a request, and what a click does, stay bounded.
RUN_BULK_STEPS = 10
WORKER_STATUSES = ("active", "draining", "stopped")
LIST_STATUSES = (*EXECUTION_STATUSES, "MIGRATING", "MIGRATED")
WINDOWS = {
    "1h": timedelta(hours=1),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
}


# -- parameters: an unknown value is a 400, never "matches nothing" -------------------------------
def _param(params: Any, name: str) -> str | None:
    value = params.get(name)
    if value is None:
        return None
    value = value.strip()
    return value or None  # a form sends its empty fields as ""


@overload
def _int(params: Any, name: str, lo: int, hi: int, default: int) -> int: ...
@overload
def _int(params: Any, name: str, lo: int, hi: int, default: None) -> int | None: ...
def _int(params: Any, name: str, lo: int, hi: int, default: int | None) -> int | None:
    raw = _param(params, name)
    if raw is None:
        return default
    if not re.fullmatch(r"[0-9]+", raw) or not lo <= int(raw) <= hi:
        raise InvalidArgument(f"{name}={raw!r}: give a whole number from {lo} to {hi}")
    return int(raw)


def _choice(params: Any, name: str, allowed: tuple[str, ...]) -> str | None:
    raw = _param(params, name)
    if raw is None:
        return None
    if raw.lower() not in allowed:
        raise InvalidArgument(f"{name}={raw!r} is unknown: use {', '.join(allowed)}")
    return raw.lower()


def _time(params: Any, name: str) -> datetime | None:
    raw = _param(params, name)
    if raw is None:
        return None
    try:
        moment = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgument(
            f"{name}={raw!r} is not a date or time (2026-05-01, 2026-05-01T12:00:00Z)"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _statuses(params: Any) -> str | None:
    wanted = [s.strip().upper() for v in params.getlist("status") for s in v.split(",") if s.strip()]
    for s in wanted:
        if s not in LIST_STATUSES:
            raise InvalidArgument(f"status={s!r} is unknown: use {', '.join(LIST_STATUSES)}")
    return ",".join(dict.fromkeys(wanted)) or None


def _run_filters(params: Any) -> tuple[str | None, dict[str, Any]]:
    """The runs list's filters (its query, or the same carried by a bulk action's form): the
    statuses, and the rest as ``list_workflows`` and the batch take them."""
    attrs = [a.strip() for a in params.getlist("attr") if a.strip()]
    failing = _choice(params, "failing", FAILING_CHOICES)
    return _statuses(params), {
        "workflow_name": _param(params, "workflow_name"),
        "workflow_id": _param(params, "workflow_id"),
        "search_attributes": attrs,
        "created_after": _time(params, "created_after"),
        "created_before": _time(params, "created_before"),
        "failing": None if failing is None else failing == "true",
    }


# The "Workflow task" filter: failing (the runs whose workflow task fails: list_executions'
# p_failing) or not failing.
FAILING_CHOICES = ("true", "false")
FILTER_PARAMS = (
    "status",
    "workflow_name",
    "workflow_id",
    "attr",
    "created_after",
    "created_before",
    "failing",
)
# The query parameters every page takes (its reload, an action's banner: _back); each page's
# route names its own (DashboardApp._page), and any other is the page's 400 naming it, as the
# API answers (routes.refuse_undeclared), not the page as if it were not given. workflow_id (the
# runs of one workflow ID: a continue-as-new chain, resets) filters the list, its counts and a
# bulk action alike.
PAGE_PARAMS = ("refresh", "msg", "msg_sig")
# A run's page (and a workflow ID typed into the address: workflow_name picks among workflows).
RUN_PAGE_PARAMS = ("payloads", "history_from", "history_before", "workflow_name")


def _filter_query(params: Any) -> str:
    """The list's filters of ``params`` as a query string (a bulk action carries it as it is)."""
    items = [(k, v) for k, v in params.multi_items() if k in FILTER_PARAMS and v.strip()]
    return urllib.parse.urlencode(items)


def _bulk_offer(state: str | None, filters: dict[str, Any]) -> str | None:
    """Why the list's filter cannot be acted on in bulk, or None when it can."""
    # (failing true names the runs whose workflow task fails, a few; false, nearly every run)
    if not any(v for k, v in filters.items() if k != "failing") and filters.get("failing") is not True:
        return (
            "filter by workflow, workflow ID, search attribute, creation time or failing task to act on the"
            " runs listed"
        )
    if state is not None and not _bulk_actions(state):
        return (
            "only live runs (RUNNING, PAUSED) can be cancelled, terminated, signalled, paused or resumed,"
            " and RUNNING ones reset"
        )
    return None


def _bulk_statuses(action: str) -> frozenset[str]:
    return RUN_BULK_STATUSES.get(action, LIVE_STATUSES)


def _bulk_actions(state: str | None) -> list[str]:
    """The bulk actions that take a status of the list's (every one when it names none)."""
    named = set((state or "").split(",")) - {""}
    return [a for a in RUN_BULK_SCOPES if not named or named & _bulk_statuses(a)]


def _bulk_filters(params: Any, action: str) -> tuple[str | None, dict[str, Any]]:
    """The statuses ``action`` takes and the filters of a bulk action; an empty filter (a status
    alone would select every live run) or no status the action takes is a 400, as the API's."""
    state, filters = _run_filters(params)
    refused = _bulk_offer(state, filters)
    if refused is None and state is not None and action not in _bulk_actions(state):
        refused = f"no status of the list's ({state}) is one a {action} takes"
    if refused is not None:
        raise InvalidArgument(f"filter: {refused}")
    taken = [s for s in (state or "").split(",") if s in _bulk_statuses(action)]
    return ",".join(taken) or None, filters


def _run_bulk_action(params: Any) -> str:
    action = _choice(params, "action", tuple(RUN_BULK_SCOPES))
    if action is None:
        raise InvalidArgument(f"action: choose one of {', '.join(RUN_BULK_SCOPES)}")
    return action


def _run_bulk_scope(form: dict[str, str]) -> Scope:
    form["action"] = _run_bulk_action(form)
    return RUN_BULK_SCOPES[form["action"]]


def _dead_letter_bulk_scope(form: dict[str, str]) -> Scope:
    form["action"] = _choice(form, "action", BULK_ACTIONS) or "replay"
    return "admin" if form["action"] == "discard" else "operate"  # (discard: an admin's)


def _done(action: str) -> str:
    return {
        "cancel": "cancelled",
        "terminate": "terminated",
        "signal": "signalled",
        "pause": "paused",
        "resume": "resumed",
        "reset": "reset",
    }.get(action, action)


def _signal_of(form: Any, name_field: str) -> tuple[str, Any]:
    """A signal's name and JSON payload from a form (no payload: null), for one run's signal and
    the runs a filter selects alike; a missing name or a payload that is not JSON is a 400
    naming its field."""
    name = (form.get(name_field) or "").strip()
    if not name:
        raise InvalidArgument(f"{name_field}: name the signal to send (the name the workflow waits for)")
    text = (form.get("payload") or "").strip()
    try:
        payload = parse_json(text) if text else None
    except ValueError as exc:
        raise InvalidArgument(
            f"payload: not valid JSON ({exc}): give a JSON value such as "
            '{"approved": true}, or nothing for null'
        ) from None
    return name, payload


def _filter_said(params: Any, action: str) -> list[tuple[str, str]]:
    """The filter of ``action`` in bulk as the confirmation names it."""
    state, filters = _run_filters(params)
    taken = [s for s in (state or "").split(",") if s in _bulk_statuses(action)]
    default = RUN_BULK_DEFAULT_STATUS.get(action, "RUNNING, PAUSED (every live run)")
    said = [("status", ", ".join(taken) if taken else default)]
    if filters["workflow_name"]:
        said.append(("workflow", filters["workflow_name"]))
    if filters["workflow_id"]:
        said.append(("workflow ID", filters["workflow_id"]))
    said += [("search attribute", a) for a in filters["search_attributes"]]
    for key in ("created_after", "created_before"):
        if filters[key] is not None:
            said.append((key.replace("_", " "), views.when(filters[key])))
    if filters["failing"] is not None:
        said.append(("workflow task", "failing" if filters["failing"] else "not failing"))
    return said


def _absorb(tally: BatchTally, so_far: str | None) -> None:
    """The summary of the batch's earlier requests (the page's own, carried by its Continue form)
    added to ``tally``; its shards not reached then are tried again now."""
    if not so_far:
        return
    try:
        summary = jsonb.loads(so_far)
        rows = [*(summary.get("shards") or []), *(summary.get("failures") or [])]
        if not all(isinstance(row, dict) for row in rows):  # (the page draws each as a row)
            raise TypeError(so_far)
        tally.absorb(summary)
    except (ValueError, TypeError, KeyError, AttributeError):
        raise InvalidArgument("so_far: not a summary this page made; start again from the list") from None
    tally.unavailable = {}


async def _each(values: list[Any]) -> AsyncIterator[Any]:
    """``values`` one at a time, for a reader of an asyncio stream (aresolved_in_batches)."""
    for value in values:
        yield value


def _execution_id(value: str) -> str:
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise NotFound(f"{value!r} is not an execution id") from None


def _error_status(exc: BaseException) -> int:
    if isinstance(exc, ConfigError):
        return 500  # the server's configuration, not the request
    if isinstance(exc, PayloadTooLarge):  # (an InvalidArgument too)
        return 413
    if isinstance(exc, InvalidArgument):
        return 400
    if isinstance(exc, PermissionDenied):
        return 403
    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, WorkflowNotRunning):
        return 409
    if isinstance(exc, (DatabaseUnavailable, ExecutionMigrated)):
        return 503
    return 409  # another typed refusal: the request conflicts with the engine's state


class Dashboard:
    """The pages. ``source`` is where they read; ``authorizer`` who may see and do what;
    ``app`` the served App (the management app's), whose declared queue a schedule without one
    takes, as the API's create does."""

    def __init__(self, source: Source, authorizer: Authorizer, app: Any = None):
        self.source, self.authorizer, self.app = source, authorizer, app
        # Signs the messages of this process's redirects (_back); a message signed by another
        # process (behind a balancer without sticky sessions) is not shown, the action is done.
        self._msg_key = secrets.token_bytes(32)
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        views.install(self.templates)

    async def close(self) -> None:
        """Close the pools the dashboard opened (none when it was given ``shards``)."""
        await self.source.close()

    # -- plumbing --------------------------------------------------------------------------------
    def routes(self) -> list[BaseRoute]:
        page, action = self._page, self._action
        return [
            Route("/", page(self.index)),
            Route("/login", self.login, methods=["GET", "POST"]),
            Route("/logout", self.logout, methods=["POST"]),
            Route("/workflows", page(self.workflows, *FILTER_PARAMS, "limit", "order", "cursor")),
            Route(  # (reset_to, before: a reset's preview of each run's point)
                "/workflows/bulk", page(self.bulk_runs_count, "action", "reset_to", "before", *FILTER_PARAMS)
            ),
            Route("/workflows/bulk", action(self.bulk_runs, "operate", _run_bulk_scope), methods=["POST"]),
            Route("/workflows/find", page(self.find_run, "id", "workflow_name")),
            Route("/workflows/{execution_id}", page(self.execution, *RUN_PAGE_PARAMS)),
            # A workflow ID with a "/" typed into the address: its run, as Go to a run finds it
            # (before the run's pages and actions, which an execution ID's address still reaches).
            Route("/workflows/{execution_id:workflow_id}", page(self.execution, *RUN_PAGE_PARAMS)),
            Route("/workflows/{execution_id}/history/export", page(self.export_history, "payloads")),
            Route("/workflows/{execution_id}/signal", action(self.signal, "operate"), methods=["POST"]),
            Route("/workflows/{execution_id}/cancel", action(self.cancel, "operate"), methods=["POST"]),
            Route("/workflows/{execution_id}/terminate", action(self.terminate, "admin"), methods=["POST"]),
            Route("/workflows/{execution_id}/reset", action(self.reset, "admin"), methods=["POST"]),
            Route("/workflows/{execution_id}/pause", action(self.pause, "operate"), methods=["POST"]),
            Route("/workflows/{execution_id}/resume", action(self.resume, "operate"), methods=["POST"]),
            # A schedule's, a DAG's or a worker's name may hold a "/" (billing/monthly,
            # _NameConvertor): a route's fixed words after it say which page or action; a GET
            # finds the page, a POST the action.
            Route("/schedules", page(self.schedules, "kind", "paused", "limit", "cursor")),
            Route("/schedules", action(self.create_schedule, "operate"), methods=["POST"]),
            Route(
                "/schedules/{shard:int}/{name:name}/{verb:str}",
                action(self.schedule_action, "operate"),
                methods=["POST"],
            ),
            Route("/schedules/{shard:int}/{name:name}", page(self.schedule, "limit")),
            Route("/dags", page(self.dags, "paused")),
            Route(
                "/dags/{name:name}/runs/{execution_id}/retry",
                action(self.retry_dag_run, "operate"),
                methods=["POST"],
            ),
            Route("/dags/{name:name}/runs/{execution_id}", page(self.dag_run)),
            Route("/dags/{name:name}/trigger", action(self.trigger_dag, "operate"), methods=["POST"]),
            Route("/dags/{name:name}/pause", action(self.pause_dag, "operate"), methods=["POST"]),
            Route("/dags/{name:name}/unpause", action(self.pause_dag, "operate"), methods=["POST"]),
            Route("/dags/{name:name}", page(self.dag, "limit", "status", "cursor")),
            Route(
                "/dead-letters", page(self.dead_letters, "limit", "activity_name", "workflow_name", "cursor")
            ),
            Route(
                "/dead-letters/bulk", action(self.bulk, "operate", _dead_letter_bulk_scope), methods=["POST"]
            ),
            Route("/dead-letters/{shard:int}/{id:int}", page(self.dead_letter, "payloads")),
            Route(
                "/dead-letters/{shard:int}/{id:int}/replay", action(self.replay, "operate"), methods=["POST"]
            ),
            Route(
                "/dead-letters/{shard:int}/{id:int}/discard", action(self.discard, "admin"), methods=["POST"]
            ),
            Route("/start-gates", page(self.start_gates, "workflow_name", "kind", "limit", "cursor")),
            Route("/start-gates/discard", action(self.discard_starts, "admin"), methods=["POST"]),
            Route(
                "/start-gates/{shard:int}/{id:int}/discard",
                action(self.discard_start, "admin"),
                methods=["POST"],
            ),
            Route("/workers", page(self.workers, "status", "stale", "shard", "page", "limit")),
            Route("/workers/{worker_id:name}/drain", action(self.drain, "admin"), methods=["POST"]),
            Route("/workers/{worker_id:name}", page(self.worker)),
            Route("/concurrency", page(self.concurrency, "window", "group_by", "limit", "key", "cursor")),
            Route("/shards", page(self.shards)),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ]

    async def _authorize(self, request: Request, needed: Scope) -> Principal:
        token = request.cookies.get(TOKEN_COOKIE)
        if token and "authorization" not in request.headers:
            # A browser cannot send a Bearer header from a link or a form: the token it signed in
            # with (an HttpOnly, SameSite=Strict cookie) is handed on as one.
            scope = dict(request.scope)
            scope["headers"] = [*request.scope["headers"], (b"authorization", f"Bearer {token}".encode())]
            request = Request(scope, request.receive)
        return await self.authorizer.authorize(request, needed)

    def render(self, request: Request, name: str, code: int = 200, **context: Any) -> HTMLResponse:
        params = request.query_params
        refresh = context.pop("refresh", None)
        html = self.templates.get_template(name).render(
            base=request.scope.get("root_path", "").rstrip("/"),
            path=request.url.path,
            query=params,
            refresh=refresh,
            msg=self._own_message(params),
            **context,
        )
        return HTMLResponse(html, status_code=code)

    def error(
        self, request: Request, status: int, message: str, principal: Principal | None = None
    ) -> Response:
        # A page refused for want of a token signs in back to itself (a GET: a form's POST is not
        # replayed).
        back_to = _page_path(request) if status == 401 and request.method == "GET" else None
        context = {"status": status, "message": message, "principal": principal, "back_to": back_to}
        return self.render(request, "error.html", status, **context)

    async def _principal(self, request: Request, needed: Scope) -> Principal | Response:
        """The principal the authorizer makes of ``request`` for ``needed``, or the error page
        of its refusal (its 401 or 403; 503 when it cannot reach the tokens' database)."""
        try:
            principal = await self._authorize(request, needed)
        except HTTPException as exc:
            return self.error(request, exc.status_code, str(exc.detail))
        except Exception as exc:
            if outage(exc):  # the tokens' database: the management API's 503, nothing of the connect
                return self._outage(request, exc, None)
            if isinstance(exc, HarvestError):
                return self.error(request, getattr(exc, "http_status", None) or _error_status(exc), str(exc))
            if isinstance(exc, DatabaseError):
                return self._database_error(request, exc, None)
            # The authorizer's own 401/403 error type (the management API's): its status, if any.
            status = refusal_status(exc)
            if status is not None:
                return self.error(request, status, _one_line(exc))
            raise
        if not principal.allows(needed):  # an authorizer that returned a lower principal
            return self.error(
                request, 403, f"this needs the {needed} scope; you have {principal.scope}", principal
            )
        return principal

    async def _guarded(
        self, request: Request, needed: Scope, handler: Callable[[Request, Principal], Awaitable[Response]]
    ) -> Response:
        principal = await self._principal(request, needed)
        if isinstance(principal, Response):
            return principal
        try:
            answer = await handler(request, principal)
        except (HarvestError, DatabaseError) as exc:
            if outage(exc):
                return self._outage(request, exc, principal)
            if isinstance(exc, HarvestError):
                return self.error(request, _error_status(exc), _one_line(exc), principal)
            return self._database_error(request, exc, principal)  # the server's first line, no traceback
        outages_of(request).tick()  # (an outage no request met for a while is over: its line)
        return answer

    def _outage(self, request: Request, exc: BaseException, principal: Principal | None) -> Response:
        """A database or shard that cannot be reached: the management API's 503 (one rule,
        harvest.web.errors.outage_answer), a page."""
        _, message, details = outage_answer(exc, principal, "dashboard", outages_of(request))
        if details["detail"]:
            message = f"{message}: {details['detail']}"
        page = self.error(request, 503, message, principal)
        page.headers["Retry-After"] = RETRY_AFTER_SECS  # (as the API's 503: a reload may find it back)
        return page

    def _database_error(self, request: Request, exc: DatabaseError, principal: Principal | None) -> Response:
        """A database error the SQL API has no class for, as the management API answers it: a
        value the database calls invalid is a 400, anything else a 500 (logged)."""
        status = database_error_status(exc)
        if status >= 500:
            # As the management API logs it (harvest.web.errors): the server's first line and
            # SQLSTATE; no traceback, whose last line is the whole text (DETAIL, CONTEXT).
            log.error("dashboard: %s %s failed: %s", request.method, request.url.path, failure_reason(exc))
        return self.error(request, status, database_error_message(exc)[0], principal)

    def _page(
        self, handler: Callable[[Request, Principal], Awaitable[Response]], *takes: str
    ) -> Callable[..., Any]:
        """A page's GET handler, needing ``read``: ``takes`` are the query parameters it reads
        (with PAGE_PARAMS); any other is its 400 page naming it, once the request is authorized."""
        declared = tuple(Param(name) for name in (*takes, *PAGE_PARAMS))

        async def checked(request: Request, principal: Principal) -> Response:
            refuse_undeclared(request, declared)
            _refuse_nul([*request.path_params.items(), *request.query_params.multi_items()])
            return await handler(request, principal)

        async def endpoint(request: Request) -> Response:
            return await self._guarded(request, "read", checked)

        return endpoint

    def _action(
        self,
        handler: Callable[..., Awaitable[Response]],
        needed: Scope,
        scope_of: Callable[[dict[str, str]], Scope] | None = None,
    ) -> Callable[..., Any]:
        """A form's POST handler, needing ``needed``, or (``scope_of``) the scope its form's
        action needs, read from the form once (it may need more than ``needed``)."""

        async def endpoint(request: Request) -> Response:
            # Nothing of the body is read before the request is known to come from our own
            # pages, to fit, and to be authorized: an anonymous client makes the server buffer
            # nothing.
            refused = _refused_post(request)
            if refused is not None:
                return self.error(request, *refused)

            async def act(request: Request, principal: Principal) -> Response:
                form = await _form(request)
                raised = await self._raised(request, principal, scope_of(form) if scope_of else needed)
                if isinstance(raised, Response):
                    return raised
                return await handler(request, raised, form)

            return await self._guarded(request, needed, act)

        return endpoint

    async def _raised(self, request: Request, principal: Principal, wanted: Scope) -> Principal | Response:
        """``principal``, or the authorizer's answer when asked again for ``wanted``, a scope
        above the one it was asked for (its 403 page when it is not held)."""
        if principal.allows(wanted):
            return principal
        return await self._principal(request, wanted)

    def _back(self, request: Request, to: str, msg: str) -> Response:
        base = request.scope.get("root_path", "").rstrip("/")
        query = urllib.parse.urlencode({"msg": msg, "msg_sig": self._msg_signature(msg)})
        return RedirectResponse(f"{base}{to}?{query}", status_code=303)

    def _msg_signature(self, msg: str) -> str:
        return hmac.new(self._msg_key, msg.encode(), hashlib.sha256).hexdigest()[:32]

    def _own_message(self, params: Any) -> str | None:
        """The ``msg`` of an action's redirect (``_back``), shown as the page's banner only when
        this dashboard signed it (``msg_sig``): any site can link to the dashboard with a ``msg``
        of its own ("your session expired, sign in at ..."), which must not read as ours."""
        msg, signature = _param(params, "msg"), params.get("msg_sig")
        if msg is None or not signature:
            return None
        return msg if hmac.compare_digest(signature, self._msg_signature(msg)) else None

    def _refresh(self, request: Request) -> int | None:
        return _int(request.query_params, "refresh", 1, 86_400, None)

    # -- sign in -----------------------------------------------------------------------------------
    async def login(self, request: Request) -> Response:
        if request.method == "GET":
            after = _local_path(request.query_params.get("next"))
            return self.render(request, "login.html", principal=None, refresh=None, after=after)
        refused = _refused_post(request)
        if refused is not None:
            return self.error(request, *refused)
        try:
            form = await _form(request)
        except PayloadTooLarge as exc:
            return self.error(request, 413, str(exc))
        token = (form.get("token") or "").strip()
        base = request.scope.get("root_path", "").rstrip("/")
        response = RedirectResponse(f"{base}{_local_path(form.get('next')) or '/workflows'}", status_code=303)
        response.set_cookie(
            TOKEN_COOKIE,
            token,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path=base or "/",
        )
        return response

    async def logout(self, request: Request) -> Response:
        refused = cross_site(request)  # (another site's page must not sign the user out)
        if refused:
            return self.error(request, 403, refused)
        base = request.scope.get("root_path", "").rstrip("/")
        response = RedirectResponse(f"{base}/login", status_code=303)
        response.delete_cookie(TOKEN_COOKIE, path=base or "/")
        return response

    async def index(self, request: Request, principal: Principal) -> Response:
        base = request.scope.get("root_path", "").rstrip("/")
        return RedirectResponse(f"{base}/workflows", status_code=307)

    # -- workflows ---------------------------------------------------------------------------------
    async def workflows(self, request: Request, principal: Principal) -> Response:
        q = request.query_params
        refresh = self._refresh(request)
        state, filters = _run_filters(q)
        workflow_id = filters["workflow_id"]
        attrs = filters["search_attributes"]
        limit = _int(q, "limit", 1, MAX_PAGE, DEFAULT_PAGE)
        order = _choice(q, "order", ("desc", "asc")) or "desc"
        reads = self.source.reads(principal)
        page, counts = await asyncio.gather(
            reads.list_workflows(
                state=state, page_size=limit, cursor=_param(q, "cursor"), order=order, **filters
            ),
            # Bounded: each status's runs counted up to STATUS_COUNT_CAP (an exact count read
            # every matching run on each view, 0.8 s for 2M runs); a chip at the cap: "10000+".
            reads.count_executions(group_by="status", limit=STATUS_COUNT_CAP, **filters),
        )
        counted, unavailable = counts.value, _unavailable(page, counts)
        return self.render(
            request,
            "workflows.html",
            principal=principal,
            refresh=refresh,
            rows=page.value,
            next_cursor=page.next_cursor,
            counts=counted,
            total=sum(r["executions"] for r in counted or ()),
            total_capped=any(r.get("capped") for r in counted or ()),
            state=state,
            statuses=EXECUTION_STATUSES,
            attrs=attrs,
            workflow_id=workflow_id,
            failing=_param(q, "failing"),
            # The bulk form carries the list's filters, each of them (FILTER_PARAMS: one list).
            filter_params=FILTER_PARAMS,
            limit=limit,
            order=order,
            unavailable=unavailable,
            bulk=_bulk_offer(state, filters),
            bulk_actions=_bulk_actions(state),
        )

    # -- the runs a filter selects: count, confirm, act in bounded steps --------------------------
    async def bulk_runs_count(self, request: Request, principal: Principal) -> Response:
        """GET /workflows/bulk: the dry run of a bulk action (cancel, terminate, signal, pause,
        resume) of the live runs the list's filter selects (counted on every shard, nothing
        written) and the form that confirms it."""
        q = request.query_params
        action = _run_bulk_action(q)
        raised = await self._raised(request, principal, RUN_BULK_SCOPES[action])
        if isinstance(raised, Response):
            return raised
        state, filters = _bulk_filters(q, action)
        tally = BatchTally(action, True)
        options: dict[str, Any] = {"limit": RUN_BULK_SAMPLE, "dry_run": True, "batch_id": None}
        if action == "reset":  # (the point and time asked for: each sampled run's point shown)
            options["reset_to"] = _choice(q, "reset_to", RESET_POINTS) or RESET_POINTS[0]
            options["before"] = _time(q, "before")
        arguments = step_arguments({**filters, "state": state}, options)
        await self._bulk_step(raised, dict.fromkeys(self.source.shards), tally, arguments)
        if len(tally.unavailable) == len(self.source.shards):
            raise _no_shard("no shard could be counted; retry when one is up", tally.unavailable)
        return self._bulk_page(
            request,
            raised,
            "confirm",
            tally,
            q,
            expected=tally.total("matched"),
            reset_to=options.get("reset_to"),
            before=_param(q, "before") if action == "reset" else None,
        )

    async def bulk_runs(self, request: Request, principal: Principal, form: dict[str, str]) -> Response:
        """POST /workflows/bulk: the act, RUN_BULK_STEPS bounded steps on each shard (the
        API's and the CLI's, harvest.client.batch), then the summary so far and, while runs are
        left, a Continue form that goes on from where this stopped (the batch's cursor)."""
        action = form["action"]  # (read by _action: it chose the scope)
        filters_given = QueryParams(form.get("filters") or "")
        state, filters = _bulk_filters(filters_given, action)
        reason = _blank_none(form.get("reason"))
        if reason is None:
            raise InvalidArgument(
                f"reason: say why these runs are to be {_done(action)} (the audit log keeps it)"
            )
        signal: dict[str, Any] = {}
        if action == "signal":  # (the name and the payload, carried as given by Continue)
            signal["signal_name"], signal["payload"] = _signal_of(form, "signal_name")
        if action == "reset":  # (point, time and signals, carried by Continue: the cursor's scope)
            signal["reset_to"] = _choice(form, "reset_to", RESET_POINTS) or RESET_POINTS[0]
            signal["before"] = _time(form, "before")  # (as the list's times: checked here, UTC if no offset)
            if problem := reset_point_problem(signal["reset_to"], signal["before"]):
                raise InvalidArgument(f"before: {problem}")
            signal["signal_reapply"] = _choice(form, "signal_reapply", SIGNAL_REAPPLY) or SIGNAL_REAPPLY[0]
        limit = _int(form, "limit", 1, BATCH_STEP_MAX, BATCH_STEP)
        expected = _int(form, "expected", 0, 2**63 - 1, None)
        cursor = _param(form, "cursor")
        if cursor is not None:
            batch_id, positions = decode_cursor(cursor)
            if not set(positions) <= set(self.source.shards):
                raise InvalidArgument("cursor: it names a shard that is not this deployment's; start again")
        else:
            batch_id, positions = str(uuid.uuid4()), dict.fromkeys(self.source.shards)
        tally = BatchTally(action, False, batch_id)
        _absorb(tally, form.get("so_far"))
        arguments = step_arguments(
            {**filters, "state": state},
            {
                "reason": reason,
                "limit": limit,
                "dry_run": False,
                "operator_id": principal.actor,
                "batch_id": batch_id,
                **signal,
            },
        )
        left: dict[int, str | None] = {}
        for _ in range(RUN_BULK_STEPS):
            if not positions:
                break
            after = await self._bulk_step(principal, positions, tally, arguments)
            # A shard not reached keeps its place for Continue; it is not tried again in this request.
            left.update({s: p for s, p in after.items() if s in tally.unavailable})
            positions = {s: p for s, p in after.items() if s not in tally.unavailable}
        left.update(positions)
        before = signal.get("before")
        return self._bulk_page(
            request,
            principal,
            "progress" if left else "done",
            tally,
            filters_given,
            expected=expected,
            reason=reason,
            limit=limit,
            cursor=encode_cursor(batch_id, left) if left else None,
            signal_name=signal.get("signal_name"),
            payload_text=(form.get("payload") or "").strip(),
            reset_to=signal.get("reset_to"),
            before=before.isoformat() if before else None,
            signal_reapply=signal.get("signal_reapply"),
        )

    async def _bulk_step(
        self,
        principal: Principal,
        positions: dict[int, str | None],
        tally: BatchTally,
        arguments: dict[str, Any],
    ) -> dict[int, str | None]:
        """One step of ``tally``'s batch on each shard of ``positions`` (harvest.client.batch), as
        ``principal``: a dry run in a read-only transaction; a moved run acted on where it lives."""
        write = not arguments["dry_run"]

        async def on_shard(shard: int, fn: Callable[[Any], Awaitable[Any]]) -> Any:
            return await self.source.on_shard(shard, principal, fn, write=write)

        async def routed(execution_id: str, fn: Callable[[Any], Awaitable[Any]]) -> Any:
            return await self.source.routed(execution_id, principal, fn, write=True)

        return await astep_request(
            positions,
            tally,
            arguments,
            on_shard=on_shard,
            routed=routed,
            sharded=self.source.sharded,
            unreachable="could not be reached",
            detail=_one_line,
        )

    def _bulk_page(
        self,
        request: Request,
        principal: Principal,
        stage: str,
        tally: BatchTally,
        filters: Any,
        **context: Any,
    ) -> Response:
        summary = tally.as_dict()
        return self.render(
            request,
            "bulk_runs.html",
            principal=principal,
            refresh=None,
            stage=stage,
            action=tally.action,
            summary=summary,
            shown=summary.get("execution_ids", [])[:RUN_BULK_SAMPLE],
            points={str(p.get("execution_id")): p for p in summary.get("points") or []},
            filter_pairs=urllib.parse.parse_qsl(_filter_query(filters)),
            said=_filter_said(filters, tally.action),
            done_word=_done(tally.action),
            filter_query=_filter_query(filters),
            so_far=json.dumps({k: v for k, v in summary.items() if k not in ("execution_ids", "points")}),
            steps=RUN_BULK_STEPS,
            **{
                "reason": None,
                "limit": BATCH_STEP,
                "cursor": None,
                "signal_name": None,
                "reset_to": None,
                "before": None,
                "signal_reapply": None,
                **context,
            },
        )

    async def find_run(self, request: Request, principal: Principal) -> Response:
        """GET /workflows/find?id=: the run of what a customer gives (the workflow ID a run was
        started with, or an execution ID), as the Workflows page's *Go to a run* asks for it."""
        value = _param(request.query_params, "id")
        if value is None:
            raise InvalidArgument("id: give the workflow ID a run was started with, or an execution ID")
        return await self._go_to_run(request, principal, value, _param(request.query_params, "workflow_name"))

    async def _go_to_run(
        self, request: Request, principal: Principal, value: str, workflow_name: str | None = None
    ) -> Response:
        """A 303 to the page of the current run of workflow ID ``value`` (its RUNNING run, else
        its newest, over every shard: harvest.shard.fanout.current_run), else of ``value`` as an
        execution ID; a 404 that says where to look when it is neither."""
        try:
            found = await self.source.reads(principal).current_run(value, workflow_name)
            execution_id = str(found.value["id"])
        except InvalidArgument as exc:
            if workflow_name is not None:
                raise
            # Several workflows used the ID (an empty one is refused before): the form names one.
            raise InvalidArgument(f'{exc}: give its name in Go to a run\'s "of workflow" field') from None
        except NotFound:
            try:
                execution_id = str(uuid.UUID(value))
            except ValueError:
                of = f" of workflow {workflow_name}" if workflow_name else ""
                raise NotFound(
                    f"no run has workflow ID {value!r}{of},"
                    " and it is not an execution ID: check the ID, or find the run by a search"
                    " attribute on the Workflows page (Search attribute: order_id=8812)"
                ) from None
        base = request.scope.get("root_path", "").rstrip("/")
        return RedirectResponse(f"{base}/workflows/{execution_id}", status_code=303)

    async def export_history(self, request: Request, principal: Principal) -> Response:
        """GET /workflows/{id}/history/export: the run and every event of its history as one JSON
        document, downloaded: what `harvest history export` writes and the API's
        /history/export answers (the same pieces, streamed from a server-side cursor in one
        read-only snapshot), its payloads redacted to their size unless ``?payloads=full`` by a
        principal who may see them (``operate``, as the run's page), offloaded ones read back."""
        execution_id = _execution_id(request.path_params["execution_id"])
        full = request.query_params.get("payloads") == "full" and principal.shows_payloads("operate")
        sharded = self.source.sharded

        async def head(api: Any) -> dict[str, Any]:
            row = resident(await api.get_execution(execution_id), sharded)
            return await principal.resolved(api, row) if full else row

        shard, execution = await self.source.routed_to(execution_id, principal, head)

        async def produce(put: Callable[[str], Awaitable[None]]) -> None:
            async def read(api: Any) -> None:
                async for piece in aexport_chunks(
                    execution, history_events(principal, api, execution_id, full), full
                ):
                    await put(piece)

            await self.source.on_shard(shard, principal, read, write=False)

        response = streamed_json(produce)
        name = f"history-{execution_id}{'-full' if full else ''}.json"
        response.headers["Content-Disposition"] = f'attachment; filename="{name}"'
        return response

    async def execution(self, request: Request, principal: Principal) -> Response:
        value = request.path_params["execution_id"]
        try:
            execution_id = str(uuid.UUID(value))
        except ValueError:  # a workflow ID typed into the address: its current run
            return await self._go_to_run(
                request, principal, value, _param(request.query_params, "workflow_name")
            )
        refresh = self._refresh(request)
        full = request.query_params.get("payloads") == "full" and principal.shows_payloads("operate")
        sharded = self.source.sharded

        # One page of the history is read, never the whole (views.HistoryPage).
        after = _int(request.query_params, "history_from", 1, ROW_ID_MAX, None)
        before = _int(request.query_params, "history_before", 1, ROW_ID_MAX, None)
        if after is not None and before is not None:
            raise InvalidArgument("give history_from or history_before, not both")

        async def read(api: Any) -> tuple[Any, Any, Any, Any]:
            row = resident(await api.get_execution(execution_id), sharded)
            stack = await api.get_execution_stack(execution_id, STACK_SHOWN)
            history = views.HistoryPage(HISTORY_SHOWN, after=after, before=before, full=full)
            rows = await history.fetch(api, execution_id)
            if full:  # the run's, its stack's and the page's offloaded payloads read back: one
                # call, more past RESOLVE_BYTES (a full export's bound on what a read holds)
                row, stack, *rows = [
                    value
                    async for value in aresolved_in_batches(
                        _each([row, stack, *rows]),
                        lambda batch: principal.resolved(api, batch),
                        len(rows) + 2,
                    )
                ]
            history.add_rows(rows)
            return row, stack, history, await api.list_update_requests(execution_id)

        shard, (row, stack, history, requested) = await self.source.routed_to(execution_id, principal, read)
        # One level more than is drawn: a node at the last level says whether it has children.
        tree = await self.source.reads(principal).list_tree(
            execution_id, depth=TREE_DEPTH + 1, max_nodes=TREE_NODES
        )
        page = views.execution_page(row, stack, history, full=full, requested=requested)
        return self.render(
            request,
            "execution.html",
            principal=principal,
            refresh=refresh,
            full=full,
            tree=views.cut_tree(tree.value, TREE_DEPTH),
            tree_unavailable=tree.unavailable_shards,
            tree_shown=TREE_NODES,
            shard=shard,  # (its dead letters' pages: /dead-letters/{shard}/{id})
            **page,
        )

    async def signal(self, request: Request, principal: Principal, form: dict[str, str]) -> Response:
        execution_id = _execution_id(request.path_params["execution_id"])
        name, payload = _signal_of(form, "name")
        receipt = await self.source.routed(
            execution_id, principal, lambda api: api.signal_workflow(execution_id, name, payload), write=True
        )
        note = f"signal {name} sent (event {int(receipt)})"
        if receipt.not_awaited:  # (a misspelt name: it is buffered)
            note += f"; {receipt.not_awaited}"
        return self._back(request, f"/workflows/{execution_id}", note)

    async def cancel(self, request: Request, principal: Principal, form: dict[str, str]) -> Response:
        execution_id = _execution_id(request.path_params["execution_id"])
        first = await self.source.routed(
            execution_id,
            principal,
            lambda api: api.cancel_workflow(execution_id, _blank_none(form.get("reason"))),
            write=True,
        )
        return self._back(
            request,
            f"/workflows/{execution_id}",
            "cancel requested" + ("" if first else " (already requested)"),
        )

    async def terminate(self, request: Request, principal: Principal, form: dict[str, str]) -> Response:
        execution_id = _execution_id(request.path_params["execution_id"])
        await self.source.routed(
            execution_id,
            principal,
            lambda api: api.terminate_workflow(execution_id, _blank_none(form.get("reason"))),
            write=True,
        )
        return self._back(request, f"/workflows/{execution_id}", "terminated")

    async def reset(self, request: Request, principal: Principal, form: dict[str, str]) -> Response:
        execution_id = _execution_id(request.path_params["execution_id"])
        to_event = _int(form, "to_event", 1, 2**31 - 1, None)
        if to_event is None:
            raise InvalidArgument("give the event id to reset to (to_event)")
        reason = _blank_none(form.get("reason"))
        if reason is None:
            raise InvalidArgument("a reset needs a reason")
        reapply = _choice(form, "signal_reapply", ("drop", "buffer")) or "drop"
        dry_run = form.get("dry_run") is not None
        plan = await self.source.routed(
            execution_id,
            principal,
            lambda api: api.reset_workflow(execution_id, to_event, reason, principal.actor, reapply, dry_run),
            write=True,  # a dry run writes nothing, but it locks the run as the real one does
        )
        if not dry_run and plan.get("new_execution_id"):
            return self._back(request, f"/workflows/{plan['new_execution_id']}", f"reset from {execution_id}")
        return self.render(
            request,
            "result.html",
            principal=principal,
            refresh=None,
            title="Reset dry run" if dry_run else "Reset",
            back=f"/workflows/{execution_id}",
            result=plan,
        )

    async def pause(self, request: Request, principal: Principal, form: dict[str, str]) -> Response:
        """Pause a running run (docs/lifecycle.md): no task of it is claimed until the resume."""
        execution_id = _execution_id(request.path_params["execution_id"])
        reason = _blank_none(form.get("reason"))
        changed = await self.source.routed(
            execution_id,
            principal,
            lambda api: api.pause_workflow(execution_id, reason, principal.actor),
            write=True,
        )
        return self._back(request, f"/workflows/{execution_id}", "paused" if changed else "already paused")

    async def resume(self, request: Request, principal: Principal, form: dict[str, str]) -> Response:
        execution_id = _execution_id(request.path_params["execution_id"])
        reason = _blank_none(form.get("reason"))
        changed = await self.source.routed(
            execution_id,
            principal,
            lambda api: api.resume_workflow(execution_id, reason, principal.actor),
            write=True,
        )
        said = "resumed" if changed else "it was not paused"
        return self._back(request, f"/workflows/{execution_id}", said)

    # -- schedules ---------------------------------------------------------------------------------
    async def schedules(self, request: Request, principal: Principal) -> Response:
        q = request.query_params
        refresh = self._refresh(request)
        kind = _choice(q, "kind", ("workflow", "dag"))
        paused = _choice(q, "paused", ("true", "false"))
        # A page by name (a schedule a tenant was 100,000 rows a view), the next by cursor.
        limit = _int(q, "limit", 1, MAX_PAGE, DEFAULT_PAGE)
        page = await self.source.reads(principal).list_schedules(
            kind, limit, _param(q, "cursor"), None if paused is None else paused == "true"
        )
        if page.status == UNAVAILABLE:
            raise _no_shard("no shard could be read; retry when one is up", page.reasons)
        rows = [{**row, "when": describe_row(row), "upcoming": views.upcoming(row, 1)} for row in page.value]
        return self.render(
            request,
            "schedules.html",
            principal=principal,
            refresh=refresh,
            rows=rows,
            next_cursor=page.next_cursor,
            kind=kind,
            paused=paused,
            unavailable=page.unavailable_shards,
            overlaps=OVERLAP_POLICIES,
        )

    def _schedule_shard(self, request: Request) -> tuple[int, str]:
        shard, name = request.path_params["shard"], request.path_params["name"]
        if shard not in self.source.shards:
            raise NotFound(f"shard {shard} is not a shard of this deployment")
        return shard, name

    async def schedule(self, request: Request, principal: Principal) -> Response:
        shard, name = self._schedule_shard(request)
        limit = _int(request.query_params, "limit", 1, 1000, 20)
        row = await self.source.on_shard(
            shard, principal, lambda api: api.get_schedule(name, limit), write=False
        )
        # The input every run it starts gets: a payload, shown in full to operate and above only.
        full = principal.shows_payloads("operate")
        edit = _schedule_values(row, full)
        # What the form was drawn with, sent back with it: an edit saves what the user changed,
        # not what changed since (a deploy's new spec, another operator's edit) put back.
        edit["drawn"] = json.dumps(edit, ensure_ascii=False)
        row = {**row, "input": views.payload_shown(row.get("input"), full)}
        return self.render(
            request,
            "schedule.html",
            principal=principal,
            refresh=self._refresh(request),
            s=row,
            shard=shard,
            when=describe_row(row),
            upcoming=views.upcoming(row, 5),
            overlaps=OVERLAP_POLICIES,
            limit=limit,
            edit=edit,
        )

    async def schedule_action(self, request: Request, principal: Principal, form: dict[str, str]) -> Response:
        """Pause (with a note), resume or trigger (now, under the schedule's overlap policy or
        the one chosen) the schedule on its shard, as `harvest schedule pause|resume|trigger`;
        backfill and delete each through a confirmation first."""
        shard, name = self._schedule_shard(request)
        verb = request.path_params["verb"]
        actor = principal.actor
        if verb == "backfill":
            return await self._backfill_schedule(request, principal, form, shard, name)
        if verb == "delete":
            return await self._delete_schedule(request, principal, form, shard, name)
        if verb == "edit":
            return await self._edit_schedule(request, principal, form, shard, name)
        if verb == "pause":
            note = _blank_none(form.get("note"))
            call: Callable[[Any], Awaitable[Any]] = lambda api: api.pause_schedule(name, note, actor)  # noqa: E731
        elif verb == "resume":
            call = lambda api: api.resume_schedule(name, actor)  # noqa: E731
        elif verb == "trigger":
            overlap = _choice(form, "overlap", OVERLAP_POLICIES)
            call = lambda api: api.trigger_schedule(name, overlap, actor)  # noqa: E731
        else:
            raise NotFound(f"no schedule action {verb!r}: use pause, resume, trigger, backfill, edit, delete")
        answer = await self.source.on_shard(shard, principal, call, write=True)
        if verb == "trigger":
            said = f"triggered: slot {views.when(answer.get('slot_at'))} {answer.get('status')}"
            if answer.get("reason"):
                said += f" ({answer['reason']})"
            if answer.get("duplicate"):
                said += ", a firing that second already existed"
        else:
            said = f"schedule {'paused' if answer.get('paused') else 'running'}"
        return self._back(request, f"/schedules/{shard}/{views.segment(name)}", said)

    async def create_schedule(self, request: Request, principal: Principal, form: dict[str, str]) -> Response:
        """`harvest schedule create-workflow` (POST /admin/schedules/workflow): the New schedule
        form's workflow schedule, checked as the API checks its body (schedule_spec), created on
        its home shard (the router's, as the API and a declaration place it). Bad input is a 400
        naming the field, the form drawn again with what was sent."""
        try:
            # With no queue, its runs go where the served App declares the workflow, as the API's.
            kwargs = schedule_spec.create_arguments(
                _schedule_body(form, create=True), lambda wf, given: app_queue(self.app, wf, given)
            )
            name, workflow_name = kwargs.pop("name"), kwargs.pop("workflow_name")
            # The arguments the served App's workflow takes, as the API's create checks them.
            schedule_spec.check_app_input(
                self.app,
                name,
                kwargs["kind"],
                workflow_name,
                kwargs.get("input"),
                schedule_spec.arguments_field(form),
            )
            shard = self.source.router.schedule_home(name)
            await self.source.on_shard(
                shard,
                principal,
                lambda api: api.create_schedule(name, workflow_name, operator_id=principal.actor, **kwargs),
                write=True,
            )
        except InvalidArgument as exc:
            return self._schedule_refused(request, principal, exc, form)
        except (UnknownWorkflow, ScheduleAlreadyExists, NotFound) as exc:
            return self._schedule_refused(request, principal, _dashboard_refusal(exc, name), form)
        return self._back(
            request, f"/schedules/{shard}/{views.segment(name)}", f"created schedule {name} on shard {shard}"
        )

    async def _edit_schedule(
        self, request: Request, principal: Principal, form: dict[str, str], shard: int, name: str
    ) -> Response:
        """`harvest schedule update` (PATCH /admin/schedules/{name}): the Edit form's fields
        checked as the API checks its body, and of them only those that differ from the
        schedule's sent (the form is drawn filled with all of them). A workflow schedule only:
        a DAG's is its DAG's. Bad input is a 400 naming the field, the form drawn again."""

        async def edit(api: Any) -> dict[str, Any]:
            row = await api.get_schedule(name, 1)
            if row.get("kind") != "workflow":
                raise InvalidArgument(f"schedule {name!r} is a DAG's: edit it with its DAG (harvest dag)")
            # (a queue emptied: the served App's, as a create without one takes it)
            changes = await schedule_spec.cleared_queue(api, name, _edit_changes(row, form), self.app, row)
            changed = _changed(row, changes)
            # (as the API's PATCH: the arguments a served App's workflow takes, after the change)
            schedule_spec.check_app_changes(self.app, name, row, changed, schedule_spec.arguments_field(form))
            return changed

        async def update(api: Any) -> dict[str, Any]:
            changes = await edit(api)
            if changes:
                await api.update_schedule(
                    name, changes, principal.actor, allow_unregistered=bool(form.get("allow_unregistered"))
                )
            return changes

        try:
            changes = await self.source.on_shard(shard, principal, update, write=True)
        except InvalidArgument as exc:
            return self._schedule_refused(request, principal, exc, form, shard=shard, name=name)
        except (UnknownWorkflow, ScheduleAlreadyExists, NotFound) as exc:
            return self._schedule_refused(
                request, principal, _dashboard_refusal(exc, name), form, shard=shard, name=name
            )
        said = f"updated: {', '.join(sorted(changes))}" if changes else "nothing changed"
        return self._back(request, f"/schedules/{shard}/{views.segment(name)}", said)

    def _schedule_refused(
        self,
        request: Request,
        principal: Principal,
        exc: HarvestError,
        form: dict[str, str],
        *,
        shard: int | None = None,
        name: str | None = None,
    ) -> Response:
        """The New schedule or Edit form's 400: what was wrong (the field first) over the form,
        filled with what was sent; a workflow no worker registered is one too, saying to tick
        the form's override (in the dashboard's words: _dashboard_refusal). Another refusal is its page."""
        if isinstance(exc, PayloadTooLarge) or not isinstance(exc, (InvalidArgument, UnknownWorkflow)):
            raise exc  # (PayloadTooLarge: an InvalidArgument whose answer is its 413)
        return self.render(
            request,
            "schedule_form.html",
            400,
            principal=principal,
            status=400,
            message=_one_line(exc),
            create=name is None,
            schedule_name=name,
            shard=shard,
            v=form,
            overlaps=OVERLAP_POLICIES,
        )

    async def _backfill_schedule(
        self, request: Request, principal: Principal, form: dict[str, str], shard: int, name: str
    ) -> Response:
        """`harvest schedule backfill`: the slots of [from, to] (``backfill_slots``, at most
        BACKFILL_MAX_SLOTS) fired by ``backfill_schedule`` under the overlap chosen (default
        buffer_all, as the CLI's). Without ``confirm``, the range's slots are counted from the
        schedule (nothing written) and the page that confirms them is drawn."""
        start, end = _time(form, "from"), _time(form, "to")
        if start is None or end is None:
            field = "from" if start is None else "to"
            raise InvalidArgument(f"{field}: give the range's first and last slot time (2026-05-01T00:00Z)")
        if end < start:
            raise InvalidArgument(
                f"to={views.when(end)} is before from={views.when(start)}: give a range that ends after it"
            )
        overlap = _choice(form, "overlap", OVERLAP_POLICIES) or "buffer_all"

        def slots_of(row: dict[str, Any], start: datetime = start, end: datetime = end) -> list[datetime]:
            try:
                return backfill_slots(row, start, end)
            except InvalidArgument as exc:  # more slots than the limit (or years past 9999)
                raise InvalidArgument(f"to: {_one_line(exc)}") from None

        if "confirm" not in form:
            return await self._schedule_confirm(
                request,
                principal,
                shard,
                name,
                "backfill",
                lambda row: {
                    "start": start,
                    "end": end,
                    "overlap": overlap,
                    "slots": slots_of(row),
                    "limit": BACKFILL_MAX_SLOTS,
                },
            )

        def backfill(api: Any) -> Awaitable[dict[str, Any]]:
            return abackfill(api, name, start, end, overlap, principal.actor, slots_of=slots_of)

        counts = await self.source.on_shard(shard, principal, backfill, write=True)
        fired = counts["slots"]
        said = f"backfilled {fired} slot{'' if fired == 1 else 's'} under {overlap}: " + ", ".join(
            # backfill_schedule's counts, in the order a firing goes (jsonb keeps its own)
            f"{counts.get(outcome, 0)} {outcome}"
            for outcome in ("started", "buffered", "skipped", "failed", "duplicate")
        )
        return self._back(request, f"/schedules/{shard}/{views.segment(name)}", said)

    async def _schedule_confirm(
        self,
        request: Request,
        principal: Principal,
        shard: int,
        name: str,
        action: str,
        context: Callable[[dict[str, Any]], dict[str, Any]],
    ) -> Response:
        """The confirmation of ``action`` (backfill, delete) of schedule ``name`` on ``shard``:
        the schedule read (a 404 when it is not there; nothing written), ``context(row)`` drawn."""
        row = await self.source.on_shard(shard, principal, lambda api: api.get_schedule(name, 1), write=False)
        return self.render(
            request,
            "schedule_confirm.html",
            principal=principal,
            action=action,
            s=row,
            when=describe_row(row),
            shard=shard,
            **context(row),
        )

    async def _delete_schedule(
        self, request: Request, principal: Principal, form: dict[str, str], shard: int, name: str
    ) -> Response:
        """`harvest schedule delete`: the schedule and its firing history on this shard (its runs
        go on). Without ``confirm`` (the schedule's name), the page that names it and confirms."""
        confirm = form.get("confirm")
        if confirm is None:
            return await self._schedule_confirm(request, principal, shard, name, "delete", lambda row: {})
        if confirm != name:
            raise InvalidArgument(
                f"confirm={confirm!r} does not name schedule {name!r}: confirm from its page"
            )
        deleted = await self.source.on_shard(
            shard, principal, lambda api: api.delete_schedule(name, principal.actor), write=True
        )
        if not deleted:
            raise NotFound(f"schedule {name!r} does not exist on shard {shard}")
        return self._back(request, "/schedules", f"deleted schedule {name} on shard {shard}")

    # -- DAGs ----------------------------------------------------------------------------------------
    async def dags(self, request: Request, principal: Principal) -> Response:
        q = request.query_params
        refresh = self._refresh(request)
        paused = _choice(q, "paused", ("true", "false"))
        fan = await fan_out_async(
            self.source.apis(principal), lambda api: api.list_dags(), timeout=self.source.timeout
        )
        if not fan.results and fan.unavailable_shards:
            raise _no_shard("no shard could be read; retry when one is up", fan.reasons)
        rows = views.merge_dags(fan.results)
        if paused is not None:
            rows = [r for r in rows if r["paused"] == (paused == "true")]
        return self.render(
            request,
            "dags.html",
            principal=principal,
            refresh=refresh,
            rows=rows,
            paused=paused,
            unavailable=fan.unavailable_shards,
        )

    async def dag(self, request: Request, principal: Principal) -> Response:
        name = request.path_params["name"]
        limit = _int(request.query_params, "limit", 1, MAX_PAGE, DEFAULT_PAGE)
        status = _choice(request.query_params, "status", tuple(s.lower() for s in EXECUTION_STATUSES))

        async def one(api: Any) -> Any:
            return next((d for d in await api.list_dags() if d["dag_name"] == name), None)

        # The runs page by cursor over every shard, as the API's GET /dags/{name}/runs and the
        # dead letters' page do: one page, and the link to the next.
        fan, page = await asyncio.gather(
            fan_out_async(self.source.apis(principal), one, timeout=self.source.timeout),
            self.source.reads(principal).list_dag_runs(
                name, limit, status, _param(request.query_params, "cursor")
            ),
        )
        found = {s: r for s, r in fan.results.items() if r is not None}
        if not found:
            if fan.unavailable_shards:
                raise _no_shard("no shard could be read; retry when one is up", fan.reasons)
            raise NotFound(f"no DAG {name!r} is registered on any shard")
        dag = views.merge_dags({s: [r] for s, r in found.items()})[0]
        return self.render(
            request,
            "dag.html",
            principal=principal,
            refresh=self._refresh(request),
            dag=dag,
            runs=page.value,
            next_cursor=page.next_cursor,
            limit=limit,
            status=status,
            statuses=EXECUTION_STATUSES,
            unavailable=sorted(set(fan.unavailable_shards) | set(page.unavailable_shards)),
        )

    async def dag_run(self, request: Request, principal: Principal) -> Response:
        name = request.path_params["name"]
        execution_id = _execution_id(request.path_params["execution_id"])
        run = await self.source.routed(execution_id, principal, lambda api: api.get_dag_run(execution_id))
        if run["dag_name"] != name:
            raise NotFound(f"run {execution_id} is a run of DAG {run['dag_name']!r}, not of {name!r}")
        # The conf is the run's input: in full to operate and above only, as on the run's page.
        run = {**run, "conf": views.payload_shown(run.get("conf"), principal.shows_payloads("operate"))}
        return self.render(
            request,
            "dag_run.html",
            principal=principal,
            refresh=self._refresh(request),
            run=run,
            graph=views.dag_graph(run["tasks"]),
        )

    async def trigger_dag(self, request: Request, principal: Principal, form: dict[str, str]) -> Response:
        """A run of the DAG with the conf typed (a JSON object; empty: {}), as `harvest dag
        trigger`. One database: there; shards: the shard an unpinned start of the DAG's workflow
        with that workflow id (or a fresh one) goes to, which must have the DAG registered."""
        name = request.path_params["name"]
        text = (form.get("conf") or "").strip()
        try:
            conf = parse_json(text) if text else {}
        except ValueError as exc:
            raise InvalidArgument(f"the conf is not valid JSON ({exc})") from None
        if not isinstance(conf, dict):
            raise InvalidArgument("the conf must be a JSON object ({} for none)")
        workflow_id = _blank_none(form.get("workflow_id"))
        shard = self.source.shards[0]
        if self.source.sharded:
            shard, workflow_id = await self._dag_home(name, workflow_id, principal)
        actor = principal.actor
        row = await self.source.on_shard(
            shard, principal, lambda api: api.trigger_dag(name, conf, workflow_id, actor), write=True
        )
        said = "triggered" if row["started_fresh"] else f"a run of workflow id {row['workflow_id']} exists"
        return self._back(request, f"/dags/{views.segment(name)}/runs/{row['execution_id']}", said)

    async def _dag_home(self, name: str, workflow_id: str | None, principal: Principal) -> tuple[int, str]:
        """Where a trigger of DAG ``name`` goes on several shards: with a workflow id, the shard
        an unpinned start of that id goes to (so a later start of it finds the run); without
        one, a writable shard that registered the DAG, with an id minted to route there."""
        router = self.source.router
        if workflow_id is not None:
            return router.place(name, workflow_id), workflow_id
        fan = await fan_out_async(
            self.source.apis(principal), lambda api: api.list_dags(), timeout=self.source.timeout
        )
        registered = [s for s, rows in fan.results.items() if any(r["dag_name"] == name for r in rows)]
        candidates = [s for s in registered if s in router.writable]
        if not candidates:
            if registered:
                raise InvalidArgument(f"no shard that registered DAG {name!r} is accepting new workflows")
            raise NotFound(f"no DAG {name!r} is registered on a shard that answered")
        shard = random.choice(candidates)
        return shard, router.mint_workflow_id(name, shard)

    async def pause_dag(self, request: Request, principal: Principal, form: dict[str, str]) -> Response:
        """Pause (or unpause) the DAG on every shard that registered it (each audits its own)."""
        name = request.path_params["name"]
        pausing = request.url.path.endswith("/pause")

        async def one(api: Any) -> Any:
            try:
                if pausing:
                    return await api.pause_dag(name, principal.actor)
                return await api.unpause_dag(name, principal.actor)
            except NotFound:
                return None

        done = await self._each_shard_write(principal, one, "nothing was changed")
        changed = {s: c for s, c in done.results.items() if c is not None}
        if not changed and not done.unavailable_shards:
            if done.refused:  # the shards that may have it said no
                done.raise_none_done("nothing was changed")
            raise NotFound(f"no DAG {name!r} is registered on any shard")
        verb = "paused" if pausing else "unpaused"
        said = verb if any(changed.values()) else f"{verb} already (nothing changed)"
        if done.refused:
            said += f"; {done.refusals_said()}"
        if done.unavailable_shards:
            shards = ", ".join(map(str, done.unavailable_shards))
            said += f"; shard(s) {shards} could not be reached: do it again when they are up"
        return self._back(request, f"/dags/{views.segment(name)}", said)

    async def _each_shard_write(
        self, principal: Principal, one: Callable[[Any], Awaitable[Any]], undone: str
    ) -> ShardWrites:
        """``one(api)`` on every shard, each to its own outcome, as the management API's writes
        (Call.each_shard_write): one shard's refusal is named beside what the others did, not
        the whole answer; nothing done anywhere: the first refusal naming every shard's (an
        error page), else unavailable."""
        apis = {s: _writer(self.source, s, principal) for s in self.source.shards}
        fan = await fan_out_async(apis, refusals_apart(one, self.source.sharded), timeout=self.source.timeout)
        done = ShardWrites.of(fan)
        if not done.results:
            done.raise_none_done(undone)
        return done

    async def retry_dag_run(self, request: Request, principal: Principal, form: dict[str, str]) -> Response:
        """Retry a failed run from its failed tasks (a new run; its successful tasks carried over)."""
        name = request.path_params["name"]
        execution_id = _execution_id(request.path_params["execution_id"])
        row = await self.source.routed(
            execution_id, principal, lambda api: api.retry_dag_run(execution_id, principal.actor), write=True
        )
        said = "retried: a new run" if row["started_fresh"] else "already retried: its newer run"
        return self._back(request, f"/dags/{views.segment(name)}/runs/{row['execution_id']}", said)

    # -- dead letters --------------------------------------------------------------------------------
    async def dead_letters(self, request: Request, principal: Principal) -> Response:
        q = request.query_params
        refresh = self._refresh(request)
        limit = _int(q, "limit", 1, MAX_PAGE, DEFAULT_PAGE)
        activity, workflow_name = _param(q, "activity_name"), _param(q, "workflow_name")
        reads = self.source.reads(principal)
        page, groups = await asyncio.gather(
            reads.list_dead_letters(limit, activity, workflow_name, _param(q, "cursor")),
            reads.count_dead_letters("all"),
        )
        unavailable = _unavailable(page, groups)
        return self.render(
            request,
            "dead_letters.html",
            principal=principal,
            refresh=refresh,
            rows=page.value,
            next_cursor=page.next_cursor,
            groups=groups.value,
            limit=limit,
            unavailable=unavailable,
            shards=self.source.shards,
        )

    async def dead_letter(self, request: Request, principal: Principal) -> Response:
        """One dead letter (GET /dead-letters/{id}'s read, on the shard the address names): its run,
        activity, attempts, failure, and input; payloads as on a run's page (their size; in
        full, offloaded ones read back on its shard, for operate and ``?payloads=full``)."""
        shard, id_ = self._dead_letter(request)
        full = request.query_params.get("payloads") == "full" and principal.shows_payloads("operate")

        async def read(api: Any) -> Any:
            row = await api.get_dead_letter(id_)
            return await principal.resolved(api, row) if full else row

        row = await self.source.on_shard(shard, principal, read, write=False)
        return self.render(
            request,
            "dead_letter.html",
            principal=principal,
            refresh=self._refresh(request),
            d=views.dead_letter_page(row, full),
            shard=shard,
            full=full,
        )

    async def replay(self, request: Request, principal: Principal, form: dict[str, str]) -> Response:
        shard, id_ = self._dead_letter(request)
        task_id = await self.source.on_shard(
            shard, principal, lambda api: api.replay_dead_letter(id_), write=True
        )
        return self._back(request, "/dead-letters", f"dead letter {shard}:{id_} replayed (task {task_id})")

    async def discard(self, request: Request, principal: Principal, form: dict[str, str]) -> Response:
        shard, id_ = self._dead_letter(request)
        await self.source.on_shard(shard, principal, lambda api: api.discard_dead_letter(id_), write=True)
        return self._back(request, "/dead-letters", f"dead letter {shard}:{id_} discarded")

    def _dead_letter(self, request: Request) -> tuple[int, int]:
        shard, id_ = request.path_params["shard"], request.path_params["id"]
        if shard not in self.source.shards:
            raise NotFound(f"shard {shard} is not a shard of this deployment")
        if id_ > ROW_ID_MAX:  # (the route takes any digits; the database's ids are bigints)
            raise NotFound(f"no dead letter {shard}:{id_}")
        return shard, id_

    async def bulk(self, request: Request, principal: Principal, form: dict[str, str]) -> Response:
        action = form["action"]  # (read by _action: it chose the scope)
        dry_run = form.get("dry_run") is not None
        args = {
            "activity_name": _param(form, "activity_name"),
            "workflow_name": _param(form, "workflow_name"),
            "failed_after": _time(form, "failed_after"),
            "failed_before": _time(form, "failed_before"),
            "limit": _int(form, "limit", 1, 1000, 100),
        }
        if not any(v for k, v in args.items() if k != "limit"):
            raise InvalidArgument(
                "a bulk action needs at least one filter: activity, workflow, failed after or failed before"
            )

        async def one(api: Any) -> Any:
            return await api.bulk_dead_letters(action, **args, dry_run=dry_run, operator=principal.actor)

        # Each shard acts on its own dead letters (ids are per shard); a shard that cannot be
        # reached is named, and acting again when it is up finishes the job.
        apis = {s: _writer(self.source, s, principal) for s in self.source.shards}
        fan = await fan_out_async(apis, one, timeout=self.source.timeout if dry_run else None)
        return self.render(
            request,
            "bulk.html",
            principal=principal,
            refresh=None,
            action=action,
            dry_run=dry_run,
            results=fan.results,
            unavailable=fan.unavailable_shards,
            form=form,
        )

    # -- held-back starts ------------------------------------------------------------------------
    async def start_gates(self, request: Request, principal: Principal) -> Response:
        """The starts a throttle, a debounce or a batch holds back, every shard's (as GET
        /start-gates/pending and `harvest start-gate list`), with a Discard for each (through
        a confirmation) and the discard by filter (a dry run first) to admin. No
        start's input is read: the list has none."""
        q = request.query_params
        workflow_name = _param(q, "workflow_name")
        kind = _choice(q, "kind", START_GATE_KINDS)
        limit = _int(q, "limit", 1, MAX_PAGE, DEFAULT_PAGE)
        # A page oldest first over every shard, the next by cursor (a throttle's backlog after an
        # incident was every held-back start a view), as GET /start-gates/pending.
        page = await self.source.reads(principal).list_pending_starts(
            workflow_name, kind, limit, _param(q, "cursor")
        )
        return self.render(
            request,
            "start_gates.html",
            principal=principal,
            refresh=self._refresh(request),
            rows=page.value,
            next_cursor=page.next_cursor,
            limit=limit,
            kind=kind,
            kinds=START_GATE_KINDS,
            unavailable=_unavailable(page),
        )

    async def discard_start(self, request: Request, principal: Principal, form: dict[str, str]) -> Response:
        """Discard one held-back start on its shard (`harvest start-gate discard`): without
        ``confirm``, the page that shows it and confirms (nothing written)."""
        shard, id_ = request.path_params["shard"], request.path_params["id"]
        if shard not in self.source.shards:
            raise NotFound(f"shard {shard} is not a shard of this deployment")
        gone = (
            f"no held-back start {shard}:{id_}: released (its run is found by its workflow ID) or discarded"
        )
        if id_ > ROW_ID_MAX:
            raise NotFound(gone)
        if form.get("confirm") != "yes":
            found = await self.source.on_shard(
                shard, principal, lambda api: api.list_pending_starts(limit=1, id=id_), write=False
            )
            row = next(iter(found), None)
            if row is None:
                raise NotFound(gone)
            return self.render(
                request, "start_gate_confirm.html", principal=principal, p={**row, "shard_id": shard}
            )
        reason = _blank_none(form.get("reason"))
        done = await self.source.on_shard(
            shard, principal, lambda api: api.discard_pending_start(id_, principal.actor, reason), write=True
        )
        said = (
            f"held-back start {shard}:{id_} discarded (workflow ID {done.get('workflow_id')}, "
            f"{done.get('starts')} start(s), {done.get('payloads_erased')} offloaded payload(s) erased)"
        )
        return self._back(request, "/start-gates", said)

    async def discard_starts(self, request: Request, principal: Principal, form: dict[str, str]) -> Response:
        """The held-back starts a filter selects discarded on every shard, at most the limit a
        shard (`harvest start-gate discard-many`); a dry run counts them and offers the discard."""
        dry_run = form.get("dry_run") is not None
        selected = {
            "workflow_name": _param(form, "workflow_name"),
            "gate_key": _param(form, "gate_key"),
            "created_after": _time(form, "created_after"),
            "created_before": _time(form, "created_before"),
        }
        if all(v is None for v in selected.values()):
            raise InvalidArgument(
                "workflow_name: a discard by filter needs a workflow, a gate key, created after or "
                "created before (a kind alone would select every held-back start)"
            )
        kind = _choice(form, "kind", START_GATE_KINDS)
        limit = _int(form, "limit", 1, 1000, 100)
        reason = _blank_none(form.get("reason"))

        async def one(api: Any) -> Any:
            return await api.discard_pending_starts(
                **selected,
                kind=kind,
                limit=limit,
                dry_run=dry_run,
                operator_id=principal.actor,
                reason=reason,
            )

        done = await self._each_shard_write(principal, one, "no held-back start was discarded")
        return self.render(
            request,
            "start_gate_bulk.html",
            principal=principal,
            dry_run=dry_run,
            results=dict(sorted(done.results.items())),
            matched=sum(int(r.get("matched") or 0) for r in done.results.values()),
            refused=done.refusals_said(),
            unavailable=done.unavailable_shards,
            form={k: v for k, v in form.items() if k not in ("dry_run",)},
        )

    # -- workers -------------------------------------------------------------------------------------
    async def workers(self, request: Request, principal: Principal) -> Response:
        q = request.query_params
        refresh = self._refresh(request)
        status = _choice(q, "status", WORKER_STATUSES)
        stale = _choice(q, "stale", ("true", "false"))
        shard = _int(q, "shard", 0, MAX_SHARD, None)
        if shard is not None and shard not in self.source.shards:
            shards = ", ".join(map(str, self.source.shards))
            raise InvalidArgument(f"shard={shard} is not a shard of this deployment (the shards: {shards})")
        page = _int(q, "page", 1, 1_000_000, 1)
        limit = _int(q, "limit", 1, MAX_PAGE, DEFAULT_PAGE)
        reads = self.source.reads(principal)
        # The rows up to this page's only (a churning fleet leaves a row a pod until retention
        # prunes it), and how many match. Not stale: the stale ones sort first in each status,
        # so the read reaches past them, and the match is the total less them.
        start = (page - 1) * limit
        if stale == "false":
            stale_ones = (await reads.list_workers(None, status, "stale", shard, 1)).total or 0
        else:
            stale_ones = 0
        read = min(start + limit + 1 + stale_ones, WORKER_LIMIT_MAX)
        health, listed = await asyncio.gather(
            reads.get_worker_health(),
            reads.list_workers(None, status, "stale" if stale == "true" else None, shard, read),
        )
        rows = listed.value
        matched = listed.total or 0
        if stale == "false":
            rows = [r for r in rows if r["health"] != "stale"]
            matched -= stale_ones
        return self.render(
            request,
            "workers.html",
            principal=principal,
            refresh=refresh,
            banner=views.fleet_banner(health.value, health.status),
            rows=rows[start : start + limit],
            matched=matched,
            page=page,
            limit=limit,
            has_next=start + limit < min(matched, len(rows)),
            status=status,
            stale=stale,
            shard=shard,
            statuses=WORKER_STATUSES,
            unavailable=_missing(health, listed),
        )

    async def worker(self, request: Request, principal: Principal) -> Response:
        worker_id = request.path_params["worker_id"]

        async def one(api: Any) -> Any:
            try:
                return await api.get_worker(worker_id)
            except NotFound:
                return None

        fan = await fan_out_async(self.source.apis(principal), one, timeout=self.source.timeout)
        rows = [{**row, "shard_id": s} for s, row in fan.results.items() if row is not None]
        if not rows and not fan.unavailable_shards:
            raise NotFound(f"no worker {worker_id!r} on any shard")
        return self.render(
            request,
            "worker.html",
            principal=principal,
            refresh=self._refresh(request),
            worker_id=worker_id,
            rows=rows,
            unavailable=fan.unavailable_shards,
        )

    async def drain(self, request: Request, principal: Principal, form: dict[str, str]) -> Response:
        """Drain the worker's row on every shard that has one (each shard audits its own drain),
        as `harvest worker drain`; a shard that cannot be reached or refuses is named in the
        notice beside the others' outcomes: drain again there later."""
        worker_id = request.path_params["worker_id"]
        deadline = _time(form, "deadline")

        async def one(api: Any) -> Any:
            return await api.drain_worker(worker_id, deadline, principal.actor)

        done = await self._each_shard_write(principal, one, "nothing was drained")
        outcomes = {s: r["outcome"] for s, r in done.results.items() if r["outcome"] != "not_found"}
        if not outcomes and not done.unavailable_shards:
            if done.refused:  # the shards that may have it said no
                done.raise_none_done("nothing was drained")
            raise NotFound(f"no worker {worker_id!r} on any shard")
        said = ", ".join(f"shard {s}: {o}" for s, o in sorted(outcomes.items()))
        if done.refused:
            said += f"; {done.refusals_said()}: drain again there once it is fixed"
        if done.unavailable_shards:
            shards = ", ".join(map(str, done.unavailable_shards))
            said += f"; shard(s) {shards} could not be reached and were not drained: drain again when up"
        return self._back(request, f"/workers/{views.segment(worker_id)}", f"drain: {said}")

    # -- concurrency and usage --------------------------------------------------------------------
    async def concurrency(self, request: Request, principal: Principal) -> Response:
        q = request.query_params
        refresh = self._refresh(request)
        window = _choice(q, "window", tuple(WINDOWS)) or "24h"
        group_by = _param(q, "group_by") or "workflow_name"
        if group_by != "workflow_name" and not (
            group_by.startswith(GROUP_BY_PREFIX)
            and is_search_attr_key(group_by.removeprefix(GROUP_BY_PREFIX))
        ):
            raise InvalidArgument(f"group_by={group_by!r}: use workflow_name or search_attr:<key>")
        now = datetime.now(UTC)
        # A page of keys in key order (100,000 tenants were 100,000 rows a view), the next by cursor.
        limit = _int(q, "limit", 1, MAX_PAGE, DEFAULT_PAGE)
        reads = self.source.reads(principal)
        keys, usage = await asyncio.gather(
            reads.list_concurrency_keys(_param(q, "key"), limit, _param(q, "cursor")),
            reads.count_usage(now - WINDOWS[window], now, group_by),
        )
        return self.render(
            request,
            "concurrency.html",
            principal=principal,
            refresh=refresh,
            keys=keys.value,
            next_cursor=keys.next_cursor,
            # The report is whole by the spec (no long-tail roll-up), one group a tenant with
            # group_by=search_attr:tenant: the page draws the first USAGE_SHOWN by name.
            usage=usage.value[:USAGE_SHOWN],
            usage_total=len(usage.value),
            window=window,
            windows=tuple(WINDOWS),
            group_by=group_by,
            unavailable=_missing(keys, usage),
        )

    # -- shards ----------------------------------------------------------------------------------
    async def shards(self, request: Request, principal: Principal) -> Response:
        from starlette.concurrency import run_in_threadpool

        report = await run_in_threadpool(
            shard_health,
            self.source.router,
            self.source.urls(),
            connect_timeout=max(1, int(self.source.timeout)),
        )
        return self.render(
            request,
            "shards.html",
            principal=principal,
            refresh=self._refresh(request),
            report=report,
            # what a shard's connect met: an admin's to read (harvest.web.errors)
            connection_detail=sees_connection_detail(principal),
        )


def _unavailable(listed: Merged[Any], *others: Merged[Any]) -> list[int]:
    """The shards a page could not read; a list no shard answered is DatabaseUnavailable (503)."""
    if listed.status == UNAVAILABLE:
        raise _no_shard("no shard could be read; retry when one is up", listed.reasons)
    return _missing(listed, *others)


def _no_shard(said: str, reasons: Mapping[int, str]) -> NoShardReached:
    """A page no shard answered, with what their connects met (``reasons``, each shard's): the
    one reason when they all met the same (a database down), else each shard's. The log's outage
    is then the one the management API's requests meet, not one of the dashboard's own
    (harvest.web.errors.outage_answer); a caller sees ``said`` only."""
    distinct = set(reasons.values())
    if len(distinct) == 1:
        return NoShardReached(said, distinct.pop())
    return NoShardReached(said, "; ".join(f"shard {s}: {r}" for s, r in sorted(reasons.items())) or None)


def _missing(*reads: Merged[Any]) -> list[int]:
    """The shards any of a page's reads could not read."""
    return sorted(set().union(*(r.unavailable_shards for r in reads)))


def _writer(source: Source, shard: int, principal: Principal) -> Callable[[], Any]:
    # A dry run too: it selects the rows it would act on FOR UPDATE, as the real run does.
    return lambda: source.lend(shard, principal, write=True)


# The New schedule and Edit forms' text fields, sent on as they are (a blank one: not given).
_SCHEDULE_TEXT = ("workflow_name", "cron", "tz", "every", "queue", "overlap", "catchup_window", "jitter")
# The Edit form's fields that emptied clear (schedule_spec.CLEARABLE, the arguments as its input field).
_FORM_CLEARABLE = ("input", "args", "queue", "max_active_runs")


def _schedule_body(form: dict[str, str], *, create: bool) -> dict[str, Any]:
    """The schedule form as the API's JSON body (schedule_spec checks it): input parsed as
    JSON, max_active_runs and catchup converted when they read as a number and a boolean (what
    does not is left for the check to refuse, naming the field)."""
    data: dict[str, Any] = {}
    for key in (*(("name",) if create else ()), *_SCHEDULE_TEXT):
        value = _blank_none(form.get(key))
        if value is not None:
            data[key] = value
    # input: the run's one argument; args: its arguments, a JSON array (an Edit form's field
    # when the schedule has several: _schedule_values).
    for key, said in (
        ("input", "the run's argument as JSON"),
        ("args", "the run's arguments as a JSON array"),
    ):
        text = _blank_none(form.get(key))
        if text is not None:
            try:
                data[key] = parse_json(text)  # (json.loads: a RecursionError, a 500, past ~990 levels)
            except ValueError as exc:
                raise InvalidArgument(f"{key}: not JSON ({exc}); give {said}") from None
    most = _blank_none(form.get("max_active_runs"))
    if most is not None:
        data["max_active_runs"] = int(most) if re.fullmatch(r"[+-]?\d{1,18}", most) else most
    catchup = _blank_none(form.get("catchup"))
    if catchup is not None:
        data["catchup"] = {"true": True, "false": False}.get(catchup.lower(), catchup)
    if create and form.get("paused"):
        data["paused"] = True
    if form.get("allow_unregistered"):  # (the checkbox: create_schedule's HR010 override)
        data["allow_unregistered"] = True
    return data


def _schedule_values(row: dict[str, Any], shows_input: bool) -> dict[str, str]:
    """A workflow schedule's fields as its Edit form shows them (strings). Its arguments only to
    a principal who sees payloads: one as the input field (the run's one argument, as the New
    schedule form takes it), several as the args field, a JSON array (the input field could not
    hold them, so such a schedule's arguments could not be edited)."""
    out = {
        "workflow_name": row.get("workflow_name") or "",
        "queue": row.get("queue") or "",
        "max_active_runs": str(row.get("max_active_runs") or ""),
        "overlap": row.get("overlap") or "",
        "catchup": "true" if row.get("catchup") else "false",
    }
    if row.get("cron"):
        out.update(cron=row["cron"], tz=row.get("timezone") or "UTC")
    elif row.get("interval_secs"):
        out["every"] = f"{row['interval_secs']}s"
    if row.get("catchup") and row.get("catchup_window_secs"):
        out["catchup_window"] = f"{row['catchup_window_secs']}s"
    if row.get("jitter_secs"):
        # Every digit, never an exponent: sent back unchanged it parses to the same jitter (":g"
        # gave 12345.2 for 12345.25, a change, and 1.23457e+06, which no duration parses).
        out["jitter"] = f"{plain_number(float(row['jitter_secs']))}s"
    arguments = row.get("input")
    if shows_input and isinstance(arguments, list) and len(arguments) == 1:
        out["input"] = json.dumps(arguments[0], default=json_default, ensure_ascii=False)
    elif shows_input and isinstance(arguments, list) and len(arguments) > 1:
        out["args"] = json.dumps(arguments, default=json_default, ensure_ascii=False)
    return out


def _edit_changes(row: dict[str, Any], form: dict[str, str]) -> dict[str, Any]:
    """What an Edit form of schedule ``row`` changes: its fields checked as the API's PATCH body,
    those the user changed kept, of them those that differ from the row's (:func:`_changed`);
    an input, queue or max active runs emptied is cleared (None).
    The form is drawn filled (:func:`_schedule_values`) and sends back what it was drawn with
    (``drawn``): a field left as drawn is not sent, though the schedule changed meanwhile (a
    deploy's new spec, another edit: sent, the form's old value would put it back). Catch-up
    turned off with the window the form showed still there turns it off (the window is the
    form's, not sent): only a window the user typed with catch-up off is refused, as the API
    refuses it."""
    drawn = _drawn(form)
    body = _schedule_body(form, create=False)
    shown = (drawn if drawn is not None else _schedule_values(row, False)).get("catchup_window")
    if body.get("catchup") is False and shown is not None and body.get("catchup_window") == shown:
        del body["catchup_window"]
    if drawn is not None:
        # A clearable field drawn with a value and sent empty is cleared (null, as the API's
        # PATCH takes it: the input field's as args, an input of null being one null argument);
        # one drawn empty (an input the principal may not see) stays.
        emptied = [k for k in _FORM_CLEARABLE if _blank_none(drawn.get(k)) and not _blank_none(form.get(k))]
        body.update(dict.fromkeys("args" if k == "input" else k for k in emptied))
    changes = schedule_spec.update_changes(body)
    if drawn is not None:
        was = schedule_spec.update_changes(_schedule_body(drawn, create=False))
        changes = {k: v for k, v in changes.items() if k not in was or was[k] != v}
    return _changed(row, changes)


def _drawn(form: dict[str, str]) -> dict[str, str] | None:
    """The values an Edit form was drawn with (its ``drawn`` field), None when it sent none or
    they do not read back (a form from before it carried them: every field is compared with
    the schedule's)."""
    try:
        drawn = jsonb.loads(form.get("drawn") or "null")
        if isinstance(drawn, dict) and all(isinstance(v, str) for v in drawn.values()):
            schedule_spec.update_changes(_schedule_body(drawn, create=False))
            return drawn
    except (ValueError, InvalidArgument):
        pass
    return None


def _changed(row: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """Of an Edit form's ``changes``, those that differ from schedule ``row``'s (a catch-up
    turned on or off keeps the window sent with it: alone, the mode's default window is taken)."""
    out = {k: v for k, v in changes.items() if row.get(k) != v}
    if "catchup" in out and "catchup_window_secs" in changes:
        out["catchup_window_secs"] = changes["catchup_window_secs"]
    return out


def _blank_none(value: str | None) -> str | None:
    value = (value or "").strip()
    return value or None


def _dashboard_refusal(exc: HarvestError, name: str) -> HarvestError:
    """A schedule's refusal saying what to do in the dashboard's words (a workflow no worker
    registered: the forms' checkbox, not the SQL's p_allow_unregistered)."""
    return schedule_refusal_for(exc, name, "dashboard")


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _page_path(request: Request) -> str:
    """This page's path and query within the dashboard (its mount's prefix off), for a link back."""
    base = request.scope.get("root_path", "").rstrip("/")
    path = request.url.path[len(base) :] if base and request.url.path.startswith(base) else request.url.path
    return path + (f"?{request.url.query}" if request.url.query else "")


def _local_path(value: str | None) -> str | None:
    """``value`` when it is a path of this dashboard to go back to after signing in, else None:
    never another site (``//host``, ``https://host``, a backslash browsers read as a slash) or a
    header's end (a control character)."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return None
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        return None
    parts = urllib.parse.urlsplit(value)
    return None if parts.scheme or parts.netloc else value


def _refused_post(request: Request) -> tuple[int, str] | None:
    """Why a form's POST is refused before a byte of it is read: another site's page sent it
    (403; with the SameSite=Strict cookie, a second guard), or it says it is too large (413)."""
    refused = cross_site(request)
    if refused:
        return 403, f"{refused}: use the dashboard's own pages"
    too_large = declared_too_large(request, MAX_FORM_BYTES)
    if too_large is not None:
        return 413, str(too_large)
    return None


async def _form(request: Request) -> dict[str, str]:
    """A form's fields (the last value of each), its body read up to MAX_FORM_BYTES."""
    body = await read_body(request, MAX_FORM_BYTES)
    form = urllib.parse.parse_qs(body.decode(errors="replace"), keep_blank_values=True)
    fields = {k: v[-1] for k, v in form.items()}
    _refuse_nul([*request.path_params.items(), *fields.items()])
    return fields


def _refuse_nul(values: list[tuple[str, Any]]) -> None:
    """The 400 naming a page's or a form's field (a path segment, a query parameter, a form
    field) that holds a NUL, which no text column takes: the driver refused it in its own words,
    with no field named, as the page's error."""
    for name, value in values:
        if isinstance(value, str) and "\x00" in value:
            raise invalid(name, "contains a NUL character")


# Every response of the dashboard: no other site may frame it (clickjacking: under the dev
# profile, or behind a proxy that signs in with a cookie of its own, a framed page is signed in
# and its buttons act), no script runs on it (it has none: an injection would run nothing), its
# forms post only to it, and a response is read as the type it says.
PAGE_HEADERS = (
    (b"x-frame-options", b"DENY"),
    (
        b"content-security-policy",
        (
            b"default-src 'self'; script-src 'none'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
            b"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
        ),
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
)


class _PageHeaders:
    """ASGI middleware: PAGE_HEADERS on every HTTP response of the app it wraps."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        names = {name for name, _ in PAGE_HEADERS}

        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                kept = [h for h in message.get("headers", []) if h[0].lower() not in names]
                message = {**message, "headers": [*kept, *PAGE_HEADERS]}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def dashboard_app(
    *,
    dsn: str | None = None,
    shards: Any = None,
    config: Config | None = None,
    authorizer: Authorizer | None = None,
    profile: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    app: Any = None,
) -> Starlette:
    """The dashboard as an ASGI app, mountable under any prefix (``/ui`` of the management app).

    ``dsn`` (one database), ``shards`` (an ``AsyncShardPools`` the caller owns) or ``config``
    (``[shards]``, else ``database_url``) say where it reads; ``authorizer`` (the
    ``principal.Authorizer`` protocol) who may see and do what: with none, the dev profile lets
    everyone in as an admin and any other profile refuses every page. ``timeout`` bounds how long
    a page waits for one shard. ``app``: the served :class:`harvest.App` (the management app's),
    whose declared queue a schedule created or edited without one takes. Pools are opened on the
    first request and closed by the app's lifespan (a mounted app's lifespan does not run: the
    app that mounts it awaits ``app.state.dashboard.close()`` in its own)."""
    if authorizer is None:
        authorizer = default_authorizer(profile, token_database(dsn, config), source="ui")
    source = Source(dsn=dsn, shards=shards, config=config, timeout=timeout)
    dashboard = Dashboard(source, cast("Authorizer", authorizer), app)  # (set above when None)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        app_outages(app).close()
        await dashboard.close()

    async def no_page(request: Request, exc: Exception) -> Response:
        # A path no route matches (or a method its route does not take): the dashboard's own
        # error page, with its navigation, not Starlette's plain text. Mounted in the management
        # app, only paths under /ui come here; the API's own keep its JSON errors.
        status = getattr(exc, "status_code", 500)
        message = {
            404: "no page at this address: the dashboard's pages are linked above",
            405: f"{request.method} is not allowed here: open the page from the dashboard's links",
        }.get(status, str(getattr(exc, "detail", "")))
        page = dashboard.error(request, status, message)
        page.headers.update(getattr(exc, "headers", None) or {})  # a 405's Allow
        return page

    ui = Starlette(  # (not "app": the served App's parameter)
        routes=dashboard.routes(),
        lifespan=lifespan,
        exception_handlers={HTTPException: no_page},
        middleware=[Middleware(_PageHeaders)],
    )
    ui.state.dashboard = dashboard
    return ui


__all__ = ["dashboard_app"]
