"""The scanner tells harvest.scan how long its scans of the shard have answered without a break,
and the lost workers whose lost_after is longer are left (harvest.expire_lost_workers): after a
database outage every worker's heartbeats stopped with its scans, and the first passes back
must not find the whole fleet lost, whatever each worker's heartbeat interval
(worker.py scanned_secs)."""

from __future__ import annotations

from harvest.worker.worker import scanned_secs


def test_nothing_answered_yet_is_no_time():
    assert scanned_secs(None, 1000.0) == 0.0


def test_the_time_since_the_scans_answered():
    assert scanned_secs(100.0, 129.5) == 29.5
    assert scanned_secs(100.0, 100.0) == 0.0
