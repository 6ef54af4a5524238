"""A schedule's run arguments on every face: read back in the shape they are written (`args`, the
list), several given at once (`args`, `--args-json`), and a JSON null argument stored alike over
SQL and over HTTP. Before, an answer's `input` was the argument list where a write's `input` was
the one argument (sent back as read, it nested: [["eu"]]); only one argument could be given from
the CLI or the API; and `--input-json null` stored [null] over SQL but no argument over HTTP
(the CLI sent a one-element list as its element, and the API took an input of null for none)."""

from __future__ import annotations

import json

import psycopg
import pytest
from served_cli import over, served, transports
from web_helpers import api_client

HOURLY = {"workflow_name": "w", "every": "1h"}


def _stored(db: str, name: str) -> list:
    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute("SELECT input FROM harvest.schedules WHERE name = %s", (name,)).fetchone()[0]


def test_an_answers_arguments_are_what_a_write_takes_back(db: str, monkeypatch) -> None:
    with api_client(db) as api:
        made = api.post("/admin/schedules/workflow", json={"name": "n", "workflow_name": "w", "every": "1h",
                                                          "input": {"region": "eu"}})  # fmt: skip
        assert made.status_code == 201, made.text
        assert made.json()["args"] == [{"region": "eu"}] and "input" not in made.json()
        got = api.get("/admin/schedules/n").json()
        assert got["args"] == [{"region": "eu"}] and "input" not in got
        # Sent back as read, it is the same arguments (an answer's input, sent back, nested).
        again = api.patch("/admin/schedules/n", json={"args": got["args"], "every": "2h"})
        assert again.status_code == 200, again.text
        assert again.json()["args"] == [{"region": "eu"}] == _stored(db, "n")
        listed = api.get("/admin/schedules").json()["schedules"]
        assert [r["name"] for r in listed] == ["n"]
    # The CLI shows what the API answers, over either transport.
    with served(db, monkeypatch):
        shown = transports(db, "schedule", "get", "n", "-o", "json")
    for how, result in shown.items():
        assert result.exit_code == 0, (how, result.output)
        row = json.loads(result.stdout)
        assert row["args"] == [{"region": "eu"}] and "input" not in row, how


def test_several_arguments_from_the_api_and_the_cli(db: str, monkeypatch) -> None:
    with api_client(db) as api:
        made = api.post("/admin/schedules/workflow", json={**HOURLY, "name": "two", "args": ["eu", 3]})
        assert made.status_code == 201, made.text
        assert made.json()["args"] == ["eu", 3] == _stored(db, "two")
        both = api.post("/admin/schedules/workflow", json={**HOURLY, "name": "b", "input": 1, "args": [1]})
        assert both.status_code == 400 and both.json()["error"]["field"] == "args", both.text
        assert "not both" in both.json()["error"]["message"]
        scalar = api.patch("/admin/schedules/two", json={"args": "eu"})
        assert scalar.status_code == 400 and scalar.json()["error"]["field"] == "args", scalar.text
        none = api.patch("/admin/schedules/two", json={"args": []})
        assert none.status_code == 200 and _stored(db, "two") == []
    with served(db, monkeypatch):
        for how in ("sql", "http"):
            done = over(how, db, "schedule", "create-workflow", "--name", f"c-{how}", "--workflow", "w",
                        "--every", "1h", "--args-json", '["eu", 3, null]', "-o", "json")  # fmt: skip
            assert done.exit_code == 0, (how, done.output)
            assert json.loads(done.stdout)["args"] == ["eu", 3, None] == _stored(db, f"c-{how}"), how
            changed = over(how, db, "schedule", "update", f"c-{how}", "--args-json", "[[1, 2]]", "-o", "json")
            assert changed.exit_code == 0, (how, changed.output)
            assert _stored(db, f"c-{how}") == [[1, 2]], how
            both = over(how, db, "schedule", "update", f"c-{how}", "--args-json", "[1]", "--input-json", "1")
            assert both.exit_code == 2 and "not both" in both.output, (how, both.output)
            scalar = over(how, db, "schedule", "update", f"c-{how}", "--args-json", '"eu"')
            assert scalar.exit_code == 2 and "expected a JSON array" in scalar.output, (how, scalar.output)


@pytest.mark.parametrize("command", ["create", "update"])
def test_a_null_argument_is_stored_alike_over_sql_and_http(db: str, monkeypatch, command: str) -> None:
    with served(db, monkeypatch):
        for how in ("sql", "http"):
            name = f"{command}-{how}"
            given = ["--input-json", "null"] if command == "create" else ["--input-json", '"x"']
            made = over(how, db, "schedule", "create-workflow", "--name", name, "--workflow", "w",
                        "--every", "1h", *given)  # fmt: skip
            assert made.exit_code == 0, (how, made.output)
            if command == "update":
                changed = over(how, db, "schedule", "update", name, "--input-json", "null")
                assert changed.exit_code == 0, (how, changed.output)
            assert _stored(db, name) == [None], how
            cleared = over(how, db, "schedule", "update", name, "--clear", "input")
            assert cleared.exit_code == 0 and _stored(db, name) == [], (how, cleared.output)
    with api_client(db) as api:
        # The API tells no input from an input of null: null is the run's one argument.
        nulled = api.post("/admin/schedules/workflow",
                          json={"name": "n", "workflow_name": "w", "every": "1h", "input": None})  # fmt: skip
        assert nulled.status_code == 201 and nulled.json()["args"] == [None], nulled.text
        bare = api.post("/admin/schedules/workflow", json={"name": "b", "workflow_name": "w", "every": "1h"})
        assert bare.json()["args"] == []
        assert api.patch("/admin/schedules/b", json={"input": None}).json()["args"] == [None]
        assert api.patch("/admin/schedules/b", json={"args": None}).json()["args"] == []
        doc = api.get("/openapi.json").json()
        fields = doc["paths"]["/admin/schedules/workflow"]["post"]["requestBody"]["content"][
            "application/json"
        ]
        props = fields["schema"]["properties"]
        assert "one null argument" in props["input"]["description"] and props["args"]["type"] == "array"
