-- 0050: cheaper write statements (docs/performance.md, "Cheaper write statements").
-- PostgreSQL reads a trigger's WHEN clause back from its stored text on every INSERT
-- statement into its table. Tasks had two BEFORE INSERT triggers, each with its own WHEN
-- clause and each calling a function with the row; they become one
-- (tasks_derived_columns) with the claim order (was _claim_order_columns) written in it.
-- events_mutex keeps its job, with the event type alone in its WHEN clause and the
-- marker's kind checked in its function. What the triggers do, for any writer, is
-- unchanged.
DROP TRIGGER tasks_flow_columns ON harvest.tasks;
DROP TRIGGER tasks_claim_order_columns ON harvest.tasks;
DROP FUNCTION harvest._tasks_flow_columns();
DROP FUNCTION harvest._tasks_claim_order_columns();
-- (Installed with the functions, after the migrations: absent on a fresh install.)
DROP FUNCTION IF EXISTS harvest._claim_order_columns(harvest.tasks);

CREATE FUNCTION harvest._tasks_derived_columns()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
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
    ELSIF EXISTS (SELECT 1 FROM harvest.fair_queues AS f WHERE f.queue = NEW.queue) THEN
        NEW.fairness_key := '';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER tasks_derived_columns
BEFORE INSERT ON harvest.tasks
FOR EACH ROW
WHEN (new.kind <> 'timer')
EXECUTE FUNCTION harvest._tasks_derived_columns();

CREATE OR REPLACE FUNCTION harvest._events_mutex()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF NEW.event_data ->> 'kind' IN ('mutex_acquire', 'mutex_release') THEN
        PERFORM harvest._mutex_on_marker(NEW);
    END IF;
    RETURN NULL;
END;
$$;

DROP TRIGGER events_mutex ON harvest.events;
CREATE TRIGGER events_mutex
AFTER INSERT ON harvest.events
FOR EACH ROW
WHEN (new.event_type = 'MarkerRecorded')
EXECUTE FUNCTION harvest._events_mutex();
