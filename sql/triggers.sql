-- Triggers, after every table: they keep derived columns and flow-control state
-- in step with the rows they watch. The work is in the functions they call
-- (functions/flow_concurrency.sql and flow_mutex.sql); these wrappers bind them to the
-- tables, except the claim-order columns of a task, written in its trigger.

-- Task rows take their derived columns from their options at insert (decide.sql and the
-- dead-letter replay write options only), in one BEFORE INSERT trigger. An activity whose
-- options name a gate gets its gate columns (_flow_task_columns). Claim order
-- (functions/claim.sql): an activity's priority_aging_secs as given, its fairness_key
-- resolved from the input by its key path (a missing value means no key); the first keyed
-- task of a queue makes it a fair queue, and on a fair queue a task without a key (not a
-- timer) gets '' (the unkeyed group), so the fairness skip-scan finds unkeyed work
-- (workflow tasks) behind a keyed flood. A writer whose rows name no fairness key (decide.sql
-- _queue_activities, _hand_activities and _hand_activities_of_runs; the starts, start.sql; a
-- woken or handed workflow task, core.sql _ensure_workflow_task and claim.sql
-- _hand_workflow_task) answers "is the queue fair" in its own statement,
-- once per row as a probe of its plan, and writes each row's answer: '' on a fair queue, else
-- E'\x01' (no key, the queue not fair), which this trigger turns into none; so it asks no query
-- of its own for such a row. A marker in the row, not a session setting: only Harvest's
-- functions write this column, while any session can set a setting, and a setting read here
-- would let a caller's own session leave its tasks unkeyed on a fair queue (a query from a trigger
-- takes a snapshot and checks its plan each time: about 13 us of a queued activity's
-- backend CPU; docs/performance.md, "Fan-out row, thirteenth cut"). One trigger with the claim order written in it,
-- not two calling out: a call passing the row costs a copy of it each way
-- (docs/performance.md, "Cheaper write statements").
--
-- Then the row's rules that were table CHECKs, for every row, a timer's too: its kind in
-- its closed list (a cast to the domain: SQLSTATE 23514 naming tasks_kind_check), a
-- concurrency limit of at least 1 and an ageing bound above 0, on the values the row is
-- written with. PostgreSQL reads every table CHECK back from its stored text and compiles
-- it on every INSERT or UPDATE statement, as it does a trigger's WHEN clause (this trigger
-- had one, for timers); a task insert is one statement in most paths (docs/performance.md,
-- "Task rows"). The status stays a table CHECK (sql/tasks.sql). No trigger that fires
-- after this one may change these columns.
CREATE FUNCTION harvest._tasks_derived_columns()
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

CREATE TRIGGER tasks_derived_columns
BEFORE INSERT ON harvest.tasks
FOR EACH ROW
EXECUTE FUNCTION harvest._tasks_derived_columns();

-- The rules tasks_derived_columns checks, raising the first one broken in the order the
-- CHECKs ran (by name): tasks_concurrency_limit_check, tasks_kind_check,
-- tasks_priority_aging_secs_check, with the message PostgreSQL gave. A NULL passes, as
-- it passed the CHECKs (kind's NOT NULL refuses it after the BEFORE triggers).
CREATE FUNCTION harvest._task_rules(p_kind text, p_concurrency_limit integer, p_priority_aging_secs double precision)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF NOT p_concurrency_limit >= 1 THEN
        RAISE EXCEPTION 'new row for relation "tasks" violates check constraint "tasks_concurrency_limit_check"'
        USING ERRCODE = 'check_violation', CONSTRAINT = 'tasks_concurrency_limit_check',
              SCHEMA = 'harvest', TABLE = 'tasks',
              HINT = 'a task''s concurrency_limit is at least 1';
    END IF;
    PERFORM p_kind::harvest.task_kind;
    IF NOT p_priority_aging_secs > 0 THEN
        RAISE EXCEPTION 'new row for relation "tasks" violates check constraint "tasks_priority_aging_secs_check"'
        USING ERRCODE = 'check_violation', CONSTRAINT = 'tasks_priority_aging_secs_check',
              SCHEMA = 'harvest', TABLE = 'tasks',
              HINT = 'a task''s priority_aging_secs is above 0';
    END IF;
END;
$$;

-- The same rules on an UPDATE that sets one of their columns, which no function of
-- Harvest's does (a claim sets the status, whose CHECK stays). An AFTER trigger: a BEFORE
-- UPDATE row trigger makes PostgreSQL lock each updated row before the update, whichever
-- columns the statement sets; an AFTER trigger with a column list is skipped by a bitmap
-- test. A refusal fails the statement as the CHECK's did.
CREATE FUNCTION harvest._tasks_checks()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM harvest._task_rules(NEW.kind, NEW.concurrency_limit, NEW.priority_aging_secs);
    RETURN NULL;
END;
$$;

CREATE TRIGGER tasks_checks
AFTER UPDATE OF kind, concurrency_limit, priority_aging_secs ON harvest.tasks
FOR EACH ROW
EXECUTE FUNCTION harvest._tasks_checks();

-- A run's row rules, for every writer: its status and parent close policy in their closed
-- lists, a forwarding pointer (migrated_to_shard) only on a MIGRATING or MIGRATED row with a
-- shard number in range, and search attributes that are a JSON object. They were table
-- CHECKs; PostgreSQL reads every table CHECK back from its stored text and compiles it on
-- every UPDATE statement whichever columns it sets, and a run's row is updated on every
-- event append, which sets none of these columns. This trigger fires on every INSERT and on
-- an UPDATE that sets one of them (docs/performance.md, "SQL path, eighth cut"). A value
-- outside a list fails its domain cast (SQLSTATE 23514, naming the constraint that held the
-- rule); the rules run in the order the CHECKs did (by name), each only after the ones
-- before it passed. A NULL passes here, as it passed the CHECKs: the columns' NOT NULL
-- refuses it (after the BEFORE triggers on an insert, before the AFTER ones on an update;
-- an inserted row that breaks a NOT NULL and a rule here is refused by this rule first).
-- No BEFORE trigger may change these columns.
CREATE FUNCTION harvest._executions_checks()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF ((NEW.migrated_to_shard::harvest.shard_number) IS NULL
        OR (NEW.status::harvest.migrated_status) IS NOT NULL)
       AND (NEW.parent_close_policy::harvest.parent_close_policy) IS NOT NULL
       AND jsonb_typeof(NEW.search_attributes) = 'object'
       AND (NEW.status::harvest.execution_status) IS NOT NULL THEN
        RETURN NEW;
    END IF;
    IF jsonb_typeof(NEW.search_attributes) <> 'object' THEN
        RAISE EXCEPTION 'new row for relation "executions" violates check constraint "executions_search_attributes_object"'
        USING ERRCODE = 'check_violation', CONSTRAINT = 'executions_search_attributes_object',
              SCHEMA = 'harvest', TABLE = 'executions',
              HINT = 'a run''s search_attributes must be a JSON object';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER executions_checks
BEFORE INSERT ON harvest.executions
FOR EACH ROW
EXECUTE FUNCTION harvest._executions_checks();

-- The same rules on an UPDATE that sets one of their columns, as an AFTER trigger (its
-- RETURN is ignored; a refusal fails the statement the same way): any BEFORE UPDATE row
-- trigger makes PostgreSQL fetch and lock each updated row before the update, whichever
-- columns the statement sets, and a run's row is updated on every event append; an AFTER
-- trigger with a column list costs a bitmap test per row (docs/performance.md, "A run's
-- row rules after the update"). It fires before executions_flow_release (by name).
CREATE TRIGGER executions_checks_update
AFTER UPDATE OF status, parent_close_policy, search_attributes, migrated_to_shard
ON harvest.executions
FOR EACH ROW
EXECUTE FUNCTION harvest._executions_checks();

-- A run ending (any path: completion, failure, cancel, terminate, timeout,
-- reset, supersede) gives back its workflow slot and its mutexes in the same
-- transaction. Pausing is not ending: a PAUSED run keeps them. Whether the run holds
-- any is probed here, once, and _flow_release (functions/flow_concurrency.sql) is called
-- only when it does: most runs hold none, and a close then pays one statement, not the
-- call's statement and the probes' (docs/performance.md, "SQL path, ninth cut").
CREATE FUNCTION harvest._executions_flow_release()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM harvest.workflow_slots AS s WHERE s.execution_id = NEW.id)
       OR EXISTS (SELECT 1 FROM harvest.mutex_locks AS l WHERE l.holder_execution_id = NEW.id)
       OR EXISTS (SELECT 1 FROM harvest.mutex_waiters AS w WHERE w.execution_id = NEW.id) THEN
        PERFORM harvest._flow_release(NEW.id);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER executions_flow_release
AFTER UPDATE OF status ON harvest.executions
FOR EACH ROW
WHEN (old.status IN ('RUNNING', 'PAUSED') AND new.status NOT IN ('RUNNING', 'PAUSED'))
EXECUTE FUNCTION harvest._executions_flow_release();

-- No trigger on harvest.events: a mutex marker takes effect in the decision that issues it
-- (_decide_record_marker, functions/decide.sql), so a history copied into another run (a
-- reset's fork, a run moved to another shard) carries its markers as the past (migration 0093).

-- The max_history_bytes quota's ended bytes (sql/flow.sql, harvest.quota_ended_bytes): a quota'd
-- row entering or leaving the ended side (not RUNNING or PAUSED: a close, a shard move's seal or
-- staged copy and its activation), or an ended row whose key or bytes change (the continue-as-new
-- event, appended to the run after its close; a move's staged copy over a seal, a discarded copy
-- restoring the seal), adds a row of the difference. history_bytes is in the column list for the
-- appends after a close: every append tests the WHEN, which for a live run is false at its first
-- terms and calls nothing (no statement, no write); so is a close of a run without a quota key. A
-- row, never an update of a total: no lock, so closes of one key never wait for each other, and
-- a batch closing runs of two keys never deadlocks with one closing them in the other order.
CREATE FUNCTION harvest._executions_quota_bytes()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO harvest.quota_ended_bytes (quota_key, bytes)
    SELECT d.quota_key, sum(d.bytes) FROM (
        SELECT OLD.quota_key, -OLD.history_bytes
        WHERE TG_OP = 'UPDATE' AND OLD.quota_key IS NOT NULL AND OLD.status NOT IN ('RUNNING', 'PAUSED')
        UNION ALL
        SELECT NEW.quota_key, NEW.history_bytes
        WHERE NEW.quota_key IS NOT NULL AND NEW.status NOT IN ('RUNNING', 'PAUSED')
    ) AS d (quota_key, bytes)
    GROUP BY d.quota_key HAVING sum(d.bytes) <> 0;
    RETURN NULL;
END;
$$;

CREATE TRIGGER executions_quota_bytes_insert
AFTER INSERT ON harvest.executions
FOR EACH ROW
WHEN (new.quota_key IS NOT NULL AND new.status NOT IN ('RUNNING', 'PAUSED'))
EXECUTE FUNCTION harvest._executions_quota_bytes();

CREATE TRIGGER executions_quota_bytes_update
AFTER UPDATE OF status, quota_key, history_bytes ON harvest.executions
FOR EACH ROW
WHEN (
    (
        old.quota_key IS NOT NULL AND old.status NOT IN ('RUNNING', 'PAUSED')
        OR new.quota_key IS NOT NULL AND new.status NOT IN ('RUNNING', 'PAUSED')
    )
    AND (old.status, old.quota_key, old.history_bytes)
    IS DISTINCT FROM (new.status, new.quota_key, new.history_bytes)
)
EXECUTE FUNCTION harvest._executions_quota_bytes();

-- A delete of ended quota'd runs (retention, a discarded staged copy, an operator's DELETE)
-- takes their bytes off their keys: one row per key and statement, then the keys' rows folded
-- (_fold_quota_bytes, functions/flow_quotas.sql), so a janitor that deletes a key's history
-- leaves it one row, not a row per close and per batch. Once per DELETE statement, over the
-- deleted rows only.
CREATE FUNCTION harvest._executions_quota_bytes_deleted()
RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_keys text [];
BEGIN
    WITH spent AS (
        INSERT INTO harvest.quota_ended_bytes (quota_key, bytes)
        SELECT g.quota_key, -sum(g.history_bytes) FROM gone AS g
        WHERE g.quota_key IS NOT NULL AND g.status NOT IN ('RUNNING', 'PAUSED')
        GROUP BY g.quota_key HAVING sum(g.history_bytes) <> 0
        RETURNING quota_key
    )
    SELECT array_agg(s.quota_key ORDER BY s.quota_key) INTO v_keys FROM spent AS s;
    IF v_keys IS NOT NULL THEN
        PERFORM harvest._fold_quota_bytes(v_keys);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER executions_quota_bytes_delete
AFTER DELETE ON harvest.executions
REFERENCING OLD TABLE AS gone
FOR EACH STATEMENT
EXECUTE FUNCTION harvest._executions_quota_bytes_deleted();

-- A TRUNCATE of the runs leaves no ended bytes to count.
CREATE FUNCTION harvest._executions_quota_bytes_truncated()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    DELETE FROM harvest.quota_ended_bytes;
    RETURN NULL;
END;
$$;

CREATE TRIGGER executions_quota_bytes_truncate
AFTER TRUNCATE ON harvest.executions
FOR EACH STATEMENT
EXECUTE FUNCTION harvest._executions_quota_bytes_truncated();

-- A dead letter carries its run's quota key (sql/dead_letters.sql), taken from the run as the
-- row is inserted, whichever statement parks it, or as an update names its execution_id or
-- quota_key: the max_dead_letters quota counts dead_letters by it (functions/flow_quotas.sql,
-- quota_usage; migration 0106). A run's key is written at its start and never changed by Harvest.
-- One probe of the run's row by its key, beside the foreign key's check of the same row.
CREATE FUNCTION harvest._dead_letter_quota_key()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    NEW.quota_key := (SELECT e.quota_key FROM harvest.executions AS e WHERE e.id = NEW.execution_id);
    RETURN NEW;
END;
$$;

CREATE TRIGGER dead_letters_quota_key
BEFORE INSERT OR UPDATE OF execution_id, quota_key ON harvest.dead_letters
FOR EACH ROW
EXECUTE FUNCTION harvest._dead_letter_quota_key();
