"""The CLI over HTTP reads a server's ``shard_unavailable`` 503 back as the server's one line and
the shard it names: it made the whole message the shard number, so a call on a down shard said
``shard shard 2 is unavailable; retry (request ...) is unavailable: its database cannot be
reached now; retry once it is back``."""

from __future__ import annotations

from harvest.cli.http import error_from_answer
from harvest.core.errors import ShardUnavailable

SAID = (
    "shard 2 is unavailable; retry (request 98a30fc35aa6dcd7: the server's log has the cause "
    "under outage 98a30fc3)"
)


def test_a_servers_shard_unavailable_is_read_back_as_its_line_naming_the_shard() -> None:
    body = {
        "error": {
            "code": "shard_unavailable",
            "message": SAID,
            "shard_id": 2,
            "request_id": "98a30fc35aa6dcd7",
        }
    }
    error = error_from_answer(503, body, "read")
    assert isinstance(error, ShardUnavailable) and error.shard == 2 and error.retryable, error
    assert str(error) == SAID
    assert error.exit_code == 1
