"""`harvest workflow stack`'s line for an activity's last heartbeat (harvest.cli.workflow.progress_line)."""

from __future__ import annotations

from harvest.cli.workflow import progress_line


def test_redacted_clipped_details_say_their_own_size_not_the_clipped_strings() -> None:
    # What GET /workflows/{id}/stack answers a token without payloads for details over 4096
    # bytes: the clipped string redacted (its own size) beside the details' size.
    activity = {
        "seq": 8,
        "heartbeat_at": "2030-01-02T03:04:06+00:00",
        "heartbeat_details": {"redacted": True, "bytes": 222},
        "heartbeat_details_bytes": 5012,
        "heartbeat_details_clipped": True,
    }
    assert (
        progress_line(activity)
        == "  seq 8 last heartbeat 2030-01-02T03:04:06+00:00: details redacted (5012 bytes)"
    )


def test_redacted_details_from_an_older_server_say_the_redaction_size() -> None:
    activity = {"seq": 1, "heartbeat_at": "t", "heartbeat_details": {"redacted": True, "bytes": 12}}
    assert progress_line(activity) == "  seq 1 last heartbeat t: details redacted (12 bytes)"
