"""schemathesis over /openapi.json: generated requests against the management API's ASGI app
(in process, its lifespan run; a real Postgres behind it) find no 500, no undeclared status, no
answer that breaks its declared schema. Bounded: a few examples per operation.

Its CPU is the pytest process' alone (the negative requests are refused before the database):
about two thirds hypothesis' and schemathesis' drawing of the cases, a third the in-process
requests; the cases hardly repeat (642 distinct of 643 positive requests, 614 of 640 negative,
the repeats GETs), and leaving out the Authorization header (the dev profile reads none) did
not make it cheaper, so EXAMPLES is what bounds it (about 10 ms a positive case, 17 ms a
negative one)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402
from schemathesis.checks import (  # noqa: E402
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from starlette.applications import Starlette  # noqa: E402

from harvest.config import load_config  # noqa: E402
from harvest.web.app import management_app  # noqa: E402

# WEB_FUZZ_EXAMPLES raises it for a longer run by hand.
EXAMPLES = int(os.environ.get("WEB_FUZZ_EXAMPLES", "8"))
# Waits a generated request could hold for minutes (an update's timeout on a run it just
# started, with no worker to answer), and the event streams (they never end: a stream is held
# until the client leaves): their bounds are the route tests' business (test_streams.py).
SLOW = ["update_with_start", "workflow_event_stream", "event_stream", "durable_event_stream"]


@pytest.fixture
def served(db: str) -> Iterator[Starlette]:
    from schemathesis.python.asgi import shutdown_lifespans

    api = management_app(dsn=db, config=load_config(env={}), profile="dev")
    try:
        yield api
    finally:
        shutdown_lifespans()  # the app's lifespan: its pools and listeners close


@pytest.mark.webfuzz
@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_generated_requests_find_no_500_and_no_schema_violation(served: Starlette, mode: str) -> None:
    """Every operation (but the slow waits and the streams), EXAMPLES generated requests each,
    valid ones and (negative) ones that break the schema; the checks: no 5xx, every status
    declared, the declared content type, every JSON body matching its schema."""
    from hypothesis import given
    from schemathesis import GenerationMode

    schema = schemathesis.openapi.from_asgi("/openapi.json", served).exclude(operation_id=SLOW)

    checks = [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_schema_conformance,
    ]
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) > 30
    failures = []
    for operation in operations:

        @given(case=operation.as_strategy(GenerationMode(mode)))
        @settings(
            max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None
        )
        def run(case) -> None:
            case.call_and_validate(checks=checks, headers={"Accept": "application/json"}, timeout=60)

        try:
            run()
        except Unsatisfiable:
            continue  # negative: an operation with no parameter and no body has no invalid request
        except Exception as exc:  # every operation is tried; the failures are reported together
            failures.append(f"{operation.label}: {str(exc)[:1500]}")
    assert not failures, "\n\n".join(failures)
