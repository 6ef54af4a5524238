"""count_versions (`harvest version-usage`) reads a change's markers down events_version_markers.

Its terminal and all counts read every event kept to find a change's markers, and its
--history-before count (the live runs with no marker) scanned every event for them: 6 s and
4.4 s over 20M events (migration 0139, docs/performance.md "Every read face over 2M runs").
The partial index (change id, run) holds the version markers alone. Each case runs the
function with auto_explain listing the plans of the statements inside it, sequential scans
priced out as on a big table (a small one is read whole whatever its indexes), and checks
that each statement reading the markers goes down the index.
"""

from __future__ import annotations

import psycopg
import pytest
from stats_helpers import nested_plans


@pytest.mark.parametrize(
    "call",
    [
        "harvest.count_versions('vc')",
        "harvest.count_versions('vc', NULL, 'terminal')",
        "harvest.count_versions('vc', NULL, 'all')",
        "harvest.count_versions('vc', -1, 'active', NULL, now())",
        "harvest.count_versions('vc', NULL, 'active', 'w', now())",
    ],
    ids=["active", "terminal", "all", "history-before, no marker", "history-before, every version"],
)
def test_count_versions_reads_the_markers_down_their_index(conn: psycopg.Connection, call: str) -> None:
    conn.execute("SET enable_seqscan = off")
    _, plans = nested_plans(conn, f"SELECT * FROM {call}")
    marker_reads = [p for p in plans if "'MarkerRecorded'" in p]
    assert marker_reads, plans
    for plan in marker_reads:
        assert "events_version_markers" in plan, plan
        assert "Seq Scan on events" not in plan, plan
