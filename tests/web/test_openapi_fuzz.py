"""schemathesis over /openapi.json: generated requests against the API served by uvicorn on
loopback (a real Postgres behind it) find no 500, no undeclared status, no answer that breaks its
declared schema. Bounded: a few examples per operation."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator

import pytest

schemathesis = pytest.importorskip("schemathesis")
uvicorn = pytest.importorskip("uvicorn")

from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402
from schemathesis.checks import (  # noqa: E402
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from harvest.config import load_config  # noqa: E402
from harvest.web.app import management_app  # noqa: E402

# WEB_FUZZ_EXAMPLES raises it for a longer run by hand.
EXAMPLES = int(os.environ.get("WEB_FUZZ_EXAMPLES", "8"))
# Waits a generated request could hold for minutes (an update's timeout on a run it just
# started, with no worker to answer): their bounds are the route tests' business.
SLOW = ["update_with_start"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def served(db: str) -> Iterator[str]:
    port = _free_port()
    api = management_app(dsn=db, config=load_config(env={}), profile="dev")
    server = uvicorn.Server(uvicorn.Config(api, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(20)


@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_generated_requests_find_no_500_and_no_schema_violation(served: str, mode: str) -> None:
    """Every operation (but the slow waits), EXAMPLES generated requests each, valid ones and
    (negative) ones that break the schema; the checks: no 5xx, every status declared, JSON where
    JSON is declared, every body matching its schema."""
    from hypothesis import given
    from schemathesis import GenerationMode

    schema = schemathesis.openapi.from_url(f"{served}/openapi.json").exclude(operation_id=SLOW)
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
