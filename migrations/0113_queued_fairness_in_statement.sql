-- 0113: the task insert trigger asks no fair-queue question per row of a writer that answered it
-- in its own statement (decide.sql _queue_activities, when no queued activity of a decision names a
-- fairness key, writes '' on a fair queue, else the marker E'\x01' the trigger turns into none;
-- sql/triggers.sql, docs/performance.md "Fan-out row, thirteenth cut"). The function as
-- sql/triggers.sql defines it now.
CREATE OR REPLACE FUNCTION harvest._tasks_derived_columns()
RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_answered boolean := false;  -- the writer answered "is the queue fair": no (see above)
BEGIN
    IF NEW.kind <> 'timer' THEN
        IF NEW.fairness_key = E'\x01' THEN  -- (only Harvest's functions write this column)
            NEW.fairness_key := NULL;
            v_answered := true;
        END IF;
        IF NEW.kind = 'activity' AND NEW.options ?| ARRAY['concurrency_key', 'rate_limit'] THEN
            NEW := harvest._flow_task_columns(NEW);
        END IF;
        IF NEW.kind = 'activity' AND NEW.options ?| ARRAY['fairness_key', 'priority_aging_secs'] THEN
            IF NEW.options ->> 'priority_aging_secs' IS NOT NULL THEN
                NEW.priority_aging_secs := (NEW.options ->> 'priority_aging_secs')::double precision;
            END IF;
            IF NEW.options ->> 'fairness_key' IS NOT NULL THEN
                NEW.fairness_key := harvest._resolve_key(NEW.input, NEW.options ->> 'fairness_key');
            END IF;
        END IF;
        IF NEW.fairness_key IS NOT NULL THEN
            IF NOT EXISTS (SELECT 1 FROM harvest.fair_queues AS f WHERE f.queue = NEW.queue) THEN
                INSERT INTO harvest.fair_queues (queue) VALUES (NEW.queue) ON CONFLICT (queue) DO NOTHING;
            END IF;
        ELSIF NOT v_answered THEN
            -- (Nested: a condition with a subquery is a query of its own, whatever its first test.)
            IF EXISTS (SELECT 1 FROM harvest.fair_queues AS f WHERE f.queue = NEW.queue) THEN
                NEW.fairness_key := '';
            END IF;
        END IF;
    END IF;
    IF (NEW.concurrency_limit IS NULL OR NEW.concurrency_limit >= 1)
       AND (NEW.kind::harvest.task_kind) IS NOT NULL
       AND (NEW.priority_aging_secs IS NULL OR NEW.priority_aging_secs > 0) THEN
        RETURN NEW;
    END IF;
    PERFORM harvest._task_rules(NEW.kind, NEW.concurrency_limit, NEW.priority_aging_secs);
    RETURN NEW;
END;
$$;
