"""A workflow schedule created from /schedules' New schedule form and changed from its page's
Edit form over HTTP (fast suite): checked as POST /admin/schedules/workflow and PATCH check a body
(harvest.web.schedule_spec), bad input a 400 naming the field with the form filled again, refused
from another site's page and to a read token, the audit row with the source ui
(docs/dashboard.md, "Schedules")."""

from __future__ import annotations

import html
import json
import re
import urllib.parse

import psycopg
import pytest
from dashboard_helpers import TokenScopes
from starlette.testclient import TestClient

from harvest.declare.schedules import OVERLAP_POLICIES

READ, OPERATE = ({"Authorization": f"Bearer {s}-token"} for s in ("read", "operate"))
OURS = {"Origin": "http://127.0.0.1:8080", "Sec-Fetch-Site": "same-origin"}
OTHER_SITES = ({"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"})
PAGE = "/schedules/0/hourly%2Freport"


def _row(db: str, name: str) -> dict | None:
    with psycopg.connect(db, autocommit=True) as conn:
        got = conn.execute(
            "SELECT to_jsonb(s) FROM harvest.schedules AS s WHERE s.name = %s", (name,)
        ).fetchone()
    return got[0] if got else None


def _audit(db: str, operation: str) -> list[tuple]:
    """The audit rows of ``operation``, but the fixture's own create (over SQL, as postgres)."""
    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute(
            "SELECT source, target, actor, details FROM harvest.audit_log WHERE operation = %s"
            " AND actor IS DISTINCT FROM 'postgres' ORDER BY id",
            (operation,),
        ).fetchall()


def _form(page: str, form_id: str) -> tuple[str, dict[str, str]]:
    """The action and the fields of form ``form_id``: its inputs' values, its textareas' text
    and its selects' chosen options, as a browser submits them."""
    form = re.search(rf'<form[^>]*id="{form_id}"[^>]*action="([^"]+)"(.*?)</form>', page, re.S)
    assert form, form_id
    body = form.group(2)
    inputs = r'<input (?![^>]*type="checkbox")[^>]*name="([^"]+)"[^>]*value="([^"]*)"'
    fields = dict(re.findall(inputs, body))
    fields.update(re.findall(r'<textarea [^>]*name="([^"]+)"[^>]*>(.*?)</textarea>', body, re.S))
    for name, options in re.findall(r'<select name="([^"]+)">(.*?)</select>', body, re.S):
        chosen = re.search(r'<option value="([^"]*)" selected>', options) or re.search(
            r'<option value="([^"]*)"', options
        )
        fields[name] = chosen.group(1)
    return html.unescape(form.group(1)), {html.unescape(n): html.unescape(v) for n, v in fields.items()}


def _refilled(drawn: dict[str, str], sent: dict[str, str]) -> bool:
    """The form drawn again holds what was sent (a select, only a value it offers: a browser
    sends no other)."""
    offered = {"overlap": ("", *OVERLAP_POLICIES), "catchup": ("true", "false")}
    return all(v == sent[k] for k, v in drawn.items() if sent[k] in offered.get(k, (sent[k],)))


def _said(response) -> str:
    return urllib.parse.parse_qs(urllib.parse.urlsplit(response.headers["location"]).query)["msg"][0]


NEW = {
    "name": "nightly/sales",
    "workflow_name": "sales",
    "cron": "0 2 * * *",
    "tz": "Europe/Paris",
    "every": "",
    "input": '{"region": "eu"}',
    "queue": "reports",
    "max_active_runs": "3",
    "overlap": "allow_all",
    "catchup": "true",
    "catchup_window": "2h",
    "jitter": "30s",
}


def test_a_schedule_made_on_the_new_schedule_form_is_listed_and_fires(client: TestClient, db: str) -> None:
    assert 'id="create-form"' not in client.get("/schedules", headers=READ).text  # a read token: no form
    action, blank = _form(client.get("/schedules", headers=OPERATE).text, "create-form")
    assert action == "/schedules" and blank["name"] == "" and blank["catchup"] == "false"
    assert client.post(action, headers=READ, data=NEW).status_code == 403
    for sent_from in OTHER_SITES:
        refused = client.post(action, headers={**OPERATE, **sent_from}, data=NEW, follow_redirects=False)
        assert refused.status_code == 403, sent_from
    assert _row(db, "nightly/sales") is None and _audit(db, "schedule.create") == []

    done = client.post(action, headers={**OPERATE, **OURS}, data=NEW, follow_redirects=False)
    assert done.status_code == 303, done.text
    page = "/schedules/0/nightly%2Fsales"
    assert done.headers["location"].startswith(f"{page}?")
    assert _said(done) == "created schedule nightly/sales on shard 0"
    row = _row(db, "nightly/sales")
    assert row is not None
    assert {k: row[k] for k in ("workflow_name", "cron", "interval_secs", "timezone", "input", "queue")} == {
        "workflow_name": "sales",
        "cron": "0 2 * * *",
        "interval_secs": None,
        "timezone": "Europe/Paris",
        "input": [{"region": "eu"}],
        "queue": "reports",
    }
    assert (row["max_active_runs"], row["overlap"], row["catchup"], row["catchup_window_secs"]) == (
        3,
        "allow_all",
        True,
        7200,
    )
    assert float(row["jitter_secs"]) == 30 and row["paused"] is False and row["declared"] is False
    assert [a[:3] for a in _audit(db, "schedule.create")] == [("ui", "nightly/sales", "operate-user")]

    listed = client.get("/schedules", headers=READ).text
    assert 'data-name="nightly/sales"' in listed and 'href="/schedules/0/nightly%2Fsales"' in listed
    fired = client.post(f"{page}/trigger", headers={**OPERATE, **OURS}, data={}, follow_redirects=False)
    assert fired.status_code == 303 and _said(fired).startswith("triggered: slot")
    with psycopg.connect(db, autocommit=True) as conn:
        runs = conn.execute(
            "SELECT workflow_name, queue FROM harvest.executions"
            " WHERE workflow_id LIKE 'sched:nightly/sales:%%'"
        ).fetchall()
    assert runs == [("sales", "reports")]

    again = client.post(action, headers=OPERATE, data=NEW, follow_redirects=False)
    assert again.status_code == 409 and len(_audit(db, "schedule.create")) == 1
    # an interval, created paused, its workflow named after it by default
    every = {"name": "tick", "every": "15m", "paused": "true"}
    assert client.post(action, headers=OPERATE, data=every, follow_redirects=False).status_code == 303
    tick = _row(db, "tick")
    assert (tick["workflow_name"], tick["interval_secs"], tick["cron"], tick["paused"]) == (
        "tick",
        900,
        None,
        True,
    )


def test_an_edit_form_is_the_schedule_filled_in_and_sends_what_changed(client: TestClient, db: str) -> None:
    assert 'id="edit-form"' not in client.get(PAGE, headers=READ).text
    action, fields = _form(client.get(PAGE, headers=OPERATE).text, "edit-form")
    assert action == f"{PAGE}/edit"
    assert {k: v for k, v in fields.items() if k != "drawn"} == {
        "workflow_name": "report",
        "cron": "",
        "tz": "",
        "every": "3600s",
        "input": "",
        "queue": "reports",
        "max_active_runs": "2",
        "overlap": "skip",
        "catchup": "false",
        "catchup_window": "",
        "jitter": "",
    }
    changed = {**fields, "every": "", "cron": "30 * * * *", "tz": "Asia/Tokyo", "max_active_runs": "4"}
    assert client.post(action, headers=READ, data=changed).status_code == 403
    for sent_from in OTHER_SITES:
        refused = client.post(action, headers={**OPERATE, **sent_from}, data=changed, follow_redirects=False)
        assert refused.status_code == 403, sent_from
    assert _row(db, "hourly/report")["interval_secs"] == 3600 and _audit(db, "schedule.update") == []

    done = client.post(action, headers={**OPERATE, **OURS}, data=changed, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"].startswith(f"{PAGE}?")
    assert _said(done) == "updated: cron, max_active_runs, timezone"
    row = _row(db, "hourly/report")
    assert (row["cron"], row["interval_secs"], row["timezone"], row["max_active_runs"]) == (
        "30 * * * *",
        None,
        "Asia/Tokyo",
        4,
    )
    assert (row["queue"], row["workflow_name"], row["overlap"]) == ("reports", "report", "skip")
    [(source, target, actor, detail)] = _audit(db, "schedule.update")
    assert (source, target, actor) == ("ui", "hourly/report", "operate-user")
    assert detail["changes"] == {"cron": "30 * * * *", "timezone": "Asia/Tokyo", "max_active_runs": 4}

    # the page shows the new spec, and its Edit form is filled with it
    page = client.get(PAGE, headers=OPERATE).text
    assert "30 * * * *" in page and "Asia/Tokyo" in page
    _, now = _form(page, "edit-form")
    assert (now["cron"], now["tz"], now["every"], now["max_active_runs"]) == (
        "30 * * * *",
        "Asia/Tokyo",
        "",
        "4",
    )
    same = client.post(action, headers=OPERATE, data=now, follow_redirects=False)
    assert _said(same) == "nothing changed" and len(_audit(db, "schedule.update")) == 1

    # catch-up on with a window, an input: sent; a DAG's schedule has no Edit form
    more = {**now, "catchup": "true", "catchup_window": "1h", "input": "[1, 2]", "jitter": "5s"}
    assert "catchup, catchup_window_secs, input, jitter_secs" in _said(
        client.post(action, headers=OPERATE, data=more, follow_redirects=False)
    )
    row = _row(db, "hourly/report")
    assert (row["catchup"], row["catchup_window_secs"], row["input"]) == (True, 3600, [[1, 2]])
    assert 'id="edit-declared"' not in page


def test_an_edit_keeps_what_changed_after_its_form_was_drawn(client: TestClient, db: str) -> None:
    """Another change lands while the form is open (a deploy's new spec, another operator): the
    save sends the field the user changed, not the form's old values of the others (review68c)."""
    action, fields = _form(client.get(PAGE, headers=OPERATE).text, "edit-form")
    assert json.loads(fields["drawn"])["queue"] == "reports"
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT harvest.update_schedule('hourly/report', '{\"queue\": \"reports-v2\"}')")
    done = client.post(
        action, headers=OPERATE, data={**fields, "max_active_runs": "4"}, follow_redirects=False
    )
    assert _said(done) == "updated: max_active_runs"
    row = _row(db, "hourly/report")
    assert (row["queue"], row["max_active_runs"]) == ("reports-v2", 4)


def test_editing_a_declared_schedule_says_what_the_app_does_with_the_edit(
    client: TestClient, db: str
) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("UPDATE harvest.schedules SET declared = true WHERE name = 'hourly/report'")
    page = client.get(PAGE, headers=OPERATE).text
    assert 'id="edit-declared"' in page and "An edit stays" in page and "warns of it at boot" in page


CREATE_BAD = [
    ({"name": ""}, "name: is required"),
    ({"cron": "61 * * * *"}, "cron: Schedule.cron: the minute field"),
    ({"tz": "Mars/Olympus"}, "tz: Schedule.cron: tz 'Mars/Olympus' is not a known time zone"),
    ({"every": "15m"}, "every: give cron or every, not both"),
    ({"cron": "", "tz": ""}, "cron: give cron or every"),
    ({"cron": "", "tz": "", "every": "often"}, "every: Schedule.every: cannot parse 'often'"),
    ({"cron": "", "every": "1h"}, "tz: tz goes with cron"),
    ({"input": "{region"}, "input: not JSON"),
    ({"max_active_runs": "many"}, 'max_active_runs: expected a number, got "many"'),
    ({"max_active_runs": "0"}, "max_active_runs: 0 is out of range 1..1000000"),
    ({"overlap": "often"}, "overlap: 'often' is not one of skip"),
    ({"catchup": "maybe"}, 'catchup: expected true or false, got "maybe"'),
    ({"catchup_window": "soon"}, "catchup_window: cannot parse"),
    ({"catchup": "false"}, "catchup_window: give catchup false or catchup_window, not both"),
    ({"jitter": "-5s"}, "jitter: '-5s' is not a non-negative"),
]


@pytest.mark.parametrize(("sent", "said"), CREATE_BAD)
def test_a_bad_new_schedule_is_a_400_naming_its_field_with_the_form_filled_again(
    client: TestClient, db: str, sent: dict[str, str], said: str
) -> None:
    form = {**NEW, **sent}
    refused = client.post("/schedules", headers={**OPERATE, **OURS}, data=form)
    assert refused.status_code == 400, refused.text
    error = re.search(r'id="form-error"><strong>400</strong> (.*?)</p>', refused.text, re.S)
    assert error and html.unescape(error.group(1)).startswith(said), refused.text  # (the field once)
    _, again = _form(refused.text, "create-form")
    assert _refilled(again, form)
    assert _row(db, form["name"] or "x") is None and _audit(db, "schedule.create") == []


# (an edit with no cron and no interval keeps the schedule's: no "give cron or every")
EDIT_BAD = [case for case in CREATE_BAD if "name" not in case[0] and case[1] != "cron: give cron or every"]


@pytest.mark.parametrize(("sent", "said"), EDIT_BAD)
def test_a_bad_edit_is_a_400_naming_its_field_with_the_form_filled_again(
    client: TestClient, db: str, sent: dict[str, str], said: str
) -> None:
    action, fields = _form(client.get(PAGE, headers=OPERATE).text, "edit-form")
    # a cron schedule's form (every emptied), with the field of the case
    form = {
        **fields,
        "every": "",
        "cron": "0 2 * * *",
        "tz": "UTC",
        "catchup": "true",
        "catchup_window": "2h",
        **sent,
    }
    refused = client.post(action, headers=OPERATE, data=form)
    assert refused.status_code == 400, refused.text
    error = re.search(r'id="form-error"><strong>400</strong> (.*?)</p>', refused.text, re.S)
    assert error and html.unescape(error.group(1)).startswith(said), refused.text  # (the field once)
    _, again = _form(refused.text, "edit-form")
    assert _refilled(again, form)
    assert _row(db, "hourly/report")["interval_secs"] == 3600 and _audit(db, "schedule.update") == []


def test_a_dags_schedule_is_not_edited_here(client: TestClient, db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("UPDATE harvest.schedules SET kind = 'dag' WHERE name = 'hourly/report'")
    page = client.get(PAGE, headers=OPERATE).text
    assert 'id="edit-form"' not in page and 'id="edit-dag"' in page
    refused = client.post(f"{PAGE}/edit", headers=OPERATE, data={"every": "2h"})
    assert refused.status_code == 400 and "is a DAG&#39;s" in refused.text
    assert _row(db, "hourly/report")["interval_secs"] == 3600


def test_an_edit_clears_the_input_the_queue_and_max_active_runs_emptied(client: TestClient, db: str) -> None:
    """A blank field kept the schedule's setting, so the Edit form could not clear an input, a
    queue or max active runs (docs/dashboard.md named it a limit). Emptied, each is cleared as the
    API's PATCH clears a null and `harvest schedule update --clear` does: no input, the
    workflow's queue (no App served, none registered: default), one run; a field drawn blank
    stays as it is."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT harvest.update_schedule('hourly/report', '{\"input\": [{\"day\": 1}]}')")
    action, fields = _form(client.get(PAGE, headers=OPERATE).text, "edit-form")
    assert (fields["input"], fields["queue"], fields["max_active_runs"]) == ('{"day": 1}', "reports", "2")
    emptied = {**fields, "input": "", "queue": "", "max_active_runs": ""}
    done = client.post(action, headers={**OPERATE, **OURS}, data=emptied, follow_redirects=False)
    assert done.status_code == 303, done.text
    assert _said(done) == "updated: input, max_active_runs, queue"
    row = _row(db, "hourly/report")
    assert (row["input"], row["queue"], row["max_active_runs"]) == ([], "default", 1)
    [(*_, detail)] = _audit(db, "schedule.update")
    assert detail["changes"] == {"input": None, "queue": None, "max_active_runs": None}
    # drawn again: the input blank, sent blank, changes nothing
    _, now = _form(client.get(PAGE, headers=OPERATE).text, "edit-form")
    assert now["input"] == ""
    same = client.post(action, headers=OPERATE, data=now, follow_redirects=False)
    assert _said(same) == "nothing changed" and len(_audit(db, "schedule.update")) == 1


def test_a_schedule_made_or_cleared_without_a_queue_takes_the_served_app_s(db: str) -> None:
    """The API's create without a queue takes the served App's declared queue of the workflow
    (declared_queue), the dashboard's took the SQL's default (the registered queue, else
    default): its runs went where the App's workers do not poll. Mounted in the management app,
    the dashboard's New schedule, and an Edit that empties the queue, take the App's, as the
    API's create and PATCH do."""
    from harvest import App, workflow
    from harvest.config import load_config
    from harvest.web.app import management_app

    @workflow(name="sales", queue="sales-q")
    async def sales(ctx) -> None:
        return None

    api = management_app(
        dsn=db, config=load_config(env={}), authorizer=TokenScopes(), app=App(workflows=[sales])
    )
    with TestClient(api, base_url="http://127.0.0.1:8080") as c:
        made = c.post(
            "/ui/schedules",
            headers={**OPERATE, **OURS},
            data={"name": "nightly", "workflow_name": "sales", "every": "1h"},
            follow_redirects=False,
        )
        assert made.status_code == 303, made.text
        assert _row(db, "nightly")["queue"] == "sales-q"
        answered = c.post(
            "/admin/schedules/workflow",
            headers=OPERATE,
            json={"name": "by-api", "workflow_name": "sales", "every": "1h"},
        )
        assert answered.status_code == 201 and _row(db, "by-api")["queue"] == "sales-q"  # (the same)

        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute("SELECT harvest.update_schedule('nightly', '{\"queue\": \"elsewhere\"}')")
        action, fields = _form(c.get("/ui/schedules/0/nightly", headers=OPERATE).text, "edit-form")
        assert fields["queue"] == "elsewhere"
        done = c.post(
            action,
            headers={**OPERATE, **OURS},
            data={**fields, "queue": ""},
            follow_redirects=False,
        )
        assert done.status_code == 303 and _said(done) == "updated: queue"
        assert _row(db, "nightly")["queue"] == "sales-q"
        # the API's PATCH with a null queue: the App's too
        c.patch("/admin/schedules/by-api", headers=OPERATE, json={"queue": "elsewhere"})
        cleared = c.patch("/admin/schedules/by-api", headers=OPERATE, json={"queue": None})
        assert cleared.status_code == 200, cleared.text
        assert _row(db, "by-api")["queue"] == "sales-q"


def test_a_workflow_no_worker_registered_is_kept_by_the_forms_checkbox(client: TestClient, db: str) -> None:
    """A schedule of a workflow its queue's workers did not register (HR010) was refused in the
    SQL's words (`p_allow_unregistered`), and neither form could keep one: a 400 over the form
    filled again, saying to tick its checkbox, which keeps it."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT harvest.register_workflows(ARRAY['reports'], ARRAY['report'])")
    override = 'tick "Allow a workflow no worker registered yet"'
    page = client.get("/schedules", headers=OPERATE).text
    action, _ = _form(page, "create-form")
    assert 'name="allow_unregistered" value="true"> Allow a workflow no worker registered yet' in page
    refused = client.post(action, headers={**OPERATE, **OURS}, data=NEW)
    assert refused.status_code == 400, refused.text
    error = re.search(r'id="form-error"><strong>400</strong> (.*?)</p>', refused.text, re.S)
    said = html.unescape(error.group(1)) if error else refused.text
    assert 'workflow "sales" is not registered on queue "reports"' in said and override in said, said
    assert "p_allow_unregistered" not in said
    _, again = _form(refused.text, "create-form")
    assert _refilled(again, NEW) and _row(db, "nightly/sales") is None
    kept = {**NEW, "allow_unregistered": "true"}
    done = client.post(action, headers={**OPERATE, **OURS}, data=kept, follow_redirects=False)
    assert done.status_code == 303, done.text
    assert _row(db, "nightly/sales")["workflow_name"] == "sales"
    for sent_from in OTHER_SITES:  # (the checkbox is the form's: refused from another site)
        other = {**kept, "name": "other"}
        assert client.post(action, headers={**OPERATE, **sent_from}, data=other).status_code == 403
    assert client.post(action, headers=READ, data={**kept, "name": "other"}).status_code == 403

    edit, fields = _form(client.get(PAGE, headers=OPERATE).text, "edit-form")
    assert 'name="allow_unregistered"' in client.get(PAGE, headers=OPERATE).text
    moved = {**fields, "workflow_name": "sales"}
    refused = client.post(edit, headers={**OPERATE, **OURS}, data=moved)
    assert refused.status_code == 400 and override in html.unescape(refused.text), refused.text
    assert "p_allow_unregistered" not in refused.text
    assert _row(db, "hourly/report")["workflow_name"] == "report"
    done = client.post(
        edit,
        headers={**OPERATE, **OURS},
        data={**moved, "allow_unregistered": "true"},
        follow_redirects=False,
    )
    assert done.status_code == 303 and _said(done) == "updated: workflow_name", done.text
    assert _row(db, "hourly/report")["workflow_name"] == "sales"


def test_a_schedule_of_several_arguments_is_edited_as_a_json_array(client: TestClient, db: str) -> None:
    """The Edit form showed the input only for one argument: a schedule of several (the API's
    args) was drawn with an empty input, so its arguments could not be seen or changed there,
    only replaced by one. Now it is drawn as args, a JSON array, saved as the API's args; to a
    principal who sees no payloads the form is drawn as before (an empty input that stays)."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT harvest.update_schedule('hourly/report', '{\"input\": [1, {\"day\": 2}]}')")
    action, fields = _form(client.get(PAGE, headers=OPERATE).text, "edit-form")
    assert fields["args"] == '[1, {"day": 2}]' and "input" not in fields
    same = client.post(action, headers={**OPERATE, **OURS}, data=fields, follow_redirects=False)
    assert _said(same) == "nothing changed"
    changed = {**fields, "args": '[3, "x"]'}
    done = client.post(action, headers={**OPERATE, **OURS}, data=changed, follow_redirects=False)
    assert done.status_code == 303 and _said(done) == "updated: input", done.text
    assert _row(db, "hourly/report")["input"] == [3, "x"]
    bad = client.post(action, headers={**OPERATE, **OURS}, data={**fields, "args": '{"day": 2}'})
    assert bad.status_code == 400 and "args" in html.unescape(bad.text), bad.text
    assert _row(db, "hourly/report")["input"] == [3, "x"]
    _, now = _form(client.get(PAGE, headers=OPERATE).text, "edit-form")
    cleared = client.post(
        action, headers={**OPERATE, **OURS}, data={**now, "args": ""}, follow_redirects=False
    )
    assert _said(cleared) == "updated: input" and _row(db, "hourly/report")["input"] == []


def test_a_principal_who_sees_no_payloads_edits_a_schedule_of_several_arguments_as_before(db: str) -> None:
    from harvest.web.principal import Principal
    from harvest.web.ui import dashboard_app

    class NoPayloads:
        async def authorize(self, request, needed) -> Principal:
            return Principal(actor="ops", scope="operate", source="ui", payloads=False)

    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "SELECT harvest.create_schedule('many', 'report', p_interval_secs => 3600, p_input => '[1, 2]')"
        )
    with TestClient(dashboard_app(dsn=db, authorizer=NoPayloads()), base_url="http://127.0.0.1:8080") as ui:
        action, fields = _form(ui.get("/schedules/0/many").text, "edit-form")
        assert fields["input"] == "" and "args" not in fields
        done = ui.post(action, headers=OURS, data={**fields, "every": "2h"}, follow_redirects=False)
        assert _said(done) == "updated: interval_secs"
    assert _row(db, "many")["input"] == [1, 2]


def test_the_forms_check_the_arguments_against_the_served_apps_workflow(db: str) -> None:
    """The API's create and PATCH bind a schedule's arguments to the served App's workflow (a
    400 naming input or args: such a schedule failed every firing); the dashboard's New schedule
    and Edit did not, so the same schedule made there was kept. Now they check them the same."""
    from harvest import App, workflow
    from harvest.config import load_config
    from harvest.web.app import management_app

    @workflow(name="regional")
    async def regional(ctx, region: str) -> None:
        return None

    api = management_app(
        dsn=db, config=load_config(env={}), authorizer=TokenScopes(), app=App(workflows=[regional])
    )
    with TestClient(api, base_url="http://127.0.0.1:8080") as c:
        sent = {"name": "nightly-eu", "workflow_name": "regional", "every": "1h", "input": ""}
        refused = c.post("/ui/schedules", headers={**OPERATE, **OURS}, data=sent, follow_redirects=False)
        assert refused.status_code == 400, refused.text
        said = html.unescape(refused.text)
        assert "input" in said and "region" in said, said
        assert _row(db, "nightly-eu") is None
        made = c.post(
            "/ui/schedules",
            headers={**OPERATE, **OURS},
            data={**sent, "input": '"eu"'},
            follow_redirects=False,
        )
        assert made.status_code == 303, made.text
        assert _row(db, "nightly-eu")["input"] == ["eu"]

        # Edit: emptying the input (clearing the argument) is refused, as the API's PATCH is
        action, fields = _form(c.get("/ui/schedules/0/nightly-eu", headers=OPERATE).text, "edit-form")
        assert fields["input"] == '"eu"'
        emptied = c.post(
            action, headers={**OPERATE, **OURS}, data={**fields, "input": ""}, follow_redirects=False
        )
        assert emptied.status_code == 400, emptied.text
        assert _row(db, "nightly-eu")["input"] == ["eu"]
        by_api = c.patch("/admin/schedules/nightly-eu", headers=OPERATE, json={"args": None})
        assert by_api.status_code == 400 and by_api.json()["error"]["field"] == "args", by_api.text
        # a change the workflow takes is saved
        changed = c.post(
            action, headers={**OPERATE, **OURS}, data={**fields, "input": '"us"'}, follow_redirects=False
        )
        assert changed.status_code == 303, changed.text
        assert _row(db, "nightly-eu")["input"] == ["us"]
