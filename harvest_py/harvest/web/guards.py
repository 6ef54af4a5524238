"""What the management API and the dashboard check of a request before they act on it
(docs/security.md, "The web faces"): that no other site's page sent it, that its body is not
larger than they take (read with a cap, never whole), and its JSON. One place for both faces.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harvest.core import jsonb
from harvest.core.errors import PayloadTooLarge
from harvest.core.jsonb import MAX_JSON_DEPTH  # (the deepest JSON a web face takes)
from harvest.db.connection import is_local_host

if TYPE_CHECKING:
    from starlette.requests import Request

# What a browser says of a request it sends from our own pages (or one the user typed).
_OUR_SITE = ("same-origin", "none")


def cross_site(request: Request) -> str | None:
    """Why ``request`` is refused as sent by another site's page, or None.

    A browser names where a request comes from: ``Sec-Fetch-Site`` (anything but same-origin is
    refused) and ``Origin`` (it must be this server's; ``null``, a sandboxed frame's or one
    after a redirect from elsewhere, is not). A request with neither is not a browser's (curl,
    the CLI, a proxy), or one too old to say either: it passes; such a client carries no
    cookie of ours it did not put there itself."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site.strip().lower() not in _OUR_SITE:
        return f"a request another site's page sent (Sec-Fetch-Site: {site}) is refused"
    origin = request.headers.get("origin")
    if origin is not None:
        ours = f"{request.url.scheme}://{request.headers.get('host', '')}"
        if origin.strip().lower() != ours.lower():
            return f"a request from {origin} is refused: it is not this server's own page"
    return None


def _loopback(host: str) -> bool:
    """Whether a Host header names this machine: a loopback name or address, its port aside,
    or a ``*.localhost`` name (RFC 6761: never resolved elsewhere)."""
    name = host.strip().lower()
    if name.startswith("["):  # [::1]:8080
        name = name[: name.find("]") + 1] if "]" in name else name
    elif name.count(":") == 1:  # localhost:8080, 127.0.0.1:8080
        name = name.rsplit(":", 1)[0]
    return (
        bool(name)
        and not name.startswith(("/", "@"))
        and (is_local_host(name) or name.endswith(".localhost"))
    )


def foreign_host(request: Request) -> str | None:
    """For a server that serves whoever reaches it (the dev profile): why a browser's request
    that names another host than this machine's loopback is refused, or None. A page of another
    site whose name was pointed at 127.0.0.1 (DNS rebinding) is, to the browser, that site's own
    page: its Origin and Host agree, so cross_site lets it through. A request that does not come
    from a browser (no Origin, no Sec-Fetch-*: curl, the CLI, a client library) is not judged."""
    if not any(h in request.headers for h in ("origin", "sec-fetch-site", "sec-fetch-mode")):
        return None
    host = request.headers.get("host", "")
    if _loopback(host):
        return None
    return (
        f"the dev profile serves a browser only at localhost; this request names {host or 'no host'} "
        "(a page of another site pointed at this machine?): open it at http://localhost, or give "
        "the server API tokens (a non-dev profile) to serve it under other names"
    )


def declared_too_large(request: Request, limit: int) -> PayloadTooLarge | None:
    """The refusal of a body whose ``Content-Length`` is over ``limit``, before a byte is read."""
    declared = (request.headers.get("content-length") or "").strip()
    if declared.isdigit() and int(declared) > limit:
        return body_too_large(limit, int(declared))
    return None


def body_too_large(limit: int, size: int | None = None) -> PayloadTooLarge:
    """The 413 of a request body over ``limit`` bytes (``size``: what it declared, when known):
    its size, the limit, and what to do, in the fields a payload's 413 has."""
    said = f"is {size} bytes, over" if size is not None else "is over"
    return PayloadTooLarge(
        f"the request body {said} the limit of {limit} bytes: send less in one request "
        "(keep large data outside the engine and pass a reference, docs/payloads.md)",
        "the request body",
        size,
        limit,
    )


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body, read as it streams in and given up past ``limit`` bytes (whatever
    ``Content-Length`` said): PayloadTooLarge (413)."""
    refused = declared_too_large(request, limit)
    if refused is not None:
        raise refused
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise body_too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def is_json(request: Request) -> bool:
    """Whether the request says its body is JSON (``application/json``, or a ``+json`` type).
    A browser sends no such body to another site without asking it first (CORS preflight)."""
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


class NotJsonNumber(ValueError):
    """A number JSON has no spelling for (``NaN``, ``Infinity``) or no float holds (``1e999``),
    which Python's parser takes; ``field``: where it was (``input[0]``, ``body`` at the top)."""

    def __init__(self, text: str, field: str):
        super().__init__(text)
        self.field = field


@dataclass(frozen=True)
class _NonFiniteNumber:
    """A number parse_json read that JSON cannot carry (NaN, Infinity, past a float's range)."""

    text: str  # the number as sent


def _number(text: str) -> Any:
    value = float(text)
    return _NonFiniteNumber(text) if math.isinf(value) else value


def parse_json(text: str | bytes) -> Any:
    """JSON text as a value; ValueError for anything that is not JSON, nested deeper than
    MAX_JSON_DEPTH included (the parser's RecursionError, which is no ValueError, too), and
    NotJsonNumber for NaN, Infinity (Python's parser takes them: no JSON does) and a number past
    a float's range (read as infinity), naming where it was."""
    value = jsonb.loads(text, parse_constant=_NonFiniteNumber, parse_float=_number)
    if json_depth(value) > MAX_JSON_DEPTH:
        raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels")
    _refuse_non_finite(value)
    return value


def _refuse_non_finite(value: Any) -> None:
    """NotJsonNumber for the first :class:`_NonFiniteNumber` in ``value`` (walked without recursion)."""
    level: list[tuple[Any, str]] = [(value, "")]
    while level:
        item, where = level.pop()
        if isinstance(item, _NonFiniteNumber):
            spelt = item.text in ("NaN", "Infinity", "-Infinity")
            what = "is not JSON" if spelt else "is past a float's range"
            said = f"{item.text[:40]} {what}: send a finite number, or a string"
            raise NotJsonNumber(said, where or "body")
        if isinstance(item, dict):
            level.extend((v, f"{where}.{k}" if where else str(k)) for k, v in reversed(item.items()))
        elif isinstance(item, list):
            level.extend((v, f"{where}[{i}]") for i, v in reversed(list(enumerate(item))))


def json_depth(value: Any) -> int:
    """How deep arrays and objects nest in ``value`` (a scalar: 0), walked without recursion."""
    deepest, level = 0, [(value, 1)]
    while level:
        item, depth = level.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        level.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return deepest
