"""The scanner sweeps lost workers (harvest.expire_lost_workers) only once its own scans of the
shard have answered for its lost_after without a break: after a database outage every worker's
heartbeats stopped with its scans, and the first pass back must not find the whole fleet lost
(worker.py sweeps_lost_workers)."""

from __future__ import annotations

from harvest.worker.worker import sweeps_lost_workers


def test_no_sweep_before_a_scan_answered():
    assert not sweeps_lost_workers(None, 1000.0, 30.0)


def test_no_sweep_until_the_scans_answered_for_lost_after():
    assert not sweeps_lost_workers(100.0, 129.9, 30.0)
    assert sweeps_lost_workers(100.0, 130.0, 30.0)
