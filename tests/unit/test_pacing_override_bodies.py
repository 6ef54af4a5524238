"""The two pacing overrides over HTTP (an activity's rate limit, a workflow's start throttle)
take the same rps, burst and ttl_secs, checked against the same bounds before any SQL runs."""

from __future__ import annotations

from typing import Any

import pytest

from harvest.core.errors import InvalidArgument
from harvest.web.routes import Endpoint, admin, check_body, lifecycle

OVERRIDES = {
    "/admin/rate-limits/{activity_name}/override": admin.ENDPOINTS,
    "/admin/start-throttles/{workflow_name}/override": lifecycle.ENDPOINTS,
}


def _post(path: str) -> Endpoint:
    (found,) = [e for e in OVERRIDES[path] if e.path == path and e.method == "POST"]
    return found


@pytest.mark.parametrize("path", sorted(OVERRIDES))
@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"rps": 0.0005}, "rps"),
        ({"rps": 1_000_001}, "rps"),
        ({"rps": 1, "burst": 0.5}, "burst"),
        ({"rps": 1, "burst": 1_000_001}, "burst"),
        ({"rps": 1, "ttl_secs": 0.5}, "ttl_secs"),
        ({"rps": 1, "ttl_secs": 604_801}, "ttl_secs"),
        ({"burst": 2}, "rps"),
    ],
)
def test_an_override_out_of_bounds_is_refused_naming_the_field(
    path: str, data: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidArgument, match=f"^{field}: "):
        check_body(_post(path).body or {}, data)


@pytest.mark.parametrize("path", sorted(OVERRIDES))
def test_an_override_at_its_bounds_is_taken(path: str) -> None:
    body = _post(path).body or {}
    for data in (
        {"rps": 0.001, "burst": 1, "ttl_secs": 1},
        {"rps": 1_000_000, "burst": 1_000_000, "ttl_secs": 604_800},
    ):
        assert check_body(body, data) == data
