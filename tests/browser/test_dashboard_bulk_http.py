"""The runs list's bulk cancel and terminate over HTTP (fast suite): offered by the list to whom
holds the action's scope and refused to others by the handlers, refused from another site's page,
refused for an empty filter; a dry run's count first, then the act in bounded steps continued
from the page, with its summary and its audit rows (docs/dashboard.md, "Acting on many runs")."""

from __future__ import annotations

import html
import json
import re
import urllib.parse
from typing import Any

import psycopg
import pytest
from dashboard_helpers import TokenScopes
from starlette.testclient import TestClient

from harvest.web.ui import app as ui_app
from harvest.web.ui import dashboard_app

READ, OPERATE, ADMIN = ({"Authorization": f"Bearer {s}-token"} for s in ("read", "operate", "admin"))


def _runs(db: str, name: str, n: int, prefix: str, attrs: dict | None = None) -> list[str]:
    """``n`` runs of ``name`` no worker polls for (they stay RUNNING)."""
    with psycopg.connect(db, autocommit=True) as conn:
        return [
            str(
                conn.execute(
                    "SELECT execution_id FROM harvest.start_workflow(%s, p_workflow_id => %s, "
                    "p_queue => 'nobody', p_search_attributes => %s::jsonb)",
                    (name, f"{prefix}-{i}", json.dumps(attrs or {})),
                ).fetchone()[0]
            )
            for i in range(n)
        ]


def _statuses(db: str, ids: list[str]) -> dict[str, tuple[str, bool]]:
    with psycopg.connect(db, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT id::text, status, cancel_requested FROM harvest.executions WHERE id = ANY(%s::uuid[])",
            (ids,),
        ).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


def _audit(db: str, operation: str) -> list[tuple]:
    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute(
            "SELECT source, operator_id, details FROM harvest.audit_log WHERE operation = %s ORDER BY id",
            (operation,),
        ).fetchall()


def _hidden(page: str, form_id: str) -> dict[str, str]:
    """The fields of form ``form_id`` as a browser would send them (hidden and filled ones)."""
    form = re.search(rf'<form[^>]*id="{form_id}".*?</form>', page, re.S)
    assert form, f"no form {form_id}"
    fields = {}
    for name, value in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form.group(0)):
        fields[name] = html.unescape(value)
    return fields


def _continued(ui: TestClient, form: dict[str, str]) -> tuple[Any, list[dict[str, str]]]:
    """``form`` posted, then each page's Continue form, to the last page: (it, the forms posted)."""
    forms = [form]
    while True:
        page = ui.post("/workflows/bulk", data=forms[-1], headers=OPERATE)
        assert page.status_code == 200, page.text
        if 'id="bulk-continue-form"' not in page.text:
            return page, forms
        assert len(forms) < 5
        forms.append(_hidden(page.text, "bulk-continue-form"))


@pytest.fixture
def ui(db: str):
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes(), timeout=3.0)) as client:
        yield client


def test_the_list_offers_each_action_to_its_scope_and_the_handlers_refuse_the_rest(ui, db: str) -> None:
    runs = _runs(db, "digest", 2, "s")
    listed = "/workflows?workflow_name=digest"
    assert 'id="bulk-runs-count"' not in ui.get(listed, headers=READ).text
    operate = ui.get(listed, headers=OPERATE).text
    assert 'id="bulk-runs-count"' in operate and 'value="cancel"' in operate
    assert 'value="terminate"' not in operate
    admin = ui.get(listed, headers=ADMIN).text
    assert 'value="terminate"' in admin

    count = "/workflows/bulk?action={}&workflow_name=digest"
    assert ui.get(count.format("cancel"), headers=READ).status_code == 403
    assert ui.get(count.format("terminate"), headers=OPERATE).status_code == 403
    form = {"action": "terminate", "filters": "workflow_name=digest", "reason": "r"}
    assert ui.post("/workflows/bulk", data=form, headers=OPERATE).status_code == 403
    assert ui.post("/workflows/bulk", data={**form, "action": "cancel"}, headers=READ).status_code == 403
    assert ui.post("/workflows/bulk", data={**form, "action": "Cancel"}).status_code == 401
    assert _statuses(db, runs) == dict.fromkeys(runs, ("RUNNING", False))  # nothing was done
    assert _audit(db, "workflow.bulk_cancel") == [] and _audit(db, "workflow.bulk_terminate") == []


def test_an_empty_filter_or_no_live_status_is_refused_and_nothing_is_done(ui, db: str) -> None:
    runs = _runs(db, "digest", 1, "e")
    assert "filter by workflow" in ui.get("/workflows?status=RUNNING", headers=OPERATE).text
    assert 'id="bulk-runs-count"' not in ui.get("/workflows?status=RUNNING", headers=OPERATE).text
    for query in ("status=RUNNING", "", "status=COMPLETED&workflow_name=digest"):
        page = ui.get(f"/workflows/bulk?action=cancel&{query}", headers=OPERATE)
        assert page.status_code == 400 and "filter:" in page.text, query
        posted = ui.post(
            "/workflows/bulk", data={"action": "cancel", "filters": query, "reason": "r"}, headers=OPERATE
        )
        assert posted.status_code == 400 and "filter:" in posted.text, query
    named = {"action": "cancel", "filters": "workflow_name=digest", "reason": "r"}
    for form in (
        {"action": "cancel", "filters": "workflow_name=digest"},  # no reason
        {"action": "signal", "filters": "workflow_name=digest", "reason": "r"},
        {**named, "cursor": "nope"},
        {**named, "so_far": "[1"},
        {**named, "so_far": '{"failures": ["x"]}'},  # (not a summary the page made)
    ):
        assert ui.post("/workflows/bulk", data=form, headers=ADMIN).status_code == 400, form
    assert _statuses(db, runs) == {runs[0]: ("RUNNING", False)}


def test_a_post_another_site_s_page_sends_is_refused(db: str) -> None:
    """Under the dev profile no token is needed: the Origin / Sec-Fetch-Site check is what keeps a
    page of another site from cancelling runs through the developer's dashboard."""
    runs = _runs(db, "digest", 2, "x")
    form = {"action": "cancel", "filters": "workflow_name=digest", "reason": "evil"}
    with TestClient(dashboard_app(dsn=db, profile="dev"), base_url="http://127.0.0.1:8080") as client:
        for sent_from in (
            {"Origin": "https://evil.example"},
            {"Origin": "null"},
            {"Sec-Fetch-Site": "cross-site"},
        ):
            refused = client.post("/workflows/bulk", data=form, headers=sent_from)
            assert refused.status_code == 403, sent_from
        assert _statuses(db, runs) == dict.fromkeys(runs, ("RUNNING", False))
        ours = {"Origin": "http://127.0.0.1:8080", "Sec-Fetch-Site": "same-origin"}
        done = client.post("/workflows/bulk", data=form, headers=ours)
        assert done.status_code == 200 and 'id="bulk-summary"' in done.text
    assert _statuses(db, runs) == dict.fromkeys(runs, ("RUNNING", True))


def test_count_confirm_and_cancel_in_bounded_steps_continued_to_the_end(
    ui, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The list's filter counted (nothing written), confirmed with a reason, acted on a step of
    `limit` runs a shard at a time, RUN_BULK_STEPS steps a request (1 here), continued from each
    page to the end; the summary adds up the requests; a run already asked to cancel is unchanged."""
    monkeypatch.setattr(ui_app, "RUN_BULK_STEPS", 1)
    runs = _runs(db, "digest", 5, "c", {"tenant": "acme"})
    other = _runs(db, "digest", 1, "o", {"tenant": "globex"})
    other += _runs(db, "report", 1, "r", {"tenant": "acme"})
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT harvest.cancel_workflow(%s, 'earlier')", (runs[0],))

    listed = ui.get("/workflows?workflow_name=digest&attr=tenant%3Dacme&status=RUNNING", headers=OPERATE).text
    assert 'id="bulk-runs-count" method="get" action="/workflows/bulk"' in listed
    fields = _hidden(listed, "bulk-runs-count")
    assert fields == {"status": "RUNNING", "workflow_name": "digest", "attr": "tenant=acme"}
    count = ui.get(f"/workflows/bulk?action=cancel&{urllib.parse.urlencode(fields)}", headers=OPERATE)
    assert count.status_code == 200, count.text
    assert "Cancel 5 runs?" in count.text and 'id="bulk-runs-form"' in count.text
    assert "tenant=acme" in count.text.split('id="bulk-filter"')[1].split("</dl>")[0]
    assert sorted(re.findall(r'<li><a href="/workflows/([0-9a-f-]+)"', count.text)) == sorted(runs)
    assert _audit(db, "workflow.bulk_cancel") == []  # a dry run writes nothing

    form = {**_hidden(count.text, "bulk-runs-form"), "reason": "incident 42", "limit": "2"}
    assert form["expected"] == "5"
    page, forms = _continued(ui, form)
    assert len(forms) == 3  # 2 + 2 + 1
    summary = re.sub(r"\s+", " ", page.text.split('id="bulk-summary">')[1].split("</p>")[0])
    assert "<strong>4</strong> cancelled" in summary and "<strong>1</strong> unchanged" in summary, summary
    assert "<strong>0</strong> failed; 5 counted at the confirmation" in summary
    assert "Cancel runs: done" in page.text

    assert _statuses(db, runs) == dict.fromkeys(runs, ("RUNNING", True))
    assert all(not c for _, c in _statuses(db, other).values())
    audit = _audit(db, "workflow.bulk_cancel")
    assert len(audit) == 3 and {(a[0], a[1]) for a in audit} == {("ui", "operate-user")}
    assert {a[2]["reason"] for a in audit} == {"incident 42"}
    assert len({a[2]["batch_id"] for a in audit}) == 1  # one batch over the three requests


def test_terminate_is_an_admins_and_ends_the_runs(ui, db: str) -> None:
    runs = _runs(db, "digest", 3, "t")
    count = ui.get("/workflows/bulk?action=terminate&workflow_name=digest", headers=ADMIN)
    assert "Terminate 3 runs?" in count.text
    form = {**_hidden(count.text, "bulk-runs-form"), "reason": "offboarded"}
    done = ui.post("/workflows/bulk", data=form, headers=ADMIN)
    assert done.status_code == 200 and "Terminate runs: done" in done.text
    assert "<strong>3</strong> terminated" in done.text
    assert {s for s, _ in _statuses(db, runs).values()} == {"TERMINATED"}
    assert [(a[0], a[1]) for a in _audit(db, "workflow.bulk_terminate")] == [("ui", "admin-user")]
    again = ui.get("/workflows/bulk?action=terminate&workflow_name=digest", headers=ADMIN)
    assert "No live run matches" in again.text and 'id="bulk-runs-form"' not in again.text


def test_over_shards_a_moved_run_is_acted_on_where_it_lives_and_a_shard_down_keeps_its_place(
    two_shards: dict[int, str],
) -> None:
    """Every shard's runs are acted on; a run a rebalance moved is acted on at its live copy (its
    sealed source is left); a shard that cannot be reached is named on the count and in the
    summary, and the Continue form keeps its place in the batch."""
    import socket
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
    from test_workflow_batch import _move, _quiescent

    from harvest.config import load_config

    runs = [_quiescent(two_shards[s], "send_digest", f"d{s}-{i}") for s in (0, 1) for i in range(2)]
    moved = _quiescent(two_shards[0], "send_digest", "d-moved")
    _move(two_shards, moved)
    with socket.socket() as probe:  # a port nothing listens on: shard 2, down
        probe.bind(("127.0.0.1", 0))
        down = f"postgresql://harvest@127.0.0.1:{probe.getsockname()[1]}/harvest?connect_timeout=1"
    config = load_config(
        env={
            "HARVEST_SHARDS__READABLE": "0,1,2",
            "HARVEST_SHARDS__WRITABLE": "0,1",
            **{f"HARVEST_SHARDS__URLS__{s}": dsn for s, dsn in {**two_shards, 2: down}.items()},
        }
    )
    with TestClient(dashboard_app(config=config, authorizer=TokenScopes(), timeout=3.0)) as client:
        count = client.get("/workflows/bulk?action=terminate&workflow_name=send_digest", headers=ADMIN)
        assert count.status_code == 200, count.text
        assert "Terminate 5 runs?" in count.text and 'data-shard="2"' in count.text
        form = {**_hidden(count.text, "bulk-runs-form"), "reason": "drill"}
        done = client.post("/workflows/bulk", data=form, headers=ADMIN)
        assert done.status_code == 200, done.text
        summary = re.sub(r"\s+", " ", done.text.split('id="bulk-summary">')[1].split("</p>")[0])
        assert "<strong>5</strong> terminated" in summary and "Shard not reached: 2." in summary, summary
        rest = _hidden(done.text, "bulk-continue-form")
        from harvest.client.batch import decode_cursor

        assert decode_cursor(rest["cursor"])[1] == {2: None}  # shard 2 from its start, when it is up
    for s in (0, 1):
        with psycopg.connect(two_shards[s], autocommit=True) as conn:
            rows = dict(
                conn.execute(
                    "SELECT id::text, status FROM harvest.executions WHERE id = ANY(%s::uuid[])",
                    ([*runs, moved],),
                ).fetchall()
            )
        if s == 0:
            assert rows[moved] == "MIGRATED"  # the sealed source copy is not acted on
        else:
            assert rows[moved] == "TERMINATED"
        assert {rows[r] for r in runs if r in rows} == {"TERMINATED"}


def _events(db: str, ids: list[str]) -> list[tuple[str, dict]]:
    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute(
            "SELECT execution_id::text, event_data FROM harvest.events"
            " WHERE event_type = 'SignalReceived' AND execution_id = ANY(%s::uuid[]) ORDER BY event_id",
            (ids,),
        ).fetchall()


def test_signal_the_runs_a_filter_selects_counted_first_with_a_name_a_payload_and_a_reason(
    ui, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Signal by filter: offered beside cancel to an operator, counted first, confirmed with the
    signal's name, a JSON payload and a reason (each refused with its field when missing or bad,
    nothing sent), then sent a step at a time, continued from the page to the end: every run gets
    it once (the batch id its signal id), the other runs none, one audit row a step."""
    monkeypatch.setattr(ui_app, "RUN_BULK_STEPS", 1)
    runs = _runs(db, "digest", 3, "g")
    spared = _runs(db, "report", 1, "p")
    listed = ui.get("/workflows?workflow_name=digest", headers=OPERATE).text
    assert 'value="signal"' in listed
    assert ui.get("/workflows/bulk?action=signal&workflow_name=digest", headers=READ).status_code == 403
    count = ui.get("/workflows/bulk?action=signal&workflow_name=digest", headers=OPERATE)
    assert count.status_code == 200, count.text
    assert (
        "Signal 3 runs?" in count.text
        and 'name="signal_name"' in count.text
        and 'name="payload"' in count.text
    )
    base = {**_hidden(count.text, "bulk-runs-form"), "reason": "rollout 7", "limit": "2"}

    for bad, field in (
        ({"payload": '{"go": true}'}, "signal_name:"),  # no name
        ({"signal_name": "  ", "payload": "1"}, "signal_name:"),
        ({"signal_name": "go", "payload": "{not json"}, "payload: not valid JSON"),
        ({"signal_name": "go", "payload": "1", "reason": ""}, "reason:"),
    ):
        refused = ui.post("/workflows/bulk", data={**base, **bad}, headers=OPERATE)
        assert refused.status_code == 400 and field in html.unescape(refused.text), (bad, refused.text)
    cross = ui.post(
        "/workflows/bulk",
        data={**base, "signal_name": "go", "payload": "1"},
        headers={**OPERATE, "Origin": "https://evil.example"},
    )
    assert cross.status_code == 403
    assert _events(db, runs + spared) == [] and _audit(db, "workflow.bulk_signal") == []

    form = {**base, "signal_name": "go", "payload": '{"n": 7, "why": "a \\"quoted\\" <b>"}'}
    page, forms = _continued(ui, form)
    assert len(forms) == 2 and "Signal runs: done" in page.text
    continued = forms[1]  # (the Continue form carries the signal as it was given)
    assert continued["signal_name"] == "go" and json.loads(continued["payload"]) == {
        "n": 7,
        "why": 'a "quoted" <b>',
    }
    summary = re.sub(r"\s+", " ", page.text.split('id="bulk-summary">')[1].split("</p>")[0])
    assert "<strong>3</strong> signalled" in summary and "<strong>0</strong> failed" in summary, summary

    got = _events(db, runs + spared)
    assert sorted(r for r, _ in got) == sorted(runs)  # each run once, the spared none
    assert {(d["name"], json.dumps(d["payload"], sort_keys=True)) for _, d in got} == {
        ("go", json.dumps({"n": 7, "why": 'a "quoted" <b>'}, sort_keys=True))
    }
    audit = _audit(db, "workflow.bulk_signal")
    assert len(audit) == 2 and {(a[0], a[1], a[2]["reason"]) for a in audit} == {
        ("ui", "operate-user", "rollout 7")
    }
    assert len({a[2]["batch_id"] for a in audit}) == 1 and {d["signal_id"] for _, d in got} == {
        audit[0][2]["batch_id"]
    }


def test_pause_then_resume_through_the_confirm_page_and_refused_from_another_site(db: str) -> None:
    """The list offers Pause and Resume to an operator; the count page counts the RUNNING runs
    (a pause) or the PAUSED ones (a resume); the confirmed form, posted from another site's page,
    is refused (403, nothing paused), and from the dashboard's own page pauses them, one
    workflow.bulk_pause audit row a step; a resume the same way."""
    runs = _runs(db, "digest", 3, "pz")
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT harvest.pause_workflow(%s, 'by hand')", (runs[0],))
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes(), timeout=3.0)) as ui:
        listed = ui.get("/workflows?workflow_name=digest", headers=OPERATE).text
        assert 'value="pause"' in listed and 'value="resume"' in listed
        assert ui.get("/workflows/bulk?action=pause&workflow_name=digest", headers=READ).status_code == 403
        count = ui.get("/workflows/bulk?action=pause&workflow_name=digest", headers=OPERATE)
        assert count.status_code == 200 and "Pause 2 runs?" in count.text, count.text
        form = {**_hidden(count.text, "bulk-runs-form"), "reason": "bad deploy"}
        assert form["action"] == "pause"
        cross = ui.post("/workflows/bulk", data=form, headers={**OPERATE, "Origin": "https://evil.example"})
        assert cross.status_code == 403
        assert [s for s, _ in _statuses(db, runs[1:]).values()] == ["RUNNING", "RUNNING"]
        assert _audit(db, "workflow.bulk_pause") == []
        done = ui.post("/workflows/bulk", data=form, headers=OPERATE)
        assert done.status_code == 200 and "Pause runs: done" in done.text, done.text
        assert "<strong>2</strong> paused" in done.text
        assert {s for s, _ in _statuses(db, runs).values()} == {"PAUSED"}
        audit = _audit(db, "workflow.bulk_pause")
        assert [(a[0], a[1], a[2]["reason"]) for a in audit] == [("ui", "operate-user", "bad deploy")]

        count = ui.get("/workflows/bulk?action=resume&workflow_name=digest", headers=OPERATE)
        assert "Resume 3 runs?" in count.text
        form = {**_hidden(count.text, "bulk-runs-form"), "reason": "fixed"}
        done = ui.post("/workflows/bulk", data=form, headers=OPERATE)
        assert done.status_code == 200 and "<strong>3</strong> resumed" in done.text, done.text
    assert {s for s, _ in _statuses(db, runs).values()} == {"RUNNING"}
    assert len(_audit(db, "workflow.bulk_resume")) == 1
