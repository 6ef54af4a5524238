"""The CLI's second transport: the management HTTP API (harvest/web/routes/), spoken with httpx.

Each operator command is written once, against the operator API it calls (the SQL API
objects of harvest/db/sqlapi.py, the fan-out reads of harvest/shard/fanout.py, the client);
the seams in harvest/cli/shards.py and harvest/cli/output.py hand it either those (a DSN) or
the objects here (a base URL), which make the same calls as requests to the routes and give
back the same values. An error answer becomes the same :class:`HarvestError` subclass (its
``code`` is the class name in snake case, harvest.core.errors.error_code), so a command prints
the same line and exits with the same code over either transport.

Which transport a command uses (:func:`harvest.cli.output.selected`; docs/operations.md, "The
CLI's two transports"):

1. ``--base-url`` on the root group: HTTP (with ``--database-url`` too: an error).
2. ``--database-url`` on the command: SQL, as before.
3. ``HARVEST_URL`` in the environment: HTTP for a command that has a route; a command that
   exists only for a DSN (``migrate``, ``worker run``, ``shard rebalance``, ...) keeps its DSN.
4. A DSN from ``HARVEST_DATABASE_URL`` or the config file: SQL.
5. Nothing at all: HTTP at the default URL, http://localhost:3000/api/harvest (the port is the
   config's ``web.port`` when it names one: where ``harvest serve`` and ``harvest dev`` listen).

The token (``--token``/``HARVEST_TOKEN``) is sent as a bearer token and never printed.
"""

from __future__ import annotations

import contextlib
import io
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NoReturn
from urllib.parse import quote

from harvest.core import errors as harvest_errors
from harvest.core.batches import BATCH_STEP
from harvest.core.codecs import Payloads
from harvest.core.errors import (
    ConfigError,
    DatabaseUnavailable,
    HarvestError,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    TimeoutError_,
    Unauthenticated,
    error_code,
)
from harvest.core.receipts import SignalReceipt
from harvest.shard.fanout import (
    CHILDREN_PAGE,
    COMPLETE,
    TOKEN_PAGE_MAX,
    WORKER_LIMIT_MAX,
    Merged,
    token_cursor,
)

URL_ENV = "HARVEST_URL"
TOKEN_ENV = "HARVEST_TOKEN"
TIMEOUT_ENV = "HARVEST_HTTP_TIMEOUT_SECS"
# Where `harvest serve` and `harvest dev` listen by default, and so where the CLI looks when it is
# given nothing (the spec's http://localhost:3000/api/harvest): one port for both ends.
DEFAULT_PORT = 3000
MOUNT = "/api/harvest"
DEFAULT_TIMEOUT_SECS = 30.0


def default_base_url(port: int | None = None) -> str:
    """The URL the CLI speaks to when nothing names a DSN or a URL: this machine, at the config's
    ``web.port`` (``port``) if it has one, else the default port."""
    return f"http://localhost:{DEFAULT_PORT if port is None else port}{MOUNT}"


# The spec's longer budgets: an update waited to completion gets its own timeout plus this;
# a bulk dead-letter write and its preview at least BULK_WRITE_SECS; a stream's idle limit at
# least STREAM_IDLE_SECS.
UPDATE_MARGIN_SECS = 10.0
BULK_WRITE_SECS = 300.0
STREAM_IDLE_SECS = 60.0
# ctx.meta key of the root group's transport options.
HTTP_KEY = "harvest.http"


@dataclass(frozen=True)
class HttpSettings:
    """Where and how the CLI speaks to the management API."""

    base_url: str
    token: str | None = None
    timeout: float = DEFAULT_TIMEOUT_SECS
    implicit: bool = False  # the default URL: nothing named a DSN or a URL

    def __repr__(self) -> str:  # the token never shows, not even in a traceback
        token = "***" if self.token else None
        return f"HttpSettings(base_url={self.base_url!r}, token={token}, timeout={self.timeout})"


# -- errors ------------------------------------------------------------------------------------


def _error_classes() -> dict[str, type[HarvestError]]:
    out: dict[str, type[HarvestError]] = {}
    pending: list[type[HarvestError]] = [HarvestError]
    while pending:
        cls = pending.pop()
        if cls.__module__ == harvest_errors.__name__:
            out.setdefault(error_code(cls.__new__(cls)), cls)
        pending.extend(cls.__subclasses__())
    return out


def error_from_answer(status: int, body: Any, scope_hint: str) -> HarvestError:
    """The HarvestError an error answer stands for: its ``code`` names the class."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        error = {}
    code = str(error.get("code") or "")
    message = str(error.get("message") or f"the management API answered HTTP {status}")
    if status == 401 or code == "unauthenticated":
        return Unauthenticated(
            f"{message} (HTTP {status}): pass an API token with --token or {TOKEN_ENV} "
            f"(harvest token create NAME --scope {scope_hint})"
        )
    if (status == 403 or code == "permission_denied") and error.get("needs") == "payloads":
        # A token made with --no-payloads: its scope is enough, and the message says what to do.
        return PermissionDenied(f"{message} (HTTP {status})")
    if status == 403 or code == "permission_denied":
        return PermissionDenied(
            f"{message} (HTTP {status}): this call needs a token with the {scope_hint} scope "
            "(harvest token create NAME --scope ...)"
        )
    if status == 404 and message.startswith("no route"):
        message += " (is --base-url / HARVEST_URL the API's mount, e.g. .../api/harvest?)"
    cls = _error_classes().get(code)
    if cls is None:
        if status == 404:
            return NotFound(f"{message} (HTTP 404: is the base URL the API's mount?)")
        if status >= 500:
            return DatabaseUnavailable(message) if status == 503 else HarvestError(message)
        return InvalidArgument(message) if status in (400, 422) else HarvestError(message)
    if cls is harvest_errors.WorkflowAlreadyExists:
        return cls(message, error.get("existing_execution_id"), error.get("existing_state"))
    if cls is harvest_errors.PayloadKeyMissing:
        return ServerLacksKey(message)
    if cls is harvest_errors.ShardUnavailable:
        # The server's message is the whole line (it names the shard and the outage's request
        # id): ShardUnavailable(message) made it the shard number ("shard shard 2 is ...").
        shard = error.get("shard_id")
        unavailable = harvest_errors.ShardUnavailable(shard if isinstance(shard, int) else -1, message)
        unavailable.args = (message,)
        return unavailable
    try:
        return cls(message)
    except TypeError:
        return HarvestError(message)


class ServerLacksKey(harvest_errors.PayloadKeyMissing):
    """A server's ``payload_key_missing`` (a server of an earlier release decoded a query's or
    an update's answer, and holds no keys): its key id read back from its line, and where the
    value can be read instead. Not the CLI's own --app decoding (harvest.cli.payloads)."""

    def __init__(self, message: str):
        import re

        found = re.search(r"with key '([^']*)'", message)
        super().__init__(found.group(1) if found else "?")
        said = (
            f"the management API holds no keys and could not answer this ({message}): ask over "
            "SQL (--database-url) with --app module:app, or through a Client(codecs=...)"
        )
        self.args = (said,)


def shard_refusals(answer: dict[str, Any]) -> list[tuple[int, HarvestError]]:
    """The refusals a write on every shard answered (``shard_errors`` with ``error: refused``),
    each as the HarvestError its code names, with its message as the shard gave it (the CLI
    then names them as over SQL: harvest.cli.shards.fail_if_refused)."""
    out: list[tuple[int, HarvestError]] = []
    for e in answer.get("shard_errors") or []:
        if not isinstance(e, dict) or e.get("error") != "refused":
            continue
        cls = _error_classes().get(str(e.get("code") or ""), HarvestError)
        message = str(e.get("message") or "refused")
        try:
            exc = cls(message)
        except TypeError:  # a class with required fields: its message, as a HarvestError
            exc = HarvestError(message)
        out.append((int(e["shard_id"]), exc))
    return out


def raise_refusals(refused: Sequence[tuple[int, Exception]], unavailable: list[int]) -> NoReturn:
    """The first refusal raised (its class sets the exit code), its message naming every
    refusal with its shard and the shards not reached."""
    reasons = [f"shard {s}: {exc}" for s, exc in refused]
    if unavailable:
        reasons.append(f"shard(s) {', '.join(map(str, unavailable))} could not be reached")
    first = refused[0][1]
    first.args = ("; ".join(reasons), *first.args[1:])
    raise first


def _dag_flipped(answer: dict[str, Any]) -> Any:
    """A server's pause or unpause: ``changed`` when every shard that has the DAG made it; a
    partial answer (a shard refused or was not reached) as a :class:`PerShard` of each done
    shard's ``changed``, which `harvest dag pause` prints and ends as over SQL with [shards]
    (cli.dag), so a pause made on some shards only never reads as made everywhere."""
    if answer.get("status", "complete") == "complete":
        return answer["changed"]
    flipped = _per_shard(answer)
    flipped.results = {s: r["changed"] for s, r in flipped.results.items()}
    return flipped


# -- the transport -----------------------------------------------------------------------------

# Tests inject an in-process transport (an ASGI app) here; None: the network.
TRANSPORT: Any = None


class Http:
    """One httpx client for a command: JSON in and out, errors as HarvestErrors."""

    def __init__(self, settings: HttpSettings):
        try:
            import httpx
        except ImportError:  # pragma: no cover - httpx comes with harvest-workflows[web]
            raise ConfigError("speaking HTTP needs httpx: pip install 'harvest-workflows[web]'") from None
        self.settings = settings
        self.last_headers: Any = {}
        headers = {"Accept": "application/json", "User-Agent": "harvest-cli"}
        if settings.token:
            headers["Authorization"] = f"Bearer {settings.token}"
        self._httpx = httpx
        try:
            self.client = httpx.Client(
                base_url=settings.base_url.rstrip("/"),
                headers=headers,
                timeout=settings.timeout,
                transport=TRANSPORT,
            )
        except httpx.InvalidURL as exc:  # a bad port, an unclosed [IPv6 literal
            raise InvalidArgument(
                f"the management API's URL {settings.base_url} is not a URL: {exc} "
                f"(check --base-url / {URL_ENV})"
            ) from None

    def close(self) -> None:
        self.client.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json: Any = None,
        scope: str | None = None,
        timeout: float | None = None,
        ok: tuple[int, ...] = (),
        goes_on: str | None = None,
    ) -> tuple[int, Any]:
        """(status, decoded JSON or None); an answer >= 400 (not in ``ok``) raises its error.
        ``goes_on``: for a write the server carries to its end whoever waits (a sweep committed
        batch by batch), what its timeout says instead of a bare one: the server goes on, and
        how to see the outcome."""
        query = _query(params or {})
        budget = self.settings.timeout if timeout is None else timeout
        where = _non_finite(json)
        if where is not None:  # (JSON has no NaN or Infinity: httpx would raise ValueError)
            raise InvalidArgument(f"{where[0]}: {where[1]} is not a finite number")
        try:
            answer = self.client.request(
                method,
                path,
                params=query,
                json=json if json is not None or method != "GET" else None,
                timeout=budget,
            )
        except self._httpx.TimeoutException:
            if goes_on is not None:
                raise TimeoutError_(
                    f"no answer within {budget:g}s to {method} {path}, but the server goes on {goes_on} "
                    f"(wait longer: --http-timeout-secs / {TIMEOUT_ENV})"
                ) from None
            raise TimeoutError_(
                f"request timed out: {method} {path} had no answer within {budget:g}s "
                f"(--http-timeout-secs / {TIMEOUT_ENV})"
            ) from None
        except self._httpx.HTTPError as exc:
            raise self._unreachable(exc) from None
        self.last_headers = answer.headers
        data = None
        if answer.content:
            try:
                data = answer.json()
            except ValueError:
                data = None
        if answer.status_code >= 400 and answer.status_code not in ok:
            raise error_from_answer(
                answer.status_code, data, scope or ("read" if method == "GET" else "operate")
            )
        return answer.status_code, data

    def _unreachable(self, exc: Exception) -> HarvestError:
        where = f"{type(exc).__name__}: {exc}"
        if self.settings.implicit:  # nothing was given: name every place to give one
            from harvest.config.config import DSN_ENV

            return ConfigError(
                f"no database or management API given: set {DSN_ENV} (preferred: a command line is "
                "visible to ps) or database_url in harvest.toml, or pass --database-url; or set "
                f"{URL_ENV} / --base-url (the default {self.settings.base_url} did not answer: {where})"
            )
        return DatabaseUnavailable(
            f"could not reach the management API at {self.settings.base_url}: {where} "
            f"(check --base-url / {URL_ENV})"
        )

    def stream_events(
        self, after: str | None, note: Callable[[str], None] | None = None
    ) -> Iterator[tuple[str | None, dict[str, Any] | None]]:
        """``/stream`` (server-sent events) after ``after`` (a global id; on a sharded server every
        shard's position; None: from now), as ``(position, event)``: each block's ``id:`` (every
        shard's position on a sharded server, which the event then also carries as
        ``position``), and its event, or None for the block that opens the stream (its id is
        where the stream starts: resuming after it misses nothing). ``note`` gets what the stream
        says in its comments (a shard gone or back, a position past the end), but its opening
        and keepalives. The timeout bounds the answer's headers; then the
        stream fails only when no data (nor a keepalive, every 15 s) arrives for
        STREAM_IDLE_SECS or the timeout, whichever is longer."""
        import json as json_

        headers = {"Accept": "text/event-stream"}
        if after is not None:
            headers["Last-Event-ID"] = after
        budget = self.settings.timeout
        request = self.client.build_request("GET", "/stream", headers=headers, timeout=budget)
        try:
            answer = self.client.send(request, stream=True)
        except self._httpx.TimeoutException:
            raise TimeoutError_(
                f"request timed out: GET /stream had no answer within {budget:g}s "
                f"(--http-timeout-secs / {TIMEOUT_ENV})"
            ) from None
        except self._httpx.HTTPError as exc:
            raise self._unreachable(exc) from None
        idle = max(STREAM_IDLE_SECS, budget)
        try:
            if answer.status_code >= 400:
                answer.read()
                try:
                    body = answer.json()
                except ValueError:
                    body = None
                if answer.status_code in (502, 504):  # a proxy with no server behind it: an outage
                    raise DatabaseUnavailable(
                        f"the management API answered HTTP {answer.status_code} (a proxy whose server "
                        "is down or restarting?)"
                    )
                raise error_from_answer(answer.status_code, body, "read")
            # The headers came: from here on a read may wait `idle` (the transport reads the
            # request's read timeout when the body starts).
            timeouts = request.extensions.get("timeout")
            if isinstance(timeouts, dict):
                timeouts["read"] = idle
            data: list[str] = []
            position: str | None = None
            for line in answer.iter_lines():
                if line.startswith("data:"):
                    data.append(line[5:].lstrip(" "))
                elif line.startswith("id:"):
                    position = line[3:].lstrip(" ")
                elif line.startswith(":") and note is not None:
                    said = line[1:].strip()
                    if said not in ("stream open", "keepalive"):  # (what the stream says of itself)
                        note(said)
                elif line == "" and (data or position is not None):
                    event = None
                    if data:
                        event = json_.loads("\n".join(data))
                        if isinstance(event.get("created_at"), str):
                            event["created_at"] = datetime.fromisoformat(event["created_at"])
                        if "shard_id" in event:  # a sharded server's merged stream
                            event["position"] = position
                    yield position, event
                    data, position = [], None
        except self._httpx.TimeoutException:
            raise TimeoutError_(f"request timed out: the event stream sent nothing for {idle:g}s") from None
        except self._httpx.HTTPError as exc:
            raise DatabaseUnavailable(f"the event stream broke off: {type(exc).__name__}: {exc}") from None
        finally:
            answer.close()

    def download(
        self,
        path: str,
        params: dict[str, Any],
        opened: Callable[[], contextlib.AbstractContextManager[Any]],
        rewrite: Callable[[Iterable[str]], Iterable[str]] | None = None,
    ) -> None:
        """The text a route streams, copied as it arrives into ``opened()`` (opened only once the
        answer is a success: an error answer leaves no file), through ``rewrite`` when given (it
        takes the pieces as they arrive and answers what to write). The timeout bounds each
        read."""
        budget = self.settings.timeout
        request = self.client.build_request("GET", path, params=_query(params), timeout=budget)
        try:
            answer = self.client.send(request, stream=True)
        except self._httpx.TimeoutException:
            raise TimeoutError_(
                f"request timed out: GET {path} had no answer within {budget:g}s "
                f"(--http-timeout-secs / {TIMEOUT_ENV})"
            ) from None
        except self._httpx.HTTPError as exc:
            raise self._unreachable(exc) from None
        try:
            if answer.status_code >= 400:
                answer.read()
                try:
                    body = answer.json()
                except ValueError:
                    body = None
                raise error_from_answer(answer.status_code, body, "read")
            with opened() as out:
                for text in (rewrite or iter)(answer.iter_text()):
                    out.write(text)
        except self._httpx.TimeoutException:
            raise TimeoutError_(f"request timed out: GET {path} sent nothing for {budget:g}s") from None
        except self._httpx.HTTPError as exc:
            raise DatabaseUnavailable(f"GET {path} broke off: {type(exc).__name__}: {exc}") from None
        finally:
            answer.close()

    def read_text(self, path: str, params: dict[str, Any]) -> str:
        """The whole text a route streams (:meth:`download`'s checks and errors), for a command
        that must hold the document (`--app` decodes it: harvest.cli.payloads)."""
        text = io.StringIO()
        self.download(path, params, lambda: contextlib.nullcontext(text))
        return text.getvalue()

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params)[1]

    def post(self, path: str, body: dict[str, Any] | None = None, scope: str = "operate", **kw: Any) -> Any:
        clean = {k: v for k, v in (body or {}).items() if v is not None}
        return self.request("POST", path, json=clean, scope=scope, **kw)[1]


def _query(params: dict[str, Any]) -> list[tuple[str, str | int | float | bool | None]]:
    out: list[tuple[str, str | int | float | bool | None]] = []
    for key, value in params.items():
        values = value if isinstance(value, list | tuple) else [value]
        for v in values:
            if v is None:
                continue
            if isinstance(v, bool):
                v = "true" if v else "false"
            elif isinstance(v, datetime):
                v = v.isoformat()
            out.append((key, str(v)))
    return out


def _body(value: Any) -> Any:
    """A JSON body value: times as RFC 3339 (a time without an offset is UTC on the server)."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _body(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_body(v) for v in value]
    return value


def _p(segment: Any) -> str:
    """One path segment, quoted. An empty one would name the collection instead (`/workflows/`),
    which answers something else entirely: refused, as no name or id is empty."""
    text = str(segment)
    if not text:
        raise InvalidArgument("an empty name or id names nothing: give one")
    return quote(text, safe="")


def _non_finite(value: Any, path: str = "") -> tuple[str, float] | None:
    """The first NaN or infinity in a JSON body, with the key path that holds it."""
    if isinstance(value, float) and not math.isfinite(value):
        return path or "the request", value
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = _non_finite(item, f"{path}.{key}" if path else str(key))
        if found is not None:
            return found
    return None


@contextlib.contextmanager
def http_session(settings: HttpSettings) -> Iterator[Http]:
    http = Http(settings)
    try:
        yield http
    finally:
        http.close()


# -- the operator API over HTTP ----------------------------------------------------------------


# The events a request of `workflow history` over HTTP asks for (the route's maximum).
HISTORY_PAGE = 1000
# The entries a stack read for a timeout's hint asks for in each list: the route's largest.
STACK_LIMIT_MAX = 10_000


class HttpApi:
    """The SQL API calls the commands make, as requests (the same arguments, the same values).
    ``shard``: the shard a per-shard call (a dead letter) names (None: the server's default)."""

    def __init__(self, http: Http, shard: int | None = None):
        self.http, self.shard = http, shard
        # The shard a sharded server acted on, when it found a dead letter itself (no shard named).
        self.answered_shard: int | None = None

    def __getattr__(self, name: str) -> Any:
        raise ConfigError(
            f"this command's {name.replace('_', ' ')} needs a database DSN: it has no HTTP route"
        )

    # executions
    def get_execution(self, execution_id: str) -> dict[str, Any]:
        # The row only: the route's first page of the history is not read for it.
        return _obj(self.http.get(f"/workflows/{_p(execution_id)}", history_limit=0)["execution"])

    def get_history(self, execution_id: str, after_event_id: int = 0) -> list[dict[str, Any]]:
        """Every event after ``after_event_id``, page by page: the route answers a page and the
        cursor of the rest (docs/http-api.md), so a long history is many small answers."""
        route = f"/workflows/{_p(execution_id)}/history"
        doc = self.http.get(route, after_event_id=after_event_id, limit=HISTORY_PAGE, payload_policy="full")
        events = _rows(doc["events"])
        while doc.get("next_cursor"):
            doc = self.http.get(route, cursor=doc["next_cursor"], limit=HISTORY_PAGE, payload_policy="full")
            events += _rows(doc["events"])
        return events

    def get_execution_stack(self, execution_id: str, limit: int | None = None) -> dict[str, Any]:
        return _obj(self.http.get(f"/workflows/{_p(execution_id)}/stack", limit=limit))

    def signal_workflow(self, execution_id: str, name: str, payload: Any = None) -> SignalReceipt:
        body = {"signal_name": name, "payload": payload}
        answer = self.http.post(f"/workflows/{_p(execution_id)}/signal", body)
        return SignalReceipt(answer["event_id"], name, answer.get("awaited_signals") or ())

    def cancel_workflow(self, execution_id: str, reason: str | None = None) -> bool:
        answer = self.http.post(f"/workflows/{_p(execution_id)}/cancel", {"reason": reason})
        return bool(answer["first_request"])

    def terminate_workflow(self, execution_id: str, reason: str | None = None) -> None:
        self.http.post(f"/workflows/{_p(execution_id)}/terminate", {"reason": reason}, scope="admin")

    def pause_workflow(
        self, execution_id: str, reason: str | None = None, operator: str | None = None
    ) -> bool:
        body = {"reason": reason, "operator_id": operator}
        return bool(self.http.post(f"/workflows/{_p(execution_id)}/pause", body)["changed"])

    def resume_workflow(
        self, execution_id: str, reason: str | None = None, operator: str | None = None
    ) -> bool:
        body = {"reason": reason, "operator_id": operator}
        return bool(self.http.post(f"/workflows/{_p(execution_id)}/resume", body)["changed"])

    def reset_workflow(
        self,
        execution_id: str,
        to_event: int,
        reason: str,
        operator: str | None,
        signal_reapply: str,
        dry_run: bool,
    ) -> dict[str, Any]:
        body = {
            "to_event": to_event,
            "reason": reason,
            "operator_id": operator,
            "signal_reapply": signal_reapply,
            "dry_run": dry_run,
        }
        return _obj(self.http.post(f"/workflows/{_p(execution_id)}/reset", body, scope="admin"))

    def set_legal_hold(self, execution_id: str, reason: str, operator: str | None = None) -> dict[str, Any]:
        body = {"reason": reason, "operator_id": operator}
        return _obj(self.http.post(f"/workflows/{_p(execution_id)}/legal-hold", body, scope="admin"))

    def release_legal_hold(self, execution_id: str, operator: str | None = None) -> dict[str, Any]:
        params = {"operator_id": operator}
        path = f"/workflows/{_p(execution_id)}/legal-hold"
        return _obj(self.http.request("DELETE", path, params=params, scope="admin")[1])

    def erase_payloads(self, execution_id: str, operator: str | None = None) -> dict[str, Any]:
        """The erasure everywhere the run lived (the server scrubs every prior residence)."""
        body = {"operator_id": operator}
        return _obj(self.http.post(f"/workflows/{_p(execution_id)}/erase-payloads", body, scope="admin"))

    def count_versions(
        self,
        change_id: str,
        version: int | None,
        state_group: str,
        workflow_name: str | None = None,
        history_before: Any = None,
    ) -> PerShard:
        answer = self.http.get(
            "/admin/version-gates/usage",
            change_id=change_id,
            recorded_version=version,
            state_group=state_group,
            workflow_name=workflow_name,
            history_before=history_before,
            shard_id=self.shard,
        )
        # Each shard's rows and the shards not read, as the CLI's own fan-out answers them: the
        # command prints what was read, then fails on a shard not read (never a false zero).
        per_shard: dict[int, list[dict[str, Any]]] = {}
        for row in answer["versions"]:
            per_shard.setdefault(int(row.get("shard_id", 0)), []).append(_untagged(row))
        status = answer.get("status")
        return PerShard(
            per_shard,
            list(answer.get("unavailable_shards") or []),
            status if status in ("partial", "unavailable") else None,
        )

    def list_workers(
        self, queue: str | None = None, status: str | None = None, health: str | None = None
    ) -> list[dict[str, Any]]:
        # (the route answers the first workers only: as many as it gives, past any a CLI lists)
        answer = self.http.get("/workers", queue=queue, status=status, health=health, limit=WORKER_LIMIT_MAX)
        return [_untagged(r) for r in answer["workers"]]

    def queue_coverage(self, declared: list[str] | None) -> dict[str, Any]:
        """The server's coverage of ``declared`` (None: its App's queues; with no App, unknown),
        computed per writable shard there; the one-database shape from a server of one
        database, as over SQL. An older server's answer may lack ``unpolled_declared_queues``:
        it stays missing, and ``--strict`` fails closed on it."""
        answer: dict[str, Any] = self.http.get("/admin/queue-coverage", queue=declared or None)
        if answer.pop("sharded", False):
            return answer
        for key in ("unpolled_by_shard", "status", "unavailable_shards"):
            answer.pop(key, None)
        return answer

    # activities by task token
    def complete_activity_by_token(self, token: str, result: Any) -> Any:
        return self.http.post("/activities/complete", {"task_token": token, "result": result})["outcome"]

    def fail_activity_by_token(self, token: str, failure: dict[str, Any]) -> Any:
        body = {
            "task_token": token,
            "error_type": failure.get("error_type"),
            "message": failure.get("message"),
            "non_retryable": failure.get("non_retryable"),
            "details": failure.get("details"),
        }
        if failure.get("next_retry_delay") is not None:  # (absent otherwise: a server before it refuses it)
            body["next_retry_delay"] = failure["next_retry_delay"]
        return self.http.post("/activities/fail", body)["outcome"]

    def heartbeat_activity_by_token(self, token: str, details: Any) -> Any:
        body = {"task_token": token, "details": details}
        return self.http.post("/activities/heartbeat", body)["cancel_requested"]

    # dead letters (on self.shard)
    def _shard(self) -> dict[str, Any]:
        return {"shard_id": self.shard}

    def get_dead_letter(self, dead_letter_id: int) -> dict[str, Any]:
        row = _obj(self.http.get(f"/dead-letters/{dead_letter_id}", **self._shard()))
        row.pop("shard_id", None)  # the route names the shard; the SQL row does not carry it
        return row

    def replay_dead_letter(self, dead_letter_id: int) -> Any:
        path = f"/dead-letters/{dead_letter_id}/replay"
        answer = self.http.request("POST", path, params=self._shard(), json={})[1]
        self.answered_shard = answer.get("shard_id")
        return answer["task_id"]

    def discard_dead_letter(self, dead_letter_id: int) -> None:
        path = f"/dead-letters/{dead_letter_id}/discard"
        answer = self.http.request("POST", path, params=self._shard(), json={}, scope="admin")[1]
        self.answered_shard = answer.get("shard_id")

    def act_on_workflows(self, action: str, **step: Any) -> dict[str, Any]:
        """One request of a batch by filter (POST /workflows/{action}): a step on every shard,
        its summary and the next_cursor that continues it. ``step``: SqlApi.act_on_workflows's
        keywords (harvest.client.batch.STEP_KEYS), sent as the body's fields of the same names."""
        from harvest.client.batch import STEP_KEYS

        body = _body(
            {
                **{k: step.get(k) for k in STEP_KEYS},
                "search_attributes": list(step.get("search_attributes") or []) or None,
                "limit": step.get("limit") or BATCH_STEP,
                "dry_run": bool(step.get("dry_run")),
            }
        )
        budget = max(self.http.settings.timeout, BULK_WRITE_SECS)
        scope = "admin" if action in ("terminate", "reset") else "operate"
        return _obj(self.http.post(f"/workflows/{action}", body, scope=scope, timeout=budget))

    def bulk_dead_letters(
        self,
        action: str,
        *,
        activity_name: str | None = None,
        workflow_name: str | None = None,
        failed_after: Any = None,
        failed_before: Any = None,
        limit: int = 100,
        dry_run: bool = False,
        operator: str | None = None,
    ) -> dict[str, Any]:
        body = _body(
            {
                "activity_name": activity_name,
                "workflow_name": workflow_name,
                "failed_after": failed_after,
                "failed_before": failed_before,
                "limit": limit,
                "dry_run": dry_run,
                "operator_id": operator,
                "shard_id": self.shard,
            }
        )
        # A bulk write may take long: at least BULK_WRITE_SECS (the spec's budget). So may its
        # preview (the --dry-run, and a write's first request): it reads and checks as many rows
        # as the batches act on, and had the request timeout alone (a large one timed out).
        budget = max(self.http.settings.timeout, BULK_WRITE_SECS)
        scope = "admin" if action == "discard" else "operate"
        return _obj(self.http.post(f"/dead-letters/{action}", body, scope=scope, timeout=budget))

    # held-back starts (a discard by id on self.shard, the server's default shard when None; the
    # list is HttpReads.list_pending_starts, paged by cursor)
    def discard_pending_start(
        self, pending_start_id: int, operator_id: str | None = None, reason: str | None = None
    ) -> dict[str, Any]:
        path = f"/start-gates/pending/{pending_start_id}/discard"
        body = _body({"operator_id": operator_id, "reason": reason})
        answer = _obj(self.http.request("POST", path, params=self._shard(), json=body, scope="admin")[1])
        self.answered_shard = answer.get("shard_id")
        return _untagged(answer)

    def discard_pending_starts(
        self,
        workflow_name: str | None = None,
        gate_key: str | None = None,
        kind: str | None = None,
        created_after: Any = None,
        created_before: Any = None,
        limit: int = 100,
        dry_run: bool = False,
        operator_id: str | None = None,
        reason: str | None = None,
    ) -> PerShard:
        body = _body(
            {
                "workflow_name": workflow_name,
                "gate_key": gate_key,
                "kind": kind,
                "created_after": created_after,
                "created_before": created_before,
                "limit": limit,
                "dry_run": dry_run,
                "operator_id": operator_id,
                "reason": reason,
            }
        )
        budget = max(self.http.settings.timeout, BULK_WRITE_SECS)
        answer = _obj(self.http.post("/start-gates/pending/discard", body, scope="admin", timeout=budget))
        return _per_shard(answer)

    # DAGs (the list: HttpReads.list_dags, every shard's)
    def trigger_dag(self, name: str, conf: Any, workflow_id: str | None, operator: str | None) -> Any:
        # The route records the token's actor as the operator (it takes no operator_id).
        body = {"conf": conf, "workflow_id": workflow_id, "shard_id": self.shard}  # None: the default
        return self.http.post(f"/dags/{_p(name)}/trigger", body)

    def pause_dag(self, name: str, operator: str | None = None) -> Any:
        return _dag_flipped(self.http.post(f"/dags/{_p(name)}/pause"))

    def unpause_dag(self, name: str, operator: str | None = None) -> Any:
        return _dag_flipped(self.http.post(f"/dags/{_p(name)}/unpause"))

    def get_dag_run(self, execution_id: str) -> dict[str, Any]:
        return _obj(self.http.get(f"/dag-runs/{_p(execution_id)}"))

    def retry_dag_run(self, execution_id: str, operator: str | None = None) -> Any:
        return self.http.post(f"/dag-runs/{_p(execution_id)}/retry")

    # workers
    def get_worker(self, worker_id: str) -> dict[str, Any] | PerShard:
        answer = self.http.get(f"/workers/{_p(worker_id)}")
        rows = answer.get("rows") or []
        if answer.get("sharded"):  # the worker's row on each shard it polls
            return _by_shard(answer, rows)
        return _untagged(rows[0] if rows else answer)

    def drain_worker(self, worker_id: str, deadline: Any, operator: str | None) -> dict[str, Any] | PerShard:
        body = _body({"deadline_at": deadline, "operator_id": operator})
        answer = self.http.post(f"/workers/{_p(worker_id)}/drain", body, scope="admin")
        rows = answer.get("rows") or []
        if answer.get("sharded"):  # the worker's row on each shard, as `worker drain` with [shards]
            return PerShard(
                {int(r["shard_id"]): _untagged(r) for r in rows},
                list(answer.get("unavailable_shards") or []),
                refused=shard_refusals(answer),
            )
        found = [r for r in rows if r.get("outcome") != "not_found"] or rows
        drained = _untagged(found[0]) if found else {"worker_id": worker_id, "outcome": "not_found"}
        if answer.get("unavailable_shards"):  # the server's shards it could not reach (the CLI fails)
            drained["unavailable_shards"] = answer["unavailable_shards"]
        return drained

    def preview_drain(self, queue: str | None, worker_id: str | None) -> list[dict[str, Any]] | PerShard:
        answer = self.http.get("/workers/drain-preview", queue=queue, worker_id=worker_id)
        if answer.get("sharded"):  # each shard's rows, as `worker drain-preview` with [shards]
            by_shard: dict[int, list[dict[str, Any]]] = {}
            for row in answer["workers"]:
                by_shard.setdefault(int(row["shard_id"]), []).append(_untagged(row))
            missed = list(answer.get("unavailable_shards") or [])
            return PerShard(by_shard, missed, answer.get("status"), reasons=_reasons(answer))
        return [_untagged(r) for r in answer["workers"]]

    # schedules (on self.shard: its home shard unless named)
    def _schedule(self, name: str, suffix: str = "") -> str:
        return f"/admin/schedules/{_p(name)}{suffix}"

    def list_schedules(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Every schedule: the route's pages followed to the end."""
        rows: list[dict[str, Any]] = []
        cursor = None
        while True:
            answer = self.http.get("/admin/schedules", kind=kind, limit=1000, cursor=cursor)
            rows += [_schedule_row(r) for r in answer["schedules"]]
            cursor = answer.get("next_cursor")
            if not cursor:
                return rows

    def get_schedule(self, name: str, limit: int = 20) -> dict[str, Any]:
        return _schedule_row(self.http.get(self._schedule(name), limit=limit, shard_id=self.shard))

    def create_schedule(self, name: str, workflow_name: str, **options: Any) -> dict[str, Any]:
        body = {"name": name, "workflow_name": workflow_name, "shard_id": self.shard}
        body.update(_schedule_fields(options))
        for key in ("kind", "paused", "allow_unregistered"):
            if options.get(key) is not None:
                body[key] = options[key]
        return _schedule_row(self.http.post("/admin/schedules/workflow", body))

    def update_schedule(
        self,
        name: str,
        changes: dict[str, Any],
        operator: str | None = None,
        allow_unregistered: bool = False,
    ) -> dict[str, Any]:
        path = self._schedule(name)
        # A field cleared (None) goes as null: the route clears it (schedule_spec.CLEARABLE; the
        # arguments as args: an input of null is one null argument).
        cleared = {("args" if k == "input" else k): None for k, v in changes.items() if v is None}
        body = {**_schedule_fields(changes), **cleared}
        if allow_unregistered:
            body["allow_unregistered"] = True
        params = {"shard_id": self.shard}
        answer = self.http.request("PATCH", path, params=params, json=body, scope="operate")[1]
        return _schedule_row(answer)

    def delete_schedule(self, name: str, operator: str | None = None) -> bool:
        try:
            self.http.request(
                "DELETE", self._schedule(name), params={"shard_id": self.shard}, scope="operate"
            )
        except NotFound:
            return False
        return True

    def pause_schedule(
        self, name: str, note: str | None = None, operator: str | None = None
    ) -> dict[str, Any]:
        path = self._schedule(name, "/pause")
        body = {k: v for k, v in {"note": note}.items() if v is not None}
        return _schedule_row(self.http.request("POST", path, params={"shard_id": self.shard}, json=body)[1])

    def resume_schedule(self, name: str, operator: str | None = None) -> dict[str, Any]:
        path = self._schedule(name, "/resume")
        return _schedule_row(self.http.request("POST", path, params={"shard_id": self.shard}, json={})[1])

    def trigger_schedule(self, name: str, overlap: str | None = None, operator: str | None = None) -> Any:
        body = {k: v for k, v in {"overlap": overlap}.items() if v is not None}
        path = self._schedule(name, "/trigger")
        return self.http.request("POST", path, params={"shard_id": self.shard}, json=body)[1]

    def backfill_schedule(
        self, name: str, slots: list[datetime], overlap: str, operator: str | None = None
    ) -> dict[str, Any]:
        # The route finds the slots in [from, to] again: the first and last of ours bound the same.
        ends = (slots[0], slots[-1]) if slots else (datetime(1970, 1, 1), datetime(1970, 1, 1))
        body = {"from": _body(ends[0]), "to": _body(ends[1]), "overlap": overlap}
        path = self._schedule(name, "/backfill")
        answer = self.http.request("POST", path, params={"shard_id": self.shard}, json=body)[1]
        return {k: v for k, v in answer.items() if k not in ("name", "slots")}

    # start throttles: the routes answer per shard (each_shard spreads a PerShard over its shards)
    def get_start_throttle(self, workflow_name: str) -> PerShard:
        return _per_shard(self.http.get(f"/admin/start-throttles/{_p(workflow_name)}"))

    def set_start_throttle_override(
        self, workflow_name: str, rps: float, burst: float | None, ttl_secs: float, operator: str | None
    ) -> PerShard:
        body = {"rps": rps, "burst": burst, "ttl_secs": ttl_secs, "operator_id": operator}
        path = f"/admin/start-throttles/{_p(workflow_name)}/override"
        return _per_shard(self.http.post(path, body, scope="admin"))

    def clear_start_throttle_override(self, workflow_name: str, operator: str | None = None) -> PerShard:
        path = f"/admin/start-throttles/{_p(workflow_name)}/override"
        params = {"operator_id": operator}
        return _per_shard(self.http.request("DELETE", path, params=params, scope="admin")[1])

    # activity rate limits: per shard, as the start throttles
    def get_rate_limit(self, activity_name: str) -> PerShard:
        return _per_shard(self.http.get(f"/admin/rate-limits/{_p(activity_name)}"))

    def set_rate_limit_override(
        self,
        activity_name: str,
        rps: float,
        burst: float | None = None,
        ttl_secs: float = 3600,
        operator: str | None = None,
    ) -> PerShard:
        body = {"rps": rps, "burst": burst, "ttl_secs": ttl_secs, "operator_id": operator}
        path = f"/admin/rate-limits/{_p(activity_name)}/override"
        return _per_shard(self.http.post(path, body, scope="admin"))

    def clear_rate_limit_override(self, activity_name: str, operator: str | None = None) -> PerShard:
        path = f"/admin/rate-limits/{_p(activity_name)}/override"
        params = {"operator_id": operator}
        return _per_shard(self.http.request("DELETE", path, params=params, scope="admin")[1])

    # retention (the database's settings: /admin/retention/settings; the sweep runs in the server)
    def get_retention_status(self) -> dict[str, Any] | PerShard:
        answer = self.http.get("/admin/retention/settings")
        if answer.get("sharded"):  # each shard's own settings
            return _by_shard(answer, answer["shards"])
        return _first_shard(answer)

    def set_retention_settings(
        self,
        max_age: str | None = None,
        batch_size: int | None = None,
        worker_max_age: str | None = None,
        operator: str | None = None,
    ) -> dict[str, Any] | PerShard:
        """One POST for both ages (the server sets them in one transaction per shard), per shard
        when it is sharded, as `retention status`. None leaves a setting as it is."""
        given = {"max_age": max_age, "batch_size": batch_size, "worker_max_age": worker_max_age}
        body = {k: v for k, v in given.items() if v is not None} | {"operator_id": operator}
        answer = self.http.post("/admin/retention/settings", body, scope="admin")
        if answer.get("sharded"):
            return _by_shard(answer, answer["shards"])
        return _first_shard(answer)

    def sweep_retention(
        self, max_age: str | None, batch_size: int | None, max_batches: int, operator: str | None
    ) -> dict[str, Any]:
        body = {
            "max_age": max_age,
            "batch_size": batch_size,
            "max_batches": max_batches,
            "operator_id": operator,
        }
        budget = max(self.http.settings.timeout, BULK_WRITE_SECS)
        path = "/admin/retention/run-now"
        goes_on = (
            "with the sweep to its end, each batch committed as it is made: see what it did with "
            "`harvest retention status` (the last run, what a run would still delete) or "
            "`harvest audit list --operation retention.run`"
        )
        answer: dict[str, Any] = self.http.post(path, body, scope="admin", timeout=budget, goes_on=goes_on)
        shards = answer.get("shards") or []
        if len(shards) == 1 and not answer.get("unavailable_shards") and not answer.get("shard_errors"):
            return _untagged(shards[0])
        return answer  # every shard's answer: the command adds them up (cli/retention.py)

    # audit
    # tokens
    def create_api_token(
        self, name: str, scope: str, expires_in_secs: float | None = None, payloads: bool = True
    ) -> dict[str, Any]:
        body = {"name": name, "scope": scope, "expires_in_secs": expires_in_secs, "payloads": payloads}
        return _obj(self.http.post("/admin/tokens", body, scope="admin"))

    def list_api_tokens(
        self, include_revoked: bool = False, after: Any = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """At most ``limit`` tokens after ``after`` (None: every one), as the SQL call answers
        them: the route's pages followed until there are that many."""
        rows: list[dict[str, Any]] = []
        cursor = None if after is None else token_cursor(after, include_revoked)
        while limit is None or len(rows) < limit:
            ask = TOKEN_PAGE_MAX if limit is None else min(TOKEN_PAGE_MAX, limit - len(rows))
            answer = self.http.get("/admin/tokens", include_revoked=include_revoked, limit=ask, cursor=cursor)
            rows += _rows(answer["tokens"])
            cursor = answer.get("next_cursor")
            if not cursor:
                break
        return rows

    def revoke_api_token(self, name: str) -> Any:
        return self.http.request("DELETE", f"/admin/tokens/{_p(name)}", scope="admin")[1]["token_id"]


def _obj(value: Any) -> dict[str, Any]:
    """A JSON object of an answer (anything else: the API answered what the CLI cannot read)."""
    if not isinstance(value, dict):
        raise HarvestError(f"the management API answered {type(value).__name__} where an object was expected")
    return value


def _rows(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise HarvestError(f"the management API answered {type(value).__name__} where a list was expected")
    return [_obj(v) for v in value]


def _untagged(row: dict[str, Any]) -> dict[str, Any]:
    """A row a route tagged with the shard it came from, as one database's SQL returns it."""
    return {k: v for k, v in row.items() if k != "shard_id"}


@dataclass
class PerShard:
    """An answer a route gave per shard of its server: {shard: answer}, and the shards it missed
    (``status``: the server's, when it says; ``sharded``: False when the server is one database
    but the route still answers per shard, as the throttle routes do)."""

    results: dict[int, Any]
    unavailable: list[int]
    status: str | None = None
    sharded: bool = True
    refused: list[tuple[int, HarvestError]] = field(default_factory=list)  # a write's refusals
    # Why each shard missed was (the server's unavailable_reasons: what its connect met, to an admin)
    reasons: dict[int, str] = field(default_factory=dict)


def _reasons(answer: dict[str, Any]) -> dict[int, str]:
    """A fan-out answer's ``unavailable_reasons`` by shard number."""
    return {int(s): str(r) for s, r in (answer.get("unavailable_reasons") or {}).items()}


def _per_shard(answer: dict[str, Any]) -> PerShard:
    """A write's (or read's) per-shard answer: the shards not reached (unavailable_shards, or a
    shard_errors entry ``unreachable``), and the refusals apart (a refused shard was reached)."""
    missed = list(answer.get("unavailable_shards") or [])
    missed += [
        e["shard_id"]
        for e in answer.get("shard_errors") or []
        if e.get("error") != "refused" and e.get("shard_id") not in missed
    ]
    results = {int(s): r for s, r in (answer.get("shards") or {}).items()}
    return PerShard(results, missed, refused=shard_refusals(answer))


def _by_shard(answer: dict[str, Any], rows: list[dict[str, Any]]) -> PerShard:
    """A sharded server's rows (each with its shard_id) as {shard: row}; the server's status (a
    shard with no row is no missing shard)."""
    missed = list(answer.get("unavailable_shards") or [])
    results: dict[int, Any] = {int(row["shard_id"]): _untagged(row) for row in rows}
    status = answer.get("read_status") or answer.get("status")
    return PerShard(results, missed, status, refused=shard_refusals(answer), reasons=_reasons(answer))


def _schedule_row(row: dict[str, Any]) -> dict[str, Any]:
    """A schedule as the SQL returns it: the route's view fields (when, next_fire_times, problem,
    and the shard it read) are the CLI's to compute."""
    return {k: v for k, v in row.items() if k not in ("when", "next_fire_times", "problem", "shard_id")}


def _secs(value: float) -> str:
    return f"{value:g}s"


def _schedule_fields(options: dict[str, Any]) -> dict[str, Any]:
    """create_schedule / update_schedule keyword arguments as the schedule routes' body fields."""
    body: dict[str, Any] = {}
    for key, value in options.items():
        if value is None:
            continue
        if key == "cron":
            body["cron"] = value
        elif key == "timezone":
            body["tz"] = value
        elif key == "interval_secs":
            body["every"] = _secs(value)
        elif key == "input":
            # The arguments as they are: a one-element list sent as `input` lost a null argument
            # (the route took an input of null for none) where the SQL stored [null].
            body["args"] = value
        elif key == "catchup_window_secs":
            body["catchup_window"] = _secs(value)
        elif key == "jitter_secs":
            body["jitter"] = _secs(value)
        elif key in ("workflow_name", "queue", "max_active_runs", "overlap", "catchup"):
            body[key] = value
    return body


def _first_shard(answer: dict[str, Any]) -> dict[str, Any]:
    """The default shard's row of a per-shard answer ({"shards": [{shard_id, ...}]})."""
    shards = answer.get("shards") or []
    if not shards:
        raise DatabaseUnavailable("the management API read no shard; retry")
    return _untagged(shards[0])


def _merged(answer: dict[str, Any], key: str | None) -> Merged[Any]:
    """A fan-out route's answer as the Merged the CLI's own fan-out gives."""
    value = (
        answer[key]
        if key is not None
        else {
            k: v
            for k, v in answer.items()
            if k not in ("status", "unavailable_shards", "unavailable_reasons", "sharded")
        }
    )
    found = Merged(
        value,
        list(answer.get("unavailable_shards") or []),
        answer.get("status") or COMPLETE,
        answer.get("next_cursor"),
    )
    found.reasons = _reasons(answer)
    return found


class HttpReads:
    """The fan-out reads (harvest.shard.fanout.ShardReads) over the routes that make them."""

    def __init__(self, http: Http):
        self.http = http
        self.apis: dict[int, Any] = {}  # the shards are the server's; the CLI names none

    def list_workflows(
        self,
        *,
        state: str | None = None,
        workflow_name: str | None = None,
        search_attributes: list[str] | None = None,
        created_after: Any = None,
        created_before: Any = None,
        page_size: int = 50,
        cursor: str | None = None,
        order: str = "desc",
        filter: str | None = None,
        workflow_id: str | None = None,
        failing: bool | None = None,
    ) -> Merged[Any]:
        answer = self.http.get(
            "/workflows",
            state=state,
            workflow_name=workflow_name,
            workflow_id=workflow_id,
            failing=failing,
            search_attr=list(search_attributes or []),
            filter=filter,
            created_after=created_after,
            created_before=created_before,
            page_size=page_size,
            cursor=cursor,
            order=order,
        )
        found = _merged(answer, "executions")
        found.sharded = answer.get("sharded")
        return found

    def current_run(self, workflow_id: str, workflow_name: str | None = None) -> Merged[Any]:
        """The current run of a workflow id: GET /workflows/current (the server asks each shard)."""
        answer = self.http.get("/workflows/current", workflow_id=workflow_id, workflow_name=workflow_name)
        return _merged(answer, "execution")

    def count_executions(
        self,
        *,
        group_by: str = "status",
        state: str | None = None,
        workflow_name: str | None = None,
        search_attributes: list[str] | None = None,
        created_after: Any = None,
        created_before: Any = None,
        filter: str | None = None,
        limit: int | None = None,
        workflow_id: str | None = None,
        failing: bool | None = None,
    ) -> Merged[Any]:
        answer = self.http.get(
            "/workflows/count",
            limit=limit,
            workflow_id=workflow_id,
            failing=failing,
            group_by=group_by,
            state=state,
            workflow_name=workflow_name,
            search_attr=list(search_attributes or []),
            filter=filter,
            created_after=created_after,
            created_before=created_before,
            top=1000,  # every group: the CLI prints them all
        )
        return _merged(answer, "counts")

    def page_children(
        self,
        execution_id: str,
        status: str | None = None,
        depth: int = 1,
        page_size: int = CHILDREN_PAGE,
        cursor: str | None = None,
        max_nodes: int | None = None,
    ) -> Merged[Any]:
        """A page of the children and the cursor of the next, as the route answers it."""
        answer = self.http.get(
            f"/workflows/{_p(execution_id)}/children",
            status=status,
            depth=depth,
            page_size=page_size,
            cursor=cursor,
            max_nodes=max_nodes,
        )
        merged = _merged(answer, "items")
        merged.truncated = answer.get("truncated")
        # The route adds the spec's aliases (exec_id, started_at); the CLI prints the rows.
        merged.value = [
            {k: v for k, v in r.items() if k not in ("exec_id", "started_at")} for r in merged.value
        ]
        return merged

    def list_dead_letters(
        self,
        limit: int = 100,
        activity_name: str | None = None,
        workflow_name: str | None = None,
        cursor: str | None = None,
        before_id: int | None = None,
    ) -> Merged[Any]:
        answer = self.http.get(
            "/dead-letters",
            limit=limit,
            activity_name=activity_name,
            workflow_name=workflow_name,
            cursor=cursor,
            before_id=before_id,
        )
        return _merged(answer, "dead_letters")

    def count_dead_letters(self, group_by: str = "all") -> Merged[Any]:
        return _merged(self.http.get("/dead-letters/aggregate", group_by=group_by), "groups")

    def list_schedules(
        self,
        kind: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
        paused: bool | None = None,
    ) -> Merged[Any]:
        answer = self.http.get(
            "/admin/schedules",
            kind=kind,
            limit=limit,
            cursor=cursor,
            paused=None if paused is None else str(paused).lower(),
        )
        found = _merged(answer, "schedules")
        found.sharded = answer.get("sharded")
        # (as the fan-out's rows: the SQL's, with the shard each was read on)
        found.value = [{**_schedule_row(r), "shard_id": r["shard_id"]} for r in found.value]
        return found

    def list_audit_log(
        self, limit: int = 100, operation: str | None = None, cursor: str | None = None
    ) -> Merged[Any]:
        answer = self.http.get("/admin/audit", limit=limit, operation=operation, cursor=cursor)
        return _merged(answer, "entries")

    def list_pending_starts(
        self,
        workflow_name: str | None = None,
        kind: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Merged[Any]:
        answer = self.http.get(
            "/start-gates/pending", workflow_name=workflow_name, kind=kind, limit=limit, cursor=cursor
        )
        return _merged(answer, "pending_starts")

    def list_dags(self) -> Merged[Any]:
        return _merged(self.http.get("/dags"), "dags")

    def list_dag_runs(
        self, dag_name: str, limit: int = 50, status: str | None = None, cursor: str | None = None
    ) -> Merged[Any]:
        if status is not None:  # (the route filters by no status; no command asks it to)
            raise InvalidArgument("the DAG runs route filters by no status")
        return _merged(self.http.get(f"/dags/{_p(dag_name)}/runs", limit=limit, cursor=cursor), "runs")

    def list_workers(
        self,
        queue: str | None = None,
        status: str | None = None,
        health: str | None = None,
        shard_id: int | None = None,
        limit: int | None = None,
    ) -> Merged[Any]:
        answer = self.http.get(
            "/workers", queue=queue, status=status, health=health, shard_id=shard_id, limit=limit
        )
        found = _merged(answer, "workers")
        found.total = answer.get("total")
        return found

    def get_worker_health(self) -> Merged[Any]:
        return _merged(self.http.get("/workers/health"), None)

    def count_usage(self, from_: Any, to: Any, group_by: str = "workflow_name") -> Merged[Any]:
        answer = self.http.get("/admin/usage", **{"from": from_, "to": to, "group_by": group_by})
        rows = [
            {"group_name": g["group"], **{k: v for k, v in g.items() if k != "group"}}
            for g in answer["groups"]
        ]
        return Merged(rows, list(answer.get("unavailable_shards") or []), answer.get("status") or COMPLETE)

    def list_concurrency_keys(
        self, key: str | None = None, limit: int | None = None, cursor: str | None = None
    ) -> Merged[Any]:
        params = {"key": key, "limit": limit, "cursor": cursor}
        rows = self.http.request("GET", "/admin/concurrency", params=params)[1]
        # The route keeps the spec's bare array: a partial read and a next page are said in its headers.
        headers = self.http.last_headers
        missed = [int(s) for s in (headers.get("x-harvest-unavailable-shards") or "").split(",") if s]
        return Merged(
            rows, missed, headers.get("x-harvest-status") or COMPLETE, headers.get("x-harvest-next-cursor")
        )


# -- the client calls (start, result, query, update) --------------------------------------------


@dataclass
class HttpStarted:
    execution_id: str
    workflow_id: str
    started_fresh: bool
    shard_id: int | None = None


class HttpClient:
    """What the commands ask of harvest.client.Client, over the routes. ``payloads``: an App's
    (`--app`, harvest.cli.payloads): the API holds no keys and answers payloads as stored, so a
    result or an answer is decoded here, and what a command writes (a start's arguments, a
    signal's payload, a query's or an update's argument, an activity's result or heartbeat
    details) encoded here: the routes store an envelope as sent, for a worker to decode. Not
    offloaded: no route hands the CLI the App's store."""

    def __init__(self, http: Http, payloads: Any = None):
        self.http = http
        self.payloads = Payloads.of(payloads)

    def start_workflow(
        self,
        name: str,
        *args: Any,
        workflow_id: str | None = None,
        queue: str | None = None,
        reuse_policy: str | None = None,
        conflict_policy: str | None = None,
        shard_id: int | None = None,
        residency_key: str | None = None,
    ) -> HttpStarted:
        body = {
            "input": self.payloads.chain.encode_args(list(args)),
            "workflow_id": workflow_id,
            "queue": queue,
            "reuse_policy": reuse_policy,
            "conflict_policy": conflict_policy,
            "shard_id": shard_id,
            "residency_key": residency_key,
        }
        needs_admin = conflict_policy == "terminate_existing" or reuse_policy == "terminate_if_running"
        status, data = self.http.request(
            "POST",
            f"/workflows/{_p(name)}/start",
            json={k: v for k, v in body.items() if v is not None},
            scope="admin" if needs_admin else "operate",
        )
        return HttpStarted(
            data["execution_id"],
            data["workflow_id"],
            data.get("started_fresh", status == 201),
            data.get("shard_id"),
        )

    def get_handle(self, execution_id: str) -> HttpHandle:
        return HttpHandle(self.http, execution_id, self.payloads)

    def complete_activity(self, task_token: str, result: Any = None) -> Any:
        """As ``Client.complete_activity``: a repeat of the same result is ``already_completed``,
        judged on the decoded value (an encrypting codec sends new bytes each time)."""
        from harvest.client.client import _completed_with
        from harvest.core.task_token import TaskToken

        api = HttpApi(self.http)
        try:
            return api.complete_activity_by_token(task_token, self.payloads.chain.encode(result))
        except harvest_errors.StaleTask:
            events = api.get_history(TaskToken.parse(task_token).execution_id) if self.payloads.chain else []
            if events and _completed_with(self, task_token, result, events):
                return "already_completed"
            raise

    def heartbeat_activity(self, task_token: str, details: Any = None) -> Any:
        return HttpApi(self.http).heartbeat_activity_by_token(task_token, self.payloads.chain.encode(details))


# The longest wait one result request asks for (the route's own limit is 300 s).
RESULT_POLL_SECS = 60.0


class HttpHandle:
    def __init__(self, http: Http, execution_id: str, payloads: Any = None):
        self.http, self.execution_id = http, execution_id
        self.payloads = Payloads.of(payloads)  # (no codecs: a zlib payload decoded, a key named)

    def result(self, timeout: float | None = None) -> Any:
        """The run's result, by long polls of ``/result?wait=`` (204 while it runs)."""
        import time

        from harvest.client.client import _outcome

        deadline = None if timeout is None else time.monotonic() + timeout
        running = self.execution_id  # the run of the chain still running (continue-as-new)
        while True:
            left = RESULT_POLL_SECS if deadline is None else max(0.0, deadline - time.monotonic())
            wait = min(left, RESULT_POLL_SECS)
            status, data = self.http.request(
                "GET",
                f"/workflows/{_p(running)}/result",
                params={"wait": f"{wait:.3f}"},
                timeout=self.http.settings.timeout + wait,
            )
            if status == 200:
                if data.get("redacted") is True:
                    # A token made with --no-payloads: the output is its size, not the result, and
                    # the exit code would not say so (docs/http-api.md).
                    import click

                    click.echo(
                        "note: this token sees no payloads (made with --no-payloads): the result is "
                        "shown by its size; read it with a token made without --no-payloads",
                        err=True,
                    )
                execution = {
                    "id": data["execution_id"],
                    "status": data["state"],
                    "output": self.payloads.chain.decode_tree(data.get("output")),
                    "failure": data.get("error"),
                }
                return _outcome(execution, None)
            # The 204 names the run still running: after a continue-as-new, a successor, whose
            # stack says why it is stuck (the first run's, ended, says nothing).
            running = self.http.last_headers.get("x-harvest-execution-id") or running
            if deadline is not None and time.monotonic() >= deadline:
                from harvest.client.client import still_running

                raise still_running(self.execution_id, timeout, self._why_stuck(running))

    def _why_stuck(self, running: str) -> str:
        """What the SQL client's timeout says of a stuck run (a failing workflow task, a
        dead-lettered activity), read from the stack route of ``running`` (the run of the
        chain still running); "" when the read fails (a hint: the timeout is the answer)."""
        from harvest.client.client import why_stuck

        try:
            # Every entry the route gives (a failing activity may be far down a fan-out's list).
            stack = _obj(self.http.get(f"/workflows/{_p(running)}/stack", limit=STACK_LIMIT_MAX))
        except Exception:
            return ""
        return why_stuck(stack)

    def signal(self, name: str, payload: Any = None) -> Any:
        encoded = self.payloads.chain.encode(payload)
        return HttpApi(self.http).signal_workflow(self.execution_id, name, encoded)

    def query(self, name: str, arg: Any = None, timeout: float = 10.0) -> Any:
        body = {"query_name": name, "input": self.payloads.chain.encode(arg), "timeout_secs": timeout}
        answer = self.http.post(
            f"/workflows/{_p(self.execution_id)}/query",
            body,
            timeout=self.http.settings.timeout + timeout,
        )
        return self.payloads.chain.decode_tree(answer["result"])

    def update(
        self,
        name: str,
        arg: Any = None,
        *,
        wait: str = "completed",
        timeout: float = 30.0,
        update_id: str | None = None,
    ) -> Any:
        body = {
            "update_name": name,
            "input": self.payloads.chain.encode(arg),
            "wait": wait,
            "timeout_secs": timeout,
            "update_id": update_id,
        }
        # The spec: an update waited to completion gets its own timeout plus 10 s; more time than
        # the request timeout, never less.
        budget = None
        if wait == "completed":
            budget = max(self.http.settings.timeout, timeout + UPDATE_MARGIN_SECS)
        answer = self.http.post(f"/workflows/{_p(self.execution_id)}/update", body, timeout=budget)
        if answer.get("status") == "accepted":
            from harvest.client.messages import UpdateHandle

            return UpdateHandle(None, self.execution_id, answer["update_id"], name)
        return self.payloads.chain.decode_tree(answer["result"])
