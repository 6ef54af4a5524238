"""A dead letter's page over three shards (marker shard, no browser): a dead letter's id is
unique on its shard only, so ``/dead-letters/{shard}/{id}`` reads the shard the address names,
where another shard holds a dead letter of the same id; the list and its run's page link to it
with its shard, and its replay acts there only (docs/dashboard.md, "Dead letters")."""

from __future__ import annotations

import html
import sys
from pathlib import Path

import psycopg
import pytest
from psycopg.types.json import Jsonb

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "browser"))

from dashboard_helpers import TokenScopes
from starlette.testclient import TestClient

from harvest.config import load_config
from harvest.web.ui import dashboard_app

pytestmark = pytest.mark.shard
READ, OPERATE = ({"Authorization": f"Bearer {s}-token"} for s in ("read", "operate"))


def test_a_dead_letter_s_page_reads_the_shard_its_address_names(shards) -> None:
    config = load_config(
        env={
            "HARVEST_SHARDS__READABLE": "0,1,2",
            "HARVEST_SHARDS__WRITABLE": "0,1,2",
            **{f"HARVEST_SHARDS__URLS__{s}": dsn for s, dsn in shards.dsns.items()},
        }
    )
    runs, ids = {}, {}
    for s in (0, 1):
        with psycopg.connect(shards.dsns[s], autocommit=True) as conn:
            started = "SELECT execution_id FROM harvest.start_workflow('billing', '[]', %s)"
            runs[s] = str(conn.execute(started, (f"bill-{s}",)).fetchone()[0])
            (ids[s],) = conn.execute(
                "INSERT INTO harvest.dead_letters (execution_id, workflow_name, seq, activity_name, queue,"
                " attempts, failure, scheduled_at, failed_at) VALUES (%s, 'billing', 1, %s, 'q', 3, %s,"
                " now(), now()) RETURNING id",
                (runs[s], f"charge-on-{s}", Jsonb({"error_type": "E", "message": f"failed on shard {s}"})),
            ).fetchone()
    assert ids[0] == ids[1]  # (one id on each shard)
    id_ = ids[1]
    with TestClient(dashboard_app(config=config, authorizer=TokenScopes(), timeout=5.0)) as client:
        listed = client.get("/dead-letters", headers=READ).text
        assert f'href="/dead-letters/0/{id_}"' in listed and f'href="/dead-letters/1/{id_}"' in listed
        run_page = client.get(f"/workflows/{runs[1]}", headers=READ)
        assert run_page.status_code == 200 and f'href="/dead-letters/1/{id_}"' in run_page.text

        for s in (0, 1):
            page = client.get(f"/dead-letters/{s}/{id_}", headers=READ)
            assert page.status_code == 200, page.text
            text = html.unescape(page.text)
            assert f"charge-on-{s}" in text and f"failed on shard {s}" in text and runs[s] in text
            assert f"charge-on-{1 - s}" not in text
        assert client.get(f"/dead-letters/2/{id_}", headers=READ).status_code == 404  # not on shard 2

        replayed = client.post(f"/dead-letters/1/{id_}/replay", headers=OPERATE, follow_redirects=False)
        assert replayed.status_code == 303
        assert client.get(f"/dead-letters/1/{id_}", headers=READ).status_code == 404
        assert client.get(f"/dead-letters/0/{id_}", headers=READ).status_code == 200  # shard 0's stays
