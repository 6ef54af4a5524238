"""Reading the docs' Markdown for the docs checks (tests/unit/test_docs_*.py).

The pages: docs/**/*.md, README.md and examples/*/README*. A page is split into its fenced
code blocks (with their language and first line) and its prose, whose inline code spans
(`...`, possibly over a line break, never over a blank line) are found with their line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")


def doc_pages(*, examples: bool = True) -> list[Path]:
    pages = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]
    if examples:
        pages += sorted((ROOT / "examples").glob("*/README*"))
    return pages


def where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT)}:{line}"


@dataclass(frozen=True)
class Block:
    """A fenced code block: its language ('' when none), its first line's number, its text,
    and the line before its fence (a marker comment may sit there)."""

    path: Path
    lang: str
    line: int  # the line number of the block's first line of code
    text: str
    before: str


@dataclass(frozen=True)
class Span:
    """An inline code span of the prose, `\\|` (a table's escaped pipe) read as `|`."""

    path: Path
    line: int
    text: str


def split_page(path: Path) -> tuple[list[Block], list[tuple[int, str]]]:
    """The page's fenced blocks, and its prose lines (number, text) outside them."""
    blocks: list[Block] = []
    prose: list[tuple[int, str]] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if match is None:
            prose.append((i + 1, lines[i]))
            i += 1
            continue
        fence, lang = match.group(2), match.group(3).lower()
        before = lines[i - 1] if i > 0 else ""
        start = i + 1
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            i += 1
        indent = len(match.group(1))
        body = [line[indent:] if line[:indent].strip() == "" else line.lstrip() for line in lines[start:i]]
        blocks.append(Block(path, lang, start + 1, "\n".join(body), before))
        prose.append((i + 1, ""))  # the closing fence ends any paragraph
        i += 1
    return blocks, prose


INLINE = re.compile(r"(`+)(?!`)((?:[^`\n]|\n(?![ \t]*\n))+?)(?<!`)\1(?!`)")


def inline_spans(path: Path, prose: list[tuple[int, str]]) -> Iterator[Span]:
    """The inline code spans of the prose lines: paragraphs are joined so a span may cross
    one line break, as Markdown allows."""
    paragraph: list[tuple[int, str]] = []
    for number, text in [*prose, (0, "")]:
        if text.strip():
            paragraph.append((number, text))
            continue
        if paragraph:
            starts, joined = [], ""
            for n, t in paragraph:
                starts.append((len(joined), n))
                joined += t + "\n"
            for match in INLINE.finditer(joined):
                offset = match.start()
                line = max(n for s, n in starts if s <= offset)
                yield Span(path, line, match.group(2).replace("\\|", "|").strip())
        paragraph = []
