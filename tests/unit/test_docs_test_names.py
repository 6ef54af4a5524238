"""A test a page names in an inline span (`test_...`) exists: a test function (`def test_...`) or
a test module (`test_....py`) under tests/ or bench/. docs/testing.md once cited a test, by a name
it no longer had, for a bound that test no longer asserted.

The pages: tests/unit/docs_scan.py. Names that are not tests are listed with their reason.
"""

from __future__ import annotations

import re
from functools import cache

from docs_scan import ROOT, doc_pages, inline_spans, split_page, where

TEST_NAME = re.compile(r"test_\w+")
NOT_TESTS = {"test_clock_allowed": "a column of harvest.engine_settings (security.md)"}


@cache
def known_tests() -> frozenset[str]:
    found: set[str] = set()
    for folder in ("tests", "bench"):
        for path in (ROOT / folder).rglob("*.py"):
            found.add(path.stem)
            found |= set(re.findall(r"^\s*(?:async\s+)?def (test_\w+)", path.read_text(), re.M))
    return frozenset(found)


def test_every_test_a_page_names_exists() -> None:
    missing = [
        f"{where(span.path, span.line)}: `{span.text}`"
        for page in doc_pages()
        for span in inline_spans(page, split_page(page)[1])
        if TEST_NAME.fullmatch(span.text.removesuffix(".py"))
        and span.text.removesuffix(".py") not in known_tests()
        and span.text not in NOT_TESTS
    ]
    assert not missing, "no such test (renamed or removed? cite its current name):\n" + "\n".join(missing)
