"""The search attribute key rule: the keys a filter can name (letters, digits, _, . and -), and so
the keys a range test reads and `harvest search-attr index` builds an index for. The SQL's one
rule is ``harvest._search_attr_key_ok`` (functions/executions.sql); a test holds the two to the
same answers (tests/integration/test_search_attr_indexes.py)."""

from __future__ import annotations

import re

SEARCH_ATTR_KEY = re.compile(r"[A-Za-z0-9_.\-]+")
# A report grouped by a search attribute: group_by=search_attr:<key> (count_usage).
GROUP_BY_PREFIX = "search_attr:"


def is_search_attr_key(key: object) -> bool:
    """Whether ``key`` is a search attribute key a filter can name (:data:`SEARCH_ATTR_KEY`)."""
    return isinstance(key, str) and SEARCH_ATTR_KEY.fullmatch(key) is not None
