"""`GET /workflows/{id}/result` gives an offloaded result's value (docs/payloads.md, "Large
payloads"), read back from the run's database as `harvest workflow result` and the clients do;
it answered the reference (``{"_harvest_ref": ..., "bytes": n}``) instead."""

from __future__ import annotations

from operator_helpers import harvest
from web_helpers import api_client

from harvest import App, Client, workflow
from harvest.core.codecs import Payloads


@workflow
async def long_text(ctx, n: int) -> str:
    return "x" * n


APP = App(workflows=[long_text], codecs=Payloads(offload_bytes=100))


def test_an_offloaded_result_is_read_back(db: str, start_worker) -> None:
    start_worker(APP)
    with Client(db) as client:
        handle = client.start_workflow(long_text, 500)
        assert handle.result(timeout=30) == "x" * 500
    with api_client(db, app=APP) as api:
        answer = api.get(f"/workflows/{handle.execution_id}/result", params={"wait": "5s"})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["state"] == "COMPLETED" and body["output"] == "x" * 500
    cli = harvest(db, "workflow", "result", handle.execution_id)
    assert cli.returncode == 0 and cli.stdout.strip() == '"' + "x" * 500 + '"'
