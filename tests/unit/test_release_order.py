"""Which of two Harvest releases is the newer (harvest.db.migrate.release_order): the migrator's
rule for refusing to put an older release's function files back over a newer one's. PEP 440's
order for the versions a built package has, without the `packaging` dependency."""

from __future__ import annotations

import itertools

import pytest

from harvest.db.migrate import release_order

ASCENDING = [
    "0.9",
    "1.0.dev1",
    "1.0a1.dev1",
    "1.0a1",
    "1.0a2",
    "1.0b1",
    "1.0rc1",
    "1.0",
    "1.0.post1.dev1",
    "1.0.post1",
    "1.0.1",
    "1.0.10",
    "1.1",
    "2.0.0",
    "10.0",
]


def test_versions_sort_as_pep_440_orders_them() -> None:
    assert sorted(ASCENDING[1::2] + ASCENDING[::2], key=release_order) == ASCENDING
    for older, newer in itertools.pairwise(ASCENDING):
        assert release_order(older) < release_order(newer), (older, newer)


@pytest.mark.parametrize(
    ("a", "b"), [("1.0", "1.0.0"), ("1.2", "1.2.0.0"), ("1.0+g1234", "1.0"), ("V1.0", "1.0")]
)
def test_spellings_of_one_release_are_the_same_release(a: str, b: str) -> None:
    assert release_order(a) == release_order(b)


@pytest.mark.parametrize("odd", ["unknown", "", None, "1.0-foo", "latest", "1..0"])
def test_an_unknown_version_is_the_oldest(odd: str | None) -> None:
    assert release_order(odd) == release_order("unknown") == release_order(None)
    assert release_order(odd) < release_order("0.0.0.dev0")
