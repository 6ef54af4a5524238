"""The CLI over HTTP reads a server's ``payload_key_missing`` answer back as one line naming the
key (a server of an earlier release decoded a query's or an update's answer without keys): it
named the whole message as the key id, twice over."""

from __future__ import annotations

from harvest.cli.http import error_from_answer
from harvest.cli.payloads import Reveal
from harvest.core.errors import PayloadKeyMissing

SAID = (
    "payload is encrypted with key 'k1', which this process does not hold (it has no encryption "
    "codec): add key 'k1' to its AesGcmCodec(keys=...)"
)


def test_a_servers_missing_key_is_read_back_naming_the_key_and_where_to_read_it() -> None:
    error = error_from_answer(400, {"error": {"code": "payload_key_missing", "message": SAID}}, "operate")
    assert isinstance(error, PayloadKeyMissing) and error.key_id == "k1" and error.exit_code == 1
    assert str(error).count("with key 'k1'") == 1 and "--app module:app" in str(error), str(error)
    # The CLI's --app wording is for its own decoding, not for the server's: the line stays.
    assert Reveal(None).key_missing(error) is error
