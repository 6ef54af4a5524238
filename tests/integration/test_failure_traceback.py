"""A failure records where it was raised: an activity attempt's (queued and local) and a
workflow's own, in the failure's ``traceback`` (beside its details, never in them), bounded,
encoded by the payload codecs as the details are, and shown by the CLI and the API."""

from __future__ import annotations

import html
import json
import re
import time
from collections.abc import Awaitable, Iterator

import psycopg
import pytest
from served_cli import cli, transports
from served_cli import served as served_api
from starlette.testclient import TestClient

from harvest import ActivityFailure, App, Client, RetryPolicy, activity, workflow
from harvest.core.codecs import AesGcmCodec, Payloads, ZlibCodec
from harvest.core.errors import TRACEBACK_CHARS, TRACEBACK_FRAMES, ActivityError, WorkflowFailed
from harvest.web.principal import Principal
from harvest.web.ui import dashboard_app

HERE = __name__  # the module `--app` names (tests/integration is on sys.path)
KEY = bytes(range(32))


def _lookup_the_rate(order: int) -> float:
    rates = {1: 0.2}
    return rates[order]  # KeyError, two calls below the activity


def _price(order: int) -> float:
    return 100 * _lookup_the_rate(order)


@activity(retry=RetryPolicy.none())
async def price_order(ctx, order: int) -> float:
    return _price(order)


@activity(retry=RetryPolicy.none(), dead_letter=False)
async def price_order_once(ctx, order: int) -> float:
    return _price(order)


def _decline(order: int) -> None:
    raise ActivityFailure("CardDeclined", f"order {order} declined", True, details={"bank": "acme"})


@activity(retry=RetryPolicy.none())
async def charge(ctx, order: int) -> None:
    _decline(order)


def _decline_deep(n: int) -> None:
    if n:
        _decline_deep(n - 1)
    raise ActivityFailure("CardDeclined", "declined", True, details={"bank": "acme"})


@activity(retry=RetryPolicy.none())
async def charge_deep(ctx) -> None:
    _decline_deep(15)


def _descend(n: int) -> int:
    return _descend(n + 1) + 1


@activity(retry=RetryPolicy.none())
async def recurse(ctx) -> int:
    return _descend(0)


@workflow
async def prices(ctx, order: int) -> float:
    return await ctx.execute_activity(price_order, order)


async def _stack_of(call: Awaitable[object]) -> str:
    """The traceback of the activity's failure ``call`` raises, as the workflow gets it."""
    try:
        await call
    except ActivityError as exc:
        return exc.failure.traceback or ""
    return ""


@workflow
async def prices_once(ctx, order: int) -> str:
    return await _stack_of(ctx.execute_activity(price_order_once, order))


@workflow
async def charges(ctx, order: int) -> None:
    await ctx.execute_activity(charge, order)


@workflow
async def charges_deep(ctx) -> None:
    await ctx.execute_activity(charge_deep)


@workflow
async def recurses(ctx) -> int:
    return await ctx.execute_activity(recurse)


@workflow
async def prices_locally(ctx, order: int) -> str:
    return await _stack_of(ctx.execute_local_activity(price_order, order))


@workflow
async def charges_deep_locally(ctx) -> dict:
    try:
        await ctx.execute_local_activity(charge_deep)
    except ActivityError as exc:
        return {"error_type": exc.failure.error_type, "details": exc.failure.details}
    return {}


def _check_the_order(order: int) -> None:
    raise ValueError(f"order {order} has no lines")


@workflow
async def checks(ctx, order: int) -> None:
    _check_the_order(order)


APP = App(
    workflows=[
        prices,
        prices_once,
        charges,
        charges_deep,
        recurses,
        prices_locally,
        charges_deep_locally,
        checks,
    ],
    activities=[price_order, price_order_once, charge, charge_deep, recurse],
)
ENCRYPTED = App(
    workflows=[prices, checks],
    activities=[price_order],
    codecs=Payloads([ZlibCodec(), AesGcmCodec({"k1": KEY})]),
)
CODECS = [ZlibCodec(), AesGcmCodec({"k1": KEY})]


@pytest.fixture
def served(db: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with served_api(db, monkeypatch):
        yield


def _dead_letter(db: str, execution_id: str) -> dict:
    deadline = time.monotonic() + 20
    with psycopg.connect(db, autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT id, failure FROM harvest.dead_letters WHERE execution_id = %s", (execution_id,)
            ).fetchone()
            if row:
                return {"id": row[0], "failure": row[1]}
            assert time.monotonic() < deadline, "no dead letter"
            time.sleep(0.05)


def _failed_event(client: Client, execution_id: str, event_type: str) -> dict:
    [event] = [e for e in client.get_handle(execution_id).history() if e["event_type"] == event_type]
    return event["event_data"]


def test_an_activity_raising_in_a_nested_call_records_the_inner_frame(
    db: str, start_worker, client: Client, served
) -> None:
    """The dead letter (SQL, `harvest dlq get` on both transports, GET /dead-letters/{id}) and,
    once discarded, the history's ActivityFailed hold the frames down to the raising one."""
    start_worker(APP)
    handle = client.start_workflow(prices, 7)
    letter = _dead_letter(db, handle.execution_id)
    failure = letter["failure"]
    assert failure["error_type"] == "KeyError" and failure["details"] is None
    stack = failure["traceback"]
    assert stack.startswith("Traceback (most recent call last):")
    assert "in _lookup_the_rate" in stack and "in _price" in stack and "return rates[order]" in stack
    assert stack.rstrip().endswith("KeyError: 7")
    for how, r in transports(db, "dlq", "get", str(letter["id"]), "-o", "json").items():
        assert r.exit_code == 0, (how, r.output)
        assert json.loads(r.stdout)["failure"]["traceback"] == stack, how
    text = cli("dlq", "get", str(letter["id"]), "--database-url", db)
    assert text.exit_code == 0, text.output
    assert "\ntraceback:\nTraceback (most recent call last):\n" in text.stdout
    assert "in _lookup_the_rate" in text.stdout.split("traceback:")[1]

    with client.sql() as sql:
        sql.discard_dead_letter(letter["id"])
    with pytest.raises(WorkflowFailed):
        handle.result(timeout=20)
    assert _failed_event(client, handle.execution_id, "ActivityFailed")["failure"]["traceback"] == stack
    # the history's text: a short form, where it was raised (--full: the traceback is a payload)
    full = cli("workflow", "history", handle.execution_id, "--full", "--database-url", db)
    assert full.exit_code == 0, full.output
    assert "[raised in _lookup_the_rate (test_failure_traceback.py:" in full.stdout
    redacted = cli("workflow", "history", handle.execution_id, "--database-url", db)
    assert "_lookup_the_rate" not in redacted.stdout
    whole = cli("workflow", "history", handle.execution_id, "--full", "-o", "json", "--database-url", db)
    [event] = [e for e in json.loads(whole.stdout)["events"] if e["event_type"] == "ActivityFailed"]
    assert event["event_data"]["failure"]["traceback"] == stack


def test_a_failed_activity_s_traceback_reaches_the_workflow(db: str, start_worker, client: Client) -> None:
    start_worker(APP)
    stack = client.start_workflow(prices_once, 7).result(timeout=20)
    assert "in _lookup_the_rate" in stack


def test_a_users_activity_failure_keeps_its_details(db: str, start_worker, client: Client) -> None:
    start_worker(APP)
    handle = client.start_workflow(charges, 9)
    failure = _dead_letter(db, handle.execution_id)["failure"]
    assert failure["error_type"] == "CardDeclined" and failure["message"] == "order 9 declined"
    assert failure["details"] == {"bank": "acme"}  # as the activity gave them
    assert "in _decline" in failure["traceback"]


def test_over_the_payload_limit_the_traceback_goes_first(db: str, start_worker, client: Client) -> None:
    """A failure that would not fit the payload limit with its traceback goes without it, its
    details kept (they went first before, replaced by a truncation marker)."""
    start_worker(APP, max_payload_bytes=1000)
    failure = _dead_letter(db, client.start_workflow(charges_deep).execution_id)["failure"]
    assert failure["details"] == {"bank": "acme"} and "traceback" not in failure


def test_over_the_payload_limit_a_local_activity_s_traceback_goes_first(
    db: str, start_worker, client: Client
) -> None:
    """As a queued activity's: a local activity's failure over the limit goes without its
    traceback, its details kept, and the run goes on (the whole run failed, PayloadTooLarge)."""
    start_worker(APP, max_payload_bytes=1000)
    handle = client.start_workflow(charges_deep_locally)
    assert handle.result(timeout=20) == {"error_type": "CardDeclined", "details": {"bank": "acme"}}
    [marker] = [
        e["event_data"]
        for e in handle.history()
        if e["event_type"] == "MarkerRecorded" and e["event_data"].get("kind") == "local_activity"
    ]
    failure = marker["value"]["failure"]
    assert failure["details"] == {"bank": "acme"} and "traceback" not in failure


def test_a_local_activity_s_failure_records_its_traceback(db: str, start_worker, client: Client) -> None:
    start_worker(APP)
    handle = client.start_workflow(prices_locally, 7)
    assert "in _lookup_the_rate" in handle.result(timeout=20)
    [marker] = [
        e["event_data"]
        for e in handle.history()
        if e["event_type"] == "MarkerRecorded" and e["event_data"].get("kind") == "local_activity"
    ]
    assert "in _lookup_the_rate" in marker["value"]["failure"]["traceback"]


def test_a_workflow_that_raises_records_its_traceback(db: str, start_worker, client: Client) -> None:
    start_worker(APP)
    handle = client.start_workflow(checks, 3)
    with pytest.raises(WorkflowFailed) as info:
        handle.result(timeout=20)
    assert info.value.failure["message"] == "order 3 has no lines"
    assert "in _check_the_order" in (info.value.traceback or "")
    assert "in checks" in info.value.traceback  # the workflow's own frame
    assert (
        "in _check_the_order"
        in _failed_event(client, handle.execution_id, "WorkflowFailed")["failure"]["traceback"]
    )
    with psycopg.connect(db) as conn:
        (stored,) = conn.execute(
            "SELECT failure FROM harvest.executions WHERE id = %s", (handle.execution_id,)
        ).fetchone()
    assert "in _check_the_order" in stored["traceback"]


def test_a_codec_encrypts_the_traceback(db: str, start_worker) -> None:
    """No frame's text is stored in plain: the traceback is encoded as the details are, and a
    client holding the key reads it back."""
    start_worker(ENCRYPTED)
    with Client(db, codecs=CODECS) as client:
        dead = client.start_workflow(prices, 7)
        letter = _dead_letter(db, dead.execution_id)
        failing = client.start_workflow(checks, 3)
        with pytest.raises(WorkflowFailed) as info:
            failing.result(timeout=20)
        assert "in _check_the_order" in (info.value.traceback or "")
        with client.sql() as sql:
            sql.discard_dead_letter(letter["id"])
        with pytest.raises(WorkflowFailed):
            dead.result(timeout=20)
        stored_event = _failed_event(client, dead.execution_id, "ActivityFailed")["failure"]
        assert "_harvest_codec" in json.dumps(stored_event["traceback"])
    # read back with the key (the CLI's --app): the history's text says where it was raised
    keyed = ("--full", "--app", f"{HERE}:ENCRYPTED", "--database-url", db)
    text = cli("workflow", "history", dead.execution_id, *keyed)
    assert text.exit_code == 0, text.output
    assert "[raised in _lookup_the_rate (test_failure_traceback.py:" in text.stdout
    keyless = cli("workflow", "history", dead.execution_id, "--full", "--database-url", db)
    assert "[raised in" not in keyless.stdout  # (encrypted: said as what it is)
    assert letter["failure"]["error_type"] == "KeyError"
    assert "_harvest_codec" in json.dumps(letter["failure"]["traceback"])
    with psycopg.connect(db) as conn:
        stored = conn.execute(
            "SELECT string_agg(event_data::text, ' ') FROM harvest.events WHERE execution_id = ANY(%s)",
            ([dead.execution_id, failing.execution_id],),
        ).fetchone()[0]
        runs = conn.execute(
            "SELECT string_agg(failure::text, ' ') FROM harvest.executions WHERE id = ANY(%s)",
            ([dead.execution_id, failing.execution_id],),
        ).fetchone()[0]
    for text in (stored, runs, json.dumps(letter["failure"])):
        assert "_lookup_the_rate" not in text and "_check_the_order" not in text
        assert "Traceback" not in text and "test_failure_traceback.py" not in text


def test_a_deep_recursion_s_traceback_is_bounded(db: str, start_worker, client: Client) -> None:
    start_worker(APP)
    handle = client.start_workflow(recurses)
    failure = _dead_letter(db, handle.execution_id)["failure"]
    assert failure["error_type"] == "RecursionError"
    stack = failure["traceback"]
    assert len(stack) <= TRACEBACK_CHARS + 100
    assert "outer frames omitted]" in stack and "in _descend" in stack
    assert stack.count('  File "') <= TRACEBACK_FRAMES


class _Operator:
    """The dashboard's authorizer of these tests: every request an operate principal."""

    async def authorize(self, request: object, needed: str) -> Principal:
        return Principal(actor="operator", scope="operate", source="ui")


def test_the_dashboard_shows_the_stack_with_the_payloads(db: str, start_worker, client: Client) -> None:
    """The dead letter's page and a failed run's page show the traceback as "Stack", with
    ?payloads=full only (it is a payload: its size otherwise)."""
    start_worker(APP)
    letter = _dead_letter(db, client.start_workflow(prices, 7).execution_id)
    failed = client.start_workflow(checks, 3)
    with pytest.raises(WorkflowFailed):
        failed.result(timeout=20)
    with TestClient(dashboard_app(dsn=db, authorizer=_Operator()), base_url="http://127.0.0.1:8080") as ui:
        for path, frame in (
            (f"/dead-letters/0/{letter['id']}", "in _lookup_the_rate"),
            (f"/workflows/{failed.execution_id}", "in _check_the_order"),
        ):
            full = ui.get(f"{path}?payloads=full")
            assert full.status_code == 200, full.text
            shown = re.search(r'<pre id="(?:failure-)?stack" class="text">(.*?)</pre>', full.text, re.DOTALL)
            assert shown and frame in html.unescape(shown.group(1)), path
            assert frame not in ui.get(path).text, path
