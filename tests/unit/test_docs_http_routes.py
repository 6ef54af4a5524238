"""Every HTTP route the docs name exists in the management API, with that method.

Two forms are read (tests/unit/docs_scan.py's pages, the whole text):
- `METHOD /path` (GET, POST, PUT, PATCH, DELETE), as in http-api.md's tables; `POST`/`DELETE
  /path` names both methods, `/activities/complete|fail|heartbeat` each segment; the query
  string is dropped.
- a curl command line in a fenced block whose URL is `$H/...` (http-api.md's
  `H=http://localhost:8080/api/harvest`) or `http://host:port/api/harvest/...` (`harvest
  serve`'s mount); its method is `-X`, else POST with a body (`-d`, `--data...`, `--json`)
  unless `--get`, else GET.

A path is matched against the routes of `management_app` (introspected, no request made; its
mounted dashboard at /ui included), one segment at a time: a route's `{param}` matches any
segment; a doc's placeholder segment (`{id}`, `$ID`, `<id>`, `…`) matches only a `{param}`.
Routes of the examples' own apps (examples/billing: `POST /orders`) are not Harvest's: in the
examples' READMEs only paths under /api/harvest are checked.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from itertools import product

import pytest
from docs_scan import doc_pages, split_page, where
from starlette.routing import BaseRoute, Mount, Route

from harvest.cli.serve import MOUNT
from harvest.config.config import config_from_mapping
from harvest.web.app import management_app

METHODS = "GET|POST|PUT|PATCH|DELETE"
NAMED = re.compile(rf"((?:\b(?:{METHODS})`?\s*/\s*`?)*)\b({METHODS})\s+(/[^\s`'\"<>),;]*)")
CURL = re.compile(r"(?:^|[\s;|&(`])curl\s(.*)")
URL = re.compile(r"""(?:^|\s)["']?(\$\{?H\}?|(?:https?://)?[\w.-]+:\d+|(?:https?://)[\w.-]+)(/[^\s"']*)""")
PLACEHOLDER = re.compile(r"^(?:\{.*\}|\$\{?\w+\}?|<.*>|.*….*|\.\.\.)$")


@dataclass(frozen=True)
class Named:
    place: str
    method: str
    path: str


@cache
def routes() -> tuple[tuple[frozenset[str], tuple[str, ...]], ...]:
    """(methods, path segments) of every route of the management API."""
    config = config_from_mapping({}, "docs check", env={})
    app = management_app(dsn="postgresql://docs@localhost/check", config=config, profile="dev")
    found: list[tuple[frozenset[str], tuple[str, ...]]] = []

    def walk(prefix: str, table: list[BaseRoute]) -> None:
        for route in table:
            if isinstance(route, Mount):
                walk(prefix + route.path, route.routes)
            elif isinstance(route, Route):
                path = (prefix + route.path).rstrip("/") or "/"
                found.append((frozenset(route.methods or ()), tuple(path.strip("/").split("/"))))

    walk("", app.routes)
    return tuple(found)


def _segment_matches(doc: str, route: str) -> bool:
    if route.startswith("{") and route.endswith("}"):
        return doc != ""
    return doc == route and not PLACEHOLDER.match(doc)


def exists(method: str, path: str) -> bool:
    segments = tuple(path.strip("/").split("/"))
    return any(
        method in methods
        and len(route) == len(segments)
        and all(_segment_matches(d, r) for d, r in zip(segments, route, strict=True))
        for methods, route in routes()
    )


def _expanded(path: str) -> Iterator[str]:
    """`/activities/complete|fail|heartbeat` is three paths."""
    path = path.split("?", 1)[0].split("#", 1)[0].rstrip(".:")
    segments = [segment.split("|") for segment in path.split("/")]
    for choice in product(*segments):
        yield "/".join(choice)


def _curl(arguments: str) -> tuple[str, str] | None:
    """(method, path under the API) of a curl command line, or None if its URL is not the API's."""
    url = URL.search(arguments)
    if url is None:
        return None
    base, path = url.groups()
    if not base.startswith("$"):
        if not (path == MOUNT or path.startswith(MOUNT + "/")):
            return None
        path = path[len(MOUNT) :] or "/"
    explicit = re.search(r"(?:-X|--request)\s+([A-Z]+)", arguments)
    if explicit:
        method = explicit.group(1)
    elif re.search(r"(?:^|\s)(?:-d|--data[\w-]*|--json|-F|--form)\s", arguments) and not re.search(
        r"(?:^|\s)(?:--get|-G)(?:\s|$)", arguments
    ):
        method = "POST"
    else:
        method = "GET"
    return method, path


def named_routes() -> list[Named]:
    found: list[Named] = []
    for page in doc_pages():
        example = page.parent.parent.name == "examples"
        text = page.read_text()
        blocks, _ = split_page(page)
        for match in NAMED.finditer(text):  # over the whole text: `GET` may end a line
            number = text.count("\n", 0, match.start(2)) + 1
            methods = [*re.findall(METHODS, match.group(1)), match.group(2)]
            path = match.group(3)
            if example:
                if not path.startswith(MOUNT + "/"):
                    continue
                path = path[len(MOUNT) :]
            found += [Named(where(page, number), m, p) for m in methods for p in _expanded(path)]
        for block in blocks:
            if block.lang not in ("", "sh", "bash", "console", "shell"):
                continue
            for offset, line in _continued(block.text):
                match = CURL.search(line)
                curl = _curl(match.group(1)) if match else None
                if curl is not None:
                    place = where(page, block.line + offset)
                    found += [Named(place, curl[0], p) for p in _expanded(curl[1])]
    return found


def _continued(text: str) -> Iterator[tuple[int, str]]:
    """(offset of its first line, text) of each line with backslash continuations joined."""
    pending, start = "", 0
    for offset, line in enumerate(text.splitlines()):
        if not pending:
            start = offset
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        yield start, pending + line
        pending = ""


def test_the_docs_name_routes() -> None:
    found = named_routes()
    assert len(found) >= 150, f"only {len(found)} routes named in the docs: has the scan broken?"
    assert len({n.place.split(":")[0] for n in found}) >= 5


def test_every_route_the_docs_name_exists() -> None:
    missing = [
        f"{n.place}: `{n.method} {n.path}`: no such route"
        for n in named_routes()
        if not exists(n.method, n.path)
    ]
    assert not missing, "the docs name routes the management API does not have:\n" + "\n".join(missing)


# the pages that document the API's routes (the dashboard's pages, under /ui, are dashboard.md's)
API_PAGES = ("docs/http-api.md", "docs/event-streams.md", "docs/observability.md")


def test_every_route_is_documented() -> None:
    """The other way round: each route of the app is named on one of the API's pages."""
    named: dict[str, list[tuple[str, ...]]] = {}
    for n in named_routes():
        if n.place.startswith(API_PAGES):
            named.setdefault(n.method, []).append(tuple(n.path.strip("/").split("/")))
    undocumented = [
        f"{method} /{'/'.join(route)}"
        for methods, route in routes()
        if route[0] != "ui"
        for method in sorted(methods - {"HEAD"})
        if not any(
            len(doc) == len(route)
            and all(d == r or _segment_matches(d, r) for d, r in zip(doc, route, strict=True))
            for doc in named.get(method, [])
        )
    ]
    assert not undocumented, f"routes no page of {API_PAGES} names: {undocumented}"


# Every route the spec names (spec/*.txt; under its /api/harvest mount), in the spec's own
# spelling: each is a requirement, so each must answer as the spec writes it (where ours is
# spelled otherwise, an alias of the same route serves the spec's: Endpoint.aliases).
SPEC_ROUTES = [
    *(
        ("GET", f"/admin/{name}")
        for name in (
            "concurrency",
            "config",
            "metrics",
            "preflight",
            "queue-coverage",
            "queues/scaling",
            "retention",
            "shards/health",
            "usage",
            "version-gates/usage",
        )
    ),
    ("POST", "/admin/retention/run-now"),
    ("POST", "/admin/rate-limits/{activity_name}/override"),
    ("DELETE", "/admin/rate-limits/{activity_name}/override"),
    ("POST", "/admin/start-throttle/{workflow_name}/override"),  # singular: ours is plural
    ("DELETE", "/admin/start-throttle/{workflow_name}/override"),
    ("POST", "/admin/schedules/workflow"),
    ("GET", "/admin/schedules"),
    ("POST", "/admin/schedules/{id}/pause"),
    ("POST", "/admin/schedules/{id}/resume"),
    ("DELETE", "/admin/schedules/{id}"),
    ("POST", "/dead-letters/replay"),
    ("POST", "/dead-letters/discard"),
    ("GET", "/health"),
    ("GET", "/health/live"),
    ("GET", "/health/ready"),
    ("GET", "/workers"),
    ("GET", "/workers/health"),
    ("GET", "/workers/{worker_id}"),
    ("POST", "/workers/<worker-id>/drain"),
    ("GET", "/workers/drain-preview"),
    ("GET", "/workflows"),
    ("GET", "/workflows/count"),
    ("GET", "/workflows/registered"),
    ("GET", "/workflows/types/{workflow_name}/handlers"),
    ("GET", "/workflows/{id}"),
    ("GET", "/workflows/{id}/result"),
    ("GET", "/workflows/{execution_id}/stack"),
    ("GET", "/workflows/{id}/children"),
    ("GET", "/workflows/{id}/tree"),
    ("GET", "/workflows/{id}/events/stream"),
    ("POST", "/workflows/{name}/start"),
    ("POST", "/workflows/{name}/signal-with-start"),
    ("POST", "/workflows/{name}/update-with-start"),
    ("POST", "/workflows/{id}/erase-payloads"),
    ("GET", "/stream"),
    ("GET", "/stream/durable"),
    ("GET", "/ui"),
    ("GET", "/ui/workers"),
]


@pytest.mark.parametrize(("method", "path"), SPEC_ROUTES)
def test_every_route_the_spec_names_answers_under_its_spelling(method: str, path: str) -> None:
    assert exists(method, path), f"the spec names `{method} {path}`: no such route"


@pytest.mark.parametrize(
    ("method", "path", "found"),
    [
        ("GET", "/workflows/{execution_id}/history", True),
        ("GET", "/workflows/$ID/history", True),
        ("GET", "/workflows/count", True),
        ("GET", "/workflows/{id}/events/stream", True),
        ("GET", "/ui/workflows", True),
        ("DELETE", "/admin/schedules/daily", True),
        ("POST", "/workflows/count", False),
        ("GET", "/workflows/{id}/nope", False),
        ("GET", "/admin/{name}", False),  # a placeholder never stands for a literal segment
    ],
)
def test_the_match_itself(method: str, path: str, found: bool) -> None:
    assert exists(method, path) is found


def test_the_forms_are_read() -> None:
    assert list(_expanded("/activities/complete|fail|heartbeat?x=1")) == [
        "/activities/complete",
        "/activities/fail",
        "/activities/heartbeat",
    ]
    assert _curl("-s -X POST $H/workflows/$ID/cancel -d '{}'") == ("POST", "/workflows/$ID/cancel")
    assert _curl("-s \"$H/workflows\" --get --data-urlencode 'filter=x'") == ("GET", "/workflows")
    assert _curl("-s -d '{}' http://localhost:8080/api/harvest/admin/tokens") == ("POST", "/admin/tokens")
    assert _curl("-s localhost:8000/orders/A-1") is None
    line = "Over HTTP (admin): `POST`/`DELETE /admin/x/{n}/override` and `GET /admin/y`"
    assert [(m.group(1), m.group(2), m.group(3)) for m in NAMED.finditer(line)] == [
        ("POST`/`", "DELETE", "/admin/x/{n}/override"),
        ("", "GET", "/admin/y"),
    ]
