"""A schedule's backfill and delete on its dashboard page over HTTP (fast suite): each through
its confirmation (nothing written before it), refused from another site's page and to a read
token, a bad range a 400 naming its field, the SQL functions `harvest schedule backfill|delete`
call, and the audit row with the source ui (docs/dashboard.md, "Schedules")."""

from __future__ import annotations

import datetime as dt
import html
import re
import urllib.parse

import psycopg
import pytest
from starlette.testclient import TestClient

READ, OPERATE = ({"Authorization": f"Bearer {s}-token"} for s in ("read", "operate"))
OURS = {"Origin": "http://127.0.0.1:8080", "Sec-Fetch-Site": "same-origin"}
OTHER_SITES = ({"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"})


def _one(db: str, sql: str, *args: object) -> object:
    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute(sql, args).fetchone()[0]


def _audit(db: str, operation: str) -> list[tuple]:
    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute(
            "SELECT source, target, actor FROM harvest.audit_log WHERE operation = %s", (operation,)
        ).fetchall()


def _form(page: str, form_id: str) -> tuple[str, dict[str, str]]:
    """The action and the fields (hidden inputs and the submit button's) of form ``form_id``."""
    form = re.search(rf'<form[^>]*id="{form_id}"[^>]*action="([^"]+)"(.*?)</form>', page, re.S)
    assert form, form_id
    fields = {
        html.unescape(n): html.unescape(v)
        for n, v in re.findall(r'<(?:input|button) [^>]*name="([^"]+)" value="([^"]*)"', form.group(2))
    }
    return html.unescape(form.group(1)), fields


def _said(response) -> str:
    return urllib.parse.parse_qs(urllib.parse.urlsplit(response.headers["location"]).query)["msg"][0]


PAGE = "/schedules/0/hourly%2Freport"
RUNS = "SELECT count(*) FROM harvest.executions WHERE workflow_id LIKE 'sched:hourly/report:%%'"


def test_a_backfill_counts_its_slots_on_a_confirmation_then_starts_the_runs(
    client: TestClient, db: str
) -> None:
    assert 'id="backfill-form"' not in client.get(PAGE, headers=READ).text  # a read token: no form
    page = client.get(PAGE, headers=OPERATE).text
    action, _ = _form(page, "backfill-form")
    assert action == f"{PAGE}/backfill"
    wanted = {"from": "2025-01-01T00:00Z", "to": "2025-01-01T04:00:00+00:00", "overlap": "allow_all"}
    assert client.post(action, headers=READ, data=wanted).status_code == 403

    confirm = client.post(action, headers={**OPERATE, **OURS}, data=wanted)
    assert confirm.status_code == 200
    assert re.search(r'id="backfill-count">The range holds <strong>5</strong> slots', confirm.text)
    assert _one(db, RUNS) == 0 and _audit(db, "schedule.backfill") == []  # nothing written yet

    act, fields = _form(confirm.text, "backfill-confirm-form")
    assert fields == {
        "from": "2025-01-01T00:00:00+00:00",
        "to": "2025-01-01T04:00:00+00:00",
        "overlap": "allow_all",
        "confirm": "yes",
    }
    for sent_from in OTHER_SITES:
        refused = client.post(act, headers={**OPERATE, **sent_from}, data=fields, follow_redirects=False)
        assert refused.status_code == 403, sent_from
    assert client.post(act, headers=READ, data=fields).status_code == 403
    assert _one(db, RUNS) == 0 and _audit(db, "schedule.backfill") == []

    done = client.post(act, headers={**OPERATE, **OURS}, data=fields, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"].startswith(f"{PAGE}?")
    assert _said(done) == (
        "backfilled 5 slots under allow_all: 5 started, 0 buffered, 0 skipped, 0 failed, 0 duplicate"
    )
    assert _one(db, RUNS) == 5  # the runs started, one a slot
    assert _audit(db, "schedule.backfill") == [("ui", "hourly/report", "operate-user")]
    again = client.post(act, headers={**OPERATE, **OURS}, data=fields, follow_redirects=False)
    assert "5 duplicate" in _said(again) and _one(db, RUNS) == 5

    # The CLI's default overlap, buffer_all: max_active_runs (2) start, the rest wait.
    buffered = {"from": "2025-02-01", "to": "2025-02-01T03:00Z"}
    page = client.post(action, headers=OPERATE, data=buffered).text
    assert 'name="overlap" value="buffer_all"' in page and "2 runs at a time" in page
    done = client.post(action, headers=OPERATE, data={**buffered, "confirm": "yes"}, follow_redirects=False)
    assert "4 slots under buffer_all: 0 started, 4 buffered" in _said(done)

    # a range past now: counted, then refused whole by backfill_schedule (its HR001, a 400)
    now = dt.datetime.now(dt.UTC)
    late = {
        "from": (now - dt.timedelta(hours=2)).isoformat(),
        "to": (now + dt.timedelta(hours=2)).isoformat(),
    }
    assert client.post(action, headers=OPERATE, data=late).status_code == 200
    refused = client.post(action, headers=OPERATE, data={**late, "confirm": "yes"})
    assert refused.status_code == 400 and "is in the future" in refused.text
    assert _one(db, RUNS) == 5  # (the buffered four start on a scheduler tick; none runs here)

    # an unknown schedule, or a shard not of this deployment: a 404 at each step
    for path in ("/schedules/0/nobody/backfill", "/schedules/7/hourly%2Freport/backfill"):
        for confirm in ({}, {"confirm": "yes"}):
            assert client.post(path, headers=OPERATE, data={**buffered, **confirm}).status_code == 404, path


@pytest.mark.parametrize(
    ("sent", "field"),
    [
        ({"to": "2025-01-01T04:00Z"}, "from: "),
        ({"from": "2025-01-01T00:00Z"}, "to: "),
        ({"from": "yesterday", "to": "2025-01-01T04:00Z"}, "from='yesterday' is not a date"),
        ({"from": "2025-01-01T00:00Z", "to": "2025-13-01"}, "to='2025-13-01' is not a date"),
        ({"from": "2025-01-02T00:00Z", "to": "2025-01-01T00:00Z"}, "to=2025-01-01 00:00:00Z is before from="),
        (
            {"from": "2020-01-01T00:00Z", "to": "2025-01-01T00:00Z"},
            "to: hourly/report: more than 10000 slots",
        ),
        ({"from": "2025-01-01", "to": "2025-01-02", "overlap": "often"}, "overlap='often' is unknown"),
        # slots past year 9999 or before year 1 (backfill_slots' traceback: the API's 500 too)
        ({"from": "9999-12-31T00:00Z", "to": "9999-12-31T23:59:59Z"}, "to: backfill: the range 9999"),
        ({"from": "0001-01-01T00:00+01:00", "to": "0001-01-02"}, "reaches past the years 1 to 9999"),
    ],
)
def test_a_bad_backfill_range_is_a_400_naming_its_field(
    client: TestClient, db: str, sent: dict[str, str], field: str
) -> None:
    for confirm in ({}, {"confirm": "yes"}):  # the confirmation's step and the act's
        refused = client.post(f"{PAGE}/backfill", headers=OPERATE, data={**sent, **confirm})
        assert refused.status_code == 400, (sent, confirm)
        assert field in html.unescape(refused.text), refused.text
    assert _one(db, RUNS) == 0 and _audit(db, "schedule.backfill") == []


def test_a_delete_names_the_schedule_on_a_confirmation_then_deletes_it(client: TestClient, db: str) -> None:
    gone = "SELECT count(*) FROM harvest.schedules WHERE name = 'hourly/report'"
    assert 'id="delete-form"' not in client.get(PAGE, headers=READ).text
    action, fields = _form(client.get(PAGE, headers=OPERATE).text, "delete-form")
    assert action == f"{PAGE}/delete" and fields == {}
    assert client.post(action, headers=READ, data={}).status_code == 403

    confirm = client.post(action, headers={**OPERATE, **OURS}, data={})
    assert confirm.status_code == 200
    assert "<h1>Delete schedule hourly/report?</h1>" in confirm.text
    assert 'id="delete-declared"' not in confirm.text  # made at run time: no App declares it
    assert _one(db, gone) == 1 and _audit(db, "schedule.delete") == []

    act, fields = _form(confirm.text, "delete-confirm-form")
    assert fields == {"confirm": "hourly/report"}
    for sent_from in OTHER_SITES:
        refused = client.post(act, headers={**OPERATE, **sent_from}, data=fields, follow_redirects=False)
        assert refused.status_code == 403, sent_from
    assert client.post(act, headers=READ, data=fields).status_code == 403
    wrong = client.post(act, headers=OPERATE, data={"confirm": "hourly"})
    assert wrong.status_code == 400 and "confirm=&#39;hourly&#39;" in wrong.text
    assert _one(db, gone) == 1 and _audit(db, "schedule.delete") == []

    done = client.post(act, headers={**OPERATE, **OURS}, data=fields, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"].startswith("/schedules?")
    assert _said(done) == "deleted schedule hourly/report on shard 0"
    assert _one(db, gone) == 0
    assert _audit(db, "schedule.delete") == [("ui", "hourly/report", "operate-user")]
    assert client.post(act, headers=OPERATE, data=fields).status_code == 404  # deleted already
    assert client.post(action, headers=OPERATE, data={}).status_code == 404


def test_deleting_a_declared_schedule_says_a_worker_declares_it_again(client: TestClient, db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("UPDATE harvest.schedules SET declared = true WHERE name = 'hourly/report'")
    assert "an App that still declares it creates it again" in client.get(PAGE, headers=OPERATE).text
    confirm = client.post(f"{PAGE}/delete", headers=OPERATE, data={}).text
    assert 'id="delete-declared"' in confirm and "next boot creates it again" in confirm
