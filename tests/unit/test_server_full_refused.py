"""A pool's ServerFull (a server up at max_connections) is an outage a retry may pass, never a
refused login: the 503's wording (harvest.web.errors.outage_answer) and a shard's
ShardUnavailable (harvest.shard.pools.unreachable) read ServerUnreachable.refused, which
ServerFull, built past ServerUnreachable's __init__, lacked (an AttributeError: a 500)."""

from __future__ import annotations

from harvest.db.connection import SERVER_FULL_ADVICE
from harvest.db.pools import ServerFull, ServerUnreachable
from harvest.shard.pools import unreachable
from harvest.web.errors import outage_answer, refused_login

FULL = "OperationalError: FATAL:  sorry, too many clients already"


def test_a_full_server_is_no_refused_login() -> None:
    assert refused_login(ServerFull(FULL)) is False
    assert refused_login(ServerFull()) is False


def test_a_full_servers_503_says_retry() -> None:
    code, message, fields = outage_answer(ServerFull(FULL))
    assert code == "database_unavailable" and message.startswith("the database could not be reached; retry")
    assert fields["shard_id"] is None


def test_a_full_shard_is_unavailable_not_refused() -> None:
    shard = unreachable(2, ServerFull(FULL))
    assert shard.shard == 2 and shard.refused is False
    code, message, _ = outage_answer(shard)
    assert code == "shard_unavailable" and message.startswith("shard 2 is unavailable; retry"), message


def test_a_full_shard_says_up_but_full_and_the_remedy() -> None:
    # Before: "shard 2 is unavailable: its database cannot be reached now (... too many clients ...)".
    said = str(unreachable(2, ServerFull(FULL)))
    assert said.startswith("shard 2 is unavailable: the server is up but full"), said
    assert "raise max_connections" in said and "too many clients" in said and "cannot be reached" not in said
    assert SERVER_FULL_ADVICE in said and SERVER_FULL_ADVICE in str(ServerFull(FULL))


def test_a_down_shard_still_cannot_be_reached() -> None:
    said = str(unreachable(3, ServerUnreachable("OperationalError: connection refused")))
    assert said == (
        "shard 3 is unavailable: its database cannot be reached now (OperationalError: connection refused)"
    )
