-- 0093: a mutex marker takes effect in the decision that issues it (_decide_record_marker calls
-- _mutex_marker), no longer through the AFTER INSERT trigger events_mutex on harvest.events.
-- The trigger applied a marker whoever inserted it, so a reset, copying the history up to its
-- point into the fork, re-ran a finished mutex block there: the free key was granted to the fork
-- again, and the MutexAcquired appended after the carried history failed every replay of the
-- fork with a non-determinism error (a moved run's copy on its target shard did the same).
-- Every events INSERT also paid the trigger's WHEN (docs/performance.md). Dropping a trigger
-- scans nothing; it takes harvest.events' ACCESS EXCLUSIVE lock for a moment.
DROP TRIGGER IF EXISTS events_mutex ON harvest.events;
DROP FUNCTION IF EXISTS harvest._events_mutex();
DROP FUNCTION IF EXISTS harvest._mutex_on_marker(harvest.events);
