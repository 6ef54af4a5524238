"""An answer the management API decodes (an update's result) that decompresses past the
zlib bound (sec68) is answered as stored, as an encrypted one is, for a caller whose ZlibCodec
allows it: the API cannot be given another bound, and the answer was a 400 (PayloadError)
though the worker that wrote it reads it."""

from __future__ import annotations

from web_helpers import api_client

from harvest import App, Client, update, workflow
from harvest.core.codecs import MAX_DECODED_BYTES, CodecChain, ZlibCodec, is_envelope

BIG = MAX_DECODED_BYTES + 1024  # compresses to about 64 kB: well within the payload limit
UNBOUNDED = [ZlibCodec(max_decoded_bytes=None)]


@workflow
async def holding(ctx) -> None:
    await ctx.wait_for_signal("done")


@update(workflow="holding")
async def everything(ctx) -> str:
    return "a" * BIG


def test_an_update_result_that_decodes_past_the_bound_is_answered_as_stored(db: str, start_worker) -> None:
    start_worker(App(workflows=[holding], updates=[everything], codecs=UNBOUNDED))
    with Client(db, codecs=UNBOUNDED) as client:
        run = client.start_workflow(holding)
        assert len(run.update("everything", timeout=30)) == BIG  # (a process with no bound reads it)
        with api_client(db) as api:
            answer = api.post(f"/workflows/{run.execution_id}/update", json={"update_name": "everything"})
        run.signal("done")
    assert answer.status_code == 200, answer.text[:500]
    stored = answer.json()["result"]
    assert is_envelope(stored) and stored["_harvest_codec"] == ["zlib"]
    assert len(CodecChain(UNBOUNDED).decode(stored)) == BIG  # the caller decodes it
