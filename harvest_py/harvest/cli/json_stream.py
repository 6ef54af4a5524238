"""A JSON text re-indented as it arrives: the bytes ``json.dumps(json.loads(text), indent=2)``
gives, written piece by piece, holding one token (a string, a number) at a time rather than the
document. The CLI over HTTP writes a streamed answer (the API's compact JSON) this way, in the
bytes it writes the same document in over SQL.

The text is checked as JSON as it goes: a text that is not JSON, or ends before its document
does (an answer broken off), raises ValueError, by the end at the latest. (A key given twice in
one object, which json.loads would keep once, is written twice: the API writes none.)
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

_INDENT = "  "
_SPACE = re.compile(r"[ \t\n\r]*")
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
# Numbers and the literals (true, false, null, and NaN, Infinity, -Infinity, which Python's
# json reads and writes); json.loads checks each.
_SCALAR = re.compile(r"[-+0-9.eEa-zA-Z]+")
# Tokens json.dumps writes back as they are (printable ASCII strings with nothing escaped, plain
# integers, the literals): most of a document, so most tokens skip a json round trip.
_AS_IS = re.compile(r'"[ !#-\[\]-~]*"|0|-?[1-9][0-9]{0,99}|true|false|null')


class Reindented:
    """Feed it the text (:meth:`feed`, then :meth:`end`); each call answers the re-indented text
    of what it could read so far. Of a top-level object it keeps the members (``members``) but
    those named in ``streamed``, whose array items it only counts (``items``): what a command
    says of the document once written."""

    def __init__(self, streamed: Iterable[str] = ()) -> None:
        self._streamed = frozenset(streamed)
        self._text = ""
        # One [kind, items so far] per open container; what may come next.
        self._open: list[list[Any]] = []
        self._want = "value"
        self._member: str | None = None  # the top-level member being read
        self._kept: list[str] | None = None  # its compact text, when it is kept
        self.members: dict[str, Any] = {}
        self.items: dict[str, int] = {}

    def feed(self, text: str) -> str:
        self._text += text
        return self._read(final=False)

    def end(self) -> str:
        written = self._read(final=True)
        if self._want != "end" or self._text.strip():
            raise ValueError("the text ends before its JSON document does")
        return written

    def _read(self, final: bool) -> str:
        text, at, out = self._text, 0, []
        while True:
            at = _SPACE.match(text, at).end()  # type: ignore[union-attr]
            if at == len(text):
                break
            if text[at] == '"':
                match = _STRING.match(text, at)
                if match is None:  # the string goes on in the next piece
                    break
            elif text[at] in "{}[]:,":
                match = None
            else:
                match = _SCALAR.match(text, at)
                if match is None:
                    raise ValueError(f"not JSON at {text[at : at + 20]!r}")
                if match.end() == len(text) and not final:  # (the number may go on)
                    break
            token = text[at] if match is None else match.group()
            at += len(token)
            out.append(self._token(token))
        self._text = text[at:]
        return "".join(out)

    def _token(self, token: str) -> str:
        want, open_ = self._want, self._open
        if token in ":,":
            if (token, want) == (":", "colon"):
                self._want = "value"
            elif (token, want) == (",", "comma or close"):
                self._want = "key" if open_[-1][0] == "{" else "value"
            else:
                raise ValueError(f"not JSON: {token!r} where a {want} was due")
            if len(open_) > 1:
                self._keep(token)
            return ""
        if token in "}]":
            kind = "{" if token == "}" else "["
            if (
                not open_
                or open_[-1][0] != kind
                or want not in ("comma or close", "key or }" if kind == "{" else "value or ]")
            ):
                raise ValueError(f"not JSON: {token!r} where a {want} was due")
            _, items = open_.pop()
            if len(open_) == 1 and self._member in self._streamed:
                self.items[self._member] = items
            written = token if not items else "\n" + _INDENT * len(open_) + token
            self._keep(token)
            return written + self._done()
        if want in ("key", "key or }"):  # a member's name
            if token[0] != '"':
                raise ValueError(f"not JSON: {token[:20]!r} where a key was due")
            same = _AS_IS.fullmatch(token) is not None
            key = token[1:-1] if same else json.loads(token)
            if len(open_) == 1:
                self._member, self._kept = key, (None if key in self._streamed else [])
            else:
                self._keep(token)
            self._want = "colon"
            return self._next_item() + (token if same else json.dumps(key)) + ": "
        if want not in ("value", "value or ]"):
            raise ValueError(f"not JSON: {token[:20]!r} where a {want} was due")
        written = self._next_item() if open_ and open_[-1][0] == "[" else ""  # (an item of an array)
        self._keep(token)
        if token in "{[":
            open_.append([token, 0])
            self._want = "key or }" if token == "{" else "value or ]"
            return written + token
        same = _AS_IS.fullmatch(token) is not None
        return written + (token if same else json.dumps(json.loads(token))) + self._done()

    def _next_item(self) -> str:
        """What goes before the next item of the innermost container."""
        frame = self._open[-1]
        frame[1] += 1
        return ("\n" if frame[1] == 1 else ",\n") + _INDENT * len(self._open)

    def _keep(self, token: str) -> None:
        if self._open and self._kept is not None:
            self._kept.append(token)

    def _done(self) -> str:
        """A value is whole: a kept top-level member is read; what may come next."""
        if not self._open:
            self._want = "end"
            return ""
        if len(self._open) == 1 and self._kept is not None and self._member is not None:
            self.members[self._member] = json.loads("".join(self._kept))
            self._kept = None
        self._want = "comma or close"
        return ""


def reindented(pieces: Iterable[str], document: Reindented) -> Iterator[str]:
    """``document``'s re-indented text of ``pieces``, a piece as each arrives (none empty)."""
    for piece in pieces:
        written = document.feed(piece)
        if written:
            yield written
    written = document.end()
    if written:
        yield written
