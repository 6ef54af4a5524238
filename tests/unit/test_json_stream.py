"""harvest.cli.json_stream: a compact JSON text, re-indented as it arrives, is the text
json.dumps(indent=2) gives of the whole document, however the text is cut; a text that is not
JSON, or ends short, raises."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from harvest.cli.json_stream import Reindented, reindented

DOCUMENTS: list[Any] = [
    {},
    [],
    "text",
    5,
    [[[]]],
    {"a": [], "b": {}, "c": [[], {}], "d": [{"x": [{"y": []}]}]},
    {"n": [0, -0.0, 1, -17, 2.5, 1e300, 10**120, float("nan"), float("inf"), -float("inf")]},
    {"s": 'é"\\\n\t\u2603\U0001f600 \x00\x7f', "kéy ☃": None, "t": True, "f": False, 'q"\\': "/"},
    {
        "schema": "harvest.history_export_batch",
        "status": "partial",
        "exports": [{"events": [1, {"e": "x"}]}, {"events": []}],
        "failures": [{"error": "gone"}],
        "shard_coverage": {"read": [1], "unavailable": [2]},
    },
]


def _compact(value: Any) -> str:  # the management API's text (harvest.web.errors.compact_json)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@pytest.mark.parametrize("value", DOCUMENTS, ids=range(len(DOCUMENTS)))
def test_the_text_is_json_dumps_indent_2_however_it_is_cut(value: Any) -> None:
    text = _compact(value)
    whole = json.dumps(json.loads(text), indent=2)
    cuts = random.Random(7)
    for _ in range(60):
        at = sorted(cuts.sample(range(len(text) + 1), min(len(text) + 1, cuts.randint(0, 10))))
        pieces = [text[a:b] for a, b in zip([0, *at], [*at, len(text)], strict=True)]
        assert "".join(reindented(pieces, Reindented())) == whole, pieces
    one_by_one = "".join(reindented(list(text), Reindented()))
    assert one_by_one == whole


def test_it_keeps_the_top_level_members_but_the_streamed_ones_which_it_counts() -> None:
    document = Reindented(streamed=("exports",))
    "".join(reindented([_compact(DOCUMENTS[-1])], document))
    assert document.items == {"exports": 2}
    assert document.members == {k: v for k, v in DOCUMENTS[-1].items() if k != "exports"}


@pytest.mark.parametrize(
    "text",
    ['{"a":1', '{"a":[1,', '"abc', '{"a" 1}', "[1,]", "[1 2]", '{"a":1}}', "{1:2}", "[tru]", "", "[1]x"],
)
def test_a_text_that_is_not_json_or_ends_short_raises(text: str) -> None:
    with pytest.raises(ValueError):
        "".join(reindented([text[:3], text[3:]], Reindented()))
