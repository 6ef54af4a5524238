-- harvest:no-transaction
-- 0139: a change's version markers get a partial index of their own, events_version_markers
-- (change id, run), so harvest.count_versions (`harvest version-usage`, GET
-- /admin/version-usage) reads the few markers of the change asked for: its terminal and all
-- counts read every event kept, and its --history-before count read every event to find the
-- live runs with no marker (6 s and 4.4 s over 20M events, bench/operator_views.py).
-- (Outside a transaction, re-runnable: events keep being written meanwhile. A build that
-- failed half way leaves an invalid index, which the next run drops first.)
DROP INDEX CONCURRENTLY IF EXISTS harvest.events_version_markers;
CREATE INDEX CONCURRENTLY events_version_markers
ON harvest.events ((event_data #>> '{value,change_id}'), execution_id)
WHERE event_type = 'MarkerRecorded' AND event_data ->> 'kind' = 'version';
