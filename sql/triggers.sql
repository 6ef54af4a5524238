-- Triggers, after every table: they keep derived columns and flow-control state
-- in step with the rows they watch. The work is in the functions they call
-- (functions/flow_concurrency.sql, flow_mutex.sql and claim.sql); these wrappers only bind
-- them to the tables.

-- Activity task rows take their gate columns from their options at insert
-- (decide.sql and the dead-letter replay write options only). The WHEN clause
-- keeps the trigger from firing for tasks without a gate.
CREATE FUNCTION harvest._tasks_flow_columns()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN harvest._flow_task_columns(NEW);
END;
$$;

CREATE TRIGGER tasks_flow_columns
BEFORE INSERT ON harvest.tasks
FOR EACH ROW
WHEN (new.kind = 'activity' AND new.options ?| ARRAY['concurrency_key', 'rate_limit'])
EXECUTE FUNCTION harvest._tasks_flow_columns();

-- A run ending (any path: completion, failure, cancel, terminate, timeout,
-- reset, supersede) gives back its workflow slot and its mutexes in the same
-- transaction. Pausing is not ending: a PAUSED run keeps them.
CREATE FUNCTION harvest._executions_flow_release()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM harvest._flow_release(NEW.id);
    RETURN NULL;
END;
$$;

CREATE TRIGGER executions_flow_release
AFTER UPDATE OF status ON harvest.executions
FOR EACH ROW
WHEN (old.status IN ('RUNNING', 'PAUSED') AND new.status NOT IN ('RUNNING', 'PAUSED'))
EXECUTE FUNCTION harvest._executions_flow_release();

-- Mutex markers (record_marker kind mutex_acquire / mutex_release) take effect
-- in the transaction that records them (functions/flow_mutex.sql).
CREATE FUNCTION harvest._events_mutex()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM harvest._mutex_on_marker(NEW);
    RETURN NULL;
END;
$$;

CREATE TRIGGER events_mutex
AFTER INSERT ON harvest.events
FOR EACH ROW
WHEN (new.event_type = 'MarkerRecorded' AND new.event_data ->> 'kind' IN ('mutex_acquire', 'mutex_release'))
EXECUTE FUNCTION harvest._events_mutex();

-- Task rows take priority_aging_secs and fairness_key from their options at
-- insert (decide.sql and the dead-letter replay write options only); on a fair
-- queue an unkeyed task joins the unkeyed group ''.
CREATE FUNCTION harvest._tasks_claim_order_columns()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN harvest._claim_order_columns(NEW);
END;
$$;

CREATE TRIGGER tasks_claim_order_columns
BEFORE INSERT ON harvest.tasks
FOR EACH ROW
WHEN (new.kind <> 'timer')
EXECUTE FUNCTION harvest._tasks_claim_order_columns();
