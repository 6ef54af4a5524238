"""A dead letter's own page over HTTP (fast suite): ``/dead-letters/{shard}/{id}``, the
dashboard's face of ``GET /dead-letters/{id}``: its run, activity, attempts, the failure with its
stack, the input (its size to read; in full, an offloaded one read back, for operate), the replay
and discard buttons behind their scopes and the same-site guard, linked from the list and from its
run's page; one that is gone is the 404 page (docs/dashboard.md, "Dead letters")."""

from __future__ import annotations

import html
import json
import re

import psycopg
from dashboard_helpers import TokenScopes
from psycopg.types.json import Jsonb
from starlette.testclient import TestClient

from harvest.web.ui import dashboard_app

READ, OPERATE, ADMIN = ({"Authorization": f"Bearer {s}-token"} for s in ("read", "operate", "admin"))
OURS = {"Origin": "http://127.0.0.1:8080", "Sec-Fetch-Site": "same-origin"}
OTHER_SITES = ({"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"})
STACK = 'Traceback (most recent call last):\n  File "billing.py", line 12, in charge\n    raise Declined\n'


def _dead_letter(db: str, input_: object, activity: str = "charge") -> tuple[str, int]:
    """A run of ``billing`` (no worker polls it) with a dead letter of ``activity`` holding
    ``input_`` and a failure whose details carry a stack; (the run, the dead letter's id)."""
    with psycopg.connect(db, autocommit=True) as conn:
        started = "SELECT execution_id FROM harvest.start_workflow('billing', '[]', %s)"
        run = str(conn.execute(started, (f"bill-{activity}",)).fetchone()[0])
        failure = {
            "error_type": "CardDeclined",
            "message": "card declined for order 42\nthe bank said: insufficient funds",
            "non_retryable": False,
            "details": {"traceback": STACK, "bank": "acme"},
        }
        (id_,) = conn.execute(
            "INSERT INTO harvest.dead_letters (execution_id, workflow_name, seq, activity_name, queue,"
            " input, attempts, failure, scheduled_at, failed_at)"
            " VALUES (%s, 'billing', 3, %s, 'payments', %s, 5, %s, now(), now()) RETURNING id",
            (run, activity, Jsonb(input_), Jsonb(failure)),
        ).fetchone()
    return run, id_


def _client(db: str) -> TestClient:
    return TestClient(dashboard_app(dsn=db, authorizer=TokenScopes()), base_url="http://127.0.0.1:8080")


def _audit(db: str, operation: str) -> list[tuple]:
    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute(
            "SELECT source, target FROM harvest.audit_log WHERE operation = %s ORDER BY id", (operation,)
        ).fetchall()


def test_a_dead_letter_s_page_shows_its_run_failure_stack_and_input(db: str) -> None:
    big = "order-" + "x" * 3000
    with psycopg.connect(db, autocommit=True) as conn:
        (ids,) = conn.execute("SELECT harvest.put_payloads(NULL, ARRAY[%s::jsonb])", (Jsonb(big),)).fetchone()
    ref = {"_harvest_ref": str(ids[0]), "bytes": len(json.dumps(big))}
    run, id_ = _dead_letter(db, [ref])
    page_path = f"/dead-letters/0/{id_}"
    with _client(db) as client:
        # linked from the list and from its run's page (the activity it waits on)
        listed = client.get("/dead-letters", headers=READ).text
        assert f'href="{page_path}"' in listed
        assert f'href="{page_path}"' in client.get(f"/workflows/{run}", headers=READ).text

        page = client.get(page_path, headers=READ)
        assert page.status_code == 200, page.text
        text = html.unescape(page.text)
        assert f'href="/workflows/{run}"' in page.text and "charge" in text and "payments" in text
        assert re.search(r'id="attempts">5<', page.text)
        assert re.search(r'id="error-type">CardDeclined<', page.text)
        assert "card declined for order 42\nthe bank said: insufficient funds" in text  # the whole message
        # to read: the input and the failure's details (payloads) are their size, the stack with them
        shown_input = page.text.split('id="input"')[1].split("</div>")[0]
        assert f"redacted ({len(json.dumps([ref]))} bytes)" not in shown_input  # (the reference's size: no)
        assert f"redacted ({len(json.dumps([big]))} bytes)" in shown_input, shown_input
        assert big not in page.text and "Traceback" not in page.text and "acme" not in page.text
        assert 'id="show-payloads"' not in page.text and "/replay" not in page.text
        assert client.get(f"{page_path}?payloads=full", headers=READ).text.count(big) == 0

        # operate, in full: the input read back from the store, the stack and the details shown
        full = client.get(f"{page_path}?payloads=full", headers=OPERATE)
        assert full.status_code == 200
        shown_input = html.unescape(full.text.split('id="input"')[1].split("</div>")[0])
        assert big in shown_input and "_harvest_ref" not in shown_input, shown_input
        stack = re.search(r'<pre id="stack" class="text">(.*?)</pre>', full.text, re.S)
        assert stack and html.unescape(stack.group(1)) == STACK
        assert "acme" in full.text
        assert f'action="{page_path}/replay"' in full.text and "/discard" not in full.text
        assert f'action="{page_path}/discard"' in client.get(page_path, headers=ADMIN).text


def test_a_dead_letter_s_buttons_need_their_scope_and_the_dashboard_s_own_page(db: str) -> None:
    _, id_ = _dead_letter(db, [1])
    _, other = _dead_letter(db, [2], activity="refund")
    page_path = f"/dead-letters/0/{id_}"
    with _client(db) as client:
        assert client.get(page_path).status_code == 401
        assert client.post(f"{page_path}/replay", headers=READ).status_code == 403
        assert client.post(f"{page_path}/discard", headers=OPERATE).status_code == 403
        for sent_from in OTHER_SITES:
            for verb, token in (("replay", OPERATE), ("discard", ADMIN)):
                refused = client.post(f"{page_path}/{verb}", headers={**token, **sent_from})
                assert refused.status_code == 403, (verb, sent_from)
        assert _audit(db, "dead_letter.replay") == [] and _audit(db, "dead_letter.discard") == []

        replayed = client.post(f"{page_path}/replay", headers={**OPERATE, **OURS}, follow_redirects=False)
        assert replayed.status_code == 303 and _audit(db, "dead_letter.replay") == [("ui", str(id_))]
        # replayed: its page is gone, a 404 page (not a 500), and so are its buttons
        gone = client.get(page_path, headers=READ)
        assert gone.status_code == 404 and f"dead letter {id_} does not exist" in gone.text
        assert "Traceback" not in gone.text and 'href="/dead-letters"' in gone.text  # (the navigation)
        assert client.post(f"{page_path}/replay", headers={**OPERATE, **OURS}).status_code == 404

        discarded = client.post(
            f"/dead-letters/0/{other}/discard", headers={**ADMIN, **OURS}, follow_redirects=False
        )
        assert discarded.status_code == 303 and _audit(db, "dead_letter.discard") == [("ui", str(other))]
        assert client.get(f"/dead-letters/0/{other}", headers=READ).status_code == 404


def test_a_dead_letter_address_that_names_nothing_is_a_404(db: str) -> None:
    with _client(db) as client:
        for path in ("/dead-letters/0/999", "/dead-letters/7/1", "/dead-letters/0/99999999999999999999999"):
            page = client.get(path, headers=READ)
            assert page.status_code == 404, (path, page.status_code)
            assert "<h1>" in page.text or "404" in page.text


def test_a_run_s_own_dead_letter_is_linked_from_its_page(db: str) -> None:
    """A workflow-kind dead letter (the run's own) is the run's, not a nameless activity: its
    page shows it in one line, type and message, linked to the dead letter's page."""
    with psycopg.connect(db, autocommit=True) as conn:
        started = "SELECT execution_id FROM harvest.start_workflow('billing', '[]', 'bill-own')"
        run = str(conn.execute(started).fetchone()[0])
        failure = {"error_type": "HistoryLimitExceeded", "message": "history over its hard cap"}
        (id_,) = conn.execute(
            "INSERT INTO harvest.dead_letters (execution_id, workflow_name, queue, attempts, failure,"
            " scheduled_at, failed_at, kind)"
            " VALUES (%s, 'billing', 'payments', 1, %s, now(), now(), 'workflow') RETURNING id",
            (run, Jsonb(failure)),
        ).fetchone()
    with _client(db) as client:
        page = client.get(f"/workflows/{run}", headers=READ)
    assert page.status_code == 200, page.text
    shown = re.search(r'<dd id="dead-letter">(.*?)</dd>', page.text, re.S)
    assert shown, page.text
    assert f'href="/dead-letters/0/{id_}"' in shown.group(1)
    text = html.unescape(shown.group(1))
    assert "HistoryLimitExceeded" in text and "history over its hard cap" in text
    assert f'href="/dead-letters/0/{id_}"' not in page.text.split('id="stack"')[1]  # no activity row
