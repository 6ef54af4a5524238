"""The dashboard's newer pages with values an attacker chose (a schedule's name, workflow,
queue, cron and input; a bulk action's filters; an offloaded payload; what a refused form sent
back): each shown as text, never as markup, a javascript: URL never a link. Through the
management app (/ui) with real tokens, as a deployment serves it."""

from __future__ import annotations

import urllib.parse
from html.parser import HTMLParser

import psycopg
from psycopg.types.json import Jsonb
from web_helpers import api_client

EVIL = '"\'><script>alert(1)</script><svg onload=alert(1)>" onmouseover="alert(1)'
JS = "javascript:alert(1)"


class _Elements(HTMLParser):
    """Every element of a page with its attributes, as a browser parses them."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, attrs))


def _markup_free(page: str, where: str) -> None:
    """No element the values made: no script or svg, no on* handler, no javascript: link."""
    parser = _Elements()
    parser.feed(page)
    for tag, attrs in parser.found:
        assert tag not in ("script", "svg"), (where, tag)
        for key, value in attrs:
            assert not key.startswith("on"), (where, tag, key)
            if key in ("href", "action", "src", "formaction"):
                assert not (value or "").strip().lower().startswith("javascript:"), (where, tag, value)


def test_new_pages_show_hostile_values_as_text(db: str, tokens: dict[str, str]) -> None:
    name = f"s{EVIL}"
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "SELECT harvest.create_schedule(%s, %s, p_interval_secs => 3600, p_input => %s, p_queue => %s)",
            (name, f"wf{EVIL}", Jsonb([EVIL, JS]), f"q{EVIL}"),
        )
        (run,) = conn.execute(
            "SELECT execution_id FROM harvest.start_workflow(%s, '[]', %s, %s, p_search_attributes => %s)",
            (f"wf{EVIL}", f"id{EVIL}", f"q{EVIL}", Jsonb({f"k{EVIL}": JS})),
        ).fetchone()
        (ref,) = conn.execute(
            "SELECT (harvest.put_payloads(%s, ARRAY[%s::jsonb]))[1]", (run, Jsonb({"note": EVIL, "url": JS}))
        ).fetchone()
        conn.execute(
            "SELECT harvest.signal_workflow(%s, %s, %s)",
            (run, f"sig{EVIL}", Jsonb({"_harvest_ref": str(ref), "bytes": 80})),
        )
    seg = urllib.parse.quote(name, safe="")
    q = urllib.parse.quote
    admin = {"Authorization": f"Bearer {tokens['admin']}"}
    with api_client(db, profile="production") as api:
        pages = {
            "schedule": api.get(f"/ui/schedules/0/{seg}", headers=admin),
            "schedules": api.get("/ui/schedules", headers=admin),
            "run (offloaded, full)": api.get(f"/ui/workflows/{run}?payloads=full", headers=admin),
            "bulk count": api.get(
                f"/ui/workflows/bulk?action=pause&workflow_name={q(EVIL, safe='')}&filter={q('k = ' + JS)}",
                headers=admin,
            ),
            "backfill confirm": api.post(
                f"/ui/schedules/0/{seg}/backfill",
                data={"from": "2026-01-01T00:00Z", "to": "2026-01-01T03:00Z"},
                headers=admin,
            ),
            "delete confirm": api.post(f"/ui/schedules/0/{seg}/delete", data={}, headers=admin),
            "create refused": api.post(
                "/ui/schedules",
                data={"name": f"n{EVIL}", "workflow_name": f"w{EVIL}", "cron": EVIL, "tz": JS, "input": EVIL},
                headers=admin,
            ),
            "edit refused": api.post(
                f"/ui/schedules/0/{seg}/edit", data={"cron": EVIL, "queue": JS, "jitter": EVIL}, headers=admin
            ),
            "bulk pause": api.post(
                "/ui/workflows/bulk",
                data={
                    "action": "pause",
                    "filters": urllib.parse.urlencode({"workflow_name": f"wf{EVIL}", "status": "RUNNING"}),
                    "reason": EVIL,
                },
                headers=admin,
            ),
        }
        for where, page in pages.items():
            assert page.status_code < 500, (where, page.status_code, page.text[-400:])
            _markup_free(page.text, where)
        full = pages["run (offloaded, full)"].text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in full  # the offloaded payload, read back, as text


def test_a_schedule_input_nested_too_deep_is_a_400_page_not_a_500(db: str, tokens: dict[str, str]) -> None:
    operate = {"Authorization": f"Bearer {tokens['operate']}"}
    with api_client(db, profile="production") as api:
        for depth in (600, 100_000):
            deep = "[" * depth + "]" * depth
            page = api.post(
                "/ui/schedules", data={"name": f"deep{depth}", "every": "1h", "input": deep}, headers=operate
            )
            assert page.status_code == 400, (depth, page.status_code, page.text[-300:])
            assert "input" in page.text
    with psycopg.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM harvest.schedules").fetchone()[0] == 0


def test_a_nul_in_an_id_or_a_filter_is_a_400_naming_the_field(db: str, tokens: dict[str, str]) -> None:
    """A NUL in a page's query or path: a 400 page naming the field, where the page showed the
    driver's own words ("... cannot contain NUL (0x00) bytes") with no field named."""
    admin = {"Authorization": f"Bearer {tokens['admin']}"}
    with api_client(db, profile="production") as api:
        for path, field in (
            ("/ui/workflows?workflow_name=a%00b", "workflow_name"),
            ("/ui/workflows?workflow_id=a%00b", "workflow_id"),
            ("/ui/workflows/find?id=a%00b", "id"),
            ("/ui/start-gates?workflow_name=a%00b", "workflow_name"),
            ("/ui/workers/w%00x", "worker_id"),
            ("/ui/workflows/bulk?action=pause&workflow_name=a%00b", "workflow_name"),
        ):
            page = api.get(path, headers=admin)
            assert page.status_code == 400, (path, page.status_code, page.text[-300:])
            assert f"{field}: contains a NUL character" in page.text, (path, page.text[-600:])
            assert "0x00" not in page.text, path
        form = api.post(
            "/ui/workflows/bulk",
            data={"action": "pause", "filters": "workflow_name=w", "reason": "a\x00b"},
            headers=admin,
        )
        assert form.status_code == 400 and "reason: contains a NUL character" in form.text, form.text[-600:]
